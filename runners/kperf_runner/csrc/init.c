/*
 * kperf-init: PID 1 of the initramfs the qemu backend boots.
 *
 * It mounts the pseudo file systems, reports the machine's environment, runs
 * the commands listed in /kperf/job one after another with their output on
 * the console, and powers the machine off.  Everything it tells the runner is
 * a line starting with "KPERF-" (parsed by kperf_runner/console.py):
 *
 *   KPERF-ENV <key>=<value>     one per environment fact
 *   KPERF-BEGIN <n>             command n (0-based) starts
 *   KPERF-END <n> <status>      exit status, or 128 + signal number
 *   KPERF-VMSTAT <n> <name>=<delta> ...
 *                               /proc/vmstat across command n (after its END):
 *                               the nonzero deltas, one or more lines; a line
 *                               with no fields says none moved; no line at
 *                               all, that the kernel has no /proc/vmstat
 *   KPERF-PERF <n> <name>=<count> ...
 *                               hardware counters across command n (after its
 *                               END and VMSTAT): instructions and cycles,
 *                               user+kernel (perf_counters says which);
 *                               "KPERF-PERF <n> unsupported" without a PMU
 *   KPERF-DONE                  every command ran (or one failed: see below)
 *   KPERF-ERROR <what>          init itself failed; it powers off (or reboots) next
 *
 * The machine is tuned as benchmark labs tune theirs before the job runs,
 * and every setting is a KPERF-ENV fact (init_tuning.h); caches are dropped
 * before every command.
 *
 * /kperf/job holds one command per line, argv separated by single spaces.
 * Init stops at the first command that fails: that failure is what the runner
 * reports, and the remaining commands would only spend the boot's time.
 *
 * On bare metal (the kexec backend) everything init prints, the commands'
 * output included, also goes to /dev/pmsg0, which pstore keeps in RAM across
 * the reboot for the runner to read; /kperf/end (or kperf.end=reboot on the
 * kernel command line) makes init reboot instead of powering off.
 *
 * Static, libc only, no shell: the kernels under test are tinyconfig builds
 * and the initramfs holds nothing else.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define JOB_FILE "/kperf/job"
#define MAX_LINE 4096
#define MAX_ARGS 128

/*
 * /proc/vmstat is read just before and just after every command, so that a
 * change in a benchmark's numbers comes with the kernel's own account of it
 * ("more faults? more allocations?").  Names longer than the service takes
 * (64) are skipped rather than cut into another counter's name.
 */
#define VMSTAT_FILE "/proc/vmstat"
#define MAX_VMSTAT 512
#define VMSTAT_NAME 64
/* Deltas per console line: short lines are less likely to be cut by a kernel message. */
#define VMSTAT_LINE 1024

struct vmstat {
	int n;
	char name[MAX_VMSTAT][VMSTAT_NAME];
	unsigned long long value[MAX_VMSTAT];
};

static struct vmstat vmstat_before, vmstat_after;

/* Set by tests that run init in a PID namespace: exit instead of powering off. */
static int no_power_off;

/*
 * On bare metal the console is not read by anyone while the kernel under test
 * runs: the runner reads what init wrote to /dev/pmsg0 (pstore's userspace
 * log, kept in RAM across the reboot) once the machine is back on its own
 * kernel.  So everything init prints, and every command's output, goes to
 * pmsg_fd as well, the same bytes in the same order.  -1: no pmsg.
 */
#define PMSG_DEVICE "/dev/pmsg0"
static int pmsg_fd = -1;
/*
 * End by rebooting (back to the machine's own kernel) rather than powering
 * off: /kperf/end holding "reboot" (the kexec backend's initramfs), or
 * kperf.end=reboot on the kernel command line.
 */
#define END_FILE "/kperf/end"
static int reboot_at_end;

static void write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

/* Everything init prints: the console, and pmsg when there is one. */
static void emit(const char *buf, size_t len)
{
	write_all(1, buf, len);
	if (pmsg_fd >= 0)
		write_all(pmsg_fd, buf, len);
}

/*
 * One write() per line: the kernel may print on the same console, and a line
 * written in one piece is not split by its messages.
 */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char buf[MAX_LINE + 256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	emit(buf, (size_t)n);
}

static void power_off(int status) __attribute__((noreturn));
static void power_off(int status)
{
	sync();
	if (no_power_off) {
		/* What the machine would do, for the tests that run init in a namespace. */
		if (reboot_at_end)
			say("kperf-init: would reboot now");
		exit(status);
	}
	reboot(reboot_at_end ? RB_AUTOBOOT : RB_POWER_OFF);
	/*
	 * reboot() only returns on error.  PID 1 exiting panics the kernel;
	 * with panic=-1 and QEMU's -no-reboot that still ends the run, and on
	 * bare metal panic=N reboots the machine.
	 */
	say("KPERF-ERROR reboot: %s", strerror(errno));
	exit(1);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	char what[MAX_LINE];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	say("KPERF-ERROR %s", what);
	power_off(1);
}

/* Mount a pseudo file system; a missing optional one only drops facts. */
static void mount_fs(const char *type, const char *target, int required)
{
	if (mkdir(target, 0755) != 0 && errno != EEXIST) {
		if (required)
			fail("mkdir %s: %s", target, strerror(errno));
		return;
	}
	if (mount(type, target, type, MS_NOSUID, NULL) == 0)
		return;
	/* EBUSY: already mounted, e.g. devtmpfs by CONFIG_DEVTMPFS_MOUNT. */
	if (errno == EBUSY || !required)
		return;
	fail("mount %s on %s: %s", type, target, strerror(errno));
}

/*
 * The kernel opens /dev/console for init when the initramfs has that node;
 * if it did not, open it from devtmpfs so the runner sees anything at all.
 */
static void ensure_console(void)
{
	int fd;

	if (fcntl(1, F_GETFD) != -1)
		return;
	fd = open("/dev/console", O_RDWR | O_NOCTTY);
	if (fd < 0)
		power_off(1); /* nowhere to say why */
	dup2(fd, 0);
	dup2(fd, 1);
	dup2(fd, 2);
	if (fd > 2)
		close(fd);
}

/* Read a small file into buf as one line: newlines become spaces, trimmed. */
static int read_line_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0;
	ssize_t n;

	if (fd < 0)
		return -1;
	while (len < size - 1 && (n = read(fd, buf + len, size - 1 - len)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			close(fd);
			return -1;
		}
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	for (size_t i = 0; i < len; i++)
		if (buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t')
			buf[i] = ' ';
	while (len > 0 && buf[len - 1] == ' ')
		buf[--len] = '\0';
	return 0;
}

/*
 * The value of key=value on the kernel command line, into out: 0, or -1
 * without one.  The last one counts, as for the kernel's own parameters.
 */
static int cmdline_value(const char *key, char *out, size_t size)
{
	char buf[MAX_LINE];
	size_t klen = strlen(key), n;
	int found = -1;

	if (read_line_file("/proc/cmdline", buf, sizeof(buf)) != 0)
		return -1;
	for (char *p = buf; (p = strstr(p, key)) != NULL; p += klen) {
		if ((p != buf && p[-1] != ' ') || p[klen] != '=')
			continue;
		n = strcspn(p + klen + 1, " ");
		n = n < size ? n : size - 1;
		memcpy(out, p + klen + 1, n);
		out[n] = '\0';
		found = 0;
	}
	return found;
}

static void env_from_file(const char *key, const char *path)
{
	char buf[MAX_LINE];

	if (read_line_file(path, buf, sizeof(buf)) == 0)
		say("KPERF-ENV %s=%s", key, buf);
}

/* The value of "<field> : value" lines in /proc/cpuinfo, /proc/meminfo. */
static int proc_field(const char *path, const char *field, char *out, size_t size)
{
	char line[MAX_LINE];
	size_t flen = strlen(field);
	FILE *f = fopen(path, "re");
	int found = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *colon, *value;

		if (strncmp(line, field, flen) != 0)
			continue;
		colon = strchr(line + flen, ':');
		/* Only spaces and tabs may separate the field name from ':'. */
		if (!colon || strspn(line + flen, " \t") != (size_t)(colon - line - (long)flen))
			continue;
		value = colon + 1 + strspn(colon + 1, " \t");
		value[strcspn(value, "\n")] = '\0';
		snprintf(out, size, "%s", value);
		found = 0;
		break;
	}
	fclose(f);
	return found;
}

static void report_cpu_model(void)
{
	char model[512], impl[64], part[64], variant[64], rev[64];

	/* x86 names the model; arm64 only gives the MIDR fields. */
	if (proc_field("/proc/cpuinfo", "model name", model, sizeof(model)) == 0 ||
	    proc_field("/proc/cpuinfo", "Hardware", model, sizeof(model)) == 0) {
		say("KPERF-ENV cpu_model=%s", model);
		return;
	}
	if (proc_field("/proc/cpuinfo", "CPU implementer", impl, sizeof(impl)) == 0 &&
	    proc_field("/proc/cpuinfo", "CPU part", part, sizeof(part)) == 0) {
		if (proc_field("/proc/cpuinfo", "CPU variant", variant, sizeof(variant)) != 0)
			snprintf(variant, sizeof(variant), "?");
		if (proc_field("/proc/cpuinfo", "CPU revision", rev, sizeof(rev)) != 0)
			snprintf(rev, sizeof(rev), "?");
		say("KPERF-ENV cpu_model=implementer %s part %s variant %s revision %s", impl,
		    part, variant, rev);
	}
}

static void report_environment(void)
{
	struct utsname uts;
	char buf[MAX_LINE];
	long cpus;

	report_cpu_model();
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus > 0)
		say("KPERF-ENV cpus=%ld", cpus);
	if (proc_field("/proc/meminfo", "MemTotal", buf, sizeof(buf)) == 0)
		say("KPERF-ENV mem_total_kb=%ld", strtol(buf, NULL, 10));
	env_from_file("kernel_cmdline", "/proc/cmdline");
	if (uname(&uts) == 0)
		say("KPERF-ENV kernel_release=%s", uts.release);
	env_from_file("thp", "/sys/kernel/mm/transparent_hugepage/enabled");
	env_from_file("clocksource",
		      "/sys/devices/system/clocksource/clocksource0/current_clocksource");
	env_from_file("cpufreq_governor", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
}

/* Machine tuning and hardware counters: tune_machine(), before_command(), after_command(). */
#include "init_tuning.h"

/* A counter name as the console parser takes it: no spaces, no '='. */
static int vmstat_name_ok(const char *name, size_t len)
{
	if (len == 0 || len >= VMSTAT_NAME)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9')))
			return 0;
	}
	return 1;
}

/*
 * "<name> <value>" per line.  Returns -1 when there is no /proc/vmstat (a
 * kernel without procfs' vmstat): the boot then simply reports no counters.
 */
static int read_vmstat(struct vmstat *vs)
{
	char line[256];
	int continued = 0; /* the previous fgets() ended mid-line */
	FILE *f = fopen(VMSTAT_FILE, "re");

	vs->n = 0;
	if (!f)
		return -1;
	while (vs->n < MAX_VMSTAT && fgets(line, sizeof(line), f)) {
		int partial = continued;
		char *space = strchr(line, ' '), *end;
		unsigned long long value;

		continued = strchr(line, '\n') == NULL;
		/* The tail of an overlong line is not a line of its own. */
		if (partial || !space || !vmstat_name_ok(line, (size_t)(space - line)))
			continue;
		errno = 0;
		value = strtoull(space + 1, &end, 10);
		if (errno != 0 || end == space + 1)
			continue;
		memcpy(vs->name[vs->n], line, (size_t)(space - line));
		vs->name[vs->n][space - line] = '\0';
		vs->value[vs->n++] = value;
	}
	fclose(f);
	return 0;
}

/* Index of name in vs; the fields come in the same order every read, so look at i first. */
static int vmstat_find(const struct vmstat *vs, const char *name, int i)
{
	if (i < vs->n && strcmp(vs->name[i], name) == 0)
		return i;
	for (int j = 0; j < vs->n; j++)
		if (strcmp(vs->name[j], name) == 0)
			return j;
	return -1;
}

/*
 * The signed delta of every field, nonzero ones only.  Most fields are
 * event counters that only grow (pgfault, pgalloc_normal, ...); the nr_*
 * fields (nr_free_pages, nr_anon_pages, ...) are gauges, levels of the
 * moment, and their delta is how far the level moved across the command.
 */
static void report_vmstat(int n)
{
	char line[VMSTAT_LINE];
	int len = snprintf(line, sizeof(line), "KPERF-VMSTAT %d", n);

	for (int i = 0; i < vmstat_after.n; i++) {
		char field[VMSTAT_NAME + 32];
		int j = vmstat_find(&vmstat_before, vmstat_after.name[i], i);
		long long delta;
		int flen;

		if (j < 0)
			continue; /* no value from before the command */
		/* Unsigned subtraction then a signed view: a level that fell is negative. */
		delta = (long long)(vmstat_after.value[i] - vmstat_before.value[j]);
		if (delta == 0)
			continue;
		flen = snprintf(field, sizeof(field), " %s=%lld", vmstat_after.name[i], delta);
		if (len + flen >= (int)sizeof(line)) {
			say("%s", line);
			len = snprintf(line, sizeof(line), "KPERF-VMSTAT %d", n);
		}
		memcpy(line + len, field, (size_t)flen + 1);
		len += flen;
	}
	say("%s", line);
}

static void end_by_reboot(void)
{
	char end[32];

	if (read_line_file(END_FILE, end, sizeof(end)) == 0 && strcmp(end, "reboot") == 0)
		reboot_at_end = 1;
}

/* Where a command's output goes: open_pmsg(), copy_output(). */
#include "init_output.h"

static int run_command(int n, char **argv)
{
	int status, have_vmstat, exited = 0;
	int out[2] = { -1, -1 }; /* the command's output, when it must reach pmsg too */
	pid_t pid, w;

	before_command(n);
	say("KPERF-BEGIN %d", n);
	have_vmstat = read_vmstat(&vmstat_before) == 0;
	if (pmsg_fd >= 0 && pipe2(out, O_CLOEXEC) != 0)
		fail("pipe for command %d: %s", n, strerror(errno));
	pid = fork();
	if (pid < 0)
		fail("fork for command %d: %s", n, strerror(errno));
	if (pid == 0) {
		if (out[1] >= 0) {
			/* dup2 clears close-on-exec on 1 and 2; the pipe's own ends close at exec. */
			dup2(out[1], 1);
			dup2(out[1], 2);
			/* Its own messages reach pmsg through the pipe, not twice. */
			pmsg_fd = -1;
		}
		execvp(argv[0], argv);
		/* Not a marker: this is the command's own failure, reported by END. */
		say("kperf-init: cannot execute %s: %s", argv[0], strerror(errno));
		_exit(127);
	}
	if (out[1] >= 0) {
		close(out[1]);
		exited = copy_output(out[0], pid, &status);
	}
	/* PID 1 inherits every orphan: reap them too until our child ends. */
	while (!exited) {
		w = waitpid(-1, &status, 0);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			fail("wait for command %d: %s", n, strerror(errno));
	}
	have_vmstat = have_vmstat && read_vmstat(&vmstat_after) == 0;
	if (WIFEXITED(status))
		status = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		status = 128 + WTERMSIG(status);
	else
		status = 255;
	say("KPERF-END %d %d", n, status);
	/* After END, outside the command's output, so it never reaches the benchmark's parser. */
	if (have_vmstat)
		report_vmstat(n);
	after_command(n);
	return status;
}

static void run_job(void)
{
	char line[MAX_LINE];
	char *argv[MAX_ARGS + 1];
	FILE *f = fopen(JOB_FILE, "re");
	int n = 0, lineno = 0;

	if (!f)
		fail("open %s: %s", JOB_FILE, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);
		int argc = 0;
		char *p;

		lineno++;
		if (len > 0 && line[len - 1] == '\n')
			line[--len] = '\0';
		else if (!feof(f))
			fail("%s line %d: longer than %d bytes", JOB_FILE, lineno, MAX_LINE - 2);
		if (len == 0)
			continue;
		for (p = line;;) {
			char *space = strchr(p, ' ');

			if (argc == MAX_ARGS)
				fail("%s line %d: more than %d arguments", JOB_FILE, lineno, MAX_ARGS);
			if (space)
				*space = '\0';
			if (*p == '\0')
				fail("%s line %d: empty argument (two spaces in a row?)", JOB_FILE,
				     lineno);
			argv[argc++] = p;
			if (!space)
				break;
			p = space + 1;
		}
		argv[argc] = NULL;
		if (run_command(n, argv) != 0)
			break;
		n++;
	}
	if (ferror(f))
		fail("read %s: %s", JOB_FILE, strerror(errno));
	fclose(f);
}

int main(void)
{
	const char *pmsg_path;
	char end[16];

	/* Never mount over or power off a running system by accident. */
	if (getpid() != 1) {
		fprintf(stderr, "kperf-init: must run as PID 1 (the initramfs's /init)\n");
		return 2;
	}
	/*
	 * First, before anything can fail: a machine that powers itself off
	 * stays off, where one that reboots comes back to its own kernel.
	 */
	end_by_reboot();
	no_power_off = getenv("KPERF_INIT_NO_POWER_OFF") != NULL;
	pmsg_path = getenv("KPERF_INIT_PMSG");
	if (pmsg_path)
		pmsg_path = strdup(pmsg_path); /* clearenv() below frees the environment */
	/* The kernel hands init unknown boot parameters as environment. */
	clearenv();
	setenv("PATH", "/kperf/bin:/bin:/sbin", 1);
	setenv("HOME", "/", 1);
	if (chdir("/") != 0)
		fail("chdir /: %s", strerror(errno));

	mount_fs("proc", "/proc", 1);
	mount_fs("sysfs", "/sys", 0);
	mount_fs("devtmpfs", "/dev", 0);
	ensure_console();
	open_pmsg(pmsg_path);
	if (cmdline_value("kperf.end", end, sizeof(end)) == 0 && strcmp(end, "reboot") == 0)
		reboot_at_end = 1;
	if (access("/sys/kernel/debug", F_OK) == 0)
		mount_fs("debugfs", "/sys/kernel/debug", 0);

	/* Firmware and the kernel may leave a partial line on the console. */
	emit("\n", 1);
	report_environment();
	tune_machine();
	run_job();
	say("KPERF-DONE");
	power_off(0);
}
