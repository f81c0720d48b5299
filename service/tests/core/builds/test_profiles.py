"""Configuration profiles and vCPUs: recorded on every build and job, chosen per
submission, tracked branch or machine class, never pooled across (docs/kernels.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kperf.core.builds import machines
from kperf.core.lab import leases
from kperf.core.lifecycle import owners
from kperf.core.mail import alerts
from kperf.core.models import Job, KernelBuild, MachineClass, Submission, SubmissionBuild, TrackedBranch
from kperf.core.results import summaries
from kperf.core.submissions.pipeline import SUBMISSION, prepare_submission, schedule_jobs
from kperf.core.tracking import branches
from kperf_kbuild.driver import config_digest

from tests.conftest import Api
from tests.lab_fixtures import results_body
from tests.tracking_fixtures import finish_builds

pytestmark = pytest.mark.django_db


def body(tree_path: Path, **kw: Any) -> dict[str, Any]:
    b: dict[str, Any] = {"tree": str(tree_path), "branch": "feature", "base": "master", "benchmarks": ["spawn"]}
    b.update(kw)
    return b


def prepared(api: Api, tree: Path, **kw: Any) -> Submission:
    resp = api.post("/submissions", body(tree, **kw))
    assert resp.status_code == 201, resp.content
    prepare_submission(resp.json()["id"])
    return Submission.objects.get(pk=resp.json()["id"])


def built(sub: Submission) -> list[SubmissionBuild]:
    """Its builds, marked built (the jobs are what is tested here, not the build machine)."""
    links = list(SubmissionBuild.objects.filter(submission=sub).select_related("build"))
    KernelBuild.objects.filter(pk__in=[sb.build_id for sb in links]).update(status=KernelBuild.Status.DONE)
    return links


def test_a_submission_s_profile_makes_its_builds_and_is_shown(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass, settings_dirs: Any
) -> None:
    sub = prepared(alice_api, small_tree, profile="mm")
    builds = [sb.build for sb in built(sub)]
    assert len(builds) == 2
    assert {b.profile for b in builds} == {"mm"}
    assert {b.config_digest for b in builds} == {config_digest("x86_64", profile="mm")}
    assert config_digest("x86_64", profile="mm") != config_digest("x86_64")
    # The build machine is told which profile to build (docs/builders.md, "claim").
    assert machines.claim_payload(builds[0])["profile"] == "mm"
    detail = alice_api.get(f"/submissions/{sub.pk}").json()
    assert detail["profile"] == "mm"
    assert {b["profile"] for b in detail["builds"]} == {"mm"}


def test_without_a_profile_each_class_measures_its_own(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass, settings_dirs: Any
) -> None:
    smp = MachineClass.objects.create(name="qemu-x86_64-mm-smp2", arch="x86_64", profile="mm", vcpus=2)
    sub = prepared(alice_api, small_tree)
    links = built(sub)
    assert sorted((sb.side, sb.build.profile) for sb in links) == [
        ("base", "mm"),
        ("base", "tiny"),
        ("head", "mm"),
        ("head", "tiny"),
    ]
    schedule_jobs(sub, links)
    jobs = list(Job.objects.filter(submission=sub).select_related("build", "machine_class"))
    assert {(j.machine_class.name, j.build.profile, j.vcpus) for j in jobs} == {
        (qemu_class.name, "tiny", 0),
        (smp.name, "mm", 2),
    }
    # The runner is told how many vCPUs to boot.
    mm_job = next(j for j in jobs if j.machine_class == smp)
    assert leases.job_payload(mm_job)["vcpus"] == 2


def test_an_unknown_profile_is_refused_with_the_choices(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass
) -> None:
    resp = alice_api.post("/submissions", body(small_tree, profile="huge"))
    assert resp.status_code == 400
    err = resp.json()
    assert err["field"] == "profile"
    assert "tiny, mm, distro" in err["detail"]
    assert not Submission.objects.exists()


def test_a_grid_that_needs_memcg_and_swap_is_refused_on_the_tiny_profile(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass, settings_dirs: Any
) -> None:
    wanted = body(small_tree, benchmarks=["pft"], grid="memcg-swap")
    # The class builds tiny (no cgroups, no block layer): refused before anything is stored.
    resp = alice_api.post("/submissions", wanted)
    assert resp.status_code == 400, resp.content
    err = resp.json()
    assert err["field"] == "grid"
    assert "the memcg-swap grid of pft needs memcg and swap" in err["detail"]
    assert "tiny profile does not build" in err["detail"] and "mm or distro profile" in err["detail"]
    resp = alice_api.post("/branches", {**wanted, "profile": "tiny"})
    assert resp.status_code == 400 and resp.json()["field"] == "profile", resp.content
    assert not Submission.objects.exists() and not TrackedBranch.objects.exists()
    # Asked with a profile that has both, on the same class: accepted and built so.
    sub = prepared(alice_api, small_tree, benchmarks=["pft"], grid="memcg-swap", profile="mm")
    assert {sb.build.profile for sb in built(sub)} == {"mm"}
    # A class of the mm profile beside the tiny one: without a profile, tiny is still measured.
    MachineClass.objects.create(name="qemu-x86_64-mm", arch="x86_64", profile="mm")
    resp = alice_api.post("/submissions", wanted)
    assert resp.status_code == 400 and "tiny profile" in resp.json()["detail"]


def test_a_branch_of_a_profile_no_class_measures_is_refused_then_measured_only_there(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass, settings_dirs: Any, tmp_path: Path
) -> None:
    resp = alice_api.post("/branches", {"tree": str(small_tree), "branch": "feature", "profile": "mm"})
    assert resp.status_code == 400, resp.content
    assert resp.json()["field"] == "profile"
    assert "no machine class of x86_64 measures the mm profile" in resp.json()["detail"]
    assert not TrackedBranch.objects.exists()

    mm = MachineClass.objects.create(name="qemu-x86_64-mm", arch="x86_64", profile="mm")
    resp = alice_api.post("/branches", {"tree": str(small_tree), "branch": "feature", "profile": "mm"})
    assert resp.status_code == 201, resp.content
    assert resp.json()["profile"] == "mm"
    branch = TrackedBranch.objects.get()
    [commit] = branches.poll_branch(branch.pk)
    assert {b.profile for b in commit.builds.all()} == {"mm"}
    finish_builds(branch, tmp_path)
    owners.advance(branches.COMMIT, commit.pk)
    assert set(Job.objects.filter(branch_commit=commit).values_list("machine_class_id", flat=True)) == {mm.pk}


def test_the_history_keeps_only_the_class_s_profile_and_vcpus(
    alice: Any, qemu_class: MachineClass, tmp_path: Path
) -> None:
    from kperf_testing.lab import submission_ready_for_testing

    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    jobs = Job.objects.filter(submission=sub)
    assert summaries.default_boots(jobs).count() == jobs.count()
    one = jobs.first()
    assert one is not None
    Job.objects.filter(pk=one.pk).update(vcpus=2)
    assert summaries.default_boots(jobs).count() == jobs.count() - 1
    other = jobs.exclude(pk=one.pk).first()
    assert other is not None
    Job.objects.filter(pk=other.pk).update(numa_nodes=2)
    assert summaries.default_boots(jobs).count() == jobs.count() - 2
    # The class booting two nodes from now on: only that boot is its own.
    MachineClass.objects.filter(pk=qemu_class.pk).update(numa_nodes=2)
    assert list(summaries.default_boots(jobs).values_list("pk", flat=True)) == [other.pk]
    MachineClass.objects.filter(pk=qemu_class.pk).update(numa_nodes=0)
    Job.objects.filter(pk=other.pk).update(numa_nodes=0)
    KernelBuild.objects.filter(pk=one.build_id).update(profile="mm")
    # Every job of that build (one side) is out now.
    assert summaries.default_boots(jobs).count() == jobs.exclude(build_id=one.build_id).count()


def test_page_and_mail_say_which_profile_vcpus_and_numa_nodes(
    alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path, client: Client
) -> None:
    from tests.mail_fixtures import finished_submission

    MachineClass.objects.filter(pk=qemu_class.pk).update(vcpus=2, numa_nodes=2)
    qemu_class.refresh_from_db()
    sub = finished_submission(alice, qemu_class, runner_api[1], tmp_path, head_level=500.0)
    # Each job took the class's shape when queued, and the runner is told it.
    jobs = Job.objects.filter(submission=sub)
    assert set(jobs.values_list("vcpus", "numa_nodes")) == {(2, 2)}
    job = jobs.first()
    assert job is not None
    assert {k: leases.job_payload(job)[k] for k in ("vcpus", "numa_nodes")} == {"vcpus": 2, "numa_nodes": 2}
    _, body_text = alerts.submission_mail(sub)
    assert "Kernels built with the tiny configuration profile." in body_text
    flat = " ".join(body_text.split())
    assert f"spawn on {qemu_class.name} (tiny profile, 2 vCPUs, 2 NUMA nodes), instruction clock" in flat
    assert max(len(line) for line in body_text.splitlines()) <= 80
    client.force_login(alice)
    page = client.get(f"/submissions/{sub.pk}").content.decode()
    assert 'kernels of <span id="profile">each machine class\'s configuration profile' in page
    assert (
        '<span class="profile">tiny</span> profile, booted with <span class="vcpus">2</span> vCPUs, '
        '<span class="numa-nodes">2</span> NUMA nodes'
    ) in page


def test_a_benchmark_module_that_does_not_fit_the_release_is_named_in_the_failure(
    alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    from kperf_testing.lab import submission_ready_for_testing

    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    head = SubmissionBuild.objects.get(submission=sub, side="head").build
    missing = "pagealloc.ko not built: pagealloc.c:40:9: error: implicit declaration of function 'alloc_pages_node'"
    KernelBuild.objects.filter(pk=head.pk).update(warnings=[missing])
    runner = runner_api[1]
    while (job := runner.post("/runner/claim").json()["job"]) is not None:
        if Job.objects.get(pk=job["id"]).side == "head":
            failed = runner.post(
                f"/runner/jobs/{job['id']}/fail",
                {"attempt": 1, "kind": "benchmark", "message": "pagealloc needs the build artifact pagealloc.ko"},
            )
            assert failed.status_code == 200, failed.content
            break
        assert runner.post(f"/runner/jobs/{job['id']}/results", results_body(job)).status_code == 200
    owners.advance(SUBMISSION, sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.FAILED
    # A kernel's failure, and the build's own words say which module and why.
    assert "benchmark failure" in sub.error and f"its build said: {missing}" in sub.error, sub.error


ECHO = "echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/backports.list"


def test_an_infrastructure_failure_is_not_glued_onto_an_unrelated_build_warning(
    alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path, client: Client
) -> None:
    from kperf_testing.lab import submission_ready_for_testing

    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    head = SubmissionBuild.objects.get(submission=sub, side="head").build
    warning = "fragment option CONFIG_THERMAL not set in the built .config"
    KernelBuild.objects.filter(pk=head.pk).update(warnings=[warning])
    # The last attempt: an infra failure fails the job for good rather than queueing it again.
    Job.objects.filter(submission=sub).update(max_attempts=1)
    # The runner's refusal (kperf_runner.backends.qemu_version), commands on lines of their own.
    refusal = (
        "the job wants 2 vCPUs on the instruction clock, which needs QEMU 8.1 or later (...); as root:"
        f"\n  {ECHO}\n  apt-get update\n  apt-get install -t bookworm-backports qemu-system-x86"
    )
    runner = runner_api[1]
    while (job := runner.post("/runner/claim").json()["job"]) is not None:
        if Job.objects.get(pk=job["id"]).side == "head":
            body = {"attempt": job["attempt"], "kind": "infra", "message": refusal}
            assert runner.post(f"/runner/jobs/{job['id']}/fail", body).status_code == 200
            break
        assert runner.post(f"/runner/jobs/{job['id']}/results", results_body(job)).status_code == 200
    owners.advance(SUBMISSION, sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.FAILED
    # The runner's fault ends the message; the build's words about the kernel are not part of it.
    assert "could not be run" in sub.error and sub.error.endswith(f"(job {job['id']}, infra failure): {refusal}")
    assert warning not in sub.error, sub.error
    _, body_text = alerts.submission_mail(sub)
    assert warning not in body_text
    # A command stays whole on its line in the mail, however long, to be pasted as it is.
    assert f"\n  {ECHO}\n  apt-get update\n" in body_text, body_text
    # On the page, each command on its own line.
    client.force_login(alice)
    page = client.get(f"/submissions/{sub.pk}").content.decode()
    assert "backports.list<br>  apt-get update<br>  apt-get install -t bookworm-backports qemu-system-x86" in page
    assert warning not in page.split('id="error"')[1].split("</p>")[0]


def test_add_runner_sets_the_class_s_shape_and_says_its_history_starts_anew(qemu_class: MachineClass) -> None:
    import io

    from django.core.management import call_command

    out, err = io.StringIO(), io.StringIO()
    call_command(
        "add_runner",
        "numa-1",
        "--machine-class",
        qemu_class.name,
        "--arch",
        "x86_64",
        "--profile",
        "mm",
        "--vcpus",
        "4",
        "--numa-nodes",
        "2",
        stdout=out,
        stderr=err,
    )
    qemu_class.refresh_from_db()
    assert (qemu_class.profile, qemu_class.vcpus, qemu_class.numa_nodes) == ("mm", 4, 2)
    assert "now measures with profile mm, vcpus 4, numa_nodes 2; its history starts anew" in err.getvalue()
    assert out.getvalue().strip()  # the new runner's token
    # The same shape again changes nothing and says nothing of history.
    err = io.StringIO()
    call_command("add_runner", "numa-2", "--machine-class", qemu_class.name, "--arch", "x86_64",
                 "--numa-nodes", "2", stdout=io.StringIO(), stderr=err)  # fmt: skip
    assert "history" not in err.getvalue()
