"""Reading init's console markers, and init itself run as PID 1 of a namespace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from namespace_init import run_init

from kperf_runner.backends import BenchmarkFailure, BootFailure, parse_boot
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.console import parse_console
from kperf_runner.counters import boot_counters, parse_vmstat, read_vmstat, vmstat_delta
from kperf_runner.initramfs import GUEST_BINDIR

CONSOLE = """\
[    0.000000] Linux version 6.1.0 (kernel noise before init)\r
KPERF-ENV cpu_model=QEMU Virtual CPU version 2.5+\r
KPERF-ENV cpus=2\r
KPERF-ENV mem_total_kb=496000\r
KPERF-ENV kernel_cmdline=console=ttyS0 panic=-1 quiet loglevel=3\r
KPERF-ENV kernel_release=6.1.0\r
KPERF-ENV thp=always [madvise] never\r
KPERF-ENV clocksource=tsc\r
KPERF-BEGIN 0\r
COUNT|10|1|lps\r
spawn vmas=0 iteration=0 count=10 elapsed=0.100000\r
Process Creation                                126.0        100.0      7.9\r
KPERF-END 0 0\r
KPERF-BEGIN 1\r
spawn vmas=5 iteration=0 count=5 elapsed=0.100000\r
Process Creation                                126.0         50.0      4.0\r
KPERF-END 1 0\r
KPERF-DONE\r
[    3.000000] reboot: Power down\r
"""
COMMANDS = [["/kperf/bin/spawn", "-v", "0"], ["/kperf/bin/spawn", "-v", "5"]]


def test_environment_commands_and_done_are_read() -> None:
    record = parse_console(CONSOLE)
    assert record.done and not record.errors
    assert record.environment == {
        "cpu_model": "QEMU Virtual CPU version 2.5+",
        "cpus": 2,
        "mem_total_kb": 496000,
        "kernel_cmdline": "console=ttyS0 panic=-1 quiet loglevel=3",
        "kernel_release": "6.1.0",
        "thp": "always [madvise] never",
        "cpufreq_governor": None,
        "clocksource": "tsc",
    }
    assert [(c.index, c.status) for c in record.commands] == [(0, 0), (1, 0)]
    assert record.commands[0].output.splitlines() == [
        "COUNT|10|1|lps",
        "spawn vmas=0 iteration=0 count=10 elapsed=0.100000",
        "Process Creation                                126.0        100.0      7.9",
    ]
    assert "kernel noise" not in record.raw_output


def test_a_finished_boot_parses_into_samples() -> None:
    record = parse_boot(CONSOLE, COMMANDS)
    params = resolve_params("spawn", "quick", {"extra_vmas": [0, 5], "iterations": 1})
    values = [s.value for s in get_benchmark("spawn").parse(record.raw_output, params)]
    assert values == pytest.approx([100.0, 50.0])


def test_a_failed_command_is_a_benchmark_failure_with_its_last_lines() -> None:
    console = CONSOLE.replace("KPERF-END 1 0", "spawn: fork failed after 3 forks\nKPERF-END 1 1")
    with pytest.raises(BenchmarkFailure) as failure:
        parse_boot(console, COMMANDS)
    assert "command 2 of 2 (/kperf/bin/spawn -v 5) exited with status 1" in failure.value.message
    assert "fork failed after 3 forks" in failure.value.message
    assert failure.value.console == console


def test_a_command_killed_by_a_signal_is_named() -> None:
    console = CONSOLE.replace("KPERF-END 1 0", "KPERF-END 1 139")
    with pytest.raises(BenchmarkFailure, match="was killed by SIGSEGV"):
        parse_boot(console, COMMANDS)


def test_a_panic_mid_benchmark_is_a_boot_failure() -> None:
    console = CONSOLE.split("KPERF-END 1 0")[0] + (
        "[    2.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b\n"
    )
    with pytest.raises(BootFailure) as failure:
        parse_boot(console, COMMANDS)
    assert failure.value.message == (
        "kernel panic while command 2 of 2 (/kperf/bin/spawn -v 5) was running: "
        "Attempted to kill init! exitcode=0x0000000b"
    )


def test_init_errors_and_silence_are_boot_failures() -> None:
    with pytest.raises(BootFailure, match="kperf init failed: open /kperf/job: No such file"):
        parse_boot(
            "KPERF-ENV cpus=1\nKPERF-ERROR open /kperf/job: No such file or directory\n",
            [],
        )
    with pytest.raises(BootFailure, match="the kernel printed nothing"):
        parse_boot("", COMMANDS)


def test_chunks_split_anywhere_give_the_same_record() -> None:
    whole = parse_console(CONSOLE)
    pieces = "".join(CONSOLE[i : i + 7] for i in range(0, len(CONSOLE), 7))
    assert parse_console(pieces) == whole


# -- init.c as PID 1 of a PID and mount namespace (no kernel needed) ---------


def _run_init(tmp_path: Path, init: Path, binaries: dict[str, Path], commands: list[list[str]]) -> str:
    return run_init(tmp_path / "root", init, binaries, commands).stdout.decode("utf-8", "replace")


def test_init_reports_the_environment_and_runs_the_job(tmp_path: Path, init_binary: Path, spawn_binary: Path) -> None:
    params = resolve_params("spawn", "quick", {"duration": 0.1, "iterations": 2, "extra_vmas": "0,20"})
    commands = get_benchmark("spawn").command(params, GUEST_BINDIR)
    console = _run_init(tmp_path, init_binary, {"spawn": spawn_binary}, commands)
    record = parse_boot(console, commands)
    assert record.environment["cpus"] >= 1
    assert record.environment["mem_total_kb"] > 0
    assert record.environment["kernel_release"] == os.uname().release
    samples = get_benchmark("spawn").parse(record.raw_output, params)
    assert len(samples) == 4 and all(s.value > 0 for s in samples)


def test_init_stops_at_the_first_failing_command(tmp_path: Path, init_binary: Path, spawn_binary: Path) -> None:
    commands = [["/kperf/bin/spawn", "-t", "0"], ["/kperf/bin/spawn", "-t", "0.1"]]
    console = _run_init(tmp_path, init_binary, {"spawn": spawn_binary}, commands)
    assert "KPERF-BEGIN 1" not in console
    with pytest.raises(
        BenchmarkFailure,
        match=r"command 1 of 2 .* exited with status 1: spawn: -t wants",
    ):
        parse_boot(console, commands)


def test_init_reports_a_command_it_cannot_execute(tmp_path: Path, init_binary: Path) -> None:
    commands = [["/kperf/bin/missing", "-x"]]
    console = _run_init(tmp_path, init_binary, {}, commands)
    with pytest.raises(
        BenchmarkFailure,
        match="exited with status 127: kperf-init: cannot execute /kperf/bin/missing",
    ):
        parse_boot(console, commands)


def test_a_marker_after_firmware_escape_codes_on_the_same_line_still_counts() -> None:
    console = "Booting from ROM..c\x1b[?7l\x1b[2JKPERF-ENV cpu_model=QEMU Virtual CPU\n" + CONSOLE
    assert parse_console(console).environment["cpu_model"] == "QEMU Virtual CPU version 2.5+"
    record = parse_console("Booting..\x1b[2JKPERF-ENV cpu_model=QEMU Virtual CPU\nKPERF-DONE\n")
    assert record.environment["cpu_model"] == "QEMU Virtual CPU"


def test_output_that_merely_mentions_a_marker_stays_output() -> None:
    console = CONSOLE.replace("COUNT|10|1|lps", "see KPERF-STUFF here\nKPERF-END 5 0")
    record = parse_console(console)
    assert record.commands[0].output.startswith("see KPERF-STUFF here\nKPERF-END 5 0\n")
    assert record.commands[0].status == 0


# -- kernel counters: /proc/vmstat deltas after each command's END -------------

COUNTED = (
    CONSOLE.replace(
        "KPERF-END 0 0\r\n",
        "KPERF-END 0 0\r\nKPERF-VMSTAT 0 nr_free_pages=-37 pgfault=1200\r\nKPERF-VMSTAT 0 pgalloc_normal=640\r\n",
    )
    # A kernel message in front of the marker is not part of it.
    .replace("KPERF-END 1 0\r\n", "KPERF-END 1 0\r\n[    2.9] hello KPERF-VMSTAT 1 nr_free_pages=37 pgfault=800\r\n")
)


def test_vmstat_lines_are_each_commands_deltas_and_the_boot_sums_them() -> None:
    record = parse_boot(COUNTED, COMMANDS)
    assert record.commands[0].vmstat == {"nr_free_pages": -37, "pgfault": 1200, "pgalloc_normal": 640}
    assert record.commands[1].vmstat == {"nr_free_pages": 37, "pgfault": 800}
    # A level that went down and back up moved nothing over the boot.
    assert record.counters() == {"vmstat": {"pgfault": 2000, "pgalloc_normal": 640}}
    # The benchmark's parser sees exactly what it saw without counters.
    assert record.raw_output == parse_console(CONSOLE).raw_output
    pieces = "".join(COUNTED[i : i + 5] for i in range(0, len(COUNTED), 5))
    assert parse_console(pieces) == record


def test_no_vmstat_line_is_no_counters_and_an_empty_one_is_nothing_moved() -> None:
    assert parse_console(CONSOLE).counters() == {}
    assert all(c.vmstat is None for c in parse_console(CONSOLE).commands)
    quiet = CONSOLE.replace("KPERF-END 1 0\r\n", "KPERF-END 1 0\r\nKPERF-VMSTAT 1\r\n")
    record = parse_console(quiet)
    assert record.commands[1].vmstat == {} and record.counters() == {"vmstat": {}}


def test_vmstat_lines_that_are_cut_inside_output_or_for_no_command_are_not_counters() -> None:
    console = (
        CONSOLE.replace("COUNT|10|1|lps", "KPERF-VMSTAT 0 pgfault=5")
        # Cut by a kernel message, a name with a space, a command that never ran.
        .replace(
            "KPERF-END 1 0\r\n",
            "KPERF-END 1 0\r\nKPERF-VMSTAT 1 pgfault=12[    3.1] ata1: link down\r\n"
            "KPERF-VMSTAT 1 bad name=3\r\nKPERF-VMSTAT 7 pgfault=9\r\n",
        )
    )
    record = parse_console(console)
    # Inside a command's output it is the command's output.
    assert record.commands[0].output.startswith("KPERF-VMSTAT 0 pgfault=5\n")
    assert record.commands[0].vmstat is None and record.commands[1].vmstat is None
    assert record.counters() == {}


def test_counter_helpers_read_and_subtract_vmstat_as_init_does() -> None:
    before = parse_vmstat("nr_free_pages 1000\npgfault 50\nweird line here\npgfree 7\n")
    assert before == {"nr_free_pages": 1000, "pgfault": 50, "pgfree": 7}
    after = {"nr_free_pages": 990, "pgfault": 75, "pgfree": 7, "nr_new": 3}
    # Fields read only once have no delta; unmoved ones are left out.
    assert vmstat_delta(before, after) == {"nr_free_pages": -10, "pgfault": 25}
    assert boot_counters([{"pgfault": 25, "nr_free_pages": -10}, {"pgfault": 5, "nr_free_pages": 10}]) == {
        "vmstat": {"pgfault": 30}
    }
    assert boot_counters([]) == {}
    host = read_vmstat()
    assert host is None or "nr_free_pages" in host
    assert read_vmstat(Path("/nonexistent/vmstat")) is None


def test_init_reports_vmstat_deltas_after_each_command(tmp_path: Path, init_binary: Path, spawn_binary: Path) -> None:
    if not Path("/proc/vmstat").is_file():
        pytest.skip("this kernel has no /proc/vmstat")
    commands = [["/kperf/bin/spawn", "-t", "0.05", "-i", "1"], ["/kperf/bin/spawn", "-t", "0.05", "-i", "1"]]
    console = _run_init(tmp_path, init_binary, {"spawn": spawn_binary}, commands)
    record = parse_boot(console, commands)
    lines = console.splitlines()
    for n in (0, 1):
        # Right after the command's END, never inside its output.
        assert lines[lines.index(f"KPERF-END {n} 0") + 1].startswith(f"KPERF-VMSTAT {n}")
        vmstat = record.commands[n].vmstat
        assert vmstat is not None and vmstat.get("pgfault", 0) > 0, vmstat
    assert record.counters()["vmstat"]["pgfault"] > 0
    assert "KPERF-VMSTAT" not in record.raw_output
