"""Hardware counters per operation: instructions, cycles (or the software
events) of a benchmark command divided by the operations its output says it
performed (docs/machine-tuning.md, "Per operation").

A boot uploads them per command (docs/runner-protocol.md, "counters"):
`perf_by_command` {"<n>.<counter>": count} and `operations`
{"<n>.<operation>": count}. Per side of a comparison and per command, the
value is the sum of the counter over the boots divided by the sum of their
operations, so a boot that did more forks weighs more, as in one long run.

Secondary data: never judged, no part of any verdict, and only ever set
beside values timed with the same clock (a comparison has one). A command
that performs several kinds of operation (aim9's one command runs four
tests) has no single per-operation value and is only named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from typing_extensions import TypedDict

from kperf_runner import benchmarks as registry

# (machine class id, benchmark, grid, clock, side), as in presenters.
SideKey = tuple[int, str, str, str, str]
# What a count of each counter is, for the units: "instructions/fork".
UNITS = {"instructions": "instructions", "cycles": "cycles", "task_clock_ns": "ns", "page_faults": "page faults"}
IPC = "instructions_per_cycle"


@dataclass
class _Command:
    """One command of one side, summed over the boots that counted it."""

    operation: str
    operations: int = 0
    counters: dict[str, float] = field(default_factory=dict)


@dataclass
class Side:
    """One side of a comparison: its commands summed over the boots that counted them, and the job's params."""

    boots: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    commands: dict[int, _Command] = field(default_factory=dict)
    mixed: dict[int, list[str]] = field(default_factory=dict)  # n -> its operation names


def _split(values: Any) -> dict[int, dict[str, float]]:
    """{"<n>.<name>": count} as {n: {name: count}}; the API checked the names."""
    out: dict[int, dict[str, float]] = {}
    if not isinstance(values, dict):
        return out
    for key, value in values.items():
        n, _, name = str(key).partition(".")
        if n.isdigit() and name:
            out.setdefault(int(n), {})[name] = float(value)
    return out


def add_boot(sides: dict[SideKey, Side], key: SideKey, params: Any, counters: Any) -> None:
    """Add one boot's per-command counts to its side (presenters reads every boot's counters once)."""
    if not isinstance(counters, dict) or "operations" not in counters:
        return  # a runner older than operations, or a boot nothing counted
    counts, operations = _split(counters.get("perf_by_command")), _split(counters.get("operations"))
    acc = sides.setdefault(key, Side(params=params if isinstance(params, dict) else {}))
    counted = False
    for n, named in operations.items():
        if n not in counts:
            continue
        if len(named) != 1:
            acc.mixed[n] = sorted(named)
            continue
        [(operation, number)] = named.items()
        command = acc.commands.setdefault(n, _Command(operation))
        if command.operation != operation or number <= 0:
            continue  # another benchmark version's command n: not the same work
        command.operations += int(number)
        for name, value in counts[n].items():
            command.counters[name] = command.counters.get(name, 0.0) + value
        counted = True
    acc.boots += counted


def _labels(benchmark: str, params: dict[str, Any]) -> list[str]:
    try:
        return registry.get_benchmark(benchmark).command_labels(params)
    except (ValueError, KeyError, TypeError):
        return []  # a benchmark or parameters this version no longer knows: "command n"


def _values(command: _Command | None) -> dict[str, float]:
    """Each counter per operation, and instructions per cycle where both were counted."""
    if command is None or not command.operations:
        return {}
    out = {name: value / command.operations for name, value in command.counters.items()}
    if command.counters.get("instructions") and command.counters.get("cycles"):
        out[IPC] = command.counters["instructions"] / command.counters["cycles"]
    return out


class PerOpRow(TypedDict):
    """One counter of one command, per operation on each side (None: that side did not count it)."""

    command: int
    label: str
    operation: str
    counter: str
    unit: str
    base: float | None
    head: float | None
    change_pct: float | None
    base_operations: int
    head_operations: int


class MixedCommand(TypedDict):
    """A command that performs several kinds of operation, so it has no per-operation value."""

    command: int
    label: str
    operations: list[str]


def rows(base: Side | None, head: Side | None, benchmark: str) -> list[PerOpRow]:
    """Per command and counter: base and head per operation and the plain change in percent, no verdict."""
    sides = {"base": base or Side(), "head": head or Side()}
    labels = _labels(benchmark, sides["head"].params or sides["base"].params)
    out: list[PerOpRow] = []
    for n in sorted(sides["base"].commands.keys() | sides["head"].commands.keys()):
        commands = {s: side.commands.get(n) for s, side in sides.items()}
        operation = next(c.operation for c in commands.values() if c is not None)
        values = {s: _values(c) for s, c in commands.items()}
        for name in sorted(values["base"].keys() | values["head"].keys(), key=lambda k: (k == IPC, k)):
            b, h = values["base"].get(name), values["head"].get(name)
            unit = "instructions/cycle" if name == IPC else f"{UNITS.get(name, name)}/{operation}"
            out.append(
                {
                    "command": n,
                    "label": labels[n] if n < len(labels) else f"command {n}",
                    "operation": operation,
                    "counter": name,
                    "unit": unit,
                    "base": b,
                    "head": h,
                    "change_pct": (h - b) / abs(b) * 100 if b and h is not None else None,
                    "base_operations": commands["base"].operations if commands["base"] else 0,
                    "head_operations": commands["head"].operations if commands["head"] else 0,
                }
            )
    return out


def mixed(base: Side | None, head: Side | None, benchmark: str) -> list[MixedCommand]:
    """Commands with several kinds of operation (no per-operation value), named with their operations."""
    found: dict[int, list[str]] = {}
    for side in (base, head):
        found.update(side.mixed if side else {})
    params = (head or base or Side()).params
    labels = _labels(benchmark, params)
    return [
        {"command": n, "label": labels[n] if n < len(labels) else f"command {n}", "operations": names}
        for n, names in sorted(found.items())
    ]
