"""The runner protocol (docs/runner-protocol.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.http import FileResponse, HttpRequest
from ninja import Router, Schema

from kperf.core import leases
from kperf.core.api.auth import RUNNER_AUTH
from kperf.core.api.errors import ApiError
from kperf.core.models import KernelBuild, Runner

router = Router(auth=RUNNER_AUTH, tags=["runner protocol"])


class HeartbeatIn(Schema):
    name: str = ""
    arch: str = ""
    machine_class: str = ""
    version: str = ""
    hostname: str = ""
    capabilities: dict[str, Any] = {}


class ProgressIn(Schema):
    attempt: int
    phase: str = ""
    boot: int | None = None
    boots: int | None = None
    message: str = ""
    console: str = ""


class ResultsIn(Schema):
    attempt: int
    boots: list[dict[str, Any]]
    metrics: dict[str, Any] = {}
    console_log: str = ""


class FailIn(Schema):
    attempt: int
    kind: str
    message: str = ""
    log: str = ""


def _runner(request: HttpRequest) -> Runner:
    runner = request.auth  # type: ignore[attr-defined]
    assert isinstance(runner, Runner)
    return runner


@router.post("/heartbeat")
def heartbeat(request: HttpRequest, payload: HeartbeatIn) -> dict[str, Any]:
    from django.conf import settings

    runner = _runner(request)
    leases.heartbeat(runner, payload.model_dump())
    return {"runner": runner.name, "poll_seconds": settings.KPERF_RUNNER_POLL_SECONDS}


@router.post("/claim")
def claim(request: HttpRequest) -> dict[str, Any]:
    job = leases.claim(_runner(request))
    return {"job": leases.job_payload(job) if job else None}


@router.post("/jobs/{job_id}/progress")
def progress(request: HttpRequest, job_id: int, payload: ProgressIn) -> dict[str, Any]:
    job = leases.progress(_runner(request), job_id, payload.model_dump())
    return {"lease_expires": job.lease_expires.isoformat() if job.lease_expires else None}


@router.post("/jobs/{job_id}/results")
def results(request: HttpRequest, job_id: int, payload: ResultsIn) -> dict[str, Any]:
    job = leases.record_results(_runner(request), job_id, payload.model_dump())
    return {"status": job.status}


@router.post("/jobs/{job_id}/fail")
def fail(request: HttpRequest, job_id: int, payload: FailIn) -> dict[str, Any]:
    job = leases.record_failure(_runner(request), job_id, payload.model_dump())
    return {"status": job.status, "attempt": job.attempt}


@router.get("/builds/{build_id}/artifacts/{name}")
def artifact(request: HttpRequest, build_id: int, name: str) -> FileResponse:
    runner = _runner(request)
    if not leases.may_download(runner, build_id):
        raise ApiError(403, "not-held", f"runner {runner.name} holds no job for build {build_id}")
    build = KernelBuild.objects.filter(pk=build_id, status=KernelBuild.Status.DONE).first()
    meta = build.artifacts.get(name) if build else None
    if not meta:
        raise ApiError(404, "not-found", f"build {build_id} has no artifact {name!r}")
    return FileResponse(open(Path(meta["path"]), "rb"), as_attachment=True, filename=name)
