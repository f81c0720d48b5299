/*
 * pft: page fault test.
 *
 * Written for kperf from the description in BENCHMARKS.md.  One anonymous
 * private region, untouched, with transparent huge pages off for it
 * (MADV_NOHUGEPAGE: every fault is a base-page fault).  N workers, threads of
 * one process (one mm, one VMA: the per-VMA-lock case) or processes (one mm
 * each), each own an equal slice; a barrier releases them together; each
 * writes one byte per page of its slice.
 *
 *   wall  from the first worker's start to the last worker's end
 *   cpu   user + system time summed over the workers, measured by each worker
 *         around its own faulting loop (getrusage RUSAGE_THREAD for threads,
 *         RUSAGE_SELF in each child for processes: a child's wait4 rusage
 *         would also count its exit, where the kernel frees the slice)
 *
 * Output per run, mmtests' header and line format:
 *
 *   pft-info: mode=threads clients=2 iterations=3 bytes=67108864 pages=16384 cpus=2
 *     Gb  Thr CLine   User     System   Wall    flt/cpu/s fault/wsec
 *      0    2   1     0.01s     0.52s     0.14s   102030.411 374920.283
 *
 * (" %3ld %4ld %3ld %8.2fs %8.2fs %8.2fs  %10.3f %10.3f": Gb of the region,
 * workers, cache lines written per page, user, system and wall seconds,
 * faults per CPU second, faults per wall second.)  A client count above the
 * online CPUs prints "pft-skip: ..." and exits 0, as mmtests stops at
 * NUMCPUS.  Any failure exits non-zero with a message on stderr.
 *
 * -c MIB runs every worker inside a memory cgroup (cgroup v2) limited to MIB
 * (memory.max): a region larger than the limit makes the faults past it
 * reclaim earlier pages to swap first, so the rates include what memcg
 * reclaim and swap-out cost.  It needs the memory controller and swap (the
 * test kernel's init gives an mm-profile kernel zram swap); without either
 * pft says so and exits non-zero.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROGRAM "pft"
#include "kperf_bench.h"

static void usage(void)
{
	fprintf(stderr, "usage: pft -m MIB -n CLIENTS [-i ITERATIONS] [-M threads|processes] [-c MIB]\n"
			"  -m  MiB of the region (0: MemTotal / 5)\n"
			"  -c  run in a memory cgroup limited to MiB (needs memcg and swap)\n"
			"  -n  workers\n"
			"  -i  iterations (a fresh region each)\n"
			"  -M  threads (one mm, the default) or processes\n");
	exit(2);
}

static double tv_seconds(const struct timeval *tv)
{
	return (double)tv->tv_sec + (double)tv->tv_usec / 1e6;
}

/* One worker's measurements; in shared memory when workers are processes. */
struct result {
	double start, end; /* CLOCK_MONOTONIC, system-wide: comparable across processes */
	double user, sys;
	int error; /* errno of a failed getrusage */
};

struct shared {
	pthread_barrier_t barrier;
	struct result results[];
};

static struct shared *shared;
static char *region;
static size_t slice_bytes;
static long page_size;

static void fault_slice(long worker, int who)
{
	struct result *r = &shared->results[worker];
	struct rusage before, after;
	char *p = region + (size_t)worker * slice_bytes;
	char *end = p + slice_bytes;
	int rc = pthread_barrier_wait(&shared->barrier);

	if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) {
		r->error = rc;
		return;
	}
	if (getrusage(who, &before) != 0) {
		r->error = errno;
		return;
	}
	r->start = now_seconds();
	for (; p < end; p += page_size)
		*(volatile char *)p = 1;
	r->end = now_seconds();
	if (getrusage(who, &after) != 0) {
		r->error = errno;
		return;
	}
	r->user = tv_seconds(&after.ru_utime) - tv_seconds(&before.ru_utime);
	r->sys = tv_seconds(&after.ru_stime) - tv_seconds(&before.ru_stime);
}

enum { THP_MADVISE, THP_PRCTL, THP_NONE };
static int thp_control = THP_MADVISE;
static const char *const thp_names[] = { "madvise", "prctl", "none" };

/*
 * How THP is kept off the region: MADV_NOHUGEPAGE where madvise(2) exists;
 * a kernel without it (CONFIG_ADVISE_SYSCALLS=n) gets PR_SET_THP_DISABLE,
 * which covers the whole process and its children; a kernel without THP
 * needs neither.
 */
static void choose_thp_control(void)
{
	if (madvise(NULL, 0, MADV_NORMAL) == 0 || errno != ENOSYS)
		return;
	if (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0) {
		thp_control = THP_PRCTL;
		return;
	}
	if (errno != EINVAL)
		die("madvise(2) is missing and prctl(PR_SET_THP_DISABLE) failed: %s", strerror(errno));
	thp_control = THP_NONE;
}

static void *thread_main(void *arg)
{
	fault_slice((long)arg, RUSAGE_THREAD);
	return NULL;
}

static void run_threads(long clients)
{
	pthread_t *threads = calloc((size_t)clients, sizeof(*threads));

	if (!threads)
		die("out of memory for %ld threads", clients);
	for (long i = 0; i < clients; i++) {
		int rc = pthread_create(&threads[i], NULL, thread_main, (void *)i);

		if (rc != 0)
			die("pthread_create for worker %ld: %s", i, strerror(rc));
	}
	for (long i = 0; i < clients; i++)
		pthread_join(threads[i], NULL);
	free(threads);
}

static void run_processes(long clients)
{
	pid_t *pids = calloc((size_t)clients, sizeof(*pids));

	if (!pids)
		die("out of memory for %ld processes", clients);
	fflush(stdout);
	for (long i = 0; i < clients; i++) {
		pids[i] = fork();
		if (pids[i] < 0)
			die("fork for worker %ld: %s", i, strerror(errno));
		if (pids[i] == 0) {
			fault_slice(i, RUSAGE_SELF);
			_exit(0);
		}
	}
	for (long i = 0; i < clients; i++) {
		int status;

		while (waitpid(pids[i], &status, 0) < 0)
			if (errno != EINTR)
				die("waitpid for worker %ld: %s", i, strerror(errno));
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			die("worker %ld ended abnormally (wait status 0x%x)", i, status);
	}
	free(pids);
}

#define CGROUP_ROOT "/sys/fs/cgroup"
#define CGROUP_DIR CGROUP_ROOT "/kperf-pft"

static void write_file(const char *path, const char *value)
{
	FILE *f = fopen(path, "w");

	if (f == NULL)
		die("open %s: %s", path, strerror(errno));
	if (fputs(value, f) == EOF || fclose(f) != 0)
		die("write '%s' to %s: %s", value, path, strerror(errno));
}

static long meminfo_kb(const char *field)
{
	char line[256];
	size_t len = strlen(field);
	long kb = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	if (f == NULL)
		die("open /proc/meminfo: %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, len) == 0 && line[len] == ':')
			kb = strtol(line + len + 1, NULL, 10);
	fclose(f);
	return kb;
}

/* Move this process (and so every worker it starts) into a limited memcg. */
static void enter_memcg(long limit_mib)
{
	char buf[256] = "";
	FILE *f;

	if (meminfo_kb("SwapTotal") <= 0)
		die("-c needs swap and this machine has none (SwapTotal 0): boot a kernel with "
		    "zram, e.g. kperf's mm profile, whose init sets up zram swap");
	if (mount("cgroup2", CGROUP_ROOT, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0 &&
	    errno != EBUSY)
		die("mount cgroup2 on " CGROUP_ROOT ": %s (a kernel without CONFIG_CGROUPS?)",
		    strerror(errno));
	f = fopen(CGROUP_ROOT "/cgroup.controllers", "r");
	if (f == NULL || fgets(buf, sizeof(buf), f) == NULL)
		buf[0] = '\0';
	if (f)
		fclose(f);
	if (strstr(buf, "memory") == NULL)
		die("-c needs the memory controller, which this kernel lacks (CONFIG_MEMCG; "
		    CGROUP_ROOT "/cgroup.controllers: '%s')", strtok(buf, "\n") ? buf : "");
	write_file(CGROUP_ROOT "/cgroup.subtree_control", "+memory");
	if (mkdir(CGROUP_DIR, 0755) != 0 && errno != EEXIST)
		die("mkdir " CGROUP_DIR ": %s", strerror(errno));
	snprintf(buf, sizeof(buf), "%ld", limit_mib << 20);
	write_file(CGROUP_DIR "/memory.max", buf);
	snprintf(buf, sizeof(buf), "%ld", (long)getpid());
	write_file(CGROUP_DIR "/cgroup.procs", buf);
}

static size_t default_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES);

	if (pages <= 0)
		die("cannot tell the memory size (sysconf(_SC_PHYS_PAGES))");
	return (size_t)pages * (size_t)page_size / 5;
}

int main(int argc, char **argv)
{
	long mib = 0, clients = 1, iterations = 1, cpus, memcg_mib = 0;
	int processes = 0, opt;
	size_t bytes, shared_bytes, pages;
	pthread_barrierattr_t attr;

	while ((opt = getopt(argc, argv, "m:n:i:M:c:h")) != -1) {
		switch (opt) {
		case 'm':
			mib = parse_long("-m", optarg, 0, 1L << 30);
			break;
		case 'c':
			memcg_mib = parse_long("-c", optarg, 1, 1L << 30);
			break;
		case 'n':
			clients = parse_long("-n", optarg, 1, 1L << 16);
			break;
		case 'i':
			iterations = parse_long("-i", optarg, 1, 100000);
			break;
		case 'M':
			if (strcmp(optarg, "threads") == 0)
				processes = 0;
			else if (strcmp(optarg, "processes") == 0)
				processes = 1;
			else
				die("-M wants threads or processes, got '%s'", optarg);
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();

	page_size = sysconf(_SC_PAGESIZE);
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus > 0 && clients > cpus) {
		printf("pft-skip: mode=%s clients=%ld cpus=%ld (more workers than CPUs)\n",
		       processes ? "processes" : "threads", clients, cpus);
		return 0;
	}
	bytes = mib ? (size_t)mib << 20 : default_bytes();
	/* Equal slices of whole pages. */
	slice_bytes = bytes / (size_t)clients / (size_t)page_size * (size_t)page_size;
	if (slice_bytes == 0)
		die("a %zu-byte region cannot give %ld workers a page each", bytes, clients);
	bytes = slice_bytes * (size_t)clients;
	pages = bytes / (size_t)page_size;

	shared_bytes = sizeof(*shared) + (size_t)clients * sizeof(struct result);
	shared = mmap(NULL, shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED)
		die("mmap of the shared results: %s", strerror(errno));

	choose_thp_control();
	if (memcg_mib)
		enter_memcg(memcg_mib);
	printf("pft-info: mode=%s clients=%ld iterations=%ld bytes=%zu pages=%zu cpus=%ld thp_off=%s"
	       " memcg_mb=%ld\n",
	       processes ? "processes" : "threads", clients, iterations, bytes, pages, cpus,
	       thp_names[thp_control], memcg_mib);
	printf("  Gb  Thr CLine   User     System   Wall    flt/cpu/s fault/wsec\n");
	for (long it = 0; it < iterations; it++) {
		double first = 0, last = 0, user = 0, sys = 0, cpu, wall;

		memset(shared->results, 0, (size_t)clients * sizeof(struct result));
		pthread_barrierattr_init(&attr);
		if (processes && pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED) != 0)
			die("process-shared barriers are not supported");
		if (pthread_barrier_init(&shared->barrier, &attr, (unsigned)clients) != 0)
			die("pthread_barrier_init for %ld workers failed", clients);
		pthread_barrierattr_destroy(&attr);

		region = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (region == MAP_FAILED)
			die("mmap of %zu bytes: %s", bytes, strerror(errno));
		/* Base pages only; EINVAL means a kernel without THP, base pages anyway. */
		if (thp_control == THP_MADVISE && madvise(region, bytes, MADV_NOHUGEPAGE) != 0 &&
		    errno != EINVAL)
			die("madvise(MADV_NOHUGEPAGE): %s", strerror(errno));

		if (processes)
			run_processes(clients);
		else
			run_threads(clients);

		for (long i = 0; i < clients; i++) {
			struct result *r = &shared->results[i];

			if (r->error)
				die("worker %ld: %s", i, strerror(r->error));
			if (r->end <= 0)
				die("worker %ld reported nothing", i);
			if (i == 0 || r->start < first)
				first = r->start;
			if (i == 0 || r->end > last)
				last = r->end;
			user += r->user;
			sys += r->sys;
		}
		wall = last - first;
		cpu = user + sys;
		if (wall <= 0 || cpu <= 0)
			die("iteration %ld measured no time (wall %.6f s, cpu %.6f s)", it, wall, cpu);
		printf(" %3ld %4ld %3ld %8.2fs %8.2fs %8.2fs  %10.3f %10.3f\n", (long)(bytes >> 30),
		       clients, 1L, user, sys, wall, (double)pages / cpu, (double)pages / wall);
		fflush(stdout);
		if (munmap(region, bytes) != 0)
			die("munmap: %s", strerror(errno));
		pthread_barrier_destroy(&shared->barrier);
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		die("writing the results: %s", strerror(errno));
	return 0;
}
