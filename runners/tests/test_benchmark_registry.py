"""The registry the runner and the service share."""

from __future__ import annotations

import pytest

from kperf_runner.benchmarks import (
    BENCHMARKS,
    BadParameters,
    Metric,
    UnknownBenchmark,
    get_benchmark,
    resolve_params,
)


def test_unknown_benchmark_lists_the_known_ones() -> None:
    with pytest.raises(
        UnknownBenchmark, match=r"unknown benchmark 'spwan'; known benchmarks: aim9, pagealloc, pft, spawn"
    ):
        get_benchmark("spwan")
    with pytest.raises(UnknownBenchmark):
        resolve_params("spwan", "quick")
    assert issubclass(UnknownBenchmark, ValueError)


def test_unknown_grid_lists_the_grids() -> None:
    with pytest.raises(BadParameters, match=r"spawn has no grid 'huge'; its grids are cross-cpu, full, quick"):
        resolve_params("spawn", "huge")


def test_the_spawn_grids_are_what_ci_and_the_labs_run() -> None:
    spawn = get_benchmark("spawn")
    assert spawn.grids["quick"].boots == 4
    assert resolve_params("spawn", "quick") == {
        "duration": 0.2,
        "iterations": 3,
        "extra_vmas": [0, 1000],
    }
    assert spawn.grids["full"].boots == 5
    assert resolve_params("spawn", "full") == {
        "duration": 30,
        "iterations": 3,
        "extra_vmas": [0, 100, 200, 400, 800, 1600, 3200, 6400],
    }


def test_overrides_from_the_command_line_or_json_are_coerced() -> None:
    assert resolve_params("spawn", "quick", {"duration": "0.5", "extra_vmas": "0, 200"}) == {
        "duration": 0.5,
        "iterations": 3,
        "extra_vmas": [0, 200],
    }
    assert resolve_params("spawn", "quick", {"iterations": 5.0})["iterations"] == 5
    # Resolving never hands out the grid's own list.
    resolve_params("spawn", "quick")["extra_vmas"].append(9)
    assert resolve_params("spawn", "quick")["extra_vmas"] == [0, 1000]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"threads": 4},
            r"spawn has no parameter 'threads'; its parameters are duration, iterations, extra_vmas",
        ),
        ({"duration": 0}, r"'duration' wants a number in \[0.01, 3600\], got 0"),
        ({"duration": "fast"}, r"'duration' wants a number"),
        ({"duration": True}, r"'duration' wants a number"),
        ({"duration": float("nan")}, r"'duration' wants a number"),
        ({"iterations": 2.5}, r"'iterations' wants an integer in \[1, 1000\]"),
        ({"iterations": 0}, r"'iterations' wants an integer"),
        ({"extra_vmas": []}, r"'extra_vmas' wants at least one value"),
        ({"extra_vmas": [0, 0]}, r"'extra_vmas' has repeated values"),
        ({"extra_vmas": [-1]}, r"'extra_vmas' wants an integer in \[0, 60000\]"),
        ({"extra_vmas": 5}, r"'extra_vmas' wants a list of integers"),
    ],
)
def test_bad_overrides_are_refused_clearly(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(BadParameters, match=message):
        resolve_params("spawn", "quick", overrides)


def test_validate_refuses_incomplete_parameters() -> None:
    with pytest.raises(BadParameters, match="iterations missing"):
        get_benchmark("spawn").validate({"duration": 1, "extra_vmas": [0]})


def test_spawn_commands_metrics_and_sources() -> None:
    spawn = get_benchmark("spawn")
    params = resolve_params("spawn", "quick", {"duration": 0.25})
    assert spawn.command(params, "/kperf/bin/") == [
        ["/kperf/bin/spawn", "-t", "0.25", "-i", "3", "-v", "0", "-c", "0"],
        ["/kperf/bin/spawn", "-t", "0.25", "-i", "3", "-v", "1000", "-c", "0"],
    ]
    assert spawn.metrics(params) == [
        Metric("spawn-vmas-0", "forks/s", True),
        Metric("spawn-vmas-1000", "forks/s", True),
    ]
    assert spawn.sources() == ["spawn.c"]
    assert spawn.expected_seconds(params) == pytest.approx(1.5)


def test_every_benchmark_is_complete() -> None:
    """What a new benchmark must provide: quick and full grids, metrics, sources."""
    for name, bench in BENCHMARKS.items():
        assert bench.name == name and bench.description
        assert {"quick", "full"} <= set(bench.grids)
        for grid in bench.grids:
            params = resolve_params(name, grid)
            assert bench.metrics(params)
            assert bench.command(params, "/bin")
            assert bench.sources()
