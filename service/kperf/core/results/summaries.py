"""History kept summarised as results arrive (the ORM side of kperf.stats.history).

A finished job's samples are reduced once, when they are stored: its
kernel's run (RunSummary: what the noise model pools) and, for a tracked
commit, the commit's point (CommitSummary). Each is recomputed from the raw
samples of that one kernel or commit, so the cost is that kernel's boots,
never the history's. Jobs that reached the database another way (imports,
tests, a hook that failed) are caught up on the next read: Job.summarised
says which are in, and a partial index holds only those that are not. A
branch's series is read from CommitSummary as arrays (series_points) and
reduced to its drift and between-build sums (branch_sums);
kperf.core.results.drift_pools keeps those per branch and added up per
machine class. `kperf-manage rebuild_history` recomputes everything
from the raw samples.
"""

from __future__ import annotations

import logging
import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from django.db import connection, transaction
from django.db.models import F, QuerySet

from kperf.core.models import (
    BranchCommit,
    ChangePoint,
    CommitSummary,
    Job,
    NoisePool,
    RunSummary,
    Sample,
    SeriesCatchUp,
    SeriesState,
)
from kperf.stats import history as sh
from kperf.stats.abtest import boot_summaries, normalise_boots
from kperf.stats.noise import RunPool, RunStats, run_stats

log = logging.getLogger(__name__)

# Each analysis re-reads at most this many newest measured commits of a
# series; the detector itself looks back at most 512 commits from the last
# change point, so older ones could only matter through a change point there.
SERIES_WINDOW = 1000

Boots = list[list[float]]


def _lock(*key: object) -> None:
    """Serialise recomputations of one summary: the second waits, then reads what the first committed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [zlib.crc32(repr(key).encode()) - (1 << 31)])


def _boots_by_metric(samples: QuerySet[Sample], order: tuple[str, ...]) -> dict[str, Boots]:
    """{metric: one list of iterations per boot}, boots in the order given."""
    per_boot: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    for metric, boot_id, iteration, value in samples.values_list(
        "metric", "boot_record_id", "iteration", "value"
    ).order_by(*order, "boot_record__boot", "iteration"):
        per_boot[(metric, boot_id)][iteration] = value
    out: dict[str, Boots] = defaultdict(list)
    for (metric, _), iters in per_boot.items():
        out[metric].append([iters[i] for i in sorted(iters)])
    return dict(out)


def default_boots(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """The jobs booted as kperf boots the class's kernels: no extra command line words, the kernel's THP mode,
    the class's configuration profile and vCPUs.

    Only those make a kernel's run and the class's noise pools: a submission
    that asked for other boot parameters measured the kernel another way,
    and its boots would widen the spread between boots of one kernel; a
    kernel of another profile, or a VM of another shape, is another series
    altogether (docs/kernels.md).
    """
    return jobs.filter(
        boot_params="",
        thp="",
        build__profile=F("machine_class__profile"),
        vcpus=F("machine_class__vcpus"),
        numa_nodes=F("machine_class__numa_nodes"),
    )


def run_jobs(mclass_id: int, clock: str, bench: str, grid: str, sha: str) -> QuerySet[Job]:
    return default_boots(
        Job.objects.filter(
            status=Job.Status.DONE, machine_class_id=mclass_id, clock=clock, benchmark=bench, grid=grid, build__sha=sha
        )
    )


def runs_of(jobs: QuerySet[Job]) -> dict[str, RunStats]:
    """Per metric, the run of these jobs' boots (in the order analysis.boots_per_metric reads them)."""
    boots = _boots_by_metric(
        Sample.objects.filter(boot_record__job__in=jobs, boot_record__job__status=Job.Status.DONE),
        ("boot_record__job__finished",),
    )
    return {m: s for m, b in boots.items() if (s := run_stats(b)) is not None}


def refresh_run(mclass_id: int, clock: str, bench: str, grid: str, sha: str) -> None:
    """Recompute one kernel's RunSummary rows from its samples."""
    _lock("run", mclass_id, clock, bench, grid, sha)
    runs = runs_of(run_jobs(mclass_id, clock, bench, grid, sha))
    key = {"machine_class_id": mclass_id, "clock": clock, "benchmark": bench, "grid": grid, "sha": sha}
    # The kernel's previous runs leave the class's pools and its new ones join them.
    deltas: dict[tuple[str, int], RunPool] = defaultdict(RunPool)
    for old in RunSummary.objects.filter(**key):
        deltas[(old.metric, old.boots)] -= RunPool.of(run_from_row(old))
    for metric, new in runs.items():
        deltas[(metric, new.boots)] += RunPool.of(new)
    RunSummary.objects.filter(**key).exclude(metric__in=list(runs)).delete()
    RunSummary.objects.bulk_create(
        [RunSummary(metric=m, **key, **_run_fields(s)) for m, s in runs.items()],
        update_conflicts=True,
        unique_fields=["machine_class", "clock", "benchmark", "grid", "sha", "metric"],
        update_fields=list(_run_fields(next(iter(runs.values())))) if runs else None,
    )
    _add_to_pools(mclass_id, clock, bench, grid, deltas)


POOL_SUMS = ["runs", "positive_runs", "boots_total", "iterations", "ssb_log", "ssw_log", "dfw_log"]
POOL_SUMS += ["ssb_lin", "ssw_lin", "dfw_lin"]


def _add_to_pools(mclass_id: int, clock: str, bench: str, grid: str, deltas: dict[tuple[str, int], RunPool]) -> None:
    """Add each (metric, boots) delta to its NoisePool row, in one statement."""
    if not deltas:
        return
    table = NoisePool._meta.db_table
    rows: list[tuple[str | int | float, ...]] = [
        (mclass_id, clock, bench, grid, m, k, *d.astuple()) for (m, k), d in sorted(deltas.items())
    ]
    values = ", ".join(["(" + ", ".join(["%s"] * 16) + ")"] * len(rows))
    with connection.cursor() as cursor:
        # An UPDATE that adds in place: concurrent kernels of one class add without losing each other's sums.
        cursor.execute(
            f"INSERT INTO {table} (machine_class_id, clock, benchmark, grid, metric, boots, {', '.join(POOL_SUMS)}) "
            f"VALUES {values} ON CONFLICT (machine_class_id, clock, benchmark, grid, metric, boots) DO UPDATE SET "
            + ", ".join(f"{c} = {table}.{c} + EXCLUDED.{c}" for c in POOL_SUMS),
            [v for row in rows for v in row],
        )
        # A pool whose runs all left holds rounding residue only.
        cursor.execute(
            f"DELETE FROM {table} WHERE machine_class_id = %s AND clock = %s AND benchmark = %s AND grid = %s "
            f"AND runs <= 0",
            [mclass_id, clock, bench, grid],
        )


def _run_fields(s: RunStats) -> dict[str, object]:
    return {
        "boots": s.boots,
        "iterations": s.iterations,
        "positive": s.positive,
        "ssb_log": s.ssb_log if s.positive else None,
        "ssw_log": s.ssw_log if s.positive else None,
        "dfw_log": s.dfw_log,
        "ssb_lin": s.ssb_lin,
        "ssw_lin": s.ssw_lin,
        "dfw_lin": s.dfw_lin,
    }


def run_from_row(r: RunSummary) -> RunStats:
    return RunStats(
        boots=r.boots,
        iterations=r.iterations,
        positive=r.positive,
        ssb_log=r.ssb_log if r.ssb_log is not None else float("nan"),
        ssw_log=r.ssw_log if r.ssw_log is not None else float("nan"),
        dfw_log=r.dfw_log,
        ssb_lin=r.ssb_lin,
        ssw_lin=r.ssw_lin,
        dfw_lin=r.dfw_lin,
    )


class CommitPoint(NamedTuple):
    """One commit's boots of one metric, as CommitSummary keeps them (a named tuple,
    for the same reason as sh.BuildStat: an analysis reads a hundred thousand)."""

    boots: int
    positive: bool
    mean_log: float
    ss_log: float
    mean_lin: float
    ss_lin: float


def commit_point(boots: Boots) -> CommitPoint | None:
    """A commit's point from its boots (kperf.stats.changepoints.commit_summary on both scales)."""
    cleaned = normalise_boots(boots)
    if not cleaned:
        return None
    positive = all(v > 0 for b in cleaned for v in b)
    lin = sh.build_stat(boot_summaries(cleaned, False))
    log_ = sh.build_stat(boot_summaries(cleaned, True)) if positive else sh.BuildStat(0, float("nan"), float("nan"))
    return CommitPoint(len(cleaned), positive, log_.mean, log_.ss, lin.mean, lin.ss)


def refresh_commit(commit_id: int, mclass_id: int, bench: str, clock: str) -> None:
    """Recompute one tracked commit's CommitSummary rows from its samples (boots in run order, as the series)."""
    _lock("commit", commit_id, mclass_id, bench, clock)
    boots = _boots_by_metric(
        Sample.objects.filter(
            boot_record__job__branch_commit_id=commit_id,
            boot_record__job__machine_class_id=mclass_id,
            boot_record__job__benchmark=bench,
            boot_record__job__clock=clock,
            boot_record__job__status=Job.Status.DONE,
        ),
        ("boot_record__job__seq",),
    )
    points = {m: p for m, b in boots.items() if (p := commit_point(b)) is not None}
    key = {"commit_id": commit_id, "machine_class_id": mclass_id, "benchmark": bench, "clock": clock}
    CommitSummary.objects.filter(**key).exclude(metric__in=list(points)).delete()
    CommitSummary.objects.bulk_create(
        [
            CommitSummary(
                metric=m,
                **key,
                boots=p.boots,
                samples=sum(len(b) for b in normalise_boots(boots[m])),
                positive=p.positive,
                mean_log=p.mean_log if p.positive else None,
                ss_log=p.ss_log if p.positive else None,
                mean_lin=p.mean_lin,
                ss_lin=p.ss_lin,
            )
            for m, p in points.items()
        ],
        update_conflicts=True,
        unique_fields=["commit", "machine_class", "benchmark", "clock", "metric"],
        update_fields=["boots", "samples", "positive", "mean_log", "ss_log", "mean_lin", "ss_lin"],
    )


def summarise(jobs: QuerySet[Job]) -> int:
    """Bring the summaries up to date with these finished jobs' samples; returns how many jobs were new.

    Called where results are stored (one job) and before summaries are read
    (the jobs a read covers), so a job stored by any path is in before it counts.
    """
    # Through the job_unsummarised index: what arrived since the last read, not every job.
    new = list(jobs.filter(status=Job.Status.DONE, summarised=False).values_list("pk", flat=True))
    if not new:
        return 0
    pending = list(
        # Calibrations measure the runner, not a kernel: they stay out of the
        # noise pools (a drifted one would inflate the class's noise).
        # Boots with a submission's own boot parameters stay out too (default_boots).
        default_boots(Job.objects.filter(pk__in=new, pinned_runner__isnull=True)).values_list(
            "machine_class_id",
            "clock",
            "benchmark",
            "grid",
            "build__sha",
            "branch_commit_id",
            "branch_commit__branch_id",
        )
    )
    with transaction.atomic():
        for run in sorted({(m, c, b, g, s) for m, c, b, g, s, _, _ in pending}):
            refresh_run(*run)
        for commit in sorted({(bc, m, b, c) for m, c, b, _, _, bc, _ in pending if bc is not None}):
            refresh_commit(*commit)
        _note_series_without_state({(br, m, b, c) for m, c, b, _, _, _, br in pending if br is not None})
        # The others are done with too: no later read would count them.
        Job.objects.filter(pk__in=new).update(summarised=True)
    return len(pending)


def _note_series_without_state(series: set[tuple[int, int, str, str]]) -> None:
    """SeriesCatchUp rows for the branches' series that have no SeriesState (drift_pools.ensure_states)."""
    if not series:
        return
    have = set(
        SeriesState.objects.filter(
            branch_id__in={s[0] for s in series},
            machine_class_id__in={s[1] for s in series},
            benchmark__in={s[2] for s in series},
        )
        .values_list("branch_id", "machine_class_id", "benchmark", "clock")
        .distinct()
    )
    SeriesCatchUp.objects.bulk_create(
        [
            SeriesCatchUp(branch_id=br, machine_class_id=m, benchmark=b, clock=c)
            for br, m, b, c in sorted(series - have)
        ],
        ignore_conflicts=True,
    )


def job_stored(job_id: int) -> None:
    """The hook for where results are stored: this job's kernel and commit, nothing older."""
    summarise(Job.objects.filter(pk=job_id))


# --- one branch's series ------------------------------------------------------------------


def series_commits(branch_id: int, mclass_id: int, bench: str, clock: str, window: int) -> list[tuple[int, int]]:
    """(id, position) of the newest `window` commits in a branch's series, in branch order (tracking.series())."""
    rows = list(
        BranchCommit.objects.filter(
            branch_id=branch_id,
            on_branch=True,
            status__in=[BranchCommit.Status.DONE, BranchCommit.Status.ANALYSING],
            jobs__machine_class_id=mclass_id,
            jobs__benchmark=bench,
            jobs__clock=clock,
            jobs__status=Job.Status.DONE,
        )
        .distinct()
        .order_by("-position")
        .values_list("pk", "position")[:window]
    )
    return rows[::-1]


@dataclass
class SeriesPoints:
    """One metric's points over a series' commits, as CommitSummary keeps them, one
    array entry per commit (boots 0 and nan where it measured nothing of the metric):
    arrays, not a CommitPoint per commit, since an analysis reads a hundred thousand."""

    boots: np.ndarray
    positive: np.ndarray
    mean_log: np.ndarray
    ss_log: np.ndarray
    mean_lin: np.ndarray
    ss_lin: np.ndarray

    @property
    def present(self) -> np.ndarray:
        return self.boots > 0


Points = dict[str, SeriesPoints]


# series_points' record of one point (network byte order, as the *send functions write it).
_POINT = np.dtype(
    [("commit", ">i8"), ("boots", ">i4"), ("positive", ">i4")]
    + [(name, ">f8") for name in ("mean_log", "ss_log", "mean_lin", "ss_lin")]
)


def series_points(commit_ids: list[int], mclass_id: int, bench: str, clock: str) -> Points:
    """Per metric, each commit's point (see SeriesPoints)."""
    out: Points = {}
    if not commit_ids:
        return out
    with connection.cursor() as cursor:
        # One row per metric, its points as one string of binary records (the exact
        # doubles, float8send), read with frombuffer: a hundred rows instead of one per
        # commit and metric, and no parsing of values in Python. One aggregate, so
        # every field of a record comes from the same row whatever the order.
        cursor.execute(
            f"SELECT s.metric, string_agg(int8send(s.commit_id::bigint) || int4send(s.boots::int) "
            f"|| int4send(s.positive::int) || float8send(coalesce(s.mean_log, 'NaN')) "
            f"|| float8send(coalesce(s.ss_log, 'NaN')) || float8send(s.mean_lin) || float8send(s.ss_lin), ''::bytea) "
            f"FROM {CommitSummary._meta.db_table} s WHERE s.commit_id = ANY(%s) AND s.machine_class_id = %s "
            f"AND s.benchmark = %s AND s.clock = %s GROUP BY s.metric",
            [commit_ids, mclass_id, bench, clock],
        )
        rows = cursor.fetchall()
    n = len(commit_ids)
    ids = np.asarray(commit_ids, dtype=np.int64)
    order = np.argsort(ids)
    for metric, data in rows:
        got = np.frombuffer(data, dtype=_POINT)
        # Each point's place in the series, from its commit id.
        where = order[np.searchsorted(ids[order], got["commit"])]
        k = np.zeros(n, dtype=np.int64)
        k[where] = got["boots"]
        pos = np.ones(n, dtype=bool)
        pos[where] = got["positive"] != 0
        arrays = []
        for name in ("mean_log", "ss_log", "mean_lin", "ss_lin"):
            full = np.full(n, np.nan)
            full[where] = got[name]
            arrays.append(full)
        out[metric] = SeriesPoints(k, pos, *arrays)
    return out


def cuts_of(branch_id: int, mclass_id: int, bench: str, clock: str) -> dict[str, set[int]]:
    """Per metric, the commits that start a segment: the stored change points'."""
    cuts: dict[str, set[int]] = defaultdict(set)
    for metric, commit_id in ChangePoint.objects.filter(
        branch_id=branch_id, machine_class_id=mclass_id, benchmark=bench, clock=clock
    ).values_list("metric", "commit_id"):
        cuts[metric].add(commit_id)
    return cuts


def segment_bounds(commit_ids: list[int], cuts: set[int]) -> list[tuple[int, int]]:
    """(start, end) of each segment of a series cut at its change points, as the tests' reference cuts it."""
    starts = sorted(i for i, c in enumerate(commit_ids) if c in cuts and i > 0)
    edges = [0, *starts, len(commit_ids)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def segment_values(points: SeriesPoints, start: int, end: int) -> np.ndarray:
    """series_summaries() of one segment: its own scale, nan where a commit measured nothing."""
    on = points.present[start:end]
    log_scale = bool(points.positive[start:end][on].all())
    values = (points.mean_log if log_scale else points.mean_lin)[start:end]
    return np.where(on, values, np.nan)


@dataclass
class BranchSums:
    """What one branch's series adds to what is learned per machine class."""

    drift: sh.DriftStats
    build_log: sh.BuildSums
    build_lin: sh.BuildSums
    positive: bool


def branch_sums(commit_ids: list[int], points: Points, cuts: dict[str, set[int]]) -> dict[str, BranchSums]:
    """Per metric, the drift and between-build sums of a branch's series cut at `cuts`."""
    bounds = {m: segment_bounds(commit_ids, cuts.get(m, set())) for m in points}
    # Every metric's segments through the drift filter together (one pass, not one per metric).
    drifts = sh.drift_stats_many([[segment_values(points[m], a, b) for a, b in bs] for m, bs in bounds.items()])
    out: dict[str, BranchSums] = {}
    for (metric, bs), drift in zip(bounds.items(), drifts, strict=True):
        p = points[metric]
        positive = bool(p.positive[p.present].all())
        out[metric] = BranchSums(
            drift,
            sh.build_sums_of_arrays(p.boots, p.mean_log, p.ss_log, bs) if positive else sh.BuildSums(),
            sh.build_sums_of_arrays(p.boots, p.mean_lin, p.ss_lin, bs),
            positive,
        )
    return out
