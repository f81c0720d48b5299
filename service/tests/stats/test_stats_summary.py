"""mmtests-style summary rows and the table people paste into cover letters."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any

import pytest

from kperf.cli.mmtests import render_kernel_comparison
from kperf.stats import MetricInput, compare_metrics
from kperf.stats.abtest import Verdict
from kperf.stats.summary import format_table, summary_rows
from kperf_runner.benchmarks import get_benchmark, resolve_params

# Each boot's median (its summary: kperf.stats.abtest.boot_mean) near the other's, so the two
# boots a side agree and the 6% drop is a regression; mmtests' rows pool all six values.
BASE = [[101.2, 98.7, 100.1], [99.8, 99.9, 100.4]]
HEAD = [[93.1, 94.0, 95.2], [92.8, 94.4, 93.9]]


def test_throughput_gets_hmean_rows_with_negative_change_when_worse() -> None:
    rows = {r.label: r for r in summary_rows(MetricInput(BASE, HEAD, True), Verdict.REGRESSION)}
    assert list(rows) == ["Min", "Hmean", "HStddev", "HCoeffVar", "Max", "BHmean-50", "BHmean-95", "BHmean-99"]
    assert rows["Min"].base == 98.7 and rows["Max"].head == 95.2
    pooled = [v for b in BASE for v in b]
    assert rows["Hmean"].base == pytest.approx(len(pooled) / sum(1 / v for v in pooled))
    assert rows["Hmean"].change_pct < 0 and rows["Hmean"].significant
    assert not rows["Min"].significant


def test_lower_is_better_gets_amean_and_the_mmtests_sign() -> None:
    rows = {r.label: r for r in summary_rows(MetricInput([[425.0, 425.0]], [[348.0, 348.0]], False))}
    assert list(rows) == ["Min", "Amean", "Stddev", "CoeffVar", "Max", "BAmean-50", "BAmean-95", "BAmean-99"]
    assert rows["Amean"].change_pct == pytest.approx(18.12, abs=0.01)


def test_best_95_percent_drops_the_worst_sample() -> None:
    vals = [[float(v) for v in range(1, 21)]]
    rows = {r.label: r for r in summary_rows(MetricInput(vals, vals, False))}
    assert rows["BAmean-95"].base == pytest.approx(sum(range(1, 20)) / 19)  # 20 → 19 best (lowest) kept


def test_the_table_fits_an_email_and_stars_significant_means() -> None:
    inputs = {
        "faults/sec-4": MetricInput(BASE, HEAD, True),
        "a-very-long-metric-name-that-would-not-fit-in-the-column": MetricInput(BASE, BASE, True),
    }
    text = format_table(inputs, compare_metrics(inputs))
    assert all(len(line) <= 80 for line in text.splitlines())
    hmean = next(line for line in text.splitlines() if line.startswith("Hmean") and "faults/sec-4" in line)
    assert hmean.endswith("*  -6.12%*") and "(   0.00%)" in hmean
    assert "faults/sec-4: regression" in text and "boots 2/2, iterations 6/6" in text


# -- the rows compare-mmtests.pl prints ------------------------------------------------------
#
# Golden rows: mmtests' own compare-mmtests.pl, at commit 74aced35950fe732f0ca559398b5127e8b18c126,
# on the samples below. The mmtests result directories were written from the raw outputs below
# by the runner's mapping (Benchmark.mmtests_runs), two boots per kernel as iter-0 and iter-1:
#
#   git --git-dir=mmtests.git archive 74aced35950fe732f0ca559398b5127e8b18c126 | tar -x -C /tmp/mmtests
#   for bench, raw, params in (("pft", _pft_raw, PFT_PARAMS), ("pagealloc", _pagealloc_raw, PAGEALLOC_PARAMS)):
#       for side, boot in (("base", 0), ("base", 1), ("head", 0), ("head", 1)):
#           files = get_benchmark(bench).mmtests_runs(raw(side, boot), params)[bench]
#           # each file to work/<side>/iter-<boot>/<bench>/logs/<name>
#   cd work && perl /tmp/mmtests/bin/compare-mmtests.pl -d . -b pft -n base,head
#              perl /tmp/mmtests/bin/compare-mmtests.pl -d . -b pagealloc -n base,head
#
# (perl with File::Slurp, List::MoreUtils and File::Which, and R for mmtests' significance
# stars.) The stars are mmtests' own band rule; kperf stars from its verdict, so only the
# values and changes are compared. One order: compare-mmtests.pl -b pagealloc stops on
# several orders with different batch ranges (docs/benchmarks.md).
PER_BOOT = 17  # 34 samples a side: BHmean-50, -95 and -99 keep 17, 32 and 33


def _pft_raw(side: str, boot: int) -> str:
    """A threads run of one client, PER_BOOT iterations, in pft.c's format."""
    rows = []
    for i in range(boot * PER_BOOT, (boot + 1) * PER_BOOT):
        per_sec = (300000 if side == "base" else 282000) + ((i * 7919) % 1013) * 12.125
        per_cpu = (150000 if side == "base" else 151000) + ((i * 104729) % 997) * 3.5
        rows.append(" %3d %4d %3d %8.2fs %8.2fs %8.2fs  %10.3f %10.3f" % (0, 1, 1, 0.01, 0.5, 0.14, per_cpu, per_sec))  # noqa: UP031
    info = f"pft-info: mode=threads clients=1 iterations={PER_BOOT} bytes=67108864 pages=16384 cpus=2 thp_off=madvise"
    return "\n".join([info, "  Gb  Thr CLine   User     System   Wall    flt/cpu/s fault/wsec", *rows]) + "\n"


def _pagealloc_raw(side: str, boot: int) -> str:
    """Order 0, batch 1: two warm-up rounds, then PER_BOOT, in the module's format."""
    rows = ["order  0 batch      1 alloc 9999 free 9999"] * 2
    for i in range(boot * PER_BOOT, (boot + 1) * PER_BOOT):
        alloc = (400 if side == "base" else 431) + (i * 37) % 23
        free = (200 if side == "base" else 199) + (i * 11) % 7
        rows.append(f"order  0 batch      1 alloc {alloc} free {free}")
    return "\n".join(["kmodload: module=pagealloc cpu=0 params=orders=0", "clock: tsc", *rows]) + "\n"


PFT_PARAMS = resolve_params("pft", "quick", {"clients": [1], "iterations": PER_BOOT})
PAGEALLOC_PARAMS = resolve_params("pagealloc", "quick", {"orders": [0], "batch_limit_kb": 8, "outer": PER_BOOT + 2})

MMTESTS_PFT = """
Min       faults/cpu-1   150000.0000 (   0.00%)   151000.0000 (   0.67%)
Min       faults/sec-1   300000.0000 (   0.00%)   282000.0000 (  -6.00%)
Hmean     faults/cpu-1   151405.7950 (   0.00%)   152405.8359 (   0.66%)
Hmean     faults/sec-1   306295.3586 (   0.00%)   288292.6405 *  -5.88%*
HStddev   faults/cpu-1      971.3318 (   0.00%)      971.3497 (  -0.00%)
HStddev   faults/sec-1     3651.5601 (   0.00%)     3651.6203 (  -0.00%)
HCoeffVar faults/cpu-1        0.6415 (   0.00%)        0.6373 (   0.65%)
HCoeffVar faults/sec-1        1.1922 (   0.00%)        1.2666 (  -6.25%)
Max       faults/cpu-1   153388.0000 (   0.00%)   154388.0000 (   0.65%)
Max       faults/sec-1   312173.5000 (   0.00%)   294173.5000 (  -5.77%)
BHmean-50 faults/cpu-1   152216.6585 (   0.00%)   153216.6778 (   0.66%)
BHmean-50 faults/sec-1   309485.3885 (   0.00%)   291484.7319 (  -5.82%)
BHmean-95 faults/cpu-1   151492.8598 (   0.00%)   152492.8977 (   0.66%)
BHmean-95 faults/sec-1   306669.9624 (   0.00%)   288667.5563 (  -5.87%)
BHmean-99 faults/cpu-1   151448.8063 (   0.00%)   152448.8458 (   0.66%)
BHmean-99 faults/sec-1   306490.2542 (   0.00%)   288487.7136 (  -5.87%)
"""
MMTESTS_PAGEALLOC = """
Min       alloc-odr0-1      400.00 (   0.00%)      431.00 (  -7.75%)
Min       free-odr0-1       200.00 (   0.00%)      199.00 (   0.50%)
Min       total-odr0-1      600.00 (   0.00%)      630.00 (  -5.00%)
Amean     alloc-odr0-1      410.47 (   0.00%)      441.47 *  -7.55%*
Amean     free-odr0-1       203.00 (   0.00%)      202.00 (   0.49%)
Amean     total-odr0-1      613.47 (   0.00%)      643.47 *  -4.89%*
Stddev    alloc-odr0-1        6.82 (   0.00%)        6.82 (   0.00%)
Stddev    free-odr0-1         2.06 (   0.00%)        2.06 (   0.00%)
Stddev    total-odr0-1        7.38 (   0.00%)        7.38 (   0.00%)
CoeffVar  alloc-odr0-1        1.66 (   0.00%)        1.55 (   7.02%)
CoeffVar  free-odr0-1         1.01 (   0.00%)        1.02 (  -0.50%)
CoeffVar  total-odr0-1        1.20 (   0.00%)        1.15 (   4.66%)
Max       alloc-odr0-1      422.00 (   0.00%)      453.00 (  -7.35%)
Max       free-odr0-1       206.00 (   0.00%)      205.00 (   0.49%)
Max       total-odr0-1      625.00 (   0.00%)      655.00 (  -4.80%)
BAmean-50 alloc-odr0-1      404.65 (   0.00%)      435.65 (  -7.66%)
BAmean-50 free-odr0-1       201.24 (   0.00%)      200.24 (   0.50%)
BAmean-50 total-odr0-1      607.41 (   0.00%)      637.41 (  -4.94%)
BAmean-95 alloc-odr0-1      409.78 (   0.00%)      440.78 (  -7.57%)
BAmean-95 free-odr0-1       202.81 (   0.00%)      201.81 (   0.49%)
BAmean-95 total-odr0-1      612.75 (   0.00%)      642.75 (  -4.90%)
BAmean-99 alloc-odr0-1      410.12 (   0.00%)      441.12 (  -7.56%)
BAmean-99 free-odr0-1       202.91 (   0.00%)      201.91 (   0.49%)
BAmean-99 total-odr0-1      613.12 (   0.00%)      643.12 (  -4.89%)
"""
_MMTESTS_ROW = re.compile(r"(\S+)\s+(\S+)\s+(\S+) [(*]\s*(\S+)%[)*]\s+(\S+) [(*]\s*(\S+)%[)*]")


def _samples(bench: str, raw: Callable[[str, int], str], params: dict[str, Any]) -> dict[str, MetricInput]:
    """kperf's parse of two boots a side, as compare inputs under mmtests' metric names."""
    benchmark = get_benchmark(bench)
    per_side: dict[str, dict[str, list[list[float]]]] = {"base": {}, "head": {}}
    for side, metrics in per_side.items():
        for boot in (0, 1):
            values: dict[str, list[float]] = {}
            for s in benchmark.parse(raw(side, boot), params):
                values.setdefault(s.metric.replace("-threads-", "-"), []).append(s.value)
            for metric, boot_values in values.items():
                metrics.setdefault(metric, []).append(boot_values)
    hib = {m.name.replace("-threads-", "-"): m.higher_is_better for m in benchmark.metrics(params)}
    return {m: MetricInput(per_side["base"][m], per_side["head"][m], hib[m]) for m in per_side["base"]}


@pytest.mark.parametrize(
    ("bench", "raw", "params", "golden", "decimals"),
    [
        ("pft", _pft_raw, PFT_PARAMS, MMTESTS_PFT, 4),  # ExtractPft.pm prints 4 decimals
        ("pagealloc", _pagealloc_raw, PAGEALLOC_PARAMS, MMTESTS_PAGEALLOC, 2),
    ],
)
def test_the_rows_are_what_mmtests_compare_prints(
    bench: str, raw: Callable[[str, int], str], params: dict[str, Any], golden: str, decimals: int
) -> None:
    inputs = _samples(bench, raw, params)
    ours = {(row.label, metric): row for metric, inp in inputs.items() for row in summary_rows(inp)}
    theirs = [_MMTESTS_ROW.fullmatch(line) for line in golden.strip().splitlines()]
    assert len(theirs) == len(ours) == 8 * len(inputs)
    for match in theirs:
        assert match is not None
        label, metric, base, base_pct, head, head_pct = match.groups()
        row = ours[(label, metric)]
        assert (f"{row.base:.{decimals}f}", f"{row.head:.{decimals}f}") == (base, head), (label, metric)
        assert base_pct == "0.00" and f"{row.change_pct:.2f}" == head_pct, (label, metric)
    # The labels come in mmtests' order.
    first = next(iter(inputs))
    assert [r.label for r in summary_rows(inputs[first])] == [
        m.group(1) for m in theirs if m is not None and m.group(2) == first
    ]


def test_one_sample_has_no_stddev_and_a_non_positive_throughput_gets_arithmetic_rows() -> None:
    rows = {r.label: r for r in summary_rows(MetricInput([[100.0]], [[90.0, 80.0]], True))}
    # mmtests' NaN (Stat.pm calc_stddev, one sample) prints as 0.00 with no change.
    assert (rows["HStddev"].base, rows["HStddev"].change_pct) == (0.0, 0.0)
    assert rows["HStddev"].head == pytest.approx(
        math.sqrt(((1 / 90 - 1 / 84.70588) ** 2 + (1 / 80 - 1 / 84.70588) ** 2) * 84.70588**4 / 2), rel=1e-5
    )
    # Hmean needs every value positive; mmtests prints NaN, kperf the arithmetic rows.
    rows = {r.label: r for r in summary_rows(MetricInput([[0.0, 2.0]], [[1.0, 3.0]], True))}
    assert list(rows)[:4] == ["Min", "Amean", "Stddev", "CoeffVar"] and rows["Amean"].base == 1.0


def test_compare_kernels_prints_the_rows_with_the_verdict_beside_the_mean() -> None:
    inputs = {"faults/sec-threads-16": MetricInput(BASE, BASE, True), "page_test": MetricInput(BASE, HEAD, True)}
    results = compare_metrics(inputs)
    metrics = []
    for name, r in results.items():
        summary = [dataclasses.asdict(row) for row in summary_rows(inputs[name], r.verdict)]
        metrics.append({**dataclasses.asdict(r), "verdict": str(r.verdict), "metric": name, "summary": summary})
    lines = render_kernel_comparison(
        {
            "benchmark": "pft",
            "machine_class": "qemu-x86_64",
            "base_sha": "a" * 40,
            "head_sha": "b" * 40,
            "method": "m",
            "alpha": 0.05,
            "metrics": metrics,
        }
    )
    assert lines[0] == "pft on qemu-x86_64: bbbbbbbbbbbb vs aaaaaaaaaaaa (m, alpha 0.05)"
    mean_rows = [line for line in lines if line.startswith("Hmean")]
    assert [line.split()[1] for line in mean_rows] == ["faults/sec-threads-16", "page_test"]  # never clipped
    assert mean_rows[0].endswith("(   0.00%)  no-change") and mean_rows[1].endswith("*  -6.12%*  regression")
    assert sum(line.startswith("BHmean-99 ") for line in lines) == 2
    assert "page_test: regression -6.05%" in "\n".join(lines)  # from the boots' medians, not the Hmean


def test_throughput_readings_whose_reciprocals_overflow_get_no_spread_instead_of_an_error() -> None:
    # 5e-324 is the smallest float: its reciprocal is inf, the harmonic mean 0,
    # and the spread around it was a ZeroDivisionError.
    tiny = [[5e-324, 5e-324, 1e-320]]
    rows = {r.label: r for r in summary_rows(MetricInput(tiny, tiny, True))}
    assert rows["HStddev"].base == 0.0 or math.isnan(rows["HStddev"].base)
