"""A runner's health: the only place it changes (docs/calibration.md).

good -> quarantined: automatically, by a failed health check or a drifted
calibration (kperf.core.lab.calibration), or by an admin; quarantined -> good:
an admin releases it. Every change locks the runner's row, writes a
RunnerEvent (who, when, why) and saves through Runner.save, which moves
`identity_changed` so boots from before are not shared across the change
(kperf.core.lab.sharing).

A quarantined runner claims nothing (kperf.core.lab.leases.claim). Its queued
calibration jobs are cancelled (it cannot run them, and a release queues a
fresh one), and the jobs it finished since its last good calibration are
marked suspect: their numbers may already carry what the check found.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone
from typing_extensions import TypedDict

from kperf.core.lifecycle import states
from kperf.core.models import Job, Runner, RunnerEvent

log = logging.getLogger(__name__)


class NoSuchRunner(LookupError):
    pass


def locked(name: str) -> Runner:
    """The runner, its row locked for a change of health (the caller is in a transaction)."""
    # of=self: the machine class is read, not locked (runners of one class change health independently).
    runner = Runner.objects.select_for_update(of=("self",)).select_related("machine_class").filter(name=name).first()
    if runner is None:
        raise NoSuchRunner(f"there is no runner {name!r}: GET /api/v1/runners lists them")
    return runner


def suspect_note(runner: Runner) -> str:
    """What a job measured by a quarantined runner after its last good calibration says about itself."""
    after = (
        f"after its last good calibration ({runner.last_good_calibration:%Y-%m-%d %H:%M} UTC)"
        if runner.last_good_calibration
        else "with no good calibration before"
    )
    since = f"{runner.health_since:%Y-%m-%d %H:%M} UTC" if runner.health_since else "now"
    return f"measured on runner {runner.name} {after}, before it was quarantined ({since}) for: {runner.health_reason}"[
        :500
    ]


def mark_suspect(runner: Runner) -> int:
    """Mark the runner's finished jobs since its last good calibration; returns how many."""
    done = Job.objects.filter(runner=runner, status=Job.Status.DONE, pinned_runner__isnull=True, suspect_note="")
    if runner.last_good_calibration is not None:
        done = done.filter(finished__gt=runner.last_good_calibration)
    return done.update(suspect_note=suspect_note(runner))


def mark_if_quarantined(runner: Runner, job: Job) -> None:
    """A job a quarantined runner held when it was quarantined and finished since: marked too.

    `runner` is as the upload's authentication loaded it: no query for the usual, good runner.
    """
    if runner.health == Runner.Health.QUARANTINED and job.pinned_runner_id is None:
        job.suspect_note = suspect_note(runner)
        Job.objects.filter(pk=job.pk).update(suspect_note=job.suspect_note)


def quarantine(
    runner: Runner, reason: str, by: Any = None, note: str = "", check: RunnerEvent | None = None
) -> RunnerEvent | None:
    """Quarantine a locked runner (see `locked`); None if it already was (its first reason stays)."""
    if runner.health == Runner.Health.QUARANTINED:
        return None
    now = timezone.now()
    runner.health = Runner.Health.QUARANTINED
    runner.health_reason = reason[:2000]
    runner.health_since = now
    runner.save(update_fields=["health", "health_reason", "health_since"])
    # Calibration jobs still queued for it: it will not claim them; a release queues a new one.
    # (One it is running is cancelled if it comes back to the queue: kperf.core.lab.leases._requeue.)
    for job in Job.objects.select_for_update().filter(pinned_runner=runner, status=Job.Status.QUEUED):
        states.move(job, Job.Status.CANCELLED, finished=now, progress=f"runner quarantined: {reason}"[:200])
    marked = mark_suspect(runner)
    event = RunnerEvent.objects.create(
        runner=runner,
        kind=RunnerEvent.Kind.QUARANTINE,
        by=by,
        reason=runner.health_reason,
        note=note,
        job=check.job if check is not None else None,
        marked_jobs=marked,
        created=now,
    )
    log.warning("runner %s quarantined: %s (%d finished job(s) marked)", runner.name, reason, marked)
    return event


def release(runner: Runner, by: Any, note: str = "", relearn: bool = False) -> RunnerEvent | None:
    """Release a locked runner; None if it was not quarantined.

    relearn: the runner changed for good (new hardware, firmware, a
    configuration fix), so its calibrations from before no longer describe
    it: the series starts again from the next calibration.
    """
    if runner.health == Runner.Health.GOOD:
        return None
    now = timezone.now()
    was = runner.health_reason
    runner.health = Runner.Health.GOOD
    runner.health_reason = ""
    runner.health_since = now
    fields = ["health", "health_reason", "health_since"]
    if relearn:
        runner.calibration_baseline_since = now
        fields.append("calibration_baseline_since")
    runner.save(update_fields=fields)
    event = RunnerEvent.objects.create(
        runner=runner,
        kind=RunnerEvent.Kind.RELEASE,
        by=by,
        reason=f"was quarantined for: {was}"[:2000],
        note=note + (" (calibration series starts again)" if relearn else ""),
        created=now,
    )
    log.warning("runner %s released by %s: %s", runner.name, getattr(by, "username", by), note)
    return event


def quarantine_by_name(name: str, by: Any, note: str) -> tuple[Runner, bool]:
    """An admin's quarantine; (runner, whether it changed)."""
    who = getattr(by, "username", "an admin")
    with transaction.atomic():
        runner = locked(name)
        event = quarantine(runner, f"quarantined by {who}" + (f": {note}" if note else ""), by=by, note=note)
    return runner, event is not None


def _iso(dt: Any) -> str | None:
    return dt.isoformat() if dt else None


class RunnerState(TypedDict):
    """A runner as the API, the CLI and the lab page show it."""

    name: str
    machine_class: str
    arch: str
    # The clock the class's new jobs are timed with; capabilities.clocks is what the runner gives.
    clock: str
    # The class's kernels: configuration profile, and vCPUs and NUMA nodes a
    # QEMU runner boots (0: its default; no NUMA nodes declared).
    profile: str
    vcpus: int
    numa_nodes: int
    health: str
    reason: str
    since: str | None
    last_heartbeat: str | None
    last_calibration: str | None
    last_calibration_result: str | None
    last_good_calibration: str | None
    version: str
    capabilities: dict[str, Any]


class RunnerEventRow(TypedDict):
    """One entry of a runner's history: a calibration, a quarantine or a release."""

    id: int
    kind: str
    result: str | None
    created: str | None
    by: str | None
    reason: str
    note: str
    job: int | None
    # A calibration's per-metric medians and how each was judged (kperf.core.lab.calibration).
    summary: dict[str, Any]
    judgement: dict[str, Any]
    marked_jobs: int


def runner_dict(r: Runner) -> RunnerState:
    return {
        "name": r.name,
        "machine_class": r.machine_class.name,
        "arch": r.machine_class.arch,
        "clock": r.machine_class.clock,
        "profile": r.machine_class.profile,
        "vcpus": r.machine_class.vcpus,
        "numa_nodes": r.machine_class.numa_nodes,
        "health": r.health,
        "reason": r.health_reason,
        "since": _iso(r.health_since),
        "last_heartbeat": _iso(r.last_heartbeat),
        "last_calibration": _iso(r.last_calibration),
        "last_calibration_result": r.last_calibration_result or None,
        "last_good_calibration": _iso(r.last_good_calibration),
        "version": r.version,
        "capabilities": r.capabilities,
    }


def event_dict(e: RunnerEvent) -> RunnerEventRow:
    return {
        "id": e.pk,
        "kind": e.kind,
        "result": e.result or None,
        "created": _iso(e.created),
        "by": e.by.get_username() if e.by else None,
        "reason": e.reason,
        "note": e.note,
        "job": e.job_id,
        "summary": e.summary,
        "judgement": e.judgement,
        "marked_jobs": e.marked_jobs,
    }
