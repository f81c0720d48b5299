"""Kernel counters around benchmark commands: /proc/vmstat deltas.

A kernel developer explains a regression with the kernel's own counters
("more faults? more allocations?"), so every command a boot runs is
bracketed by two reads of /proc/vmstat: in the guest by init
(csrc/init.c, the KPERF-VMSTAT lines console.py reads), on this machine by
`kperf-runner bench`. A boot uploads the sum over its commands as
`{"vmstat": {name: delta}}` (docs/runner-protocol.md, "counters").

Hardware counters (instructions, cycles; perf.py and KPERF-PERF) go up
beside them as `{"perf": {name: count}}` where the machine can count them,
and per command with the operations the benchmark's output says that
command performed (per_command_counters), for counts per operation.

They are secondary data: stored and shown beside the verdicts, never
judged. Most fields are event counters that only grow (pgfault,
pgalloc_normal); the nr_* fields are gauges (nr_free_pages), and their delta
is how far the level moved across the command.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

VMSTAT = Path("/proc/vmstat")

# What init prints and the service stores: names of at most 64 characters
# that split cleanly on spaces and '='.
NAME_RE = r"[A-Za-z0-9_]{1,64}"
_LINE = re.compile(rf"(?P<name>{NAME_RE}) (?P<value>\d+)")


def parse_vmstat(text: str) -> dict[str, int]:
    """/proc/vmstat's "<name> <value>" lines; anything else is skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        match = _LINE.fullmatch(line.strip())
        if match:
            out[match["name"]] = int(match["value"])
    return out


def read_vmstat(path: Path = VMSTAT) -> dict[str, int] | None:
    """This machine's /proc/vmstat, or None where there is none (not Linux, no procfs)."""
    try:
        return parse_vmstat(path.read_text())
    except OSError:
        return None


def vmstat_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """after - before for the fields read both times, nonzero ones only (as init prints them)."""
    out = {}
    for name, value in after.items():
        if name in before and value != before[name]:
            out[name] = value - before[name]
    return out


def total(deltas: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The sum of per-command deltas; fields that sum to zero are left out."""
    out: dict[str, int] = {}
    for delta in deltas:
        for name, value in delta.items():
            out[name] = out.get(name, 0) + value
    return {name: value for name, value in out.items() if value != 0}


def per_command_counters(
    perf: Mapping[int, Mapping[str, int]], operations: Mapping[int, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """The per-operation sources of a boot's upload: each command's counts and the operations it performed.

    {"perf_by_command": {"<n>.<counter>": count}, "operations": {"<n>.<operation>": count}}
    for the commands with hardware (or software) counts: counter / operations
    of the same command n is the per-operation value the service shows
    (docs/runner-protocol.md). Operations of a command without counts would
    divide nothing and stay out; no counts at all give {}.
    """
    if not perf:
        return {}
    ops = {f"{n}.{name}": count for n, named in operations.items() if n in perf for name, count in named.items()}
    by_command = {f"{n}.{name}": count for n, counts in sorted(perf.items()) for name, count in counts.items()}
    return {"perf_by_command": by_command, **({"operations": ops} if ops else {})}


def boot_counters(vmstat: list[dict[str, int]], perf: list[dict[str, int]] | None = None) -> dict[str, dict[str, int]]:
    """A boot's "counters" upload from the readings of the commands that had them.

    No command with a reading (a kernel without /proc/vmstat) gives {}: no
    "vmstat" at all, which the service tells apart from "read, none moved".
    Hardware counters (perf.py) go in as "perf", summed the same way, and
    only where the machine could count them.
    """
    out = {"vmstat": total(vmstat)} if vmstat else {}
    if perf:
        out["perf"] = total(perf)
    return out
