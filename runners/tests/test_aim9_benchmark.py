"""aim9: compiled natively, run for real, parsed; captured outputs; what mmtests reads; error paths."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mmtests_tools import extract, needs_mmtests, write_runs

from kperf_runner.benchmarks import AIM9_TESTS, Metric, get_benchmark, resolve_params
from kperf_runner.toolchain import compile_static, host_arch

AIM9 = get_benchmark("aim9")
DATA = Path(__file__).parent / "data"
ROW_FORMAT = "%6d %-15s%10.2f %10d %10.5f %15.2f %s"  # AIM9's row, as printf writes it
OPS_PER_CALL = {"page_test": 1700, "brk_test": 17000, "exec_test": 5, "fork_test": 100}


@pytest.fixture(scope="module")
def aim9_binary(runner_state: Path) -> Path:
    return compile_static("aim9.c", host_arch(), runner_state)


@pytest.fixture(scope="module")
def true_binary(runner_state: Path) -> Path:
    return compile_static("true.c", host_arch(), runner_state)


def test_grids_are_mmtests_defaults_and_a_quick_one() -> None:
    assert AIM9.grids["quick"].boots == 4
    # 0.2 s per test: 2x10^8 instructions under the instruction clock.
    assert resolve_params("aim9", "quick") == {"testtime": 0.2, "iterations": 3}
    assert AIM9.grids["full"].boots == 5
    # config-workload-aim9-pagealloc: TESTTIME=15, 12 iterations.
    assert resolve_params("aim9", "full") == {"testtime": 15, "iterations": 12}
    params = resolve_params("aim9", "quick", {"testtime": "0.5"})
    assert AIM9.command(params, "/kperf/bin/") == [
        ["/kperf/bin/aim9", "-t", "0.5", "-i", "3", "-x", "/kperf/bin/true", "-c", "0"]
    ]
    assert AIM9.metrics(params) == [Metric(name, "ops/s", True) for name in AIM9_TESTS]
    assert AIM9.sources() == ["aim9.c", "true.c"]
    assert AIM9.artifacts() == []


def test_bench_aim9_runs_natively(runner_state: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "kperf_runner.cli", "bench", "aim9", "--grid", "quick",
         "--set", "testtime=0.2", "--set", "iterations=2", "--json", "--state-dir", str(runner_state)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["params"] == {"testtime": 0.2, "iterations": 2}
    assert document["metrics"] == {name: {"unit": "ops/s", "higher_is_better": True} for name in AIM9_TESTS}
    samples = document["samples"]
    assert [(s["metric"], s["iteration"]) for s in samples] == [(n, i) for n in AIM9_TESTS for i in range(2)]
    assert all(s["value"] > 0 for s in samples)
    _check_rows(document["raw_output"])


def _check_rows(raw: str) -> None:
    """Every row is AIM9's: field 2 the name, field 6 ops/sec = count x ops per call / elapsed."""
    rows = [line.split() for line in raw.splitlines() if line.strip()[:1].isdigit()]
    assert rows
    for fields in rows:
        name, elapsed, count, loops, ops = (
            fields[1],
            float(fields[2]),
            int(fields[3]),
            float(fields[4]),
            float(fields[5]),
        )
        assert name in OPS_PER_CALL
        assert ops == pytest.approx(loops * OPS_PER_CALL[name], rel=1e-4)
        # Elapsed is printed to 1/100 s; ops/sec was computed from the exact time.
        assert ops == pytest.approx(count * OPS_PER_CALL[name] / elapsed, rel=0.006 / elapsed)


@pytest.mark.parametrize(
    ("name", "iterations"),
    [("aim9-native-x86_64.txt", 2), ("aim9-quick-qemu-x86_64.txt", 3)],
)
def test_parse_captured_output(name: str, iterations: int) -> None:
    raw = (DATA / name).read_text()
    _check_rows(raw)
    params = resolve_params("aim9", "quick", {"iterations": iterations})
    samples = AIM9.parse(raw, params)
    assert len(samples) == 4 * iterations
    assert {s.metric for s in samples} == set(AIM9_TESTS)
    assert all(s.value > 0 for s in samples)
    # The value is field 6 of the row, as mmtests' extractor reads it.
    first_row = next(line for line in raw.splitlines() if " page_test " in line)
    assert samples[0].metric == "page_test" and samples[0].value == float(first_row.split()[5])


# mmtests 74aced35, ExtractAim9.pm: for each of these workloads (line 21), every
# line of every aim9-* file (line 26) that contains the workload's name anywhere
# (line 32) is a sample, element 6 of the line split on whitespace (lines 33-34;
# a leading blank gives an empty element 0, so element 6 is AIM9's sixth field,
# ops/sec). The workloads read are the ones seen (lines 42-47).
MMTESTS_AIM9_WORKLOADS = (*AIM9_TESTS, "disk_cp", "disk_rd", "disk_rr", "disk_rw", "disk_src", "disk_wrt")


def _mmtests_read(files: dict[str, str]) -> dict[str, list[float]]:
    """{workload: samples} by ExtractAim9.pm's rules (files in glob order)."""
    read: dict[str, list[float]] = {}
    for workload in MMTESTS_AIM9_WORKLOADS:
        for name in sorted(files):
            for line in files[name].splitlines(keepends=True):
                if workload in line:
                    read.setdefault(workload, []).append(float(re.split(r"\s+", line)[6]))
    return read


@pytest.mark.parametrize(
    ("name", "iterations"),
    [("aim9-native-x86_64.txt", 2), ("aim9-quick-qemu-x86_64.txt", 3)],
)
def test_mmtests_reads_kperfs_samples_from_the_captured_output(name: str, iterations: int) -> None:
    raw = (DATA / name).read_text()
    params = resolve_params("aim9", "quick", {"iterations": iterations})
    files = AIM9.mmtests_runs(raw, params)["aim9"]
    assert list(files) == [f"aim9-{i}" for i in range(1, iterations + 1)]
    assert all("aim9 iteration=" not in text for text in files.values())
    kperf: dict[str, list[float]] = {}
    for sample in AIM9.parse(raw, params):
        kperf.setdefault(sample.metric, []).append(sample.value)
    assert _mmtests_read(files) == kperf
    # The whole raw output read as one file gives the same: kperf's own
    # lines name no workload, and every row starts with a blank.
    assert _mmtests_read({"aim9-1": raw}) == kperf
    assert all(line[0] == " " for line in raw.splitlines() if any(t in line for t in MMTESTS_AIM9_WORKLOADS))


@needs_mmtests
def test_mmtests_extract_reads_kperfs_aim9_output(tmp_path: Path) -> None:
    """mmtests' own extract-mmtests.pl -b aim9 on the captured QEMU boot."""
    raw = (DATA / "aim9-quick-qemu-x86_64.txt").read_text()
    params = resolve_params("aim9", "quick", {"iterations": 3})
    assert write_runs(tmp_path, AIM9, raw, params) == ["aim9"]
    kperf: dict[str, list[float]] = {}
    for sample in AIM9.parse(raw, params):
        kperf.setdefault(sample.metric, []).append(sample.value)
    assert extract(tmp_path, "aim9", "aim9") == dict(sorted(kperf.items()))


def test_row_format_matches_aim9() -> None:
    line = next(line for line in (DATA / "aim9-native-x86_64.txt").read_text().splitlines() if "page_test" in line)
    fields = line.split()
    number, name, elapsed, count, loops, ops = (
        int(fields[0]),
        fields[1],
        float(fields[2]),
        int(fields[3]),
        float(fields[4]),
        float(fields[5]),
    )
    assert line == ROW_FORMAT % (
        number, name, elapsed, count, loops, ops, "System Allocations & Pages/second"
    )  # fmt: skip
    # The spec's example row, column for column.
    example = "     2 page_test           60.00       6803  113.38333       192751.67 System Allocations & Pages/second"
    assert example == ROW_FORMAT % (
        2, "page_test", 60.0, 6803, 113.38333, 192751.67, "System Allocations & Pages/second"
    )  # fmt: skip


def _raw(iterations: int = 2, skip: tuple[str, int] | None = None) -> str:
    lines = []
    for iteration in range(iterations):
        lines.append(f"aim9 iteration={iteration} testtime=1.000")
        for number, name in enumerate(AIM9_TESTS, start=1):
            if (name, iteration) != skip:
                lines.append(ROW_FORMAT % (number, name, 1.0, 10, 10.0, 10.0 * OPS_PER_CALL[name], "X/second"))
    return "\n".join(lines) + "\n"


PARAMS = resolve_params("aim9", "quick", {"iterations": 2})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", r"no result for page_test iteration=0, .*\(0 of 8 found\)"),
        (_raw(skip=("fork_test", 1)), r"no result for fork_test iteration=1 .*\(7 of 8 found\)"),
        (_raw() + "     1 page_test  1.00 x 1.0 1.0 y\n", "malformed result row on output line 11"),
        (_raw() + "     5 mmap_test 1.00 1 1.00000 1.00 y\n", "unknown test 'mmap_test'"),
        ("     1 page_test 1.00 1 1.00000 1700.00 y\n", "comes before any 'aim9 iteration=' line"),
        (_raw() + "     1 page_test 1.00 1 1.00000 1700.00 y\n", "repeats page_test in iteration 1"),
        (_raw() + "aim9 iteration=2 testtime=1.000\n", "starts iteration 2"),
        (_raw() + "aim9 iteration=two\n", "malformed iteration line"),
        (
            _raw(skip=("brk_test", 0)).replace(
                "aim9 iteration=1", "     2 brk_test 1.00 0 0.00000 0.00 y\naim9 iteration=1"
            ),
            "no work done",
        ),
    ],
)
def test_parse_errors_say_what_is_wrong(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AIM9.parse(raw, PARAMS)


def test_true_is_tiny_and_exits_zero(true_binary: Path) -> None:
    assert true_binary.stat().st_size < 16384
    assert subprocess.run([str(true_binary)], check=False).returncode == 0


def test_a_subset_of_tests_can_run(aim9_binary: Path, true_binary: Path) -> None:
    run = subprocess.run(
        [str(aim9_binary), "-t", "0.05", "-i", "1", "-x", str(true_binary), "-T", "exec_test,brk_test"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    names = [line.split()[1] for line in run.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert names == ["exec_test", "brk_test"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-t", "0"], "-t wants seconds"),
        (["-i", "0"], "-i wants an integer"),
        (["-T", "page_test,mmap_test"], "unknown test 'mmap_test'"),
        (["-T", "page_test,page_test"], "given twice"),
        (["-t", "0.01", "-x", "/nonexistent/true"], "exec_test cannot execute '/nonexistent/true'"),
        (["-t", "0.01", "-c", "1023"], "cannot pin to CPU 1023"),
    ],
)
def test_aim9_exits_non_zero_with_a_message(
    aim9_binary: Path, true_binary: Path, args: list[str], message: str
) -> None:
    argv = [str(aim9_binary), "-x", str(true_binary), *args]
    run = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert run.returncode != 0
    assert message in run.stderr
