"""Celery tasks: short, named, taking ids, each calling one domain function.

Every task has a time limit and retries temporary database errors with
backoff, a bounded number of times; what still fails is re-driven by the
sweeper (kperf.core.tasks.sweeper), because the database, not the broker, holds
the work (kperf.core.lifecycle.dispatch).
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import task_postrun, task_prerun
from django.conf import settings
from django.db import InterfaceError, OperationalError

from kperf.core.builds import apply_series, queue
from kperf.core.lab import calibration, leases
from kperf.core.lifecycle import owners, states
from kperf.core.lifecycle.task_names import Task
from kperf.core.mail import alerts, mailbox
from kperf.core.results import summaries
from kperf.core.submissions import pipeline
from kperf.core.tasks import sweeper
from kperf.core.tracking import branches

# Options shared by every task. soft_time_limit raises inside the task
# (builds stop their compiler, analyses fail their owner with a message);
# time_limit kills the process if that did not end it.
_RETRY: dict[str, Any] = {
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 5,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": settings.KPERF_TASK_MAX_RETRIES,
}


def _limits(seconds: int) -> dict[str, Any]:
    return {"soft_time_limit": seconds, "time_limit": seconds + 60, **_RETRY}


# Each task's status changes are recorded as the task's (kperf.core.lifecycle.states).
_ACTOR_TOKENS: dict[str, Any] = {}


@task_prerun.connect
def _name_actor(task_id: str = "", task: Any = None, **_: Any) -> None:
    _ACTOR_TOKENS[task_id] = states.actor_token(f"task {getattr(task, 'name', '?')} ({task_id[:8]})")


@task_postrun.connect
def _forget_actor(task_id: str = "", **_: Any) -> None:
    token = _ACTOR_TOKENS.pop(task_id, None)
    if token is not None:
        states.reset_actor(token)


_DEFAULT = _limits(settings.KPERF_TASK_TIME_LIMIT)
_GIT = _limits(settings.KPERF_GIT_TIMEOUT + 120)


# Fetching the tree, and for a patch series a checkout, git am and a fetch back.
@shared_task(name=Task.PREPARE_SUBMISSION, **_limits(apply_series.prepare_time_limit()))
def prepare_submission(sub_id: int) -> None:
    pipeline.prepare_submission(sub_id)


@shared_task(name=Task.BUILD_KERNEL, **_limits(settings.KPERF_BUILD_TIME_LIMIT))
def build_kernel(build_id: int) -> None:
    queue.run_build(build_id)


@shared_task(name=Task.ADVANCE_SUBMISSION, **_DEFAULT)
def advance_submission(sub_id: int) -> None:
    owners.advance(pipeline.SUBMISSION, sub_id)


@shared_task(name=Task.ANALYSE_SUBMISSION, **_limits(settings.KPERF_ANALYSIS_TIME_LIMIT))
def analyse_submission(sub_id: int) -> None:
    owners.analyse(pipeline.SUBMISSION, sub_id)


@shared_task(name=Task.LOOK_SUBMISSION, **_limits(settings.KPERF_ANALYSIS_TIME_LIMIT))
def look_submission(sub_id: int) -> None:
    owners.look(pipeline.SUBMISSION, sub_id)


@shared_task(name=Task.SUMMARISE_JOB, **_limits(settings.KPERF_ANALYSIS_TIME_LIMIT))
def summarise_job(job_id: int) -> None:
    summaries.job_stored(job_id)


@shared_task(name=Task.EXPIRE_LEASES, **_DEFAULT)
def expire_leases() -> int:
    return leases.expire_leases()


@shared_task(name=Task.REDRIVE, **_DEFAULT)
def redrive() -> dict[str, int]:
    return sweeper.redrive()


@shared_task(name=Task.POLL_TRACKED_BRANCHES, **_DEFAULT)
def poll_tracked_branches() -> int:
    return branches.poll_all()


@shared_task(name=Task.POLL_BRANCH, **_GIT)
def poll_branch(branch_id: int, backfill: int = 0) -> None:
    branches.poll_branch(branch_id, backfill)


@shared_task(name=Task.ADVANCE_BRANCH_COMMIT, **_DEFAULT)
def advance_branch_commit(commit_id: int) -> None:
    owners.advance(branches.COMMIT, commit_id)


@shared_task(name=Task.ANALYSE_BRANCH_COMMIT, **_limits(settings.KPERF_ANALYSIS_TIME_LIMIT))
def analyse_branch_commit(commit_id: int) -> None:
    owners.analyse(branches.COMMIT, commit_id)


@shared_task(name=Task.REANALYSE_BRANCH, **_limits(settings.KPERF_ANALYSIS_TIME_LIMIT))
def reanalyse_branch(branch_id: int) -> None:
    branches.reanalyse_branch(branch_id)


@shared_task(name=Task.SEND_ALERTS, **_DEFAULT)
def send_alerts() -> int:
    return alerts.send_pending()


@shared_task(name=Task.POLL_MAILBOX, **_DEFAULT)
def poll_mailbox() -> int:
    # Replies to alerts in the IMAP mailbox (docs/triage.md); nothing to do without KPERF_IMAP_HOST.
    result = mailbox.poll()
    return result.read if result is not None else 0


@shared_task(name=Task.QUEUE_CALIBRATIONS, **_DEFAULT)
def queue_calibrations() -> int:
    return calibration.queue_due()
