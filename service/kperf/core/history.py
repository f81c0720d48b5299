"""History kept summarised as results arrive (the ORM side of kperf.stats.history).

A finished job's samples are reduced once, when they are stored: its
kernel's run (RunSummary: what the noise model pools) and, for a tracked
commit, the commit's point (CommitSummary). Each is recomputed from the raw
samples of that one kernel or commit, so the cost is that kernel's boots,
never the history's. Jobs that reached the database another way (imports,
tests, a hook that failed) are caught up on the next read: SummarisedJob
says which are in. Per tracked branch, SeriesState holds what its last
analysis learned (drift and between-build sums, the detector); learning per
machine class adds those rows up. `kperf-manage rebuild_history` recomputes
everything from the raw samples.
"""

from __future__ import annotations

import logging
import zlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, QuerySet

from kperf.core.models import (
    BranchCommit,
    ChangePoint,
    CommitSummary,
    Job,
    NoisePool,
    RunSummary,
    Sample,
    SeriesState,
    SummarisedJob,
    TrackedBranch,
)
from kperf.stats import history as sh
from kperf.stats.abtest import normalise_boots
from kperf.stats.builds import BuildNoise
from kperf.stats.changepoints import DRIFT_GRID, DriftEstimate
from kperf.stats.noise import RunPool, RunStats, run_stats

log = logging.getLogger("kperf.history")

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


def run_jobs(mclass_id: int, clock: str, bench: str, grid: str, sha: str) -> QuerySet[Job]:
    return Job.objects.filter(
        status=Job.Status.DONE, machine_class_id=mclass_id, clock=clock, benchmark=bench, grid=grid, build__sha=sha
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

    def build(self, log_scale: bool) -> sh.BuildStat:
        if log_scale:
            return sh.BuildStat(self.boots, self.mean_log, self.ss_log)
        return sh.BuildStat(self.boots, self.mean_lin, self.ss_lin)


def commit_point(boots: Boots) -> CommitPoint | None:
    """A commit's point from its boots (kperf.stats.changepoints.commit_summary on both scales)."""
    cleaned = normalise_boots(boots)
    if not cleaned:
        return None
    positive = all(v > 0 for b in cleaned for v in b)
    from kperf.stats.abtest import boot_summaries

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
    pending = list(
        jobs.filter(status=Job.Status.DONE)
        # NOT EXISTS: an anti-join probing SummarisedJob's key, not a NOT IN over all of it.
        .exclude(Exists(SummarisedJob.objects.filter(job_id=OuterRef("pk"))))
        .values_list("pk", "machine_class_id", "clock", "benchmark", "grid", "build__sha", "branch_commit_id")
    )
    if not pending:
        return 0
    with transaction.atomic():
        for run in sorted({(m, c, b, g, s) for _, m, c, b, g, s, _ in pending}):
            refresh_run(*run)
        for commit in sorted({(bc, m, b, c) for _, m, c, b, _, _, bc in pending if bc is not None}):
            refresh_commit(*commit)
        SummarisedJob.objects.bulk_create([SummarisedJob(job_id=p[0]) for p in pending], ignore_conflicts=True)
    return len(pending)


def job_stored(job_id: int) -> None:
    """The hook for where results are stored: this job's kernel and commit, nothing older."""
    summarise(Job.objects.filter(pk=job_id))


# --- learned from the summaries -------------------------------------------------------------


def _states(mclass_id: int, bench: str, clock: str, exclude_branch: int | None = None) -> QuerySet[SeriesState]:
    qs = SeriesState.objects.filter(machine_class_id=mclass_id, benchmark=bench, clock=clock)
    return qs.exclude(branch_id=exclude_branch) if exclude_branch is not None else qs


def ensure_states(mclass_id: int, bench: str, clock: str) -> int:
    """Give every branch that measured this series a SeriesState (those whose
    commits reached the database without an analysis); returns how many were added."""
    summarise(Job.objects.filter(machine_class_id=mclass_id, benchmark=bench, clock=clock, branch_commit__isnull=False))
    have = SeriesState.objects.filter(machine_class_id=mclass_id, benchmark=bench, clock=clock).values("branch_id")
    missing = (
        TrackedBranch.objects.filter(
            commits__jobs__machine_class_id=mclass_id,
            commits__jobs__benchmark=bench,
            commits__jobs__clock=clock,
            commits__jobs__status=Job.Status.DONE,
        )
        .exclude(pk__in=have)
        .distinct()
        .values_list("pk", flat=True)
    )
    return _add_states([(b, bench) for b in missing], mclass_id, clock)


def ensure_class_states(mclass_id: int, clock: str) -> list[str]:
    """ensure_states() for every benchmark some branch measured on a machine class
    and clock, in one pass over its jobs (the caller has summarised them); returns those benchmarks."""
    measured = set(
        Job.objects.filter(status=Job.Status.DONE, machine_class_id=mclass_id, clock=clock, branch_commit__isnull=False)
        .values_list("branch_commit__branch_id", "benchmark")
        .distinct()
    )
    have = set(
        SeriesState.objects.filter(machine_class_id=mclass_id, clock=clock)
        .values_list("branch_id", "benchmark")
        .distinct()
    )
    _add_states(sorted(measured - have), mclass_id, clock)
    return sorted({bench for _, bench in measured})


def _add_states(missing: Iterable[tuple[int, str]], mclass_id: int, clock: str) -> int:
    added = 0
    for branch_id, bench in list(missing):
        ids = [c for c, _ in series_commits(branch_id, mclass_id, bench, clock, SERIES_WINDOW)]
        sums = branch_sums(
            ids, series_points(ids, mclass_id, bench, clock), cuts_of(branch_id, mclass_id, bench, clock)
        )
        with transaction.atomic():
            store_branch_sums(branch_id, mclass_id, bench, clock, sums, len(ids))
        added += 1
    return added


def drift_sums(
    mclass_id: int, bench: str, clock: str, exclude_branch: int | None = None, ensure: bool = True
) -> dict[str, sh.DriftStats]:
    """Per metric, the drift sums of every branch's series (but `exclude_branch`'s);
    ensure=False: the caller has just run ensure_states."""
    if ensure:
        ensure_states(mclass_id, bench, clock)
    # Added branch by branch in branch order (as DriftStats.__add__ would), on arrays:
    # a class's noise report adds up thousands of rows.
    sums: dict[str, list[Any]] = {}
    rows = _states(mclass_id, bench, clock, exclude_branch).order_by("branch_id")
    for metric, ssq, logf, n, used in rows.values_list("metric", "drift_ssq", "drift_logf", "drift_n", "drift_used"):
        if not ssq:
            sums.setdefault(metric, [np.zeros(len(DRIFT_GRID)), np.zeros(len(DRIFT_GRID)), 0, 0])
            continue
        if metric not in sums:
            sums[metric] = [np.asarray(ssq, dtype=float), np.asarray(logf, dtype=float), n, used]
            continue
        total = sums[metric]
        total[0] = total[0] + np.asarray(ssq, dtype=float)
        total[1] = total[1] + np.asarray(logf, dtype=float)
        total[2] += n
        total[3] += used
    return {m: sh.DriftStats(tuple(s[0].tolist()), tuple(s[1].tolist()), s[2], s[3]) for m, s in sums.items()}


def learned_drift(mclass_id: int, bench: str, clock: str, ensure: bool = True) -> dict[str, DriftEstimate]:
    """tracking.learned_drift() from the branches' SeriesState rows."""
    return {m: sh.drift_from_stats(s) for m, s in drift_sums(mclass_id, bench, clock, ensure=ensure).items()}


def learned_build_noise(mclass_id: int, bench: str, clock: str, ensure: bool = True) -> dict[str, BuildNoise]:
    """tracking.learned_build_noise() from the branches' SeriesState rows."""
    if ensure:
        ensure_states(mclass_id, bench, clock)
    sums: dict[str, tuple[sh.BuildSums, sh.BuildSums, bool]] = {}
    rows = _states(mclass_id, bench, clock).order_by("branch_id")
    for metric, log_, lin, positive in rows.values_list("metric", "build_log", "build_lin", "positive"):
        a = sh.BuildSums.from_list(log_) if log_ else sh.BuildSums()
        b = sh.BuildSums.from_list(lin) if lin else sh.BuildSums()
        if metric in sums:
            pa, pb, pp = sums[metric]
            sums[metric] = (pa + a, pb + b, pp and positive)
        else:
            sums[metric] = (a, b, positive)
    out: dict[str, BuildNoise] = {}
    # A row exists only for a metric its branch measured, so every metric here has values.
    for metric, (log_sums, lin_sums, positive) in sums.items():
        out[metric] = sh.build_noise_from_sums(log_sums if positive else lin_sums, positive)
    return out


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


Points = dict[str, list[CommitPoint | None]]  # metric -> per commit of the series


def series_points(commit_ids: list[int], mclass_id: int, bench: str, clock: str) -> Points:
    """Per metric, each commit's point (None where the commit measured nothing of it)."""
    where = {c: i for i, c in enumerate(commit_ids)}
    out: Points = {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT commit_id, metric, boots, positive, mean_log, ss_log, mean_lin, ss_lin "
            f"FROM {CommitSummary._meta.db_table} WHERE commit_id = ANY(%s) AND machine_class_id = %s "
            f"AND benchmark = %s AND clock = %s",
            [commit_ids, mclass_id, bench, clock],
        )
        for commit_id, metric, boots, positive, mean_log, ss_log, mean_lin, ss_lin in cursor.fetchall():
            points = out.get(metric)
            if points is None:
                points = out[metric] = [None] * len(commit_ids)
            points[where[commit_id]] = CommitPoint(
                boots,
                positive,
                mean_log if mean_log is not None else float("nan"),
                ss_log if ss_log is not None else float("nan"),
                mean_lin,
                ss_lin,
            )
    return out


def cuts_of(branch_id: int, mclass_id: int, bench: str, clock: str) -> dict[str, set[int]]:
    """Per metric, the commits that start a segment: the stored change points'."""
    cuts: dict[str, set[int]] = defaultdict(set)
    for metric, commit_id in ChangePoint.objects.filter(
        branch_id=branch_id, machine_class_id=mclass_id, benchmark=bench, clock=clock
    ).values_list("metric", "commit_id"):
        cuts[metric].add(commit_id)
    return cuts


def segments(commit_ids: list[int], points: list[CommitPoint | None], cuts: set[int]) -> list[list[CommitPoint | None]]:
    """A series cut at its change points, as tracking.history_segments cuts it."""
    out: list[list[CommitPoint | None]] = []
    seg: list[CommitPoint | None] = []
    for commit_id, point in zip(commit_ids, points, strict=True):
        if commit_id in cuts and seg:
            out.append(seg)
            seg = []
        seg.append(point)
    out.append(seg)
    return out


def segment_values(seg: list[CommitPoint | None]) -> np.ndarray:
    """series_summaries() of one segment: its own scale, nan where a commit measured nothing."""
    present = [p for p in seg if p is not None]
    log_scale = all(p.positive for p in present)
    return np.array(
        [np.nan if p is None else (p.mean_log if log_scale else p.mean_lin) for p in seg],
        dtype=float,
    )


@dataclass
class BranchSums:
    """What one branch's series adds to what is learned per machine class."""

    drift: sh.DriftStats
    build_log: sh.BuildSums
    build_lin: sh.BuildSums
    positive: bool


def branch_sums(commit_ids: list[int], points: Points, cuts: dict[str, set[int]]) -> dict[str, BranchSums]:
    """Per metric, the drift and between-build sums of a branch's series cut at `cuts`."""
    cut_series = {m: segments(commit_ids, pts, cuts.get(m, set())) for m, pts in points.items()}
    # Every metric's segments through the drift filter together (one pass, not one per metric).
    drifts = sh.drift_stats_many([[segment_values(seg) for seg in segs] for segs in cut_series.values()])
    out: dict[str, BranchSums] = {}
    for (metric, segs), drift in zip(cut_series.items(), drifts, strict=True):
        positive = all(p.positive for p in points[metric] if p is not None)
        groups = [[p for p in seg if p is not None] for seg in segs]
        out[metric] = BranchSums(
            drift,
            sh.build_sums([[p.build(True) for p in g] for g in groups]) if positive else sh.BuildSums(),
            sh.build_sums([[p.build(False) for p in g] for g in groups]),
            positive,
        )
    return out


def store_branch_sums(
    branch_id: int,
    mclass_id: int,
    bench: str,
    clock: str,
    sums: dict[str, BranchSums],
    commits: int,
    detectors: dict[str, bytes] | None = None,
) -> None:
    """Replace a branch's SeriesState rows; `detectors`: each metric's detector (else they are left as they are)."""
    key = {"branch_id": branch_id, "machine_class_id": mclass_id, "benchmark": bench, "clock": clock}
    SeriesState.objects.filter(**key).exclude(metric__in=list(sums)).delete()
    SeriesState.objects.bulk_create(
        [
            SeriesState(
                metric=m,
                **key,
                commits=commits,
                drift_ssq=list(s.drift.ssq),
                drift_logf=list(s.drift.logf),
                drift_n=s.drift.n,
                drift_used=s.drift.used,
                build_log=s.build_log.as_list(),
                build_lin=s.build_lin.as_list(),
                positive=s.positive,
                detector=(detectors or {}).get(m, b""),
            )
            for m, s in sums.items()
        ],
        update_conflicts=True,
        unique_fields=["branch", "machine_class", "benchmark", "clock", "metric"],
        update_fields=[
            "commits",
            "drift_ssq",
            "drift_logf",
            "drift_n",
            "drift_used",
            "build_log",
            "build_lin",
            "positive",
            *(["detector"] if detectors is not None else []),
        ],
    )
