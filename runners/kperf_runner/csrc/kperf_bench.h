/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared by kperf's benchmark programs. Each program stays one
 * self-contained static binary: define PROGRAM (its name, for messages)
 * and include this after the system headers.
 */
#ifndef KPERF_BENCH_H
#define KPERF_BENCH_H

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef PROGRAM
#error "define PROGRAM before including kperf_bench.h"
#endif

static inline void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs(PROGRAM ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static inline long parse_long(const char *opt, const char *s, long min, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end != '\0' || v < min || v > max)
		die("%s wants an integer in [%ld, %ld], got '%s'", opt, min, max, s);
	return v;
}

/* Seconds (fractions allowed) in (0, 86400], as -t takes them. */
static inline double parse_seconds(const char *opt, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end != '\0' || !isfinite(v) || v <= 0 || v > 86400)
		die("%s wants seconds in (0, 86400], got '%s'", opt, s);
	return v;
}

/* The monotonic clock in seconds: what every program times its rounds by. */
static inline double now_seconds(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		die("clock_gettime(CLOCK_MONOTONIC): %s", strerror(errno));
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Pin the calling process to one CPU (cpu < 0: leave it where it is). */
static inline void pin(long cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET((int)cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		die("cannot pin to CPU %ld: %s", cpu, strerror(errno));
}

#endif
