/*
 * Part of init.c (included once, where its helpers say(), read_line_file()
 * and proc_field() are defined): kept apart to keep each file readable.
 */
/*
 * Machine tuning, applied the way benchmark labs prepare their machines and
 * recorded with every boot as KPERF-ENV facts, so that two boots measured
 * under different settings can be told apart (the submission page warns).
 * What the kernel lacks is recorded as "absent", never guessed.  A fact
 * report_environment() printed before the tuning (cpufreq_governor, thp) is
 * printed again after it: the later line is the one that counts.
 */
#define CPU_DIR "/sys/devices/system/cpu"
#define THP_FILE "/sys/kernel/mm/transparent_hugepage/enabled"
#define DROP_CACHES "/proc/sys/vm/drop_caches"
/* Optional: the THP mode the job asks for (always, madvise, never). */
#define THP_REQUEST "/kperf/thp"
/*
 * Optional: "software" counts task-clock and page faults instead of the
 * hardware's instructions and cycles, which checks the counting itself on a
 * machine without a PMU (QEMU's TCG, most CI hosts).
 */
#define PERF_REQUEST "/kperf/perf"

/* Whether drop_caches works here, decided once by tune_machine(). */
static int drop_caches_ok;

/*
 * After drop_caches, let the machine settle before the command starts.
 *
 * Dropping the caches queues work that runs later: dentries and inodes freed
 * after an RCU grace period, per-CPU page lists drained by workqueues.  Run
 * at once, the command's first rounds shared the CPU with that work, and
 * where it landed depended on everything the kernel did before: under QEMU's
 * instruction clock pagealloc's per-page cost moved by 1-2% between two
 * kernels whose allocator is the same (one only had a slower anonymous
 * fault), every boot of each side bit-identical, so the statistics saw an
 * exact difference.  A short sleep lets the queued work finish on an idle
 * machine; the two kernels then agree to the cycle (bench/settle.py).  The
 * sleep costs nothing under the instruction clock (QEMU skips idle time) and
 * little on bare metal.  kperf.settle_ms=N on the command line sets it
 * (0: none), for measuring what it does.
 */
static long settle_ms = 100;

static void read_settle(void)
{
	char value[32];

	if (cmdline_value("kperf.settle_ms", value, sizeof(value)) == 0)
		settle_ms = strtol(value, NULL, 10);
	if (settle_ms < 0 || settle_ms > 10000)
		settle_ms = 100;
}

static void settle(void)
{
	struct timespec ts = { settle_ms / 1000L, (settle_ms % 1000L) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/*
 * A seeded phase per command: an extra sleep of 0 to phase_span_us before
 * each command, drawn from kperf.phase_seed (the runner gives every boot its
 * own seed) and the command's number.
 *
 * Under the instruction clock a boot repeats the last exactly, so where a
 * command's window falls against the kernel's periodic work (the tick,
 * vmstat and RCU callbacks, workqueues) is fixed by everything the kernel
 * executed before it.  Two builds of unrelated changes reach the command at
 * another phase, and that alone moved the page allocator's metrics by up to
 * 0.45% with every boot of each build identical (bench/build_noise.py
 * --phases): a difference the boots could not show as noise.  With a phase
 * drawn per boot, each side's boots sample the phases, the boots differ by
 * what unrelated builds differ by, and the interval of the comparison holds
 * it.  Without kperf.phase_seed there is no extra sleep (phase_span_us=0),
 * as before.  Idle time costs nothing under the instruction clock (QEMU
 * jumps over it), and at most phase_span_us a command on real hardware,
 * where the runner gives no seed.
 */
static unsigned long long phase_seed;
static long phase_span_us;

static void read_phase(void)
{
	char value[32];

	if (cmdline_value("kperf.phase_seed", value, sizeof(value)) != 0)
		return;
	phase_seed = strtoull(value, NULL, 10);
	/*
	 * One second: the period of the longest periodic work that moved the
	 * page allocator (vmstat's per-CPU counter fold and page-list drain,
	 * every second).  A 20 ms span covered the tick but left that phase to
	 * the build: 93% of unrelated pairs inside the interval instead of
	 * 99.6% (docs/statistics.md, "A phase per boot, measured").
	 */
	phase_span_us = 1000000;
	if (cmdline_value("kperf.phase_span_us", value, sizeof(value)) == 0)
		phase_span_us = strtol(value, NULL, 10);
	if (phase_span_us < 0 || phase_span_us > 10000000)
		phase_span_us = 1000000;
}

/* splitmix64: a well-mixed 64-bit value from the seed and the command's number. */
static unsigned long long phase_mix(unsigned long long x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static void phase_sleep(int n)
{
	long us;
	struct timespec ts;

	if (phase_span_us <= 0)
		return;
	us = (long)(phase_mix(phase_seed * 1000003ULL + (unsigned long long)n) % (unsigned long long)phase_span_us);
	ts.tv_sec = us / 1000000L;
	ts.tv_nsec = (us % 1000000L) * 1000L;
	say("KPERF-PHASE %d %ld", n, us);
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int write_text(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;
	int saved;

	if (fd < 0)
		return -1;
	do
		n = write(fd, value, strlen(value));
	while (n < 0 && errno == EINTR);
	saved = errno;
	close(fd);
	errno = saved;
	return n < 0 ? -1 : 0;
}

#include "init_memory.h"

/* Every CPU's governor to performance; the fact is the governors that resulted. */
static void tune_governors(int apply)
{
	char facts[MAX_LINE] = "", path[128], gov[64], first[64] = "";
	int mixed = 0, len = 0;
	long cpus = sysconf(_SC_NPROCESSORS_CONF);

	for (long cpu = 0; cpu < cpus && cpu < 4096; cpu++) {
		snprintf(path, sizeof(path), CPU_DIR "/cpu%ld/cpufreq/scaling_governor", cpu);
		if (apply)
			write_text(path, "performance");
		if (read_line_file(path, gov, sizeof(gov)) != 0)
			continue;
		if (first[0] == '\0')
			snprintf(first, sizeof(first), "%s", gov);
		else if (strcmp(first, gov) != 0)
			mixed = 1;
		if (len < (int)sizeof(facts) - 80)
			len += snprintf(facts + len, sizeof(facts) - (size_t)len, "%scpu%ld=%s",
					len ? "," : "", cpu, gov);
	}
	if (first[0] == '\0')
		say("KPERF-ENV cpufreq_governor=absent");
	else
		say("KPERF-ENV cpufreq_governor=%s", mixed ? facts : first);
}

/* Turbo/boost off: the generic cpufreq switch, or intel_pstate's own. */
static void tune_boost(int apply)
{
	char buf[32];

	if (apply) {
		write_text(CPU_DIR "/cpufreq/boost", "0");
		write_text(CPU_DIR "/intel_pstate/no_turbo", "1");
	}
	if (read_line_file(CPU_DIR "/cpufreq/boost", buf, sizeof(buf)) == 0)
		say("KPERF-ENV boost=%s", strcmp(buf, "0") == 0 ? "off" : "on");
	else if (read_line_file(CPU_DIR "/intel_pstate/no_turbo", buf, sizeof(buf)) == 0)
		say("KPERF-ENV boost=%s", strcmp(buf, "1") == 0 ? "off" : "on");
	else
		say("KPERF-ENV boost=absent");
}

static void tune_thp(int apply)
{
	char mode[64], now[256];

	if (read_line_file(THP_REQUEST, mode, sizeof(mode)) != 0 || mode[0] == '\0') {
		/* Nothing asked: the kernel's default, as report_environment() printed it. */
		if (access(THP_FILE, F_OK) != 0)
			say("KPERF-ENV thp=absent");
		return;
	}
	say("KPERF-ENV thp_requested=%s", mode);
	/* Not a failure of the boot: the mode in force is recorded next, whatever it is. */
	if (apply && write_text(THP_FILE, mode) != 0)
		say("kperf-init: THP mode %s: %s: %s", mode, THP_FILE, strerror(errno));
	if (read_line_file(THP_FILE, now, sizeof(now)) == 0)
		say("KPERF-ENV thp=%s", now);
	else
		say("KPERF-ENV thp=absent");
}

/* Facts only: swap as setup_swap() left it, norandmaps is on the command line. */
static void report_fixed_tuning(void)
{
	char buf[MAX_LINE];

	if (proc_field("/proc/meminfo", "SwapTotal", buf, sizeof(buf)) == 0)
		say("KPERF-ENV swap_total_kb=%ld", strtol(buf, NULL, 10));
	else
		say("KPERF-ENV swap_total_kb=absent");
	if (read_line_file("/proc/sys/kernel/randomize_va_space", buf, sizeof(buf)) == 0)
		say("KPERF-ENV aslr=%s", buf);
	else
		say("KPERF-ENV aslr=absent");
	if (read_line_file(CPU_DIR "/isolated", buf, sizeof(buf)) == 0)
		say("KPERF-ENV isolated_cpus=%s", buf[0] ? buf : "none");
	else
		say("KPERF-ENV isolated_cpus=absent");
}

/* The hardware counters read around every command, or software ones on request. */
struct perf_counter {
	const char *name;
	__u32 type;
	__u64 config;
};

static const struct perf_counter hardware_counters[] = {
	{ "instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS },
	{ "cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES },
};
static const struct perf_counter software_counters[] = {
	{ "task_clock_ns", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK },
	{ "page_faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS },
};
#define N_COUNTERS 2

static const struct perf_counter *perf_counters = hardware_counters;
static int perf_fds[N_COUNTERS] = { -1, -1 };
/* 0: user+kernel; 1: user only (perf_event_paranoid forbids the kernel's share); -1: unsupported. */
static int perf_exclude_kernel;
static int perf_errno;

/*
 * Counting starts at the command's exec (enable_on_exec) and follows its
 * children (inherit): the counts of init itself, forking and waiting, stay
 * out.  A child's counts are added to init's event when the child exits.
 */
static int perf_open(const struct perf_counter *c, int exclude_kernel)
{
	struct perf_event_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = c->type;
	attr.config = c->config;
	attr.disabled = 1;
	attr.enable_on_exec = 1;
	attr.inherit = 1;
	attr.exclude_kernel = (__u64)exclude_kernel;
	attr.exclude_hv = 1;
	attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
	return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static void perf_close_all(void)
{
	for (int i = 0; i < N_COUNTERS; i++) {
		if (perf_fds[i] >= 0)
			close(perf_fds[i]);
		perf_fds[i] = -1;
	}
}

static int perf_open_all(void)
{
	for (int i = 0; i < N_COUNTERS; i++) {
		perf_fds[i] = perf_open(&perf_counters[i], perf_exclude_kernel);
		if (perf_fds[i] < 0) {
			perf_errno = errno;
			perf_close_all();
			return -1;
		}
	}
	return 0;
}

static void probe_perf(void)
{
	char buf[32];

	if (read_line_file(PERF_REQUEST, buf, sizeof(buf)) == 0 && strcmp(buf, "software") == 0)
		perf_counters = software_counters;
	perf_exclude_kernel = 0;
	if (perf_open_all() != 0 && (perf_errno == EACCES || perf_errno == EPERM)) {
		perf_exclude_kernel = 1;
		perf_open_all();
	}
	if (perf_fds[0] < 0) {
		perf_exclude_kernel = -1;
		say("KPERF-ENV perf_counters=unsupported (%s)", strerror(perf_errno));
		return;
	}
	perf_close_all();
	say("KPERF-ENV perf_counters=%s,%s %s", perf_counters[0].name, perf_counters[1].name,
	    perf_exclude_kernel ? "user" : "user+kernel");
}

/*
 * Called once after report_environment().  Inside another system (the
 * namespace tests, KPERF_INIT_NO_POWER_OFF) the machine-wide settings are
 * that system's and are read, not changed; caches are still dropped, which
 * costs that system some speed and changes no setting.
 */
static void tune_machine(void)
{
	int apply = !no_power_off;

	if (!apply)
		say("KPERF-ENV tuning=not applied (init is not the machine's own PID 1)");
	tune_governors(apply);
	tune_boost(apply);
	tune_thp(apply);
	setup_swap(apply);
	report_numa();
	report_fixed_tuning();
	drop_caches_ok = access(DROP_CACHES, W_OK) == 0;
	say("KPERF-ENV drop_caches=%s", drop_caches_ok ? "before every command" : "absent");
	read_settle();
	say("KPERF-ENV settle_ms=%ld", drop_caches_ok ? settle_ms : 0L);
	read_phase();
	say("KPERF-ENV phase_seed=%llu", phase_seed);
	say("KPERF-ENV phase_span_us=%ld", phase_span_us);
	probe_perf();
}

/*
 * First thing for every command: start it with cold page and slab caches
 * (sync first, or dirty pages stay), and open its counters.
 */
static void before_command(int n)
{
	if (drop_caches_ok) {
		sync();
		if (write_text(DROP_CACHES, "3") != 0)
			say("kperf-init: drop_caches: %s", strerror(errno));
		if (settle_ms > 0)
			settle();
	}
	phase_sleep(n);
	if (perf_exclude_kernel >= 0 && perf_open_all() != 0)
		say("kperf-init: perf_event_open: %s", strerror(perf_errno));
}

/*
 * After the command's END (and VMSTAT): KPERF-PERF <n> <name>=<count> ...,
 * or "unsupported".  A count the kernel had to multiplex with other events
 * is scaled to the whole run, as perf stat does.
 */
static void after_command(int n)
{
	char line[256];
	int len = snprintf(line, sizeof(line), "KPERF-PERF %d", n);

	if (perf_fds[0] < 0) {
		say("KPERF-PERF %d unsupported", n);
		return;
	}
	for (int i = 0; i < N_COUNTERS; i++) {
		__u64 v[3]; /* value, time enabled, time running */
		ssize_t got = read(perf_fds[i], v, sizeof(v));

		if (got != (ssize_t)sizeof(v) || v[2] == 0)
			continue; /* never scheduled on the PMU: no count rather than 0 */
		if (v[2] < v[1])
			v[0] = (__u64)((long double)v[0] * v[1] / v[2]);
		len += snprintf(line + len, sizeof(line) - (size_t)len, " %s=%llu",
				perf_counters[i].name, (unsigned long long)v[0]);
	}
	perf_close_all();
	say("%s", line);
}
