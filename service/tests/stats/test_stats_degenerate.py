"""Zero variance and identical inputs: a verdict, never a crash, a division by zero or a NaN.

Under the instruction clock two boots of one build give bit-identical numbers, so these are
everyday inputs, not corner cases.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kperf.stats import MetricInput, MetricResult, Verdict, compare_metrics
from kperf.stats.abtest import NoisePrior
from kperf.stats.builds import between_build_noise
from kperf.stats.changepoints import estimate_drift, robust_sigma, series_change_points
from kperf.stats.noise import choose_design, min_detectable_effect, variance_components
from kperf.stats.sequential import plan_looks, sequential_look
from kperf.stats.summary import format_table, summary_rows

KPERF = Path(sys.executable).with_name("kperf")
# Not whole numbers: these tests are about boots that agree, not about the readings' resolution
# (test_stats_resolution.py).
FLAT = [[100.5, 100.5, 100.5]] * 4
LOWER = [[99.495, 99.495, 99.495]] * 4


def floats_of(r: MetricResult) -> list[float]:
    vals = [r.change_pct, r.ci_low_pct, r.ci_high_pct, r.p_value, r.q_value, r.base_mean, r.head_mean]
    return [v for v in vals if v is not None] + list(r.extra.values())


def test_identical_sides_are_no_change() -> None:
    r = compare_metrics({"m": MetricInput(FLAT, FLAT, True)})["m"]
    assert r.verdict is Verdict.NO_CHANGE and not r.significant
    assert r.change_pct == 0.0 and r.ci_low_pct == r.ci_high_pct == 0.0 and r.p_value == 1.0


def test_a_tiny_exact_difference_is_printed_with_its_first_digit_not_as_zero() -> None:
    head = [[100.497, 100.497, 100.497]] * 4
    r = compare_metrics({"m": MetricInput(FLAT, head, True, 0.5)})["m"]
    assert r.verdict is Verdict.NO_CHANGE
    assert r.notes[0].startswith("-0.003% in every boot, below the 0.5% practical threshold"), r.notes
    assert "+0.00%" not in "; ".join(r.notes) and "-0.00%" not in "; ".join(r.notes)


def test_identical_sides_are_no_change_even_without_a_threshold() -> None:
    assert compare_metrics({"m": MetricInput(FLAT, FLAT, True, 0.0)})["m"].verdict is Verdict.NO_CHANGE


def test_a_deterministic_one_percent_drop_below_the_threshold_is_no_change_with_a_note() -> None:
    r = compare_metrics({"m": MetricInput(FLAT, LOWER, True, 3.0)})["m"]
    assert r.verdict is Verdict.NO_CHANGE and r.significant
    assert r.change_pct == pytest.approx(-1.0) and r.ci_low_pct == pytest.approx(-1.0)
    assert r.p_value == 0.0 and r.q_value == 0.0
    # Not "significant": boots that agree exactly only say that they agree.
    assert "-1.00% in every boot, below the 3% practical threshold" in "; ".join(r.notes)
    assert "significant" not in "; ".join(r.notes)
    assert "the difference is exact" in "; ".join(r.notes)


@pytest.mark.parametrize("floor", [0.0, 0.5, 1.0])
def test_a_deterministic_one_percent_drop_beyond_the_threshold_is_a_regression(floor: float) -> None:
    r = compare_metrics({"m": MetricInput(FLAT, LOWER, True, floor)})["m"]
    assert r.verdict is Verdict.REGRESSION and r.significant


def test_lower_is_better_with_zero_variance_reads_the_mmtests_sign() -> None:
    r = compare_metrics({"cycles": MetricInput(FLAT, LOWER, False, 0.5)})["cycles"]
    assert r.verdict is Verdict.IMPROVEMENT and r.change_pct == pytest.approx(1.0)


def test_zero_variance_with_a_build_component_gives_a_finite_interval() -> None:
    r = compare_metrics({"m": MetricInput(FLAT, LOWER, True, 0.5, build_noise=NoisePrior(0.001, 20))})["m"]
    assert r.ci_low_pct is not None and r.ci_high_pct is not None
    assert r.ci_low_pct < -1.0 < r.ci_high_pct < -0.5
    assert r.verdict is Verdict.REGRESSION and 0.0 < (r.p_value or 0.0) < 1e-4


def test_sides_at_zero_are_no_change_and_a_change_from_zero_has_no_percentage() -> None:
    zeros = [[0.0, 0.0]] * 3
    assert compare_metrics({"m": MetricInput(zeros, zeros, True)})["m"].verdict is Verdict.NO_CHANGE
    r = compare_metrics({"m": MetricInput(zeros, [[1.0, 1.0]] * 3, True)})["m"]
    assert r.verdict is Verdict.INCONCLUSIVE and r.change_pct is None and "base mean is 0" in "; ".join(r.notes)


def test_sequential_looks_decide_on_zero_variance() -> None:
    plan = plan_looks(first=4, budget=8, step=4)
    same = sequential_look({"m": MetricInput(FLAT, FLAT, True)}, 1, plan)
    assert same.decide and same.results["m"].verdict is Verdict.NO_CHANGE
    drop = sequential_look({"m": MetricInput(FLAT, LOWER, True, 0.5)}, 1, plan)
    assert drop.decide and drop.results["m"].verdict is Verdict.REGRESSION
    small = sequential_look({"m": MetricInput(FLAT, LOWER, True, 3.0)}, 1, plan)
    assert small.results["m"].verdict is Verdict.NO_CHANGE and small.results["m"].significant


def test_summary_rows_and_the_table_on_zero_variance() -> None:
    inputs = {"m": MetricInput(FLAT, LOWER, True, 3.0), "z": MetricInput([[0.0]] * 2, [[0.0]] * 2, True)}
    results = compare_metrics(inputs)
    rows = summary_rows(inputs["m"], results["m"].verdict)
    spread = [r for r in rows if r.label.endswith(("Stddev", "CoeffVar"))]
    assert spread and all(abs(r.base) < 1e-9 and abs(r.head) < 1e-9 for r in spread)
    assert all(math.isfinite(v) for r in rows for v in (r.base, r.head, r.change_pct))
    assert not any(r.significant for r in rows)  # below the threshold: no star
    table = format_table(inputs, results)
    words = " ".join(table.split())
    assert "below the 3% practical threshold" in words and "nan" not in words.lower()


def test_change_points_on_a_constant_series_and_a_deterministic_step() -> None:
    assert series_change_points([[100.0] * 3] * 100, True) == []
    cps = series_change_points([[100.0] * 3] * 50 + [[99.0] * 3] * 50, True)
    assert [cp.index for cp in cps] == [50] and cps[0].change_pct == pytest.approx(-1.0)
    # One odd commit in a constant series is an outlier, not a change.
    assert series_change_points([[100.0] * 3] * 50 + [[90.0] * 3] + [[100.0] * 3] * 50, True) == []
    assert robust_sigma([5.0] * 20) == 0.0 and robust_sigma([5.0] * 19 + [6.0]) > 0.0
    assert estimate_drift([[1.0] * 100, [2.0] * 50]).rate == 0.0


def test_a_warm_up_pattern_every_boot_repeats_is_not_boot_noise() -> None:
    # Instruction clock: boots of one build are bit-identical, iterations within a boot are not
    # (fork0 10900.04 10777.63 10761.36 in every boot). A boot summary then has no noise at all.
    runs = [[[10900.04 * f, 10777.63 * f, 10761.36 * f]] * 3 for f in (1.0, 1.0004, 0.9997, 1.0011)]
    m = variance_components(runs)
    assert m.within_sd > 0.001 and m.between_sd == 0.0
    assert m.prior(3).sd == pytest.approx(0.0, abs=1e-12)
    r = compare_metrics({"m": MetricInput(runs[0], runs[1], True, 0.0, noise=m.prior(3))})["m"]
    assert r.verdict is Verdict.IMPROVEMENT and r.extra["noise_prior"] == 1.0
    assert "noisier" not in "; ".join(r.notes)  # three equal logs have a mean a bit off them: still no variance


def test_noise_models_of_identical_runs() -> None:
    m = variance_components([FLAT, FLAT, FLAT])
    assert m.between_sd == 0.0 and m.within_sd == 0.0
    assert m.prior(3) == NoisePrior(0.0, 9.0)
    assert min_detectable_effect(m, 5, 3) == 0.0
    assert choose_design(m, 1.0).boots == 2
    assert between_build_noise([[FLAT, FLAT, FLAT]]).prior() is None


values = st.one_of(st.just(100.0), st.just(0.0), st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))
side = st.lists(st.lists(values, min_size=1, max_size=4), min_size=0, max_size=5)
priors = st.one_of(st.none(), st.builds(NoisePrior, st.floats(0.0, 0.1), st.floats(0.0, 100.0)))


@settings(max_examples=150, deadline=None)
@given(side, side, st.booleans(), st.floats(0.0, 10.0), priors, priors)
def test_property_any_input_gives_a_verdict_and_no_nan(
    base: list[list[float]],
    head: list[list[float]],
    hib: bool,
    floor: float,
    noise: NoisePrior | None,
    build: NoisePrior | None,
) -> None:
    inp = MetricInput(base, head, hib, floor, noise=noise, build_noise=build)
    for r in (compare_metrics({"m": inp})["m"], sequential_look({"m": inp}, 1, plan_looks(2, 4, 2)).results["m"]):
        assert isinstance(r.verdict, Verdict)
        assert all(not math.isnan(v) for v in floats_of(r))
        assert r.p_value is None or 0.0 <= r.p_value <= 1.0
        if r.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT):
            assert r.significant and r.change_pct is not None and abs(r.change_pct) >= floor * (1 - 1e-9)
    summary_rows(inp)


def test_a_value_near_zero_on_the_harmonic_side_gives_a_table_not_an_exception() -> None:
    """Found by the property above: 1/v of a tiny positive value, squared, overflows
    Python's float power (OverflowError) where Perl's pow gives inf; the table is made."""
    inp = MetricInput([[1e-160, 2.0]], [[1.0, 2.0]], True, 0.0)
    rows = {r.label: r for r in summary_rows(inp)}
    assert len(rows) == 8 and rows["HStddev"].head == pytest.approx(0.4444444444444444)
    assert "HStddev" in format_table({"m": inp}, compare_metrics({"m": inp}))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([100.0, 100.0, 100.0, 99.0, 0.0]), min_size=0, max_size=60))
def test_property_change_points_never_fail_on_repeated_values(values: list[float]) -> None:
    for cp in series_change_points([[v, v] for v in values], True):
        assert 0 <= cp.index < len(values) and not math.isnan(cp.p_value)


# --- the command line, as a user runs it ------------------------------------------------------


def compare_json(doc: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [str(KPERF), "compare", "--json", "-"], input=json.dumps(doc), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)["metrics"]
    return out


def test_kperf_piped_into_a_reader_that_went_away_stops_quietly() -> None:
    """`kperf compare ... | head`: the reader closed its end; no traceback, SIGPIPE's exit status."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [str(KPERF), "compare", "-"],
            input=json.dumps({"metrics": {"same": {"higher_is_better": True, "base": FLAT, "head": FLAT}}}).encode(),
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.stderr.decode() == "" and proc.returncode == 141


def test_kperf_compare_json_gives_verdicts_on_zero_variance_and_identical_inputs() -> None:
    out = compare_json(
        {
            "metrics": {
                "same": {"higher_is_better": True, "base": FLAT, "head": FLAT},
                "drop": {"higher_is_better": True, "base": FLAT, "head": LOWER},
                "drop-0.5": {"higher_is_better": True, "base": FLAT, "head": LOWER, "min_effect_pct": 0.5},
                "drop-icount": {"higher_is_better": True, "base": FLAT, "head": LOWER, "clock": "instructions"},
                "zeros": {"higher_is_better": False, "base": [[0, 0]] * 3, "head": [[0, 0]] * 3},
            }
        }
    )
    # Each side is one build: the between-build part the bench measured (the largest, no benchmark
    # named) is in every interval of positive readings, so exact boots are no longer exact sides.
    assert out["same"]["verdict"] == "no-change" and out["same"]["p_value"] == 1.0
    assert out["drop"]["verdict"] == "no-change" and out["drop"]["significant"] is True
    assert "below the 3% practical threshold" in out["drop"]["note"]
    assert out["drop"]["change_pct"] == pytest.approx(-1.0) and 0.0 < out["drop"]["p_value"] < 1e-6
    assert out["drop"]["ci_low_pct"] < -1.0 < out["drop"]["ci_high_pct"] < -0.5
    assert out["drop-0.5"]["verdict"] == "regression"
    assert out["drop-icount"]["verdict"] == "regression" and out["drop-icount"]["min_effect_pct"] == 0.5
    assert out["zeros"]["verdict"] == "no-change" and out["zeros"]["build_noise"] is None
    assert all(m["build_noise"]["sd"] == pytest.approx(0.00061) for n, m in out.items() if n != "zeros")


def test_kperf_compare_json_takes_the_build_component_and_reports_it() -> None:
    rng = np.random.default_rng(1)
    base = [[10_000.0 * (1 + 0.0002 * i) for i in range(3)]] * 3
    head = [[v * (1 + rng.normal(0, 1e-9)) for v in base[0]]] * 3  # another build, within a hair
    out = compare_json(
        {
            "clock": "instructions",
            "metrics": {
                "fork1000": {
                    "higher_is_better": True,
                    "base": base,
                    "head": [[v * 0.9945 for v in b] for b in head],
                    "build_noise": {"sd": 0.0006, "dof": 30},
                },
                "brk": {"higher_is_better": True, "base": base, "head": head, "build_noise": {"sd": 0.0006, "dof": 30}},
            },
        }
    )
    fork, brk = out["fork1000"], out["brk"]
    assert fork["build_noise"]["sd"] == 0.0006 and fork["build_noise"]["dof"] == 30
    assert fork["build_noise"]["share"] == pytest.approx(1.0)
    assert fork["verdict"] == "regression" and fork["ci_low_pct"] < -0.55 < fork["ci_high_pct"]
    assert brk["verdict"] == "no-change" and brk["p_value"] > 0.5


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"build_noise": {"sd": -1, "dof": 3}}, "build_noise.sd must be a number >= 0"),
        ({"build_noise": {"sd": 0.001}}, "build_noise.dof must be a number > 0"),
        ({"build_noise": 0.001}, "'build_noise' must be an object"),
        ({"clock": "cycles"}, "'clock' must be one of instructions, wall"),
    ],
)
def test_kperf_compare_says_what_is_wrong_with_the_build_component_or_clock(spec: dict[str, Any], message: str) -> None:
    doc = {"metrics": {"m": {"higher_is_better": True, "base": FLAT, "head": FLAT, **spec}}}
    proc = subprocess.run(
        [str(KPERF), "compare", "--json", "-"], input=json.dumps(doc), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
