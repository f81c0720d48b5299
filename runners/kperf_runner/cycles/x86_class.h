/*
 * Which cost class an x86-64 instruction belongs to, from its bytes alone:
 * the few instructions whose cost on real hardware is far from "one more
 * instruction" (docs/cycle-clock.md, "Instruction classes"). Everything else is
 * plain. The decoder reads only legacy prefixes, REX, and the opcode and
 * ModRM bytes it needs; VEX/EVEX-encoded instructions are plain.
 */
#ifndef KPERF_X86_CLASS_H
#define KPERF_X86_CLASS_H

#include <stddef.h>
#include <stdint.h>

enum kc_class {
    KC_PLAIN,
    KC_LOCKED,    /* lock prefix, or xchg with a memory operand (locked implicitly) */
    KC_CLI,
    KC_STI,
    KC_POPF,
    KC_MFENCE,
    KC_LFENCE,
    KC_SFENCE,
    KC_CPUID,
    KC_SERIALISING, /* iret, wrmsr, mov to a control or debug register, invlpg */
    KC_DIV32,       /* div/idiv of 8, 16 or 32 bits */
    KC_DIV64,
    KC_PAUSE,
    KC_NCLASSES
};

extern const char *const kc_class_name[KC_NCLASSES];

enum kc_class kc_x86_class(const uint8_t *bytes, size_t len);

#endif
