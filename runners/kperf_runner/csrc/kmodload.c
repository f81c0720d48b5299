/*
 * kmodload: load a benchmark module, print what it measured, unload it.
 *
 *   kmodload [-c CPU] [-s] [-o RESULT_FILE] MODULE.ko [param=value ...]
 *
 * The module does its work in its init function, in this process's context,
 * so pinning this process (-c) pins the measurement.  The parameters are
 * passed as the kernel takes them ("orders=0,1,2 outer=15").  After a
 * successful load, RESULT_FILE (the module's procfs file) is copied to
 * stdout, then the module is removed.  Loading uses finit_module(2), or
 * init_module(2) on kernels older than 3.8.  Static, libc only: it runs as a
 * command of kperf's initramfs.  Any failure exits non-zero with a message.
 *
 * -s (solo, with -c) takes every other online CPU offline for the load and
 * brings it back after the unload.  On a machine of several CPUs the page
 * allocator's module then runs alone: no other CPU takes pages from the
 * buddy lists between its rounds, and the per-CPU list limits are those of
 * one online CPU.  Without it, where the other CPUs' periodic work lands
 * against the rounds moved the readings from boot to boot and with any change
 * to the kernel (docs/benchmarks.md, "The page allocator on one vCPU and on
 * two").  The CPUs taken offline are printed on kmodload's line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define PROGRAM "kmodload"
#include "kperf_bench.h"

static void usage(void)
{
	fprintf(stderr, "usage: kmodload [-c CPU] [-s] [-o RESULT_FILE] MODULE.ko [param=value ...]\n");
	exit(2);
}

/* "pagealloc" from ".../pagealloc.ko": the name delete_module wants. */
static void module_name(const char *path, char *name, size_t size)
{
	const char *base = strrchr(path, '/');
	size_t len;

	base = base ? base + 1 : path;
	len = strcspn(base, ".");
	if (len == 0 || len >= size)
		die("cannot tell the module's name from '%s'", path);
	memcpy(name, base, len);
	name[len] = '\0';
	for (char *p = name; *p; p++)
		if (*p == '-')
			*p = '_';
}

static const char *explain(int err)
{
	switch (err) {
	case EPERM:
		return " (loading modules needs root, or module loading is disabled)";
	case ENOEXEC:
	case EINVAL:
		return " (built for another kernel or arch? the kernel log says more)";
	case EEXIST:
		return " (already loaded: a previous run did not unload it)";
	case ENOMEM:
		return " (the benchmark could not allocate: parameters too large for this machine?)";
	case ENOSYS:
		return " (this kernel has no CONFIG_MODULES)";
	default:
		return "";
	}
}

static void load(const char *path, const char *params)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	void *image;

	if (fd < 0)
		die("open %s: %s", path, strerror(errno));
	if (syscall(SYS_finit_module, fd, params, 0) == 0) {
		close(fd);
		return;
	}
	if (errno != ENOSYS) {
		int err = errno;

		die("loading %s failed: %s%s", path, strerror(err), explain(err));
	}
	/* No finit_module (before 3.8): hand the kernel the image. */
	if (fstat(fd, &st) != 0)
		die("stat %s: %s", path, strerror(errno));
	image = malloc((size_t)st.st_size);
	if (!image)
		die("out of memory for %s", path);
	if (read(fd, image, (size_t)st.st_size) != st.st_size)
		die("read %s: %s", path, strerror(errno));
	close(fd);
	if (syscall(SYS_init_module, image, (unsigned long)st.st_size, params) != 0) {
		int err = errno;

		die("loading %s failed: %s%s", path, strerror(err), explain(err));
	}
	free(image);
}

#define CPU_SYSFS "/sys/devices/system/cpu"

/*
 * The CPUs -s took offline.  Brought back at exit, also when a failed load
 * exits through die(): the boot's next commands run on the machine's CPUs.
 */
static cpu_set_t offline_here;

/* Write "0" or "1" to cpuN/online; errno's message on failure, NULL on success. */
static const char *set_online(int cpu, int online)
{
	char path[64];
	int fd, err = 0;

	snprintf(path, sizeof(path), CPU_SYSFS "/cpu%d/online", cpu);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return strerror(errno);
	if (write(fd, online ? "1" : "0", 1) != 1)
		err = errno;
	close(fd);
	return err ? strerror(err) : NULL;
}

/*
 * Whether CPU `cpu` is there and online; `can_go` says whether it has an
 * online file.  A CPU without one is one the kernel cannot take down (the
 * boot CPU on some kernels, any CPU without CONFIG_HOTPLUG_CPU).
 */
static int is_online(int cpu, int *can_go)
{
	char path[64], state = '1';
	int fd;

	snprintf(path, sizeof(path), CPU_SYSFS "/cpu%d", cpu);
	if (access(path, F_OK) != 0)
		return 0;
	snprintf(path, sizeof(path), CPU_SYSFS "/cpu%d/online", cpu);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	*can_go = fd >= 0;
	if (fd >= 0) {
		if (read(fd, &state, 1) != 1)
			state = '1';
		close(fd);
	}
	return state != '0';
}

/*
 * Take every online CPU but `keep` offline, into offline_here, and write
 * their numbers as text into `list`.  A CPU already offline is left as it
 * is (and so not brought online at exit), one without an online file stays
 * up; an online one that refuses to go is an error.
 */
static void go_solo(long keep, char *list, size_t size)
{
	size_t used = 0;

	list[0] = '\0';
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		const char *why;
		int can_go = 0;

		if (cpu == keep || !is_online(cpu, &can_go) || !can_go)
			continue;
		why = set_online(cpu, 0);
		if (why)
			die("-s: taking CPU %d offline: %s (does this kernel have CONFIG_HOTPLUG_CPU?)", cpu, why);
		CPU_SET(cpu, &offline_here);
		used += (size_t)snprintf(list + used, size - used, "%s%d", used ? "," : "", cpu);
		if (used >= size)
			die("-s: too many CPUs to list");
	}
}

static void back_online(void)
{
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		const char *why;

		if (!CPU_ISSET(cpu, &offline_here))
			continue;
		CPU_CLR(cpu, &offline_here);
		why = set_online(cpu, 1);
		if (why) {
			fprintf(stderr, PROGRAM ": -s: bringing CPU %d back online: %s\n", cpu, why);
			_exit(1);
		}
	}
}

static void copy_out(const char *path)
{
	char buf[65536];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		die("the module loaded but %s cannot be opened: %s", path, strerror(errno));
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("read %s: %s", path, strerror(errno));
		}
		if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
			die("writing the results: %s", strerror(errno));
	}
	close(fd);
	if (fflush(stdout) != 0)
		die("writing the results: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	const char *result = NULL;
	char name[256], *params;
	size_t len = 1;
	long cpu = -1;
	int opt, solo = 0;
	char offlined[1024] = "";

	CPU_ZERO(&offline_here);
	while ((opt = getopt(argc, argv, "+c:o:sh")) != -1) {
		switch (opt) {
		case 'c': {
			char *end;

			errno = 0;
			cpu = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || cpu < -1 || cpu >= CPU_SETSIZE)
				die("-c wants a CPU number, got '%s'", optarg);
			break;
		}
		case 'o':
			result = optarg;
			break;
		case 's':
			solo = 1;
			break;
		default:
			usage();
		}
	}
	if (optind >= argc)
		usage();
	for (int i = optind + 1; i < argc; i++)
		len += strlen(argv[i]) + 1;
	params = calloc(1, len);
	if (!params)
		die("out of memory");
	for (int i = optind + 1; i < argc; i++) {
		if (!strchr(argv[i], '='))
			die("module parameter '%s' is not param=value", argv[i]);
		if (i > optind + 1)
			strcat(params, " ");
		strcat(params, argv[i]);
	}
	if (solo && cpu < 0)
		die("-s keeps one CPU online: name it with -c");
	module_name(argv[optind], name, sizeof(name));
	pin(cpu);
	if (solo) {
		if (atexit(back_online) != 0)
			die("atexit failed");
		go_solo(cpu, offlined, sizeof(offlined));
		printf("kmodload: module=%s cpu=%ld solo offlined=%s params=%s\n", name, cpu,
		       offlined[0] ? offlined : "none", params);
	} else {
		printf("kmodload: module=%s cpu=%ld params=%s\n", name, cpu, params);
	}
	fflush(stdout);
	load(argv[optind], params);
	if (result)
		copy_out(result);
	if (syscall(SYS_delete_module, name, O_NONBLOCK) != 0)
		die("unloading %s: %s", name, strerror(errno));
	back_online();
	return 0;
}
