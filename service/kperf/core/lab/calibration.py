"""Calibration jobs: queued on a schedule, judged when they finish (docs/calibration.md).

A calibration is a job pinned to one runner (Job.pinned_runner): its machine
class's reference build, measured with the class's short calibration set.
It is the runner's health check too: if it fails for good (boot, benchmark,
or infrastructure after its retries) the runner is quarantined. If it
finishes, each metric's median is compared with the runner's recent good
calibrations; a move beyond K times their spread and beyond a floor
quarantines the runner (kperf.core.lab.runner_health).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from typing_extensions import TypedDict

from kperf.core import benchmarks
from kperf.core.lab import runner_health
from kperf.core.lifecycle import states
from kperf.core.models import Job, KernelBuild, Runner, RunnerEvent, Sample

log = logging.getLogger(__name__)

# MAD -> standard deviation for normal data: the noise is then in the units
# K means (K standard deviations), and reads like the noise elsewhere in kperf.
MAD_TO_SD = 1.4826


class CalibrationUnavailable(RuntimeError):
    """The runner's class cannot calibrate (no reference build, or one not built)."""


def _claimable(runner: Runner) -> dict[str, Any]:
    """The filter of the runner's pinned jobs it can claim: its current class and a clock it
    gives, as kperf.core.lab.leases.claim filters."""
    return {"machine_class_id": runner.machine_class_id, "clock__in": runner.clocks()}


def open_calibration(runner: Runner) -> Job | None:
    """The runner's calibration waiting or running, if it can still claim it.

    A pinned job of another class or clock (the runner was moved, or no
    longer gives the class's clock) never runs: it is not counted, so it
    cannot hold back a fresh one (queue_for cancels it).
    """
    return (
        Job.objects.filter(pinned_runner=runner, status__in=[Job.Status.QUEUED, Job.Status.LEASED])
        .filter(**_claimable(runner))
        .order_by("id")
        .first()
    )


def cancel_stale(runner: Runner) -> int:
    """Cancel the runner's queued calibrations it can no longer claim; returns how many.

    The caller holds the runner's lock (runner_health.locked): the same order
    as a quarantine (runner, then its jobs).
    """
    now = timezone.now()
    stale = (
        Job.objects.select_for_update(of=("self",))
        .select_related("machine_class")
        .filter(pinned_runner=runner, status=Job.Status.QUEUED)
        .exclude(**_claimable(runner))
    )
    cancelled = 0
    for job in stale:
        why = stale_reason(runner, job)
        states.move(job, Job.Status.CANCELLED, finished=now, phase="cancelled", failure_message=why, progress=why[:200])
        log.info("calibration job %s of runner %s cancelled: %s", job.pk, runner.name, why)
        cancelled += 1
    return cancelled


def stale_reason(runner: Runner, job: Job) -> str:
    """Why `runner` cannot claim its pinned `job`: the failure message of the job when it is cancelled."""
    if job.machine_class_id != runner.machine_class_id:
        why = (
            f"runner {runner.name} is now in machine class {runner.machine_class.name}, "
            f"this calibration was for {job.machine_class.name}"
        )
    else:
        why = f"runner {runner.name} no longer gives the {job.clock} clock this calibration is timed with"
    return f"cancelled: {why}, so it could never run; its next calibration is queued for its current class and clock"


def queue_for(runner: Runner) -> Job:
    """Queue a calibration job for `runner` (or return the one already waiting).

    Its queued calibrations it can no longer claim are cancelled first. The
    callers that can race (the schedule, a release) hold the runner's lock
    (runner_health.locked), so the check for a waiting one and the new one
    are one step.
    """
    mclass = runner.machine_class
    build = mclass.reference_build
    if build is None:
        raise CalibrationUnavailable(
            f"machine class {mclass.name} has no reference build: set one with "
            f"`kperf-manage set_reference {mclass.name} BUILD_ID_OR_SHA`"
        )
    if build.status != KernelBuild.Status.DONE:
        raise CalibrationUnavailable(
            f"the reference build {build.pk} of {mclass.name} is {build.status}, not built: "
            "choose a build that finished"
        )
    with transaction.atomic():
        cancel_stale(runner)
        waiting = open_calibration(runner)
        if waiting is not None:
            return waiting
        if mclass.clock in runner.clocks():
            return _create(runner, build)
    # Queued, it would never be claimed (and the stale ones above stay
    # cancelled); the schedule queues one once the runner's heartbeat says it
    # gives the clock.
    raise CalibrationUnavailable(
        f"runner {runner.name} does not give the {mclass.clock} clock machine class {mclass.name} times "
        f"with (it gives: {', '.join(runner.clocks()) or 'none'}): run it with a backend that gives "
        "that clock, or change the class's clock"
    )


def _create(runner: Runner, build: KernelBuild) -> Job:
    mclass = runner.machine_class
    _, params = benchmarks.grid_for(mclass.calibration_benchmark, mclass.calibration_grid, mclass.clock)
    return Job.objects.create(
        build=build,
        machine_class=mclass,
        clock=mclass.clock,
        benchmark=mclass.calibration_benchmark,
        grid=mclass.calibration_grid,
        params=params,
        boots=mclass.calibration_boots,
        max_attempts=settings.KPERF_JOB_MAX_ATTEMPTS,
        pinned_runner=runner,
        side="cal",
    )


def queue_due() -> int:
    """The beat task: queue a calibration for every good runner whose last one is older than the schedule."""
    hours = settings.KPERF_CALIBRATION_EVERY_HOURS
    if hours <= 0:
        return 0
    cutoff = timezone.now() - timedelta(hours=hours)
    queued = 0
    runners = Runner.objects.select_related("machine_class__reference_build").filter(
        health=Runner.Health.GOOD,
        machine_class__reference_build__status=KernelBuild.Status.DONE,
    )
    for runner in runners:
        if runner.last_calibration is not None and runner.last_calibration > cutoff:
            continue
        with transaction.atomic():
            # Locked, then checked again: a release (or another beat) that
            # queued one meanwhile is seen here, never two waiting at once.
            locked = runner_health.locked(runner.name)
            if locked.health != Runner.Health.GOOD:
                continue
            if locked.last_calibration is not None and locked.last_calibration > cutoff:
                continue
            cancel_stale(locked)
            if open_calibration(locked) is not None:
                continue
            try:
                queue_for(locked)
            except CalibrationUnavailable as e:
                log.warning("no calibration for runner %s: %s", locked.name, e)
                continue
        queued += 1
    if queued:
        log.info("queued %d calibration job(s)", queued)
    return queued


def summary(job: Job) -> dict[str, float]:
    """{metric: median of every sample of the job}: one number per metric per calibration."""
    values: dict[str, list[float]] = defaultdict(list)
    for metric, value in Sample.objects.filter(boot_record__job=job).values_list("metric", "value"):
        values[metric].append(value)
    return {m: statistics.median(v) for m, v in sorted(values.items()) if v}


def series(runner: Runner, like: Job, limit: int | None = None) -> list[RunnerEvent]:
    """The runner's good calibrations (oldest first) since its series began: what a new one is judged against.

    Only calibrations measured as `like` is (same reference build, benchmark,
    grid and clock): another kernel or clock gives other numbers, so a
    changed reference or calibration set starts a new series by itself.
    """
    rows = RunnerEvent.objects.filter(
        runner=runner,
        kind=RunnerEvent.Kind.CALIBRATION,
        result__in=RunnerEvent.SERIES,
        job__build_id=like.build_id,
        job__benchmark=like.benchmark,
        job__grid=like.grid,
        job__clock=like.clock,
    ).order_by("-created", "-id")
    if runner.calibration_baseline_since is not None:
        rows = rows.filter(created__gte=runner.calibration_baseline_since)
    return list(rows[: limit or settings.KPERF_CALIBRATION_WINDOW])[::-1]


def judge(new: dict[str, float], past: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """Per metric of `new` with enough history: its move against the past calibrations' median.

    The noise is the past medians' MAD (scaled to a standard deviation),
    relative to their median: robust, so one odd calibration that still
    passed neither shifts the center nor inflates the noise the way a mean
    and standard deviation of 3 to 10 points would. A metric drifted when
    it moved more than K times that noise and more than the floor (a runner
    with very little noise is not quarantined for 0.1%).
    """
    k, floor = settings.KPERF_CALIBRATION_K, settings.KPERF_CALIBRATION_FLOOR_PCT
    out: dict[str, dict[str, Any]] = {}
    for metric, value in new.items():
        history = [p[metric] for p in past if metric in p]
        if len(history) < settings.KPERF_CALIBRATION_MIN_HISTORY:
            continue
        center = statistics.median(history)
        if center == 0:
            continue
        mad = statistics.median(abs(h - center) for h in history)
        noise_pct = 100.0 * MAD_TO_SD * mad / abs(center)
        change_pct = 100.0 * (value - center) / abs(center)
        times = abs(change_pct) / noise_pct if noise_pct > 0 else math.inf
        out[metric] = {
            "value": value,
            "center": center,
            "noise_pct": round(noise_pct, 4),
            "change_pct": round(change_pct, 4),
            "times_noise": None if math.isinf(times) else round(times, 2),
            "drift": abs(change_pct) > floor and times > k,
            "calibrations": len(history),
        }
    return out


def drift_reason(judgement: dict[str, dict[str, Any]]) -> str | None:
    """The quarantine reason for the metric that moved most, in noise units; None if none drifted."""
    drifted = [(m, j) for m, j in judgement.items() if j["drift"]]
    if not drifted:
        return None
    metric, j = max(drifted, key=lambda mj: (mj[1]["times_noise"] or math.inf, abs(mj[1]["change_pct"])))
    times = f"{j['times_noise']:.0f}x its noise" if j["times_noise"] is not None else "its noise is zero"
    more = f" (and {len(drifted) - 1} more metric(s))" if len(drifted) > 1 else ""
    return (
        f"calibration drift: {metric} moved {j['change_pct']:+.1f}% ({times}) "
        f"against its last {j['calibrations']} calibrations{more}"
    )


def _record(runner: Runner, job: Job, result: str, **fields: Any) -> RunnerEvent:
    now = timezone.now()
    event = RunnerEvent.objects.create(
        runner=runner, kind=RunnerEvent.Kind.CALIBRATION, result=result, job=job, created=now, **fields
    )
    runner.last_calibration = now
    runner.last_calibration_result = result
    update = ["last_calibration", "last_calibration_result"]
    if result in RunnerEvent.SERIES:
        runner.last_good_calibration = now
        update.append("last_good_calibration")
    runner.save(update_fields=update)
    return event


def job_done(runner: Runner, job: Job) -> None:
    """Results of `job` were stored (in the upload's transaction): judge a calibration, mark a suspect job."""
    if job.pinned_runner_id is None:
        runner_health.mark_if_quarantined(runner, job)
        return
    locked = runner_health.locked(runner.name)
    new = summary(job)
    past = [e.summary for e in series(locked, job)]
    judgement = judge(new, past)
    reason = drift_reason(judgement)
    if reason is not None:
        result = RunnerEvent.Result.DRIFT
    elif len(past) < settings.KPERF_CALIBRATION_MIN_HISTORY:
        result = RunnerEvent.Result.LEARNING
    else:
        result = RunnerEvent.Result.GOOD
    event = _record(locked, job, result, summary=new, judgement=judgement, reason=reason or "")
    log.info("runner %s calibration (job %s): %s", runner.name, job.pk, reason or result)
    if reason is not None:
        runner_health.quarantine(locked, reason, check=event)


def job_failed(job: Job) -> None:
    """A job failed for good (in its transaction): a calibration's failure is a failed health check."""
    if job.pinned_runner_id is None or job.status != Job.Status.FAILED:
        return
    runner = Runner.objects.filter(pk=job.pinned_runner_id).only("name").first()
    if runner is None:
        return
    locked = runner_health.locked(runner.name)
    reason = f"health check failed: calibration job {job.pk} ({job.failure_kind}): {job.failure_message}"[:2000]
    event = _record(locked, job, RunnerEvent.Result.FAILED, reason=reason)
    runner_health.quarantine(locked, reason, check=event)


class CalibrationRow(TypedDict):
    created: datetime
    result: str
    job: int | None
    # The calibration's median of each metric, in the table's column order (None: not measured).
    values: list[float | None]
    reason: str


class CalibrationTable(TypedDict):
    metrics: list[str]
    rows: list[CalibrationRow]


def series_table(runner: Runner, limit: int = 10) -> CalibrationTable:
    """The runner's recent calibrations as a table: one row per calibration, one column per metric."""
    events = list(
        RunnerEvent.objects.filter(runner=runner, kind=RunnerEvent.Kind.CALIBRATION).order_by("-created", "-id")[:limit]
    )[::-1]
    metrics = sorted({m for e in events for m in e.summary})
    rows: list[CalibrationRow] = [
        {
            "created": e.created,
            "result": e.result,
            "job": e.job_id,
            "values": [e.summary.get(m) for m in metrics],
            "reason": e.reason,
        }
        for e in events
    ]
    return {"metrics": metrics, "rows": rows}


def release_by_name(
    name: str, by: Any, note: str, relearn: bool = False, calibrate: bool = True
) -> tuple[Runner, bool]:
    """An admin's release; queues a calibration at once (if the class can calibrate) so the runner proves itself."""
    with transaction.atomic():
        runner = runner_health.locked(name)
        event = runner_health.release(runner, by, note, relearn=relearn)
        if event is not None and calibrate:
            try:
                queue_for(runner)
            except CalibrationUnavailable as e:
                # Releasing must not depend on it: the schedule calibrates once a reference is set.
                log.info("runner %s released without a calibration: %s", runner.name, e)
    return runner, event is not None
