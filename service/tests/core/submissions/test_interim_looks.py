"""Interim looks: a comparison whose boots are all in takes its look while others still run."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from kperf.core.lifecycle import owners
from kperf.core.lifecycle.task_names import Task
from kperf.core.models import Job, MachineClass, Submission
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION

from tests.conftest import Api, qemu_runner
from tests.lab_fixtures import results_body, submission_ready_for_testing

pytestmark = pytest.mark.django_db

# Base and head draw the same values in another order: too noisy to decide at the first look.
NOISY = [1000.0, 900.0, 1300.0, 800.0, 800.0, 1300.0, 900.0, 1000.0]


def run_queued(api: Api, values: Iterator[float]) -> int:
    ran = 0
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job, next(values))).status_code == 200
        ran += 1
    return ran


def take_look(sub_id: int) -> None:
    """What the workers do after a job is done: the advance, then the look it sends to the analysis queue."""
    owners.advance(SUBMISSION, sub_id)
    owners.look(SUBMISSION, sub_id)


def test_the_advance_sends_the_look_to_the_analysis_queue_and_takes_none_itself(
    alice: Any, qemu_class: MachineClass, tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    slow = MachineClass.objects.create(name="qemu-x86_64-slow", arch="x86_64")
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    qemu_runner("slow-1", slow)
    _, fast_api = qemu_runner("fast-1", qemu_class)
    assert run_queued(fast_api, iter(NOISY)) == 8
    with django_capture_on_commit_callbacks() as sent:
        owners.advance(SUBMISSION, sub.pk)
    sub.refresh_from_db()
    assert sub.interim_looks == [] and sub.reruns == []
    assert [(c.args[0], c.args[1:]) for c in sent if isinstance(c, partial)] == [(Task.LOOK_SUBMISSION, (sub.pk,))]
    assert settings.CELERY_TASK_ROUTES[Task.LOOK_SUBMISSION] == {"queue": "analysis"}
    # A look that arrives once the submission has moved on takes nothing.
    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.ANALYSING)
    owners.look(SUBMISSION, sub.pk)
    sub.refresh_from_db()
    assert sub.interim_looks == []


def test_an_inconclusive_comparison_gets_its_next_boots_while_another_still_runs(
    alice: Any, qemu_class: MachineClass, tmp_path: Path
) -> None:
    slow = MachineClass.objects.create(name="qemu-x86_64-slow", arch="x86_64")
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    (_, fast_api), (_, slow_api) = qemu_runner("fast-1", qemu_class), qemu_runner("slow-1", slow)
    noisy = iter(NOISY * 4)
    first = run_queued(fast_api, noisy)
    assert first == 8  # 4 boots a side at the first look
    take_look(sub.pk)
    sub.refresh_from_db()
    # The slow class has not started: no analysis yet, but the fast class's
    # look was taken and, inconclusive, its next boots are queued already.
    assert sub.status == Submission.Status.TESTING
    fast_queued = Job.objects.filter(submission=sub, machine_class=qemu_class, status=Job.Status.QUEUED)
    assert fast_queued.count() == 8
    assert [(r["machine_class"], r["look"], r["more_boots"]) for r in sub.reruns] == [("qemu-x86_64", 1, 4)]
    clock = Job.objects.filter(submission=sub).values_list("clock", flat=True).first()
    assert sub.interim_looks == [
        {"machine_class_id": qemu_class.pk, "benchmark": "spawn", "grid": "quick", "clock": clock, "jobs": 8}
    ]
    assert not sub.comparisons.exists()

    # Another job's advance (here: the same state again) takes no look twice.
    take_look(sub.pk)
    sub.refresh_from_db()
    assert fast_queued.count() == 8 and len(sub.reruns) == 1 and len(sub.interim_looks) == 1

    # The slow class measures a clear regression; the fast class its second look.
    clear = iter([1000.0, 600.0] * 4)
    assert run_queued(slow_api, clear) == 8
    assert run_queued(fast_api, noisy) == 8
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    # The analysis looks at both again, decides alike, and adds no boots of its own.
    assert sub.status == Submission.Status.DONE
    looks = {c.machine_class.name: (c.look, c.looks, c.final) for c in sub.comparisons.all()}
    assert looks == {"qemu-x86_64": (2, 2, True), "qemu-x86_64-slow": (1, 2, True)}
    assert len(sub.reruns) == 1
    slow_metric = sub.comparisons.get(machine_class=slow).metrics.get(metric="spawn-vmas-0")
    assert slow_metric.verdict == "regression" and slow_metric.base_boots == 4
    fast_metric = sub.comparisons.get(machine_class=qemu_class).metrics.get(metric="spawn-vmas-0")
    assert fast_metric.base_boots == fast_metric.head_boots == 8 and fast_metric.verdict != "regression"


def test_a_comparison_decided_at_its_interim_look_queues_nothing(
    alice: Any, qemu_class: MachineClass, tmp_path: Path
) -> None:
    slow = MachineClass.objects.create(name="qemu-x86_64-slow", arch="x86_64")
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    (_, fast_api), (_, slow_api) = qemu_runner("fast-1", qemu_class), qemu_runner("slow-1", slow)
    assert run_queued(fast_api, iter([1000.0, 600.0] * 4)) == 8
    take_look(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.TESTING and sub.reruns == [] and len(sub.interim_looks) == 1
    assert not Job.objects.filter(submission=sub, machine_class=qemu_class, status=Job.Status.QUEUED).exists()
    assert run_queued(slow_api, iter([1000.0, 600.0] * 4)) == 8
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE
    assert {c.machine_class.name: c.look for c in sub.comparisons.all()} == {"qemu-x86_64": 1, "qemu-x86_64-slow": 1}
