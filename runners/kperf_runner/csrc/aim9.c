/*
 * aim9: the four single-user AIM Suite IX tests mmtests runs for the page
 * allocator: page_test, brk_test, exec_test, fork_test.
 *
 * Written for kperf from the description in BENCHMARKS.md.  Each test is a
 * function called repeatedly for T seconds; the report is calls per second
 * (loops/sec) and calls x ops-per-call per second (ops/sec):
 *
 *   page_test  save brk; grow by 1 MiB; 100 x (shrink 64 KiB, then 16 x grow
 *              by 4 KiB writing one byte every 128 bytes of each new page);
 *              restore brk                                       1700 ops
 *   brk_test   the same brk moves, memory never touched, 1000 rounds  17000
 *   exec_test  5 x (fork; the child execs a tiny static `true`; the parent
 *              waits, retrying on EINTR)                             5 ops
 *   fork_test  100 x (fork; the child exits; the parent waits)     100 ops
 *
 * Output per iteration, the rows in AIM9's table format (mmtests' extractor
 * reads field 2, the name, and field 6, ops/sec):
 *
 *   aim9 iteration=<i> testtime=<T>
 *    Test        Test        Elapsed  Iteration    Iteration          Operation
 *   Number       Name      Time (sec)   Count   Rate (loops/sec)    Rate (ops/sec)
 *   ------------------------------------------------------------------------------------------
 *        1 page_test           15.00       1700  113.33333       192666.67 System Allocations & Pages/second
 *
 * Any failure exits non-zero with a message on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROGRAM "aim9"
#include "kperf_bench.h"

#define KIB 1024L

static const char *true_path = "true";

static void usage(void)
{
	fprintf(stderr, "usage: aim9 -t SECONDS -i ITERATIONS -x PATH_OF_TRUE [-T TESTS] [-c CPU]\n"
			"  -t  seconds each test runs per iteration (fractions allowed)\n"
			"  -i  iterations (each runs every test once)\n"
			"  -x  the static `true` exec_test executes\n"
			"  -T  comma-separated tests (default page_test,brk_test,exec_test,fork_test)\n"
			"  -c  CPU to pin to (-1, the default: do not pin)\n");
	exit(2);
}

static char *get_brk(void)
{
	void *p = sbrk(0);

	if (p == (void *)-1)
		die("sbrk(0): %s", strerror(errno));
	return p;
}

static void set_brk(char *addr)
{
	if (brk(addr) != 0)
		die("brk(%p): %s", (void *)addr, strerror(errno));
}

/*
 * The brk moves page_test and brk_test share: grow by 1 MiB, then `rounds`
 * x (shrink 64 KiB, 16 x grow 4 KiB), touching the new memory or not.
 */
static void brk_moves(int rounds, int touch)
{
	char *start = get_brk();
	char *top = start + 1024 * KIB;

	set_brk(top);
	for (int r = 0; r < rounds; r++) {
		top -= 64 * KIB;
		set_brk(top);
		for (int g = 0; g < 16; g++) {
			char *page = top;

			top += 4 * KIB;
			set_brk(top);
			if (touch)
				for (long off = 0; off < 4 * KIB; off += 128)
					((volatile char *)page)[off] = (char)off;
		}
	}
	set_brk(start);
}

static void page_test(void)
{
	brk_moves(100, 1);
}

static void brk_test(void)
{
	brk_moves(1000, 0);
}

static void wait_child(pid_t pid, const char *what)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("%s: waitpid for child %d: %s", what, (int)pid, strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("%s: child %d ended abnormally (wait status 0x%x)", what, (int)pid, status);
}

static void exec_test(void)
{
	for (int i = 0; i < 5; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("exec_test: fork: %s", strerror(errno));
		if (pid == 0) {
			char *argv[] = { (char *)true_path, NULL };
			char *envp[] = { NULL };

			execve(true_path, argv, envp);
			_exit(127);
		}
		wait_child(pid, "exec_test");
	}
}

static void fork_test(void)
{
	for (int i = 0; i < 100; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork_test: fork: %s", strerror(errno));
		if (pid == 0)
			_exit(0);
		wait_child(pid, "fork_test");
	}
}

struct test {
	const char *name;
	void (*call)(void);
	long ops_per_call;
	const char *units;
};

static const struct test tests[] = {
	{ "page_test", page_test, 1700, "System Allocations & Pages/second" },
	{ "brk_test", brk_test, 17000, "System Memory Allocations/second" },
	{ "exec_test", exec_test, 5, "Program Loads/second" },
	{ "fork_test", fork_test, 100, "Task Creations/second" },
};
#define NTESTS (sizeof(tests) / sizeof(tests[0]))

static void run_test(int number, const struct test *t, double seconds)
{
	unsigned long calls = 0;
	double start = now_seconds(), elapsed;

	/* Nothing buffered may be duplicated into forked children. */
	fflush(stdout);
	do {
		t->call();
		calls++;
		elapsed = now_seconds() - start;
	} while (elapsed < seconds);
	printf("%6d %-15s%10.2f %10lu %10.5f %15.2f %s\n", number, t->name, elapsed, calls,
	       (double)calls / elapsed, (double)calls * (double)t->ops_per_call / elapsed, t->units);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const struct test *chosen[NTESTS];
	char *list = NULL;
	double seconds = 15.0;
	long iterations = 1, cpu = -1;
	size_t nchosen = 0;
	int opt;

	while ((opt = getopt(argc, argv, "t:i:x:T:c:h")) != -1) {
		switch (opt) {
		case 't':
			seconds = parse_seconds("-t", optarg);
			break;
		case 'i':
			iterations = parse_long("-i", optarg, 1, 100000);
			break;
		case 'x':
			true_path = optarg;
			break;
		case 'T':
			list = optarg;
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
	if (list == NULL) {
		for (size_t i = 0; i < NTESTS; i++)
			chosen[nchosen++] = &tests[i];
	} else {
		for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
			size_t i;

			for (i = 0; i < NTESTS && strcmp(tests[i].name, name) != 0; i++)
				;
			if (i == NTESTS)
				die("-T: unknown test '%s' (known: page_test, brk_test, exec_test, fork_test)",
				    name);
			for (size_t j = 0; j < nchosen; j++)
				if (chosen[j] == &tests[i])
					die("-T: test '%s' given twice", name);
			chosen[nchosen++] = &tests[i];
		}
		if (nchosen == 0)
			die("-T wants at least one test");
	}
	for (size_t i = 0; i < nchosen; i++)
		if (strcmp(chosen[i]->name, "exec_test") == 0 && access(true_path, X_OK) != 0)
			die("exec_test cannot execute '%s': %s (pass -x PATH)", true_path,
			    strerror(errno));
	pin(cpu);
	/* Touch the brk area once, so the first page_test call is not special. */
	page_test();

	for (long it = 0; it < iterations; it++) {
		printf("aim9 iteration=%ld testtime=%.3f\n", it, seconds);
		printf(" Test        Test        Elapsed  Iteration    Iteration          Operation\n");
		printf("Number       Name      Time (sec)   Count   Rate (loops/sec)    Rate (ops/sec)\n");
		printf("------------------------------------------------------------------------------------------\n");
		for (size_t i = 0; i < nchosen; i++)
			run_test((int)(i + 1), chosen[i], seconds);
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		die("writing the results: %s", strerror(errno));
	return 0;
}
