"""The one life of everything that owns jobs: building -> testing -> analysing -> done.

A submission (base and head of a developer's branch) and a tracked branch's
commit (one kernel of a series) own builds and jobs the same way; only what
they build, how they queue jobs and how they are analysed differ. Those
differences are an `OwnerKind`, which each kind's own module declares
(`kperf.core.submissions.pipeline.SUBMISSION`,
`kperf.core.tracking.branches.COMMIT`) and hands to the steps here: this
module imports neither. The life's steps are all here: `start` (into
building), `advance` (building -> testing -> analysing), `analyse`, `finish`
(done) and `fail` (failed, with the cancellation of the queued jobs nobody
needs any more); every status change itself goes through
`kperf.core.lifecycle.states`. A tracked commit starts life already building
(kperf.core.tracking.bisection.add_commits creates it so and queues its
advance).

Every step is idempotent: it locks the owner's row, looks at its status and
at its builds and jobs, and does nothing when there is nothing to do. So a
step delivered twice (a redelivered task, the sweeper re-driving a row)
changes nothing the first one did not.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import Exists, Model, OuterRef
from django.utils import timezone

from kperf.core.lifecycle import dispatch, states
from kperf.core.lifecycle.task_names import Task
from kperf.core.models import Job, KernelBuild, SharedJob, Submission

log = logging.getLogger(__name__)

BUILDING, TESTING, ANALYSING, DONE, FAILED = "building", "testing", "analysing", "done", "failed"

# Errors of the database connection: temporary, so the task is retried (and
# the sweeper re-drives the row later) instead of the owner being failed.
TEMPORARY = (OperationalError, InterfaceError)


@dataclass(frozen=True)
class OwnerKind:
    name: str
    model: type[Model]
    # The Job field that points at an owner of this kind.
    job_field: str
    advance_task: Task
    analyse_task: Task
    # (what to call it in a message, build) for every build the owner needs.
    builds: Callable[[Any], list[tuple[str, KernelBuild]]]
    queue_jobs: Callable[[Any, list[tuple[str, KernelBuild]]], None]
    # What a failed owner sets off besides the cancelled jobs: a
    # submission's result mail, a branch's new look for a bisection that
    # waited on the commit.
    failed: Callable[[Any], None]
    job_failed: Callable[[Any, Job], str]
    analyse: Callable[[int], None]
    # Every job whose boots the owner waits for: its own, and for a
    # submission the base boots it shares (kperf.core.lab.sharing).
    jobs: Callable[[Any], list[Job]]
    # Called by `look` when some of those jobs are done and others still run
    # (caller holds the row lock): a submission's interim looks, which queue
    # a comparison's next boots without waiting for the rest
    # (kperf.core.submissions.looks). None: nothing until all are done.
    interim: Callable[[Any, list[Job]], None] | None = None
    # The task `advance` sends for such a look: statistics run on the
    # analysis queue, never inside the advance that a runner's upload sets off.
    look_task: Task | None = None
    # What a finished owner sets off (caller's transaction, after the move to
    # done): a submission's result mail and its reply token. The analysis
    # only stores verdicts; the life's step sends the news.
    finished: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        _KINDS[self.model] = self


# Each owner model's kind, filled as the kinds are declared: `finish` is handed the row alone.
_KINDS: dict[type[Model], OwnerKind] = {}


def build_failed_message(what: str, build: KernelBuild) -> str:
    head = f"the {what} ({build.sha[:12]}, {build.arch})"
    if build.failure_kind == KernelBuild.FailureKind.INFRA:
        return (
            f"{head} could not be built: the build machine failed on every attempt ({build.attempt}): "
            f"{build.error or 'see the build log'}. This is not the kernel's fault: once an operator "
            "has fixed the build machine, submit again and the kernel is built again"
        )
    return f"{head} failed to build: {build.error or 'see the build log'}"


def start(kind: OwnerKind, obj: Any, **fields: Any) -> None:
    """Into building, with `fields` saved alongside; its advance is queued once the
    transaction commits (caller holds the row lock)."""
    states.move(obj, BUILDING, **fields)
    dispatch.after_commit(kind.advance_task, obj.pk)


def finish(obj: Any, **fields: Any) -> None:
    """Done: the analysis stored its answer (caller holds the row lock); the kind's `finished` follows,
    in the same transaction, so the verdict and its mail commit together or not at all."""
    states.move(obj, DONE, finished=timezone.now(), **fields)
    kind = _KINDS.get(type(obj))
    if kind is not None and kind.finished is not None:
        kind.finished(obj)


def fail(kind: OwnerKind, obj: Any, message: str) -> None:
    """Failed, saying why; the queued jobs it no longer needs are cancelled (caller holds the row lock).

    A queued job that another live submission shares (kperf.core.lab.sharing)
    still runs for it; a sharer that had linked one of the cancelled jobs is
    advanced, so it queues a boot of its own in place of it.
    """
    states.move(obj, FAILED, error=message, finished=timezone.now())
    shared = SharedJob.objects.filter(job=OuterRef("pk")).exclude(submission__status__in=Submission.FINAL)
    own = Job.objects.filter(**{kind.job_field: obj})
    states.move_where(own.filter(status=Job.Status.QUEUED).exclude(Exists(shared)), Job.Status.CANCELLED)
    cancelled = own.filter(status=Job.Status.CANCELLED).values("pk")
    for sharer in SharedJob.objects.filter(job__in=cancelled).values_list("submission_id", flat=True).distinct():
        dispatch.after_commit(Task.ADVANCE_SUBMISSION, sharer)
    kind.failed(obj)
    log.warning("%s %s failed: %s", kind.name, obj.pk, message)


def advance(kind: OwnerKind, pk: int) -> None:
    """Move an owner on when its builds or jobs have finished."""
    with transaction.atomic():
        obj: Any = kind.model._default_manager.select_for_update().filter(pk=pk).first()
        if obj is None:
            return
        if obj.status == BUILDING:
            builds = kind.builds(obj)
            failed = [(what, b) for what, b in builds if b.status == KernelBuild.Status.FAILED]
            if failed:
                fail(kind, obj, build_failed_message(*failed[0]))
            elif builds and all(b.status == KernelBuild.Status.DONE for _, b in builds):
                kind.queue_jobs(obj, builds)
                states.move(obj, TESTING)
        elif obj.status == TESTING:
            jobs = kind.jobs(obj)
            hard = [j for j in jobs if j.status == Job.Status.FAILED]
            if hard:
                fail(kind, obj, kind.job_failed(obj, hard[0]))
            elif jobs and all(j.status == Job.Status.DONE for j in jobs):
                states.move(obj, ANALYSING)
                dispatch.after_commit(kind.analyse_task, pk)
            elif kind.look_task is not None and any(j.status == Job.Status.DONE for j in jobs):
                dispatch.after_commit(kind.look_task, pk)


def look(kind: OwnerKind, pk: int) -> None:
    """An interim look at an owner still testing: the comparisons whose boots are all in are judged,
    and an inconclusive one gets its next boots now (kind.interim; sent by `advance`)."""
    if kind.interim is None:
        return
    with transaction.atomic():
        obj: Any = kind.model._default_manager.select_for_update().filter(pk=pk).first()
        if obj is None or obj.status != TESTING:
            return  # finished, failed or analysing since the look was sent: the analysis looks at all
        jobs = kind.jobs(obj)
        statuses = {j.status for j in jobs}
        # All done or one failed: the advance moves it on instead (and an analysis looks at everything).
        if Job.Status.DONE in statuses and Job.Status.FAILED not in statuses and statuses != {Job.Status.DONE}:
            kind.interim(obj, jobs)


def _analysis_lock(kind: OwnerKind, pk: int) -> tuple[int, int]:
    """The PostgreSQL advisory lock (two keys) an analysis of this owner holds while it runs."""
    return zlib.crc32(f"kperf.analysis.{kind.name}".encode()) - (1 << 31), pk % (1 << 31)


def _try_lock(key: tuple[int, int]) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", list(key))
        row = cursor.fetchone()
    return bool(row and row[0])


def _unlock(key: tuple[int, int]) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", list(key))
    except DatabaseError as e:  # the connection broke: the lock went with it
        log.warning("analysis lock %r not released: %s", key, e)


def analysis_running(kind: OwnerKind, pk: int) -> bool:
    """Whether a worker is analysing this owner right now.

    An analysis holds a session advisory lock from start to end (`analyse`).
    PostgreSQL drops it with the session, so a worker killed mid-analysis
    (SIGKILL, out of memory, its container stopped) releases it as soon as
    the server sees the connection close, while one that is merely slow
    keeps it however long it takes: the sweeper re-sends only the former.
    """
    key = _analysis_lock(kind, pk)
    if not _try_lock(key):
        return True
    # Held for a moment only; an analysis starting in that moment returns at
    # once, as from a duplicate, and the sweeper, having found the lock free,
    # sends the owner's analysis again.
    _unlock(key)
    return False


def analyse(kind: OwnerKind, pk: int) -> None:
    """Analyse an owner, at most one worker at a time; an analysis that raises
    fails the owner, saying so, instead of leaving it analysing."""
    key = _analysis_lock(kind, pk)
    if not _try_lock(key):
        # A second delivery (the sweeper's re-send of a message that was only
        # queued, or the broker's of one whose ack was lost) while the first
        # runs: that one finishes the job, this worker is free at once.
        log.info("%s %s: another worker is analysing it", kind.name, pk)
        return
    try:
        _analyse(kind, pk)
    finally:
        _unlock(key)


def _analyse(kind: OwnerKind, pk: int) -> None:
    try:
        kind.analyse(pk)
    except TEMPORARY:
        raise  # the database went away: the task is retried, then the sweeper re-drives it
    except Exception as exc:
        log.exception("%s %s: the analysis failed", kind.name, pk)
        with transaction.atomic():
            obj: Any = kind.model._default_manager.select_for_update().filter(pk=pk).first()
            if obj is not None and obj.status == ANALYSING:
                fail(
                    kind,
                    obj,
                    f"the analysis failed ({type(exc).__name__}: {str(exc)[:500]}). The samples are stored; "
                    "this is a kperf fault, with its traceback in the analysis worker's log: tell an admin",
                )
