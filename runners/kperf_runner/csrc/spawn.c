/*
 * spawn: fork() throughput with extra VMAs, after UnixBench's "spawn" test.
 *
 * Written for kperf from the description in BENCHMARKS.md.  One call is
 * fork(); the child exits at once; the parent waits and checks the status.
 * The parent first creates EXTRA_VMAS anonymous mappings that cannot merge,
 * because copying the VMA tree is the part of fork() whose cost grows with
 * the address space (the __mt_dup series measured 0..6400 extra VMAs).
 *
 * Output per iteration (0-based), on stdout:
 *
 *   COUNT|<count>|1|lps                                  UnixBench's spawn
 *   spawn vmas=<extra> iteration=<i> count=<count> elapsed=<s.nnnnnnnnn>
 *   Process Creation                                126.0      <lps>  <index>
 *
 * kperf computes forks/s as count / elapsed from its own line.  The last
 * line is the row of the index table UnixBench's Run script prints
 * ("%-40s %12.1f %12.1f %8.1f": name, baseline, result, result / baseline
 * * 10), with this iteration's forks/s as the result: the one line mmtests'
 * ExtractUnixbenchcommon.pm reads from a spawn log.  So an iteration is one
 * UnixBench pass reported as `Run -i 1 spawn` would report it.  Any failure
 * exits non-zero with a message.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROGRAM "spawn"
#include "kperf_bench.h"

/* UnixBench's baseline for spawn, lps (pgms/index.base: "spawn|20|lps|126|126|1"). */
#define UNIXBENCH_BASELINE 126.0

static void usage(void)
{
	fprintf(stderr, "usage: spawn -t SECONDS -i ITERATIONS -v EXTRA_VMAS [-c CPU]\n"
			"  -t  seconds per iteration (fractions allowed)\n"
			"  -i  iterations\n"
			"  -v  extra anonymous VMAs the parent holds\n"
			"  -c  CPU to pin to (-1: do not pin)\n");
	exit(2);
}

/* Lines in /proc/self/maps, or -1 where /proc is not mounted. */
static long count_vmas(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	long lines = 0;
	int c;

	if (!f)
		return -1;
	while ((c = getc(f)) != EOF)
		if (c == '\n')
			lines++;
	fclose(f);
	return lines;
}

/*
 * One reservation split into single-page VMAs by alternating protections:
 * neighbours with different flags never merge, and one mmap() plus n/2
 * mprotect() calls keeps the setup quick even for tens of thousands.  The
 * pages are never touched, so fork() copies VMAs but no page tables.
 */
static void make_vmas(long extra)
{
	long page = sysconf(_SC_PAGESIZE);
	long before, after;
	char *base;

	if (extra == 0)
		return;
	before = count_vmas();
	base = mmap(NULL, (size_t)(extra * page), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		die("mmap of %ld pages for the extra VMAs: %s", extra, strerror(errno));
	for (long i = 1; i < extra; i += 2)
		if (mprotect(base + i * page, (size_t)page, PROT_READ | PROT_WRITE) != 0)
			die("mprotect for extra VMA %ld of %ld: %s (vm.max_map_count too low?)", i,
			    extra, strerror(errno));
	after = count_vmas();
	/* The reservation's two ends may merge with neighbouring mappings. */
	if (before >= 0 && after >= 0 && after - before < extra - 2)
		die("asked for %ld extra VMAs but the map count grew by %ld", extra,
		    after - before);
}

static unsigned long spawn_for(double seconds, double *elapsed)
{
	unsigned long count = 0;
	double start = now_seconds(), now;

	do {
		int status;
		pid_t pid = fork();

		if (pid < 0)
			die("fork failed after %lu forks: %s", count, strerror(errno));
		if (pid == 0)
			_exit(0);
		while (waitpid(pid, &status, 0) < 0)
			if (errno != EINTR)
				die("waitpid for child %d: %s", (int)pid, strerror(errno));
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			die("child %d ended abnormally (wait status 0x%x)", (int)pid, status);
		count++;
		now = now_seconds();
	} while (now - start < seconds);
	*elapsed = now - start;
	return count;
}

int main(int argc, char **argv)
{
	double seconds = 10.0;
	long iterations = 3, extra = 0, cpu = -1;
	int opt;

	while ((opt = getopt(argc, argv, "t:i:v:c:h")) != -1) {
		switch (opt) {
		case 't':
			seconds = parse_seconds("-t", optarg);
			break;
		case 'i':
			iterations = parse_long("-i", optarg, 1, 100000);
			break;
		case 'v':
			extra = parse_long("-v", optarg, 0, 10000000);
			break;
		case 'c':
			cpu = parse_long("-c", optarg, -1, CPU_SETSIZE - 1);
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();

	pin(cpu);
	make_vmas(extra);
	printf("spawn-info: extra_vmas=%ld total_vmas=%ld cpu=%ld seconds=%.3f\n", extra,
	       count_vmas(), cpu, seconds);
	for (long i = 0; i < iterations; i++) {
		double elapsed;
		unsigned long count;

		/* Nothing buffered may be duplicated into the children. */
		fflush(stdout);
		count = spawn_for(seconds, &elapsed);
		printf("COUNT|%lu|1|lps\n", count);
		printf("spawn vmas=%ld iteration=%ld count=%lu elapsed=%.9f\n", extra, i, count,
		       elapsed);
		printf("%-40s %12.1f %12.1f %8.1f\n", "Process Creation", UNIXBENCH_BASELINE,
		       count / elapsed, count / elapsed / UNIXBENCH_BASELINE * 10.0);
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		die("writing the results: %s", strerror(errno));
	return 0;
}
