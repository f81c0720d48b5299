/*
 * Drives kperf_cycles.c without QEMU: this file stands in for the few
 * plugin API functions it calls (qemu_plugin_api.h), translates one block
 * of five x86 instructions, runs it three times on each of two vCPUs in
 * turn, and lets the plugin write its report (argv[1]).
 * runners/tests/test_cycle_model.py checks the report's every figure.
 *
 * The block: lock add $1,(%rax); cli; mov %rax,(%rdi); mfence; div %rcx.
 * Both vCPUs' `lock add` write one line (X), each `mov` writes a line of
 * its own (Y0, Y1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qemu_plugin_api.h"

KPERF_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv);

struct qemu_plugin_scoreboard {
    size_t size;
    unsigned char entry[2][512];
};

struct inline_op {
    qemu_plugin_u64 entry;
    uint64_t imm;
};

struct qemu_plugin_insn {
    uint8_t bytes[16];
    size_t len;
    uint64_t vaddr;
    struct inline_op ops[4];
    int nops;
    qemu_plugin_vcpu_mem_cb_t mem;
};

struct qemu_plugin_tb {
    struct qemu_plugin_insn insn[5];
    qemu_plugin_vcpu_udata_cb_t exec;
    void *userdata;
};

struct qemu_plugin_hwaddr {
    uint64_t phys;
};

static qemu_plugin_vcpu_tb_trans_cb_t translate;
static qemu_plugin_udata_cb_t at_exit;
static void *at_exit_data;
static struct qemu_plugin_hwaddr hwaddr;

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb)
{
    (void)id, translate = cb;
}
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata)
{
    (void)id, at_exit = cb, at_exit_data = userdata;
}
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata)
{
    (void)flags, tb->exec = cb, tb->userdata = userdata;
}
void qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(struct qemu_plugin_insn *insn, enum qemu_plugin_op op,
                                                         qemu_plugin_u64 entry, uint64_t imm)
{
    if (op != QEMU_PLUGIN_INLINE_ADD_U64 || insn->nops == 4)
        abort();
    insn->ops[insn->nops++] = (struct inline_op){entry, imm};
}
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_mem_cb_t cb,
                                      enum qemu_plugin_cb_flags flags, enum qemu_plugin_mem_rw rw, void *userdata)
{
    (void)flags, (void)rw, (void)userdata, insn->mem = cb;
}
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb) { return sizeof(tb->insn) / sizeof(tb->insn[0]); }
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx)
{
    return (struct qemu_plugin_insn *)&tb->insn[idx];
}
size_t qemu_plugin_insn_data(const struct qemu_plugin_insn *insn, void *dest, size_t len)
{
    len = len < insn->len ? len : insn->len;
    memcpy(dest, insn->bytes, len);
    return len;
}
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn) { return insn->len; }
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn) { return insn->vaddr; }
/* meminfo here: bit 4 a store, bits 0-3 the size shift. */
unsigned int qemu_plugin_mem_size_shift(qemu_plugin_meminfo_t info) { return info & 15; }
bool qemu_plugin_mem_is_store(qemu_plugin_meminfo_t info) { return info >> 4 & 1; }
struct qemu_plugin_hwaddr *qemu_plugin_get_hwaddr(qemu_plugin_meminfo_t info, uint64_t vaddr)
{
    (void)info, hwaddr.phys = vaddr;
    return &hwaddr;
}
bool qemu_plugin_hwaddr_is_io(const struct qemu_plugin_hwaddr *haddr) { return (void)haddr, false; }
uint64_t qemu_plugin_hwaddr_phys_addr(const struct qemu_plugin_hwaddr *haddr) { return haddr->phys; }
struct qemu_plugin_scoreboard *qemu_plugin_scoreboard_new(size_t element_size)
{
    struct qemu_plugin_scoreboard *score = calloc(1, sizeof(*score));
    if (!score || element_size > sizeof(score->entry[0]))
        abort();
    score->size = element_size;
    return score;
}
uint64_t qemu_plugin_u64_get(qemu_plugin_u64 entry, unsigned int vcpu_index)
{
    uint64_t value;
    memcpy(&value, entry.score->entry[vcpu_index] + entry.offset, sizeof(value));
    return value;
}
void qemu_plugin_outs(const char *string) { fputs(string, stdout); }

#define X 0x100000ull
#define Y(vcpu) (0x200000ull + 0x1000ull * (vcpu))

static void execute(struct qemu_plugin_tb *tb, unsigned vcpu)
{
    /* The address and meminfo of each instruction's one access, or none. */
    uint64_t addr[5] = {X, 0, Y(vcpu), 0, 0};
    qemu_plugin_meminfo_t info[5] = {0x13, 0, 0x13, 0, 0};
    tb->exec(vcpu, tb->userdata);
    for (int i = 0; i < 5; i++) {
        struct qemu_plugin_insn *insn = &tb->insn[i];
        for (int k = 0; k < insn->nops; k++) {
            struct inline_op *op = &insn->ops[k];
            uint64_t value = qemu_plugin_u64_get(op->entry, vcpu) + op->imm;
            memcpy(op->entry.score->entry[vcpu] + op->entry.offset, &value, sizeof(value));
        }
        if (addr[i])
            insn->mem(vcpu, info[i], addr[i], NULL);
    }
}

int main(int argc, char **argv)
{
    static const struct {
        uint8_t bytes[6];
        size_t len;
    } code[5] = {
        {{0xF0, 0x48, 0x83, 0x00, 0x01}, 5}, {{0xFA}, 1}, {{0x48, 0x89, 0x07}, 3}, {{0x0F, 0xAE, 0xF0}, 3},
        {{0x48, 0xF7, 0xF1}, 3},
    };
    if (argc != 2) {
        fprintf(stderr, "usage: plugin_harness REPORT\n");
        return 2;
    }
    char out[4096];
    snprintf(out, sizeof(out), "out=%s", argv[1]);
    char *args[] = {out};
    qemu_info_t info = {.target_name = "x86_64", .version = {2, 4}, .system_emulation = true};
    info.system.smp_vcpus = info.system.max_vcpus = 2;
    if (qemu_plugin_install(1, &info, 1, args))
        return 1;
    static struct qemu_plugin_tb tb;
    uint64_t vaddr = 0xffffffff81000000ull;
    for (int i = 0; i < 5; i++) {
        memcpy(tb.insn[i].bytes, code[i].bytes, code[i].len);
        tb.insn[i].len = code[i].len;
        tb.insn[i].vaddr = vaddr;
        vaddr += code[i].len;
    }
    translate(1, &tb);
    for (int round = 0; round < 3; round++) {
        execute(&tb, 0);
        execute(&tb, 1);
    }
    at_exit(1, at_exit_data);
    return 0;
}
