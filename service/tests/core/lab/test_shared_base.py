"""Base boots measured once and shared by every submission of the same base kernel (kperf.core.lab.sharing)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from kperf.cli.status import render_status
from kperf.core.lifecycle import dispatch, owners
from kperf.core.models import (
    ApiToken,
    BootRecord,
    Job,
    KernelBuild,
    MachineClass,
    Runner,
    SharedJob,
    Submission,
    SubmissionBuild,
    Tree,
)
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION, schedule_jobs

from tests.conftest import Api, qemu_runner
from tests.lab_fixtures import built, results_body

pytestmark = pytest.mark.django_db

BASE_SHA = "a" * 40
BOOTS = 4  # the spawn benchmark's quick grid: boots per side


class Lab:
    """One tree, one base kernel, and submissions of several heads against it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.tree = Tree.objects.create(url=str(tmp / "tree"))
        self.base = built(self.tree, BASE_SHA, tmp)

    def submit(self, owner: User, head_sha: str) -> Submission:
        sub = Submission.objects.create(
            owner=owner,
            tree=self.tree,
            head_ref=f"feature-{head_sha[0]}",
            base_ref="master",
            head_sha=head_sha,
            base_sha=BASE_SHA,
            benchmarks=["spawn"],
            grids=["quick"],
            arches=["x86_64"],
            status=Submission.Status.TESTING,
        )
        head = KernelBuild.objects.filter(sha=head_sha).first() or built(self.tree, head_sha, self.tmp)
        links = [
            SubmissionBuild.objects.create(submission=sub, build=self.base, side="base"),
            SubmissionBuild.objects.create(submission=sub, build=head, side="head"),
        ]
        schedule_jobs(sub, links)
        return sub


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(tmp_path)


@pytest.fixture
def bob(django_user_model: Any) -> User:
    user: User = django_user_model.objects.create_user("bob", "bob@example.org", "bob-password-1")
    return user


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Tasks queued after commit, recorded instead of sent."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(dispatch, "after_commit", lambda task, *args, **kw: calls.append((task, *args)))
    return calls


def run_all(*apis: Api, fail: set[int] | None = None) -> None:
    """Every runner claims until nothing is queued: base boots at 1000, head boots at 600;
    the jobs in `fail` do not boot."""
    while True:
        claimed = False
        for api in apis:
            resp = api.post("/runner/claim")
            assert resp.status_code == 200, resp.content
            job = resp.json()["job"]
            if job is None:
                continue
            claimed = True
            if fail and job["id"] in fail:
                body = {"attempt": job["attempt"], "kind": "boot", "message": "no console output", "log": ""}
                assert api.post(f"/runner/jobs/{job['id']}/fail", body).status_code == 200
                continue
            value = 1000.0 if job["kernel"]["sha"] == BASE_SHA else 600.0
            assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job, value)).status_code == 200
        if not claimed:
            return


def finish(*subs: Submission) -> None:
    for sub in subs:
        owners.advance(SUBMISSION, sub.pk)
        analyse_submission(sub.pk)
        sub.refresh_from_db()


def base_jobs(lab: Lab) -> Any:
    return Job.objects.filter(build=lab.base)


def own_base(sub: Submission) -> int:
    return Job.objects.filter(submission=sub, side="base").count()


def test_three_submissions_on_one_base_measure_it_once_per_class_and_clock(
    lab: Lab, alice: User, bob: User, qemu_class: MachineClass, alice_api: Api, settings: Any
) -> None:
    # A wall-clock lab that says its machines do not drift shares there too.
    settings.KPERF_BASE_SHARE_WALL_CLOCK = True
    wall_class = MachineClass.objects.create(name="kvm-x86_64", arch="x86_64", clock="wall")
    _, api = qemu_runner("qemu-1", qemu_class)
    _, kvm = qemu_runner("kvm-1", wall_class)
    subs = [lab.submit(alice, "b" * 40), lab.submit(alice, "c" * 40), lab.submit(bob, "e" * 40)]
    # One base measurement per machine class (each with its own clock), not one per submission.
    assert base_jobs(lab).count() == 2 * BOOTS
    assert {(j.machine_class_id, j.clock) for j in base_jobs(lab)} == {
        (qemu_class.pk, "instructions"),
        (wall_class.pk, "wall"),
    }
    assert [own_base(s) for s in subs] == [2 * BOOTS, 0, 0]
    assert Job.objects.count() == 2 * BOOTS + 3 * 2 * BOOTS
    run_all(api, kvm)
    assert BootRecord.objects.filter(job__build=lab.base).count() == 2 * BOOTS
    finish(*subs)
    for i, sub in enumerate(subs):
        assert sub.status == Submission.Status.DONE, sub.error
        assert sub.comparisons.count() == 2
        for comp in sub.comparisons.all():
            m = comp.metrics.get(metric="spawn-vmas-0")
            assert m.base_boots == m.head_boots == BOOTS and m.verdict == "regression"
            assert comp.shared_base_boots == (0 if i == 0 else BOOTS)
    detail = alice_api.get(f"/submissions/{subs[1].pk}").json()
    assert {c["shared_base_boots"] for c in detail["comparisons"]} == {BOOTS}
    assert f"{BOOTS} base boots shared with other submissions" in render_status(detail, everything=True)
    assert detail["progress"]["base"] == {"boots_done": 2 * BOOTS, "boots_total": 2 * BOOTS, "boots_shared": 2 * BOOTS}
    shared = [j for j in detail["jobs"] if j["shared"]]
    assert len(shared) == 2 * BOOTS and {j["side"] for j in shared} == {"base"}
    assert not any(j["shared"] for j in alice_api.get(f"/submissions/{subs[0].pk}").json()["jobs"])


def test_a_base_measured_with_another_clock_is_not_shared(
    lab: Lab, alice: User, qemu_class: MachineClass, runner_api: Any
) -> None:
    first = lab.submit(alice, "b" * 40)
    # The operator switched the class to the wall clock: the first
    # submission keeps the instruction clock it was queued with.
    MachineClass.objects.filter(pk=qemu_class.pk).update(clock="wall")
    second = lab.submit(alice, "c" * 40)
    assert own_base(second) == BOOTS and not SharedJob.objects.exists()
    assert {j.clock for j in second.jobs.all()} == {"wall"}
    assert {j.clock for j in first.jobs.all()} == {"instructions"}


def test_a_base_measured_before_the_window_is_not_shared(lab: Lab, alice: User, runner_api: Any, settings: Any) -> None:
    settings.KPERF_BASE_SHARE_WINDOW_SECONDS = 3600
    first = lab.submit(alice, "b" * 40)
    run_all(runner_api[1])
    base_jobs(lab).update(finished=timezone.now() - timedelta(hours=2))
    late = lab.submit(alice, "c" * 40)
    assert own_base(late) == BOOTS and not SharedJob.objects.filter(submission=late).exists()
    # Within the window the same boots are shared: the window is what kept them apart.
    base_jobs(lab).filter(submission=first).update(finished=timezone.now() - timedelta(minutes=30))
    timely = lab.submit(alice, "e" * 40)
    assert own_base(timely) == 0 and SharedJob.objects.filter(submission=timely).count() == BOOTS
    # 0 turns sharing off.
    settings.KPERF_BASE_SHARE_WINDOW_SECONDS = 0
    assert own_base(lab.submit(alice, "f" * 40)) == BOOTS


def test_a_base_measured_by_a_runner_that_changed_since_is_not_shared(
    lab: Lab, alice: User, qemu_class: MachineClass, runner_api: Any
) -> None:
    runner, api = runner_api
    hello = {
        "name": "qemu-1",
        "arch": "x86_64",
        "machine_class": "qemu-x86_64",
        "version": "0.1.0",
        "capabilities": {"clocks": ["instructions"]},
    }
    assert api.post("/runner/heartbeat", hello).status_code == 200
    lab.submit(alice, "b" * 40)
    run_all(api)
    assert base_jobs(lab).filter(status=Job.Status.DONE).count() == BOOTS
    # The same runner saying the same again is no change.
    assert api.post("/runner/heartbeat", hello).status_code == 200
    assert own_base(lab.submit(alice, "c" * 40)) == 0
    # Upgraded: what it measured before is not compared with what it measures now.
    assert api.post("/runner/heartbeat", hello | {"version": "0.2.0"}).status_code == 200
    assert own_base(lab.submit(alice, "e" * 40)) == BOOTS
    runner.refresh_from_db()
    before = runner.identity_changed
    # Registered again (a new token), or quarantined by an operator: a new identity too.
    Runner.register("qemu-1", qemu_class)
    runner.refresh_from_db()
    assert runner.identity_changed > before
    runner.health = Runner.Health.QUARANTINED
    runner.save()
    runner.refresh_from_db()
    assert runner.identity_changed > before and runner.health == Runner.Health.QUARANTINED


def test_a_failed_shared_boot_is_replaced_and_the_sharer_finishes(
    lab: Lab, alice: User, bob: User, runner_api: Any, sent: list[tuple[Any, ...]]
) -> None:
    _, api = runner_api
    owner = lab.submit(alice, "b" * 40)
    sharer = lab.submit(bob, "c" * 40)
    assert own_base(sharer) == 0
    broken = Job.objects.filter(submission=owner, side="base").order_by("seq").first()
    assert broken is not None
    run_all(api, fail={broken.pk})
    # The runner's report moves the sharer on as well as the owner.
    assert ("kperf.advance_submission", sharer.pk) in sent
    owners.advance(SUBMISSION, owner.pk)
    owner.refresh_from_db()
    assert owner.status == Submission.Status.FAILED and "did not boot" in owner.error
    # The sharer drops the failed boot and queues its own replacement.
    owners.advance(SUBMISSION, sharer.pk)
    sharer.refresh_from_db()
    assert sharer.status == Submission.Status.TESTING
    assert own_base(sharer) == 1 and not SharedJob.objects.filter(job=broken).exists()
    run_all(api)
    finish(sharer)
    assert sharer.status == Submission.Status.DONE, sharer.error
    comp = sharer.comparisons.get()
    assert comp.shared_base_boots == BOOTS - 1 and comp.metrics.get(metric="spawn-vmas-0").base_boots == BOOTS


def test_an_owner_that_fails_keeps_the_queued_boots_others_share(
    lab: Lab, alice: User, bob: User, runner_api: Any, sent: list[tuple[Any, ...]]
) -> None:

    owner = lab.submit(alice, "b" * 40)
    sharer = lab.submit(bob, "c" * 40)
    owners.fail(SUBMISSION, owner, "given up")
    assert {j.status for j in owner.jobs.filter(side="head")} == {Job.Status.CANCELLED}
    assert {j.status for j in owner.jobs.filter(side="base")} == {Job.Status.QUEUED}
    run_all(runner_api[1])
    finish(sharer)
    assert sharer.status == Submission.Status.DONE and sharer.comparisons.get().shared_base_boots == BOOTS


def test_more_boots_after_an_inconclusive_look_are_shared_too(
    lab: Lab, alice: User, bob: User, runner_api: Any
) -> None:
    """A sharer whose base boots are all shared still adds boots at the next look."""
    _, api = runner_api
    first, second = lab.submit(alice, "b" * 40), lab.submit(bob, "c" * 40)
    noisy = iter([1000.0, 900.0, 1300.0, 800.0, 800.0, 1300.0, 900.0, 1000.0] * 8)

    def run_noisy() -> None:
        while (job := api.post("/runner/claim").json()["job"]) is not None:
            assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job, next(noisy))).status_code == 200
        finish(first, second)

    run_noisy()
    assert first.status == second.status == Submission.Status.TESTING
    assert own_base(second) == 0 and base_jobs(lab).count() == 2 * BOOTS
    run_noisy()
    for sub in (first, second):
        assert sub.status == Submission.Status.DONE, sub.error
        m = sub.comparisons.get().metrics.get(metric="spawn-vmas-0")
        assert m.base_boots == m.head_boots == 2 * BOOTS
    assert second.comparisons.get().shared_base_boots == 2 * BOOTS


def test_the_sharer_sees_its_shared_boots_but_not_the_owners_submission(
    lab: Lab, alice: User, bob: User, runner_api: Any
) -> None:
    owner = lab.submit(alice, "b" * 40)
    sharer = lab.submit(bob, "c" * 40)
    run_all(runner_api[1])
    finish(owner, sharer)
    bob_api = Api(ApiToken.issue(bob)[1])
    detail = bob_api.get(f"/submissions/{sharer.pk}").json()
    assert detail["comparisons"][0]["shared_base_boots"] == BOOTS
    shared = [j for j in detail["jobs"] if j["shared"]]
    assert len(shared) == BOOTS
    # Nothing in it leads to alice's submission.
    assert not {"submission", "owner"} & {k for j in shared for k in j}
    assert "alice" not in str(detail) and owner.head_sha not in str(detail)
    assert bob_api.get(f"/submissions/{owner.pk}").status_code == 404
    browser = Client()
    assert browser.login(username="bob", password="bob-password-1")
    page = browser.get(f"/submissions/{sharer.pk}").content.decode()
    assert f'data-shared="{BOOTS}"' in page and "(shared)" in page
    assert browser.get(f"/submissions/{owner.pk}").status_code == 404
    # The shared boots' consoles are the sharer's to read; the owner's own head boots are not.
    assert browser.get(f"/jobs/{shared[0]['id']}/console").status_code == 200
    head = owner.jobs.filter(side="head").first()
    assert head is not None and browser.get(f"/jobs/{head.pk}/console").status_code == 404


def run_at(speed: float, *apis: Api) -> None:
    """Every runner claims until nothing is queued; every kernel measures `speed` (the heads change nothing)."""
    while True:
        claimed = False
        for api in apis:
            job = api.post("/runner/claim").json()["job"]
            if job is None:
                continue
            claimed = True
            assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job, speed)).status_code == 200
        if not claimed:
            return


@pytest.mark.parametrize("share_wall", [False, True])
def test_a_wall_clock_base_measured_under_other_load_is_not_set_against_heads_measured_now(
    lab: Lab, alice: User, bob: User, settings: Any, share_wall: bool
) -> None:
    """The false improvement of a loaded wall-clock class: base boots measured
    15 minutes earlier, when the machine did 1000 forks/s, against head boots
    measured now at 2350 (+135%). Both heads are the base's code."""
    settings.KPERF_BASE_SHARE_WALL_CLOCK = share_wall
    wall_class = MachineClass.objects.create(name="kvm-x86_64", arch="x86_64", clock="wall")
    _, kvm = qemu_runner("kvm-1", wall_class)
    first = lab.submit(alice, "b" * 40)
    run_at(1000.0, kvm)
    base_jobs(lab).update(finished=timezone.now() - timedelta(minutes=15))
    # The host is busy with something else now: every boot runs 2.35 times as fast.
    second = lab.submit(bob, "c" * 40)
    run_at(2350.0, kvm)
    finish(first, second)
    assert second.status == Submission.Status.DONE, second.error
    m = second.comparisons.get().metrics.get(metric="spawn-vmas-0")
    if share_wall:
        # What the shared base did: a +135% "improvement" of a change that changes nothing.
        assert m.verdict == "improvement" and m.change_pct == pytest.approx(135.0, abs=0.5)
        return
    # Its own base boots, alternating with its head's, measured at the same moment.
    assert own_base(second) == BOOTS and not SharedJob.objects.filter(submission=second).exists()
    seq = list(Job.objects.filter(submission=second).order_by("seq").values_list("side", flat=True))
    assert seq == ["base", "head"] * BOOTS
    assert m.verdict != "improvement" and m.change_pct is not None and abs(m.change_pct) < 0.5
