"""The one table of status changes (kperf.core.lifecycle.states)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core.lifecycle import states
from kperf.core.models import BranchCommit, Job, KernelBuild, Submission

from tests.lab_fixtures import submission_ready_for_testing


@pytest.mark.parametrize("model", [Submission, BranchCommit, KernelBuild, Job])
def test_every_status_is_in_the_table_and_every_unfinished_one_has_a_way_out(model: Any) -> None:
    table = states.TRANSITIONS[model]
    assert set(table) == set(model.Status.values)
    final = {s for s, targets in table.items() if not targets}
    assert final <= {"done", "failed", "cancelled"}
    # From every status some final status can be reached.
    for start in table:
        seen, todo = {start}, [start]
        while todo:
            for nxt in table[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert seen & final, f"{model.__name__} {start} never ends"


@pytest.mark.django_db
def test_a_change_the_table_does_not_list_is_refused(alice: Any, qemu_class: Any, tmp_path: Path) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    with pytest.raises(states.IllegalTransition, match="testing -> done"):
        states.move(sub, Submission.Status.DONE)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.TESTING
    states.move(sub, Submission.Status.FAILED, error="gave up")
    with pytest.raises(states.IllegalTransition):
        states.move(sub, Submission.Status.TESTING)
    # A conditional update moves only the rows the table lets move.
    job = sub.jobs.first()
    assert job is not None
    assert states.move_where(Job.objects.filter(pk=job.pk), Job.Status.DONE) == 0
    assert states.move_where(Job.objects.filter(pk=job.pk), Job.Status.LEASED) == 1


def test_every_task_has_a_time_limit_and_bounded_retries() -> None:
    from django.conf import settings

    from kperf.celery import app
    from kperf.core import tasks  # noqa: F401  (registers the tasks)

    ours = {name: task for name, task in app.tasks.items() if name.startswith("kperf.")}
    assert "kperf.redrive" in ours and len(ours) >= 12
    for name, task in ours.items():
        assert task.soft_time_limit and task.time_limit and task.time_limit > task.soft_time_limit, name
        assert task.max_retries == settings.KPERF_TASK_MAX_RETRIES, name
    assert ours["kperf.build_kernel"].soft_time_limit == settings.KPERF_BUILD_TIME_LIMIT
    assert ours["kperf.analyse_submission"].soft_time_limit == settings.KPERF_ANALYSIS_TIME_LIMIT
    # The sweeper runs on beat's schedule.
    assert settings.CELERY_BEAT_SCHEDULE["redrive"]["task"] == "kperf.redrive"
