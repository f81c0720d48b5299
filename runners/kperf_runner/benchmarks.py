"""The benchmark registry: parameters, grids, commands, parsers and metrics.

This module is the single source of truth for what a benchmark is. The runner
uses it to build the command lines and parse the output; the service imports
it (and nothing else from the runner) to resolve a submission's grid into
parameters and to know each metric's unit and direction. So it stays free of
I/O and of anything but the standard library.

A benchmark is C sources in `csrc/` compiled into static binaries, a list of
argv lines run one after another in one boot (the qemu backend's init runs
them from /kperf/job; `kperf-runner bench` runs them natively), and a parser
that turns their combined raw output into samples.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

Params = dict[str, Any]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool


@dataclass(frozen=True)
class Sample:
    metric: str
    iteration: int
    value: float


class UnknownBenchmark(ValueError):
    """No benchmark of that name; the message lists the known ones."""


class BadParameters(ValueError):
    """A grid or parameter that does not exist, or a value out of range."""


@dataclass(frozen=True)
class Grid:
    """A named parameter set and how many boots per side the service schedules."""

    boots: int
    params: Mapping[str, Any]
    description: str = ""


@dataclass(frozen=True)
class Param:
    """One benchmark parameter: its kind, bounds and meaning.

    Values arrive as JSON from the service and as strings from `--set`, so
    `coerce` accepts both and returns plain JSON types (what gets stored with
    the samples): `number` gives an int when integral, else a float.
    """

    name: str
    kind: str  # "number", "int", "int-list" or "choice"
    minimum: float
    maximum: float
    description: str
    choices: tuple[str, ...] = ()  # the values a "choice" takes

    def coerce(self, benchmark: str, value: object) -> Any:
        where = f"{benchmark}: parameter {self.name!r}"
        if self.kind == "choice":
            if not isinstance(value, str) or value.strip() not in self.choices:
                raise BadParameters(f"{where} wants one of {', '.join(self.choices)}, got {value!r}")
            return value.strip()
        if self.kind == "int-list":
            items: Sequence[object]
            if isinstance(value, str):
                items = [part.strip() for part in value.split(",") if part.strip()]
            elif isinstance(value, (list, tuple)):
                items = value
            else:
                raise BadParameters(f"{where} wants a list of integers, got {value!r}")
            if not items:
                raise BadParameters(f"{where} wants at least one value")
            numbers = [self._scalar(where, item, integer=True) for item in items]
            if len(set(numbers)) != len(numbers):
                raise BadParameters(f"{where} has repeated values: {numbers}")
            return numbers
        return self._scalar(where, value, integer=self.kind == "int")

    def _scalar(self, where: str, value: object, integer: bool) -> Any:
        wanted = "an integer" if integer else "a number"
        bounds = f"in [{_fmt(self.minimum)}, {_fmt(self.maximum)}]"
        # bool is an int subclass; True as a duration is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise BadParameters(f"{where} wants {wanted} {bounds}, got {value!r}")
        try:
            number = float(value)
        except ValueError:
            raise BadParameters(f"{where} wants {wanted} {bounds}, got {value!r}") from None
        if not math.isfinite(number) or not self.minimum <= number <= self.maximum:
            raise BadParameters(f"{where} wants {wanted} {bounds}, got {value!r}")
        if integer and not number.is_integer():
            raise BadParameters(f"{where} wants {wanted} {bounds}, got {value!r}")
        if integer or number.is_integer():
            return int(number)
        return number


def _fmt(number: float) -> str:
    """Numbers as people write them on a command line: 30, not 30.0."""
    return str(int(number)) if float(number).is_integer() else repr(float(number))


class Benchmark:
    """Base class; subclasses fill in the class attributes and four methods."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    grids: ClassVar[dict[str, Grid]] = {}
    parameters: ClassVar[tuple[Param, ...]] = ()

    def validate(self, params: Mapping[str, Any]) -> Params:
        """A complete, coerced copy of params; BadParameters names the problem."""
        known = {param.name: param for param in self.parameters}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise BadParameters(
                f"{self.name} has no parameter {', '.join(map(repr, unknown))}; its parameters are {', '.join(known)}"
            )
        missing = [name for name in known if name not in params]
        if missing:
            raise BadParameters(f"{self.name}: parameter(s) {', '.join(missing)} missing")
        return {name: param.coerce(self.name, params[name]) for name, param in known.items()}

    def command(self, params: Mapping[str, Any], bindir: str) -> list[list[str]]:
        """The argv lines to run, in order, with the binaries in bindir."""
        raise NotImplementedError

    def parse(self, raw_output: str, params: Mapping[str, Any]) -> list[Sample]:
        """Samples from the commands' combined output; ValueError if malformed."""
        raise NotImplementedError

    def metrics(self, params: Mapping[str, Any]) -> list[Metric]:
        raise NotImplementedError

    def sources(self) -> list[str]:
        """C files in csrc/ to compile into static binaries (named after the file)."""
        raise NotImplementedError

    def expected_seconds(self, params: Mapping[str, Any]) -> float:
        """How long the commands should run, boot excluded; sizes timeouts."""
        raise NotImplementedError

    def artifacts(self) -> list[str]:
        """Build artifacts the commands need next to the binaries, e.g. ["pagealloc.ko"].

        They come from the kernel build under test (the job lists every
        artifact of its build); the runner puts them in the same directory
        as the binaries.
        """
        return []

    def environment(self, raw_output: str) -> dict[str, Any]:
        """Facts about the run the output states, added to the boot's environment."""
        return {}


_SPAWN_LINE = re.compile(
    r"spawn vmas=(?P<vmas>\d+) iteration=(?P<iteration>\d+) "
    r"count=(?P<count>\d+) elapsed=(?P<elapsed>\d+\.\d+)"
)


class Spawn(Benchmark):
    name = "spawn"
    description = (
        "UnixBench spawn: fork(), the child exits at once, the parent waits; "
        "forks per second with extra VMAs in the parent (the cost of copying the VMA tree)"
    )
    grids: ClassVar[dict[str, Grid]] = {
        "quick": Grid(
            boots=4,
            params={"duration": 1, "iterations": 3, "extra_vmas": [0, 1000]},
            description="seconds per boot, for CI and QEMU",
        ),
        "full": Grid(
            boots=5,
            params={
                "duration": 30,
                "iterations": 3,
                "extra_vmas": [0, 100, 200, 400, 800, 1600, 3200, 6400],
            },
            description="the fork series of the __mt_dup() patches, for bare metal",
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
    )
    # Pinned to one CPU so the scheduler's load balancing does not add noise.
    cpu = 0

    def command(self, params: Mapping[str, Any], bindir: str) -> list[list[str]]:
        params = self.validate(params)
        binary = f"{bindir.rstrip('/')}/spawn"
        return [
            [
                binary,
                "-t",
                _fmt(params["duration"]),
                "-i",
                str(params["iterations"]),
                "-v",
                str(extra),
                "-c",
                str(self.cpu),
            ]
            for extra in params["extra_vmas"]
        ]

    def parse(self, raw_output: str, params: Mapping[str, Any]) -> list[Sample]:
        params = self.validate(params)
        wanted_vmas: list[int] = params["extra_vmas"]
        iterations: int = params["iterations"]
        found: dict[tuple[int, int], float] = {}
        for lineno, line in enumerate(raw_output.splitlines(), start=1):
            line = line.strip()
            if not line.startswith("spawn vmas="):
                continue  # UnixBench COUNT lines, spawn-info, console noise
            match = _SPAWN_LINE.fullmatch(line)
            if not match:
                raise ValueError(f"spawn: malformed result on output line {lineno}: {line!r}")
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
            found[(vmas, iteration)] = count / elapsed
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
        return [
            Sample(f"spawn-vmas-{vmas}", iteration, found[(vmas, iteration)])
            for vmas in wanted_vmas
            for iteration in range(iterations)
        ]

    def metrics(self, params: Mapping[str, Any]) -> list[Metric]:
        params = self.validate(params)
        return [Metric(f"spawn-vmas-{extra}", "forks/s", True) for extra in params["extra_vmas"]]

    def sources(self) -> list[str]:
        return ["spawn.c"]

    def expected_seconds(self, params: Mapping[str, Any]) -> float:
        params = self.validate(params)
        runs = len(params["extra_vmas"]) * params["iterations"]
        return float(params["duration"] * runs)


# -- aim9 ----------------------------------------------------------------------

AIM9_TESTS = ("page_test", "brk_test", "exec_test", "fork_test")
# Field 2 is the name, field 6 ops/sec (what mmtests' extractor reads).
_AIM9_ROW = re.compile(
    r"\s*(?P<number>\d+)\s+(?P<name>\S+)\s+(?P<elapsed>\d+\.\d+)\s+(?P<count>\d+)\s+"
    r"(?P<loops>\d+\.\d+)\s+(?P<ops>\d+\.\d+)\s+(?P<units>\S.*)"
)
_AIM9_ITERATION = re.compile(r"aim9 iteration=(?P<iteration>\d+) testtime=(?P<testtime>\d+\.\d+)")


class Aim9(Benchmark):
    name = "aim9"
    description = (
        "AIM Suite IX single-user tests as mmtests runs them for the page allocator: "
        "page_test, brk_test, exec_test, fork_test in operations per second"
    )
    grids: ClassVar[dict[str, Grid]] = {
        "quick": Grid(
            boots=4,
            params={"testtime": 1, "iterations": 3},
            description="seconds per boot, for CI and QEMU",
        ),
        "full": Grid(
            boots=5,
            params={"testtime": 15, "iterations": 12},
            description="mmtests' config-workload-aim9-pagealloc: 15 s per test, 12 iterations",
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
                _fmt(params["testtime"]),
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

    def sources(self) -> list[str]:
        return ["aim9.c", "true.c"]

    def expected_seconds(self, params: Mapping[str, Any]) -> float:
        params = self.validate(params)
        # Each test stops after its first call past testtime; a call of
        # page_test under TCG can take a good fraction of a second.
        return float(len(AIM9_TESTS) * params["iterations"] * (params["testtime"] + 0.5))


# -- pft -----------------------------------------------------------------------

PFT_MODES = ("threads", "processes")
# mmtests' line: " %3ld %4ld %3ld %8.2fs %8.2fs %8.2fs  %10.3f %10.3f"
_PFT_ROW = re.compile(
    r"\s*(?P<gb>\d+)\s+(?P<clients>\d+)\s+(?P<cline>\d+)\s+(?P<user>\d+\.\d+)s\s+"
    r"(?P<system>\d+\.\d+)s\s+(?P<wall>\d+\.\d+)s\s+(?P<per_cpu>\d+\.\d+)\s+(?P<per_wall>\d+\.\d+)"
)
_PFT_INFO = re.compile(r"pft-info: mode=(?P<mode>\w+) clients=(?P<clients>\d+) .*")
_PFT_SKIP = re.compile(r"pft-skip: mode=(?P<mode>\w+) clients=(?P<clients>\d+) .*")


class Pft(Benchmark):
    name = "pft"
    description = (
        "page fault test: N workers (threads sharing one mm and one VMA, or processes) "
        "fault in equal slices of one anonymous region, base pages; faults per wall "
        "second and per CPU second"
    )
    grids: ClassVar[dict[str, Grid]] = {
        "quick": Grid(
            boots=4,
            params={"size_mb": 64, "clients": [1, 2], "iterations": 3, "mode": "threads"},
            description="64 MiB (fits a 512 MiB QEMU guest), 1 and 2 threads",
        ),
        "full": Grid(
            boots=5,
            params={"size_mb": 0, "clients": list(range(1, 65)), "iterations": 30, "mode": "threads"},
            description=(
                "mmtests' defaults: MemTotal/5, clients 1..NUMCPUS (counts above the "
                "machine's CPUs are skipped; up to 64), 30 iterations, threads"
            ),
        ),
        "full-processes": Grid(
            boots=5,
            params={"size_mb": 0, "clients": list(range(1, 65)), "iterations": 30, "mode": "processes"},
            description="as full, with processes instead of threads (one mm each)",
        ),
    }
    parameters = (
        Param("size_mb", "int", 0, 16 * 1024 * 1024, "MiB of the region (0: MemTotal/5, as mmtests)"),
        Param(
            "clients",
            "int-list",
            1,
            4096,
            "worker counts, one run each; counts above the machine's CPUs are skipped",
        ),
        Param("iterations", "int", 1, 1000, "iterations per client count and boot"),
        Param(
            "mode",
            "choice",
            0,
            0,
            "threads (one process: one mm, one VMA) or processes (one mm each)",
            choices=PFT_MODES,
        ),
    )

    def command(self, params: Mapping[str, Any], bindir: str) -> list[list[str]]:
        params = self.validate(params)
        binary = f"{bindir.rstrip('/')}/pft"
        return [
            [
                binary,
                "-m",
                str(params["size_mb"]),
                "-n",
                str(clients),
                "-i",
                str(params["iterations"]),
                "-M",
                params["mode"],
            ]
            for clients in params["clients"]
        ]

    @staticmethod
    def metric_names(mode: str, clients: int) -> tuple[str, str]:
        """(faults per wall second, faults per CPU second) for a mode and client count."""
        return f"faults/sec-{mode}-{clients}", f"faults/cpu-{mode}-{clients}"

    def parse(self, raw_output: str, params: Mapping[str, Any]) -> list[Sample]:
        params = self.validate(params)
        mode: str = params["mode"]
        wanted: list[int] = params["clients"]
        iterations: int = params["iterations"]
        rows: dict[int, list[tuple[float, float]]] = {}
        skipped: set[int] = set()
        current: int | None = None
        for lineno, line in enumerate(raw_output.splitlines(), start=1):
            text = line.strip()
            if text.startswith(("pft-info:", "pft-skip:")):
                match = (_PFT_INFO if text.startswith("pft-info:") else _PFT_SKIP).fullmatch(text)
                if not match:
                    raise ValueError(f"pft: malformed line {lineno}: {text!r}")
                clients = int(match["clients"])
                if match["mode"] != mode:
                    raise ValueError(f"pft: output line {lineno} is for mode {match['mode']}, the job asked for {mode}")
                if clients not in wanted:
                    raise ValueError(
                        f"pft: output line {lineno} is for clients={clients}, the job asked for clients {wanted}"
                    )
                if clients in rows or clients in skipped:
                    raise ValueError(f"pft: output line {lineno} repeats clients={clients}")
                if text.startswith("pft-skip:"):
                    skipped.add(clients)
                    current = None
                else:
                    rows[clients] = []
                    current = clients
                continue
            if not text or not text[0].isdigit():
                continue  # the heading, console noise
            row = _PFT_ROW.fullmatch(text)
            if not row:
                raise ValueError(f"pft: malformed result row on output line {lineno}: {text!r}")
            if current is None:
                raise ValueError(f"pft: result row on output line {lineno} comes before any pft-info line")
            if int(row["clients"]) != current:
                raise ValueError(f"pft: output line {lineno} reports {row['clients']} clients in the run of {current}")
            if len(rows[current]) >= iterations:
                raise ValueError(
                    f"pft: output line {lineno} is iteration {iterations + 1} of a {iterations}-iteration run"
                )
            wall_rate, cpu_rate = float(row["per_wall"]), float(row["per_cpu"])
            if wall_rate <= 0 or cpu_rate <= 0:
                raise ValueError(f"pft: output line {lineno} has no fault rate: {text!r}")
            rows[current].append((wall_rate, cpu_rate))
        missing = [
            f"clients={clients} ({len(rows.get(clients, []))} of {iterations} iterations)"
            for clients in wanted
            if clients not in skipped and len(rows.get(clients, [])) != iterations
        ]
        if missing:
            raise ValueError(f"pft: incomplete output for {', '.join(missing)}; the raw output shows where it stopped")
        samples: list[Sample] = []
        for clients in wanted:
            per_sec, per_cpu = self.metric_names(mode, clients)
            for iteration, (wall_rate, cpu_rate) in enumerate(rows.get(clients, [])):
                samples.append(Sample(per_sec, iteration, wall_rate))
                samples.append(Sample(per_cpu, iteration, cpu_rate))
        if not samples:
            raise ValueError(f"pft: every client count was skipped ({sorted(skipped)}): the machine has fewer CPUs")
        return samples

    def metrics(self, params: Mapping[str, Any]) -> list[Metric]:
        params = self.validate(params)
        out: list[Metric] = []
        for clients in params["clients"]:
            per_sec, per_cpu = self.metric_names(params["mode"], clients)
            out += [Metric(per_sec, "faults/s", True), Metric(per_cpu, "faults/cpu-s", True)]
        return out

    def sources(self) -> list[str]:
        return ["pft.c"]

    def expected_seconds(self, params: Mapping[str, Any]) -> float:
        params = self.validate(params)
        # ~20 us per fault under TCG, the slowest place kperf runs it; with
        # size_mb=0 assume a 512 MiB guest (bare metal is far faster per fault).
        size = params["size_mb"] or 512 // 5
        faults = size * 256
        return float(len(params["clients"]) * params["iterations"] * (0.5 + faults * 20e-6))


# -- pagealloc -----------------------------------------------------------------

PAGEALLOC_PROC = "/proc/kperf_pagealloc"
_PAGEALLOC_ROW = re.compile(
    r"order\s+(?P<order>\d+)\s+batch\s+(?P<batch>\d+)\s+alloc\s+(?P<alloc>\d+)\s+free\s+(?P<free>\d+)"
)
_PAGEALLOC_CLOCK = re.compile(r"clock: (?P<clock>\S+)")


def pagealloc_batches(order: int, batch_limit_kb: int) -> list[int]:
    """Batch sizes for an order: doubling from 1 while batch < (limit / 4096) >> order."""
    limit = (batch_limit_kb * 1024 // 4096) >> order
    batches, batch = [], 1
    while batch < limit:
        batches.append(batch)
        batch *= 2
    return batches


class Pagealloc(Benchmark):
    name = "pagealloc"
    description = (
        "page-allocator microbenchmark (a kernel module built with each kernel): cycles "
        "to allocate and free a block of 2^order pages, per order and batch size"
    )
    grids: ClassVar[dict[str, Grid]] = {
        "quick": Grid(
            boots=4,
            params={"orders": [0, 1, 2, 3, 4], "batch_limit_kb": 4096, "outer": 3, "inner": 100},
            description="batches up to 4 MiB, 3 rounds of 100: seconds under QEMU",
        ),
        "full": Grid(
            boots=5,
            params={"orders": [0, 1, 2, 3, 4], "batch_limit_kb": 131072, "outer": 15, "inner": 10000},
            description="mmtests' pagealloc: orders 0-4, batches up to 128 MiB, 15 rounds of 10000",
        ),
    }
    parameters = (
        Param("orders", "int-list", 0, 10, "page orders to measure"),
        Param("batch_limit_kb", "int", 8, 16 * 1024 * 1024, "batch < (batch_limit_kb * 1024 / 4096) >> order"),
        Param("outer", "int", 1, 1000, "rounds per order and batch; each round is one sample"),
        Param("inner", "int", 1, 1_000_000, "repetitions per round"),
    )
    cpu = 0

    def command(self, params: Mapping[str, Any], bindir: str) -> list[list[str]]:
        params = self.validate(params)
        bindir = bindir.rstrip("/")
        return [
            [
                f"{bindir}/kmodload",
                "-c",
                str(self.cpu),
                "-o",
                PAGEALLOC_PROC,
                f"{bindir}/pagealloc.ko",
                f"orders={','.join(map(str, params['orders']))}",
                f"batch_limit_kb={params['batch_limit_kb']}",
                f"outer={params['outer']}",
                f"inner={params['inner']}",
            ]
        ]

    def _cases(self, params: Mapping[str, Any]) -> list[tuple[int, int]]:
        return [
            (order, batch) for order in params["orders"] for batch in pagealloc_batches(order, params["batch_limit_kb"])
        ]

    def parse(self, raw_output: str, params: Mapping[str, Any]) -> list[Sample]:
        params = self.validate(params)
        cases = self._cases(params)
        outer: int = params["outer"]
        rounds: dict[tuple[int, int], list[tuple[int, int]]] = {case: [] for case in cases}
        for lineno, line in enumerate(raw_output.splitlines(), start=1):
            text = line.strip()
            if not text.startswith("order"):
                continue
            row = _PAGEALLOC_ROW.fullmatch(text)
            if not row:
                raise ValueError(f"pagealloc: malformed result on output line {lineno}: {text!r}")
            case = (int(row["order"]), int(row["batch"]))
            if case not in rounds:
                raise ValueError(
                    f"pagealloc: output line {lineno} is for order {case[0]} batch {case[1]}, "
                    "which the job's parameters do not ask for"
                )
            if len(rounds[case]) >= outer:
                raise ValueError(
                    f"pagealloc: output line {lineno} is round {outer + 1} of order {case[0]} batch {case[1]}"
                )
            rounds[case].append((int(row["alloc"]), int(row["free"])))
        missing = [
            f"order {o} batch {b} ({len(rounds[(o, b)])} of {outer})" for o, b in cases if len(rounds[(o, b)]) != outer
        ]
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise ValueError(f"pagealloc: incomplete output for {shown}; the raw output shows where it stopped")
        samples: list[Sample] = []
        for order, batch in cases:
            for kind in ("alloc", "free", "total"):
                for iteration, (alloc, free) in enumerate(rounds[(order, batch)]):
                    value = {"alloc": alloc, "free": free, "total": alloc + free}[kind]
                    samples.append(Sample(f"{kind}-odr{order}-{batch}", iteration, float(value)))
        return samples

    def metrics(self, params: Mapping[str, Any]) -> list[Metric]:
        params = self.validate(params)
        return [
            Metric(f"{kind}-odr{order}-{batch}", "cycles", False)
            for order, batch in self._cases(params)
            for kind in ("alloc", "free", "total")
        ]

    def sources(self) -> list[str]:
        return ["kmodload.c"]

    def artifacts(self) -> list[str]:
        return ["pagealloc.ko"]

    def environment(self, raw_output: str) -> dict[str, Any]:
        for line in raw_output.splitlines():
            match = _PAGEALLOC_CLOCK.fullmatch(line.strip())
            if match:
                return {"cycle_clock": match["clock"]}
        return {}

    def expected_seconds(self, params: Mapping[str, Any]) -> float:
        params = self.validate(params)
        # ~1 us per block allocated and freed under TCG (bare metal: ~0.1 us).
        blocks = sum(batch + 1 for _, batch in self._cases(params)) * params["inner"] * params["outer"]
        return float(1.0 + blocks * 1e-6)


BENCHMARKS: dict[str, Benchmark] = {bench.name: bench for bench in (Aim9(), Pagealloc(), Pft(), Spawn())}


def get_benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise UnknownBenchmark(
            f"unknown benchmark {name!r}; known benchmarks: {', '.join(sorted(BENCHMARKS))}"
        ) from None


def resolve_params(name: str, grid: str, overrides: Mapping[str, Any] | None = None) -> Params:
    """The validated parameters of benchmark `name` in `grid`, with overrides applied."""
    bench = get_benchmark(name)
    if grid not in bench.grids:
        raise BadParameters(f"{name} has no grid {grid!r}; its grids are {', '.join(sorted(bench.grids))}")
    params: dict[str, Any] = dict(bench.grids[grid].params)
    known = [param.name for param in bench.parameters]
    for key, value in (overrides or {}).items():
        if key not in known:
            raise BadParameters(f"{name} has no parameter {key!r}; its parameters are {', '.join(known)}")
        params[key] = value
    return bench.validate(params)


__all__ = [
    "AIM9_TESTS",
    "BENCHMARKS",
    "BadParameters",
    "Benchmark",
    "Grid",
    "Metric",
    "Param",
    "Params",
    "Sample",
    "UnknownBenchmark",
    "get_benchmark",
    "resolve_params",
]
