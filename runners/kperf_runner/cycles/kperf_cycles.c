/*
 * kperf_cycles: a QEMU TCG plugin that charges each guest instruction what a
 * named x86-64 core would (docs/cycle-clock.md): a cost per instruction
 * class (x86_class.c), and the stalls of a cache and coherence model
 * (cache_model.c) fed with every instruction fetch and every data access.
 *
 *   qemu-system-x86_64 -icount shift=0,sleep=off ... -plugin kperf_cycles.so,out=/path/cycles.json
 *
 * At exit it writes, per vCPU and in total, instructions, modelled cycles,
 * instructions per class and misses per level, as JSON, to `out` (or to
 * QEMU's log, stderr by default, without it).
 *
 * The plugin keeps one shared model and, in system emulation, takes no
 * lock: under -icount QEMU runs every vCPU on one host thread, in a fixed
 * order, which is also what makes the counts repeat. With several vCPUs on
 * multi-threaded TCG (no -icount) the counts would be neither repeatable
 * nor exact. In user mode (qemu-x86_64) every guest thread runs on its own
 * host thread, so the model is locked there; counts of a multi-threaded
 * program then follow the host's interleaving.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_model.h"
#include "qemu_plugin_api.h"
#include "x86_class.h"

KPERF_PLUGIN_EXPORT int qemu_plugin_version = 3;

#define MODEL_NAME "golden-cove-v1"

/* The core modelled and where each figure comes from: docs/cycle-clock.md. */
static const uint32_t class_cost[KC_NCLASSES] = {
    [KC_PLAIN] = 1,    [KC_LOCKED] = 19, [KC_CLI] = 3,    [KC_STI] = 3,   [KC_POPF] = 20,
    [KC_MFENCE] = 33,  [KC_LFENCE] = 4,  [KC_SFENCE] = 6, [KC_CPUID] = 150, [KC_SERIALISING] = 100,
    [KC_DIV32] = 14,   [KC_DIV64] = 18,  [KC_PAUSE] = 140,
};
static const struct kc_geometry geometry = {
    .l1i_bytes = 32 << 10, .l1i_ways = 8,   .l1d_bytes = 48 << 10,  .l1d_ways = 12,
    .l2_bytes = 1280 << 10, .l2_ways = 10,  .llc_bytes = 30 << 20,  .llc_ways = 12,
};
/* Load-to-use: L1d 5, L2 15, LLC 65, memory 350; charged beyond the L1's 5. */
static const struct kc_latency latency = {.l2 = 10, .llc = 60, .memory = 345, .transfer = 100, .upgrade = 60};

/* What inline operations count, per vCPU, without a call into the plugin. */
struct vcpu_counts {
    uint64_t insns;
    uint64_t base_cycles;
    uint64_t classes[KC_NCLASSES];
};

static struct qemu_plugin_scoreboard *counts;
static struct kc_system model;
static unsigned model_cpus;
static unsigned seen_cpus; /* user mode: vCPUs are threads, known only as they run */
static uint64_t io_accesses;
static const char *out_path;
static bool lock_model; /* user mode: guest threads call in concurrently */
static pthread_mutex_t model_lock = PTHREAD_MUTEX_INITIALIZER;

static void enter(void)
{
    if (lock_model)
        pthread_mutex_lock(&model_lock);
}

static void leave(void)
{
    if (lock_model)
        pthread_mutex_unlock(&model_lock);
}

static qemu_plugin_u64 field(size_t offset) { return (qemu_plugin_u64){.score = counts, .offset = offset}; }

static unsigned model_cpu(unsigned vcpu)
{
    if (vcpu >= seen_cpus)
        seen_cpus = vcpu + 1;
    return vcpu % model_cpus;
}

/* Instruction fetch: a translation block's lines, each once per execution.
 * userdata packs the first line (50 bits, enough to keep kernel and user
 * addresses apart) and the number of lines (6 bits). */
static void tb_exec(unsigned int vcpu, void *userdata)
{
    uintptr_t packed = (uintptr_t)userdata;
    uint64_t line = packed >> 6;
    enter();
    unsigned cpu = model_cpu(vcpu);
    for (unsigned n = 0; n < (packed & 63); n++)
        /* Bit 62 keeps instruction lines (virtual) apart from data lines (physical). */
        kc_fetch(&model, cpu, ((line + n) << KC_LINE_SHIFT) | (1ull << 62));
    leave();
}

static void mem_access(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *userdata)
{
    (void)userdata;
    uint64_t addr = vaddr;
    struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
    if (hw) {
        if (qemu_plugin_hwaddr_is_io(hw)) {
            io_accesses++;
            return;
        }
        addr = qemu_plugin_hwaddr_phys_addr(hw);
    }
    bool write = qemu_plugin_mem_is_store(info);
    uint64_t last = addr + (1ull << qemu_plugin_mem_size_shift(info)) - 1;
    enter();
    unsigned cpu = model_cpu(vcpu);
    kc_data_access(&model, cpu, addr, write);
    if ((last >> KC_LINE_SHIFT) != (addr >> KC_LINE_SHIFT))
        kc_data_access(&model, cpu, last, write);
    leave();
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (n == 0)
        return;
    uint64_t first = 0, end = 0;
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint8_t bytes[16];
        size_t len = qemu_plugin_insn_data(insn, bytes, sizeof(bytes));
        enum kc_class class = kc_x86_class(bytes, len);
        uint64_t vaddr = qemu_plugin_insn_vaddr(insn);
        if (i == 0)
            first = vaddr;
        end = vaddr + qemu_plugin_insn_size(insn);
        qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn, QEMU_PLUGIN_INLINE_ADD_U64,
                                                            field(offsetof(struct vcpu_counts, insns)), 1);
        qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
            insn, QEMU_PLUGIN_INLINE_ADD_U64, field(offsetof(struct vcpu_counts, base_cycles)), class_cost[class]);
        if (class != KC_PLAIN)
            qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
                insn, QEMU_PLUGIN_INLINE_ADD_U64,
                field(offsetof(struct vcpu_counts, classes) + sizeof(uint64_t) * class), 1);
        qemu_plugin_register_vcpu_mem_cb(insn, mem_access, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW, NULL);
    }
    uint64_t first_line = first >> KC_LINE_SHIFT, lines = ((end - 1) >> KC_LINE_SHIFT) - first_line + 1;
    if (lines > 63)
        lines = 63;
    uintptr_t packed = (uintptr_t)(((first_line & ((1ull << 50) - 1)) << 6) | lines);
    qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, QEMU_PLUGIN_CB_NO_REGS, (void *)packed);
}

static uint64_t get(unsigned vcpu, size_t offset) { return qemu_plugin_u64_get(field(offset), vcpu); }

/* One vCPU's figures as a JSON object (vcpu == -1: the sum over all). */
static void write_counts(FILE *out, int vcpu, unsigned ncpus)
{
    uint64_t insns = 0, base = 0, classes[KC_NCLASSES] = {0};
    struct kc_cpu_stats s = {0};
    for (unsigned v = 0; v < ncpus; v++) {
        if (vcpu >= 0 && (unsigned)vcpu != v)
            continue;
        insns += get(v, offsetof(struct vcpu_counts, insns));
        base += get(v, offsetof(struct vcpu_counts, base_cycles));
        for (int c = 1; c < KC_NCLASSES; c++)
            classes[c] += get(v, offsetof(struct vcpu_counts, classes) + sizeof(uint64_t) * c);
        if (v < model_cpus) {
            const struct kc_cpu_stats *m = &model.cpu[v].stats;
            s.data_accesses += m->data_accesses, s.data_writes += m->data_writes, s.fetches += m->fetches;
            s.l1i_misses += m->l1i_misses, s.l1d_misses += m->l1d_misses, s.l2_misses += m->l2_misses;
            s.llc_misses += m->llc_misses, s.transfers += m->transfers, s.upgrades += m->upgrades;
            s.invalidations += m->invalidations, s.stall_cycles += m->stall_cycles;
        }
    }
    classes[KC_PLAIN] = insns;
    for (int c = 1; c < KC_NCLASSES; c++)
        classes[KC_PLAIN] -= classes[c];
    fprintf(out, "{\"instructions\": %lu, \"cycles\": %lu, \"base_cycles\": %lu, \"stall_cycles\": %lu",
            (unsigned long)insns, (unsigned long)(base + s.stall_cycles), (unsigned long)base,
            (unsigned long)s.stall_cycles);
    fprintf(out, ", \"data_accesses\": %lu, \"data_writes\": %lu, \"fetches\": %lu", (unsigned long)s.data_accesses,
            (unsigned long)s.data_writes, (unsigned long)s.fetches);
    fprintf(out, ", \"l1i_misses\": %lu, \"l1d_misses\": %lu, \"l2_misses\": %lu, \"llc_misses\": %lu",
            (unsigned long)s.l1i_misses, (unsigned long)s.l1d_misses, (unsigned long)s.l2_misses,
            (unsigned long)s.llc_misses);
    fprintf(out, ", \"transfers\": %lu, \"upgrades\": %lu, \"invalidations\": %lu, \"classes\": {",
            (unsigned long)s.transfers, (unsigned long)s.upgrades, (unsigned long)s.invalidations);
    for (int c = 0; c < KC_NCLASSES; c++)
        fprintf(out, "%s\"%s\": %lu", c ? ", " : "", kc_class_name[c], (unsigned long)classes[c]);
    fputs("}}", out);
}

static void write_report(FILE *out, unsigned ncpus)
{
    fprintf(out, "{\"model\": \"%s\", \"vcpus\": %u, \"io_accesses\": %lu,\n \"total\": ", MODEL_NAME, ncpus,
            (unsigned long)io_accesses);
    write_counts(out, -1, ncpus);
    fputs(",\n \"per_vcpu\": [", out);
    for (unsigned v = 0; v < ncpus; v++) {
        fputs(v ? ",\n  " : "\n  ", out);
        write_counts(out, (int)v, ncpus);
    }
    fputs("]}\n", out);
}

static void at_exit(qemu_plugin_id_t id, void *userdata)
{
    (void)id, (void)userdata;
    /* QEMU knows only the scoreboard entries of vCPUs that ran. */
    unsigned ncpus = seen_cpus;
    if (out_path) {
        FILE *out = fopen(out_path, "w");
        if (out) {
            write_report(out, ncpus);
            if (fclose(out) == 0)
                return;
        }
        fprintf(stderr, "kperf_cycles: cannot write %s: %s\n", out_path, strerror(errno));
    }
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);
    if (mem) {
        write_report(mem, ncpus);
        fclose(mem);
        qemu_plugin_outs(text);
        free(text);
    }
}

KPERF_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    if (strcmp(info->target_name, "x86_64") != 0) {
        fprintf(stderr, "kperf_cycles: models an x86-64 core; this QEMU emulates %s\n", info->target_name);
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "out=", 4) == 0 && argv[i][4]) {
            out_path = argv[i] + 4;
        } else {
            fprintf(stderr, "kperf_cycles: unknown argument %s; the one it takes is out=PATH\n", argv[i]);
            return -1;
        }
    }
    model_cpus = KC_MAX_CPUS;
    if (info->system_emulation) {
        if (info->system.max_vcpus > KC_MAX_CPUS) {
            fprintf(stderr, "kperf_cycles: at most %d vCPUs, not %d\n", KC_MAX_CPUS, info->system.max_vcpus);
            return -1;
        }
        model_cpus = (unsigned)info->system.max_vcpus;
    } else {
        model_cpus = 8; /* user mode: threads beyond 8 share the first eight's caches */
        lock_model = true;
    }
    if (kc_system_init(&model, model_cpus, &geometry, &latency)) {
        fprintf(stderr, "kperf_cycles: cannot set up the cache model (out of memory?)\n");
        return -1;
    }
    counts = qemu_plugin_scoreboard_new(sizeof(struct vcpu_counts));
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
