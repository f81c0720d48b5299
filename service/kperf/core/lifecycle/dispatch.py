"""Hand work to the workers without ever losing it or failing a request.

Every piece of work kperf queues is first a row in PostgreSQL (a submission
in `queued`, a build in `queued`, a job done whose owner must move on). The
Celery message is only a nudge: when the broker is down the send is logged
and dropped, the request that stored the row still answers success, and the
sweeper (`kperf.core.tasks.sweeper`, a beat task) re-sends the work once the row
has not moved within its deadline. So the domain never imports the task
module: it names tasks, and Celery routes them by name.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.db import transaction

from kperf.celery import app
from kperf.core.lifecycle.task_names import Task

log = logging.getLogger(__name__)

# Publishing retries briefly: a request must not hang on a dead broker for
# long, and anything not sent is re-sent by the sweeper.
_PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}


def send(task: Task, *args: Any, countdown: float | None = None) -> bool:
    """Queue `task` (its registered name, e.g. Task.BUILD_KERNEL); False if the broker did not take it."""
    try:
        app.send_task(task, args=args, countdown=countdown, retry=True, retry_policy=_PUBLISH_RETRY)
    except Exception as exc:  # any failure to publish is the sweeper's to repair
        log.warning("could not queue %s%r (%s: %s); the sweeper will re-send it", task, args, type(exc).__name__, exc)
        return False
    return True


def after_commit(task: Task, *args: Any, countdown: float | None = None) -> None:
    """Queue `task` once the current transaction commits, so a worker never sees a row that is not there yet."""
    transaction.on_commit(partial(send, task, *args, countdown=countdown))
