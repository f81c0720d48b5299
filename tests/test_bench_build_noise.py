"""bench/build_noise.py's analysis on builds whose levels are known: what it
reports is what kperf's A/B test does with and without the between-build part."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

BENCH = Path(__file__).resolve().parents[1] / "bench" / "build_noise.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_noise", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_noise"] = module
    spec.loader.exec_module(module)
    return module


def test_builds_that_differ_by_layout_are_flagged_by_boots_alone_and_not_with_the_build_part() -> None:
    bench = load()
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
    assert with_builds["false_flag_share"] == {"0.5": 0.0, "0.25": 0.0, "0.1": 0.0}
    assert with_builds["coverage"] == 1.0
    # And a 3% slowdown is still found.
    assert result["power"]["slower"]["forks"]["verdict"] == "regression"
    assert result["kernels"] == 16
