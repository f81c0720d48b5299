"""Summary rows as mmtests' compare-kernels prints them, for cover letters.

mmtests pools every iteration of a kernel and prints, per metric, Min, the
mean (Hmean for throughput, Amean otherwise), Stddev, CoeffVar, Max and the
mean of the best 95% of samples (BHmean-95 / BAmean-95), each with the change
against the base kernel in parentheses, signed so that negative is worse. A
significant change is printed between stars instead of parentheses:

    Hmean     faults/sec-4      100.03 (   0.00%)       93.90 *  -6.13%*

The rows here are computed the same way (pooled iterations), so the numbers
match what a kernel developer gets from mmtests. The star, however, comes from
kperf's boot-level verdict, not from mmtests' band-overlap rule: it marks the
mean row when kperf calls the metric a regression or an improvement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kperf.stats.abtest import MetricInput, MetricResult, Verdict, normalise_boots

TABLE_WIDTH = 80


@dataclass(frozen=True)
class SummaryRow:
    label: str  # "Min", "Hmean", "Stddev", ...
    base: float
    head: float
    change_pct: float  # negative is worse, like mmtests
    significant: bool = False


def _pooled(boots: Sequence[Sequence[float]]) -> np.ndarray:
    vals = [v for b in boots for v in b]
    return np.asarray(vals, dtype=float)


def _hmean(x: np.ndarray) -> float:
    return float(len(x) / np.sum(1.0 / x))


def _best(x: np.ndarray, higher_is_better: bool, pct: float = 95.0) -> np.ndarray:
    """The best `pct`% of samples: drop the worst tail, as mmtests' BAmean-95 does."""
    keep = max(1, math.floor(len(x) * pct / 100.0))
    ordered = np.sort(x)
    return ordered[-keep:] if higher_is_better else ordered[:keep]


def _change(base: float, head: float, higher_is_better: bool) -> float:
    if base == 0.0:
        return 0.0 if head == 0.0 else (math.inf if (head > 0) == higher_is_better else -math.inf)
    rel = (head - base) / abs(base) * 100.0
    return rel if higher_is_better else -rel


def summary_rows(inp: MetricInput, verdict: Verdict | None = None) -> list[SummaryRow]:
    """Min, Amean or Hmean, Stddev, CoeffVar, Max, BAmean-95 or BHmean-95 of pooled iterations.

    Hmean is used for higher-is-better metrics (throughput) when every value is
    positive; Amean otherwise. Stddev and CoeffVar are lower-is-better whatever
    the metric. Empty sides give no rows.
    """
    base = _pooled(normalise_boots(inp.base))
    head = _pooled(normalise_boots(inp.head))
    if base.size == 0 or head.size == 0:
        return []
    hib = inp.higher_is_better
    harmonic = hib and bool(np.all(base > 0) and np.all(head > 0))
    mean = _hmean if harmonic else (lambda x: float(np.mean(x)))
    mean_label = "Hmean" if harmonic else "Amean"
    best_label = "BHmean-95" if harmonic else "BAmean-95"

    def sd(x: np.ndarray) -> float:
        return float(np.std(x, ddof=1)) if x.size > 1 else 0.0

    def cv(x: np.ndarray) -> float:
        m = float(np.mean(x))
        return sd(x) / abs(m) * 100.0 if m != 0.0 else 0.0

    significant = verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
    rows = [
        ("Min", float(np.min(base)), float(np.min(head)), hib, False),
        (mean_label, mean(base), mean(head), hib, significant),
        ("Stddev", sd(base), sd(head), False, False),
        ("CoeffVar", cv(base), cv(head), False, False),
        ("Max", float(np.max(base)), float(np.max(head)), hib, False),
        (best_label, mean(_best(base, hib)), mean(_best(head, hib)), hib, False),
    ]
    return [SummaryRow(lbl, b, h, _change(b, h, better_up), sig) for lbl, b, h, better_up, sig in rows]


def _fmt_value(x: float, width: int) -> str:
    text = f"{x:.2f}"
    if len(text) > width:
        text = f"{x:.4g}"
    return text.rjust(width)


def _fmt_pct(pct: float, significant: bool) -> str:
    body = f"{pct:7.2f}%" if math.isfinite(pct) else f"{'inf' if pct > 0 else '-inf':>7}%"
    return f"*{body}*" if significant else f"({body})"


def format_table(
    inputs: Mapping[str, MetricInput],
    results: Mapping[str, MetricResult],
    base_name: str = "base",
    head_name: str = "head",
    width: int = TABLE_WIDTH,
) -> str:
    """The mmtests-style table plus one verdict line per metric, at most `width` columns.

    Layout per row: label (10), metric name, then for base and head a value
    (12) and the change in parentheses or stars (10).
    """
    value_w, pct_w, label_w = 12, 10, 10
    name_w = max(8, width - label_w - 2 * (value_w + 1 + pct_w) - 1)
    names = list(inputs)

    def clip(name: str) -> str:
        return name if len(name) <= name_w else name[: name_w - 1] + "~"

    lines = [
        " " * (label_w + name_w)
        + f"{base_name[: value_w + pct_w]:>{value_w + pct_w}}"
        + f" {head_name[: value_w + pct_w]:>{value_w + pct_w}}"
    ]
    for name in names:
        res = results.get(name)
        for row in summary_rows(inputs[name], res.verdict if res else None):
            lines.append(
                f"{row.label:<{label_w}}{clip(name):<{name_w}}"
                f"{_fmt_value(row.base, value_w)} {_fmt_pct(0.0, False)}"
                f"{_fmt_value(row.head, value_w)} {_fmt_pct(row.change_pct, row.significant)}"
            )
    lines.append("")
    for name in names:
        res = results.get(name)
        if res is not None:
            lines.extend(verdict_lines(name, res, width))
    return "\n".join(line.rstrip() for line in lines)


def verdict_lines(name: str, r: MetricResult, width: int = TABLE_WIDTH) -> list[str]:
    """`name: verdict change [ci] p q` and the boots and iterations behind it."""
    change = f"{r.change_pct:+.2f}%" if r.change_pct is not None else "n/a"
    ci = (
        f"[{r.ci_low_pct:+.2f}%, {r.ci_high_pct:+.2f}%]"
        if r.ci_low_pct is not None and r.ci_high_pct is not None
        else ""
    )
    p = f"p={r.p_value:.3g}" if r.p_value is not None else "p=n/a"
    q = f"q={r.q_value:.3g}" if r.q_value is not None else "q=n/a"
    first = f"{name}: {r.verdict} {change} {ci} {p} {q}".replace("  ", " ")
    second = (
        f"  boots {r.base_boots}/{r.head_boots}, iterations {r.base_samples}/{r.head_samples},"
        f" min effect {r.min_effect_pct:g}%"
    )
    if r.note:
        second += f"; {r.note}"
    out = [first if len(first) <= width else first[: width - 1] + "~"]
    # Wrap the detail line at a word boundary so the table stays paste-able.
    while len(second) > width:
        cut = second.rfind(" ", 0, width)
        cut = cut if cut > 4 else width
        out.append(second[:cut])
        second = "    " + second[cut:].lstrip()
    out.append(second)
    return out
