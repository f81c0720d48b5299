// SPDX-License-Identifier: GPL-2.0
/*
 * pagealloc: kperf's page-allocator microbenchmark.
 *
 * Written for kperf from the description in BENCHMARKS.md.  At load time, in
 * the loading process's context (kperf's kmodload pins itself to one CPU
 * first), for each order and each batch size:
 *
 *   for OUTER rounds:
 *     for INNER repetitions:
 *       read the cycle counter, allocate batch + 1 blocks of 2^order pages
 *       with alloc_pages(GFP_KERNEL | __GFP_NOWARN, order), add the elapsed
 *       cycles to the alloc total; time freeing them with __free_pages the
 *       same way
 *     record "order %2u batch %6lu alloc %llu free %llu", the totals divided
 *     by INNER and by batch, then on a line of its own the totals themselves
 *     and that divisor: "pagealloc-total: order %d batch %lu ops %llu alloc
 *     %llu free %llu", ops = INNER * batch
 *
 * The first line is the row of mmtests' stap-scripts/pagealloc-micro.stp,
 * which its extractor reads; it rounds down to whole cycles, and a whole
 * cycle can be half a percent of a figure on the instruction clock, as much
 * as the changes kperf has to tell apart there.  The second keeps the mean's decimals
 * (alloc / ops, to one part in INNER * batch) for kperf; it does not start
 * with "order", and kperf's copy of pagealloc.log for mmtests leaves it out.
 * ops counts batch blocks per repetition, though batch + 1 are allocated,
 * so that alloc / ops is the row's figure before the rounding.
 *
 * Batches double from 1 while batch < (batch_limit_kb * 1024 / 4096) >> order
 * (128 MiB: 1..16384 for order 0).  The cycle counter is get_cycles(): the
 * TSC on x86_64, the virtual counter (CNTVCT_EL0) on arm64; the output names
 * it ("clock: tsc").  The results stay readable in /proc/kperf_pagealloc
 * until the module is unloaded.  procfs rather than debugfs, so nothing has
 * to be mounted; rather than printk, so the console's log level and the
 * kernel log's size do not matter.
 *
 * Load fails with -ENOMEM if a round could not allocate (the machine is too
 * small for batch_limit_kb) and -EINVAL for bad parameters, so a broken run
 * never looks like a result.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/kernel.h>
#include <linux/gfp.h>
#include <linux/mm.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/version.h>
#include <asm/timex.h>

#define PROC_NAME "kperf_pagealloc"

/* The largest order the buddy allocator hands out, across kernel versions. */
#if defined(MAX_PAGE_ORDER)
#define TOP_ORDER MAX_PAGE_ORDER
#else
#define TOP_ORDER (MAX_ORDER - 1) /* before 6.4 MAX_ORDER was exclusive */
#endif
#define MAX_ORDERS 11

static int orders[MAX_ORDERS] = { 0, 1, 2, 3, 4 };
static int norders = 5;
module_param_array(orders, int, &norders, 0444);
MODULE_PARM_DESC(orders, "orders to measure (default 0,1,2,3,4)");

static unsigned long batch_limit_kb = 128 * 1024;
module_param(batch_limit_kb, ulong, 0444);
MODULE_PARM_DESC(batch_limit_kb, "batch < (batch_limit_kb * 1024 / 4096) >> order (default 131072)");

static unsigned int outer = 15;
module_param(outer, uint, 0444);
MODULE_PARM_DESC(outer, "rounds per order and batch, one output line each (default 15)");

static unsigned int inner = 10000;
module_param(inner, uint, 0444);
MODULE_PARM_DESC(inner, "repetitions per round (default 10000)");

#if defined(CONFIG_X86)
#define CLOCK_NAME "tsc"
#elif defined(CONFIG_ARM64)
#define CLOCK_NAME "cntvct"
#else
#define CLOCK_NAME "get_cycles"
#endif

static char *results;
static size_t results_size, results_len;

static __printf(1, 2) void emit(const char *fmt, ...)
{
	va_list ap;
	int n;

	if (results_len >= results_size)
		return;
	va_start(ap, fmt);
	n = vsnprintf(results + results_len, results_size - results_len, fmt, ap);
	va_end(ap);
	if (n > 0)
		results_len = min(results_len + (size_t)n, results_size - 1);
}

static unsigned long batch_limit(int order)
{
	return ((batch_limit_kb * 1024UL) / 4096UL) >> order;
}

static int measure(int order, unsigned long batch, struct page **pages)
{
	unsigned long long alloc_total = 0, free_total = 0;
	unsigned int rep;
	unsigned long i;
	cycles_t start;

	for (rep = 0; rep < inner; rep++) {
		int failed = 0;

		start = get_cycles();
		for (i = 0; i <= batch; i++) {
			pages[i] = alloc_pages(GFP_KERNEL | __GFP_NOWARN, order);
			if (unlikely(!pages[i]))
				failed = 1;
		}
		alloc_total += get_cycles() - start;

		start = get_cycles();
		for (i = 0; i <= batch; i++)
			if (pages[i])
				__free_pages(pages[i], order);
		free_total += get_cycles() - start;

		if (failed) {
			pr_err("kperf_pagealloc: order %d batch %lu: allocation failed\n", order,
			       batch);
			return -ENOMEM;
		}
		/* Outside the timed sections: no soft lockups on long rounds. */
		cond_resched();
	}
	emit("order %2d batch %6lu alloc %llu free %llu\n", order, batch,
	     div_u64(div_u64(alloc_total, inner), batch), div_u64(div_u64(free_total, inner), batch));
	emit("pagealloc-total: order %d batch %lu ops %llu alloc %llu free %llu\n", order, batch,
	     (unsigned long long)inner * batch, alloc_total, free_total);
	return 0;
}

static int run(void)
{
	unsigned long most = 0, lines = 0, batch;
	struct page **pages;
	unsigned int round;
	int o, ret = 0;

	if (norders < 1 || outer < 1 || inner < 1)
		return -EINVAL;
	for (o = 0; o < norders; o++) {
		if (orders[o] < 0 || orders[o] > TOP_ORDER)
			return -EINVAL;
		for (batch = 1; batch < batch_limit(orders[o]); batch <<= 1)
			lines += outer;
		most = max(most, batch_limit(orders[o]));
	}
	if (lines == 0)
		return -EINVAL;
	/* A row and its total line, with room for 20-digit totals; emit() cuts, never overruns. */
	results_size = 128 + lines * (64 + 144);
	results = vzalloc(results_size);
	pages = vzalloc((most + 1) * sizeof(*pages));
	if (!results || !pages) {
		ret = -ENOMEM;
		goto out;
	}
	emit("clock: %s\n", CLOCK_NAME);
	emit("pagealloc-info: cpu=%d outer=%u inner=%u batch_limit_kb=%lu page_size=%lu\n",
	     raw_smp_processor_id(), outer, inner, batch_limit_kb, PAGE_SIZE);
	for (o = 0; o < norders && !ret; o++)
		for (batch = 1; batch < batch_limit(orders[o]) && !ret; batch <<= 1)
			for (round = 0; round < outer && !ret; round++)
				ret = measure(orders[o], batch, pages);
out:
	vfree(pages);
	if (ret) {
		vfree(results);
		results = NULL;
	}
	return ret;
}

static int results_show(struct seq_file *m, void *v)
{
	seq_write(m, results, results_len);
	return 0;
}

static int results_open(struct inode *inode, struct file *file)
{
	return single_open(file, results_show, NULL);
}

#if LINUX_VERSION_CODE >= KERNEL_VERSION(5, 6, 0)
static const struct proc_ops results_fops = {
	.proc_open = results_open,
	.proc_read = seq_read,
	.proc_lseek = seq_lseek,
	.proc_release = single_release,
};
#else
static const struct file_operations results_fops = {
	.owner = THIS_MODULE,
	.open = results_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
};
#endif

static int __init pagealloc_init(void)
{
	int ret = run();

	if (ret)
		return ret;
	if (!proc_create(PROC_NAME, 0444, NULL, &results_fops)) {
		vfree(results);
		return -ENOMEM;
	}
	return 0;
}

static void __exit pagealloc_exit(void)
{
	remove_proc_entry(PROC_NAME, NULL);
	vfree(results);
}

module_init(pagealloc_init);
module_exit(pagealloc_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("kperf page-allocator microbenchmark (alloc/free cycles per order and batch)");
