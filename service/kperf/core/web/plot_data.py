"""What the pictures draw, read from the database; kperf.core.web.plots draws it.

A submission's metric is drawn from its MetricComparison: the samples as
compared (per boot, in run order) and the verdict's estimates and interval.
A tracked branch's series is read sample by sample for one metric, over the
commits the change-point analysis reads (kperf.core.tracking.branches.series).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from kperf.core.models import (
    BranchCommit,
    ChangePoint,
    Clock,
    Comparison,
    Job,
    MetricComparison,
    MetricDef,
    Sample,
    SeriesState,
    Submission,
    TrackedBranch,
)
from kperf.core.models.lab import unit_on
from kperf.core.tracking import branches
from kperf.core.web import plots, presenters

# Benchmarks whose metrics are one quantity against a parameter they sweep,
# drawn as one picture: the metric name's pattern (the parameter's value in
# its group) and the parameter's name for the axis.
SHAPES: dict[str, tuple[re.Pattern[str], str]] = {
    "spawn": (re.compile(r"^spawn-vmas-(\d+)$"), "extra VMAs"),
}


def clock_label(clock: str) -> str:
    return str(Clock(clock).label) if clock in Clock.values else clock


def find_comparison(
    sub: Submission, machine_class: str, benchmark: str, clock: str, grid: str = ""
) -> Comparison | None:
    """The comparison so named; without a grid, the one of the submission's first grid (links made
    before a submission could ask for several name none)."""
    found = sub.comparisons.select_related("machine_class").filter(
        machine_class__name=machine_class, benchmark=benchmark, clock=clock
    )
    if grid:
        return found.filter(grid=grid).first()
    order = {g: i for i, g in enumerate(sub.grids)}
    return min(found, key=lambda c: order.get(c.grid, len(order)), default=None)


def _estimates(values: dict[str, Any]) -> tuple[float | None, float | None]:
    """Each side's level as the verdict sees it (kperf.core.web.presenters.verdict_estimate)."""
    base, head = values.get("base") or [], values.get("head") or []
    log_scale = all(v > 0 for boots in (base, head) for boot in boots for v in boot)
    return presenters.verdict_estimate(base, log_scale), presenters.verdict_estimate(head, log_scale)


def metric_plot(comp: Comparison, m: MetricComparison) -> plots.MetricPlot:
    base_est, head_est = _estimates(m.values)
    return plots.MetricPlot(
        metric=m.metric,
        unit=unit_on(m.unit, comp.clock),
        higher_is_better=m.higher_is_better,
        clock=clock_label(comp.clock),
        verdict=m.verdict,
        base=m.values.get("base") or [],
        head=m.values.get("head") or [],
        base_estimate=base_est,
        head_estimate=head_est,
        change_pct=m.change_pct,
        ci_low_pct=m.ci_low_pct,
        ci_high_pct=m.ci_high_pct,
        min_effect_pct=m.min_effect_pct,
    )


def shape_plot(comp: Comparison) -> plots.ShapePlot | None:
    """The benchmark's sweep as one picture, or None when it has none (or no metric of it)."""
    if comp.benchmark not in SHAPES:
        return None
    pattern, x_label = SHAPES[comp.benchmark]
    steps = []
    unit, higher_is_better = "", True
    for m in comp.metrics.all():
        match = pattern.match(m.metric)
        if match is None:
            continue
        base_est, head_est = _estimates(m.values)
        unit, higher_is_better = unit_on(m.unit, comp.clock), m.higher_is_better
        steps.append(
            plots.ShapeStep(
                x=int(match[1]),
                metric=m.metric,
                verdict=m.verdict,
                base=m.values.get("base") or [],
                head=m.values.get("head") or [],
                base_estimate=base_est,
                head_estimate=head_est,
                change_pct=m.change_pct,
            )
        )
    if not steps:
        return None
    return plots.ShapePlot(
        title=f"{comp.benchmark} on {comp.machine_class.name}: {unit} against {x_label}, base and head",
        x_label=x_label,
        unit=unit,
        higher_is_better=higher_is_better,
        clock=clock_label(comp.clock),
        steps=steps,
    )


def series_index(branch: TrackedBranch) -> list[dict[str, Any]]:
    """The branch's series, one entry per machine class, benchmark and clock with
    its metrics: one small query (a SeriesState row per analysed series)."""
    groups: dict[tuple[str, int, str, str], list[str]] = defaultdict(list)
    rows = (
        SeriesState.objects.filter(branch=branch)
        .values_list("machine_class__name", "machine_class_id", "benchmark", "clock", "metric")
        .order_by("machine_class__name", "benchmark", "clock", "metric")
    )
    for name, mclass_id, bench, clock, metric in rows:
        groups[(name, mclass_id, bench, clock)].append(metric)
    return [
        {
            "machine_class": name,
            "machine_class_id": mclass_id,
            "benchmark": bench,
            "clock": clock,
            "clock_label": clock_label(clock),
            "metrics": metrics,
        }
        for (name, mclass_id, bench, clock), metrics in groups.items()
    ]


def bisection_steps(branch: TrackedBranch) -> dict[int, int]:
    """Commit id -> its number among the commits bisection added, in the order added.

    Not stored: polling only ever appends commits newer than every measured
    one still on the branch (a forced push takes the replaced ones off it), so
    an on-branch commit added after a newer one was added by bisection.
    """
    steps: dict[int, int] = {}
    newest = -1
    for pk, position in branch.commits.filter(on_branch=True).order_by("pk").values_list("pk", "position"):
        if position < newest:
            steps[pk] = len(steps) + 1
        newest = max(newest, position)
    return steps


def _series_commits(branch: TrackedBranch, mclass_id: int, bench: str, clock: str) -> list[BranchCommit]:
    """The commits branches.series reads, oldest first."""
    newest = (
        branch.commits.filter(on_branch=True, status__in=[BranchCommit.Status.DONE, BranchCommit.Status.ANALYSING])
        .filter(
            jobs__machine_class_id=mclass_id, jobs__benchmark=bench, jobs__clock=clock, jobs__status=Job.Status.DONE
        )
        .distinct()
        .order_by("-position")[: branches.SERIES_WINDOW]
    )
    return list(newest)[::-1]


def series_plot(branch: TrackedBranch, mclass_id: int, bench: str, clock: str, metric: str) -> plots.SeriesPlot:
    commits = _series_commits(branch, mclass_id, bench, clock)
    where = {c.pk: i for i, c in enumerate(commits)}
    per_boot: dict[int, dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    rows = (
        Sample.objects.filter(
            metric=metric,
            boot_record__job__branch_commit__in=commits,
            boot_record__job__machine_class_id=mclass_id,
            boot_record__job__benchmark=bench,
            boot_record__job__clock=clock,
            boot_record__job__status=Job.Status.DONE,
        )
        .values_list("boot_record__job__branch_commit_id", "boot_record_id", "iteration", "value")
        .order_by("boot_record__job__seq", "boot_record__boot", "iteration")
    )
    for commit_id, boot_id, iteration, value in rows:
        per_boot[where[commit_id]][boot_id][iteration] = value
    steps = bisection_steps(branch)
    series = [
        plots.SeriesCommit(
            sha=c.sha,
            position=c.position,
            subject=c.subject,
            boots=[[iters[k] for k in sorted(iters)] for iters in per_boot[i].values()],
            bisection_step=steps.get(c.pk, 0),
        )
        for i, c in enumerate(commits)
    ]
    changes = []
    for cp in ChangePoint.objects.filter(
        branch=branch, machine_class_id=mclass_id, benchmark=bench, clock=clock, metric=metric
    ).select_related("commit", "previous"):
        if cp.commit_id not in where:
            continue  # older than the window drawn
        changes.append(
            plots.SeriesChange(
                commit=where[cp.commit_id],
                previous=where.get(cp.previous_id) if cp.previous_id is not None else None,
                direction=cp.direction,
                change_pct=cp.change_pct,
                untested_between=cp.untested_between,
            )
        )
    unit, higher_is_better = metric_unit(metric)
    unit = unit_on(unit, clock)
    return plots.SeriesPlot(
        title=f"{metric} on {branch.branch} ({bench}, {clock_label(clock)})",
        metric=metric,
        unit=unit,
        higher_is_better=higher_is_better,
        clock=clock_label(clock),
        commits=series,
        changes=changes,
    )


def metric_unit(metric: str) -> tuple[str, bool]:
    """The unit and direction runners declared for a metric (MetricDef)."""
    d = MetricDef.objects.filter(name=metric).values_list("unit", "higher_is_better").first()
    return (d[0], d[1]) if d else ("", True)
