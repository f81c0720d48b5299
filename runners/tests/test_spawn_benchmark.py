"""spawn: compiled natively, run for real, parsed into samples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kperf_runner.benchmarks import get_benchmark, resolve_params

SPAWN = get_benchmark("spawn")


def _kperf_runner(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kperf_runner.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_bench_spawn_quick_runs_and_prints_raw_output_then_samples(
    runner_state: Path,
) -> None:
    run = _kperf_runner(
        "bench",
        "spawn",
        "--grid",
        "quick",
        "--set",
        "duration=0.2",
        "--state-dir",
        str(runner_state),
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    # The raw output comes first, in UnixBench's and kperf's formats...
    assert sum(line.startswith("COUNT|") and line.endswith("|1|lps") for line in lines) == 6
    assert any(line.startswith("spawn vmas=1000 iteration=2 count=") for line in lines)
    # ...then the samples as JSON.
    samples = json.loads("\n".join(lines[lines.index("[") :]))
    assert [(s["metric"], s["iteration"]) for s in samples] == [
        (f"spawn-vmas-{vmas}", iteration) for vmas in (0, 1000) for iteration in range(3)
    ]
    assert all(s["value"] > 0 for s in samples)


def test_bench_json_is_one_document_with_params_metrics_and_raw_output(
    runner_state: Path,
) -> None:
    run = _kperf_runner(
        "bench",
        "spawn",
        "--set",
        "duration=0.1",
        "--set",
        "iterations=2",
        "--set",
        "extra_vmas=0,50",
        "--json",
        "--state-dir",
        str(runner_state),
    )
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["params"] == {
        "duration": 0.1,
        "iterations": 2,
        "extra_vmas": [0, 50],
    }
    assert document["metrics"] == {
        "spawn-vmas-0": {"unit": "forks/s", "higher_is_better": True},
        "spawn-vmas-50": {"unit": "forks/s", "higher_is_better": True},
    }
    assert len(document["samples"]) == 4
    assert "COUNT|" in document["raw_output"]


def test_bench_refuses_a_bad_override_with_a_clear_message(runner_state: Path) -> None:
    run = _kperf_runner("bench", "spawn", "--set", "duration=soon", "--state-dir", str(runner_state))
    assert run.returncode == 2
    assert "parameter 'duration' wants a number" in run.stderr


def test_spawn_holds_the_extra_vmas_it_was_asked_for(spawn_binary: Path) -> None:
    run = subprocess.run(
        [str(spawn_binary), "-t", "0.05", "-i", "1", "-v", "3000", "-c", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    info = dict(field.split("=") for field in run.stdout.splitlines()[0].split()[1:])
    assert int(info["total_vmas"]) >= 3000
    samples = SPAWN.parse(
        run.stdout,
        resolve_params("spawn", "quick", {"extra_vmas": [3000], "iterations": 1}),
    )
    assert len(samples) == 1 and samples[0].value > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-t", "0"], "-t wants seconds"),
        (["-i", "many"], "-i wants an integer"),
        (["-c", "100000"], "-c wants an integer"),
        (["-t", "0.01", "-c", "1023"], "cannot pin to CPU 1023"),
    ],
)
def test_spawn_exits_non_zero_with_a_message(spawn_binary: Path, args: list[str], message: str) -> None:
    run = subprocess.run([str(spawn_binary), *args], capture_output=True, text=True, check=False)
    assert run.returncode != 0
    assert message in run.stderr


PARAMS = resolve_params("spawn", "quick", {"iterations": 2, "extra_vmas": [0, 100]})


def _output(*skip: tuple[int, int]) -> str:
    lines = []
    for vmas in (0, 100):
        for iteration in range(2):
            if (vmas, iteration) not in skip:
                lines.append("COUNT|200|1|lps")
                lines.append(f"spawn vmas={vmas} iteration={iteration} count=200 elapsed=0.500000")
    return "\n".join(lines) + "\n"


def test_parse_gives_forks_per_second_per_iteration() -> None:
    samples = SPAWN.parse("kernel noise\n" + _output(), PARAMS)
    assert [(s.metric, s.iteration, s.value) for s in samples] == [
        ("spawn-vmas-0", 0, 400.0),
        ("spawn-vmas-0", 1, 400.0),
        ("spawn-vmas-100", 0, 400.0),
        ("spawn-vmas-100", 1, 400.0),
    ]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", r"no result for vmas=0 iteration=0, .* \(0 of 4 found\)"),
        (_output((100, 1)), r"no result for vmas=100 iteration=1 .*\(3 of 4 found\)"),
        (
            _output() + "spawn vmas=0 iteration=0 count=x elapsed=1.0\n",
            "malformed result on output line 9",
        ),
        (
            _output() + "spawn vmas=7 iteration=0 count=1 elapsed=1.000000\n",
            "is for vmas=7",
        ),
        (
            _output() + "spawn vmas=0 iteration=5 count=1 elapsed=1.000000\n",
            "is iteration 5",
        ),
        (
            _output() + "spawn vmas=0 iteration=1 count=1 elapsed=1.000000\n",
            "repeats vmas=0 iteration=1",
        ),
        (
            _output((0, 0)) + "spawn vmas=0 iteration=0 count=1 elapsed=0.000000\n",
            "elapsed=0.0",
        ),
    ],
)
def test_parse_errors_say_what_is_wrong(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SPAWN.parse(raw, PARAMS)
