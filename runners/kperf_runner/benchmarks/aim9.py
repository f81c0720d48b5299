"""aim9: the AIM Suite IX single-user tests mmtests runs for the page allocator (csrc/aim9.c)."""

from __future__ import annotations

import re
from collections.abc import Mapping
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

AIM9_TESTS = ("page_test", "brk_test", "exec_test", "fork_test")
# Field 2 is the name, field 6 ops/sec (what mmtests' extractor reads).
_AIM9_ROW = re.compile(
    r"\s*(?P<number>\d+)\s+(?P<name>\S+)\s+(?P<elapsed>\d+\.\d+)\s+(?P<count>\d+)\s+"
    r"(?P<loops>\d+\.\d+)\s+(?P<ops>\d+\.\d+)\s+(?P<units>\S.*)"
)
# Operations per call of each test (aim9.c's tests[]): a row's ops/sec over its loops/sec.
AIM9_OPS_PER_CALL = {"page_test": 1700, "brk_test": 17000, "exec_test": 5, "fork_test": 100}
_AIM9_ITERATION = re.compile(r"aim9 iteration=(?P<iteration>\d+) testtime=(?P<testtime>\d+\.\d+)")


class Aim9(Benchmark):
    name = "aim9"
    description = (
        "AIM Suite IX single-user tests as mmtests runs them for the page allocator: "
        "page_test, brk_test, exec_test, fork_test in operations per second"
    )
    mmtests_name = "aim9"
    grids: ClassVar[dict[str, Grid]] = {
        "quick": Grid(
            boots=4,
            # 0.2 s per test is 2x10^8 instructions under the instruction clock.
            params={"testtime": 0.2, "iterations": 3},
            description="0.2 s per test (2x10^8 instructions under the instruction clock), for CI and QEMU",
        ),
        "full": Grid(
            boots=5,
            params={"testtime": 15, "iterations": 12},
            description=(
                "mmtests' config-workload-aim9-pagealloc: 15 s per test, 12 iterations; "
                "0.1 s (10^8 instructions) per test on the instruction clock"
            ),
            instruction_params={"testtime": 0.1},
        ),
    }
    parameters = (
        Param("testtime", "number", 0.01, 3600, "seconds each test runs per iteration (AIM9 TESTTIME)"),
        Param("iterations", "int", 1, 1000, "iterations per boot, each running every test once"),
    )
    # Pinned to one CPU, as spawn: unpinned, a forked child lands on another
    # CPU half the time and exec_test / fork_test measure cross-CPU wake-ups
    # (under QEMU TCG their spread grew fivefold).
    cpu = 0

    def command(self, params: Mapping[str, Any], bindir: str) -> list[list[str]]:
        params = self.validate(params)
        bindir = bindir.rstrip("/")
        return [
            [
                f"{bindir}/aim9",
                "-t",
                fmt_number(params["testtime"]),
                "-i",
                str(params["iterations"]),
                "-x",
                f"{bindir}/true",
                "-c",
                str(self.cpu),
            ]
        ]

    def parse(self, raw_output: str, params: Mapping[str, Any]) -> list[Sample]:
        params = self.validate(params)
        iterations: int = params["iterations"]
        found: dict[tuple[str, int], float] = {}
        iteration: int | None = None
        for lineno, line in enumerate(raw_output.splitlines(), start=1):
            line = line.strip()
            header = _AIM9_ITERATION.fullmatch(line)
            if line.startswith("aim9 iteration="):
                if not header:
                    raise ValueError(f"aim9: malformed iteration line {lineno}: {line!r}")
                iteration = int(header["iteration"])
                if iteration >= iterations:
                    raise ValueError(
                        f"aim9: output line {lineno} starts iteration {iteration}, "
                        f"but the job asked for {iterations} iterations (0-based)"
                    )
                continue
            if not line or not line[0].isdigit():
                continue  # the table's headings, console noise
            row = _AIM9_ROW.fullmatch(line)
            if not row:
                raise ValueError(f"aim9: malformed result row on output line {lineno}: {line!r}")
            name = row["name"]
            if name not in AIM9_TESTS:
                raise ValueError(f"aim9: output line {lineno} reports unknown test {name!r}")
            if iteration is None:
                raise ValueError(f"aim9: result row on output line {lineno} comes before any 'aim9 iteration=' line")
            if (name, iteration) in found:
                raise ValueError(f"aim9: output line {lineno} repeats {name} in iteration {iteration}")
            ops, elapsed = float(row["ops"]), float(row["elapsed"])
            if ops <= 0 or elapsed <= 0 or int(row["count"]) <= 0:
                raise ValueError(f"aim9: output line {lineno} has no work done: {line!r}")
            found[(name, iteration)] = ops
        missing = [
            f"{name} iteration={iteration}"
            for iteration in range(iterations)
            for name in AIM9_TESTS
            if (name, iteration) not in found
        ]
        if missing:
            raise ValueError(
                f"aim9: no result for {', '.join(missing)} in the output "
                f"({len(found)} of {len(AIM9_TESTS) * iterations} found); "
                "the raw output shows where it stopped"
            )
        return [
            Sample(name, iteration, found[(name, iteration)]) for name in AIM9_TESTS for iteration in range(iterations)
        ]

    def metrics(self, params: Mapping[str, Any]) -> list[Metric]:
        self.validate(params)
        return [Metric(name, "ops/s", True) for name in AIM9_TESTS]

    def operations(self, raw_output: str, params: Mapping[str, Any]) -> Operations:
        """The one command's operations per test: each row's iteration count times its ops per call.

        The operation is the test's own (page_test: a brk move, brk_test: a
        brk move, exec_test: a fork+exec, fork_test: a fork), so the command
        holds four kinds and has no single per-operation value. Ops per call
        is aim9.c's, checked against the row's ops/sec over loops/sec; a row
        that disagrees (another aim9) leaves the command's count out.
        """
        self.parse(raw_output, params)  # the same checks: a complete run or ValueError
        ops: dict[str, int] = {}
        for line in raw_output.splitlines():
            row = _AIM9_ROW.fullmatch(line.strip())
            if not row:
                continue
            per_call = AIM9_OPS_PER_CALL[row["name"]]
            loops_rate = float(row["loops"])
            # Both rates are rounded in print: 1% is far above that, far below any other test's ratio.
            if loops_rate <= 0 or abs(float(row["ops"]) / loops_rate / per_call - 1) > 0.01:
                return {}
            ops[row["name"]] = ops.get(row["name"], 0) + int(row["count"]) * per_call
        return {0: ops}

    def command_labels(self, params: Mapping[str, Any]) -> list[str]:
        self.validate(params)
        return [", ".join(AIM9_TESTS)]

    def mmtests_runs(self, raw_output: str, params: Mapping[str, Any]) -> MmtestsRuns:
        """One mmtests run, aim9, with one file per iteration.

        mmtests' aim9 shellpack (shellpack_src/src/aim9/aim9-bench) tees each
        iteration's singleuser output to aim9-<iteration>, iterations from 1;
        ExtractAim9.pm reads every aim9-* file. Each file here holds the lines
        after one `aim9 iteration=` line (the table), without it.
        """
        self.parse(raw_output, params)  # the same checks: a complete run or ValueError
        files: dict[str, list[str]] = {}
        current: list[str] | None = None
        for line in raw_output.splitlines():
            header = _AIM9_ITERATION.fullmatch(line.strip())
            if header:
                current = files.setdefault(f"aim9-{int(header['iteration']) + 1}", [])
            elif current is not None:
                current.append(line)
        return {"aim9": {name: "\n".join(lines) + "\n" for name, lines in files.items()}}

    def sources(self) -> list[str]:
        return ["aim9.c", "true.c"]

    def expected_seconds(self, params: Mapping[str, Any]) -> float:
        params = self.validate(params)
        # Each test stops after its first call past testtime; a call of
        # page_test under TCG can take a good fraction of a second.
        return float(len(AIM9_TESTS) * params["iterations"] * (params["testtime"] + 0.5))

    def guest_seconds(self, params: Mapping[str, Any]) -> float | None:
        params = self.validate(params)
        return float(len(AIM9_TESTS) * params["iterations"] * params["testtime"])
