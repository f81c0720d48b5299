"""The practical threshold: significant changes below it are shown, never called regressions."""

from __future__ import annotations

import numpy as np
import pytest

from kperf.stats import DEFAULT_MIN_EFFECT_PCT, MetricInput, Verdict, compare_metrics, min_effect_for_clock
from kperf.stats.jsonio import FormatError, parse_compare
from kperf.stats.sequential import Plan, sequential_look
from kperf.stats.summary import format_table


def tight(rng: np.random.Generator, level: float, k: int = 6) -> list[list[float]]:
    """Boots 0.05% apart: a 0.42% change is far beyond the noise."""
    return [list(level * (1 + rng.normal(0, 0.0005) + rng.normal(0, 0.0002, 3))) for _ in range(k)]


@pytest.mark.parametrize("hib", [True, False])
def test_a_significant_change_below_the_threshold_is_shown_but_not_a_regression(hib: bool) -> None:
    rng = np.random.default_rng(1)
    head_level = 99.58 if hib else 100.42
    r = compare_metrics({"m": MetricInput(tight(rng, 100.0), tight(rng, head_level), hib, 1.0)})["m"]
    assert r.significant and r.q_value is not None and r.q_value < 0.001
    assert r.verdict is Verdict.NO_CHANGE
    assert r.change_pct is not None and -0.6 < r.change_pct < -0.3
    assert "; ".join(r.notes) == f"significant {r.change_pct:+.2f}% change, below the 1% practical threshold"


def test_the_same_change_is_a_regression_when_it_clears_the_threshold() -> None:
    rng = np.random.default_rng(1)
    r = compare_metrics({"m": MetricInput(tight(rng, 100.0), tight(rng, 99.58), True, 0.25)})["m"]
    assert r.significant and r.verdict is Verdict.REGRESSION and "practical threshold" not in "; ".join(r.notes)


def test_a_significant_change_whose_interval_straddles_the_threshold_is_inconclusive() -> None:
    spread = [-0.003, -0.001, 0.001, 0.003]  # boots 0.26% apart: the interval is about +-0.45%
    base = [[100.0 * (1 + d)] * 3 for d in spread]
    head = [[99.2 * (1 + d)] * 3 for d in spread]
    r = compare_metrics({"m": MetricInput(base, head, True, 1.0)})["m"]
    assert r.ci_low_pct is not None and r.ci_low_pct < -1.0 < (r.change_pct or 0)
    assert r.significant and r.verdict is Verdict.INCONCLUSIVE
    assert "below the 1% practical threshold" in "; ".join(r.notes)


def test_a_change_that_is_not_significant_is_not_marked() -> None:
    rng = np.random.default_rng(3)
    r = compare_metrics({"m": MetricInput(tight(rng, 100.0), tight(rng, 100.0), True, 1.0)})["m"]
    assert not r.significant and r.verdict is Verdict.NO_CHANGE and "; ".join(r.notes) == ""


def test_sequential_looks_apply_the_same_rule() -> None:
    rng = np.random.default_rng(1)
    look = sequential_look({"m": MetricInput(tight(rng, 100.0, 5), tight(rng, 99.58, 5), True, 1.0)}, 1, Plan())
    r = look.results["m"]
    assert look.decide and r.significant and r.verdict is Verdict.NO_CHANGE
    assert "below the 1% practical threshold" in "; ".join(r.notes)


def test_the_table_stars_only_verdicts_and_explains_the_rest() -> None:
    rng = np.random.default_rng(1)
    inputs = {"brk": MetricInput(tight(rng, 100.0), tight(rng, 99.58), True, 1.0)}
    table = format_table(inputs, compare_metrics(inputs))
    assert "*" not in table
    assert "below the 1% practical threshold" in " ".join(table.split())


def test_defaults_per_clock() -> None:
    assert set(DEFAULT_MIN_EFFECT_PCT) == {"instructions", "wall"}
    assert min_effect_for_clock("wall") == 3.0 == MetricInput([], [], True).min_effect_pct
    assert 0.0 < min_effect_for_clock("instructions") < min_effect_for_clock("wall")
    with pytest.raises(ValueError, match="unknown clock 'cycles'"):
        min_effect_for_clock("cycles")


def test_the_json_input_picks_the_threshold_from_the_clock_unless_given() -> None:
    flat = [[1.0, 1.0]] * 2
    doc = {
        "clock": "instructions",
        "metrics": {
            "a": {"higher_is_better": True, "base": flat, "head": flat},
            "b": {"higher_is_better": True, "base": flat, "head": flat, "clock": "wall"},
            "c": {"higher_is_better": True, "base": flat, "head": flat, "min_effect_pct": 2},
        },
    }
    inputs, _ = parse_compare(doc)
    assert inputs["a"].min_effect_pct == DEFAULT_MIN_EFFECT_PCT["instructions"]
    assert inputs["b"].min_effect_pct == DEFAULT_MIN_EFFECT_PCT["wall"]
    assert inputs["c"].min_effect_pct == 2.0
    no_clock, _ = parse_compare({"metrics": {"a": {"higher_is_better": True, "base": flat, "head": flat}}})
    assert no_clock["a"].min_effect_pct == DEFAULT_MIN_EFFECT_PCT["wall"]
    with pytest.raises(FormatError, match="'min_effect_pct' must be >= 0"):
        parse_compare({"metrics": {"a": {"higher_is_better": True, "base": flat, "head": flat, "min_effect_pct": -1}}})
