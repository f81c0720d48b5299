/*
 * Tests of the cache model without QEMU: LRU order, associativity,
 * inclusion, and coherence between CPUs. runners/tests/test_cycle_model.py
 * compiles and runs this; each test prints "ok NAME", a failure prints what
 * differed and exits 1.
 */
#include "cache_model.h"
#include "x86_class.h"

#include <stdio.h>
#include <stdlib.h>

static const struct kc_latency LAT = {.l2 = 10, .llc = 40, .memory = 200, .transfer = 70, .upgrade = 30};

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "FAIL %s:%d: %s (in %s)\n", __FILE__, __LINE__, #cond, __func__); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* Tiny caches, so a handful of lines fill a set: L1s 2 sets x 2 ways, L2 2
 * sets x 4 ways, LLC 4 sets x 4 ways. Lines 2 * 64 bytes apart share an L1
 * set; 8 * 64 apart share an L1, L2 and LLC set. */
static void small_system(struct kc_system *sys, unsigned ncpus)
{
    struct kc_geometry g = {256, 2, 256, 2, 512, 4, 1024, 4};
    CHECK(kc_system_init(sys, ncpus, &g, &LAT) == 0);
}

#define LINE(n) ((uint64_t)(n) * 64)

static void lru_evicts_the_least_recently_used(void)
{
    struct kc_system sys;
    small_system(&sys, 1);
    CHECK(kc_data_access(&sys, 0, LINE(0), false) == LAT.memory);
    CHECK(kc_data_access(&sys, 0, LINE(2), false) == LAT.memory);
    CHECK(kc_data_access(&sys, 0, LINE(0) + 8, false) == 0); /* same line: a hit, now most recent */
    kc_data_access(&sys, 0, LINE(4), false);                 /* third line in the 2-way set */
    CHECK(kc_cpu_holds(&sys, 0, 1, LINE(0)));
    CHECK(!kc_cpu_holds(&sys, 0, 1, LINE(2))); /* the least recently used left the L1 ... */
    CHECK(kc_cpu_holds(&sys, 0, 2, LINE(2)));  /* ... but not the L2 */
    CHECK(kc_data_access(&sys, 0, LINE(2), false) == LAT.l2);
    CHECK(sys.cpu[0].stats.l1d_misses == 4 && sys.cpu[0].stats.l2_misses == 3);
    kc_system_free(&sys);
    puts("ok lru_evicts_the_least_recently_used");
}

static void a_set_holds_as_many_lines_as_it_has_ways(void)
{
    struct kc_system sys;
    small_system(&sys, 1);
    /* Lines 0, 8, 16, 24 share the L2's (4-way) set 0 and the LLC's set 0. */
    for (int n = 0; n < 4; n++)
        kc_data_access(&sys, 0, LINE(8 * n), false);
    for (int n = 0; n < 4; n++)
        CHECK(kc_cpu_holds(&sys, 0, 2, LINE(8 * n)));
    kc_data_access(&sys, 0, LINE(32), false); /* a fifth: line 0 was used least recently */
    CHECK(!kc_cpu_holds(&sys, 0, 2, LINE(0)));
    CHECK(!kc_cpu_holds(&sys, 0, 1, LINE(0))); /* the L2 is inclusive of the L1 */
    CHECK(!kc_llc_holds(&sys, LINE(0)));       /* and the LLC's set is 4-way too */
    for (int n = 1; n < 5; n++)
        CHECK(kc_cpu_holds(&sys, 0, 2, LINE(8 * n)));
    kc_system_free(&sys);
    puts("ok a_set_holds_as_many_lines_as_it_has_ways");
}

static void a_write_invalidates_other_copies(void)
{
    struct kc_system sys;
    small_system(&sys, 2);
    CHECK(kc_data_access(&sys, 0, LINE(1), false) == LAT.memory); /* cpu 0 alone: exclusive */
    CHECK(kc_data_access(&sys, 1, LINE(1), false) == LAT.transfer); /* taken from cpu 0's copy */
    CHECK(sys.cpu[1].stats.transfers == 1);
    CHECK(kc_cpu_holds(&sys, 0, 1, LINE(1)) && kc_cpu_holds(&sys, 1, 1, LINE(1))); /* both share it */
    CHECK(kc_data_access(&sys, 1, LINE(1), true) == LAT.upgrade); /* writing a shared line */
    CHECK(!kc_cpu_holds(&sys, 0, 1, LINE(1)) && !kc_cpu_holds(&sys, 0, 2, LINE(1)));
    CHECK(sys.cpu[0].stats.invalidations == 1 && sys.cpu[1].stats.upgrades == 1);
    CHECK(kc_data_access(&sys, 1, LINE(1), true) == 0); /* now cpu 1's alone */
    CHECK(kc_data_access(&sys, 0, LINE(1), false) == LAT.transfer); /* the next access pays */
    CHECK(sys.cpu[0].stats.transfers == 1);
    kc_system_free(&sys);
    puts("ok a_write_invalidates_other_copies");
}

static void a_line_bounces_between_two_writers(void)
{
    struct kc_system sys;
    small_system(&sys, 2);
    uint64_t cost = 0;
    for (int n = 0; n < 100; n++)
        cost += kc_data_access(&sys, n % 2, LINE(3), true);
    /* The first write comes from memory, every later one from the other CPU. */
    CHECK(cost == LAT.memory + 99ull * LAT.transfer);
    CHECK(sys.cpu[0].stats.transfers + sys.cpu[1].stats.transfers == 99);
    /* Two lines, one per CPU: nothing bounces. */
    struct kc_system apart;
    small_system(&apart, 2);
    cost = 0;
    for (int n = 0; n < 100; n++)
        cost += kc_data_access(&apart, n % 2, LINE(3 + n % 2), true);
    CHECK(cost == 2ull * LAT.memory);
    kc_system_free(&sys);
    kc_system_free(&apart);
    puts("ok a_line_bounces_between_two_writers");
}

static void an_llc_eviction_takes_the_line_from_every_cpu(void)
{
    struct kc_system sys;
    small_system(&sys, 2);
    kc_data_access(&sys, 1, LINE(0), false);
    /* cpu 0 fills the LLC's set 0 with four other lines: line 0 leaves the LLC ... */
    for (int n = 1; n < 5; n++)
        kc_data_access(&sys, 0, LINE(8 * n), false);
    CHECK(!kc_llc_holds(&sys, LINE(0)));
    CHECK(!kc_cpu_holds(&sys, 1, 1, LINE(0)) && !kc_cpu_holds(&sys, 1, 2, LINE(0))); /* ... and cpu 1 */
    CHECK(sys.cpu[1].stats.invalidations == 1);
    kc_system_free(&sys);
    puts("ok an_llc_eviction_takes_the_line_from_every_cpu");
}

static void fetches_use_the_l1i_and_share_the_l2(void)
{
    struct kc_system sys;
    small_system(&sys, 1);
    CHECK(kc_fetch(&sys, 0, LINE(5)) == LAT.memory);
    CHECK(kc_fetch(&sys, 0, LINE(5) + 60) == 0);
    CHECK(kc_cpu_holds(&sys, 0, 0, LINE(5)) && !kc_cpu_holds(&sys, 0, 1, LINE(5)));
    CHECK(kc_data_access(&sys, 0, LINE(5), false) == LAT.l2); /* the L2 has it */
    CHECK(sys.cpu[0].stats.l1i_misses == 1 && sys.cpu[0].stats.fetches == 2);
    kc_system_free(&sys);
    puts("ok fetches_use_the_l1i_and_share_the_l2");
}

static void bad_geometry_is_refused(void)
{
    struct kc_system sys;
    struct kc_geometry g = {256, 3, 256, 2, 512, 4, 1024, 4}; /* 4 lines do not make 3-way sets */
    CHECK(kc_system_init(&sys, 1, &g, &LAT) == -1);
    kc_system_free(&sys);
    struct kc_geometry ok = {256, 2, 256, 2, 512, 4, 1024, 4};
    CHECK(kc_system_init(&sys, KC_MAX_CPUS + 1, &ok, &LAT) == -1);
    puts("ok bad_geometry_is_refused");
}

static void x86_instructions_are_classified(void)
{
    static const struct {
        uint8_t bytes[8];
        size_t len;
        enum kc_class want;
    } cases[] = {
        {{0x48, 0x83, 0x00, 0x01}, 4, KC_PLAIN},             /* add $1, (%rax) */
        {{0xF0, 0x48, 0x83, 0x00, 0x01}, 5, KC_LOCKED},      /* lock add $1, (%rax) */
        {{0x65, 0xF0, 0x0F, 0xB1, 0x11}, 5, KC_LOCKED},      /* lock cmpxchg behind %gs */
        {{0x48, 0x87, 0x07}, 3, KC_LOCKED},                  /* xchg %rax, (%rdi): locked implicitly */
        {{0x48, 0x87, 0xC7}, 3, KC_PLAIN},                   /* xchg %rax, %rdi */
        {{0xFA}, 1, KC_CLI},
        {{0xFB}, 1, KC_STI},
        {{0x9D}, 1, KC_POPF},
        {{0x0F, 0xAE, 0xF0}, 3, KC_MFENCE},
        {{0x0F, 0xAE, 0xE8}, 3, KC_LFENCE},
        {{0x0F, 0xAE, 0xF8}, 3, KC_SFENCE},
        {{0x0F, 0xAE, 0x38}, 3, KC_PLAIN},                   /* clflush (%rax), not a fence */
        {{0x0F, 0xA2}, 2, KC_CPUID},
        {{0x0F, 0x30}, 2, KC_SERIALISING},                   /* wrmsr */
        {{0x0F, 0x01, 0x38}, 3, KC_SERIALISING},             /* invlpg (%rax) */
        {{0x48, 0xCF}, 2, KC_SERIALISING},                   /* iretq */
        {{0x48, 0xF7, 0xF1}, 3, KC_DIV64},                   /* div %rcx */
        {{0xF7, 0xF9}, 2, KC_DIV32},                         /* idiv %ecx */
        {{0x48, 0xF7, 0xE1}, 3, KC_PLAIN},                   /* mul %rcx */
        {{0xF3, 0x90}, 2, KC_PAUSE},
        {{0x90}, 1, KC_PLAIN},
        {{0xF0}, 1, KC_PLAIN},                               /* truncated: prefixes only */
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        enum kc_class got = kc_x86_class(cases[k].bytes, cases[k].len);
        if (got != cases[k].want) {
            fprintf(stderr, "FAIL case %zu: %s, want %s\n", k, kc_class_name[got], kc_class_name[cases[k].want]);
            exit(1);
        }
    }
    puts("ok x86_instructions_are_classified");
}

int main(void)
{
    lru_evicts_the_least_recently_used();
    a_set_holds_as_many_lines_as_it_has_ways();
    a_write_invalidates_other_copies();
    a_line_bounces_between_two_writers();
    an_llc_eviction_takes_the_line_from_every_cpu();
    fetches_use_the_l1i_and_share_the_l2();
    bad_geometry_is_refused();
    x86_instructions_are_classified();
    return 0;
}
