/*
 * Part of init.c, through init_tuning.h (included once, where say(),
 * read_line_file() and proc_field() are defined).
 *
 * Swap and NUMA as a real machine has them.  A kernel with zram (the mm and
 * distro profiles) gets a zram swap device of half the memory, so reclaim
 * has somewhere to put anonymous pages: a memory cgroup with a limit (pft's
 * -c) then measures what reclaim and swap-out cost, as on a laptop or a
 * server without a swap partition.  A kernel without zram (tiny) keeps no
 * swap.  Both are recorded as KPERF-ENV facts (swap, then swap_total_kb),
 * with the NUMA nodes the kernel sees.
 */
#include <dirent.h>
#include <sys/swap.h>

#define ZRAM_DISKSIZE "/sys/block/zram0/disksize"
#define ZRAM_DEV "/dev/zram0"
#define NODE_DIR "/sys/devices/system/node"

/*
 * The swap header mkswap writes (include/linux/swap.h, union swap_header):
 * version 1 at byte 1024, then the last page's number and no bad pages; the
 * magic "SWAPSPACE2" ends the first page.
 */
static int write_swap_header(const char *dev, unsigned long long bytes)
{
	long page = sysconf(_SC_PAGESIZE);
	unsigned char *hdr;
	unsigned int version = 1, last_page, nr_bad = 0;
	int fd, rc = -1;

	if (page <= 0 || (unsigned long long)page * 10 > bytes)
		return -1;
	last_page = (unsigned int)(bytes / (unsigned long long)page - 1);
	hdr = calloc(1, (size_t)page);
	if (hdr == NULL)
		return -1;
	memcpy(hdr + 1024, &version, 4);
	memcpy(hdr + 1028, &last_page, 4);
	memcpy(hdr + 1032, &nr_bad, 4);
	memcpy(hdr + page - 10, "SWAPSPACE2", 10);
	fd = open(dev, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, hdr, (size_t)page) == page && fsync(fd) == 0)
			rc = 0;
		close(fd);
	}
	free(hdr);
	return rc;
}

static void setup_swap(int apply)
{
	char buf[MAX_LINE], size[32];
	unsigned long long bytes;

	if (access(ZRAM_DISKSIZE, F_OK) != 0) {
		say("KPERF-ENV swap=none (no zram in this kernel)");
		return;
	}
	if (!apply) {
		say("KPERF-ENV swap=not set up (init is not the machine's own PID 1)");
		return;
	}
	if (proc_field("/proc/meminfo", "MemTotal", buf, sizeof(buf)) != 0) {
		say("KPERF-ENV swap=none (MemTotal unreadable)");
		return;
	}
	bytes = strtoull(buf, NULL, 10) * 1024ULL / 2;
	snprintf(size, sizeof(size), "%llu", bytes);
	/* A failure leaves the boot without swap, said in the facts: the jobs
	 * that need swap (pft -c) refuse to run without it. */
	if (write_text(ZRAM_DISKSIZE, size) != 0) {
		say("KPERF-ENV swap=none (%s: %s)", ZRAM_DISKSIZE, strerror(errno));
		return;
	}
	if (write_swap_header(ZRAM_DEV, bytes) != 0) {
		say("KPERF-ENV swap=none (swap header on %s: %s)", ZRAM_DEV, strerror(errno));
		return;
	}
	if (swapon(ZRAM_DEV, 0) != 0) {
		say("KPERF-ENV swap=none (swapon %s: %s)", ZRAM_DEV, strerror(errno));
		return;
	}
	if (read_line_file("/sys/block/zram0/comp_algorithm", buf, sizeof(buf)) != 0)
		snprintf(buf, sizeof(buf), "unknown");
	say("KPERF-ENV swap=zram %llu MiB, compressor %s", bytes >> 20, buf);
}

/* The NUMA nodes the kernel brought up (node0, node1, ...), or absent. */
static void report_numa(void)
{
	DIR *dir = opendir(NODE_DIR);
	struct dirent *d;
	int nodes = 0;

	if (dir == NULL) {
		say("KPERF-ENV numa_nodes=absent");
		return;
	}
	while ((d = readdir(dir)) != NULL)
		if (strncmp(d->d_name, "node", 4) == 0 && d->d_name[4] >= '0' && d->d_name[4] <= '9')
			nodes++;
	closedir(dir);
	say("KPERF-ENV numa_nodes=%d", nodes);
}
