/* The x86-64 instruction classes of x86_class.h. */
#include "x86_class.h"

#include <stdbool.h>

const char *const kc_class_name[KC_NCLASSES] = {
    "plain", "locked", "cli", "sti", "popf", "mfence", "lfence", "sfence",
    "cpuid", "serialising", "div32", "div64", "pause",
};

static int modrm_mod(uint8_t modrm) { return modrm >> 6; }
static int modrm_reg(uint8_t modrm) { return (modrm >> 3) & 7; }

static enum kc_class two_byte(const uint8_t *b, size_t n)
{
    if (n < 1)
        return KC_PLAIN;
    switch (b[0]) {
    case 0xA2:
        return KC_CPUID;
    case 0x30: /* wrmsr */
    case 0x22: /* mov %reg, %crN */
    case 0x23: /* mov %reg, %drN */
        return KC_SERIALISING;
    case 0x01: /* group 7: invlpg is /7 with a memory operand */
        if (n >= 2 && modrm_mod(b[1]) != 3 && modrm_reg(b[1]) == 7)
            return KC_SERIALISING;
        return KC_PLAIN;
    case 0xAE: /* group 15: the fences are its register forms */
        if (n >= 2 && modrm_mod(b[1]) == 3) {
            switch (modrm_reg(b[1])) {
            case 5:
                return KC_LFENCE;
            case 6:
                return KC_MFENCE;
            case 7:
                return KC_SFENCE;
            }
        }
        return KC_PLAIN;
    }
    return KC_PLAIN;
}

enum kc_class kc_x86_class(const uint8_t *b, size_t n)
{
    size_t i = 0;
    bool lock = false, rep = false, rexw = false;
    for (; i < n; i++) {
        uint8_t p = b[i];
        if (p == 0xF0)
            lock = true;
        else if (p == 0xF3)
            rep = true;
        else if (!(p == 0xF2 || p == 0x26 || p == 0x2E || p == 0x36 || p == 0x3E || p == 0x64 || p == 0x65 ||
                   p == 0x66 || p == 0x67))
            break;
    }
    if (i < n && (b[i] & 0xF0) == 0x40) { /* REX, last before the opcode */
        rexw = b[i] & 8;
        i++;
    }
    if (i >= n)
        return KC_PLAIN;
    if (lock)
        return KC_LOCKED;
    uint8_t op = b[i];
    bool has_modrm = i + 1 < n;
    switch (op) {
    case 0xFA:
        return KC_CLI;
    case 0xFB:
        return KC_STI;
    case 0x9D:
        return KC_POPF;
    case 0xCF:
        return KC_SERIALISING;
    case 0x90:
        return rep ? KC_PAUSE : KC_PLAIN;
    case 0x86:
    case 0x87:
        return has_modrm && modrm_mod(b[i + 1]) != 3 ? KC_LOCKED : KC_PLAIN;
    case 0xF6:
    case 0xF7:
        if (has_modrm && modrm_reg(b[i + 1]) >= 6)
            return op == 0xF7 && rexw ? KC_DIV64 : KC_DIV32;
        return KC_PLAIN;
    case 0x0F:
        return two_byte(b + i + 1, n - i - 1);
    }
    return KC_PLAIN;
}
