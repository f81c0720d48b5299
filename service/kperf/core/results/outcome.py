"""A submission's outcome in words, said the same way by the mail, the page, the API and the CLI.

The mail's subject, the line at the top of the page and `verdict` in the API
are one sentence made here; so are the notes on boots kperf added after an
inconclusive look, which read as pending while those boots run and in the
past tense once they ran.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from typing_extensions import TypedDict

from kperf.core.models import MetricComparison, Submission
from kperf.core.results import sweeps

# Metrics a rerun note names before it counts the rest.
RERUN_NAMES_AT_MOST = 4


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def verdict_line(sub: Submission) -> str:
    """'2 regressions, 1 improvement', 'no regression', 'failed', or what is still to come."""
    if sub.status == Submission.Status.FAILED:
        return "failed"
    counts = Counter(
        MetricComparison.objects.filter(comparison__submission=sub).values_list("verdict", flat=True).order_by()
    )
    reg, imp = counts[MetricComparison.Verdict.REGRESSION], counts[MetricComparison.Verdict.IMPROVEMENT]
    found = ", ".join(_plural(n, word) for n, word in ((reg, "regression"), (imp, "improvement")) if n)
    # Metrics kperf failed on are no verdict at all: "no regression" alone would claim too much.
    errors = counts[MetricComparison.Verdict.ERROR]
    unjudged = f"; {_plural(errors, 'metric')} not judged (a kperf fault)" if errors else ""
    if sub.status == Submission.Status.DONE:
        return (found or "no regression") + unjudged
    # An interim look already decided these, but more boots can still change them.
    return f"no verdict yet ({sub.status})" + (f"; so far {found}" if found else "")


def rerun_notes(sub: Submission) -> list[str]:
    """One sentence per time kperf added boots, in order.

    Boots added at a look are pending until the comparison's next look
    (or the end of the submission) shows they ran.
    """
    if not sub.reruns:
        return []
    # The last look each comparison has had (a comparison is stored per look).
    looked: dict[tuple[str, str, str], int] = {}
    for mclass, bench, grid, look in sub.comparisons.values_list("machine_class__name", "benchmark", "grid", "look"):
        looked[(mclass, bench, grid)] = max(look, looked.get((mclass, bench, grid), 0))
    several = len(sub.grids) > 1
    return [
        rerun_note(
            r,
            sub.is_final or looked.get((r["machine_class"], r["benchmark"], r.get("grid", "")), 0) > r["look"],
            several,
        )
        for r in sub.reruns
    ]


def benchmark_label(benchmark: str, grid: str, several_grids: bool) -> str:
    """A comparison's benchmark as the page, the mail and the CLI name it: with its grid when the
    submission asked for several ("pft (scaling grid)")."""
    return f"{benchmark} ({grid} grid)" if several_grids and grid else benchmark


def rerun_note(r: dict[str, Any], ran: bool, several_grids: bool = False) -> str:
    boots = _plural(r["more_boots"], "more boot")
    what = f"kperf added {boots} per side" if ran else f"kperf queued {boots} per side; they are running"
    names = sorted(r["inconclusive"], key=sweeps.metric_order)
    # A look of the page allocator can leave 70 metrics undecided: the note
    # names a few, the tables below name them all (issue 41: the finding first).
    if len(names) > RERUN_NAMES_AT_MOST:
        more = len(names) - RERUN_NAMES_AT_MOST
        shown = f"{len(names)} metrics ({', '.join(names[:RERUN_NAMES_AT_MOST])} and {more} more)"
    else:
        shown = ", ".join(names)
    bench = benchmark_label(r["benchmark"], r.get("grid", ""), several_grids)
    return f"Look {r['look']} of {bench} on {r['machine_class']} was inconclusive for {shown}: {what}."


class MetricVerdict(TypedDict):
    """One metric's answer: the verdict and the numbers it rests on."""

    metric: str
    unit: str
    higher_is_better: bool
    verdict: str
    base_mean: float | None
    head_mean: float | None
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    q_value: float | None
    min_effect_pct: float
    base_boots: int
    head_boots: int
    base_samples: int
    head_samples: int
    note: str  # the notes joined with "; ", as before there were several
    notes: list[str]  # one sentence each (MetricComparison.notes)


def metric_verdict(metric: str, unit: str, higher_is_better: bool, r: Any) -> MetricVerdict:
    """One metric's answer; `r` is a stored MetricComparison or a fresh
    kperf.stats MetricResult (they share these attribute names)."""
    return {
        "metric": metric,
        "unit": unit,
        "higher_is_better": higher_is_better,
        "verdict": str(r.verdict),
        "base_mean": r.base_mean,
        "head_mean": r.head_mean,
        "change_pct": r.change_pct,
        "ci_low_pct": r.ci_low_pct,
        "ci_high_pct": r.ci_high_pct,
        "p_value": r.p_value,
        "q_value": r.q_value,
        "min_effect_pct": r.min_effect_pct,
        "base_boots": r.base_boots,
        "head_boots": r.head_boots,
        "base_samples": r.base_samples,
        "head_samples": r.head_samples,
        "note": "; ".join(r.notes),
        "notes": list(r.notes),
    }
