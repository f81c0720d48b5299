/* kperf's cache and coherence model; see cache_model.h for what it models. */
#include "cache_model.h"

#include <stdlib.h>
#include <string.h>

static int cache_init(struct kc_cache *cache, uint32_t bytes, uint32_t ways)
{
    uint32_t lines = bytes >> KC_LINE_SHIFT;
    if (ways == 0 || lines == 0 || (bytes & ((1u << KC_LINE_SHIFT) - 1)) || lines % ways)
        return -1;
    cache->ways = ways;
    cache->sets = lines / ways;
    cache->way = calloc((size_t)lines, sizeof(*cache->way));
    return cache->way ? 0 : -1;
}

/* The first way of the set a line maps to. Sets need not be a power of two
 * (a 30 MiB 12-way LLC has 40960), so the index is a remainder. */
static struct kc_way *set_of(const struct kc_cache *cache, uint64_t line)
{
    return cache->way + (size_t)(line % cache->sets) * cache->ways;
}

static int find(const struct kc_cache *cache, uint64_t line)
{
    const struct kc_way *set = set_of(cache, line);
    for (uint32_t i = 0; i < cache->ways; i++)
        if (set[i].tag == line + 1)
            return (int)i;
    return -1;
}

/* Make way i of line's set the most recently used; returns it. */
static struct kc_way *touch(struct kc_cache *cache, uint64_t line, int i)
{
    struct kc_way *set = set_of(cache, line);
    if (i > 0) {
        struct kc_way hit = set[i];
        memmove(set + 1, set, (size_t)i * sizeof(*set));
        set[0] = hit;
    }
    return set;
}

/* Put line in as the most recently used way; the least recently used one
 * falls out into *victim (tag 0 if that way was empty). */
static struct kc_way *insert(struct kc_cache *cache, uint64_t line, struct kc_way *victim)
{
    struct kc_way *set = set_of(cache, line);
    *victim = set[cache->ways - 1];
    memmove(set + 1, set, (size_t)(cache->ways - 1) * sizeof(*set));
    memset(set, 0, sizeof(*set));
    set[0].tag = line + 1;
    set[0].owner = -1;
    return set;
}

static bool remove_line(struct kc_cache *cache, uint64_t line)
{
    int i = find(cache, line);
    if (i < 0)
        return false;
    struct kc_way *set = set_of(cache, line);
    memmove(set + i, set + i + 1, (size_t)(cache->ways - 1 - (uint32_t)i) * sizeof(*set));
    memset(set + cache->ways - 1, 0, sizeof(*set));
    return true;
}

static void set_exclusive(struct kc_cache *cache, uint64_t line, int exclusive)
{
    int i = find(cache, line);
    if (i >= 0)
        set_of(cache, line)[i].exclusive = exclusive;
}

int kc_system_init(struct kc_system *sys, unsigned ncpus, const struct kc_geometry *g,
                   const struct kc_latency *latency)
{
    memset(sys, 0, sizeof(*sys));
    if (ncpus == 0 || ncpus > KC_MAX_CPUS)
        return -1;
    sys->ncpus = ncpus;
    sys->latency = *latency;
    if (cache_init(&sys->llc, g->llc_bytes, g->llc_ways))
        return -1;
    for (unsigned c = 0; c < ncpus; c++) {
        struct kc_cpu *cpu = &sys->cpu[c];
        if (cache_init(&cpu->l1i, g->l1i_bytes, g->l1i_ways) || cache_init(&cpu->l1d, g->l1d_bytes, g->l1d_ways) ||
            cache_init(&cpu->l2, g->l2_bytes, g->l2_ways))
            return -1;
    }
    return 0;
}

void kc_system_free(struct kc_system *sys)
{
    free(sys->llc.way);
    for (unsigned c = 0; c < KC_MAX_CPUS; c++) {
        free(sys->cpu[c].l1i.way);
        free(sys->cpu[c].l1d.way);
        free(sys->cpu[c].l2.way);
    }
    memset(sys, 0, sizeof(*sys));
}

/* Another CPU's write (or the LLC's eviction) takes the line from cpu. */
static void invalidate(struct kc_system *sys, unsigned cpu, uint64_t line)
{
    struct kc_cpu *p = &sys->cpu[cpu];
    bool held = remove_line(&p->l1d, line);
    held |= remove_line(&p->l1i, line);
    held |= remove_line(&p->l2, line);
    if (held)
        p->stats.invalidations++;
}

static void invalidate_others(struct kc_system *sys, unsigned cpu, uint64_t line, uint64_t sharers)
{
    for (unsigned b = 0; b < sys->ncpus; b++)
        if (b != cpu && (sharers >> b & 1))
            invalidate(sys, b, line);
}

/* A write to a line cpu holds shared: every other copy goes first. */
static uint32_t upgrade(struct kc_system *sys, unsigned cpu, uint64_t line)
{
    struct kc_cpu *p = &sys->cpu[cpu];
    int i = find(&sys->llc, line);
    if (i >= 0) {
        struct kc_way *e = set_of(&sys->llc, line) + i;
        invalidate_others(sys, cpu, line, e->sharers);
        e->sharers = 1ull << cpu;
        e->owner = (int32_t)cpu;
    }
    set_exclusive(&p->l1d, line, 1);
    set_exclusive(&p->l2, line, 1);
    p->stats.upgrades++;
    return sys->latency.upgrade;
}

/* An L2 miss: the line comes from the LLC, another CPU or memory. Sets
 * *exclusive to whether cpu now holds it alone. */
static uint32_t from_llc(struct kc_system *sys, unsigned cpu, uint64_t line, bool write, int *exclusive)
{
    struct kc_cpu *p = &sys->cpu[cpu];
    uint64_t me = 1ull << cpu;
    int i = find(&sys->llc, line);
    if (i < 0) {
        struct kc_way victim;
        p->stats.llc_misses++;
        struct kc_way *e = insert(&sys->llc, line, &victim);
        e->sharers = me;
        e->owner = (int32_t)cpu;
        /* Inclusive: a line leaving the LLC leaves every private cache. */
        if (victim.tag)
            invalidate_others(sys, KC_MAX_CPUS, victim.tag - 1, victim.sharers);
        *exclusive = 1;
        return sys->latency.memory;
    }
    struct kc_way *e = touch(&sys->llc, line, i);
    uint32_t cost = sys->latency.llc;
    if (e->owner >= 0 && (unsigned)e->owner != cpu) {
        cost = sys->latency.transfer;
        p->stats.transfers++;
        if (!write) {
            set_exclusive(&sys->cpu[e->owner].l1d, line, 0);
            set_exclusive(&sys->cpu[e->owner].l2, line, 0);
            e->owner = -1;
        }
    }
    if (write) {
        invalidate_others(sys, cpu, line, e->sharers);
        e->sharers = me;
        e->owner = (int32_t)cpu;
    } else {
        e->sharers |= me;
        if (e->sharers == me)
            e->owner = (int32_t)cpu;
    }
    *exclusive = e->owner == (int32_t)cpu;
    return cost;
}

/* Put line into cpu's L2; the L2's victim leaves its L1s too (the L2 is
 * inclusive of them) and the directory forgets cpu held it. */
static void fill_l2(struct kc_system *sys, unsigned cpu, uint64_t line, int exclusive)
{
    struct kc_cpu *p = &sys->cpu[cpu];
    struct kc_way victim;
    insert(&p->l2, line, &victim)->exclusive = exclusive;
    if (!victim.tag)
        return;
    uint64_t gone = victim.tag - 1;
    remove_line(&p->l1d, gone);
    remove_line(&p->l1i, gone);
    int i = find(&sys->llc, gone);
    if (i >= 0) {
        struct kc_way *e = set_of(&sys->llc, gone) + i;
        e->sharers &= ~(1ull << cpu);
        if (e->owner == (int32_t)cpu)
            e->owner = -1;
    }
}

/* The L1 missed: the line comes from cpu's L2 or beyond. */
static uint32_t from_l2(struct kc_system *sys, unsigned cpu, uint64_t line, bool write, int *exclusive)
{
    struct kc_cpu *p = &sys->cpu[cpu];
    int i = find(&p->l2, line);
    if (i >= 0) {
        struct kc_way *w = touch(&p->l2, line, i);
        uint32_t cost = sys->latency.l2;
        *exclusive = w->exclusive;
        if (write && !*exclusive) {
            cost += upgrade(sys, cpu, line);
            *exclusive = 1;
        }
        return cost;
    }
    p->stats.l2_misses++;
    uint32_t cost = from_llc(sys, cpu, line, write, exclusive);
    fill_l2(sys, cpu, line, *exclusive);
    return cost;
}

uint32_t kc_data_access(struct kc_system *sys, unsigned cpu, uint64_t addr, bool write)
{
    struct kc_cpu *p = &sys->cpu[cpu];
    uint64_t line = addr >> KC_LINE_SHIFT;
    uint32_t cost = 0;
    p->stats.data_accesses++;
    p->stats.data_writes += write;
    int i = find(&p->l1d, line);
    if (i >= 0) {
        struct kc_way *w = touch(&p->l1d, line, i);
        if (write && !w->exclusive)
            cost = upgrade(sys, cpu, line);
    } else {
        int exclusive;
        struct kc_way victim;
        p->stats.l1d_misses++;
        cost = from_l2(sys, cpu, line, write, &exclusive);
        /* The L1's victim stays in the L2, which holds all the L1 does. */
        insert(&p->l1d, line, &victim)->exclusive = exclusive;
    }
    p->stats.stall_cycles += cost;
    return cost;
}

uint32_t kc_fetch(struct kc_system *sys, unsigned cpu, uint64_t addr)
{
    struct kc_cpu *p = &sys->cpu[cpu];
    uint64_t line = addr >> KC_LINE_SHIFT;
    p->stats.fetches++;
    int i = find(&p->l1i, line);
    if (i >= 0) {
        touch(&p->l1i, line, i);
        return 0;
    }
    int exclusive;
    struct kc_way victim;
    p->stats.l1i_misses++;
    uint32_t cost = from_l2(sys, cpu, line, false, &exclusive);
    insert(&p->l1i, line, &victim);
    p->stats.stall_cycles += cost;
    return cost;
}

bool kc_cpu_holds(const struct kc_system *sys, unsigned cpu, int level, uint64_t addr)
{
    const struct kc_cpu *p = &sys->cpu[cpu];
    const struct kc_cache *cache = level == 0 ? &p->l1i : level == 1 ? &p->l1d : &p->l2;
    return find(cache, addr >> KC_LINE_SHIFT) >= 0;
}

bool kc_llc_holds(const struct kc_system *sys, uint64_t addr)
{
    return find(&sys->llc, addr >> KC_LINE_SHIFT) >= 0;
}
