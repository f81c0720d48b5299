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
    kind: str  # "number", "int" or "int-list"
    minimum: float
    maximum: float
    description: str

    def coerce(self, benchmark: str, value: object) -> Any:
        where = f"{benchmark}: parameter {self.name!r}"
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


BENCHMARKS: dict[str, Benchmark] = {bench.name: bench for bench in (Spawn(),)}


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
