"""Boot backends: how a runner gets a job's kernel running with the benchmarks.

A backend boots one kernel once per `boot()` call, runs the job's commands in
it and returns what the console said. Two outcomes are facts about the kernel
under test, not about the runner, and have their own exceptions: the kernel
never got through the job (`BootFailure`), or a benchmark command failed
(`BenchmarkFailure`). Anything else a backend raises is the runner's problem
(an infrastructure fault).

`qemu` is the only backend so far; `kexec` (bare metal: the agent resumes
from its state directory after the reboot) fits the same interface.
"""

from __future__ import annotations

import re
import signal
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..console import CommandRun, ConsoleRecord, command_counters, parse_console

# Called with new console text (possibly empty) at least once a second while
# a boot runs, so the caller can stream it and keep its lease alive.
ConsoleCallback = Callable[[str], None]


@dataclass(frozen=True)
class BootJob:
    """What one boot runs: argv lines using the backend's bindir, and the binaries."""

    commands: list[list[str]]
    binaries: dict[str, Path]  # name in bindir -> file on this host
    cmdline: str = ""  # appended to the backend's kernel command line
    timeout: float = 600.0  # seconds for the whole boot, power-off included
    # Which clock the benchmarks' timers read (CLOCKS): "wall" is real time;
    # "instructions" is a guest clock that advances per executed instruction.
    clock: str = "wall"


@dataclass
class BootResult:
    console: str
    environment: dict[str, Any]
    commands: list[CommandRun]
    seconds: float
    done: bool = True
    details: dict[str, Any] = field(default_factory=dict)  # backend specifics, e.g. accel

    @property
    def raw_output(self) -> str:
        return "".join(command.output for command in self.commands)

    @property
    def counters(self) -> dict[str, dict[str, int]]:
        """Kernel counters summed over the commands: {"vmstat": {name: delta}}, or {}."""
        return command_counters(self.commands)


class BackendFailure(Exception):
    """A failure with the console log that shows it."""

    def __init__(self, message: str, console: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.console = console


class BootFailure(BackendFailure):
    """The kernel did not boot or never finished the job (panic, hang, bad image)."""


class BenchmarkFailure(BackendFailure):
    """The kernel booted and a benchmark command failed."""


# The clocks a benchmark can be timed with. Numbers from two clocks are
# different metrics and are never compared (docs/benchmarks.md).
CLOCKS = ("instructions", "wall")


class UnsupportedClock(RuntimeError):
    """The job wants a clock this runner cannot give (an infrastructure fault)."""


class Backend(ABC):
    name: ClassVar[str]
    # Where the commands find the binaries (a guest path for qemu).
    bindir: ClassVar[str]

    def clocks(self) -> tuple[str, ...]:
        """The clocks this backend can time benchmarks with, as configured."""
        return ("wall",)

    def check_clock(self, clock: str) -> None:
        if clock not in CLOCKS:
            raise UnsupportedClock(f"unknown clock {clock!r}; kperf knows {', '.join(CLOCKS)}")
        if clock not in self.clocks():
            raise UnsupportedClock(
                f"the job wants the {clock} clock, which the {self.name} backend here cannot give "
                f"(it gives {', '.join(self.clocks())})"
            )

    @abstractmethod
    def boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
        """Boot kernel once, run job; BootFailure / BenchmarkFailure as above."""

    def timeout(self, expected_seconds: float, commands: int) -> float:
        """A whole boot's time limit for commands expected to run that long."""
        return 120.0 + 2.0 * expected_seconds + 5.0 * commands


_PANIC = re.compile(r"Kernel panic - not syncing: ?(?P<why>.*)")


def describe_incomplete_boot(record: ConsoleRecord, console: str, commands: list[list[str]]) -> str:
    """Why a boot ended without KPERF-DONE, as far as the console tells."""
    panic = _PANIC.search(console)
    running = next((cmd for cmd in record.commands if cmd.status is None), None)
    during = f" while {_describe_command(running.index, commands)} was running" if running else ""
    if panic:
        return f"kernel panic{during}: {panic['why'].strip()}"
    if record.errors:
        return f"kperf init failed: {'; '.join(record.errors)}"
    if running:
        return f"the console stopped{during} and init never printed KPERF-DONE"
    if record.environment.get("kernel_release") is None and not record.commands:
        last = _last_line(console)
        if not last:
            return "the kernel printed nothing on the console (not a bootable image for this arch?)"
        return f"init never ran; last console line: {last}"
    return f"init never printed KPERF-DONE; last console line: {_last_line(console)}"


def check_complete(record: ConsoleRecord, commands: list[list[str]], console: str) -> None:
    """Raise BenchmarkFailure for a failed or missing command of a finished boot."""
    failed = record.first_failure()
    if failed is not None:
        raise BenchmarkFailure(
            f"{_describe_command(failed.index, commands)} {describe_status(failed.status)}{_tail(failed.output)}",
            console,
        )
    if len(record.commands) != len(commands):
        raise BenchmarkFailure(
            f"init finished after {len(record.commands)} of {len(commands)} commands",
            console,
        )


def _describe_command(index: int, commands: list[list[str]]) -> str:
    """Command n (0-based on the console) as people count: "command 1 of 2 (argv)"."""
    argv = " ".join(commands[index]) if index < len(commands) else "?"
    return f"command {index + 1} of {len(commands)} ({argv})"


def describe_status(status: int | None) -> str:
    if status is None:
        return "never finished"
    if status > 128:
        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = f"signal {status - 128}"
        return f"was killed by {name}"
    return f"exited with status {status}"


def parse_boot(console: str, commands: list[list[str]]) -> ConsoleRecord:
    """The parsed console of a boot that printed KPERF-DONE, or BootFailure."""
    record = parse_console(console)
    if not record.done:
        raise BootFailure(describe_incomplete_boot(record, console, commands), console)
    check_complete(record, commands, console)
    return record


def _tail(output: str, lines: int = 3) -> str:
    kept = [line for line in output.splitlines() if line.strip()][-lines:]
    return (": " + " | ".join(kept)) if kept else ""


def _last_line(console: str) -> str:
    for line in reversed(console.splitlines()):
        if line.strip():
            return line.strip()
    return ""


__all__ = [
    "CLOCKS",
    "Backend",
    "BackendFailure",
    "BenchmarkFailure",
    "BootFailure",
    "BootJob",
    "BootResult",
    "ConsoleCallback",
    "UnsupportedClock",
    "check_complete",
    "describe_incomplete_boot",
    "parse_boot",
]
