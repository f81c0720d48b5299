"""The benchmark registry: parameters, grids, commands, parsers and metrics.

This package is the single source of truth for what a benchmark is. The runner
uses it to build the command lines and parse the output; the service imports
it (and nothing else from the runner) to resolve a submission's grid into
parameters and to know each metric's unit and direction. So it stays free of
I/O and of anything but the standard library.

A benchmark is C sources in `csrc/` compiled into static binaries, a list of
argv lines run one after another in one boot (the qemu backend's init runs
them from /kperf/job; `kperf-runner bench` runs them natively), and a parser
that turns their combined raw output into samples. `base` holds what they
share; each benchmark is a module of its own. `Benchmark.mmtests_runs` maps a
raw output to the log files mmtests would have written for the same run
(docs/benchmarks.md, "How they map to mmtests").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kperf_runner.benchmarks.aim9 import AIM9_TESTS, Aim9
from kperf_runner.benchmarks.base import (
    BadParameters,
    Benchmark,
    Grid,
    Metric,
    MmtestsRuns,
    Operations,
    Param,
    Params,
    Sample,
    UnknownBenchmark,
)
from kperf_runner.benchmarks.pagealloc import (
    PAGEALLOC_PROC,
    Pagealloc,
    pagealloc_batches,
    pagealloc_log,
    pagealloc_readings,
    pagealloc_total_log,
    without_warmup,
)
from kperf_runner.benchmarks.pft import PFT_MODES, Pft
from kperf_runner.benchmarks.spawn import UNIXBENCH_SPAWN_BASELINE, Spawn

BENCHMARKS: dict[str, Benchmark] = {bench.name: bench for bench in (Aim9(), Pagealloc(), Pft(), Spawn())}


def get_benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise UnknownBenchmark(
            f"unknown benchmark {name!r}; known benchmarks: {', '.join(sorted(BENCHMARKS))}"
        ) from None


def resolve_params(name: str, grid: str, overrides: Mapping[str, Any] | None = None, clock: str = "wall") -> Params:
    """The validated parameters of benchmark `name` in `grid` on `clock`, with overrides applied."""
    bench = get_benchmark(name)
    if grid not in bench.grids:
        raise BadParameters(f"{name} has no grid {grid!r}; its grids are {', '.join(sorted(bench.grids))}")
    chosen = bench.grids[grid]
    params: dict[str, Any] = dict(chosen.params)
    if clock == "instructions" and chosen.instruction_params:
        params.update(chosen.instruction_params)
    known = [param.name for param in bench.parameters]
    for key, value in (overrides or {}).items():
        if key not in known:
            raise BadParameters(f"{name} has no parameter {key!r}; its parameters are {', '.join(known)}")
        params[key] = value
    validated = bench.validate(params)
    # A parameter with a default that nothing set stays out of what is
    # stored: jobs of a grid keep the parameters they had before it existed,
    # so base boots are shared and series continue across the upgrade.
    implicit = {p.name for p in bench.parameters if p.default is not None and p.name not in params}
    return {k: v for k, v in validated.items() if k not in implicit}


__all__ = [
    "AIM9_TESTS",
    "BENCHMARKS",
    "PAGEALLOC_PROC",
    "PFT_MODES",
    "UNIXBENCH_SPAWN_BASELINE",
    "Aim9",
    "BadParameters",
    "Benchmark",
    "Grid",
    "Metric",
    "MmtestsRuns",
    "Operations",
    "Pagealloc",
    "Param",
    "Params",
    "Pft",
    "Sample",
    "Spawn",
    "UnknownBenchmark",
    "get_benchmark",
    "pagealloc_batches",
    "pagealloc_log",
    "pagealloc_readings",
    "pagealloc_total_log",
    "resolve_params",
    "without_warmup",
]
