/*
 * Part of init.c (included once, after say(), emit() and pmsg_fd): where a
 * command's output goes, kept apart to keep each file readable.
 */
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>

/*
 * pmsg is a ring buffer (8 MiB of ramoops): a command printing more would
 * overwrite the start of the transcript, its KPERF-ENV and KPERF-BEGIN lines
 * included.  So at most this much of the commands' output, per boot, is
 * copied to pmsg; init's own lines always are, and the console keeps all.
 */
#define PMSG_OUTPUT_MAX (4UL << 20)
static unsigned long pmsg_output;

/*
 * pmsg: /dev/pmsg0 when the kernel has one (after devtmpfs is mounted);
 * tests running init in a PID namespace name a file with KPERF_INIT_PMSG
 * instead (and never touch the host's pmsg).
 */
static void open_pmsg(const char *test_path)
{
	if (test_path)
		pmsg_fd = open(test_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	else if (!no_power_off)
		pmsg_fd = open(PMSG_DEVICE, O_WRONLY | O_CLOEXEC);
}

/* A piece of a command's output: all of it to the console, to pmsg up to PMSG_OUTPUT_MAX. */
static void emit_output(const char *buf, size_t len)
{
	static char last = '\n'; /* the last byte of output pmsg got */
	size_t kept = len;

	write_all(1, buf, len);
	if (pmsg_fd < 0 || pmsg_output > PMSG_OUTPUT_MAX)
		return;
	if (kept > PMSG_OUTPUT_MAX - pmsg_output)
		kept = PMSG_OUTPUT_MAX - pmsg_output;
	if (kept > 0) {
		write_all(pmsg_fd, buf, kept);
		pmsg_output += kept;
		last = buf[kept - 1];
	}
	if (kept < len) {
		char note[128];
		/* On a line of its own, even when the cut falls inside a line. */
		int n = snprintf(note, sizeof(note), "%skperf-init: output beyond %lu bytes not kept in pmsg\n",
				 last == '\n' ? "" : "\n", PMSG_OUTPUT_MAX);

		write_all(pmsg_fd, note, (size_t)n);
		pmsg_output = PMSG_OUTPUT_MAX + 1; /* said once per boot */
	}
}

/* SIGCHLD only has to interrupt ppoll() below: a handler that does nothing. */
static void on_child(int sig)
{
	(void)sig;
}

/* Reap whatever ended (PID 1 inherits every orphan); whether pid was among them. */
static int reaped(pid_t pid, int *status)
{
	pid_t w;
	int s;

	while ((w = waitpid(-1, &s, WNOHANG)) > 0)
		if (w == pid) {
			*status = s;
			return 1;
		}
	return 0;
}

/*
 * A command's stdout and stderr, copied to the console and pmsg as they come
 * until it exits or every writer closed the pipe; 1 when it reaped the
 * command (its wait status in *status).  Not until every writer closed it:
 * a child the command left behind holding its output would keep init, and
 * the machine, waiting forever.  Once the command has exited, what is in the
 * pipe is copied and the rest of that child's output is not.
 */
static int copy_output(int fd, pid_t pid, int *status)
{
	struct sigaction sa = { .sa_handler = on_child, .sa_flags = SA_RESTART };
	struct pollfd in = { .fd = fd, .events = POLLIN };
	sigset_t chld, unblocked;
	char buf[4096];
	int exited = 0, left = 0;
	ssize_t n;

	sigaction(SIGCHLD, &sa, NULL);
	/*
	 * Blocked except inside ppoll(), which unblocks it atomically: a child
	 * ending between waitpid() and ppoll() still interrupts ppoll().  Only
	 * after the fork: the command must not inherit a blocked SIGCHLD.
	 */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &unblocked);
	fcntl(fd, F_SETFL, O_NONBLOCK); /* our end only: the command's stays blocking */
	for (;;) {
		n = read(fd, buf, sizeof(buf));
		if (n > 0) {
			emit_output(buf, (size_t)n);
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			break; /* every writer closed it */
		if (reaped(pid, status)) {
			exited = 1;
			break;
		}
		if (ppoll(&in, 1, NULL, &unblocked) < 0 && errno != EINTR)
			break;
	}
	/* What the command wrote before it exited, and no more. */
	if (exited && ioctl(fd, FIONREAD, &left) == 0)
		while (left > 0 && (n = read(fd, buf, sizeof(buf) < (size_t)left ? sizeof(buf) : (size_t)left)) != 0) {
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				break;
			emit_output(buf, (size_t)n);
			left -= (int)n;
		}
	sigprocmask(SIG_SETMASK, &unblocked, NULL);
	close(fd);
	return exited;
}
