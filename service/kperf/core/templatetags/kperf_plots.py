"""Template helpers for the pictures (kperf.core.web.plot_pages serves them)."""

from __future__ import annotations

from typing import Any

from django import template

from kperf.core.models import TrackedBranch
from kperf.core.models.lab import unit_on
from kperf.core.results import sweeps
from kperf.core.web import plot_data

register = template.Library()


@register.filter
def has_shape(benchmark: str) -> bool:
    """Whether the benchmark's metrics are drawn as one sweep (spawn's extra VMAs)."""
    return benchmark in plot_data.SHAPES


@register.filter
def on_clock(unit: str, clock: str) -> str:
    """The unit as the clock measured it: per 10^9 guest instructions under the instruction clock."""
    return unit_on(unit, clock)


@register.simple_tag
def series_index(branch: TrackedBranch) -> list[dict[str, Any]]:
    """The branch's series per machine class, benchmark and clock, metrics with a change point first."""
    changed = set(branch.change_points.values_list("machine_class_id", "benchmark", "clock", "metric"))
    groups = plot_data.series_index(branch)
    for g in groups:
        key = (g["machine_class_id"], g["benchmark"], g["clock"])
        g["metrics"] = sorted(
            ({"metric": m, "changed": (*key, m) in changed} for m in g["metrics"]),
            key=lambda m: (not m["changed"], sweeps.metric_order(str(m["metric"]))),
        )
    return groups


# Up to this many metrics a comparison did not flag are listed open; more (the
# page allocator's 120) fold behind a one-line count, so a page of several
# benchmarks shows what was flagged first and not a 25,000-pixel table.
UNFLAGGED_OPEN_AT_MOST = 10
FLAGGED = ("regression", "improvement")


@register.simple_tag
def flag_split(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """A comparison's metrics as the page shows them: those flagged (regression or improvement) first,
    the others with a count of their verdicts ("117 no-change, 3 inconclusive") and whether they fold."""
    flagged = [m for m in metrics if m.get("verdict") in FLAGGED]
    rest = [m for m in metrics if m.get("verdict") not in FLAGGED]
    counts: dict[str, int] = {}
    for m in rest:
        counts[str(m.get("verdict"))] = counts.get(str(m.get("verdict")), 0) + 1
    return {
        "flagged": flagged,
        "rest": rest,
        "counts": ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items(), key=lambda kv: -kv[1])),
        "fold": len(rest) > UNFLAGGED_OPEN_AT_MOST,
    }


@register.simple_tag
def finding(comparisons: list[dict[str, Any]]) -> dict[str, Any]:
    """The top of the page (issue 41: the finding first): every flagged metric of every comparison with its
    change and interval, then per comparison the count of each verdict not flagged; the tables below name them."""
    flagged = [
        {**m, "benchmark": c["benchmark"], "grid": c.get("grid", ""), "machine_class": c["machine_class"]}
        for c in comparisons
        for m in c["metrics"]
        if m.get("verdict") in FLAGGED
    ]
    counted = [
        {
            "benchmark": c["benchmark"],
            "grid": c.get("grid", ""),
            "machine_class": c["machine_class"],
            "counts": split["counts"],
        }
        for c in comparisons
        if (split := flag_split(c["metrics"]))["rest"]
    ]
    return {"flagged": flagged, "counted": counted}
