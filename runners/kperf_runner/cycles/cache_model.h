/*
 * kperf's cache and coherence model: private L1i, L1d and L2 per CPU and a
 * shared, inclusive last-level cache whose directory knows which CPUs hold
 * each line. It knows nothing of QEMU, so cache_model_test.c drives it
 * directly and the QEMU plugin (kperf_cycles.c) only feeds it addresses.
 *
 * Every cache is set-associative with true LRU replacement: each set keeps
 * its ways ordered most recently used first. Lines are 64 bytes. The model
 * is deterministic: the same sequence of accesses gives the same counts.
 */
#ifndef KPERF_CACHE_MODEL_H
#define KPERF_CACHE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#define KC_LINE_SHIFT 6
#define KC_MAX_CPUS 64

/* One way of one set. tag is the line number + 1, so 0 means empty. In a
 * private cache `exclusive` says this CPU may write the line without asking
 * anyone (MESI's E or M); in the LLC `sharers` is the directory: a bit per
 * CPU whose private caches may hold the line, and `owner` the CPU that holds
 * it exclusively, or -1. */
struct kc_way {
    uint64_t tag;
    uint64_t sharers;
    int32_t owner;
    int32_t exclusive;
};

struct kc_cache {
    uint32_t sets;
    uint32_t ways;
    struct kc_way *way; /* sets * ways, set-major, MRU first within a set */
};

/* What one level costs beyond an L1 hit, in cycles. */
struct kc_latency {
    uint32_t l2;       /* an L1 miss that hits the CPU's own L2 */
    uint32_t llc;      /* an L2 miss that hits the shared LLC */
    uint32_t memory;   /* an LLC miss */
    uint32_t transfer; /* a line another CPU holds exclusively (cross-core snoop) */
    uint32_t upgrade;  /* a write to a line other CPUs share: invalidate them first */
};

struct kc_geometry {
    uint32_t l1i_bytes, l1i_ways;
    uint32_t l1d_bytes, l1d_ways;
    uint32_t l2_bytes, l2_ways;
    uint32_t llc_bytes, llc_ways;
};

struct kc_cpu_stats {
    uint64_t data_accesses, data_writes, fetches;
    uint64_t l1i_misses, l1d_misses, l2_misses, llc_misses;
    uint64_t transfers;     /* lines this CPU got from another CPU's exclusive copy */
    uint64_t upgrades;      /* writes that had to invalidate other CPUs' shared copies */
    uint64_t invalidations; /* copies of this CPU's that others' writes (or LLC evictions) removed */
    uint64_t stall_cycles;  /* everything the levels above charged */
};

struct kc_cpu {
    struct kc_cache l1i, l1d, l2;
    struct kc_cpu_stats stats;
};

struct kc_system {
    unsigned ncpus;
    struct kc_latency latency;
    struct kc_cache llc;
    struct kc_cpu cpu[KC_MAX_CPUS];
};

/* 0 on success; -1 when a size is not a whole number of sets of 64-byte
 * lines, or ncpus is 0 or above KC_MAX_CPUS. */
int kc_system_init(struct kc_system *sys, unsigned ncpus, const struct kc_geometry *geometry,
                   const struct kc_latency *latency);
void kc_system_free(struct kc_system *sys);

/* A load (write false) or store (write true) of the byte at addr by cpu;
 * returns the cycles charged beyond an L1 hit. Accesses are by line: a
 * caller splits an access that crosses a line into two. */
uint32_t kc_data_access(struct kc_system *sys, unsigned cpu, uint64_t addr, bool write);
/* An instruction fetch of the line holding addr: through the CPU's L1i,
 * then its L2 and the LLC as a read. */
uint32_t kc_fetch(struct kc_system *sys, unsigned cpu, uint64_t addr);

/* For tests: does cpu's cache at this level (1 = L1d, 2 = L2) hold addr's
 * line, and does the LLC? Neither changes LRU order. */
bool kc_cpu_holds(const struct kc_system *sys, unsigned cpu, int level, uint64_t addr);
bool kc_llc_holds(const struct kc_system *sys, uint64_t addr);

#endif
