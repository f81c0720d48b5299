"""bench/build_noise.py's analysis on builds whose levels are known: what it
reports is what kperf's A/B test does with and without the between-build part."""

from __future__ import annotations

import json

import numpy as np

from kperf_testing.benches import BENCH_DIR, load_bench


def test_builds_that_differ_by_layout_are_flagged_by_boots_alone_and_not_with_the_build_part() -> None:
    bench = load_bench("build_noise")
    rng = np.random.default_rng(7)
    perturbed = [f"perturb-{n:02d}" for n in range(1, 16)]
    runs: dict[str, dict[str, list[list[float]]]] = {}
    for kernel in ["base", *perturbed, "slower"]:
        # Every build has a level of its own (sd 0.2%); its boots repeat it exactly.
        level = 1000.0 * (1 + rng.normal(0, 0.002)) * (0.97 if kernel == "slower" else 1.0)
        runs[kernel] = {"forks": [[level] * 3, [level] * 3], "flat": [[5.0] * 3, [5.0] * 3]}
    result = bench.analyse(runs, {"forks": True, "flat": True}, perturbed, {"slower": ["forks"]})
    forks = next(r for r in result["metrics"] if r["metric"] == "forks")
    assert 0.1 < forks["between_build_pct"] < 0.4 and forks["boot_sd_pct"] == 0.0
    boots_only, with_builds = result["ways"]["boots only"], result["ways"]["with perturbed builds"]
    # Boots alone: any layout difference past the threshold is a verdict, and the interval is a point.
    # (Shares are of every metric and pair: the flat metric is never flagged, so at most one half.)
    assert boots_only["false_flag_share"]["0.1"] > 0.1
    assert boots_only["coverage"] < 0.6
    # With the part the other builds measured: no unrelated pair flagged, 0 inside the intervals.
    assert set(with_builds["false_flag_share"].values()) == {0.0}
    assert {"0.5", "0.25", "0.1"} <= set(with_builds["false_flag_share"])
    assert with_builds["coverage"] == 1.0
    # And a 3% slowdown is still found.
    assert result["power"]["slower"]["forks"]["verdict"] == "regression"
    assert result["kernels"] == 16


def test_boots_at_seeded_phases_hold_the_phase_part_in_the_boots_alone() -> None:
    bench = load_bench("build_noise")
    rng = np.random.default_rng(11)
    phased = [f"phase-{n:02d}" for n in range(1, 16)]
    runs: dict[str, dict[str, list[list[float]]]] = {}
    for kernel in ["base", *phased]:
        # One source: each boot lands at a phase of its own (sd 0.2%), the same for all its iterations.
        runs[kernel] = {"alloc": [[1000.0 * (1 + rng.normal(0, 0.002))] * 3 for _ in range(4)]}
    result = bench.analyse(runs, {"alloc": False}, phased)
    boots_only = result["ways"]["boots only"]
    # The boots now differ by what the phases do, so their interval holds 0 nearly always.
    assert boots_only["coverage"] >= 0.8
    assert boots_only["false_flag_share"]["0.5"] == 0.0
    row = result["metrics"][0]
    assert 0.1 < row["boot_sd_pct"] < 0.4
    # As the service judges: the boots plus a fixed between-build part, which only widens the interval.
    from kperf.stats.abtest import NoisePrior

    served = bench.analyse(runs, {"alloc": False}, phased, service_prior=NoisePrior(0.001, 19.0))
    assert served["ways"]["as the service"]["coverage"] >= boots_only["coverage"]
    assert "as the service" not in result["ways"]
    # first_boots keeps the first n boots of every kernel and metric.
    two = bench.first_boots(runs, 2)
    assert all(len(boots) == 2 for metrics in two.values() for boots in metrics.values())
    assert two["base"]["alloc"] == runs["base"]["alloc"][:2]


def test_the_build_part_used_without_history_is_the_one_the_bench_recorded() -> None:
    """kperf.stats.builds.MEASURED_BUILD_SD is the padding run's largest sd per benchmark, rounded up."""
    from kperf.stats import builds

    record = json.loads((BENCH_DIR / "records" / "build_noise-padding-2026-11-28.json").read_text())
    for bench, result in record["results"].items():
        largest = max(row["between_build_pct"] for row in result["metrics"]) / 100.0
        # (The page allocator's 120 metrics: 0 up to rounding, 2e-15.)
        assert largest - 1e-12 <= builds.MEASURED_BUILD_SD[bench] <= largest * 1.1 + 1e-5, bench
        prior = builds.measured_build_prior(bench)
        assert prior.sd >= builds.MEASURED_BUILD_FLOOR and prior.dof == builds.MEASURED_BUILD_DOF
    # A benchmark the bench never ran gets the largest part measured for any.
    assert builds.measured_build_prior("mystery").sd == max(builds.MEASURED_BUILD_SD.values())


def test_fixtures_are_judged_at_their_benchmarks_own_threshold() -> None:
    """spawn's default on the instruction clock is 0.25%: a fixture that moves
    it by 0.4% is a regression there, as the service calls it, and only
    inconclusive or unchanged at the clock's 0.5%."""
    bench = load_bench("build_noise")
    from kperf.stats.abtest import min_effect_for_clock

    assert min_effect_for_clock("instructions", "spawn") < 0.4 < min_effect_for_clock("instructions")
    rng = np.random.default_rng(5)
    phased = [f"phase-{n:02d}" for n in range(1, 11)]
    runs: dict[str, dict[str, list[list[float]]]] = {}
    for kernel in ["base", *phased, "slower"]:
        level = 1000.0 * (0.996 if kernel == "slower" else 1.0)
        runs[kernel] = {"spawn-vmas-0": [[level * (1 + rng.normal(0, 0.0002))] * 3 for _ in range(3)]}
    claims = {"slower": ["spawn-vmas-0"]}
    at_clock = bench.analyse(runs, {"spawn-vmas-0": True}, phased, claims)
    at_spawn = bench.analyse(
        runs, {"spawn-vmas-0": True}, phased, claims, min_effect_pct=min_effect_for_clock("instructions", "spawn")
    )
    assert at_clock["power"]["slower"]["spawn-vmas-0"]["verdict"] != "regression"
    assert at_spawn["power"]["slower"]["spawn-vmas-0"]["verdict"] == "regression"
    # figures(), which the bench runs per benchmark, takes the benchmark's own.
    for kernel in runs:
        runs[kernel]["spawn-vmas-1000"] = [[500.0] * 3 for _ in range(3)]
    served = bench.figures("spawn", runs, phased, claims, 0)
    assert served["power"]["slower"]["spawn-vmas-0"]["verdict"] == "regression"
    assert bench.thresholds_today(["spawn", "aim9"]) == "spawn 0.25%, aim9 0.5%"


def test_the_services_ways_take_the_boot_spread_of_the_other_kernels() -> None:
    """A metric whose one reading a boot is 414 or 421 by the phase: base 421 twice and a stand-in
    414 twice look exact to boots alone; with the boot spread the other kernels show (as the
    service takes the phase bench's, kperf.stats.boot_spread) the pair is not flagged."""
    bench = load_bench("build_noise")
    from kperf.stats.builds import measured_build_prior

    rng = np.random.default_rng(3)
    phased = [f"phase-{n:02d}" for n in range(1, 21)]
    runs: dict[str, dict[str, list[list[float]]]] = {"base": {"m": [[421.0], [421.0]]}}
    runs["phase-01"] = {"m": [[414.0], [414.0]]}
    for kernel in phased[1:]:
        runs[kernel] = {"m": [[float(rng.choice([414.0, 421.0]))] for _ in range(2)]}
    prior = measured_build_prior("pagealloc")
    without = bench.analyse(runs, {"m": False}, phased, service_prior=prior)
    served = bench.analyse(runs, {"m": False}, phased, service_prior=prior, boot_spread=True)
    way = "the service's first look"
    assert without["ways"][way]["pairs_flagged_share"]["0.5"] > 0.0
    assert served["ways"][way]["pairs_flagged_share"]["0.5"] == 0.0
    # The boots-only and held-out-builds ways are the bench's own and do not change.
    assert served["ways"]["boots only"] == without["ways"]["boots only"]
