"""Sequential re-runs: boundaries that spend alpha honestly, and decisions per look."""

from __future__ import annotations

import numpy as np
import pytest

from kperf.stats import MetricInput, Verdict
from kperf.stats.sequential import Plan, boundaries, look_number, plan_looks, sequential_look, spent


def test_one_look_is_the_fixed_sample_test() -> None:
    assert boundaries((1.0,), 0.05) == pytest.approx((1.959964,), abs=1e-5)


@pytest.mark.parametrize("kind", ["obrien-fleming", "pocock"])
def test_boundaries_spend_exactly_alpha_across_looks(kind: str) -> None:
    fr = (0.25, 0.5, 0.75, 1.0)
    c = np.array(boundaries(fr, 0.05, kind))
    rng = np.random.default_rng(0)
    z = np.cumsum(rng.normal(0.0, 0.5, (100_000, 4)), axis=1) / np.sqrt(fr)
    assert np.mean((np.abs(z) >= c).any(axis=1)) == pytest.approx(0.05, abs=0.003)
    if kind == "obrien-fleming":
        assert c[0] > 3.5 and c[-1] < 2.1  # almost nothing spent early
    assert spent(1.0, 0.05, kind) == pytest.approx(0.05)


def boots(rng: np.random.Generator, level: float, k: int) -> list[list[float]]:
    return [list(level * (1 + rng.normal(0, 0.02) + rng.normal(0, 0.005, 3))) for _ in range(k)]


def test_a_clear_regression_is_decided_at_the_first_look() -> None:
    rng = np.random.default_rng(1)
    look = sequential_look({"m": MetricInput(boots(rng, 100, 5), boots(rng, 80, 5), True)}, 1, Plan())
    assert look.decide and look.more_boots == 0
    assert look.results["m"].verdict is Verdict.REGRESSION


def test_an_unclear_change_asks_for_more_boots_then_decides_at_the_budget() -> None:
    rng = np.random.default_rng(2)
    plan = plan_looks(first=5, budget=15, step=5)
    base, head = boots(rng, 100, 5), boots(rng, 98, 5)
    first = sequential_look({"m": MetricInput(base, head, True, 3.0)}, 1, plan)
    assert not first.decide and first.more_boots == 5
    assert first.results["m"].verdict is Verdict.INCONCLUSIVE and "look 1 of 3" in first.results["m"].notes
    base, head = base + boots(rng, 100, 10), head + boots(rng, 98, 10)
    last = sequential_look({"m": MetricInput(base, head, True, 3.0)}, look_number(plan, 15), plan)
    assert last.decide and last.look == 3


def test_no_change_is_decided_when_the_repeated_interval_is_inside_the_minimum_effect() -> None:
    rng = np.random.default_rng(3)
    tight = [[list(100 * (1 + rng.normal(0, 0.002, 3))) for _ in range(5)] for _ in range(2)]
    look = sequential_look({"m": MetricInput(tight[0], tight[1], True, 3.0)}, 1, Plan())
    assert look.decide and look.results["m"].verdict is Verdict.NO_CHANGE


def test_false_regressions_stay_under_alpha_across_all_looks() -> None:
    """Null pairs followed through every look they ask for: the looks must not add up."""
    rng = np.random.default_rng(4)
    plan = plan_looks(first=5, budget=15, step=5)
    false = 0
    trials = 200
    for _ in range(trials):
        base, head = boots(rng, 100, 15), boots(rng, 100, 15)
        for i, k in enumerate(plan.looks, start=1):
            look = sequential_look({"m": MetricInput(base[:k], head[:k], True, 0.0)}, i, plan)
            if look.decide:
                break
        false += look.results["m"].verdict is Verdict.REGRESSION
    assert false / trials <= 0.045  # alpha .05 two-sided: .025 expected on this side


def test_the_plan_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Plan(looks=(10, 5))
    with pytest.raises(ValueError):
        look_number(Plan(), 3)
