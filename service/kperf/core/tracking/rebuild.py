"""Rebuilding every history summary from the raw samples (`kperf-manage rebuild_history`).

One pass over the samples, in PostgreSQL's order: each boot's iterations of
a metric arrive as one array, kernels' runs one after another. Runs of the
same shape (boots x iterations) are reduced together (kperf.stats.noise.
run_stats_batch), which is what makes tens of millions of samples take
minutes, not the hour a query and a call per kernel would. The pass reads
one snapshot; the summaries are then replaced in one short transaction, so
readers see the old summaries until the new ones are complete.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from django.db import connection, transaction

from kperf.core.models import CommitSummary, Job, NoisePool, RunSummary, SeriesCatchUp, SeriesPool, SeriesState
from kperf.core.results import drift_pools, summaries
from kperf.stats import history as sh
from kperf.stats.abtest import boot_summaries
from kperf.stats.noise import RunStats, run_stats, run_stats_batch

log = logging.getLogger(__name__)

RunKey = tuple[int, str, str, str, str, str]  # machine class, clock, benchmark, grid, sha, metric
CommitKey = tuple[int, int, str, str, str]  # commit, machine class, benchmark, clock, metric
RUN_KEY = ["machine_class_id", "clock", "benchmark", "grid", "sha", "metric"]
COMMIT_KEY = ["commit_id", "machine_class_id", "benchmark", "clock", "metric"]

# Every finished boot's iterations of one metric, as one array, a kernel's runs together.
BOOTS_SQL = """
SELECT j.machine_class_id, j.clock, j.benchmark, j.grid, b.sha, s.metric, j.branch_commit_id, j.seq, r.boot,
       array_agg(s.value ORDER BY s.iteration)
FROM core_sample s
JOIN core_bootrecord r ON r.id = s.boot_record_id
JOIN core_job j ON j.id = r.job_id
JOIN core_kernelbuild b ON b.id = j.build_id
JOIN core_machineclass m ON m.id = j.machine_class_id
WHERE j.status = 'done' AND j.boot_params = '' AND j.thp = ''
  AND b.profile = m.profile AND j.vcpus = m.vcpus AND j.numa_nodes = m.numa_nodes
GROUP BY j.id, r.id, b.sha, s.metric
ORDER BY j.machine_class_id, j.clock, j.benchmark, j.grid, b.sha, s.metric, j.finished, r.boot
"""


@dataclass
class Boot:
    commit: int | None
    order: tuple[int, int]  # (job seq, boot): a commit's boots in run order
    values: list[float]


@dataclass
class Pass:
    """What the pass over the samples produces."""

    runs: list[tuple[RunKey, RunStats]] = field(default_factory=list)
    # Per tracked commit and metric: (order, summary on the linear scale, on the log scale, samples).
    commit_boots: dict[CommitKey, list[tuple[tuple[int, int], float, float, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    pending: dict[tuple[int, int], list[tuple[RunKey, list[Boot]]]] = field(default_factory=lambda: defaultdict(list))

    def add_run(self, key: RunKey, boots: list[Boot]) -> None:
        boots = [Boot(b.commit, b.order, [v for v in b.values if math.isfinite(v)]) for b in boots]
        boots = [b for b in boots if b.values]
        if not boots:
            return
        n = len(boots[0].values)
        if all(len(b.values) == n for b in boots):
            self.pending[(len(boots), n)].append((key, boots))
            if len(self.pending[(len(boots), n)]) >= 5000:
                self.flush((len(boots), n))
            return
        # Boots of different lengths: one by one.
        stats = run_stats([b.values for b in boots])
        if stats is not None:
            self.runs.append((key, stats))
        lin = boot_summaries([b.values for b in boots], False)
        for b, s in zip(boots, lin, strict=True):
            positive = all(v > 0 for v in b.values)
            lg = float(boot_summaries([b.values], True)[0]) if positive else math.nan
            self._commit_boot(key, b, float(s), lg)

    def flush(self, shape: tuple[int, int]) -> None:
        group = self.pending.pop(shape, [])
        if not group:
            return
        x = np.array([[b.values for b in boots] for _, boots in group], dtype=float)
        stats, lin, lg = run_stats_batch(x)
        for i, ((key, boots), s) in enumerate(zip(group, stats, strict=True)):
            self.runs.append((key, s))
            for j, b in enumerate(boots):
                self._commit_boot(key, b, float(lin[i, j]), float(lg[i, j]))

    def _commit_boot(self, key: RunKey, b: Boot, lin: float, lg: float) -> None:
        if b.commit is not None:
            mclass, clock, bench, _, _, metric = key
            self.commit_boots[(b.commit, mclass, bench, clock, metric)].append((b.order, lin, lg, len(b.values)))


def _rows() -> Iterator[tuple[RunKey, list[Boot]]]:
    """Each kernel's run of one metric (its key and boots), streamed from the samples."""
    key: RunKey | None = None
    boots: list[Boot] = []
    with connection.chunked_cursor() as cursor:
        cursor.execute(BOOTS_SQL)
        while chunk := cursor.fetchmany(20000):
            for mclass, clock, bench, grid, sha, metric, commit, seq, boot, values in chunk:
                k = (mclass, clock, bench, grid, sha, metric)
                if k != key:
                    if key is not None:
                        yield key, boots
                    key, boots = k, []
                boots.append(Boot(commit, (seq, boot), values))
    if key is not None:
        yield key, boots


def _commit_row(key: CommitKey, boots: list[tuple[tuple[int, int], float, float, int]]) -> tuple[object, ...]:
    boots.sort(key=lambda b: b[0])
    positive = all(math.isfinite(b[2]) for b in boots)
    lin = sh.build_stat(np.array([b[1] for b in boots]))
    lg = sh.build_stat(np.array([b[2] for b in boots])) if positive else None
    commit, mclass, bench, clock, metric = key
    return (
        commit,
        mclass,
        bench,
        clock,
        metric,
        len(boots),
        sum(b[3] for b in boots),
        positive,
        lg.mean if lg else None,
        lg.ss if lg else None,
        lin.mean,
        lin.ss,
    )


def _copy(table: str, columns: list[str], rows: Iterator[tuple[object, ...]] | list[tuple[object, ...]]) -> None:
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def rebuild(window: int, progress: bool = False) -> dict[str, int]:
    """Recompute every summary from the raw samples (after a migration, or to check them)."""
    out, jobs = _read(progress)
    _store(out, jobs)
    if progress:
        log.info("rebuild: %d kernel runs and %d commits summarised", len(out.runs), len(out.commit_boots))
    series = _rebuild_series(window)
    kernels = {k[:5] for k, _ in out.runs}
    return {"kernels": len(kernels), "commits": len({k[0] for k in out.commit_boots}), "series": len(series)}


def _read(progress: bool) -> tuple[Pass, list[int]]:
    """Every finished run's samples summarised, from one snapshot; and the jobs that snapshot covers."""
    out = Pass()
    outer = connection.in_atomic_block
    with transaction.atomic():
        if not outer:
            with connection.cursor() as cursor:
                # One snapshot for the pass and the list of jobs it covers.
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        jobs = list(Job.objects.filter(status=Job.Status.DONE).values_list("pk", flat=True))
        for i, (key, boots) in enumerate(_rows()):
            out.add_run(key, boots)
            if progress and i % 100000 == 0:
                log.info("rebuild: %d kernel runs of a metric read", i)
    for shape in list(out.pending):
        out.flush(shape)
    return out, jobs


def _store(out: Pass, jobs: list[int]) -> None:
    """Replace the summary tables with what `_read` made, in one transaction."""
    run_table, commit_table = RunSummary._meta.db_table, CommitSummary._meta.db_table
    with transaction.atomic():
        Job.objects.filter(summarised=True).update(summarised=False)
        RunSummary.objects.all().delete()
        CommitSummary.objects.all().delete()
        NoisePool.objects.all().delete()
        _copy(
            run_table,
            [
                *RUN_KEY,
                "boots",
                "iterations",
                "positive",
                "ssb_log",
                "ssw_log",
                "dfw_log",
                "ssb_lin",
                "ssw_lin",
                "dfw_lin",
            ],
            (
                (
                    *key,
                    s.boots,
                    s.iterations,
                    s.positive,
                    s.ssb_log if s.positive else None,
                    s.ssw_log if s.positive else None,
                    s.dfw_log,
                    s.ssb_lin,
                    s.ssw_lin,
                    s.dfw_lin,
                )
                for key, s in out.runs
            ),
        )
        _copy(
            commit_table,
            [*COMMIT_KEY, "boots", "samples", "positive", "mean_log", "ss_log", "mean_lin", "ss_lin"],
            (_commit_row(k, b) for k, b in out.commit_boots.items()),
        )
        with connection.cursor() as cursor:
            # The pools are RunSummary added up, as refresh_run keeps them (the log sums over positive runs).
            cursor.execute(
                f"INSERT INTO {NoisePool._meta.db_table} (machine_class_id, clock, benchmark, grid, metric, boots, "
                f"{', '.join(summaries.POOL_SUMS)}) "
                f"SELECT machine_class_id, clock, benchmark, grid, metric, boots, count(*), "
                f"count(*) FILTER (WHERE positive), sum(boots), sum(iterations), "
                + ", ".join(f"coalesce(sum({c}) FILTER (WHERE positive), 0)" for c in ("ssb_log", "ssw_log", "dfw_log"))
                + ", sum(ssb_lin), sum(ssw_lin), sum(dfw_lin) "
                f"FROM {run_table} GROUP BY machine_class_id, clock, benchmark, grid, metric, boots"
            )
        for start in range(0, len(jobs), 10000):
            Job.objects.filter(pk__in=jobs[start : start + 10000]).update(summarised=True)
    with connection.cursor() as cursor:
        # The tables were replaced wholesale: give the planner their new sizes.
        for model in (RunSummary, CommitSummary, NoisePool, Job):
            cursor.execute(f"ANALYZE {model._meta.db_table}")


def _rebuild_series(window: int) -> list[tuple[int, int, str, str]]:
    """Every tracked branch's series sums made again from the new summaries; the series."""
    series = list(
        Job.objects.filter(status=Job.Status.DONE, branch_commit__isnull=False)
        .values_list("branch_commit__branch_id", "machine_class_id", "benchmark", "clock")
        .distinct()
    )
    SeriesState.objects.all().delete()
    SeriesPool.objects.all().delete()
    # Every series measured gets its state here.
    SeriesCatchUp.objects.all().delete()
    for branch_id, mclass_id, bench, clock in sorted(series):
        ids = [c for c, _ in summaries.series_commits(branch_id, mclass_id, bench, clock, window)]
        points = summaries.series_points(ids, mclass_id, bench, clock)
        sums = summaries.branch_sums(ids, points, summaries.cuts_of(branch_id, mclass_id, bench, clock))
        with transaction.atomic():
            drift_pools.store_branch_sums(branch_id, mclass_id, bench, clock, sums, len(ids))
    return series


def forget_class(mclass_id: int) -> None:
    """A machine class's summaries dropped, for a class that measures another
    kind of kernel or VM from now on (a new profile, vCPUs or NUMA nodes):
    its noise pools, runs, commits' points and series states held the old
    boots, which summaries.default_boots no longer counts. Its finished jobs
    are caught up again on the next read, and only the new kind's count.
    Change points found already stay: they were findings about those kernels."""
    with transaction.atomic():
        for model in (NoisePool, RunSummary, CommitSummary, SeriesState, SeriesPool, SeriesCatchUp):
            model.objects.filter(machine_class_id=mclass_id).delete()
        Job.objects.filter(machine_class_id=mclass_id, summarised=True).update(summarised=False)
