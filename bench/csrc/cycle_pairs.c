/*
 * The user-space pairs bench/cycle_model_silicon.py compares between this
 * host's silicon and the cycle model (docs/cycle-clock.md): one kind of
 * operation, N times.
 *
 *   cycle_pairs KIND PARAM N REPS
 *
 * KIND: plain | locked (an increment of one counter in memory), mfence (a
 * plain increment then mfence), chase (N dependent loads around a random
 * cycle of 64-byte nodes filling PARAM bytes), same | apart (two threads,
 * N plain increments each, of counters on one line | on two lines), copy
 * (N memcpy of PARAM bytes). With REPS > 0 it prints the fewest nanoseconds
 * per operation over REPS timed runs; with REPS 0 it runs once, untimed,
 * for the model to count.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct counters {
    _Alignas(128) volatile uint64_t a;
    _Alignas(128) volatile uint64_t b; /* another line (two: the adjacent-line prefetcher pairs lines) */
};

static struct counters shared_line;
static uint64_t *chase_nodes;
static char *copy_from, *copy_to;
static volatile uint64_t sink;

static void plain(long n, volatile uint64_t *c)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile("incq %0" : "+m"(*c));
}

static void locked(long n, volatile uint64_t *c)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile("lock incq %0" : "+m"(*c));
}

static void fenced(long n, volatile uint64_t *c)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile("incq %0\n\tmfence" : "+m"(*c)::"memory");
}

/* A random cycle through every 64-byte node of `bytes`: each load depends
 * on the one before, so neither the core nor a prefetcher can run ahead. */
static void chase_setup(long bytes)
{
    long nodes = bytes / 64;
    chase_nodes = aligned_alloc(64, (size_t)bytes);
    long *order = malloc(sizeof(long) * (size_t)nodes);
    if (!chase_nodes || !order) {
        perror("cycle_pairs: malloc");
        exit(1);
    }
    for (long i = 0; i < nodes; i++)
        order[i] = i;
    uint64_t x = 0x9E3779B97F4A7C15ull; /* a fixed seed: the same cycle every run */
    for (long i = nodes - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        long j = (long)(x % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (long i = 0; i < nodes; i++)
        chase_nodes[order[i] * 8] = (uint64_t)(order[(i + 1) % nodes] * 8);
    free(order);
}

static void chase(long n)
{
    uint64_t at = 0;
    for (long i = 0; i < n; i++)
        at = chase_nodes[at];
    sink = at;
}

static void copy(long n, long bytes)
{
    for (long i = 0; i < n; i++) {
        memcpy(copy_to, copy_from, (size_t)bytes);
        __asm__ volatile("" ::"r"(copy_to) : "memory");
    }
}

struct writer {
    long n;
    volatile uint64_t *counter;
};

static void *write_counter(void *arg)
{
    struct writer *w = arg;
    plain(w->n, w->counter);
    return NULL;
}

static void two_writers(long n, int same_line)
{
    struct writer first = {n, &shared_line.a}, second = {n, same_line ? &shared_line.a + 1 : &shared_line.b};
    pthread_t thread;
    if (pthread_create(&thread, NULL, write_counter, &second)) {
        perror("cycle_pairs: pthread_create");
        exit(1);
    }
    write_counter(&first);
    pthread_join(thread, NULL);
}

static void run(const char *kind, long param, long n)
{
    if (!strcmp(kind, "plain"))
        plain(n, &shared_line.a);
    else if (!strcmp(kind, "locked"))
        locked(n, &shared_line.a);
    else if (!strcmp(kind, "mfence"))
        fenced(n, &shared_line.a);
    else if (!strcmp(kind, "chase"))
        chase(n);
    else if (!strcmp(kind, "same") || !strcmp(kind, "apart"))
        two_writers(n, !strcmp(kind, "same"));
    else if (!strcmp(kind, "copy"))
        copy(n, param);
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    static const char *const kinds[] = {"plain", "locked", "mfence", "chase", "same", "apart", "copy"};
    int known = 0;
    if (argc == 5)
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
            known |= !strcmp(argv[1], kinds[k]);
    if (!known) {
        fprintf(stderr, "usage: cycle_pairs plain|locked|mfence|chase|same|apart|copy PARAM N REPS\n");
        return 2;
    }
    const char *kind = argv[1];
    long param = atol(argv[2]), n = atol(argv[3]), reps = atol(argv[4]);
    if (!strcmp(kind, "chase"))
        chase_setup(param);
    if (!strcmp(kind, "copy")) {
        copy_from = aligned_alloc(64, (size_t)param), copy_to = aligned_alloc(64, (size_t)param);
        memset(copy_from, 1, (size_t)param), memset(copy_to, 2, (size_t)param);
    }
    if (reps == 0) {
        run(kind, param, n);
        return 0;
    }
    run(kind, param, n); /* warm the caches and the page tables */
    double best = 1e300;
    for (long r = 0; r < reps; r++) {
        double start = now_ns();
        run(kind, param, n);
        double ns = (now_ns() - start) / (double)n;
        if (ns < best)
            best = ns;
    }
    printf("%.4f\n", best);
    return 0;
}
