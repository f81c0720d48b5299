/*
 * kmodload: load a benchmark module, print what it measured, unload it.
 *
 *   kmodload [-c CPU] [-o RESULT_FILE] MODULE.ko [param=value ...]
 *
 * The module does its work in its init function, in this process's context,
 * so pinning this process (-c) pins the measurement.  The parameters are
 * passed as the kernel takes them ("orders=0,1,2 outer=15").  After a
 * successful load, RESULT_FILE (the module's procfs file) is copied to
 * stdout, then the module is removed.  Loading uses finit_module(2), or
 * init_module(2) on kernels older than 3.8.  Static, libc only: it runs as a
 * command of kperf's initramfs.  Any failure exits non-zero with a message.
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
	fprintf(stderr, "usage: kmodload [-c CPU] [-o RESULT_FILE] MODULE.ko [param=value ...]\n");
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
	int opt;

	while ((opt = getopt(argc, argv, "+c:o:h")) != -1) {
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
	module_name(argv[optind], name, sizeof(name));
	pin(cpu);
	printf("kmodload: module=%s cpu=%ld params=%s\n", name, cpu, params);
	fflush(stdout);
	load(argv[optind], params);
	if (result)
		copy_out(result);
	if (syscall(SYS_delete_module, name, O_NONBLOCK) != 0)
		die("unloading %s: %s", name, strerror(errno));
	return 0;
}
