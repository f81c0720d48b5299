"""The first A/B comparison: boot-aware, honest about what it cannot decide."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kperf.stats import MetricInput, Verdict, compare_metrics, compare_one
from kperf.stats.abtest import NoisePrior, benjamini_hochberg, reading_unit
from kperf.stats.noise import variance_components


def boots(rng: np.random.Generator, mean: float, k: int, n: int, boot_sd: float, iter_sd: float) -> list[list[float]]:
    return [list(mean + rng.normal(0, boot_sd) + rng.normal(0, iter_sd, n)) for _ in range(k)]


def test_a_clear_slowdown_is_a_regression_with_negative_change() -> None:
    rng = np.random.default_rng(1)
    r = compare_one(MetricInput(boots(rng, 1000, 4, 3, 10, 5), boots(rng, 700, 4, 3, 10, 5), True, 3.0))
    assert r.change_pct is not None and -33 < r.change_pct < -27
    assert r.ci_low_pct is not None and r.ci_high_pct is not None and r.ci_low_pct < r.change_pct < r.ci_high_pct
    res = compare_metrics({"m": MetricInput(boots(rng, 1000, 4, 3, 10, 5), boots(rng, 700, 4, 3, 10, 5), True)})
    assert res["m"].verdict is Verdict.REGRESSION


def test_lower_is_better_uses_the_mmtests_sign() -> None:
    # 425 -> 348 cycles reads +18.12% in mmtests: fewer cycles is better.
    r = compare_metrics({"alloc-odr0-1": MetricInput([[425.0], [425.0]], [[348.0], [348.0]], False)})["alloc-odr0-1"]
    assert r.change_pct == pytest.approx(18.12, abs=0.01)
    assert r.verdict is Verdict.IMPROVEMENT


def test_equal_kernels_are_no_change_when_the_interval_is_tight() -> None:
    rng = np.random.default_rng(2)
    r = compare_metrics({"m": MetricInput(boots(rng, 1000, 6, 3, 3, 2), boots(rng, 1000, 6, 3, 3, 2), True, 3.0)})["m"]
    assert r.verdict is Verdict.NO_CHANGE


def test_one_boot_per_side_is_inconclusive_however_many_iterations() -> None:
    r = compare_metrics({"m": MetricInput([[100.0] * 50], [[50.0] * 50], True)})["m"]
    assert r.verdict is Verdict.INCONCLUSIVE
    assert "2 boots" in "; ".join(r.notes)


def test_noisy_boots_make_a_small_change_inconclusive() -> None:
    rng = np.random.default_rng(3)
    r = compare_metrics({"m": MetricInput(boots(rng, 1000, 3, 10, 80, 1), boots(rng, 960, 3, 10, 80, 1), True)})["m"]
    assert r.verdict is Verdict.INCONCLUSIVE


def test_boot_noise_is_not_hidden_by_many_iterations() -> None:
    """Pooling 100 iterations per boot would call this significant; boot means do not."""
    base = [[1000.0 + d] * 100 for d in (-40, 30, -10)]
    head = [[1000.0 + d] * 100 for d in (-20, 35, 0)]
    r = compare_metrics({"m": MetricInput(base, head, True)})["m"]
    assert r.p_value is not None and r.p_value > 0.3


def test_swapping_base_and_head_flips_the_sign() -> None:
    rng = np.random.default_rng(4)
    b, h = boots(rng, 100, 5, 3, 2, 1), boots(rng, 90, 5, 3, 2, 1)
    ab = compare_one(MetricInput(b, h, True))
    ba = compare_one(MetricInput(h, b, True))
    assert ab.change_pct is not None and ba.change_pct is not None
    # On the log scale the ratios are exact inverses.
    assert (1 + ab.change_pct / 100) * (1 + ba.change_pct / 100) == pytest.approx(1.0)
    assert ab.p_value == pytest.approx(ba.p_value)


def test_scaling_all_values_changes_nothing() -> None:
    rng = np.random.default_rng(5)
    b, h = boots(rng, 100, 5, 3, 2, 1), boots(rng, 95, 5, 3, 2, 1)
    one = compare_one(MetricInput(b, h, True))
    scaled = compare_one(MetricInput([[v * 1000 for v in x] for x in b], [[v * 1000 for v in x] for x in h], True))
    assert one.change_pct == pytest.approx(scaled.change_pct)
    assert one.p_value == pytest.approx(scaled.p_value)


def test_a_flat_list_is_one_boot() -> None:
    r = compare_one(MetricInput([1.0, 2.0, 3.0], [[1.0], [2.0]], True))
    assert r.base_boots == 1 and r.base_samples == 3 and r.head_boots == 2


def test_benjamini_hochberg_matches_a_hand_computed_example() -> None:
    # ranks 1..4 of (.01, .03, .04, .5) give .04, .06, .0533, .5; monotone from the top.
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.5])


def test_false_discovery_control_keeps_many_null_metrics_quiet() -> None:
    rng = np.random.default_rng(6)
    metrics = {
        f"m{i}": MetricInput(boots(rng, 100, 5, 3, 2, 1), boots(rng, 100, 5, 3, 2, 1), True, 0.0) for i in range(200)
    }
    res = compare_metrics(metrics)
    assert sum(r.verdict is Verdict.REGRESSION for r in res.values()) <= 4


# --- known answers over noise shapes, and properties -------------------------------------------


def shaped(rng: np.random.Generator, shape: str, level: float, k: int = 5, n: int = 5) -> list[list[float]]:
    """k boots of n iterations around `level` with about 1% noise of the given shape."""
    out = []
    for _ in range(k):
        boot = level * (1 + rng.normal(0, 0.01))
        if shape == "bimodal":  # two page-placement modes, 2% apart
            boot = level * (1 + 0.02 * rng.integers(0, 2) + rng.normal(0, 0.003))
        it = boot * (1 + rng.normal(0, 0.005, n))
        if shape == "outliers":  # a daemon wakes up during one iteration: 40% slower
            it[rng.integers(0, n)] *= 0.6
        if shape == "lognormal":
            it = boot * rng.lognormal(0, 0.01, n)
        out.append([float(v) for v in it])
    return out


@pytest.mark.parametrize(
    ("shape", "head_level", "hib", "expected"),
    [
        ("normal", 90.0, True, Verdict.REGRESSION),
        ("normal", 110.0, True, Verdict.IMPROVEMENT),
        ("normal", 110.0, False, Verdict.REGRESSION),  # latency went up 10%
        ("normal", 100.0, True, Verdict.NO_CHANGE),
        ("lognormal", 90.0, True, Verdict.REGRESSION),
        ("outliers", 100.0, True, Verdict.NO_CHANGE),
        ("outliers", 90.0, True, Verdict.REGRESSION),
        ("bimodal", 90.0, True, Verdict.REGRESSION),
    ],
)
def test_known_answers_over_noise_shapes(shape: str, head_level: float, hib: bool, expected: Verdict) -> None:
    rng = np.random.default_rng(10)
    base, head = shaped(rng, shape, 100.0), shaped(rng, shape, head_level)
    assert compare_metrics({"m": MetricInput(base, head, hib, 3.0)})["m"].verdict is expected


def test_a_small_change_on_bimodal_boots_is_inconclusive_not_a_regression() -> None:
    rng = np.random.default_rng(11)
    r = compare_metrics({"m": MetricInput(shaped(rng, "bimodal", 100.0, k=3), shaped(rng, "bimodal", 99.0, k=3), True)})
    assert r["m"].verdict is Verdict.INCONCLUSIVE


def test_one_slow_iteration_does_not_move_its_boot() -> None:
    clean = [[100.0, 100.2, 99.8, 100.1, 99.9]] * 5
    spoiled = [list(b) for b in clean]
    spoiled[0][2] = 40.0  # the trimmed mean drops it
    a = compare_one(MetricInput(clean, clean, True))
    b = compare_one(MetricInput(clean, spoiled, True))
    assert a.change_pct == pytest.approx(0.0) and b.change_pct == pytest.approx(0.0, abs=0.05)


def test_learned_noise_tightens_the_interval_at_five_boots() -> None:
    rng = np.random.default_rng(12)
    b, h = boots(rng, 100, 5, 3, 1, 0.5), boots(rng, 97, 5, 3, 1, 0.5)
    cold = compare_one(MetricInput(b, h, True))
    warm = compare_one(MetricInput(b, h, True, noise=NoisePrior(sd=0.011, dof=30)))
    assert warm.extra["noise_prior"] == 1.0 and warm.extra["dof"] > cold.extra["dof"]


def test_history_is_ignored_when_the_boots_are_much_noisier() -> None:
    rng = np.random.default_rng(13)
    b, h = boots(rng, 100, 5, 3, 20, 1), boots(rng, 100, 5, 3, 20, 1)
    r = compare_one(MetricInput(b, h, True, noise=NoisePrior(sd=0.001, dof=30)))
    assert r.extra["noise_prior"] == 0.0 and "noisier than history" in "; ".join(r.notes)


def test_null_pairs_rarely_give_false_regressions_at_five_boots() -> None:
    rng = np.random.default_rng(14)
    false = 0
    for _ in range(300):
        r = compare_metrics({"m": MetricInput(shaped(rng, "bimodal", 100.0), shaped(rng, "bimodal", 100.0), True, 0.0)})
        false += r["m"].verdict is Verdict.REGRESSION
    assert false / 300 <= 0.05  # two-sided alpha .05 spends at most half of it on regressions


def skewed(rng: np.random.Generator, shape: str, k: int = 5, n: int = 5) -> list[list[float]]:
    """k boots of n iterations, one boot summary's sd about 1% of the level (as bench/detectors.py)."""
    out = []
    for _ in range(k):
        b = (0.9 if rng.random() < 0.5 else -0.9) + rng.normal(0, 0.3) if shape == "bimodal" else rng.normal(0, 0.95)
        w = math.sqrt((1 - 0.95**2) * n)
        if shape == "lognormal":
            it = (rng.lognormal(0, 0.5, n) - math.exp(0.125)) / math.sqrt((math.e**0.25 - 1) * math.e**0.25) * w
        else:
            it = rng.normal(0, w, n)
        out.append([float(v) for v in 100.0 * (1 + 0.01 * (b + it))])
    return out


@pytest.mark.parametrize("shape", ["bimodal", "lognormal"])
def test_learned_noise_keeps_false_regressions_within_the_budget(shape: str) -> None:
    # Each history (20 runs of 5 boots, as kperf.stats.noise learns it) serves a few null pairs;
    # averaged over histories the moderated t spends no more than alpha/2 on regressions.
    rng = np.random.default_rng(20 + len(shape))
    false = pairs = 0
    for _ in range(100):
        prior = variance_components([skewed(rng, shape) for _ in range(20)]).prior(5)
        for _ in range(20):
            r = compare_one(MetricInput(skewed(rng, shape), skewed(rng, shape), True, 0.0, noise=prior), alpha=0.02)
            false += r.p_value is not None and r.p_value < 0.02 and (r.change_pct or 0.0) < 0
            pairs += 1
    assert false / pairs <= 0.016  # 1% budget; 2000 pairs have a standard error of 0.22 points


def test_a_broken_boot_is_set_aside_when_the_noise_is_known() -> None:
    rng = np.random.default_rng(15)
    base, head = boots(rng, 100, 5, 5, 1, 0.3), boots(rng, 100, 5, 5, 1, 0.3)
    head[2] = [v - 12.0 for v in head[2]]  # two slow iterations in one boot move its trimmed mean by 12 sds
    prior = NoisePrior(sd=0.01, dof=30)
    r = compare_one(MetricInput(base, head, True, 0.0, noise=prior), alpha=0.02)
    assert r.extra["boots_set_aside"] == 1.0 and "set aside" in "; ".join(r.notes)
    assert r.extra["noise_prior"] == 1.0 and r.p_value is not None and r.p_value > 0.02
    assert r.change_pct == pytest.approx(0.0, abs=1.5)
    cold = compare_one(MetricInput(base, head, True, 0.0), alpha=0.02)
    assert "boots_set_aside" not in cold.extra  # without history there is no scale to call a boot broken


def test_clean_boots_are_never_set_aside() -> None:
    rng = np.random.default_rng(16)
    for _ in range(200):
        r = compare_one(MetricInput(skewed(rng, "normal"), skewed(rng, "normal"), True, noise=NoisePrior(0.01, 30)))
        assert "boots_set_aside" not in r.extra


boot_lists = st.lists(st.lists(st.floats(1.0, 1000.0, allow_nan=False), min_size=1, max_size=4), min_size=2, max_size=6)


@settings(max_examples=60, deadline=None)
@given(boot_lists, boot_lists)
def test_property_swapping_sides_flips_the_sign(base: list[list[float]], head: list[list[float]]) -> None:
    ab = compare_one(MetricInput(base, head, True))
    ba = compare_one(MetricInput(head, base, True))
    assert ab.change_pct is not None and ba.change_pct is not None
    assert (1 + ab.change_pct / 100) * (1 + ba.change_pct / 100) == pytest.approx(1.0)
    assert ab.p_value == pytest.approx(ba.p_value, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(boot_lists, boot_lists, st.floats(1e-3, 1e6))
def test_property_scaling_all_values_changes_nothing(
    base: list[list[float]], head: list[list[float]], c: float
) -> None:
    scaled_base, scaled_head = [[v * c for v in b] for b in base], [[v * c for v in b] for b in head]
    # Whole-number readings carry their rounding, whose size is not scale-free (test_stats_resolution.py).
    assume(not reading_unit(base, head) and not reading_unit(scaled_base, scaled_head))
    # Values a few ulps apart (1.0 and 1.0000000000000002) are equal or not after scaling as the
    # rounding of the product falls: a spread of 1e-16 is no spread to be invariant about.
    values = sorted(v for b in (*base, *head) for v in b)
    assume(all(b == a or b - a > 1e-9 * b for a, b in zip(values, values[1:])))
    one = compare_one(MetricInput(base, head, False))
    scaled = compare_one(MetricInput(scaled_base, scaled_head, False))
    assert one.change_pct == pytest.approx(scaled.change_pct, abs=1e-6)
    assert one.p_value == pytest.approx(scaled.p_value, abs=1e-6)
    assert one.verdict == scaled.verdict


def test_a_boot_of_three_iterations_is_summarised_by_its_median() -> None:
    from kperf.stats.abtest import boot_cut, boot_mean

    assert [boot_cut(n) for n in (1, 2, 3, 4, 5, 9, 10)] == [0, 0, 1, 1, 1, 1, 2]
    assert boot_mean(np.array([956.0, 966.0, 956.0])) == 956.0
    assert boot_mean(np.array([1.0, 2.0, 3.0, 10.0])) == 2.5
    assert boot_mean(np.array([1.0, 3.0])) == 2.0


def test_one_iteration_of_three_hit_by_an_event_does_not_flag_an_unrelated_build() -> None:
    """total-odr3-2 on x86_64 (bench/records/build_noise-seeded-1s-2026-11-28.json): the base
    reads 956 in every iteration; an unrelated stand-in reads 965-966 in one iteration of
    three in two boots of three. With the plain mean that was a -0.33% regression at 0.25%."""
    from kperf.stats.builds import measured_build_prior

    base = [[956.0, 956.0, 956.0]] * 2
    head = [[956.0, 966.0, 956.0], [965.0, 956.0, 956.0]]
    r = compare_metrics({"m": MetricInput(base, head, False, 0.25, build_noise=measured_build_prior("pagealloc"))})
    assert r["m"].verdict is Verdict.NO_CHANGE and r["m"].change_pct == 0.0
