"""What every benchmark shares: metrics, samples, grids, parameters, the base class.

Standard library only, no I/O: the service imports the registry too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

Params = dict[str, Any]

# Operations per command: {command index: {operation name ("fork", "fault", "alloc"): count}}.
Operations = dict[int, dict[str, int]]

# mmtests' files for one run: {mmtests run name: {file in iter-0/<benchmark>/logs/: its text}}.
MmtestsRuns = dict[str, dict[str, str]]


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
    # On QEMU's instruction clock a benchmark that runs for a time runs for
    # that many 10^9 instructions, and TCG executes about 10^8 a second: a
    # grid made for bare metal (30 s a point) would take hours a boot there.
    # These replace its time-based parameters on that clock, keeping every
    # point of the sweep (docs/benchmarks.md, "Grids on the instruction clock").
    instruction_params: Mapping[str, Any] | None = None
    # What the kernel must have for the grid to run at all ("memcg",
    # "swap"): a submission whose profile lacks one is refused up front.
    needs: tuple[str, ...] = ()


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
    # A parameter added after jobs were stored has a default: parameters
    # stored without it (and grids that do not set it) mean this value.
    default: Any = None

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
        bounds = f"in [{fmt_number(self.minimum)}, {fmt_number(self.maximum)}]"
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


def fmt_number(number: float) -> str:
    """Numbers as people write them on a command line: 30, not 30.0."""
    return str(int(number)) if float(number).is_integer() else repr(float(number))


class Benchmark:
    """Base class; subclasses fill in the class attributes and the methods that raise here."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    grids: ClassVar[dict[str, Grid]] = {}
    parameters: ClassVar[tuple[Param, ...]] = ()
    # The benchmark's name in mmtests: its extractor reads iter-<N>/<mmtests_name>/logs/.
    mmtests_name: ClassVar[str] = ""

    def validate(self, params: Mapping[str, Any]) -> Params:
        """A complete, coerced copy of params; BadParameters names the problem."""
        known = {param.name: param for param in self.parameters}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise BadParameters(
                f"{self.name} has no parameter {', '.join(map(repr, unknown))}; its parameters are {', '.join(known)}"
            )
        missing = [name for name, param in known.items() if name not in params and param.default is None]
        if missing:
            raise BadParameters(f"{self.name}: parameter(s) {', '.join(missing)} missing")
        return {name: param.coerce(self.name, params.get(name, param.default)) for name, param in known.items()}

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

    def guest_seconds(self, params: Mapping[str, Any]) -> float | None:
        """Seconds of the machine's own clock the commands run for, when the
        parameters fix them (a benchmark that runs for a time); None when the
        benchmark does a fixed amount of work instead."""
        return None

    def artifacts(self) -> list[str]:
        """Build artifacts the commands need next to the binaries, e.g. ["pagealloc.ko"].

        They come from the kernel build under test (the job lists every
        artifact of its build); the runner puts them in the same directory
        as the binaries.
        """
        return []

    def operations(self, raw_output: str, params: Mapping[str, Any]) -> Operations:
        """The operations each command performed, as the benchmark's own output counts them.

        {command index n (in `command()` order): {operation name: count}},
        e.g. {0: {"fork": 3570}}; a command whose output states no count is
        left out rather than estimated. Hardware counts of command n divided
        by these give the per-operation values (docs/machine-tuning.md). Call
        it on output `parse` accepted: it assumes a complete run.
        """
        return {}

    def command_labels(self, params: Mapping[str, Any]) -> list[str]:
        """A short name for each command, in `command()` order: what tells them apart."""
        return [f"command {n}" for n in range(len(self.command(params, "")))]

    def environment(self, raw_output: str) -> dict[str, Any]:
        """Facts about the run the output states, added to the boot's environment."""
        return {}

    def mmtests_runs(self, raw_output: str, params: Mapping[str, Any]) -> MmtestsRuns:
        """The log files mmtests would have written for the same run.

        {run name: {file name: text}}: each run is one mmtests result
        directory (work/log/<run>), its files go in
        iter-0/<mmtests_name>/logs/, where mmtests' extractor for the
        benchmark reads them. One boot is one mmtests iteration directory.
        ValueError where the output is not a complete run (the same checks
        as parse).
        """
        raise NotImplementedError
