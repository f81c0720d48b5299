"""Operations per command from each benchmark's own output (Benchmark.operations):
the denominators of the per-operation hardware counters (docs/machine-tuning.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from namespace_init import run_init

from kperf_runner.backends import BootResult, parse_boot
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.console import parse_console
from kperf_runner.counters import per_command_counters
from kperf_runner.initramfs import GUEST_BINDIR
from kperf_runner.reporting import boot_record

DATA = Path(__file__).parent / "data"


def _ops(name: str, sample: str, overrides: dict[str, Any]) -> dict[int, dict[str, int]]:
    bench = get_benchmark(name)
    return bench.operations((DATA / sample).read_text(), resolve_params(name, "quick", overrides))


def test_spawn_counts_the_forks_of_each_extra_vmas_command() -> None:
    # count= of the three iterations: 1171 + 1119 + 1280 and 118 + 126 + 104.
    assert _ops("spawn", "spawn-native-x86_64.txt", {"duration": 0.2}) == {0: {"fork": 3570}, 1: {"fork": 348}}
    assert get_benchmark("spawn").command_labels(resolve_params("spawn", "quick")) == [
        "extra_vmas=0",
        "extra_vmas=1000",
    ]


@pytest.mark.parametrize(
    ("sample", "overrides", "expected"),
    [
        # pages=16384, three rows per client count.
        ("pft-quick-qemu-x86_64.txt", {"clients": [1, 2]}, {0: {"fault": 49152}, 1: {"fault": 49152}}),
        (
            "pft-native-processes-x86_64.txt",
            {"size_mb": 32, "clients": [1, 2], "mode": "processes"},
            {
                0: {"fault": 24576},
                1: {"fault": 24576},
            },
        ),
        # clients=4 was skipped (two CPUs): it faulted nothing and has no count.
        (
            "pft-native-threads-x86_64.txt",
            {"size_mb": 32, "clients": [1, 2, 4]},
            {
                0: {"fault": 24576},
                1: {"fault": 24576},
            },
        ),
    ],
)
def test_pft_counts_pages_times_iterations_per_client_count(
    sample: str, overrides: dict[str, Any], expected: dict[int, dict[str, int]]
) -> None:
    assert _ops("pft", sample, overrides) == expected


def test_pagealloc_counts_inner_times_batch_plus_one_blocks_per_row() -> None:
    # 120 rows; sum over them of 100 x (batch + 1), warm-up rounds included.
    assert _ops("pagealloc", "pagealloc-quick-qemu-x86_64.txt", {}) == {0: {"alloc": 605700}}
    assert _ops("pagealloc", "pagealloc-quick-qemu-arm64.txt", {})[0]["alloc"] > 0


def test_pagealloc_without_its_info_line_states_no_count() -> None:
    raw = "".join(
        line + "\n"
        for line in (DATA / "pagealloc-quick-qemu-x86_64.txt").read_text().splitlines()
        if not line.startswith("pagealloc-info:")
    )
    assert get_benchmark("pagealloc").operations(raw, resolve_params("pagealloc", "quick")) == {}


def test_aim9_counts_each_tests_operations_in_its_one_command() -> None:
    # Iteration counts 51+63, 12+17, 370+384, 40+30 times aim9.c's ops per call.
    assert _ops("aim9", "aim9-native-x86_64.txt", {"iterations": 2}) == {
        0: {"page_test": 193800, "brk_test": 493000, "exec_test": 3770, "fork_test": 7000}
    }


def test_aim9_rows_whose_rates_disagree_with_the_tests_ops_per_call_give_no_count() -> None:
    raw = (DATA / "aim9-native-x86_64.txt").read_text().replace("172280.22", "17228.02")
    assert get_benchmark("aim9").operations(raw, resolve_params("aim9", "quick", {"iterations": 2})) == {}


def test_the_upload_pairs_each_commands_counts_with_its_operations() -> None:
    console = "".join(
        [
            "KPERF-BEGIN 0\n",
            "out\n",
            "KPERF-END 0 0\n",
            "KPERF-PERF 0 instructions=9000 cycles=18000\n",
            "KPERF-BEGIN 1\n",
            "KPERF-END 1 0\n",
            "KPERF-PERF 1 instructions=3000 cycles=1000\n",
            "KPERF-BEGIN 2\n",
            "KPERF-END 2 0\n",
            "KPERF-PERF 2 unsupported\n",
            "KPERF-DONE\n",
        ]
    )
    perf = {c.index: c.perf for c in parse_console(console).commands if c.perf is not None}
    ops = {0: {"fork": 3}, 2: {"fork": 5}}
    assert per_command_counters(perf, ops) == {
        "perf_by_command": {"0.instructions": 9000, "0.cycles": 18000, "1.instructions": 3000, "1.cycles": 1000},
        # Command 2 has no counts, so its operations would divide nothing.
        "operations": {"0.fork": 3},
    }
    # No counts at all (a guest without a PMU): nothing to add to the upload.
    assert per_command_counters({}, ops) == {}


def test_a_boot_record_carries_each_commands_counts_and_operations() -> None:
    console = "KPERF-BEGIN 0\nKPERF-END 0 0\nKPERF-PERF 0 task_clock_ns=500 page_faults=40\nKPERF-DONE\n"
    result = BootResult(console, {}, parse_console(console).commands, 1.0)
    bench = get_benchmark("spawn")
    record = boot_record(0, result, "qemu", "wall", bench, [], {0: {"fork": 8}})
    assert record["counters"] == {
        "perf": {"task_clock_ns": 500, "page_faults": 40},
        "perf_by_command": {"0.task_clock_ns": 500, "0.page_faults": 40},
        "operations": {"0.fork": 8},
    }
    # A runner without operations (or a guest without counts) uploads what it did before.
    assert boot_record(0, result, "qemu", "wall", bench, [])["counters"]["perf"] == {
        "task_clock_ns": 500,
        "page_faults": 40,
    }


def test_init_in_software_mode_gives_page_faults_per_fork(
    tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> None:
    """The whole path on any machine: init counts each command (software events), spawn's output counts its forks."""
    bench = get_benchmark("spawn")
    params = resolve_params("spawn", "quick", {"duration": 0.1, "iterations": 2, "extra_vmas": "0,20"})
    commands = bench.command(params, GUEST_BINDIR)
    run = run_init(tmp_path / "root", init_binary, {"spawn": spawn_binary}, commands, extra={"perf": "software\n"})
    console = run.stdout.decode("utf-8", "replace")
    record = parse_boot(console, commands)
    result = BootResult(console, record.environment, record.commands, 1.0)
    operations = bench.operations(result.raw_output, params)
    forks = [
        sum(int(m) for m in re.findall(rf"vmas={v} iteration=\d+ count=(\d+)", result.raw_output)) for v in (0, 20)
    ]
    assert operations == {0: {"fork": forks[0]}, 1: {"fork": forks[1]}}
    counters = boot_record(0, result, "native", "wall", bench, [], operations)["counters"]
    assert counters["operations"] == {"0.fork": forks[0], "1.fork": forks[1]}
    for n in (0, 1):
        # A fork faults in at least the pages the parent and child write (stack, COW), far fewer than thousands.
        per_fork = counters["perf_by_command"][f"{n}.page_faults"] / forks[n]
        assert 1 <= per_fork < 1000, (n, per_fork)
        assert counters["perf_by_command"][f"{n}.task_clock_ns"] > 0
