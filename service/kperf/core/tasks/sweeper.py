"""Re-drive work whose message was lost, whose worker died, or that stopped moving.

A beat task runs `redrive()` every KPERF_REDRIVE_SECONDS. The database is the
source of truth (kperf.core.lifecycle.dispatch): for every row that is not final and
has not moved within its deadline, the step that moves it is done again.
Every step is idempotent (kperf.core.lifecycle.owners), so re-driving a row that was
fine costs a few queries and changes nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from kperf.core.builds import apply_series, machines, queue
from kperf.core.lab import leases
from kperf.core.lifecycle import dispatch, owners
from kperf.core.lifecycle.task_names import Task
from kperf.core.models import BranchCommit, KernelBuild, Submission
from kperf.core.submissions import pipeline
from kperf.core.tracking import branches

log = logging.getLogger(__name__)


def _deadline(seconds: float) -> timedelta:
    return timedelta(seconds=max(settings.KPERF_REDRIVE_AFTER_SECONDS, seconds))


def lost_analysis_resent_within() -> float:
    """At most how many seconds after its worker died an analysis is sent again.

    The dead worker's lock goes when PostgreSQL sees its connection close
    (at once for a killed process); the owner has then not moved for
    ANALYSIS_LOST_AFTER_SECONDS at the latest that long after, and the next
    sweep, at most REDRIVE_SECONDS later, sends it (docs/operations.md,
    "Recovery").
    """
    return float(settings.KPERF_ANALYSIS_LOST_AFTER_SECONDS + settings.KPERF_REDRIVE_SECONDS)


def redrive() -> dict[str, int]:
    """One sweep; returns what it did, by kind, for the log and the tests."""
    now = timezone.now()
    done: Counter[str] = Counter()
    done["job leases expired"] = leases.expire_leases()
    done["builds taken back from dead workers"] = queue.expire_builds()
    done["uploads of ended builds removed"] = machines.sweep_uploads()

    # A queued build nobody took: its message was lost (broker down) or is
    # still waiting behind other builds. Re-sending is harmless either way
    # (the claim is conditional); `updated` is touched so each is re-sent at
    # most once per deadline.
    stale_builds = KernelBuild.objects.filter(
        status=KernelBuild.Status.QUEUED, updated__lt=now - _deadline(0)
    ).values_list("pk", flat=True)
    # Build machines that pull (KPERF_BUILDERS=remote) find queued rows themselves.
    for build_id in [] if queue.pulled() else list(stale_builds):
        if dispatch.send(Task.BUILD_KERNEL, build_id):
            KernelBuild.objects.filter(pk=build_id, status=KernelBuild.Status.QUEUED).update(updated=now)
            done["queued builds re-sent"] += 1

    # Fetching the tree: duplicates are safe (one fetch at a time per mirror,
    # then the conditional status check), so the deadline is the plain one.
    # A series a worker began applying waits for the task's hard time limit:
    # a duplicate would cost a kernel checkout and one of its bounded attempts.
    queued = Submission.objects.filter(status=Submission.Status.QUEUED)
    applying = queued.filter(series__apply_attempts__gt=0)
    stale = queued.filter(updated__lt=now - _deadline(0)).exclude(pk__in=applying.values("pk"))
    stale_applying = applying.filter(updated__lt=now - _deadline(apply_series.prepare_time_limit() + 60))
    for sub_id in list(stale.values_list("pk", flat=True)) + list(stale_applying.values_list("pk", flat=True)):
        if dispatch.send(Task.PREPARE_SUBMISSION, sub_id):
            Submission.objects.filter(pk=sub_id, status=Submission.Status.QUEUED).update(updated=now)
            done["submissions re-prepared"] += 1

    # Waiting for builds or jobs: the step is cheap, so it runs right here.
    for kind, model in ((pipeline.SUBMISSION, Submission), (branches.COMMIT, BranchCommit)):
        waiting = model.objects.filter(
            status__in=[owners.BUILDING, owners.TESTING], updated__lt=now - _deadline(0)
        ).values_list("pk", "status")
        for pk, status in list(waiting):
            owners.advance(kind, pk)
            if model.objects.filter(pk=pk).exclude(status=status).exists():
                done[f"{kind.name}s moved on"] += 1

        # An analysis holds its owner's lock while it runs, however long it
        # takes; a worker that died released it with its database session.
        # So an owner analysing, not moved for ANALYSIS_LOST_AFTER_SECONDS,
        # whose lock nobody holds, lost its analysis, or its message still
        # waits behind others, where the copy sent now returns at once.
        # Nothing here waits for the broker's visibility timeout (an hour),
        # which would also send again an analysis still running.
        analysing = model.objects.filter(
            status=owners.ANALYSING, updated__lt=now - timedelta(seconds=settings.KPERF_ANALYSIS_LOST_AFTER_SECONDS)
        ).values_list("pk", flat=True)
        for pk in list(analysing):
            if owners.analysis_running(kind, pk):
                continue
            if dispatch.send(kind.analyse_task, pk):
                model.objects.filter(pk=pk, status=owners.ANALYSING).update(updated=now)
                done[f"{kind.name} analyses re-sent"] += 1
    # The scratch checkouts (about a gigabyte each) of series applies whose worker was killed.
    done["series scratch repositories removed"] = apply_series.sweep_scratch()
    changed = {k: v for k, v in done.items() if v}
    if changed:
        log.info("sweep: %s", ", ".join(f"{k}: {v}" for k, v in sorted(changed.items())))
    return changed
