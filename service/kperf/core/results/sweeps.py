"""A benchmark's sweep read as a sweep: the metrics that differ only by a
trailing number (spawn-vmas-0 ... spawn-vmas-6400, faults/sec-threads-1 ... 4,
alloc-odr3-1 ... alloc-odr3-1024), in the order of that number.

Sorted by name the points of one sweep scatter (spawn-vmas-1600 before
spawn-vmas-200) among a comparison's other rows; the page and the mail show
each sweep as one small table or line instead (docs/submitting.md, "Sweeps").
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from typing_extensions import TypedDict

_POINT = re.compile(r"^(?P<prefix>.*?)(?P<x>\d+)$")

# Verdicts that the page and the mail mark in a sweep.
FLAGGED = ("regression", "improvement")


class SweepPoint(TypedDict):
    x: int
    metric: str
    change_pct: float | None
    verdict: str


class Sweep(TypedDict):
    # The metric name with N for the swept number: "spawn-vmas-N".
    name: str
    points: list[SweepPoint]


def metric_order(metric: str) -> tuple[tuple[str, int], ...]:
    """The sort key of a metric's name in every list kperf shows: its numbers
    read as numbers (spawn-vmas-200 before spawn-vmas-1600, alloc-odr0-16
    before alloc-odr0-128), the text between them as text."""
    parts = re.split(r"(\d+)", metric)
    texts, numbers = parts[0::2], [int(n) for n in parts[1::2]]
    return tuple((text, numbers[i] if i < len(numbers) else -1) for i, text in enumerate(texts))


def sweeps(rows: Iterable[tuple[str, float | None, str]], min_points: int = 2) -> list[Sweep]:
    """(metric, change %, verdict) rows grouped into sweeps of at least `min_points`, by name then x."""
    groups: dict[str, list[SweepPoint]] = defaultdict(list)
    for metric, change, verdict in rows:
        match = _POINT.match(metric)
        if match and match["prefix"]:
            groups[match["prefix"]].append(
                {"x": int(match["x"]), "metric": metric, "change_pct": change, "verdict": verdict}
            )
    return [
        {"name": f"{prefix}N", "points": sorted(points, key=lambda p: p["x"])}
        for prefix, points in sorted(groups.items())
        if len(points) >= min_points
    ]


def _cell(point: SweepPoint) -> str:
    change = "n/a" if point["change_pct"] is None else f"{point['change_pct']:+.2f}%"
    mark = "*" if point["verdict"] in FLAGGED else ""
    return f"{point['x']}: {change}{mark}"


def mail_lines(sweep: Sweep, width: int = 80) -> list[str]:
    """One sweep in the mail: its name, then its points wrapped to `width` (a point never split), flagged ones *."""
    lines, line = [f"  {sweep['name']}:"], ""
    for cell in (_cell(p) for p in sweep["points"]):
        candidate = f"{line}  {cell}" if line else f"    {cell}"
        if line and len(candidate) > width:
            lines.append(line)
            candidate = f"    {cell}"
        line = candidate
    return [*lines, line] if line else lines
