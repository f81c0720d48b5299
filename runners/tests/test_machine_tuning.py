"""Machine tuning and hardware counters: init's KPERF-ENV facts and KPERF-PERF
lines (csrc/init_tuning.h), their parsing, and the native bench's counters (perf.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from namespace_init import run_init

from kperf_runner.backends import BootJob, parse_boot
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.console import parse_console
from kperf_runner.initramfs import GUEST_BINDIR
from kperf_runner.perf import SOFTWARE, CommandCounters
from kperf_runner.toolchain import compile_all

TUNING_FACTS = (
    "cpufreq_governor",
    "boost",
    "thp",
    "swap",
    "swap_total_kb",
    "numa_nodes",
    "aslr",
    "isolated_cpus",
    "drop_caches",
    "settle_ms",
    "phase_span_us",
)
MASK64 = (1 << 64) - 1


def _phase_us(seed: int, n: int, span: int) -> int:
    """init's seeded phase for command n (csrc/init_tuning.h, splitmix64), written again from its definition."""
    x = (seed * 1000003 + n + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return (x ^ (x >> 31)) % span


def _pmu_counts() -> bool:
    """Whether this machine counts instructions at all (most virtual machines do not)."""
    return CommandCounters().fds != []


def _run_init(tmp_path: Path, init: Path, spawn: Path, commands: list[list[str]], extra: dict[str, str]) -> str:
    """init as PID 1 of a PID and mount namespace, with extra files under /kperf."""
    run = run_init(tmp_path / "root", init, {"spawn": spawn}, commands, extra=extra)
    return run.stdout.decode("utf-8", "replace")


def _spawn_commands() -> list[list[str]]:
    params = resolve_params("spawn", "quick", {"duration": 0.1, "iterations": 1, "extra_vmas": "0,20"})
    return get_benchmark("spawn").command(params, GUEST_BINDIR)


def test_init_records_every_tuning_fact_and_counts_or_says_unsupported(
    tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> None:
    commands = _spawn_commands()
    console = _run_init(tmp_path, init_binary, spawn_binary, commands, {})
    record = parse_boot(console, commands)
    env = record.environment
    # Inside another system init reads the machine-wide settings and changes none.
    assert env["tuning"] == "not applied (init is not the machine's own PID 1)"
    for fact in TUNING_FACTS:
        assert env[fact] not in (None, ""), f"{fact} missing from {console}"
    assert env["swap_total_kb"] == int(
        next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("SwapTotal"))
    )
    assert env["aslr"] == Path("/proc/sys/kernel/randomize_va_space").read_text().strip()
    # The host's own swap stays as it is; its NUMA nodes are counted as they are.
    assert env["swap"].startswith(("none (", "not set up ("))
    nodes = Path("/sys/devices/system/node")
    assert env["numa_nodes"] == (len(list(nodes.glob("node[0-9]*"))) if nodes.is_dir() else "absent")
    isolated = Path("/sys/devices/system/cpu/isolated").read_text().strip()
    assert env["isolated_cpus"] == (isolated or "none")
    assert env["drop_caches"] == "before every command"
    assert env["settle_ms"] == 100  # the default: no kperf.settle_ms= on this machine's command line
    # No kperf.phase_seed= either: no extra sleep, as before phases existed.
    assert env["phase_span_us"] == 0 and "KPERF-PHASE" not in console
    assert "KPERF-PERF 1 " in console
    if _pmu_counts():
        assert env["perf_counters"] == "instructions,cycles user+kernel"
        assert all(c.perf and c.perf["instructions"] > 0 and c.perf["cycles"] > 0 for c in record.commands)
        assert record.counters()["perf"]["instructions"] > 0
    else:
        assert env["perf_counters"].startswith("unsupported (")
        assert console.count("KPERF-PERF 0 unsupported") == 1
        assert all(c.perf is None for c in record.commands)
        assert "perf" not in record.counters() and "vmstat" in record.counters()


def test_init_counts_each_command_and_its_children_from_exec_on(
    tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> None:
    # Software events go through the same perf_event_open, inherit and
    # enable_on_exec as the hardware ones, on machines without a PMU too.
    commands = _spawn_commands()
    console = _run_init(tmp_path, init_binary, spawn_binary, commands, {"perf": "software\n"})
    record = parse_boot(console, commands)
    assert record.environment["perf_counters"] == "task_clock_ns,page_faults user+kernel"
    assert [c.status for c in record.commands] == [0, 0]
    for command in record.commands:
        assert command.perf is not None
        # 0.1 s of forking: the children's CPU time counts, and fork faults pages.
        assert command.perf["task_clock_ns"] > 20_000_000, console
        assert command.perf["page_faults"] > 100
    total = record.counters()["perf"]
    assert total["page_faults"] == sum(c.perf["page_faults"] for c in record.commands if c.perf)


def test_a_requested_thp_mode_is_recorded_with_the_mode_in_force(
    tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> None:
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    commands = _spawn_commands()[:1]
    console = _run_init(tmp_path, init_binary, spawn_binary, commands, {"thp": "never\n"})
    env = parse_console(console).environment
    assert env["thp_requested"] == "never"
    # Not applied inside another system: the mode in force is the host's, recorded as it is.
    assert env["thp"] == (thp.read_text().strip() if thp.exists() else "absent")


def test_perf_lines_are_each_commands_counts_and_unsupported_is_none() -> None:
    record = parse_console(
        "KPERF-BEGIN 0\nKPERF-PERF 0 instructions=5 cycles=1\nKPERF-END 0 0\n"
        "KPERF-PERF 0 instructions=100 cycles=300\n"
        "KPERF-BEGIN 1\nKPERF-END 1 0\nKPERF-PERF 1 instructions=20 cycles=30\n"
        "KPERF-BEGIN 2\nKPERF-END 2 0\nKPERF-PERF 2 unsupported\n"
        "KPERF-PERF 7 instructions=1\nKPERF-DONE\n"
    )
    # Inside a command's output a PERF line is the command's, not init's.
    assert record.commands[0].output == "KPERF-PERF 0 instructions=5 cycles=1\n"
    assert [c.perf for c in record.commands] == [
        {"instructions": 100, "cycles": 300},
        {"instructions": 20, "cycles": 30},
        None,
    ]
    assert record.counters() == {"perf": {"instructions": 120, "cycles": 330}}


def test_native_counters_follow_the_command_and_leave_this_process_out() -> None:
    counters = CommandCounters(SOFTWARE)
    assert counters.description == "task_clock_ns,page_faults user+kernel"
    sum(range(3_000_000))  # this process's own work: not counted
    subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], check=True)
    counts = counters.read()
    assert counts is not None and counts["page_faults"] > 100
    # A Python start and that loop: tens of milliseconds, not this process's lifetime.
    assert 1_000_000 < counts["task_clock_ns"] < 5_000_000_000
    idle = CommandCounters(SOFTWARE)
    sum(range(3_000_000))
    assert idle.read() == {}


def test_bench_records_hardware_counters_or_why_not(runner_state: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kperf_runner.cli",
            "bench",
            "spawn",
            "--json",
            "--state-dir",
            str(runner_state),
            "--set",
            "duration=0.1",
            "--set",
            "iterations=1",
            "--set",
            "extra_vmas=0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    if _pmu_counts():
        assert document["perf_counters"] == "instructions,cycles user+kernel"
        assert document["counters"]["perf"]["instructions"] > 0
    else:
        assert document["perf_counters"].startswith("unsupported (")
        assert "perf" not in document["counters"]


@pytest.mark.kernel
def test_a_qemu_boot_is_tuned_and_records_it(runner_state: Path, x86_64_kernel: Any) -> None:
    """The fixture kernel under TCG: PID 1 of a machine of its own applies the
    tuning, records every fact, and says why there are no hardware counts."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("needs qemu-system-x86_64 (apt-get install qemu-system-x86)")
    assert x86_64_kernel.ok, x86_64_kernel.error
    spawn = get_benchmark("spawn")
    params = resolve_params("spawn", "quick", {"duration": 0.05, "iterations": 1, "extra_vmas": "0"})
    commands = spawn.command(params, QemuBackend.bindir)
    # kperf.settle_ms= sets the pause after dropping the caches (docs/machine-tuning.md).
    job = BootJob(
        commands,
        compile_all(spawn.sources(), "x86_64", runner_state),
        timeout=300,
        clock="instructions",
        cmdline="kperf.settle_ms=250 kperf.phase_seed=4242 kperf.phase_span_us=4000",
    )
    result = QemuBackend("x86_64", runner_state, accel="tcg").boot(job, x86_64_kernel.artifacts["kernel"])
    env = result.environment
    assert "tuning" not in env  # applied, not merely read
    for fact in TUNING_FACTS:
        assert env[fact] not in (None, ""), (fact, result.console)
    # QEMU's virtual CPU has no cpufreq and no boost: absent, not invented.
    assert env["cpufreq_governor"] == "absent" and env["boost"] == "absent"
    assert env["swap_total_kb"] == 0 and env["aslr"] == "0"  # no swap; norandmaps
    # The tiny profile has neither zram nor NUMA: said, not invented.
    assert env["swap"] == "none (no zram in this kernel)" and env["numa_nodes"] == "absent"
    assert env["drop_caches"] == "before every command" and env["settle_ms"] == 250
    # The seeded phase: each command waited what the seed gives it, within one 4 ms tick.
    assert env["phase_seed"] == 4242 and env["phase_span_us"] == 4000
    phases = [line.split()[1:] for line in result.console.splitlines() if line.startswith("KPERF-PHASE ")]
    assert len(phases) == len(commands), result.console
    assert phases == [[n, str(_phase_us(4242, int(n), 4000))] for n, _ in phases]
    assert env["perf_counters"].startswith("unsupported (")
    assert "KPERF-PERF 0 unsupported" in result.console and "KPERF-PERF" not in result.raw_output
    assert "perf" not in result.counters
