"""Boot backends: how a runner gets a job's kernel running with the benchmarks.

A boot has two phases, because on bare metal it spans a reboot of the
machine the agent runs on:

- `start()` gets the boot going. Just before the point of no return it calls
  the agent's `commit(state, quiet_seconds)`: the agent persists the job in
  flight with the backend's `state` (what `resume()` needs, JSON) in its
  state directory, and tells the service it will be quiet that long.
- `resume(job, state)` gives the boot's outcome: a BootResult, or one of the
  failures below.

`qemu` runs the whole boot inside `start()` and keeps the outcome in memory;
`resume()` hands it over, and cannot after the agent itself restarted
(`CannotResume`). `kexec` jumps into the kernel under test inside `start()`
and never returns there; the agent started again on the machine's own
kernel calls `resume()`, which reads the outcome from pstore.
`boot()` is both phases in one call, for tests and `kperf-runner bench`.

Two outcomes are facts about the kernel under test, not about the runner,
and have their own exceptions: the kernel never got through the job
(`BootFailure`), or a benchmark command failed (`BenchmarkFailure`).
Anything else a backend raises is the runner's problem (an infrastructure
fault).
"""

from __future__ import annotations

import dataclasses
import re
import signal
import uuid
from abc import ABC
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..console import CommandRun, ConsoleRecord, command_counters, parse_console

# Called with new console text (possibly empty) at least once a second while
# a boot runs, so the caller can stream it and keep its lease alive.
ConsoleCallback = Callable[[str], None]
# Called by start() right before the boot begins: the backend's state for
# resume() (JSON-serialisable) and how many seconds the agent will be unable
# to call the service (0 when it stays up while the kernel runs).
CommitCallback = Callable[[dict[str, Any], float], None]


@dataclass(frozen=True)
class BootJob:
    """What one boot runs: argv lines using the backend's bindir, and the binaries."""

    commands: list[list[str]]
    binaries: dict[str, Path]  # name in bindir -> file on this host
    cmdline: str = ""  # appended to the backend's kernel command line
    thp: str = ""  # THP mode init sets (/kperf/thp in the initramfs); "": the kernel's default
    timeout: float = 600.0  # seconds for the whole boot, power-off included
    # Which clock the benchmarks' timers read (CLOCKS): "wall" is real time;
    # "instructions" is a guest clock that advances per executed instruction.
    clock: str = "wall"
    # The guest's CPUs: 0 is the backend's default. Only qemu has a say
    # (-smp); kexec boots the machine's own CPUs and ignores it.
    vcpus: int = 0
    # The guest's NUMA nodes: 0 is none declared (the kernel makes one).
    # Only qemu has a say (-numa, memory and CPUs split evenly); kexec boots
    # the machine's own topology and ignores it.
    numa_nodes: int = 0


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


class CannotResume(RuntimeError):
    """resume() has nothing to go on: the outcome of the boot is lost (an infrastructure fault)."""


# Switched off for every benchmark boot, because each moves numbers between
# two builds (or two boots) of code the benchmarks never run
# (docs/runners.md "The boot command line"; every backend puts it on the kernel under test's command line):
# - nokaslr: the kernel's own address, so a change that moves no hot code
#   does not move its cache and TLB footprint, and under the instruction
#   clock no address-dependent branch takes another path;
# - norandmaps: userspace ASLR (stack, mmap base, brk), which set the shape
#   of every benchmark's VMA tree;
# - randomize_kstack_offset=off: a random stack offset on every syscall;
# - page_alloc.shuffle=0: the page allocator's free-list shuffle at boot,
#   which sets the order in which pages come out;
# - random.trust_cpu=off, random.trust_bootloader=off: the entropy pool is
#   not seeded from RDRAND or a boot-loader seed, so on a given machine the
#   pool (and what draws on it: hash seeds, SLUB freelist randomisation)
#   is the same from boot to boot.
BENCHMARK_CMDLINE = " ".join(
    [
        "nokaslr",
        "norandmaps",
        "randomize_kstack_offset=off",
        "page_alloc.shuffle=0",
        "random.trust_cpu=off",
        "random.trust_bootloader=off",
    ]
)


# Under the instruction clock every boot of a build repeats the last, so the
# phase at which each command starts against the kernel's periodic work is
# fixed by the build, and an unrelated change that shifts it moves a metric
# with no boot noise to show it (docs/statistics.md, "A phase per boot").
# Each such boot gets a seed of its own: the test kernel's init sleeps a
# seeded 0-1 s before every command (csrc/init_tuning.h), so a side's boots
# sample the phases and their spread holds what the phase can do. The wall
# clock has that variation from the hardware and gets no seed.
PHASE_SEED_KEY = "kperf.phase_seed"


def with_phase_seed(job: BootJob, seed: int) -> BootJob:
    """`job` with its own phase seed on the command line, on the instruction clock.

    A command line that already names a seed (a job that asks for one phase,
    a bench that sets them) keeps it.
    """
    if job.clock != "instructions" or f"{PHASE_SEED_KEY}=" in job.cmdline:
        return job
    return dataclasses.replace(job, cmdline=f"{PHASE_SEED_KEY}={seed} {job.cmdline}".strip())


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

    def start(
        self,
        job: BootJob,
        kernel: Path,
        commit: CommitCallback,
        on_console: ConsoleCallback | None = None,
    ) -> dict[str, Any]:
        """Start one boot of kernel running job; the state resume() takes.

        This default is for backends whose boot ends within the call (they
        implement `run_boot()`): the boot runs here, and its outcome waits in
        this process for resume(). A failure may also be raised here.
        """
        commit({}, 0.0)
        result = self.run_boot(job, kernel, on_console)
        key = uuid.uuid4().hex
        self._outcomes[key] = result
        return {"outcome": key}

    def resume(self, job: BootJob, state: dict[str, Any]) -> BootResult:
        """The outcome of the boot start() began: BootResult, or BootFailure / BenchmarkFailure."""
        result = self._outcomes.pop(str(state.get("outcome")), None)
        if result is None:
            raise CannotResume(
                f"the {self.name} backend cannot pick up a boot started by an earlier run of the agent: "
                "the machine it ran on went away with it"
            )
        return result

    def release(self) -> None:
        """The outcome resume() gave is durably saved: let go of where it was read from.

        Until then it must stay there (kexec: pstore), so that an agent
        stopped in between (a power cut) reads it again. Nothing to do for a
        backend that keeps the outcome in memory.
        """
        return None

    def run_boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
        """One whole boot in one call, for backends that do not span a reboot."""
        if type(self).boot is not Backend.boot:
            # A backend written against the one-call interface (tests' stand-ins).
            return self.boot(job, kernel, on_console)
        raise NotImplementedError(f"the {self.name} backend implements neither run_boot() nor start()/resume()")

    def boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
        """Both phases in one call: boot kernel once, run job; BootFailure / BenchmarkFailure as above."""
        state = self.start(job, kernel, lambda _state, _quiet: None, on_console)
        return self.resume(job, state)

    @property
    def _outcomes(self) -> dict[str, BootResult]:
        # Created on first use: subclasses need not call Backend.__init__.
        outcomes: dict[str, BootResult] | None = self.__dict__.get("_kperf_outcomes")
        if outcomes is None:
            outcomes = self.__dict__["_kperf_outcomes"] = {}
        return outcomes

    def timeout(self, expected_seconds: float, commands: int, clock: str = "wall") -> float:
        """A whole boot's time limit for commands expected to run that long on `clock`."""
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
    "BENCHMARK_CMDLINE",
    "CLOCKS",
    "Backend",
    "BackendFailure",
    "BenchmarkFailure",
    "BootFailure",
    "BootJob",
    "BootResult",
    "CannotResume",
    "CommitCallback",
    "ConsoleCallback",
    "UnsupportedClock",
    "check_complete",
    "describe_incomplete_boot",
    "parse_boot",
    "with_phase_seed",
]
