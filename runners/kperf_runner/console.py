"""Read what kperf's init (csrc/init.c) printed on a serial console.

Markers, one per line (anything before "KPERF-" on the line is not part
of it: firmware leaves escape codes without a newline):

    KPERF-ENV <key>=<value>     a fact about the booted machine
    KPERF-BEGIN <n>             command n (0-based, /kperf/job order) starts
    KPERF-END <n> <status>      it ended: exit status, or 128 + signal
    KPERF-VMSTAT <n> <name>=<delta> ...
                                /proc/vmstat deltas across command n, after
                                its END; one or more lines (counters.py)
    KPERF-PERF <n> <name>=<count> ...
                                hardware counters across command n
                                (instructions, cycles), after its VMSTAT;
                                "KPERF-PERF <n> unsupported" without a PMU
    KPERF-DONE                  init finished the job and powers off
    KPERF-ERROR <what>          init itself failed and powers off

Every other line between BEGIN n and END n is command n's output (stdout and
stderr share the console); lines outside are the kernel's. A VMSTAT line
inside a command's output is the command's, not init's: init prints them
only between commands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .counters import NAME_RE, boot_counters

# The environment record sent with every boot (docs/runner-protocol.md).
ENVIRONMENT_KEYS = (
    "cpu_model",
    "cpus",
    "mem_total_kb",
    "kernel_cmdline",
    "kernel_release",
    "thp",
    "cpufreq_governor",
    "clocksource",
)
# The machine's tuning facts (boost, swap, swap_total_kb, numa_nodes, aslr, isolated_cpus,
# drop_caches, settle_ms, phase_seed, phase_span_us, perf_counters; csrc/init_tuning.h, init_memory.h)
# come in as printed: every init that tunes prints each, "absent" where the kernel lacks the setting.
_INTEGER_KEYS = ("cpus", "mem_total_kb", "swap_total_kb", "settle_ms", "phase_seed", "phase_span_us", "numa_nodes")
# Counts whose "absent" (the kernel lacks the feature) is kept as said.
_ABSENT_KEPT = ("numa_nodes",)

_ENV = re.compile(r"KPERF-ENV (?P<key>[a-z_]+)=(?P<value>.*)")
_BEGIN = re.compile(r"KPERF-BEGIN (?P<n>\d+)")
_END = re.compile(r"KPERF-END (?P<n>\d+) (?P<status>-?\d+)")
_ERROR = re.compile(r"KPERF-ERROR (?P<what>.*)")
# A whole line or nothing: a line a kernel message cut short does not match,
# so a counter is dropped rather than read with half its digits.
_VMSTAT = re.compile(rf"KPERF-VMSTAT (?P<n>\d+)(?P<fields>(?: {NAME_RE}=-?\d+)*)")
_PERF = re.compile(rf"KPERF-PERF (?P<n>\d+)(?: unsupported|(?P<fields>(?: {NAME_RE}=\d+)*))")


@dataclass
class CommandRun:
    index: int
    output: str = ""
    status: int | None = None  # None: BEGIN seen, END never came
    # /proc/vmstat deltas across the command; None: init printed none (no /proc/vmstat)
    vmstat: dict[str, int] | None = None
    # Hardware counters across the command; None: unsupported or not printed
    perf: dict[str, int] | None = None


@dataclass
class ConsoleRecord:
    environment: dict[str, Any] = field(default_factory=dict)
    commands: list[CommandRun] = field(default_factory=list)
    done: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def raw_output(self) -> str:
        """All commands' output in order: what the benchmark parser reads."""
        return "".join(command.output for command in self.commands)

    def counters(self) -> dict[str, dict[str, int]]:
        """The boot's kernel counters, summed over its commands (docs/runner-protocol.md)."""
        return command_counters(self.commands)

    def first_failure(self) -> CommandRun | None:
        for command in self.commands:
            if command.status != 0:
                return command
        return None


def normalize(text: str) -> str:
    """Serial consoles end lines with CR LF; keep plain newlines.

    Dropping every CR (not just CR LF pairs) gives the same result whether
    the text arrives whole or in chunks split between CR and LF.
    """
    return text.replace("\r", "")


def parse_console(text: str) -> ConsoleRecord:
    record = ConsoleRecord(environment={key: None for key in ENVIRONMENT_KEYS})
    current: CommandRun | None = None
    output: list[str] = []  # the current command's lines so far
    # A final partial line (no newline yet) still counts; the empty string
    # after a final newline does not.
    lines = normalize(text).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        start = line.find("KPERF-")
        marker = line[start:] if start >= 0 else ""
        env, begin, end = _ENV.fullmatch(marker), _BEGIN.fullmatch(marker), _END.fullmatch(marker)
        error, vmstat = _ERROR.fullmatch(marker), _VMSTAT.fullmatch(marker)
        perf = _PERF.fullmatch(marker)
        if end and (current is None or int(end["n"]) != current.index):
            end = None  # an END that closes nothing is not ours
        # Init prints VMSTAT between commands; inside one it is the command's output.
        if vmstat and current is None and _add_vmstat(record, vmstat):
            continue
        if perf and current is None and _add_perf(record, perf):
            continue
        if not (env or begin or end or error or marker == "KPERF-DONE"):
            # Output, kernel noise, or an unknown marker: keep it, never lose it.
            if current is not None:
                output.append(line + "\n")
            continue
        if start > 0 and current is not None:
            # Firmware escape codes or a kernel message without its newline
            # can precede a marker on the same line; they are not the marker.
            output.append(line[:start] + "\n")
        if env:
            record.environment[env["key"]] = _env_value(env["key"], env["value"])
        elif begin:
            current = CommandRun(int(begin["n"]))
            record.commands.append(current)
            output = []
        elif end and current is not None:
            current.output = "".join(output)
            current.status = int(end["status"])
            current = None
        elif error:
            record.errors.append(error["what"])
        else:
            record.done = True
    if current is not None:
        current.output = "".join(output)
    return record


def _add_vmstat(record: ConsoleRecord, match: re.Match[str]) -> bool:
    """Add a VMSTAT line's deltas to its command (the last to run with that index)."""
    index = int(match["n"])
    command = next((c for c in reversed(record.commands) if c.index == index), None)
    if command is None:
        return False
    deltas = command.vmstat if command.vmstat is not None else {}
    for item in match["fields"].split():
        name, _, value = item.partition("=")
        deltas[name] = deltas.get(name, 0) + int(value)
    command.vmstat = deltas
    return True


def _add_perf(record: ConsoleRecord, match: re.Match[str]) -> bool:
    """A PERF line's counts for its command; "unsupported" (no fields group) leaves perf None."""
    index = int(match["n"])
    command = next((c for c in reversed(record.commands) if c.index == index), None)
    if command is None:
        return False
    if match["fields"] is not None:
        command.perf = {name: int(value) for name, _, value in (f.partition("=") for f in match["fields"].split())}
    return True


def command_counters(commands: list[CommandRun]) -> dict[str, dict[str, int]]:
    """{"vmstat": {name: total delta}, "perf": {name: total}} over the commands that reported them, or {}."""
    return boot_counters(
        [c.vmstat for c in commands if c.vmstat is not None],
        [c.perf for c in commands if c.perf is not None],
    )


def _env_value(key: str, value: str) -> Any:
    value = value.strip()
    if key in _INTEGER_KEYS:
        try:
            return int(value)
        except ValueError:
            return "absent" if key in _ABSENT_KEPT and value == "absent" else None
    return value
