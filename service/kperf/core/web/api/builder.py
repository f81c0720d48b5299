"""The build-machine protocol (docs/builders.md): claim, progress, upload, finish, fail."""

from __future__ import annotations

from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Field, Router, Schema
from typing_extensions import TypedDict

from kperf.core.builds import machines
from kperf.core.models import BuildMachine
from kperf.core.web.api.auth import BUILDER_AUTH, machine_of
from kperf.core.web.api.errors import ErrorOut

router = Router(auth=BUILDER_AUTH, tags=["build-machine protocol"])

Attempt = Annotated[int, Field(strict=True, ge=1, le=2**31 - 1, description="the attempt the claim named")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

_ERRORS: dict[int, Any] = {401: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 415: ErrorOut, 422: ErrorOut}


class BuilderClaimIn(Schema):
    arches: list[str] = Field(default=[], description="arches this machine builds (empty: every arch)")
    hostname: str = ""
    version: str = ""


class BuilderClaimOut(TypedDict):
    build: machines.BuildClaim | None
    poll_seconds: int


class BuildProgressIn(Schema):
    attempt: Attempt
    phase: str = Field(default="", max_length=32)
    message: str = Field(default="", max_length=2000)


class BuildProgressOut(TypedDict):
    lease_expires: str | None


class BuildUploadOut(TypedDict):
    size: Annotated[int, Field(description="bytes of this file staged so far: the next chunk's offset")]


class BuildArtifactIn(Schema):
    size: int = Field(strict=True, ge=0)
    sha256: Sha256


class BuildFinishIn(Schema):
    attempt: Attempt
    ok: bool
    error: str = Field(default="", max_length=20000)
    log_tail: str = Field(default="", max_length=200000)
    artifacts: dict[str, BuildArtifactIn] = {}
    reused_sha: str = Field(default="", pattern=r"^([0-9a-f]{40})?$")
    compiled: int = Field(default=0, strict=True, ge=0, le=2**31 - 1)
    incremental_error: str = Field(default="", max_length=20000)
    # What the kernel lacks though it built ("pagealloc.ko not built: ...").
    warnings: list[str] = Field(default=[], max_length=50)


class BuildFailIn(Schema):
    attempt: Attempt
    reason: str = Field(max_length=20000)


class BuildStatusOut(TypedDict):
    status: str
    attempt: int


def _machine(request: HttpRequest) -> BuildMachine:
    machine = machine_of(request)
    assert isinstance(machine, BuildMachine)
    return machine


@router.post("/claim", url_name="builder-claim", response={200: BuilderClaimOut, 401: ErrorOut, 422: ErrorOut})
def claim(request: HttpRequest, payload: BuilderClaimIn) -> BuilderClaimOut:
    build = machines.claim(_machine(request), payload.arches, payload.hostname, payload.version)
    return {
        "build": machines.claim_payload(build) if build else None,
        "poll_seconds": settings.KPERF_BUILDER_POLL_SECONDS,
    }


@router.post("/builds/{build_id}/progress", url_name="builder-progress", response={200: BuildProgressOut, **_ERRORS})
def progress(request: HttpRequest, build_id: int, payload: BuildProgressIn) -> BuildProgressOut:
    build = machines.progress(_machine(request), build_id, payload.attempt, payload.phase, payload.message)
    return {"lease_expires": build.lease_expires.isoformat() if build.lease_expires else None}


@router.put("/builds/{build_id}/artifacts/{name}", url_name="builder-upload", response={200: BuildUploadOut, **_ERRORS})
def upload(request: HttpRequest, build_id: int, name: str, attempt: int, offset: int) -> BuildUploadOut:
    # The body is the chunk itself (application/octet-stream), not JSON.
    size = machines.stage_chunk(_machine(request), build_id, attempt, name, offset, request.body)
    return {"size": size}


@router.post(
    "/builds/{build_id}/finish", url_name="builder-finish", response={200: BuildStatusOut, 503: ErrorOut, **_ERRORS}
)
def finish(request: HttpRequest, build_id: int, payload: BuildFinishIn) -> BuildStatusOut:
    result = payload.model_dump()
    build = machines.finish(_machine(request), build_id, payload.attempt, result)
    return {"status": build.status, "attempt": build.attempt}


@router.post("/builds/{build_id}/fail", url_name="builder-fail", response={200: BuildStatusOut, **_ERRORS})
def fail(request: HttpRequest, build_id: int, payload: BuildFailIn) -> BuildStatusOut:
    build = machines.fail(_machine(request), build_id, payload.attempt, payload.reason)
    return {"status": build.status, "attempt": build.attempt}
