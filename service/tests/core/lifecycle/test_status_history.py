"""Every status change is a row: of what, from, to, when, moved by whom or what, and why
(kperf.core.lifecycle.states)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction

from kperf.core.builds import queue
from kperf.core.lifecycle import states
from kperf.core.models import Job, KernelBuild, StatusChange, Submission, Tree
from kperf_kbuild.driver import config_digest

from tests.conftest import Api
from tests.lab_fixtures import submission_ready_for_testing
from tests.worker_fixtures import wait_final


def history(obj: Any) -> list[tuple[str, str, str, str]]:
    rows = StatusChange.objects.filter(kind=type(obj).__name__, object_id=obj.pk).order_by("at", "pk")
    return [(r.source, r.target, r.actor, r.why) for r in rows]


@pytest.mark.django_db
def test_each_change_and_each_creation_is_recorded_with_its_reason(alice: Any, qemu_class: Any, tmp_path: Path) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    # Created where the fixture leaves it: its builds done, its jobs queued.
    assert history(sub)[0][:2] == ("", "testing")
    with states.acting_as("user lab-admin (admin)"):
        states.move(sub, Submission.Status.FAILED, error="the lab lost power")
    assert history(sub)[-1] == ("testing", "failed", "user lab-admin (admin)", "the lab lost power")

    # A conditional update records exactly the rows it moved.
    jobs = list(sub.jobs.order_by("pk"))
    leased = jobs[0]
    assert states.move_where(Job.objects.filter(pk=leased.pk), Job.Status.LEASED) == 1
    with states.acting_as("sweeper"):
        moved = states.move_where(Job.objects.filter(submission=sub), Job.Status.CANCELLED, why="submission failed")
    assert moved == len(jobs) - 1
    assert history(leased)[-1][:2] == ("queued", "leased")
    for job in jobs[1:]:
        assert history(job) == [
            ("", "queued", history(job)[0][2], ""),
            ("queued", "cancelled", "sweeper", "submission failed"),
        ]

    # Created already final (an imported result) is recorded too, and the command prints it all.
    tree = Tree.objects.create(url="https://git.example.org/x.git")
    imported = KernelBuild.objects.create(tree=tree, sha="e" * 40, arch="x86_64", config_digest="i", status="done")
    assert [h[:2] for h in history(imported)] == [("", "done")]
    out = io.StringIO()
    call_command("status_history", "submission", str(sub.pk), stdout=out)
    lines = out.getvalue().splitlines()
    assert "(created) -> testing" in lines[0] and lines[-1].endswith("by user lab-admin (admin): the lab lost power")


@pytest.mark.django_db
def test_api_changes_name_the_token_they_came_with(
    runner_api: Any, alice: Any, qemu_class: Any, tmp_path: Path
) -> None:
    submission_ready_for_testing(alice, qemu_class, tmp_path)
    _, api = runner_api
    job = api.post("/runner/claim").json()["job"]
    assert history(Job.objects.get(pk=job["id"]))[-1][:3] == ("queued", "leased", "runner qemu-1")


@pytest.mark.django_db(transaction=True)
def test_a_celery_workers_changes_name_the_task(
    worker: Path,
    alice_api: Api,
    small_tree: Path,
    qemu_class: Any,
) -> None:
    resp = alice_api.post("/submissions", {"tree": str(small_tree), "branch": "feature", "base": "master"})
    sub = wait_final(resp.json()["id"], worker)
    rows = history(sub)
    assert rows[0][:3] == ("", "queued", "user alice (API token)")
    assert rows[1][:2] == ("queued", "building") and rows[1][2].startswith("task kperf.prepare_submission (")
    assert rows[-1][1] == "failed" and "could not be built" in rows[-1][3]
    build = KernelBuild.objects.filter(submission_builds__submission=sub).order_by("pk").first()
    assert build is not None
    steps = history(build)
    assert steps[1][:2] == ("queued", "building") and steps[1][2].startswith("task kperf.build_kernel (")


@pytest.mark.django_db
def test_a_build_queued_again_says_why(settings_dirs: Any) -> None:
    tree = Tree.objects.create(url="https://git.example.org/y.git")
    with transaction.atomic():
        build = queue.need_build(tree, "f" * 40, "x86_64", config_digest("x86_64"))
    KernelBuild.objects.filter(pk=build.pk).update(status="building", attempt=1, worker="w")
    queue.retry_or_fail(build.pk, 1, "the disk of build-host-1 is full")
    assert history(build)[-1][:2] == ("building", "queued")
    assert history(build)[-1][3] == "the disk of build-host-1 is full"
