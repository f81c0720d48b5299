"""The between-build component: learned from groups of builds, and carried by the A/B test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from kperf.stats import MetricInput, Verdict, compare_metrics, compare_one
from kperf.stats.abtest import NoisePrior
from kperf.stats.builds import BuildNoise, between_build_noise, groups_between
from kperf.stats.sequential import plan_looks, sequential_look

PATTERN = np.array([0.011, 0.0, -0.0015])  # a warm-up pattern every boot repeats, as under the instruction clock


def one_build(
    rng: np.random.Generator, level: float, build_sd: float, boot_sd: float, boots: int = 3
) -> list[list[float]]:
    """One build's boots, log scale: its own level, then per-boot noise; iterations follow PATTERN."""
    b = level + rng.normal(0.0, build_sd)
    return [[float(v) for v in 10_000.0 * np.exp(b + rng.normal(0.0, boot_sd) + PATTERN)] for _ in range(boots)]


def groups(
    rng: np.random.Generator, n_groups: int, per_group: int, build_sd: float, boot_sd: float, boots: int = 2
) -> list[list[list[list[float]]]]:
    # Each group (a stretch of a branch with no change point) has its own level; only the spread inside counts.
    out = []
    for _ in range(n_groups):
        level = rng.normal(0.0, 0.05)
        out.append([one_build(rng, level, build_sd, boot_sd, boots) for _ in range(per_group)])
    return out


def test_with_identical_boots_the_spread_of_builds_is_all_between_builds() -> None:
    rng = np.random.default_rng(1)
    est = between_build_noise(groups(rng, 40, 5, 0.001, 0.0))
    assert est.builds == 200 and est.groups == 40
    assert est.boot_sd == pytest.approx(0.0, abs=1e-12)
    assert est.sd == pytest.approx(0.001, rel=0.08)
    # MS_within is 0: the estimate is a plain variance with the between-build degrees of freedom.
    assert est.dof == pytest.approx(40 * 4)
    prior = est.prior()
    assert prior is not None and prior.sd == est.sd and prior.dof == est.dof
    # Three boots per build: their mean is a rounding off each, and still no boot noise is seen.
    assert between_build_noise(groups(rng, 5, 4, 0.001, 0.0, boots=3)).boot_sd == 0.0


def test_boot_noise_is_taken_out_of_the_between_build_spread() -> None:
    rng = np.random.default_rng(2)
    est = between_build_noise(groups(rng, 60, 5, 0.002, 0.002, boots=3))
    assert est.sd == pytest.approx(0.002, rel=0.15)
    assert est.boot_sd == pytest.approx(0.002, rel=0.1)
    assert 0 < est.dof < 60 * 4  # a difference of mean squares has fewer dof than either


def test_builds_that_agree_are_clipped_at_zero_and_add_nothing() -> None:
    rng = np.random.default_rng(3)
    found = [between_build_noise(groups(rng, 8, 5, 0.0, 0.003)) for _ in range(40)]
    assert all(f.sd >= 0.0 for f in found)
    assert any(f.clipped for f in found)
    assert all(f.prior() is None for f in found if f.clipped)
    # Chance spread beyond what the boots explain is rare at this level: most give no prior.
    assert sum(f.prior() is None for f in found) >= 25


def test_rebuilds_of_one_unchanged_source_show_no_between_build_spread() -> None:
    # kperf's build driver is reproducible: the same source gives the same image and the same numbers.
    same = [[[10900.04, 10777.63, 10761.36]] * 2] * 4
    est = between_build_noise([same])
    assert est.sd == 0.0 and est.builds == 4 and est.prior() is None


def test_a_group_of_one_build_tells_only_the_boot_noise() -> None:
    est = between_build_noise([[[[100.0], [101.0]]], [[[100.0], [100.0]], [[102.0], [102.0]]]])
    assert est.builds == 2 and est.groups == 1
    assert est.boot_sd > 0.0  # from the lonely build's two boots


def test_nothing_to_learn_from_gives_no_prior() -> None:
    assert between_build_noise([]).prior() is None
    est = between_build_noise([[[[1.0, 2.0]]]])
    assert est.builds == 0 and est.dof == 0.0 and est.prior() is None


def test_history_of_one_boot_per_build_borrows_the_learned_boot_noise() -> None:
    rng = np.random.default_rng(4)
    hist = groups(rng, 40, 5, 0.002, 0.002, boots=1)
    alone = between_build_noise(hist)
    helped = between_build_noise(hist, boot_noise=NoisePrior(0.002 * math.sqrt(1 + 1 / 3), 200))
    # Alone, boot noise is counted as build noise (conservative); with the boot noise known it is taken out.
    assert alone.sd > helped.sd
    assert helped.sd == pytest.approx(0.002, rel=0.25)


def test_a_branch_is_cut_into_groups_at_its_change_points() -> None:
    builds = [[[float(i)]] for i in range(10)]
    cut = groups_between(builds, [4, 7, 0, 10, 4])
    assert [len(g) for g in cut] == [4, 3, 3]
    assert cut[1][0] == [[4.0]]


# --- the A/B test with the build component ---------------------------------------------------


def test_identical_boots_rest_on_the_build_component_alone() -> None:
    base = [[10_000.0, 9_990.0, 9_985.0]] * 3
    head = [[v * 0.99 for v in base[0]]] * 3
    build = NoisePrior(sd=0.001, dof=20)
    r = compare_one(MetricInput(base, head, True, 0.0, build_noise=build), alpha=0.05)
    assert r.p_value is not None and 0.0 < r.p_value < 1e-5
    assert r.extra["dof"] == pytest.approx(20.0)
    assert r.extra["build_share"] == pytest.approx(1.0)
    half = sps.t.ppf(0.975, 20) * math.sqrt(2) * 0.001
    assert r.ci_low_pct == pytest.approx((math.exp(math.log(0.99) - half) - 1) * 100, rel=1e-6)
    assert r.ci_high_pct == pytest.approx((math.exp(math.log(0.99) + half) - 1) * 100, rel=1e-6)


def test_the_combined_variance_gets_satterthwaite_degrees_of_freedom() -> None:
    rng = np.random.default_rng(5)
    base = [list(100 * np.exp(rng.normal(0, 0.01, 3))) for _ in range(5)]
    head = [list(100 * np.exp(rng.normal(0, 0.01, 3))) for _ in range(5)]
    plain = compare_one(MetricInput(base, head, True))
    small = compare_one(MetricInput(base, head, True, build_noise=NoisePrior(0.0005, 4)))
    large = compare_one(MetricInput(base, head, True, build_noise=NoisePrior(0.02, 4)))
    assert plain.ci_low_pct is not None and small.ci_low_pct is not None and large.ci_low_pct is not None
    assert large.ci_low_pct < small.ci_low_pct <= plain.ci_low_pct  # the build component only widens
    assert large.extra["dof"] == pytest.approx(4.0, rel=0.2)  # dominated by the build term's 4 dof
    assert 4.0 < small.extra["dof"] <= plain.extra["dof"] + 4.0


def test_a_build_prior_without_degrees_of_freedom_counts_as_one() -> None:
    base = [[100.5, 100.5]] * 3  # not whole numbers: no rounding term beside the build's
    r = compare_one(MetricInput(base, base, True, 3.0, build_noise=NoisePrior(0.001, 0.0)))
    assert r.extra["dof"] == pytest.approx(1.0)
    assert r.ci_low_pct is not None and math.isfinite(r.ci_low_pct)


def test_one_boot_per_side_is_enough_when_the_boots_are_known_to_agree() -> None:
    # Under the instruction clock history shows boots of one build agreeing exactly (sd 0).
    r = compare_metrics(
        {
            "m": MetricInput(
                [[10_000.0, 9_990.0]],
                [[9_800.0, 9_790.0]],
                True,
                0.5,
                noise=NoisePrior(0.0, 30),
                build_noise=NoisePrior(0.001, 20),
            )
        }
    )["m"]
    assert r.verdict is Verdict.REGRESSION and r.extra["noise_prior"] == 1.0
    assert r.change_pct == pytest.approx(-2.0, abs=0.01)


def test_without_the_build_component_unrelated_changes_are_flagged_and_with_it_alpha_holds() -> None:
    """Boots identical, builds 0.1% apart (MEASUREMENT.md's instruction clock), threshold 0."""
    rng = np.random.default_rng(6)
    pairs, with_prior, without = 1000, 0, 0
    prior: NoisePrior | None = None
    for i in range(pairs):
        if i % 20 == 0:
            prior = between_build_noise(groups(rng, 8, 5, 0.001, 0.0)).prior()
        base, head = one_build(rng, 0.0, 0.001, 0.0), one_build(rng, 0.0, 0.001, 0.0)
        res = compare_metrics(
            {
                "plain": MetricInput(base, head, True, 0.0),
                "builds": MetricInput(base, head, True, 0.0, build_noise=prior),
            },
            alpha=0.02,
        )
        # Each metric alone: the second one must not ride on the first's q-value.
        without += (
            res["plain"].p_value is not None and res["plain"].p_value < 0.02 and (res["plain"].change_pct or 0) < 0
        )
        r = res["builds"]
        with_prior += r.p_value is not None and r.p_value < 0.02 and (r.change_pct or 0) < 0
    assert without / pairs > 0.4  # every build difference is "exact" without the component
    assert with_prior / pairs <= 0.018  # 1% per direction; 1000 pairs have a standard error of 0.3 points


def test_looks_with_a_build_component_stay_under_alpha() -> None:
    rng = np.random.default_rng(7)
    plan = plan_looks(first=3, budget=9, step=3)
    false = 0
    trials = 300
    for _ in range(trials):
        base = one_build(rng, 0.0, 0.001, 0.001, boots=9)
        head = one_build(rng, 0.0, 0.001, 0.001, boots=9)
        for i, k in enumerate(plan.looks, start=1):
            inp = MetricInput(base[:k], head[:k], True, 0.0, build_noise=NoisePrior(0.001, 40))
            look = sequential_look({"m": inp}, i, plan)
            if look.decide:
                break
        false += look.results["m"].verdict is Verdict.REGRESSION
    assert false / trials <= 0.04  # alpha .05 two-sided: .025 expected on this side


def test_build_noise_is_reported_as_learned() -> None:
    est = BuildNoise(sd=0.0008, dof=31.5, builds=40, groups=8, boot_sd=0.0, boot_dof=40, log_scale=True, p_value=0.0)
    assert est.prior() == NoisePrior(0.0008, 31.5)
    assert BuildNoise(0.0008, 31.5, 40, 8, 0.003, 40, True, p_value=0.4).prior() is None
