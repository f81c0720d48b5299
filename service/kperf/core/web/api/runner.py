"""The runner protocol (docs/runner-protocol.md)."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from typing import Annotated, Any

from django.conf import settings
from django.http import FileResponse, HttpRequest
from ninja import Field, Router, Schema
from pydantic import AfterValidator, BaseModel, BeforeValidator
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from kperf.core.builds import artifacts
from kperf.core.lab import leases
from kperf.core.lab.uploads import BootUpload, ResultsUpload, SampleRow
from kperf.core.models import KernelBuild, Runner
from kperf.core.web.api.auth import RUNNER_AUTH, runner_of
from kperf.core.web.api.errors import ApiError, ErrorOut

router = Router(auth=RUNNER_AUTH, tags=["runner protocol"])
log = logging.getLogger(__name__)


# The largest value of the integer columns these land in (PostgreSQL's integer).
INT_MAX = 2**31 - 1
# Kernel counters per boot (docs/runner-protocol.md, "counters"): a name is
# at most this long, and a boot has at most this many, which a kernel's
# /proc/vmstat (a few hundred fields) stays far below.
COUNTER_NAME_MAX = 64
COUNTERS_MAX = 4096
PER_COMMAND_NAME = re.compile(r"\d{1,6}\.[A-Za-z0-9_]+")


def _invalid(detail: str) -> PydanticCustomError:
    # The API's error handler puts the field's path in front of the message
    # (kperf.core.web.api._describe); the detail goes in through the context so
    # braces in a quoted value are not taken for placeholders.
    return PydanticCustomError("kperf_invalid", "{detail}", {"detail": detail})


def _finite_number(value: Any) -> Any:
    # Booleans are ints to Python, strings are not numbers here, and an int
    # beyond a float's range is no measurement.
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    try:
        ok = ok and math.isfinite(value)
    except OverflowError:
        ok = False
    if not ok:
        raise _invalid(f"must be a finite number, not {repr(value)[:80]}")
    return value


def _name_check(what: str) -> Callable[[str], str]:
    def check(name: str) -> str:
        if not 1 <= len(name) <= COUNTER_NAME_MAX:
            raise _invalid(f"{what} {name[:80]!r} must be 1 to {COUNTER_NAME_MAX} characters long")
        return name

    return check


def _object(what: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _invalid(f"must be an object{what}")
        return value

    return check


def _at_most_counters(counters: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    if sum(map(len, counters.values())) > COUNTERS_MAX:
        raise _invalid(f"has more than {COUNTERS_MAX} counters")
    # Hardware counters (instructions, cycles) count events: whole and never
    # negative, unlike a vmstat gauge's delta.
    for name, value in counters.get("perf", {}).items():
        if value < 0 or value != int(value):
            raise _invalid(f"has perf counter {name!r} = {value!r}: hardware counts are whole numbers >= 0")
    # Per command: "<command index>.<counter or operation>", whole counts (kperf.core.results.per_op).
    for source in ("perf_by_command", "operations"):
        for name, value in counters.get(source, {}).items():
            if not PER_COMMAND_NAME.fullmatch(name):
                raise _invalid(f"has {source} name {name!r}: per-command names are <command index>.<name>")
            if value < 0 or value != int(value):
                raise _invalid(f"has {source} {name!r} = {value!r}: counts are whole numbers >= 0")
    return counters


FiniteNumber = Annotated[float, BeforeValidator(_finite_number)]
CounterValue = Annotated[int | float, BeforeValidator(_finite_number)]
CounterName = Annotated[str, AfterValidator(_name_check("counter"))]
SourceName = Annotated[str, AfterValidator(_name_check("source"))]
CounterSource = Annotated[dict[CounterName, CounterValue], BeforeValidator(_object(" of counter names to numbers"))]
Counters = Annotated[
    dict[SourceName, CounterSource],
    BeforeValidator(_object(": counter source (vmstat, perf) to its counters")),
    AfterValidator(_at_most_counters),
]
Attempt = Annotated[int, Field(strict=True, ge=1, le=INT_MAX, description="the attempt the claim named")]


class HeartbeatIn(Schema):
    name: str = ""
    arch: str = ""
    machine_class: str = ""
    version: str = ""
    hostname: str = ""
    capabilities: dict[str, Any] = {}


class HeartbeatOut(TypedDict):
    runner: str
    poll_seconds: int


class ClaimOut(TypedDict):
    job: Annotated[dict[str, Any] | None, Field(description="the leased job (docs/runner-protocol.md), or null")]


class ProgressIn(Schema):
    attempt: Attempt
    phase: str = ""
    boot: int | None = None
    boots: int | None = None
    message: str = ""
    console: str = ""
    # A runner about to go quiet (a bare-metal runner jumping into the test
    # kernel cannot call until the machine is back) asks for this much more
    # lease on top of lease_seconds. Bounded at 6 h: a runner that never
    # comes back must not hold the job for long.
    quiet_seconds: int = Field(default=0, strict=True, ge=0, le=21600)


class ProgressOut(TypedDict):
    lease_expires: str | None


# A plain pydantic model, not a ninja Schema: Schema wraps every instance in
# a validator that resolves ORM attributes, which for the thousands of
# samples in one upload cost more than storing them. Input only, so nothing
# is lost.
class SampleIn(BaseModel):
    metric: str = Field(max_length=128)
    iteration: int = Field(strict=True, ge=0, le=INT_MAX)
    value: FiniteNumber


class BootIn(Schema):
    # 0-based; must be distinct and below the job's boots (checked against the job).
    boot: int = Field(strict=True, ge=0, le=INT_MAX)
    environment: Annotated[dict[str, Any], BeforeValidator(_object(""))] = {}
    raw_output: str = ""
    samples: list[SampleIn] = Field(min_length=1)
    # Optional: runners older than counters send none.
    counters: Counters = {}


class MetricIn(BaseModel):  # one per metric, as SampleIn
    unit: str = ""
    higher_is_better: bool | None = None


class ResultsIn(Schema):
    attempt: Attempt
    boots: list[BootIn] = Field(min_length=1, description="one entry per boot")
    metrics: dict[str, MetricIn] = {}
    console_log: str = ""

    def upload(self) -> ResultsUpload:
        """The upload as the domain's typed records (kperf.core.lab.uploads), its shape checked."""
        return ResultsUpload(
            attempt=self.attempt,
            boots=[
                BootUpload(
                    boot=b.boot,
                    environment=b.environment,
                    raw_output=b.raw_output,
                    samples=[SampleRow(s.metric, s.iteration, s.value) for s in b.samples],
                    counters=b.counters,
                )
                for b in self.boots
            ],
            directions={name: meta.higher_is_better for name, meta in self.metrics.items()},
            console_log=self.console_log,
        )


class StatusOut(TypedDict):
    status: str


class FailIn(Schema):
    attempt: Attempt
    kind: str
    message: str = ""
    log: str = ""


class FailOut(TypedDict):
    status: str
    attempt: int


# What a call with a body can be refused with (docs/runner-protocol.md): bad
# token, no such job, not held, duplicate or mismatch, body too large, not
# JSON, malformed.
_BODY_CALL_ERRORS: dict[int, Any] = {
    401: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    415: ErrorOut,
    422: ErrorOut,
}


def _runner(request: HttpRequest) -> Runner:
    runner = runner_of(request)
    assert isinstance(runner, Runner)
    return runner


@router.post("/heartbeat", response={200: HeartbeatOut, **_BODY_CALL_ERRORS})
def heartbeat(request: HttpRequest, payload: HeartbeatIn) -> HeartbeatOut:
    runner = _runner(request)
    leases.heartbeat(runner, payload.model_dump())
    return {"runner": runner.name, "poll_seconds": settings.KPERF_RUNNER_POLL_SECONDS}


@router.post("/claim", response={200: ClaimOut, 401: ErrorOut})
def claim(request: HttpRequest) -> ClaimOut:
    job = leases.claim(_runner(request))
    return {"job": leases.job_payload(job) if job else None}


@router.post("/jobs/{job_id}/progress", response={200: ProgressOut, **_BODY_CALL_ERRORS})
def progress(request: HttpRequest, job_id: int, payload: ProgressIn) -> ProgressOut:
    job = leases.progress(_runner(request), job_id, payload.model_dump())
    return {"lease_expires": job.lease_expires.isoformat() if job.lease_expires else None}


@router.post("/jobs/{job_id}/results", response={200: StatusOut, **_BODY_CALL_ERRORS})
def results(request: HttpRequest, job_id: int, payload: ResultsIn) -> StatusOut:
    job = leases.record_results(_runner(request), job_id, payload.upload())
    return {"status": job.status}


@router.post("/jobs/{job_id}/fail", response={200: FailOut, **_BODY_CALL_ERRORS})
def fail(request: HttpRequest, job_id: int, payload: FailIn) -> FailOut:
    job = leases.record_failure(_runner(request), job_id, payload.model_dump())
    return {"status": job.status, "attempt": job.attempt}


# 200 is the file itself; 400 a NUL byte in the name; 503 the artifact
# storage could not give it (the runner retries, as for every 5xx).
@router.get(
    "/builds/{build_id}/artifacts/{name}",
    response={200: None, 400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut, 503: ErrorOut},
)
def artifact(request: HttpRequest, build_id: int, name: str) -> FileResponse:
    runner = _runner(request)
    if not leases.may_download(runner, build_id):
        raise ApiError(403, "not-held", f"runner {runner.name} holds no job for build {build_id}")
    build = KernelBuild.objects.filter(pk=build_id, status=KernelBuild.Status.DONE).first()
    meta = build.artifacts.get(name) if build else None
    if not meta:
        raise ApiError(404, "not-found", f"build {build_id} has no artifact {name!r}")
    try:
        fh = artifacts.open_artifact(meta, f"artifact {name!r} of build {build_id}")
    except artifacts.ArtifactUnavailable as e:
        log.warning("%s", e)
        raise ApiError(503, "unavailable", f"{e}; try again later") from None
    # The runner checks size and sha256 against the claim (docs/runner-protocol.md).
    response = FileResponse(fh, as_attachment=True, filename=name)
    response["Content-Length"] = str(meta["size"])
    return response
