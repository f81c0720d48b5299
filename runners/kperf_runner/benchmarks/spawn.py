"""spawn: UnixBench's fork() test with extra VMAs in the parent (csrc/spawn.c)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kperf_runner.benchmarks.base import (
    Benchmark,
    Grid,
    Metric,
    MmtestsRuns,
    Operations,
    Param,
    Sample,
    fmt_number,
)

_SPAWN_LINE = re.compile(
    r"spawn vmas=(?P<vmas>\d+) iteration=(?P<iteration>\d+) "
    r"count=(?P<count>\d+) elapsed=(?P<elapsed>\d+\.\d+)"
)
# UnixBench's index-table row (Run, logIndexCat: "%-40s %12.1f %12.1f %8.1f"),
# the only line mmtests' ExtractUnixbenchcommon.pm reads from a spawn log.
_INDEX_ROW = re.compile(r"Process Creation +(?P<baseline>[\d.]+) +(?P<result>[\d.]+) +(?P<index>[\d.]+)")
# UnixBench's baseline for spawn (pgms/index.base: "spawn|20|lps|126|126|1").
UNIXBENCH_SPAWN_BASELINE = 126.0


@dataclass
class _Pass:
    """One iteration: one UnixBench pass (a COUNT line) and its index-table row."""

    count: int
    elapsed: float
    lines: list[str]  # its COUNT line, result line and index row, as printed

    @property
    def rate(self) -> float:
        """Forks per second: kperf's sample."""
        return self.count / self.elapsed


class Spawn(Benchmark):
    name = "spawn"
    description = (
        "UnixBench spawn: fork(), the child exits at once, the parent waits; "
        "forks per second with extra VMAs in the parent (the cost of copying the VMA tree)"
    )
    mmtests_name = "unixbench-spawn"
    grids: ClassVar[dict[str, Grid]] = {
        "quick": Grid(
            boots=4,
            # 0.2 s is 2x10^8 instructions under QEMU's instruction clock
            # (about 2000 forks, or 76 with 1000 extra VMAs): a fixed amount of
            # work that keeps a boot as short as the 1 s wall-clock grid's was.
            params={"duration": 0.2, "iterations": 3, "extra_vmas": [0, 1000]},
            description="0.2 s per iteration (2x10^8 instructions under the instruction clock), for CI and QEMU",
        ),
        "full": Grid(
            boots=5,
            params={
                "duration": 30,
                "iterations": 3,
                "extra_vmas": [0, 100, 200, 400, 800, 1600, 3200, 6400],
            },
            description=(
                "the fork series of the __mt_dup() patches: 30 s a point on the wall clock; "
                "0.1 s (10^8 instructions) a point and 2 iterations on the instruction clock"
            ),
            instruction_params={"duration": 0.1, "iterations": 2},
        ),
        # Fork, exit and wait unpinned: on a machine of several CPUs the
        # scheduler starts the child on an idle CPU and the child's exit wakes
        # the parent back across, so every fork sends reschedule and
        # function-call IPIs (about 1.7 a fork with 2 vCPUs, measured). The
        # cross-CPU wake-up path, which a pinned run never takes.
        "cross-cpu": Grid(
            boots=4,
            params={"duration": 0.2, "iterations": 3, "extra_vmas": [0], "cpu": -1},
            description=(
                "0.2 s per iteration, no extra VMAs, unpinned: children start on another CPU and wake "
                "the parent across (boot 2 or more vCPUs)"
            ),
        ),
    }
    parameters = (
        Param("duration", "number", 0.01, 3600, "seconds each iteration forks for"),
        Param("iterations", "int", 1, 1000, "iterations per extra_vmas value and boot"),
        # vm.max_map_count defaults to 65530; leave room for the process itself.
        Param(
            "extra_vmas",
            "int-list",
            0,
            60000,
            "extra VMAs the parent holds, one run each",
        ),
        # Pinned to one CPU by default so the scheduler's load balancing does
        # not add noise; -1 measures the cross-CPU path instead.
        Param(
            "cpu",
            "int",
            -1,
            4095,
            "the CPU the parent and its children are pinned to; -1: none (children start on other CPUs)",
            default=0,
        ),
    )

    @staticmethod
    def metric_name(vmas: int, cpu: int) -> str:
        """Unpinned runs are named for it: their forks include cross-CPU wake-ups."""
        return f"spawn-vmas-{vmas}" + ("-anycpu" if cpu < 0 else "")

    def command(self, params: Mapping[str, Any], bindir: str) -> list[list[str]]:
        params = self.validate(params)
        binary = f"{bindir.rstrip('/')}/spawn"
        return [
            [
                binary,
                "-t",
                fmt_number(params["duration"]),
                "-i",
                str(params["iterations"]),
                "-v",
                str(extra),
                "-c",
                str(params["cpu"]),
            ]
            for extra in params["extra_vmas"]
        ]

    def _passes(self, raw_output: str, params: Mapping[str, Any]) -> dict[tuple[int, int], _Pass]:
        """Every (extra_vmas, iteration) the job asked for, checked; ValueError says what is wrong."""
        params = self.validate(params)
        wanted_vmas: list[int] = params["extra_vmas"]
        iterations: int = params["iterations"]
        found: dict[tuple[int, int], _Pass] = {}
        pending: tuple[int, int, int] | None = None  # (vmas, iteration, line) still owed its index row
        previous = ""
        for lineno, line in enumerate(raw_output.splitlines(), start=1):
            text, before = line.strip(), previous
            previous = text
            row = _INDEX_ROW.fullmatch(text)
            if text.startswith("Process Creation") and not row:
                raise ValueError(f"spawn: malformed UnixBench index row on output line {lineno}: {text!r}")
            if row:
                if pending is None:
                    raise ValueError(f"spawn: UnixBench index row on output line {lineno} follows no result line")
                result = found[pending[:2]]
                self._check_row(row, result, lineno)
                result.lines.append(text)
                pending = None
                continue
            if not text.startswith("spawn vmas="):
                continue  # UnixBench COUNT lines, spawn-info, console noise
            if pending is not None:
                raise ValueError(
                    f"spawn: no UnixBench index row after the result on output line {pending[2]} "
                    f"(vmas={pending[0]} iteration={pending[1]})"
                )
            match = _SPAWN_LINE.fullmatch(text)
            if not match:
                raise ValueError(f"spawn: malformed result on output line {lineno}: {text!r}")
            vmas, iteration = int(match["vmas"]), int(match["iteration"])
            count, elapsed = int(match["count"]), float(match["elapsed"])
            if vmas not in wanted_vmas:
                raise ValueError(
                    f"spawn: output line {lineno} is for vmas={vmas}, but the job asked for extra_vmas {wanted_vmas}"
                )
            if iteration >= iterations:
                raise ValueError(
                    f"spawn: output line {lineno} is iteration {iteration}, "
                    f"but the job asked for {iterations} iterations (0-based)"
                )
            if (vmas, iteration) in found:
                raise ValueError(f"spawn: output line {lineno} repeats vmas={vmas} iteration={iteration}")
            if elapsed <= 0:
                raise ValueError(f"spawn: output line {lineno} has elapsed={elapsed}")
            # UnixBench's COUNT line comes just before the result line.
            found[(vmas, iteration)] = _Pass(count, elapsed, [before] if before.startswith("COUNT|") else [])
            found[(vmas, iteration)].lines.append(text)
            pending = (vmas, iteration, lineno)
        if pending is not None:
            raise ValueError(
                f"spawn: no UnixBench index row after the result on output line {pending[2]} "
                f"(vmas={pending[0]} iteration={pending[1]})"
            )
        missing = [
            f"vmas={vmas} iteration={iteration}"
            for vmas in wanted_vmas
            for iteration in range(iterations)
            if (vmas, iteration) not in found
        ]
        if missing:
            raise ValueError(
                f"spawn: no result for {', '.join(missing)} in the output "
                f"({len(found)} of {len(wanted_vmas) * iterations} found); "
                "the raw output shows where it stopped"
            )
        return found

    @staticmethod
    def _check_row(row: re.Match[str], result: _Pass, lineno: int) -> None:
        """The index row must say what the result line says: mmtests reads the row, kperf the line."""
        if float(row["baseline"]) != UNIXBENCH_SPAWN_BASELINE:
            raise ValueError(
                f"spawn: output line {lineno} has baseline {row['baseline']}, UnixBench's is {UNIXBENCH_SPAWN_BASELINE}"
            )
        rate = result.rate
        # The row has one decimal; the result line's elapsed has nine, so the
        # rate recomputed from it may differ from spawn's own by a hair more.
        if abs(float(row["result"]) - rate) > 0.05 + rate * 1e-9 / result.elapsed + 1e-9:
            raise ValueError(
                f"spawn: output line {lineno} reports {row['result']} lps, "
                f"but the result line before it gives {rate:.1f} ({result.count} forks in {result.elapsed} s)"
            )

    def parse(self, raw_output: str, params: Mapping[str, Any]) -> list[Sample]:
        found = self._passes(raw_output, params)
        params = self.validate(params)
        return [
            Sample(self.metric_name(vmas, params["cpu"]), iteration, found[(vmas, iteration)].rate)
            for vmas in params["extra_vmas"]
            for iteration in range(params["iterations"])
        ]

    def operations(self, raw_output: str, params: Mapping[str, Any]) -> Operations:
        """Forks per command: the sum of its iterations' count= (one command per extra_vmas value).

        A fork here is UnixBench's loop: fork, the child exits, the parent waits.
        """
        found = self._passes(raw_output, params)
        params = self.validate(params)
        return {
            n: {"fork": sum(found[(vmas, iteration)].count for iteration in range(params["iterations"]))}
            for n, vmas in enumerate(params["extra_vmas"])
        }

    def command_labels(self, params: Mapping[str, Any]) -> list[str]:
        return [f"extra_vmas={extra}" for extra in self.validate(params)["extra_vmas"]]

    def mmtests_runs(self, raw_output: str, params: Mapping[str, Any]) -> MmtestsRuns:
        """One mmtests run per extra_vmas value, named spawn-vmas-<extra>.

        mmtests' unixbench shellpack (shellpack_src/src/unixbench/unixbench-bench)
        writes the workload list to `workloads` and each `./Run -c 1 spawn`
        to spawn-1-<iteration>.log, iterations from 1; ExtractUnixbenchcommon.pm
        reads the `Process Creation` index row of each file as one sample of
        unixbench-spawn-1. Here each file holds one kperf iteration's lines
        (COUNT, result, index row): one UnixBench pass, as `Run -i 1` reports it.
        """
        found = self._passes(raw_output, params)
        params = self.validate(params)
        return {
            self.metric_name(vmas, params["cpu"]): {
                "workloads": "spawn\n",
                **{
                    f"spawn-1-{iteration + 1}.log": "\n".join(found[(vmas, iteration)].lines) + "\n"
                    for iteration in range(params["iterations"])
                },
            }
            for vmas in params["extra_vmas"]
        }

    def metrics(self, params: Mapping[str, Any]) -> list[Metric]:
        params = self.validate(params)
        return [Metric(self.metric_name(extra, params["cpu"]), "forks/s", True) for extra in params["extra_vmas"]]

    def sources(self) -> list[str]:
        return ["spawn.c"]

    def expected_seconds(self, params: Mapping[str, Any]) -> float:
        params = self.validate(params)
        runs = len(params["extra_vmas"]) * params["iterations"]
        return float(params["duration"] * runs)

    def guest_seconds(self, params: Mapping[str, Any]) -> float | None:
        return self.expected_seconds(params)
