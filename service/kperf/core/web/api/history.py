"""One metric's series of a tracked branch, read from the summaries (docs/history.md)."""

from __future__ import annotations

import math
from typing import Any

from django.db.models import QuerySet

from kperf.core.models import BranchCommit, ChangePoint, CommitSummary, Job, MachineClass, MetricDef, TrackedBranch
from kperf.core.results import noise_report, summaries
from kperf.core.web import presenters
from kperf.core.web.api.errors import ApiError
from kperf.core.web.shapes import ChangePointOut, MetricPoint, MetricSeries

DEFAULT_LIMIT = 1000
MAX_LIMIT = 5000
# The form without metric= reads every boot's raw samples: a few commits a page.
RAW_DEFAULT_LIMIT = 20
RAW_MAX_LIMIT = 100
# ... and no more commits than hold this many samples together (always one).
# 10,000 took 38 ms at the median but 151 ms at p95 with the machine at load
# 7 (bench/history.py, docs/performance.md); half of it keeps a page's p95
# inside the 100 ms history reads are held to.
RAW_MAX_SAMPLES = 5_000


def class_and_clock(machine_class: str, clock: str | None) -> tuple[MachineClass, str]:
    """The machine class a series is read for, and the clock (default: the class's); 404 or 400 saying why."""
    mclass = MachineClass.objects.filter(name=machine_class).first()
    if mclass is None:
        raise ApiError(404, "no-machine-class", f"no machine class {machine_class!r}: GET /api/v1/runners lists them")
    try:
        return mclass, noise_report.requested_clock(machine_class, clock)
    except noise_report.UnknownClock as e:
        raise ApiError(400, "invalid-series", str(e)) from None


def metric_series(
    branch: TrackedBranch,
    machine_class: str,
    benchmark: str,
    clock: str | None,
    metric: str,
    since: int | None,
    until: int | None,
    limit: int,
) -> MetricSeries:
    """The newest `limit` points of one metric at commit positions since..until, oldest first."""
    mclass, clock = class_and_clock(machine_class, clock)
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, "invalid-series", f"limit must be 1 to {MAX_LIMIT} commits; page with next_until")
    # Commits that reached the database without the results hook are summarised first.
    summaries.summarise(
        Job.objects.filter(branch_commit__branch=branch, machine_class=mclass, benchmark=benchmark, clock=clock)
    )
    rows = _summaries(branch, mclass, benchmark, clock, metric, since, until)
    page = list(
        rows.order_by("-commit__position").values_list(
            "commit__sha",
            "commit__position",
            "commit__subject",
            "boots",
            "positive",
            "mean_log",
            "ss_log",
            "mean_lin",
            "ss_lin",
        )[: limit + 1]
    )
    more = len(page) > limit
    page = page[:limit][::-1]
    log_scale = all(r[4] for r in page)
    points = [_point(row, log_scale) for row in page]
    definition = MetricDef.objects.filter(name=metric).first()
    change_points = branch.change_points.filter(machine_class=mclass, benchmark=benchmark, clock=clock, metric=metric)
    return {
        "branch": branch.pk,
        "machine_class": machine_class,
        "benchmark": benchmark,
        "clock": clock,
        "metric": metric,
        "unit": definition.unit if definition else "",
        "higher_is_better": definition.higher_is_better if definition else None,
        "log_scale": log_scale,
        "points": points,
        "next_until": page[0][1] - 1 if more and page else None,
        "change_points": change_points_between(change_points, page[0][1], page[-1][1]) if page else [],
    }


def change_points_between(change_points: QuerySet[ChangePoint], first: int, last: int) -> list[ChangePointOut]:
    """The change points at commit positions first..last (a page of a series), as the API gives them."""
    return [
        presenters.change_point_dict(cp)
        for cp in change_points.filter(commit__position__gte=first, commit__position__lte=last).select_related(
            "machine_class", "commit", "previous", "detected_at", "triage"
        )
    ]


def _summaries(
    branch: TrackedBranch, mclass: MachineClass, benchmark: str, clock: str, metric: str,
    since: int | None, until: int | None,
) -> QuerySet[CommitSummary]:  # fmt: skip
    """One metric's per-commit summaries of the branch's measured commits, at positions since..until."""
    rows = CommitSummary.objects.filter(
        machine_class=mclass,
        benchmark=benchmark,
        clock=clock,
        metric=metric,
        commit__branch=branch,
        commit__on_branch=True,
        commit__status__in=[BranchCommit.Status.DONE, BranchCommit.Status.ANALYSING],
    )
    if since is not None:
        rows = rows.filter(commit__position__gte=since)
    if until is not None:
        rows = rows.filter(commit__position__lte=until)
    return rows


def _point(row: tuple[Any, ...], log_scale: bool) -> MetricPoint:
    sha, position, subject, boots, _, mean_log, ss_log, mean_lin, ss_lin = row
    mean, ss = (mean_log, ss_log) if log_scale else (mean_lin, ss_lin)
    # On the log scale every row is positive, so both are set.
    assert mean is not None and ss is not None
    return {
        "sha": sha,
        "position": position,
        "subject": subject,
        "boots": boots,
        "value": math.exp(mean) if log_scale else mean,
        "boot_sd": math.sqrt(ss / (boots - 1)) if boots > 1 else None,
    }
