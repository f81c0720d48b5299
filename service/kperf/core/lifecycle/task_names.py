"""The names of kperf's Celery tasks, in one place.

The domain queues work by name (kperf.core.lifecycle.dispatch) and never imports the
task module, which imports the domain; kperf.core.tasks registers one task
under each of these names, the settings route and schedule them by these
names, and service/tests/core/lifecycle/test_task_names.py checks that every name here is
a registered task and every registered task is named here. `dispatch`
takes only a `Task`, so mypy refuses a name typed by hand.
"""

from __future__ import annotations

from enum import StrEnum


class Task(StrEnum):
    PREPARE_SUBMISSION = "kperf.prepare_submission"
    BUILD_KERNEL = "kperf.build_kernel"
    ADVANCE_SUBMISSION = "kperf.advance_submission"
    ANALYSE_SUBMISSION = "kperf.analyse_submission"
    LOOK_SUBMISSION = "kperf.look_submission"
    SUMMARISE_JOB = "kperf.summarise_job"
    EXPIRE_LEASES = "kperf.expire_leases"
    REDRIVE = "kperf.redrive"
    POLL_TRACKED_BRANCHES = "kperf.poll_tracked_branches"
    POLL_BRANCH = "kperf.poll_branch"
    ADVANCE_BRANCH_COMMIT = "kperf.advance_branch_commit"
    ANALYSE_BRANCH_COMMIT = "kperf.analyse_branch_commit"
    REANALYSE_BRANCH = "kperf.reanalyse_branch"
    SEND_ALERTS = "kperf.send_alerts"
    POLL_MAILBOX = "kperf.poll_mailbox"
    QUEUE_CALIBRATIONS = "kperf.queue_calibrations"
