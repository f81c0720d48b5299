"""spawn: compiled natively, run for real, parsed into samples, read as mmtests reads it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mmtests_tools import extract, needs_mmtests, write_runs

from kperf_runner.benchmarks import UNIXBENCH_SPAWN_BASELINE, get_benchmark, resolve_params

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
    assert sum(line.startswith("Process Creation ") for line in lines) == 6
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
    # The host's /proc/vmstat around the commands: forking faults pages in.
    assert document["counters"]["vmstat"]["pgfault"] > 0


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
# UnixBench's index-table row (Run, logIndexCat: "%-40s %12.1f %12.1f %8.1f").
ROW_400 = f"{'Process Creation':<40} {126.0:12.1f} {400.0:12.1f} {400.0 / 12.6:8.1f}"


def _output(*skip: tuple[int, int]) -> str:
    lines = []
    for vmas in (0, 100):
        for iteration in range(2):
            if (vmas, iteration) not in skip:
                lines.append("COUNT|200|1|lps")
                lines.append(f"spawn vmas={vmas} iteration={iteration} count=200 elapsed=0.500000")
                lines.append(ROW_400)
    return "\n".join(lines) + "\n"


def test_parse_gives_forks_per_second_per_iteration() -> None:
    samples = SPAWN.parse("kernel noise\n" + _output(), PARAMS)
    assert [(s.metric, s.iteration, s.value) for s in samples] == [
        ("spawn-vmas-0", 0, 400.0),
        ("spawn-vmas-0", 1, 400.0),
        ("spawn-vmas-100", 0, 400.0),
        ("spawn-vmas-100", 1, 400.0),
    ]


def _without_row(raw: str, nth: int) -> str:
    """raw without its nth (0-based) index row."""
    lines = raw.splitlines(keepends=True)
    rows = [i for i, line in enumerate(lines) if line.startswith("Process Creation")]
    del lines[rows[nth]]
    return "".join(lines)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", r"no result for vmas=0 iteration=0, .* \(0 of 4 found\)"),
        (_output((100, 1)), r"no result for vmas=100 iteration=1 .*\(3 of 4 found\)"),
        (
            _output() + "spawn vmas=0 iteration=0 count=x elapsed=1.0\n",
            "malformed result on output line 13",
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
        # The index row is what mmtests reads: it must be there and agree.
        (
            _without_row(_output(), 1),
            r"no UnixBench index row after the result on output line 5 \(vmas=0 iteration=1\)",
        ),
        (_without_row(_output(), 3), r"no UnixBench index row after the result on output line 11 \(vmas=100 iter"),
        (_output().replace("400.0     31.7", "399.8     31.7", 1), r"line 3 reports 399.8 lps, but .* gives 400.0"),
        (_output().replace(" 126.0 ", " 116.0 ", 1), "line 3 has baseline 116.0, UnixBench's is 126.0"),
        (_output().replace("   31.7", "   lots", 1), "malformed UnixBench index row on output line 3"),
        (ROW_400 + "\n" + _output(), "index row on output line 1 follows no result line"),
    ],
)
def test_parse_errors_say_what_is_wrong(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SPAWN.parse(raw, PARAMS)


# ExtractUnixbenchcommon.pm (mmtests 74aced35) line 60: the one line of a
# spawn log it reads, $2 (RESULT) is the sample; line 23 reads the workloads
# file, line 31 finds the copies from the file names <workload>-<copies>-1.log,
# line 46 reads <workload>-<copies>-*.log, line 72 names the metric
# unixbench-<workload>-<copies>.
MMTESTS_SPAWN_ROW = re.compile(r"^Process Creation * ([0-9.]+) * ([0-9.]+) * ([0-9.]+)")


def test_the_native_output_has_unixbenchs_index_row_and_mmtests_reads_kperfs_samples(spawn_binary: Path) -> None:
    run = subprocess.run(
        [str(spawn_binary), "-t", "0.05", "-i", "3", "-v", "0", "-c", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    params = resolve_params("spawn", "quick", {"extra_vmas": [0], "iterations": 3})
    samples = SPAWN.parse(run.stdout, params)
    rows = [line for line in run.stdout.splitlines() if line.startswith("Process Creation")]
    assert len(rows) == 3
    for row, sample in zip(rows, samples):
        # UnixBench's columns: name in 40, then 12, 12 and 8 wide, one decimal;
        # the index is result / baseline * 10, computed from the unrounded
        # result: the printed index is within half a tenth of the printed
        # result / 12.6, plus that result's own rounding divided by 12.6.
        result = float(row[54:66])
        assert row[:41] == "Process Creation".ljust(41) and len(row) == 75
        assert float(row[41:53]) == UNIXBENCH_SPAWN_BASELINE == 126.0
        assert float(row[67:75]) == pytest.approx(result / 12.6, abs=0.05 + 0.05 / 12.6 + 1e-9)
        assert result == pytest.approx(sample.value, abs=0.051)
    runs = SPAWN.mmtests_runs(run.stdout, params)
    files = runs["spawn-vmas-0"]
    assert list(files) == ["workloads", "spawn-1-1.log", "spawn-1-2.log", "spawn-1-3.log"]
    assert files["workloads"] == "spawn\n"
    read = []
    for iteration in (1, 2, 3):
        matches = [MMTESTS_SPAWN_ROW.match(line) for line in files[f"spawn-1-{iteration}.log"].splitlines()]
        read += [float(m.group(2)) for m in matches if m]
    assert read == pytest.approx([s.value for s in samples], abs=0.051)
    # Each file is one iteration's lines, as spawn printed them.
    assert files["spawn-1-2.log"].splitlines()[0].startswith("COUNT|")
    assert "spawn vmas=0 iteration=1 " in files["spawn-1-2.log"]


def test_each_extra_vmas_value_is_an_mmtests_run_of_its_own() -> None:
    runs = SPAWN.mmtests_runs(_output(), PARAMS)
    assert list(runs) == ["spawn-vmas-0", "spawn-vmas-100"]
    assert runs["spawn-vmas-100"]["spawn-1-2.log"] == (
        f"COUNT|200|1|lps\nspawn vmas=100 iteration=1 count=200 elapsed=0.500000\n{ROW_400}\n"
    )
    with pytest.raises(ValueError, match="no result for vmas=100 iteration=1"):
        SPAWN.mmtests_runs(_output((100, 1)), PARAMS)


@needs_mmtests
def test_mmtests_extract_reads_kperfs_spawn_output(spawn_binary: Path, tmp_path: Path) -> None:
    """mmtests' own extract-mmtests.pl -b unixbench-spawn on kperf's files."""
    run = subprocess.run(
        [str(spawn_binary), "-t", "0.05", "-i", "3", "-v", "20", "-c", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    params = resolve_params("spawn", "quick", {"extra_vmas": [20], "iterations": 3})
    assert write_runs(tmp_path, SPAWN, run.stdout, params) == ["spawn-vmas-20"]
    read = extract(tmp_path, "unixbench-spawn", "spawn-vmas-20")
    assert list(read) == ["unixbench-spawn-1"]
    # The one decimal UnixBench's row has.
    expected = [s.value for s in SPAWN.parse(run.stdout, params)]
    assert read["unixbench-spawn-1"] == pytest.approx(expected, abs=0.051)


def test_parse_captured_output() -> None:
    """kperf-runner bench spawn --grid quick --set duration=0.2, natively on x86_64."""
    raw = (Path(__file__).parent / "data" / "spawn-native-x86_64.txt").read_text()
    params = resolve_params("spawn", "quick", {"duration": 0.2})
    samples = SPAWN.parse(raw, params)
    lines = [line.split() for line in raw.splitlines() if line.startswith("spawn vmas=")]
    # The sample is count / elapsed of kperf's own line, as before the index row was added.
    assert [(s.metric, s.iteration) for s in samples] == [
        (f"spawn-vmas-{vmas}", i) for vmas in (0, 1000) for i in range(3)
    ]
    assert [s.value for s in samples] == [int(f[3][6:]) / float(f[4][8:]) for f in lines]
    rows = [MMTESTS_SPAWN_ROW.match(line) for line in raw.splitlines()]
    assert [float(m.group(2)) for m in rows if m] == pytest.approx([s.value for s in samples], abs=0.051)
