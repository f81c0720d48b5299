"""Whole-number readings carry their rounding: an interval no number of boots can shrink below it.

The figures are those of the perturbed-build bench (docs/statistics.md, "The readings'
resolution"): arm64's page allocator reads 14-55 units, where one unit more in one iteration
of three moves a side's mean by 1-4%; x86_64's reads 245-960, where it is 0.1-0.4%.
"""

from __future__ import annotations

import math

import pytest

from kperf.stats import MetricInput, Verdict, compare_metrics, compare_one
from kperf.stats.abtest import ROUNDING_BOUND_UNITS, NoisePrior, reading_unit
from kperf.stats.builds import measured_build_prior
from kperf.stats.sequential import plan_looks, sequential_look
from kperf_runner.benchmarks import Pagealloc, resolve_params

PAGEALLOC_BUILD = measured_build_prior("pagealloc")


def test_only_readings_that_are_all_whole_numbers_have_a_unit() -> None:
    assert reading_unit([[17.0, 18.0]], [[18.0]]) == 1.0
    assert reading_unit([[17.0, 18.0]], [[18.5]]) == 0.0
    assert reading_unit([[956.25]], [[956.25]]) == 0.0
    assert reading_unit([], []) == 0.0


def test_coarse_readings_one_unit_apart_are_not_a_regression() -> None:
    # alloc-odr1-16 on arm64: the base's boots read 17, 17, 18; an unrelated build's 18 in every
    # iteration. Without the rounding term that is an exact -5.9% (medians 17 and 18; cycles:
    # lower is better), at the service's first look as at any other.
    plan = plan_looks(first=2, budget=4, step=2)
    base, head = [[17.0, 17.0, 18.0]] * 2, [[18.0, 18.0, 18.0]] * 2
    look = sequential_look({"m": MetricInput(base, head, False, 0.5, build_noise=PAGEALLOC_BUILD)}, 1, plan)
    r = look.results["m"]
    assert r.change_pct == pytest.approx(-5.88, abs=0.01)
    assert r.verdict is Verdict.INCONCLUSIVE and not r.significant
    assert r.ci_low_pct is not None and r.ci_high_pct is not None and r.ci_low_pct < 0.0 < r.ci_high_pct
    assert r.extra["resolution"] == 1.0 and r.extra["resolution_share"] > 0.99
    assert "readings in whole units (one is 5.9% of the level)" in "; ".join(r.notes)
    # What more boots cannot change is not waited for.
    assert r.extra["boots_cannot_decide"] == 1.0 and look.decide and look.more_boots == 0
    assert "more boots cannot decide it" in "; ".join(r.notes) and "look 1 of 2" not in "; ".join(r.notes)


def test_without_the_rounding_term_the_same_readings_would_be_an_exact_regression() -> None:
    # The same medians, 17 and 18, as decimals (no unit to round to): boots that agree exactly.
    base, head = [[17.0001, 17.0001, 18.0001]] * 2, [[18.0001] * 3] * 2
    r = compare_metrics({"m": MetricInput(base, head, False, 0.5, build_noise=PAGEALLOC_BUILD)})["m"]
    assert r.verdict is Verdict.REGRESSION and "resolution" not in r.extra


def test_boots_are_still_asked_for_where_they_can_decide() -> None:
    # The same coarse readings with the boots spread: the boots' part is what is wide, so more help.
    plan = plan_looks(first=2, budget=4, step=2)
    base, head = [[15.0, 17.0, 19.0], [20.0, 22.0, 18.0]], [[18.0, 16.0, 17.0], [21.0, 23.0, 19.0]]
    look = sequential_look({"m": MetricInput(base, head, False, 15.0)}, 1, plan)
    assert look.results["m"].verdict is Verdict.INCONCLUSIVE
    assert "boots_cannot_decide" not in look.results["m"].extra
    assert not look.decide and look.more_boots == 2


def test_a_real_slowdown_on_coarse_readings_is_still_a_regression() -> None:
    base, head = [[17.0, 17.0, 18.0]] * 2, [[22.0, 22.0, 22.0]] * 2  # 29% more cycles
    r = compare_metrics({"m": MetricInput(base, head, False, 0.5, build_noise=PAGEALLOC_BUILD)})["m"]
    assert r.verdict is Verdict.REGRESSION and r.change_pct == pytest.approx(-29.4, abs=0.1)


def test_fine_readings_keep_an_interval_near_their_unit() -> None:
    # total-odr3-2 on x86_64: 956 in every boot of both sides. The interval is the rounding's
    # (half a unit, 0.05% a side) and the bench's build part, not a point, and well inside 0.5%.
    same = [[956.0, 956.0, 956.0]] * 2
    r = compare_metrics({"m": MetricInput(same, same, False, 0.5, build_noise=PAGEALLOC_BUILD)})["m"]
    assert r.verdict is Verdict.NO_CHANGE
    assert r.ci_low_pct is not None and r.ci_high_pct is not None
    bound = 2.0 * ROUNDING_BOUND_UNITS / 956.0
    half = (math.exp(bound + 1.96 * math.sqrt(2.0) * PAGEALLOC_BUILD.sd) - 1.0) * 100.0
    assert -r.ci_low_pct == pytest.approx(half, rel=0.02) and r.ci_high_pct == pytest.approx(half, rel=0.02)
    assert "readings in whole units" in "; ".join(r.notes)  # the rounding is most of it


def test_a_difference_of_three_units_in_956_is_still_seen() -> None:
    # What the rounding cannot explain stays significant: 956 against 959 is 0.31%,
    # three times the most rounding can do. Whether it matters is the threshold's to say.
    base, head = [[956.0] * 3] * 2, [[959.0] * 3] * 2
    r = compare_one(MetricInput(base, head, False, 0.25, build_noise=PAGEALLOC_BUILD))
    assert r.p_value is not None and r.p_value < 1e-3


def test_large_whole_numbers_and_fractional_readings_are_as_before() -> None:
    big = [[1_000_000.0] * 3] * 2
    r = compare_one(MetricInput(big, big, True, 0.5))
    assert r.extra["resolution"] == 1.0 and r.ci_high_pct is not None and r.ci_high_pct < 2e-4
    frac = [[956.5] * 3] * 2
    r = compare_one(MetricInput(frac, frac, True, 0.5))
    assert "resolution" not in r.extra and r.ci_low_pct == r.ci_high_pct == 0.0


def test_readings_at_zero_have_no_rounding_term() -> None:
    # The linear scale (a counter at 0): a unit is no fraction of a level there.
    zeros = [[0.0, 0.0]] * 3
    r = compare_one(MetricInput(zeros, zeros, True))
    assert "resolution" not in r.extra


def test_the_rounding_does_not_stand_in_for_learned_boot_noise() -> None:
    # A learned prior and whole-number readings: both parts are in the interval.
    base = [[300.0, 301.0, 300.0], [302.0, 301.0, 301.0], [300.0, 300.0, 301.0]]
    head = [[301.0, 301.0, 302.0], [300.0, 301.0, 301.0], [302.0, 301.0, 300.0]]
    plain = compare_one(MetricInput(base, head, True, 0.5))
    learned = compare_one(MetricInput(base, head, True, 0.5, noise=NoisePrior(0.002, 30)))
    assert plain.extra["resolution"] == learned.extra["resolution"] == 1.0
    assert 0.0 < learned.extra["resolution_share"] < 1.0 and 0.0 < plain.extra["resolution_share"] < 1.0
    # The bound (a unit at 301: 0.33% both sides) is in the interval on top of the boots' part.
    for r in (plain, learned):
        assert r.ci_low_pct is not None and r.ci_high_pct is not None
        assert r.ci_high_pct - r.ci_low_pct > 2 * 100.0 / 301.0


@pytest.mark.parametrize("look", [1, 2])
def test_one_unit_is_never_significant_at_any_look_and_two_units_are(look: int) -> None:
    """Rounding alone can put two builds a hair apart one whole unit apart, in every boot; it
    cannot put them two apart. Half a unit a side keeps the first inside every boundary."""
    plan = plan_looks(first=2, budget=4, step=2)
    base = [[17.0, 17.0, 17.0]] * (2 * look)
    one = sequential_look({"m": MetricInput(base, [[18.0] * 3] * (2 * look), False, 0.5)}, look, plan)
    assert one.results["m"].verdict is Verdict.INCONCLUSIVE and not one.results["m"].significant
    two = sequential_look({"m": MetricInput(base, [[19.0] * 3] * (2 * look), False, 0.5)}, look, plan)
    assert two.results["m"].verdict is Verdict.REGRESSION
    assert two.results["m"].change_pct == pytest.approx(-11.76, abs=0.01)


def _pagealloc_boot(alloc_totals: list[int]) -> str:
    """The module's output for order 0 batch 1 (inner 100): each round's row and its totals."""
    return "".join(
        f"order  0 batch      1 alloc {a // 100} free 120\n"
        f"pagealloc-total: order 0 batch 1 ops 100 alloc {a} free 12050\n"
        for a in alloc_totals
    )


def test_the_page_allocators_samples_from_its_totals_carry_no_rounding_bound() -> None:
    # Rows of 245 cycles a block in every round of both sides, as mmtests reads them; the totals
    # say 245.37-245.41 against 245.61-245.65 (0.1% more). kperf's samples are the totals'.
    pagealloc = Pagealloc()
    params = resolve_params("pagealloc", "quick", {"orders": [0], "batch_limit_kb": 8, "outer": 5})
    base = [_pagealloc_boot([24537, 24539, 24541, 24539, 24537])] * 2
    head = [_pagealloc_boot([24561, 24563, 24565, 24563, 24561])] * 2

    def side(raws: list[str]) -> list[list[float]]:
        return [[s.value for s in pagealloc.parse(raw, params) if s.metric == "alloc-odr0-1"] for raw in raws]

    assert side(base)[0] == [245.41, 245.39, 245.37]  # rounds 3-5: the first two are warm-up
    assert reading_unit(side(base), side(head)) == 0.0
    rows = [[float(a) for _, _, a, _ in pagealloc.rounds(raw, params)] for raw in base]
    assert reading_unit(rows, rows) == 1.0  # the rows alone would carry the bound
    r = compare_metrics({"m": MetricInput(side(base), side(head), False, 0.5, build_noise=PAGEALLOC_BUILD)})["m"]
    assert "resolution" not in r.extra and not any("whole units" in n for n in r.notes)
    assert r.change_pct == pytest.approx(-0.098, abs=0.001)
