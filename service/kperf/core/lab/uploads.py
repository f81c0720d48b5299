"""A runner's results upload as typed records, and the checks on it that need its job.

The API validates the upload's shape once (kperf.core.web.api.runner's
ResultsIn) and hands these records on; from there to the database nothing is
a dict or an anonymous tuple. The checks here are the ones a schema cannot
make: the boots the job asked for, the job's clock, the benchmark's metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from kperf.core.models import Clock, Job
from kperf_runner import benchmarks as registry


class ProtocolError(Exception):
    """A runner's call refused: HTTP status, a code the runner acts on, and what was wrong."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


class SampleRow(NamedTuple):
    """One sample as it is copied into the database (a NamedTuple: thousands per upload)."""

    metric: str
    iteration: int
    value: float


# counters: per source (vmstat, ...) the name and its delta over the boot.
Counters = dict[str, dict[str, int | float]]


@dataclass(frozen=True)
class BootUpload:
    boot: int  # 0-based, distinct, below the job's boots (checked by `checked`)
    environment: dict[str, Any]
    raw_output: str
    samples: list[SampleRow]
    counters: Counters


@dataclass(frozen=True)
class ResultsUpload:
    attempt: int
    boots: list[BootUpload]
    # Per metric the runner's higher_is_better (None: not said), checked against the service's.
    directions: dict[str, bool | None]
    console_log: str


def checked(job: Job, upload: ResultsUpload) -> list[BootUpload]:
    """The upload's boots once they fit `job`; a ProtocolError (422) names the first thing that does not."""
    bench = registry.get_benchmark(job.benchmark)
    defined = {m.name: m for m in bench.metrics(job.params)}
    if len(upload.boots) != job.boots:
        raise ProtocolError(
            422, "invalid", f"job {job.pk} has {job.boots} boot(s) but the upload has {len(upload.boots)}"
        )
    seen_boots: set[int] = set()
    for i, boot in enumerate(upload.boots):
        if not 0 <= boot.boot < job.boots or boot.boot in seen_boots:
            raise ProtocolError(422, "invalid", f"boots[{i}].boot must be a distinct integer in 0..{job.boots - 1}")
        seen_boots.add(boot.boot)
        # Samples timed with another clock than the job's are another metric:
        # refused whole, so the runner reports an infrastructure fault and the
        # job is tried again, instead of mixing clocks in a comparison.
        clock = boot.environment.get("clock", Clock.WALL)
        if clock != job.clock:
            raise ProtocolError(
                422,
                "invalid",
                f"boots[{i}] was timed with the {clock!r} clock but job {job.pk} wants the {job.clock!r} clock: "
                "upgrade the runner, or run it with an accelerator that gives that clock",
            )
        for j, sample in enumerate(boot.samples):
            if sample.metric not in defined:
                raise ProtocolError(
                    422,
                    "invalid",
                    f"boots[{i}].samples[{j}].metric {sample.metric!r} is not a metric of {job.benchmark} "
                    f"with these parameters (expected one of {', '.join(sorted(defined))})",
                )
    for name, higher_is_better in upload.directions.items():
        m = defined.get(name)
        if m is not None and higher_is_better not in (None, m.higher_is_better):
            raise ProtocolError(
                422,
                "invalid",
                f"the runner says {name} is {'higher' if higher_is_better else 'lower'}-is-better, "
                "the service disagrees: runner and service versions differ, upgrade the runner",
            )
    return upload.boots
