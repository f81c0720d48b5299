"""Tracked branches: polling real git, queueing builds and boots, finding change points.

Runs on the real database and a real git repository; the runner side is the
real HTTP protocol driven by the test (the end-to-end test boots kernels).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.test import Client

from kperf.core.lifecycle import owners
from kperf.core.models import BranchCommit, ChangePoint, Job, KernelBuild, TrackedBranch
from kperf.core.tracking import branches

from tests.conftest import Api, git, kperf_cli
from tests.tracking_fixtures import commit_n, finish_builds, land_a_step_in_a_gap, run_jobs, track

pytestmark = pytest.mark.django_db


def test_tracking_validates_like_a_submission_and_stores_nothing_bad(
    alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    bad = [
        ({"tree": "ext::sh -c touch% /tmp/x", "branch": "master"}, "tree"),
        ({"tree": str(small_tree), "branch": "-x"}, "branch"),
        ({"tree": str(small_tree), "branch": "master", "benchmarks": ["nope"]}, "benchmarks"),
        ({"tree": str(small_tree), "branch": "master", "max_commits": 0}, "max_commits"),
        ({"tree": str(small_tree), "branch": "master", "backfill": 10_000}, "backfill"),
        ({"tree": str(small_tree), "branch": "master", "arches": ["riscv"]}, "arches"),
    ]
    for body, field in bad:
        resp = alice_api.post("/branches", body)
        assert resp.status_code == 400, body
        assert resp.json()["field"] == field, resp.json()
        assert resp.json()["detail"]
    assert not TrackedBranch.objects.exists()

    first = track(alice_api, small_tree)
    again = track(alice_api, small_tree, max_commits=4)
    assert first["id"] == again["id"] and again["max_commits"] == 4
    assert TrackedBranch.objects.count() == 1
    assert alice_api.get("/branches").json()[0]["branch"] == "master"
    assert alice_api.get("/branches/999").status_code == 404


def test_polling_follows_the_first_parent_history(
    alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    commit_n(small_tree, 3)
    data = track(alice_api, small_tree, backfill=2, max_commits=4)
    branch = TrackedBranch.objects.get(pk=data["id"])

    # first poll: the head and two commits before it
    made = branches.poll_branch(branch.pk, backfill=2)
    log = git(small_tree, "log", "--first-parent", "--format=%H", "-n3", "master").split()
    assert [c.sha for c in made] == log[::-1]
    positions = [c.position for c in made]
    assert positions == list(range(positions[0], positions[0] + 3))
    assert all(c.builds.count() == 1 and c.status == BranchCommit.Status.BUILDING for c in made)
    assert KernelBuild.objects.filter(status=KernelBuild.Status.QUEUED).count() == 3

    # nothing moved: nothing new
    assert branches.poll_branch(branch.pk) == []

    # more commits than max_commits: evenly spaced ones, newest included, gaps recorded
    new = commit_n(small_tree, 10)
    made = branches.poll_branch(branch.pk)
    assert len(made) == 4 and made[-1].sha == new[-1]
    assert [c.position for c in made] == sorted(c.position for c in made)
    listed = alice_api.get(f"/branches/{branch.pk}").json()["commits"]
    assert sum(c["untested_before"] for c in listed[:4]) + 4 == 10  # the gaps are reported

    # a forced push: the commits it removed leave the series, the new ones join
    git(small_tree, "reset", "-q", "--hard", new[4])
    (small_tree / "REWRITE").write_text("a different commit\n")
    git(small_tree, "add", "REWRITE")
    git(small_tree, "commit", "-q", "-m", "rewritten")
    rewritten = [git(small_tree, "rev-parse", "HEAD")]
    made = branches.poll_branch(branch.pk)
    assert [c.sha for c in made] == rewritten
    gone = set(new[5:])
    for c in branch.commits.all():
        assert c.on_branch == (c.sha not in gone), c.sha

    # a branch that disappears is reported, not fatal
    git(small_tree, "checkout", "-q", "feature")
    git(small_tree, "branch", "-q", "-D", "master")
    assert branches.poll_branch(branch.pk) == []
    branch.refresh_from_db()
    assert "no branch 'master'" in branch.last_error
    assert alice_api.get(f"/branches/{branch.pk}").json()["last_error"] == branch.last_error


def test_a_step_in_the_series_is_found_at_its_commit(
    alice_api: Api,
    runner_api: tuple[Any, Api],
    small_tree: Path,
    qemu_class: Any,
    settings_dirs: Any,
    tmp_path: Path,
) -> None:
    _, runner = runner_api
    rng = np.random.default_rng(7)
    data = track(alice_api, small_tree, boots=2, max_commits=50)
    branch = TrackedBranch.objects.get(pk=data["id"])
    branches.poll_branch(branch.pk)
    before = commit_n(small_tree, 15)
    branches.poll_branch(branch.pk)
    levels = {c.sha: 1000.0 for c in branch.commits.all()}

    finish_builds(branch, tmp_path)
    jobs = Job.objects.filter(branch_commit__branch=branch)
    assert jobs.count() == 16 * 2 and all(j.boots == 1 and j.benchmark == "spawn" for j in jobs)
    assert run_jobs(runner, levels, rng) == 32
    assert set(branch.commits.values_list("status", flat=True)) == {"done"}
    assert not ChangePoint.objects.exists()

    # the culprit makes spawn 10% slower; one commit after it does not build
    after = commit_n(small_tree, 10)
    broken = after[3]
    branches.poll_branch(branch.pk)
    levels.update({sha: 900.0 for sha in after})
    finish_builds(branch, tmp_path, fail={broken})
    run_jobs(runner, levels, rng)

    failed = BranchCommit.objects.get(branch=branch, sha=broken)
    assert failed.status == BranchCommit.Status.FAILED and "failed to build" in failed.error
    cps = list(ChangePoint.objects.filter(branch=branch))
    assert cps, "no change point found"
    assert {cp.commit.sha for cp in cps} == {after[0]}
    for cp in cps:
        assert cp.direction == "regression"
        assert -12 < cp.change_pct < -8
        assert cp.previous is not None and cp.previous.sha == before[-1]
        assert cp.detected_at.position >= cp.commit.position

    detail = alice_api.get(f"/branches/{branch.pk}").json()
    assert {cp["sha"] for cp in detail["change_points"]} == {after[0]}
    assert detail["change_points"][0]["untested_between"] == 0
    assert len(detail["commits"]) == 26
    url = f"/branches/{branch.pk}/series?machine_class={qemu_class.name}&benchmark=spawn"
    series = alice_api.get(url + "&limit=100").json()
    assert len(series["commits"]) == 25  # the broken commit has no measurements
    assert series["next_until"] is None
    assert all(len(boots) == 2 for points in series["metrics"].values() for boots in points)
    assert alice_api.get(f"/branches/{branch.pk}/series?machine_class=nope&benchmark=spawn").status_code == 404

    # re-analysing keeps the change point (and when it was first seen)
    seen = {cp.pk: cp.first_seen for cp in cps}
    branches.analyse_series(branch, qemu_class.pk, "spawn", qemu_class.clock)
    assert {cp.pk: cp.first_seen for cp in ChangePoint.objects.filter(branch=branch)} == seen

    # the web pages show it
    browser = Client()
    assert browser.login(username="alice", password="alice-password-1")
    page = browser.get(f"/branches/{branch.pk}").content.decode()
    assert after[0][:12] in page and "regression" in page and "failed to build" in page
    assert small_tree.name in browser.get("/branches/").content.decode()


def test_a_job_that_fails_fails_its_commit_only(
    alice_api: Api, runner_api: tuple[Any, Api], small_tree: Path, qemu_class: Any, settings_dirs: Any, tmp_path: Path
) -> None:
    _, runner = runner_api
    data = track(alice_api, small_tree, boots=1)
    branch = TrackedBranch.objects.get(pk=data["id"])
    branches.poll_branch(branch.pk)
    finish_builds(branch, tmp_path)
    job = runner.post("/runner/claim").json()["job"]
    resp = runner.post(
        f"/runner/jobs/{job['id']}/fail",
        {"attempt": job["attempt"], "kind": "boot", "message": "kernel panic - not syncing", "log": "panic\n"},
    )
    assert resp.status_code == 200, resp.content
    commit = branch.commits.get()
    owners.advance(branches.COMMIT, commit.pk)
    commit.refresh_from_db()
    assert commit.status == BranchCommit.Status.FAILED
    assert "boot failure" in commit.error and "kernel panic" in commit.error
    branch.refresh_from_db()
    assert branch.enabled  # the branch keeps being followed


def test_the_pages_need_a_login(db: Any) -> None:
    for path in ("/branches/", "/branches/1"):
        resp = Client().get(path)
        assert resp.status_code == 302 and resp["Location"].startswith("/accounts/login/"), path


@pytest.mark.django_db(transaction=True)
def test_the_cli_tracks_lists_and_shows_branches(
    live_server: Any, alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any, tmp_path: Path
) -> None:
    cli = kperf_cli(live_server.url, alice_api, tmp_path / "c")

    bad = cli("track", str(small_tree), "master", "--bench", "dhrystone")
    assert bad.returncode == 2 and "unknown benchmark" in bad.stderr
    ok = cli("track", str(small_tree), "master", "--bench", "spawn", "--boots", "1", "--max-commits", "3")
    assert ok.returncode == 0, ok.stderr
    branch_id = int(ok.stdout.split("tracking branch ")[1].split(":")[0])
    listed = cli("branches")
    assert listed.returncode == 0 and f"#{branch_id}" in listed.stdout and "polling" in listed.stdout
    branches.poll_branch(branch_id)  # what the worker would do with the queued poll
    paused = cli("branches", str(branch_id), "--pause")
    assert paused.returncode == 0, paused.stderr
    assert "(paused)" in paused.stdout and "building" in paused.stdout
    assert git(small_tree, "rev-parse", "master")[:12] in paused.stdout
    assert not TrackedBranch.objects.get(pk=branch_id).enabled
    shown = cli("branches", str(branch_id), "--json")
    assert json.loads(shown.stdout)["commits"][0]["status"] == "building"


def test_a_change_inside_unmeasured_commits_is_bisected_to_its_commit(
    alice_api: Api, runner_api: tuple[Any, Api], small_tree: Path, qemu_class: Any, settings_dirs: Any, tmp_path: Path
) -> None:
    branch, landed, rounds = land_a_step_in_a_gap(alice_api, runner_api[1], small_tree, tmp_path, bisect=True)
    culprit = landed[5]
    cps = list(ChangePoint.objects.filter(branch=branch))
    assert cps and {cp.commit.sha for cp in cps} == {culprit}, [(cp.metric, cp.commit.sha) for cp in cps]
    assert all(cp.untested_between == 0 and cp.previous and cp.previous.sha == landed[4] for cp in cps)
    measured = set(branch.commits.values_list("sha", flat=True))
    # Halving the two unmeasured commits between landed[4] and landed[7] takes
    # two rounds; an early, less precise location may cost a detour or two.
    assert {landed[5], landed[6]} <= measured
    assert len(measured & set(landed)) <= 8 + 4 and rounds <= 5
    detail = alice_api.get(f"/branches/{branch.pk}").json()
    assert {cp["sha"] for cp in detail["change_points"]} == {culprit}
    assert all(cp["untested_between"] == 0 for cp in detail["change_points"])


def test_bisection_steps_around_a_commit_that_does_not_build(
    alice_api: Api, runner_api: tuple[Any, Api], small_tree: Path, qemu_class: Any, settings_dirs: Any, tmp_path: Path
) -> None:
    branch, landed, _ = land_a_step_in_a_gap(alice_api, runner_api[1], small_tree, tmp_path, bisect=True, broken=6)
    assert branch.commits.get(sha=landed[6]).status == BranchCommit.Status.FAILED
    cps = list(ChangePoint.objects.filter(branch=branch))
    assert cps and {cp.commit.sha for cp in cps} == {landed[5]}
    assert all(cp.untested_between == 0 for cp in cps)


def test_without_bisection_the_range_is_reported(
    alice_api: Api, runner_api: tuple[Any, Api], small_tree: Path, qemu_class: Any, settings_dirs: Any, tmp_path: Path
) -> None:
    branch, landed, rounds = land_a_step_in_a_gap(alice_api, runner_api[1], small_tree, tmp_path, bisect=False)
    assert rounds == 1 and branch.commits.count() == 16 + 8
    cps = alice_api.get(f"/branches/{branch.pk}").json()["change_points"]
    assert cps and all(cp["untested_between"] == 2 for cp in cps), cps
    where = {(landed.index(cp["previous_sha"]), landed.index(cp["sha"])) for cp in cps if cp["previous_sha"] in landed}
    assert where == {(4, 7)} and len(cps) == 2, (where, cps)


def test_a_tracked_branch_keeps_its_own_practical_threshold(
    alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    data = track(alice_api, small_tree, min_effect_pct=2.0)
    assert data["min_effect_pct"] == 2.0
    assert TrackedBranch.objects.get(pk=data["id"]).min_effect_pct == 2.0
    bad = alice_api.post(
        "/branches", {"tree": str(small_tree), "branch": "master", "benchmarks": ["spawn"], "min_effect_pct": -1}
    )
    assert bad.status_code == 400 and bad.json()["field"] == "min_effect_pct"
    assert TrackedBranch.objects.get(pk=data["id"]).min_effect_pct == 2.0
