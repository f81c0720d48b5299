"""mmtests-style summary rows and the table people paste into cover letters."""

from __future__ import annotations

import pytest

from kperf.stats import MetricInput, compare_metrics
from kperf.stats.abtest import Verdict
from kperf.stats.summary import format_table, summary_rows

BASE = [[101.2, 99.8, 100.4], [98.7, 99.9, 100.1]]
HEAD = [[93.1, 94.0, 92.8], [95.2, 94.4, 93.9]]


def test_throughput_gets_hmean_rows_with_negative_change_when_worse() -> None:
    rows = {r.label: r for r in summary_rows(MetricInput(BASE, HEAD, True), Verdict.REGRESSION)}
    assert list(rows) == ["Min", "Hmean", "Stddev", "CoeffVar", "Max", "BHmean-95"]
    assert rows["Min"].base == 98.7 and rows["Max"].head == 95.2
    pooled = [v for b in BASE for v in b]
    assert rows["Hmean"].base == pytest.approx(len(pooled) / sum(1 / v for v in pooled))
    assert rows["Hmean"].change_pct < 0 and rows["Hmean"].significant
    assert not rows["Min"].significant


def test_lower_is_better_gets_amean_and_the_mmtests_sign() -> None:
    rows = {r.label: r for r in summary_rows(MetricInput([[425.0, 425.0]], [[348.0, 348.0]], False))}
    assert "Amean" in rows and "BAmean-95" in rows
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
