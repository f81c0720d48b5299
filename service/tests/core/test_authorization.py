"""Who may see and change what, over every route (docs/operations.md, "Who may see and change what").

ROUTES is the decision for every URL the service answers: the status each
principal gets on one object of the owner's. The routes are read from
Django's URL resolver (the API's operations included, one URL name each),
so a new route without a line here fails
test_every_route_has_an_authorization_decision.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from kperf.core import access, triage
from kperf.core.lifecycle import dispatch
from kperf.core.mail import confirmations
from kperf.core.models import (
    ApiToken,
    BootRecord,
    BranchCommit,
    ChangePoint,
    Comparison,
    Job,
    KernelBuild,
    MachineClass,
    MetricDef,
    RecipientAddress,
    Runner,
    Sample,
    Submission,
    SubmissionBuild,
    TrackedBranch,
    Tree,
    Triage,
)
from kperf.core.results import mmtests_import
from kperf.core.tracking import branches
from kperf.core.tracking.request import TrackRequest
from kperf_runner.benchmarks import resolve_params

from tests.authorization_matrix import PRINCIPALS, RAW, ROUTES, SHA, TREE, Lab, import_body
from tests.conftest import Api, kperf_cli, qemu_runner


def _build(tree: Tree, name: str, artifact: Path | None = None) -> KernelBuild:
    arts = {}
    if artifact is not None:
        artifact.write_bytes(b"kernel")
        arts = {"kernel": {"path": str(artifact), "sha256": "0" * 64, "size": 6}}
    return KernelBuild.objects.create(
        tree=tree,
        sha=SHA[name],
        arch="x86_64",
        config_digest="test",
        status=KernelBuild.Status.DONE,
        log_tail=f"build log of {name}",
        artifacts=arts,
    )


def _done_job(build: KernelBuild, mclass: MachineClass, level: float, console: str, **owner: Any) -> Job:
    job = Job.objects.create(
        build=build,
        benchmark="spawn",
        grid="quick",
        params=dict(resolve_params("spawn", "quick")),
        machine_class=mclass,
        clock=mclass.clock,
        status=Job.Status.DONE,
        console_log=console,
        finished=timezone.now(),
        **owner,
    )
    for boot in range(2):
        record = BootRecord.objects.create(job=job, attempt=1, boot=boot, raw_output=RAW)
        Sample.objects.bulk_create(
            [Sample(boot_record=record, metric="spawn-vmas-0", iteration=i, value=level + boot + i) for i in range(3)]
        )
    return job


def _branch(owner: User, tree: Tree, name: str, mclass: MachineClass) -> tuple[TrackedBranch, KernelBuild, Job]:
    branch = TrackedBranch.objects.create(
        owner=owner, tree=tree, branch=name, benchmarks=["spawn"], grid="quick", arches=["x86_64"], notify=[]
    )
    commit = BranchCommit.objects.create(branch=branch, sha=SHA[name], position=1, status=BranchCommit.Status.DONE)
    build = _build(tree, name)
    commit.builds.add(build)
    job = _done_job(build, mclass, 100.0, f"console of {name}", branch_commit=commit)
    return branch, build, job


@pytest.fixture
def lab(django_user_model: Any, alice: User, staff: User, qemu_class: MachineClass, tmp_path: Path) -> Lab:
    bob = django_user_model.objects.create_user("bob", "bob@example.org")
    users = {"owner": alice, "other": bob, "staff": staff}
    tokens = {p: ApiToken.issue(u)[1] for p, u in users.items()}
    runner, runner_api = qemu_runner("qemu-1", qemu_class)
    tokens["runner"] = runner_api.token or ""
    lab = Lab(users=users, tokens=tokens)
    MetricDef.objects.get_or_create(
        name="spawn-vmas-0", defaults={"benchmark": "spawn", "unit": "forks/s", "higher_is_better": True}
    )
    tree = Tree.objects.create(url=TREE)

    def submission(owner: User, head: str, base: str | None) -> tuple[Submission, KernelBuild]:
        sub = Submission.objects.create(
            owner=owner,
            tree=tree,
            head_ref=head,
            head_sha=SHA[head],
            base_ref="v6.1",
            base_sha=SHA[base] if base else "",
            benchmarks=["spawn"],
            arches=["x86_64"],
            status=Submission.Status.TESTING,
        )
        build = _build(tree, head, tmp_path / f"{head}.bzImage")
        SubmissionBuild.objects.create(submission=sub, build=build, side="head")
        _done_job(build, qemu_class, 90.0, f"console of {head}", submission=sub, side="head")
        if base:
            base_build = _build(tree, base)
            SubmissionBuild.objects.create(submission=sub, build=base_build, side="base")
            _done_job(base_build, qemu_class, 100.0, f"console of {base}", submission=sub, side="base")
        return sub, build

    sub, head_build = submission(alice, "alice-head", "alice-base")
    bob_sub, _ = submission(bob, "bob-head", None)
    alice_job = Job.objects.get(submission=sub, side="head")
    # The job the runner holds: what it may report on and download the kernel of.
    leased = Job.objects.create(
        submission=sub,
        side="head",
        build=head_build,
        benchmark="spawn",
        grid="quick",
        machine_class=qemu_class,
        clock=qemu_class.clock,
        status=Job.Status.LEASED,
        runner=runner,
        lease_expires=timezone.now() + timedelta(minutes=15),
    )
    branch, _, _ = _branch(alice, tree, "alice-branch", qemu_class)
    bob_branch, bob_build, bob_job = _branch(bob, tree, "bob-branch", qemu_class)
    ref, ref_build, ref_job = _branch(staff, tree, "ref-branch", qemu_class)
    # A regression of each kind, as kperf opens them: alice's submission and a change point of her branch.
    cp = ChangePoint.objects.create(
        branch=branch,
        machine_class=qemu_class,
        benchmark="spawn",
        metric="spawn-vmas-0",
        clock=qemu_class.clock,
        commit=branch.commits.get(),
        detected_at=branch.commits.get(),
        direction="regression",
        change_pct=-10.0,
        p_value=0.001,
        statistic=5.0,
    )
    cp_triage = triage.open_for_change_point(cp)
    sub_triage = Triage.objects.create(kind="submission", submission=sub, title="alice's regression")
    assert cp_triage is not None
    # A comparison of alice's submission, so that its plots have something to draw for those who may see it.
    comparison = Comparison.objects.create(
        submission=sub, machine_class=qemu_class, benchmark="spawn", clock=qemu_class.clock, method="t", alpha=0.05
    )
    comparison.metrics.create(
        metric="spawn-vmas-0",
        unit="forks/s",
        higher_is_better=True,
        verdict="no-change",
        min_effect_pct=0.5,
        base_boots=1,
        head_boots=1,
        base_samples=1,
        head_samples=1,
        values={"base": [[100.0]], "head": [[90.0]]},
    )
    # An address alice asked kperf to confirm, its link not yet followed.
    link = {"token_hash": confirmations.token_hash("link-token"), "expires": timezone.now() + timedelta(days=7)}
    RecipientAddress.objects.create(user=alice, address="dev@elsewhere.example", requested=timezone.now(), **link)
    lab.ids = {
        "sub": sub.pk,
        "bob_sub": bob_sub.pk,
        "build": head_build.pk,
        "job": alice_job.pk,
        "leased": leased.pk,
        "branch": branch.pk,
        "bob_branch": bob_branch.pk,
        "bob_build": bob_build.pk,
        "bob_job": bob_job.pk,
        "ref": ref.pk,
        "ref_build": ref_build.pk,
        "ref_job": ref_job.pk,
        "runner": runner.pk,
        "tree": sub.tree_id,
        "cp": cp.pk,
        "sub_triage": sub_triage.pk,
        "plot": f"class={qemu_class.name}&benchmark=spawn&clock={qemu_class.clock}",
        "class_id": qemu_class.pk,
        "confirm_token": "link-token",
    }
    return lab


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """POST /branches/{id}/poll queues a task at once; here it is only recorded."""
    sent: list[tuple[Any, ...]] = []

    def send(*args: Any, **kw: Any) -> bool:
        sent.append(args)
        return True

    monkeypatch.setattr(dispatch, "send", send)
    return sent


def served_routes() -> dict[str, str]:
    """{URL name: route} of every URL Django answers; the admin counts as one (it is staff-only as a whole)."""
    found: dict[str, str] = {}

    def walk(patterns: list[Any], prefix: str, namespace: str) -> None:
        for p in patterns:
            route = prefix + str(p.pattern)
            if isinstance(p, URLResolver):
                if p.app_name == "admin":
                    found["admin"] = route
                    continue
                ns = f"{namespace}{p.namespace}:" if p.namespace else namespace
                walk(p.url_patterns, route, ns)
            elif isinstance(p, URLPattern):
                assert p.name, f"the route {route!r} has no name: give it one and a line in ROUTES"
                found[namespace + p.name] = route

    walk(get_resolver().url_patterns, "", "")
    return found


def test_every_route_has_an_authorization_decision() -> None:
    served = served_routes()
    missing = {name: route for name, route in served.items() if name not in ROUTES}
    assert not missing, f"routes with no line in ROUTES (decide who may call them): {missing}"
    assert not set(ROUTES) - set(served), f"ROUTES names routes that no longer exist: {set(ROUTES) - set(served)}"


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(ROUTES))
def test_route_answers_each_principal_as_decided(lab: Lab, name: str) -> None:
    method, template, body, expected = ROUTES[name]
    path = template.format(**lab.ids)
    got = {}
    for principal in PRINCIPALS:
        resp = lab.call(principal, method, path, body(lab) if body else None)
        got[principal] = resp.status_code
    assert got == dict(zip(PRINCIPALS, expected, strict=True)), f"{method} {path}"


def _ids(resp: Any) -> set[int]:
    assert resp.status_code == 200, resp.content
    return {item["id"] for item in resp.json()}


@pytest.mark.django_db
def test_lists_show_each_user_only_what_they_may_see(lab: Lab) -> None:
    i = lab.ids
    subs = {p: _ids(lab.call(p, "GET", "/api/v1/submissions")) for p in ("owner", "other", "staff")}
    assert subs == {"owner": {i["sub"]}, "other": {i["bob_sub"]}, "staff": {i["sub"], i["bob_sub"]}}
    assert _ids(lab.call("staff", "GET", "/api/v1/submissions?owner=bob")) == {i["bob_sub"]}
    assert _ids(lab.call("other", "GET", "/api/v1/submissions?owner=alice")) == set()
    # The staff-owned branch is the lab's reference series: every user reads it.
    branches = {p: _ids(lab.call(p, "GET", "/api/v1/branches")) for p in ("owner", "other", "staff")}
    assert branches == {
        "owner": {i["branch"], i["ref"]},
        "other": {i["bob_branch"], i["ref"]},
        "staff": {i["branch"], i["bob_branch"], i["ref"]},
    }
    # The pages list the same.
    for principal, mine, theirs in (("owner", "sub", "bob_sub"), ("other", "bob_sub", "sub")):
        page = lab.call(principal, "GET", "/").content.decode()
        assert f'/submissions/{i[mine]}"' in page and f'/submissions/{i[theirs]}"' not in page
    staff_page = lab.call("staff", "GET", "/").content.decode()
    assert f'/submissions/{i["sub"]}"' in staff_page and f'/submissions/{i["bob_sub"]}"' in staff_page
    page = lab.call("other", "GET", "/branches/").content.decode()
    assert f'/branches/{i["bob_branch"]}"' in page and f'/branches/{i["ref"]}"' in page
    assert f'/branches/{i["branch"]}"' not in page


@pytest.mark.django_db
def test_another_users_branch_cannot_be_taken_over_or_paused(lab: Lab) -> None:
    i = lab.ids
    repost = {"tree": TREE, "branch": "alice-branch", "benchmarks": ["spawn"], "boots": 100, "notify": ["b@x.org"]}
    resp = lab.call("other", "POST", "/api/v1/branches", repost)
    assert resp.status_code == 409 and resp.json()["code"] == "already-tracked"
    detail = resp.json()["detail"]
    assert "tracked by another user" in detail and "owner" in detail and "admin" in detail
    # The id of a branch bob may not read is not given away.
    assert str(i["branch"]) not in detail
    assert lab.call("other", "PATCH", f"/api/v1/branches/{i['branch']}", {"enabled": False}).status_code == 404
    branch = TrackedBranch.objects.get(pk=i["branch"])
    assert (branch.owner.username, branch.boots, branch.notify, branch.enabled) == ("alice", 0, [], True)
    # Staff may change it; it stays alice's.
    assert lab.call("staff", "POST", "/api/v1/branches", repost).status_code == 201
    branch.refresh_from_db()
    assert (branch.owner.username, branch.boots, branch.notify) == ("alice", 100, ["b@x.org"])


@pytest.mark.django_db
def test_the_reference_series_is_read_by_all_and_changed_by_staff(lab: Lab, no_broker: list[Any]) -> None:
    ref = lab.ids["ref"]
    for principal in ("owner", "other"):
        assert lab.call(principal, "GET", f"/api/v1/branches/{ref}").status_code == 200
        series = f"/api/v1/branches/{ref}/series?machine_class=qemu-x86_64&benchmark=spawn"
        assert lab.call(principal, "GET", series).status_code == 200
        assert lab.call(principal, "GET", f"/branches/{ref}").status_code == 200
        resp = lab.call(principal, "PATCH", f"/api/v1/branches/{ref}", {"enabled": False})
        assert resp.status_code == 403 and resp.json()["code"] == "forbidden"
        assert lab.call(principal, "POST", f"/api/v1/branches/{ref}/poll").status_code == 403
        resp = lab.call(principal, "POST", "/api/v1/branches", {"tree": TREE, "branch": "ref-branch", "boots": 9})
        assert resp.status_code == 409 and resp.json()["code"] == "already-tracked"
        assert f"/branches/{ref}" in resp.json()["detail"]
    assert no_broker == []
    assert TrackedBranch.objects.get(pk=ref).enabled and TrackedBranch.objects.get(pk=ref).boots == 0
    assert lab.call("staff", "PATCH", f"/api/v1/branches/{ref}", {"enabled": False}).status_code == 200
    assert lab.call("staff", "POST", f"/api/v1/branches/{ref}/poll").status_code == 202


@pytest.mark.django_db
def test_tracking_checks_the_acting_user_in_the_domain(lab: Lab) -> None:
    """The rule is branches.track's, not only the API view's."""
    req = TrackRequest(tree=TREE, branch="alice-branch", boots=7)
    with pytest.raises(branches.AlreadyTracked, match="another user"):
        branches.track(lab.users["other"], req)
    assert TrackedBranch.objects.get(pk=lab.ids["branch"]).boots == 0
    assert branches.track(lab.users["owner"], req).boots == 7
    new = branches.track(lab.users["other"], TrackRequest(tree=TREE, branch="bob-topic"))
    assert new.owner == lab.users["other"]


@pytest.mark.django_db
def test_logs_and_consoles_follow_what_they_belong_to(lab: Lab) -> None:
    i = lab.ids
    # Through the reference series, every user reads its builds' logs and jobs' consoles.
    for principal in ("owner", "other"):
        assert b"build log of ref-branch" in lab.call(principal, "GET", f"/builds/{i['ref_build']}/log").content
        assert b"console of ref-branch" in lab.call(principal, "GET", f"/jobs/{i['ref_job']}/console").content
    assert lab.call("owner", "GET", f"/builds/{i['bob_build']}/log").status_code == 404
    assert lab.call("owner", "GET", f"/jobs/{i['bob_job']}/console").status_code == 404
    # A build is shared by everyone who asked for the same kernel: bob asking for it too lets him read its log.
    build = KernelBuild.objects.get(pk=i["build"])
    assert lab.call("other", "GET", f"/builds/{build.pk}/log").status_code == 404
    BranchCommit.objects.get(branch_id=cast(int, i["bob_branch"])).builds.add(build)
    assert lab.call("other", "GET", f"/builds/{build.pk}/log").status_code == 200
    # ...but not the console of alice's job on it.
    assert lab.call("other", "GET", f"/jobs/{i['job']}/console").status_code == 404


@pytest.mark.django_db
def test_visible_jobs_are_own_reference_and_imported(lab: Lab) -> None:
    imported = mmtests_import.import_mmtests(import_body(lab)).jobs
    bob = set(access.visible_jobs(lab.users["other"]).values_list("pk", flat=True))
    bobs = set(Job.objects.filter(submission_id=lab.ids["bob_sub"]).values_list("pk", flat=True))
    assert bob == bobs | {lab.ids["bob_job"], lab.ids["ref_job"], *imported}
    assert access.visible_jobs(lab.users["staff"]).count() == Job.objects.count()
    assert not access.visible_jobs(None).exists()


@pytest.mark.django_db
def test_the_browser_session_on_the_api_hides_the_same(lab: Lab) -> None:
    client = Client()
    client.force_login(lab.users["owner"])
    assert client.get(f"/api/v1/submissions/{lab.ids['bob_sub']}").status_code == 404
    assert client.get(f"/api/v1/submissions/{lab.ids['sub']}").status_code == 200


@pytest.mark.django_db
def test_a_runner_touches_only_the_jobs_and_builds_it_holds(lab: Lab, qemu_class: MachineClass) -> None:
    _, other = qemu_runner("qemu-2", qemu_class)
    resp = other.post(f"/runner/jobs/{lab.ids['leased']}/progress", {"attempt": 1})
    assert resp.status_code == 409 and resp.json()["code"] == "not-held"
    assert other.get(f"/runner/builds/{lab.ids['build']}/artifacts/kernel").status_code == 403
    assert Runner.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_kperf_track_says_who_may_change_a_branch(
    live_server: Any, alice: User, django_user_model: Any, qemu_class: MachineClass, tmp_path: Path
) -> None:
    bob = django_user_model.objects.create_user("bob", "bob@example.org")
    TrackedBranch.objects.create(
        owner=alice, tree=Tree.objects.create(url=TREE), branch="mm-topic", benchmarks=["spawn"]
    )
    cli = kperf_cli(live_server.url, Api(ApiToken.issue(bob)[1]), tmp_path / "c.json")
    out = cli("track", TREE, "mm-topic", "--boots", "100")
    assert out.returncode == 2, out.stdout
    assert "409" in out.stderr and "already tracked by another user" in out.stderr and "admin" in out.stderr
    assert TrackedBranch.objects.get(branch="mm-topic").boots == 0
