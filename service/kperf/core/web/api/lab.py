"""The API for the lab's runners: their state, health history, quarantine and release (docs/calibration.md)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema

from kperf.core import access
from kperf.core.lab import calibration, runner_health
from kperf.core.models import Runner, RunnerEvent
from kperf.core.web.api.auth import USER_AUTH, user_of
from kperf.core.web.api.errors import ApiError, responses
from kperf.core.web.shapes import RunnerChanged, RunnerChecks

router = Router()


class NoteIn(Schema):
    # Why: kept in the runner's history with the admin's name.
    note: str = ""


class ReleaseIn(NoteIn):
    # The runner changed for good (new hardware, fixed configuration): judge
    # its next calibrations against a new series, not the old one.
    relearn: bool = False
    # Queue a calibration at once, so the runner proves itself before long.
    calibrate: bool = True


def _runner(name: str) -> Runner:
    runner = Runner.objects.select_related("machine_class").filter(name=name).first()
    if runner is None:
        raise ApiError(404, "not-found", f"there is no runner {name!r}: GET /api/v1/runners lists them")
    return runner


def _staff_only(request: HttpRequest, what: str) -> None:
    if not access.is_staff(user_of(request)):
        raise ApiError(
            403,
            "forbidden",
            f"only an admin may {what} a runner: it changes what every user's jobs run on; ask an admin",
        )


@router.get("/runners", auth=USER_AUTH, tags=["lab"], response=responses(200, list[runner_health.RunnerState], 401))
def list_runners(request: HttpRequest) -> list[runner_health.RunnerState]:
    """Every runner: health, why and since when it is quarantined, its last calibrations (docs/calibration.md)."""
    return [runner_health.runner_dict(r) for r in Runner.objects.select_related("machine_class").order_by("name")]


@router.get(
    "/runners/{name}/checks",
    auth=USER_AUTH,
    tags=["lab"],
    response=responses(200, RunnerChecks, 401, 404, 422),
)
def runner_checks(request: HttpRequest, name: str, limit: int = 50) -> RunnerChecks:
    """One runner's state and history, newest first: calibrations (its health checks) with their
    per-metric medians and how they were judged, quarantines and releases; and its calibration
    series per metric, oldest first."""
    runner = _runner(name)
    events = RunnerEvent.objects.filter(runner=runner).select_related("by")[: max(1, min(limit, 500))]
    table = calibration.series_table(runner)
    return {
        **runner_health.runner_dict(runner),
        "events": [runner_health.event_dict(e) for e in events],
        "series": {
            "metrics": table["metrics"],
            "rows": [
                {
                    "created": row["created"].isoformat(),
                    "result": row["result"],
                    "job": row["job"],
                    "values": row["values"],
                    "reason": row["reason"],
                }
                for row in table["rows"]
            ],
        },
    }


def _change(request: HttpRequest, name: str, what: str, payload: NoteIn) -> RunnerChanged:
    _staff_only(request, what)
    _runner(name)  # 404 before any change
    user = user_of(request)
    if isinstance(payload, ReleaseIn):
        runner, changed = calibration.release_by_name(
            name, user, payload.note, relearn=payload.relearn, calibrate=payload.calibrate
        )
    else:
        runner, changed = runner_health.quarantine_by_name(name, user, payload.note)
    return {**runner_health.runner_dict(runner), "changed": changed}


@router.post(
    "/runners/{name}/release",
    auth=USER_AUTH,
    tags=["lab"],
    response=responses(200, RunnerChanged, 401, 403, 404, 413, 415, 422),
)
def release_runner(request: HttpRequest, name: str, payload: ReleaseIn) -> RunnerChanged:
    """Staff only: put a quarantined runner back to work (changed: false if it was not quarantined)."""
    return _change(request, name, "release", payload)


@router.post(
    "/runners/{name}/quarantine",
    auth=USER_AUTH,
    tags=["lab"],
    response=responses(200, RunnerChanged, 401, 403, 404, 413, 415, 422),
)
def quarantine_runner(request: HttpRequest, name: str, payload: NoteIn) -> RunnerChanged:
    """Staff only: take a runner out of work; it claims nothing until released (changed: false if it already was)."""
    return _change(request, name, "quarantine", payload)
