"""The runner side of the lab: heartbeats, claims, leases, results, failures.

A runner may only touch a job it holds: the job must be leased to it, at the
attempt it names. Every state change happens under a row lock.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from kperf.core.lab import calibration, sharing
from kperf.core.lab.uploads import ProtocolError, ResultsUpload, SampleRow, checked
from kperf.core.lifecycle import dispatch, states
from kperf.core.lifecycle.task_names import Task
from kperf.core.models import BootRecord, Clock, Job, KernelBuild, MetricDef, Runner, Sample
from kperf.core.models.accounts import hash_token
from kperf_runner import benchmarks as registry

log = logging.getLogger(__name__)


def runner_for_token(token: str) -> Runner | None:
    if not token.startswith(Runner.TOKEN_PREFIX):
        return None
    return Runner.objects.select_related("machine_class").filter(token_hash=hash_token(token)).first()


def heartbeat(runner: Runner, data: dict[str, Any]) -> None:
    arch, mclass = data.get("arch"), data.get("machine_class")
    if arch and arch != runner.machine_class.arch:
        raise ProtocolError(
            409, "mismatch", f"runner {runner.name} is registered for {runner.machine_class.arch}, not {arch}"
        )
    if mclass and mclass != runner.machine_class.name:
        raise ProtocolError(
            409,
            "mismatch",
            f"runner {runner.name} is registered in machine class {runner.machine_class.name}, not {mclass}; "
            "an operator must re-register it to move it",
        )
    runner.last_heartbeat = timezone.now()
    runner.version = str(data.get("version", ""))[:32]
    runner.hostname = str(data.get("hostname", ""))[:255]
    caps = data.get("capabilities")
    runner.capabilities = caps if isinstance(caps, dict) else {}
    runner.save(update_fields=["last_heartbeat", "version", "hostname", "capabilities"])


def claim(runner: Runner) -> Job | None:
    """Lease the next queued job of the runner's machine class, or None."""
    if runner.health != Runner.Health.GOOD:
        return None
    now = timezone.now()
    clocks = runner.clocks()
    # A runner sharing its host with a build worker measures the compiler too,
    # so while a kernel builds it takes no wall-clock job. The instruction
    # clock counts guest instructions whatever the host does (its boots repeat
    # one another under build load: docs/runners.md), so those jobs run on.
    # Only a build whose worker is alive (its lease is being extended) holds
    # the runner back: a build left `building` by a dead worker never does.
    if (
        runner.yields_to_builds
        and KernelBuild.objects.filter(status=KernelBuild.Status.BUILDING, lease_expires__gt=now).exists()
    ):
        clocks = [c for c in clocks if c == Clock.INSTRUCTIONS]
        if not clocks:
            return None
    with transaction.atomic():
        # The runner's row first, then the job: the order a quarantine takes
        # (kperf.core.lab.runner_health), so the two never deadlock; and its health
        # read under the lock, so a quarantine that committed after this
        # request authenticated hands out nothing. NO KEY UPDATE: rows that
        # only reference the runner (its events, jobs) are not held up.
        health = (
            Runner.objects.select_for_update(no_key=True).filter(pk=runner.pk).values_list("health", flat=True).first()
        )
        if health != Runner.Health.GOOD:
            return None
        # SKIP LOCKED: two runners claiming at once each get a different job
        # instead of queueing behind each other's lock.
        job = (
            Job.objects.select_for_update(skip_locked=True, of=("self",))
            # The payload the runner gets names the build and class: one query, not three.
            .select_related("build", "machine_class")
            .filter(status=Job.Status.QUEUED, machine_class=runner.machine_class, clock__in=clocks)
            # A job pinned to a runner (a calibration) is that runner's alone.
            .filter(Q(pinned_runner__isnull=True) | Q(pinned_runner=runner))
            # The runner's own calibration first (its health check decides
            # whether it should measure anything else), then developers'
            # submissions, oldest first (NULLs sort last: tracked-branch jobs
            # run when no submission waits).
            .order_by(F("pinned_runner_id").asc(nulls_last=True), "submission_id", "branch_commit_id", "seq", "id")
            .first()
        )
        if job is None:
            return None
        states.set_status(job, Job.Status.LEASED)
        job.runner = runner
        job.lease_expires = now + timedelta(seconds=settings.KPERF_LEASE_SECONDS)
        job.started = job.started or now
        job.phase = "claimed"
        job.progress = f"claimed by {runner.name}"
        job.save(update_fields=["status", "runner", "lease_expires", "started", "phase", "progress"])
        # In the claim's transaction: one commit (one WAL flush) per claim, not two.
        Runner.objects.filter(pk=runner.pk).update(last_heartbeat=now)
    runner.last_heartbeat = now
    log.info("job %s (attempt %s) leased to %s", job.pk, job.attempt, runner.name)
    return job


def _held(runner: Runner, job_id: int, attempt: Any) -> Job:
    """The job, locked, if this runner holds it at this attempt; else ProtocolError."""
    job = Job.objects.select_for_update().filter(pk=job_id).first()
    if job is None:
        raise ProtocolError(404, "not-found", f"there is no job {job_id}")
    if not isinstance(attempt, int) or isinstance(attempt, bool):
        raise ProtocolError(422, "invalid", "attempt must be the job's attempt number (an integer)")
    if job.runner_id != runner.pk or job.attempt != attempt or job.status != Job.Status.LEASED:
        if job.status == Job.Status.DONE and job.runner_id == runner.pk and job.attempt == attempt:
            raise ProtocolError(
                409, "duplicate", f"results for job {job_id} attempt {attempt} were already recorded; nothing changed"
            )
        raise ProtocolError(
            409,
            "not-held",
            f"runner {runner.name} does not hold job {job_id} at attempt {attempt} "
            f"(the job is {job.status} at attempt {job.attempt}); drop it",
        )
    return job


def _append_console(job: Job, text: str) -> None:
    if not text:
        return
    limit = settings.KPERF_CONSOLE_LOG_MAX_BYTES
    combined = job.console_log + text
    # Keep the end: that is where a panic or a failing benchmark shows.
    job.console_log = combined[-limit:] if len(combined) > limit else combined


def progress(runner: Runner, job_id: int, data: dict[str, Any]) -> Job:
    with transaction.atomic():
        job = _held(runner, job_id, data.get("attempt"))
        # quiet_seconds (checked 0..21600 by the schema): the runner will not
        # call again for that long (a kexec into the test kernel and back).
        quiet = data.get("quiet_seconds") or 0
        quiet = quiet if isinstance(quiet, int) and 0 <= quiet <= 21600 else 0
        wanted = timezone.now() + timedelta(seconds=settings.KPERF_LEASE_SECONDS + quiet)
        # Never shortened: a keepalive sent after the call that announced a
        # quiet spell (the agent still waiting for the kexec to happen) must
        # not cut the time the machine was promised for the boot and the way back.
        job.lease_expires = max(job.lease_expires, wanted) if job.lease_expires else wanted
        job.phase = str(data.get("phase", ""))[:32]
        boot, boots = data.get("boot"), data.get("boots")
        message = str(data.get("message", ""))
        if isinstance(boot, int) and isinstance(boots, int) and not message:
            message = f"boot {boot} of {boots}"
        job.progress = message[:200]
        _append_console(job, str(data.get("console", "")))
        job.save(update_fields=["lease_expires", "phase", "progress", "console_log"])
    return job


def _define_metrics(job: Job) -> None:
    """Make sure every metric of the job's benchmark has its unit and direction stored.

    One query when nothing changed (the usual case): a pagealloc job has 195
    metrics, and one update_or_create each cost two round trips per metric
    on every upload.
    """
    wanted = {
        m.name: (job.benchmark, m.unit, m.higher_is_better)
        for m in registry.get_benchmark(job.benchmark).metrics(job.params)
    }
    # Tuples, not model instances: two hundred of them on every upload add up.
    stored = {
        name: (bench, unit, hib)
        for name, bench, unit, hib in MetricDef.objects.filter(name__in=list(wanted)).values_list(
            "name", "benchmark", "unit", "higher_is_better"
        )
    }
    missing = [
        MetricDef(name=n, benchmark=b, unit=u, higher_is_better=h) for n, (b, u, h) in wanted.items() if n not in stored
    ]
    if missing:
        # Two uploads defining the same new metric at once: the second one's
        # rows are dropped by the unique name, not an error.
        MetricDef.objects.bulk_create(missing, ignore_conflicts=True)
    for name, (b, u, h) in wanted.items():
        if name in stored and stored[name] != (b, u, h):
            # Rare (a unit fixed in a new release): one update per metric that changed.
            MetricDef.objects.filter(name=name).update(benchmark=b, unit=u, higher_is_better=h)


def _copy_samples(boot_record_id: int, rows: list[SampleRow]) -> None:
    """Store one boot's samples with PostgreSQL's COPY: thousands of rows per
    upload, where building a model instance per row cost more than the
    database did."""
    table = Sample._meta.db_table
    with connection.cursor() as cursor:
        raw = cursor.cursor  # the psycopg cursor under Django's wrapper
        with raw.copy(f"COPY {table} (boot_record_id, metric, iteration, value) FROM STDIN") as copy:
            for metric, iteration, value in rows:
                copy.write_row((boot_record_id, metric, iteration, value))


def record_results(runner: Runner, job_id: int, upload: ResultsUpload) -> Job:
    with transaction.atomic():
        job = _held(runner, job_id, upload.attempt)
        boots = checked(job, upload)
        _define_metrics(job)
        for boot in boots:
            record = BootRecord.objects.create(
                job=job,
                attempt=job.attempt,
                boot=boot.boot,
                environment=boot.environment,
                raw_output=boot.raw_output,
                counters=boot.counters,
            )
            _copy_samples(record.pk, boot.samples)
        states.set_status(job, Job.Status.DONE)
        job.finished = timezone.now()
        job.phase = "done"
        job.progress = ""
        job.lease_expires = None
        if upload.console_log:
            job.console_log = ""
            _append_console(job, upload.console_log)
        job.save()
        # The summaries (docs/history.md) are brought up to date by a task once
        # this commits, not inside the upload: the runner waits for neither, and
        # a summary the task has not written yet is caught up by the next read.
        dispatch.after_commit(Task.SUMMARISE_JOB, job.pk)
        _advance_owner(job)
        # Judges a calibration (and may quarantine), or marks a job a
        # quarantined runner finished: in this transaction, so never lost.
        calibration.job_done(runner, job)
    log.info("job %s: results recorded from %s", job_id, runner.name)
    return job


def record_failure(runner: Runner, job_id: int, data: dict[str, Any]) -> Job:

    kind = data.get("kind")
    if kind not in Job.FailureKind.values:
        raise ProtocolError(422, "invalid", f"kind must be one of {', '.join(Job.FailureKind.values)}, not {kind!r}")
    message = str(data.get("message", ""))[:2000] or "no message"
    with transaction.atomic():
        job = _held(runner, job_id, data.get("attempt"))
        job.console_log = ""
        _append_console(job, str(data.get("log", "")))
        job.failure_kind = kind
        job.failure_message = message
        if kind == Job.FailureKind.INFRA and job.attempt < job.max_attempts:
            _requeue(job, f"attempt {job.attempt} failed on {runner.name}: {message}")
        else:
            states.set_status(job, Job.Status.FAILED)
            job.finished = timezone.now()
            job.lease_expires = None
            job.phase = "failed"
        job.save()
        if job.status == Job.Status.FAILED:
            _advance_owner(job)
            calibration.job_failed(job)  # a failed calibration is a failed health check
    log.warning("job %s: %s failure reported by %s: %s", job_id, kind, runner.name, message)
    return job


def _advance_owner(job: Job) -> None:
    """After the transaction commits, let the submission or branch commit that owns a finished job move on."""
    if job.submission_id is not None:
        dispatch.after_commit(Task.ADVANCE_SUBMISSION, job.submission_id)
    if job.branch_commit_id is not None:
        dispatch.after_commit(Task.ADVANCE_BRANCH_COMMIT, job.branch_commit_id)
    # Submissions that share the boot wait for it as much as its owner does.
    for sharer in sharing.sharer_ids([job.pk]):
        dispatch.after_commit(Task.ADVANCE_SUBMISSION, sharer)


def _requeue(job: Job, why: str) -> None:
    """Back to the queue for another attempt (the caller saves); a calibration
    its runner cannot take again is cancelled instead."""
    states.set_status(job, Job.Status.QUEUED)
    job.attempt += 1
    job.runner = None
    job.lease_expires = None
    job.phase = "requeued"
    job.progress = why[:200]
    if job.pinned_runner_id is None:
        return
    # Locked: a quarantine committing now cancels only the jobs it sees
    # queued, and this one is not yet; so it waits for the quarantine or the
    # quarantine for it, and either way the job does not stay queued. (A
    # quarantine never waits for a leased job, so job-then-runner is safe.)
    pinned = (
        Runner.objects.select_for_update(of=("self",))
        .select_related("machine_class")
        .filter(pk=job.pinned_runner_id)
        .first()
    )
    if pinned is None:
        return
    if pinned.health != Runner.Health.GOOD:
        cancel = (
            f"cancelled after {why}: runner {pinned.name} is quarantined ({pinned.health_reason}); "
            "releasing it queues a fresh calibration"
        )
    elif pinned.machine_class_id != job.machine_class_id or job.clock not in pinned.clocks():
        cancel = f"{calibration.stale_reason(pinned, job)} (after {why})"
    else:
        return
    states.set_status(job, Job.Status.CANCELLED)
    job.finished = timezone.now()
    job.phase = "cancelled"
    job.failure_message = cancel[:2000]
    job.progress = cancel[:200]


def expire_leases() -> int:
    """Put jobs whose lease ran out back in the queue, or fail them after the last attempt."""
    now = timezone.now()
    changed = 0
    with transaction.atomic():
        expired = Job.objects.select_for_update(skip_locked=True).filter(
            status=Job.Status.LEASED, lease_expires__lt=now
        )
        for job in expired:
            holder = job.runner.name if job.runner else "a runner"
            if job.attempt < job.max_attempts:
                _requeue(job, f"lease expired: {holder} stopped reporting on attempt {job.attempt}")
            else:
                states.set_status(job, Job.Status.FAILED)
                job.failure_kind = Job.FailureKind.INFRA
                job.failure_message = (
                    f"lease expired on the last attempt ({job.attempt} of {job.max_attempts}); "
                    f"{holder} stopped reporting: check the runner"
                )
                job.finished = now
                job.lease_expires = None
                _advance_owner(job)
            job.save()
            calibration.job_failed(job)
            changed += 1
            log.warning("job %s: lease of %s expired, now %s", job.pk, holder, job.status)
    return changed


def job_payload(job: Job) -> dict[str, Any]:
    build = job.build
    return {
        "id": job.pk,
        "attempt": job.attempt,
        "lease_seconds": settings.KPERF_LEASE_SECONDS,
        "lease_expires": job.lease_expires.isoformat() if job.lease_expires else None,
        "benchmark": job.benchmark,
        "grid": job.grid,
        "params": job.params,
        "boots": job.boots,
        "arch": build.arch,
        "machine_class": job.machine_class.name,
        "clock": job.clock,
        # The vCPUs a QEMU runner boots (0: its own default); the class's when queued.
        "vcpus": job.vcpus,
        "numa_nodes": job.numa_nodes,
        # cmdline: words the runner appends last to its own command line; thp:
        # the mode the runner asks init to set ('': leave the kernel's default).
        "kernel": {"build_id": build.pk, "sha": build.sha, "cmdline": job.boot_params, "thp": job.thp},
        "artifacts": [
            {
                "name": name,
                "url": f"/api/v1/runner/builds/{build.pk}/artifacts/{name}",
                "sha256": meta["sha256"],
                "size": meta["size"],
            }
            for name, meta in sorted(build.artifacts.items())
        ],
    }


def may_download(runner: Runner, build_id: int) -> bool:
    return Job.objects.filter(build_id=build_id, runner=runner, status=Job.Status.LEASED).exists()
