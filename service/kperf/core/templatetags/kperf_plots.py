"""Template helpers for the pictures (kperf.core.web.plot_pages serves them)."""

from __future__ import annotations

from typing import Any

from django import template

from kperf.core.models import TrackedBranch
from kperf.core.models.lab import unit_on
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
            key=lambda m: (not m["changed"], m["metric"]),
        )
    return groups
