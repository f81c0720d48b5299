"""Task names are a contract between the domain, which sends them, and the task module, which registers them."""

from __future__ import annotations

from django.conf import settings

from kperf.celery import app
from kperf.core.lifecycle.task_names import Task


def registered() -> set[str]:
    app.loader.import_default_modules()
    return {name for name in app.tasks if name.startswith("kperf.")}


def test_every_name_the_domain_may_send_is_a_registered_task_and_every_task_has_a_name() -> None:
    assert {str(t) for t in Task} == registered()


def test_routes_and_the_beat_schedule_name_only_registered_tasks() -> None:
    tasks = registered()
    assert set(settings.CELERY_TASK_ROUTES) <= tasks
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} <= tasks
    # The builds queue gets exactly the build task; analyses go to their own queue.
    assert settings.CELERY_TASK_ROUTES[Task.BUILD_KERNEL] == {"queue": "builds"}
    assert settings.CELERY_TASK_ROUTES[Task.ANALYSE_SUBMISSION] == {"queue": "analysis"}
