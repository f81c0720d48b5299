"""pft: compiled natively, run for real, parsed; captured outputs; what mmtests reads; error paths."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mmtests_tools import extract, needs_mmtests, write_runs

from kperf_runner.benchmarks import Metric, get_benchmark, resolve_params
from kperf_runner.toolchain import compile_static, host_arch

PFT = get_benchmark("pft")
DATA = Path(__file__).parent / "data"
HEADER = "  Gb  Thr CLine   User     System   Wall    flt/cpu/s fault/wsec"
LINE_FORMAT = " %3d %4d %3d %8.2fs %8.2fs %8.2fs  %10.3f %10.3f"


@pytest.fixture(scope="module")
def pft_binary(runner_state: Path) -> Path:
    return compile_static("pft.c", host_arch(), runner_state)


def test_grids_and_metric_names() -> None:
    assert PFT.grids["quick"].boots == 4
    quick = resolve_params("pft", "quick")
    # One worker: an instruction-clock job boots one vCPU unless it asks for more (docs/runners.md).
    assert quick == {"size_mb": 64, "clients": [1], "iterations": 3, "mode": "threads"}
    # Thread scaling as the per-VMA-lock discussion draws it: 1-4 workers, boots like quick.
    for grid, mode in (("scaling", "threads"), ("scaling-processes", "processes")):
        assert resolve_params("pft", grid) == {"size_mb": 64, "clients": [1, 2, 3, 4], "iterations": 3, "mode": mode}
        assert PFT.grids[grid].boots == PFT.grids["quick"].boots
    full = resolve_params("pft", "full")
    # mmtests: MemTotal/5 (size 0), clients 1..NUMCPUS, 30 iterations.
    assert full == {"size_mb": 0, "clients": list(range(1, 65)), "iterations": 30, "mode": "threads"}
    assert PFT.grids["full"].boots == 5
    assert resolve_params("pft", "full-processes")["mode"] == "processes"
    assert PFT.metrics(quick) == [
        Metric("faults/sec-threads-1", "faults/s", True),
        Metric("faults/cpu-threads-1", "faults/cpu-s", True),
    ]
    assert PFT.command(quick, "/kperf/bin") == [
        ["/kperf/bin/pft", "-m", "64", "-n", "1", "-i", "3", "-M", "threads"],
    ]
    processes = resolve_params("pft", "quick", {"mode": "processes", "clients": "4"})
    assert [m.name for m in PFT.metrics(processes)] == ["faults/sec-processes-4", "faults/cpu-processes-4"]


@pytest.mark.parametrize("value", ["thread", "", 3])
def test_mode_is_threads_or_processes(value: object) -> None:
    with pytest.raises(ValueError, match=r"'mode' wants one of threads, processes"):
        resolve_params("pft", "quick", {"mode": value})


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_bench_pft_runs_natively(runner_state: Path, mode: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "kperf_runner.cli", "bench", "pft", "--grid", "quick", "--set", "size_mb=64",
         "--set", "clients=1,2", "--set", "iterations=2", "--set", f"mode={mode}", "--json",
         "--state-dir", str(runner_state)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    raw = document["raw_output"]
    assert HEADER in raw.splitlines()
    runs = 2 if (os.cpu_count() or 1) >= 2 else 1
    assert len(document["samples"]) == runs * 2 * 2
    assert all(s["value"] > 0 for s in document["samples"])
    assert {s["metric"] for s in document["samples"]} <= set(document["metrics"])
    assert f"faults/sec-{mode}-1" in {s["metric"] for s in document["samples"]}
    _check_lines(raw)


def _check_lines(raw: str) -> None:
    """Each result line is mmtests' format, and the rates follow from pages and times."""
    pages = 0
    for line in raw.splitlines():
        if line.startswith("pft-info:"):
            info = dict(field.split("=") for field in line.split()[1:])
            pages = int(info["pages"])
            assert info["thp_off"] in ("madvise", "prctl", "none")
        elif line.strip()[:1].isdigit():
            f = line.replace("s ", " ").split()
            gb, clients, cline = int(f[0]), int(f[1]), int(f[2])
            user, system, wall, per_cpu, per_wall = map(float, f[3:8])
            assert line == LINE_FORMAT % (gb, clients, cline, user, system, wall, per_cpu, per_wall)
            assert cline == 1 and per_cpu > 0 and per_wall > 0
            # Times are printed to 1/100 s; the rates were computed exactly.
            assert pages / per_wall == pytest.approx(wall, abs=0.006)
            assert pages / per_cpu == pytest.approx(user + system, abs=0.011)


@pytest.mark.parametrize(
    ("name", "overrides", "count"),
    [
        ("pft-native-threads-x86_64.txt", {"size_mb": 32, "clients": [1, 2, 4]}, 12),
        ("pft-native-processes-x86_64.txt", {"size_mb": 32, "clients": [1, 2], "mode": "processes"}, 12),
        ("pft-quick-qemu-x86_64.txt", {"clients": [1, 2]}, 12),
    ],
)
def test_parse_captured_output(name: str, overrides: dict[str, object], count: int) -> None:
    raw = (DATA / name).read_text()
    _check_lines(raw)
    params = resolve_params("pft", "quick", overrides)
    samples = PFT.parse(raw, params)
    assert len(samples) == count
    assert all(s.value > 0 for s in samples)
    assert {s.metric for s in samples} <= {m.name for m in PFT.metrics(params)}
    # faults/sec is the last column, faults/cpu the one before, as mmtests reads them.
    first = next(line for line in raw.splitlines() if line.strip()[:1].isdigit()).split()
    assert samples[0].value == float(first[-1]) and samples[1].value == float(first[-2])


# mmtests 74aced35, ExtractPft.pm: the client counts are the N of the
# pft-N.log files (line 25); of each file it deletes every "s" (line 33), skips
# any line with a letter left (lines 34-36), splits the rest on whitespace
# (lines 40-42: a leading blank gives an empty element 0) and takes elements 7
# and 8 as faults/cpu-N and faults/sec-N (lines 45-46). A blank line has no
# letter: it would be a sample with no value.
def _mmtests_read(files: dict[str, str]) -> dict[str, list[float]]:
    read: dict[str, list[float]] = {}
    for name in files:
        client = re.fullmatch(r"pft-(\d+)\.log", name)
        if not client:
            continue
        for line in files[name].splitlines(keepends=True):
            line = line.replace("s", "")
            if re.search(r"[a-zA-Z]", line):
                continue
            fields = re.split(r"\s+", line)
            assert len(fields) >= 9 and fields[0] == "", f"{name}: {line!r} is no sample"
            read.setdefault(f"faults/cpu-{client[1]}", []).append(float(fields[7]))
            read.setdefault(f"faults/sec-{client[1]}", []).append(float(fields[8]))
    return read


@pytest.mark.parametrize(
    ("name", "overrides", "switch"),
    [
        ("pft-native-threads-x86_64.txt", {"size_mb": 32, "clients": [1, 2, 4]}, "-t"),
        ("pft-native-processes-x86_64.txt", {"size_mb": 32, "clients": [1, 2], "mode": "processes"}, "-n"),
        ("pft-quick-qemu-x86_64.txt", {"clients": [1, 2]}, "-t"),
    ],
)
def test_mmtests_reads_kperfs_samples_from_the_captured_output(
    name: str, overrides: dict[str, object], switch: str
) -> None:
    raw = (DATA / name).read_text()
    params = resolve_params("pft", "quick", overrides)
    files = PFT.mmtests_runs(raw, params)["pft"]
    # Skipped client counts (more than the CPUs) have no file, as mmtests never runs them.
    assert sorted(files) == ["commands.log", "pft-1.log", "pft-2.log"]
    size = 32 * 1024 * 1024 if "size_mb" in overrides else 64 * 1024 * 1024
    assert files["commands.log"] == f"./pft -m {size} {switch} 1\n./pft -m {size} {switch} 2\n"
    mode = params["mode"]
    kperf: dict[str, list[float]] = {}
    for sample in PFT.parse(raw, params):
        # kperf puts the mode in the name; mmtests' name has none.
        kperf.setdefault(sample.metric.replace(f"-{mode}-", "-"), []).append(sample.value)
    assert _mmtests_read(files) == kperf


@needs_mmtests
def test_mmtests_extract_reads_kperfs_pft_output(tmp_path: Path) -> None:
    """mmtests' own extract-mmtests.pl -b pft on a captured native run."""
    raw = (DATA / "pft-native-threads-x86_64.txt").read_text()
    params = resolve_params("pft", "quick", {"size_mb": 32, "clients": [1, 2, 4]})
    assert write_runs(tmp_path, PFT, raw, params) == ["pft"]
    kperf: dict[str, list[float]] = {}
    for sample in PFT.parse(raw, params):
        kperf.setdefault(sample.metric.replace("-threads-", "-"), []).append(sample.value)
    assert extract(tmp_path, "pft", "pft") == dict(sorted(kperf.items()))


def test_clients_above_the_cpus_are_skipped_not_failed() -> None:
    raw = (DATA / "pft-native-threads-x86_64.txt").read_text()
    params = resolve_params("pft", "quick", {"size_mb": 32, "clients": [1, 2, 4]})
    assert "pft-skip: mode=threads clients=4" in raw
    assert not [s for s in PFT.parse(raw, params) if s.metric.endswith("-4")]


def _raw(clients: tuple[int, ...] = (1, 2), iterations: int = 2, mode: str = "threads") -> str:
    lines = []
    for n in clients:
        lines += [
            f"pft-info: mode={mode} clients={n} iterations={iterations} bytes=1 pages=1 cpus=2 thp_off=madvise",
            HEADER,
        ]
        lines += [LINE_FORMAT % (0, n, 1, 0.01, 0.1, 0.05, 1000.0, 2000.0)] * iterations
    return "\n".join(lines) + "\n"


PARAMS = resolve_params("pft", "quick", {"clients": [1, 2], "iterations": 2})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", r"incomplete output for clients=1 \(0 of 2 iterations\), clients=2"),
        (_raw(clients=(1,)), r"incomplete output for clients=2 \(0 of 2 iterations\)"),
        (_raw(iterations=1), r"clients=1 \(1 of 2 iterations\)"),
        (_raw(iterations=3), "is iteration 3 of a 2-iteration run"),
        (_raw() + "   0    2   1  x\n", "malformed result row on output line 9"),
        (_raw(mode="processes"), "is for mode processes, the job asked for threads"),
        (_raw(clients=(1, 2, 3)), r"is for clients=3, the job asked for clients \[1, 2\]"),
        (_raw(clients=(1, 2, 1)), "repeats clients=1"),
        ("   0    1   1  0.00s 0.10s 0.05s  1000.000 2000.000\n", "comes before any pft-info line"),
        (_raw().replace("   0    2   1", "   0    3   1"), "reports 3 clients in the run of 2"),
        (_raw().replace("2000.000", "   0.000"), "has no fault rate"),
        ("pft-info: mode=threads\n", "malformed line 1"),
        (
            "pft-skip: mode=threads clients=1 cpus=0 (x)\npft-skip: mode=threads clients=2 cpus=0 (x)\n",
            "every client count was skipped",
        ),
    ],
)
def test_parse_errors_say_what_is_wrong(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PFT.parse(raw, PARAMS)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-M", "fibers"], "-M wants threads or processes"),
        (["-n", "0"], "-n wants an integer"),
        (["-m", "-1"], "-m wants an integer"),
    ],
)
def test_pft_exits_non_zero_with_a_message(pft_binary: Path, args: list[str], message: str) -> None:
    run = subprocess.run([str(pft_binary), *args], capture_output=True, text=True, check=False)
    assert run.returncode != 0
    assert message in run.stderr


def test_a_region_too_small_to_time_is_an_error_not_a_number(pft_binary: Path) -> None:
    # 256 faults take well under a millisecond; where the kernel accounts CPU
    # time by ticks that is no time at all, and a rate would be infinite.
    run = subprocess.run([str(pft_binary), "-m", "1", "-n", "1"], capture_output=True, text=True, check=False)
    assert "bytes=1048576 pages=256" in run.stdout
    if run.returncode != 0:
        assert "measured no time" in run.stderr
    else:
        assert len([line for line in run.stdout.splitlines() if line.strip()[:1].isdigit()]) == 1


def test_more_workers_than_cpus_is_a_skip(pft_binary: Path) -> None:
    cpus = os.cpu_count() or 1
    run = subprocess.run([str(pft_binary), "-m", "0", "-n", str(cpus + 1)], capture_output=True, text=True, check=True)
    assert run.stdout.startswith(f"pft-skip: mode=threads clients={cpus + 1} cpus={cpus}")
