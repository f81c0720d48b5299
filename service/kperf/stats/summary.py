"""Summary rows as mmtests' compare-mmtests.pl prints them, for cover letters.

mmtests pools every iteration of a kernel and prints, per metric, eight rows
(SummariseMultiops.pm lines 13-14: min, _mean, stddev-_mean, coeffvar-_mean,
max, _mean-50, _mean-95, _mean-99), where the mean is the harmonic one for a
metric whose higher values are better and the arithmetic one otherwise
(Summarise.pm lines 83-90, with Stat.pm's names, lines 44-86):

    throughput: Min Hmean HStddev HCoeffVar Max BHmean-50 BHmean-95 BHmean-99
    cost:       Min Amean Stddev  CoeffVar  Max BAmean-50 BAmean-95 BAmean-99

each with the change against the base kernel in parentheses, signed so that
negative is worse. The formulas are those of mmtests at commit
74aced35950fe732f0ca559398b5127e8b18c126 (bin/lib/MMTests/), computed the
same way here:

- the samples are sorted best first, descending for throughput and
  ascending for cost (Summarise.pm lines 305-312);
- Hmean = n / sum(1/x), Amean the plain mean (Stat.pm lines 228-307);
- Stddev = sqrt(sum((x - Amean)^2) / (n - 1)) and
  HStddev = sqrt(sum((1/x - 1/Hmean)^2) * Hmean^4 / n), the spread around the
  harmonic mean (Stat.pm lines 414-454); neither exists for one sample;
- CoeffVar and HCoeffVar = the stddev * 100 / the mean, 0 without a stddev
  (Stat.pm lines 500-523);
- BHmean-P and BAmean-P = the mean of the best int(n * P / 100) samples, at
  least one (Summarise.pm lines 266-277);
- the change is Stat.pm's pdiff (new * 100 / base - 100, lines 89-99) for a
  higher-is-better row and pndiff (100 - new * 100 / base, lines 101-113) for
  a lower-is-better one; the stddev and coeffvar rows are always
  lower-is-better (Stat.pm lines 36-41, Summarise.pm lines 63-77,
  Compare.pm lines 90-106).

Where mmtests prints NaN kperf differs, because a stored row must be a
number: a stddev of one sample is shown as 0.00 with no change (what
compare-mmtests.pl prints for NaN, Compare.pm lines 99-110), and a
throughput metric with a value of zero or below, whose Hmean mmtests cannot
compute (Stat.pm lines 286-291), gets the arithmetic rows.

A significant change is printed between stars instead of parentheses
(PrintGeneric.pm lines 49-51):

    Hmean     faults/sec-4      100.03 (   0.00%)       93.90 *  -6.13%*

The star comes from kperf's boot-level verdict, not from mmtests'
band-overlap rule: it marks the mean row when kperf calls the metric a
regression or an improvement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kperf.stats.abtest import MetricInput, MetricResult, Verdict, normalise_boots

TABLE_WIDTH = 80
BEST_PCTS = (50, 95, 99)


@dataclass(frozen=True)
class SummaryRow:
    label: str  # "Min", "Hmean", "HStddev", ...
    base: float
    head: float
    change_pct: float  # negative is worse, like mmtests
    significant: bool = False

    def as_dict(self) -> dict[str, Any]:
        # dataclasses.asdict deep-copies field by field: a comparison's 840 rows took 20 ms.
        return {
            "label": self.label,
            "base": self.base,
            "head": self.head,
            "change_pct": self.change_pct,
            "significant": self.significant,
        }


def _sum(values: Iterable[float]) -> float:
    """Left to right, as Stat.pm adds (sum() compensates its rounding from Python 3.12 on)."""
    total = 0.0
    for v in values:
        total += v
    return total


def _hmean(x: Sequence[float]) -> float:
    return len(x) / _sum(1.0 / v for v in x)


def _amean(x: Sequence[float]) -> float:
    return _sum(x) / len(x)


def _stddev(x: Sequence[float], harmonic: bool) -> float:
    """Stat.pm's calc_stddev around the arithmetic or the harmonic mean; NaN for one sample."""
    n = len(x)
    if n <= 1:
        return math.nan
    if harmonic:
        mean = _hmean(x)
        if mean == 0.0 or not math.isfinite(mean):
            # Readings so near 0 that their reciprocals overflow: the harmonic
            # mean underflows to 0 and the spread around it is not a number
            # (Stat.pm would die on the division).
            return math.nan
        return math.sqrt(_sum(_power(1.0 / v - 1.0 / mean, 2) for v in x) * _power(mean, 4) / n)
    mean = _amean(x)
    return math.sqrt(_sum(_power(v - mean, 2) for v in x) / (n - 1))


def _power(v: float, k: int) -> float:
    """v**k as Perl's pow gives it: inf where Python's float power raises OverflowError
    (a value near 0 makes 1/v huge on the harmonic side)."""
    try:
        return v**k
    except OverflowError:
        return math.inf


def _coeffvar(sd: float, mean: float) -> float:
    if math.isnan(sd) or mean == 0.0:
        return 0.0
    return sd * 100.0 / mean


def _best(x: Sequence[float], pct: int) -> Sequence[float]:
    """The first int(n * pct / 100) of x, sorted best first, never fewer than one."""
    return x[: max(1, int(len(x) * pct / 100))]


def pdiff(new: float, base: float) -> float:
    """Stat.pm's change of a higher-is-better value: positive is better."""
    if new == base or new == 0.0:
        return 0.0
    if base == 0.0:
        return 100.0
    return new * 100.0 / base - 100.0


def pndiff(new: float, base: float) -> float:
    """Stat.pm's change of a lower-is-better value: positive is better."""
    if new == base:
        return 0.0
    if new == 0.0:
        return 100.0
    if base == 0.0:
        return -99.0
    return 100.0 - new * 100.0 / base


def _stats(x: Sequence[float], harmonic: bool) -> list[float]:
    """The eight values, in mmtests' row order, of samples sorted best first."""
    mean = _hmean if harmonic else _amean
    sd = _stddev(x, harmonic)
    return [
        min(x),
        mean(x),
        sd,
        _coeffvar(sd, mean(x)),
        max(x),
        *(mean(_best(x, pct)) for pct in BEST_PCTS),
    ]


def summary_rows(inp: MetricInput, verdict: Verdict | None = None) -> list[SummaryRow]:
    """compare-mmtests.pl's eight rows for the pooled iterations of each side.

    Empty sides give no rows.
    """
    hib = inp.higher_is_better
    base = sorted((v for boot in normalise_boots(inp.base) for v in boot), reverse=hib)
    head = sorted((v for boot in normalise_boots(inp.head) for v in boot), reverse=hib)
    if not base or not head:
        return []
    harmonic = hib and base[-1] > 0.0 and head[-1] > 0.0
    labels = (
        ["Min", "Hmean", "HStddev", "HCoeffVar", "Max", *(f"BHmean-{p}" for p in BEST_PCTS)]
        if harmonic
        else ["Min", "Amean", "Stddev", "CoeffVar", "Max", *(f"BAmean-{p}" for p in BEST_PCTS)]
    )
    significant = verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
    rows = []
    for i, (label, b, h) in enumerate(zip(labels, _stats(base, harmonic), _stats(head, harmonic))):
        spread = label in ("Stddev", "HStddev", "CoeffVar", "HCoeffVar")
        change = pndiff if spread or not hib else pdiff
        if math.isnan(b) or math.isnan(h):
            pct, b, h = 0.0, (0.0 if math.isnan(b) else b), (0.0 if math.isnan(h) else h)
        else:
            pct = change(h, b)
        rows.append(SummaryRow(label, b, h, pct, significant and i == 1))
    return rows


def _fmt_value(x: float, width: int) -> str:
    text = f"{x:.2f}"
    if len(text) > width:
        text = f"{x:.4g}"
    return text.rjust(width)


def _fmt_pct(pct: float, significant: bool) -> str:
    body = f"{pct:7.2f}%" if math.isfinite(pct) else f"{'inf' if pct > 0 else '-inf':>7}%"
    return f"*{body}*" if significant else f"({body})"


def render_rows(
    metrics: Sequence[tuple[str, Sequence[SummaryRow], str | None]],
    base_name: str = "base",
    head_name: str = "head",
    width: int = TABLE_WIDTH,
) -> list[str]:
    """The mmtests-style table of (metric, its rows, kperf's verdict or None), at most `width` columns.

    Layout per row: label (10), metric name, then for base and head a value
    (12) and the change in parentheses or stars (10). Where a verdict is
    given it is printed beside the metric's mean row (the row mmtests marks).
    """
    value_w, pct_w, label_w = 12, 10, 10
    verdict_w = max((len(v) + 2 for _, _, v in metrics if v), default=0)
    name_w = max(8, width - label_w - 2 * (value_w + 1 + pct_w) - 1 - verdict_w)

    def clip(name: str) -> str:
        return name if len(name) <= name_w else name[: name_w - 1] + "~"

    lines = [
        " " * (label_w + name_w)
        + f"{base_name[: value_w + pct_w]:>{value_w + pct_w}}"
        + f" {head_name[: value_w + pct_w]:>{value_w + pct_w}}"
    ]
    for name, rows, verdict in metrics:
        for i, row in enumerate(rows):
            beside = f"  {verdict}" if verdict and i == 1 else ""
            lines.append(
                f"{row.label:<{label_w}}{clip(name):<{name_w}}"
                f"{_fmt_value(row.base, value_w)} {_fmt_pct(0.0, False)}"
                f"{_fmt_value(row.head, value_w)} {_fmt_pct(row.change_pct, row.significant)}{beside}"
            )
    return [line.rstrip() for line in lines]


def format_table(
    inputs: Mapping[str, MetricInput],
    results: Mapping[str, MetricResult],
    base_name: str = "base",
    head_name: str = "head",
    width: int = TABLE_WIDTH,
) -> str:
    """The mmtests-style table plus one verdict line per metric, at most `width` columns."""
    metrics = []
    for name, inp in inputs.items():
        res = results.get(name)
        metrics.append((name, summary_rows(inp, res.verdict if res else None), None))
    lines = [*render_rows(metrics, base_name, head_name, width), ""]
    for name in inputs:
        res = results.get(name)
        if res is not None:
            lines.extend(verdict_lines(name, res, width))
    return "\n".join(line.rstrip() for line in lines)


def verdict_lines(name: str, r: MetricResult | Mapping[str, Any], width: int = TABLE_WIDTH) -> list[str]:
    """`name: verdict change [ci] p q` and the boots and iterations behind it.

    r is a MetricResult or its JSON form (the API's metric dictionaries).
    """

    def get(key: str) -> Any:
        return r.get(key) if isinstance(r, Mapping) else getattr(r, key)

    change = f"{get('change_pct'):+.2f}%" if get("change_pct") is not None else "n/a"
    ci = (
        f"[{get('ci_low_pct'):+.2f}%, {get('ci_high_pct'):+.2f}%]"
        if get("ci_low_pct") is not None and get("ci_high_pct") is not None
        else ""
    )
    p = f"p={get('p_value'):.3g}" if get("p_value") is not None else "p=n/a"
    q = f"q={get('q_value'):.3g}" if get("q_value") is not None else "q=n/a"
    first = f"{name}: {get('verdict')} {change} {ci} {p} {q}".replace("  ", " ")
    second = (
        f"  boots {get('base_boots')}/{get('head_boots')}, iterations {get('base_samples')}/{get('head_samples')},"
        f" min effect {get('min_effect_pct'):g}%"
    )
    # A result's or the API's notes; a server from before notes were a list sends `note` alone.
    notes = get("notes")
    note = "; ".join(notes) if notes is not None else get("note")
    if note:
        second += f"; {note}"
    out = [first if len(first) <= width else first[: width - 1] + "~"]
    # Wrap the detail line at a word boundary so the table stays paste-able.
    while len(second) > width:
        cut = second.rfind(" ", 0, width)
        cut = cut if cut > 4 else width
        out.append(second[:cut])
        second = "    " + second[cut:].lstrip()
    out.append(second)
    return out
