"""A queued job says what it waits for: a build, a runner, the jobs ahead; on the page, in the API and the CLI
(kperf.core.lab.waiting)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from kperf.cli.status import render_status
from kperf.core.models import Clock, Job, KernelBuild, Runner, Submission, SubmissionBuild, Tree
from kperf.core.submissions.pipeline import schedule_jobs

from tests.conftest import Api
from tests.lab_fixtures import submission_page as page
from tests.lab_fixtures import submission_ready_for_testing

pytestmark = pytest.mark.django_db

CLASS = "qemu-x86_64"


def alive(runner: Runner, yields_to_builds: bool = False) -> None:
    runner.last_heartbeat = timezone.now()
    runner.yields_to_builds = yields_to_builds
    runner.save(update_fields=["last_heartbeat", "yields_to_builds"])


def building_for_another_submission(alice: Any, tmp_path: Path) -> tuple[KernelBuild, Submission]:
    """Another submission's head kernel, being built right now by a live worker."""
    tree = Tree.objects.create(url=str(tmp_path / "other-tree"))
    other = Submission.objects.create(
        owner=alice, tree=tree, head_ref="other", base_ref="v6.1", status=Submission.Status.BUILDING
    )
    build = KernelBuild.objects.create(
        tree=tree,
        sha="c" * 40,
        arch="x86_64",
        config_digest="e" * 64,
        status=KernelBuild.Status.BUILDING,
        phase="config",
        progress="olddefconfig",
        lease_expires=timezone.now() + timedelta(minutes=2),
    )
    SubmissionBuild.objects.create(submission=other, build=build, side="head")
    return build, other


def test_jobs_held_back_by_another_submissions_build_name_that_build(
    alice: Any, alice_api: Api, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    runner, api = runner_api
    alive(runner, yields_to_builds=True)
    # A wall-clock class: its runner sharing the build host yields to builds
    # (instruction-clock boots do not: the next test).
    qemu_class.clock = Clock.WALL
    qemu_class.save(update_fields=["clock"])
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    build, other = building_for_another_submission(alice, tmp_path)
    # The runner indeed takes nothing while the build runs.
    assert api.post("/runner/claim").json() == {"job": None}

    why = (
        f"waiting for build #{build.pk} (head of submission {other.pk}) to finish (config olddefconfig): "
        f"the runners of class {CLASS} do not measure while a kernel builds"
    )
    detail = alice_api.get(f"/submissions/{sub.pk}").json()
    assert detail["waiting_for"] == why
    assert {j["waiting_for"] for j in detail["jobs"]} == {why}
    assert why in page(alice, sub)
    # Wrapped to 100 columns, in the same words.
    assert why in " ".join(render_status(detail).split())

    # Once the build is done the runner claims, and nothing says it waits for the build.
    KernelBuild.objects.filter(pk=build.pk).update(status=KernelBuild.Status.DONE, lease_expires=None)
    assert api.post("/runner/claim").json()["job"] is not None
    detail = alice_api.get(f"/submissions/{sub.pk}").json()
    assert detail["waiting_for"] is None
    assert all("build" not in (j["waiting_for"] or "") for j in detail["jobs"])


def test_instruction_clock_jobs_do_not_wait_for_another_submissions_build(
    alice: Any, alice_api: Api, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    runner, api = runner_api
    alive(runner, yields_to_builds=True)
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)  # the class's default: the instruction clock
    building_for_another_submission(alice, tmp_path)
    detail = alice_api.get(f"/submissions/{sub.pk}").json()
    assert all("build" not in (j["waiting_for"] or "") for j in detail["jobs"]), detail["jobs"]
    assert api.post("/runner/claim").json()["job"]["clock"] == Clock.INSTRUCTIONS


def test_a_job_behind_another_submissions_jobs_counts_them_as_claims_would(
    settings: Any, alice: Any, alice_api: Api, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    runner, api = runner_api
    alive(runner)
    # Every boot its own: no base boots shared between the two.
    settings.KPERF_BASE_SHARE_WINDOW_SECONDS = 0
    first = submission_ready_for_testing(alice, qemu_class, tmp_path)
    second = Submission.objects.create(
        owner=alice,
        tree=first.tree,
        head_ref="feature-2",
        base_ref="master",
        benchmarks=["spawn"],
        arches=["x86_64"],
        status=Submission.Status.TESTING,
    )
    schedule_jobs(
        second,
        [
            SubmissionBuild.objects.create(submission=second, build=sb.build, side=sb.side)
            for sb in first.submission_builds.all()
        ],
    )
    ahead = Job.objects.filter(submission=first).count()
    assert ahead == 8  # the spawn quick grid: 4 boots per side

    jobs = alice_api.get(f"/submissions/{second.pk}").json()["jobs"]
    assert [j["waiting_for"] for j in jobs[:2]] == [
        f"waiting for a runner of class {CLASS}: 8 jobs ahead",
        f"waiting for a runner of class {CLASS}: 9 jobs ahead",
    ]
    mine = alice_api.get(f"/submissions/{first.pk}").json()
    assert mine["jobs"][0]["waiting_for"] == f"next for a runner of class {CLASS}"
    assert mine["waiting_for"] == f"next for a runner of class {CLASS}"

    claimed = api.post("/runner/claim").json()["job"]
    assert claimed["id"] == mine["jobs"][0]["id"]
    detail = alice_api.get(f"/submissions/{second.pk}").json()
    assert detail["jobs"][0]["waiting_for"] == f"waiting for a runner of class {CLASS}: 7 jobs ahead"
    assert detail["waiting_for"] == f"waiting for a runner of class {CLASS}: 7 jobs ahead"
    # A job that runs waits for nothing; its submission shows progress instead.
    mine = alice_api.get(f"/submissions/{first.pk}").json()
    assert mine["jobs"][0]["waiting_for"] is None and mine["waiting_for"] is None
    assert mine["jobs"][1]["waiting_for"] == f"next for a runner of class {CLASS}, once one of its 1 finishes its job"


def test_without_a_live_runner_the_job_says_so(alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    assert alice_api.get(f"/submissions/{sub.pk}").json()["waiting_for"] == (
        f"waiting for a runner of class {CLASS}: none is registered (docs/runners.md)"
    )
    runner, _ = Runner.register("qemu-1", qemu_class)
    runner.capabilities = {"clocks": ["wall"]}
    runner.save(update_fields=["capabilities"])
    assert alice_api.get(f"/submissions/{sub.pk}").json()["waiting_for"] == (
        f"waiting for a runner of class {CLASS} that gives the instruction clock: none of its runners in service does"
    )
    runner.capabilities = {"clocks": ["instructions", "wall"]}
    runner.last_heartbeat = timezone.now() - timedelta(hours=1)
    runner.save(update_fields=["capabilities", "last_heartbeat"])
    why = alice_api.get(f"/submissions/{sub.pk}").json()["waiting_for"]
    assert why.startswith(f"waiting for a runner of class {CLASS}: none of its 1 runner has been heard from since ")
    assert why.endswith("is kperf-runner running? (docs/runners.md)")


def test_a_submission_whose_build_another_one_started_waits_for_that_build(
    alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    build, other = building_for_another_submission(alice, tmp_path)
    sub = Submission.objects.create(
        owner=alice, tree=build.tree, head_ref="other", base_ref="v6.1", status=Submission.Status.BUILDING
    )
    SubmissionBuild.objects.create(submission=sub, build=build, side="head")
    detail = alice_api.get(f"/submissions/{sub.pk}").json()
    assert detail["waiting_for"] == (
        f"waiting for build #{build.pk} (head of submission {other.pk}), building: config olddefconfig"
    )
    assert detail["waiting_for"] in page(alice, sub)


def test_another_users_build_is_not_named_by_its_submission(
    alice: Any, alice_api: Api, django_user_model: Any, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    runner, _ = runner_api
    alive(runner, yields_to_builds=True)
    qemu_class.clock = Clock.WALL  # a class whose runner yields to builds
    qemu_class.save(update_fields=["clock"])
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    bob = django_user_model.objects.create_user("bob", "bob@example.org")
    build, other = building_for_another_submission(bob, tmp_path)
    detail = alice_api.get(f"/submissions/{sub.pk}").json()
    # Which submission is bob's to know (kperf.core.access): alice learns that a build holds her jobs, not whose.
    assert detail["waiting_for"].startswith(f"waiting for build #{build.pk} (for another user's submission) to finish")
    assert f"submission {other.pk}" not in detail["waiting_for"]
    assert f"submission {other.pk}" not in page(alice, sub)
