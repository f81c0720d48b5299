"""Noise learned from history: variance components, detectable effects, the K x N design."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kperf.stats.noise import NoiseModel, choose_design, detectable_shift, min_detectable_effect, variance_components


def history(seed: int, runs: int, k: int, n: int, boot_sd: float, iter_sd: float) -> list[list[list[float]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(runs):
        level = 1000.0 * math.exp(rng.normal(0, 0.1))  # kernels differ; only the spread inside a run counts
        out.append([list(level * np.exp(rng.normal(0, boot_sd) + rng.normal(0, iter_sd, n))) for _ in range(k)])
    return out


@pytest.mark.parametrize(("boot_sd", "iter_sd"), [(0.02, 0.005), (0.005, 0.02), (0.0, 0.01)])
def test_variance_components_are_recovered(boot_sd: float, iter_sd: float) -> None:
    m = variance_components(history(1, 200, 5, 10, boot_sd, iter_sd))
    assert m.log_scale and m.runs == 200
    assert m.within_sd == pytest.approx(iter_sd, rel=0.1)
    assert m.between_sd == pytest.approx(boot_sd, abs=0.002)


def test_a_broken_run_is_dropped() -> None:
    runs = history(2, 100, 5, 5, 0.01, 0.005)
    runs.append([[1000.0] * 5, [500.0] * 5, [1500.0] * 5, [1000.0] * 5, [200.0] * 5])
    m = variance_components(runs)
    assert m.dropped_runs == 1 and m.between_sd == pytest.approx(0.01, abs=0.002)


def test_the_known_variance_limit_matches_the_textbook_numbers() -> None:
    # STATISTICS.md: n=5, alpha .05 -> 2.02 sigma (per-run summaries, two samples of 5... in sigma of one run)
    assert detectable_shift(1.0, 5, 0.05) == pytest.approx((1.959964 + 0.841621) * math.sqrt(2 / 5), rel=1e-6)
    assert detectable_shift(1.0, 5, 0.05, dof=8) > detectable_shift(1.0, 5, 0.05)


def test_more_boots_beat_more_iterations_when_boots_dominate() -> None:
    m = NoiseModel(between_sd=0.02, within_sd=0.005, between_dof=100, within_dof=1000, iterations=5, log_scale=True)
    assert min_detectable_effect(m, 10, 5) < 0.75 * min_detectable_effect(m, 5, 50)


def test_the_chosen_design_reaches_the_target_at_least_cost() -> None:
    m = NoiseModel(between_sd=0.01, within_sd=0.03, between_dof=100, within_dof=1000, iterations=5, log_scale=True)
    d = choose_design(m, target_effect_pct=3.0)
    assert d.min_effect_pct <= 3.0
    assert min_detectable_effect(m, d.boots, d.iterations) <= 3.0
    cheaper = [
        (k, n)
        for k in range(2, 21)
        for n in range(1, 51)
        if k * (10 + n) < d.cost and min_detectable_effect(m, k, n) <= 3
    ]
    assert cheaper == []


def test_the_between_build_part_sets_a_floor_more_boots_cannot_lower() -> None:
    """Boots that agree exactly: without a between-build part any change is
    detectable; with 0.1% between builds, the difference's sd is 0.14% however
    many boots there are, and 80% power at alpha .05 needs about 2.8 of those."""
    exact = [[[1000.0] * 3] * 4 for _ in range(5)]
    m = variance_components(exact)
    assert min_detectable_effect(m, 4, 3, use_history=False) == 0.0
    floor = [min_detectable_effect(m, k, 3, use_history=False, build_sd=0.001) for k in (4, 40, 400)]
    assert floor[0] > floor[1] > floor[2] > 0.39
    assert floor[2] == pytest.approx(100 * (math.exp(2.8 * math.sqrt(2) * 0.001) - 1), rel=0.03)
