"""A submission's own kernel command line words and THP mode: asked, checked, carried, kept apart
(kperf.core.lab.boot_params)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from kperf.core.models import Job, KernelBuild, RunSummary, SharedJob, Submission, SubmissionBuild, Tree
from kperf.core.results import summaries
from kperf.core.submissions.analysis import compare_kernels
from kperf.core.submissions.pipeline import schedule_jobs

from tests.conftest import Api, kperf_cli
from tests.lab_fixtures import built, results_body

pytestmark = pytest.mark.django_db

BASE_SHA = "a" * 40


def body(tree_path: Path | str, **kw: Any) -> dict[str, Any]:
    b: dict[str, Any] = {"tree": str(tree_path), "branch": "feature", "base": "master", "benchmarks": ["spawn"]}
    b.update(kw)
    return b


def test_a_submission_keeps_its_boot_params_and_thp_and_shows_them(
    alice_api: Api, small_tree: Path, qemu_class: Any
) -> None:
    resp = alice_api.post("/submissions", body(small_tree, boot_params=" mitigations=off   nosmt ", thp="never"))
    assert resp.status_code == 201, resp.content
    answer = resp.json()
    # Stored as the words, single-spaced: what the runner appends.
    assert answer["boot_params"] == "mitigations=off nosmt" and answer["thp"] == "never"
    sub = Submission.objects.get(pk=answer["id"])
    assert (sub.boot_params, sub.thp) == ("mitigations=off nosmt", "never")
    shown = alice_api.get(f"/submissions/{sub.pk}").json()
    assert shown["boot_params"] == "mitigations=off nosmt" and shown["thp"] == "never"
    listed = alice_api.get("/submissions").json()
    assert listed[0]["boot_params"] == "mitigations=off nosmt" and listed[0]["thp"] == "never"
    plain = alice_api.post("/submissions", body(small_tree)).json()
    assert plain["boot_params"] == "" and plain["thp"] == ""


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"boot_params": "nosmt panic=0"}, "boot_params", "'panic=0' is kperf's own"),
        ({"boot_params": "console=ttyS1"}, "boot_params", "reads the benchmark's results from the console"),
        ({"boot_params": "init=/bin/sh"}, "boot_params", "'init=/bin/sh' is kperf's own"),
        ({"boot_params": "rdinit=/x"}, "boot_params", "'rdinit=/x' is kperf's own"),
        ({"boot_params": "root=/dev/sda1"}, "boot_params", "not from a disk"),
        ({"boot_params": "kperf.end=poweroff"}, "boot_params", "kperf.* words"),
        ({"boot_params": "ramoops.mem_size=1"}, "boot_params", "ramoops"),
        ({"boot_params": "memmap=1G$4G"}, "boot_params", "reserves memory for ramoops"),
        ({"boot_params": "transparent_hugepage=always"}, "boot_params", "the thp field"),
        ({"boot_params": 'dyndbg="file x +p"'}, "boot_params", "may not hold quotes"),
        ({"boot_params": "nosmt\nnokaslr"}, "boot_params", "must be one line"),
        ({"boot_params": "nosmt\x01"}, "boot_params", "only printable ASCII"),
        ({"boot_params": "café=1"}, "boot_params", "only printable ASCII"),
        ({"boot_params": "a=b\\c"}, "boot_params", "only printable ASCII"),
        ({"boot_params": "x" * 513}, "boot_params", "at most 512 are taken"),
        ({"thp": "sometimes"}, "thp", "thp must be one of always, madvise, never"),
    ],
)
def test_bad_boot_params_get_a_400_that_names_the_word_and_stores_nothing(
    alice_api: Api, small_tree: Path, qemu_class: Any, change: dict[str, Any], field: str, says: str
) -> None:
    resp = alice_api.post("/submissions", body(small_tree, **change))
    assert resp.status_code == 400, resp.content
    err = resp.json()
    assert err["code"] == "invalid-submission" and err["field"] == field
    assert says in err["detail"], err["detail"]
    assert not Submission.objects.exists() and not Tree.objects.exists()


@pytest.fixture
def browser(alice: Any) -> Client:
    c = Client()
    assert c.login(username="alice", password="alice-password-1")
    return c


def form(tree: Path, **changes: Any) -> dict[str, Any]:
    fields = {
        "tree": str(tree),
        "branch": "feature",
        "base": "master",
        "benchmarks": ["spawn"],
        "grids": ["quick"],
        "arches": ["x86_64"],
    }
    return fields | changes


def test_the_form_takes_boot_params_and_thp_and_the_page_shows_them(
    browser: Client, small_tree: Path, qemu_class: Any
) -> None:
    new = browser.get("/submissions/new").content.decode()
    assert 'name="boot_params"' in new and 'name="thp"' in new and 'value="madvise"' in new
    resp = browser.post("/submissions/new", form(small_tree, boot_params="mitigations=off", thp="madvise"))
    sub = Submission.objects.get()
    assert resp.status_code == 302 and (sub.boot_params, sub.thp) == ("mitigations=off", "madvise")
    page = browser.get(resp["Location"]).content.decode()
    assert '<code id="boot-params">mitigations=off</code>' in page and '<code id="thp">madvise</code>' in page


def test_the_form_says_which_word_is_refused_and_stores_nothing(
    browser: Client, small_tree: Path, qemu_class: Any
) -> None:
    resp = browser.post("/submissions/new", form(small_tree, boot_params="nosmt kperf.boot=1"))
    page = resp.content.decode()
    assert resp.status_code == 200 and "&#x27;kperf.boot=1&#x27; is kperf&#x27;s own" in page
    assert not Submission.objects.exists()


def test_a_page_without_boot_params_says_nothing_about_them(browser: Client, small_tree: Path, qemu_class: Any) -> None:
    resp = browser.post("/submissions/new", form(small_tree))
    page = browser.get(resp["Location"]).content.decode()
    assert 'id="boot-setup"' not in page


def test_kperf_submit_sends_boot_params_and_thp_and_shows_the_refusal(
    live_server: Any, alice_api: Api, small_tree: Path, qemu_class: Any, tmp_path: Path
) -> None:
    cli = kperf_cli(live_server.url, alice_api, tmp_path / "c.json")
    args = ("submit", "--tree", str(small_tree), "--branch", "feature", "--base", "master")
    refused = cli(*args, "--boot-params", "nosmt console=ttyS1")
    assert refused.returncode == 2
    assert "400: boot_params word 'console=ttyS1' is kperf's own" in refused.stderr, refused.stderr
    bad_thp = cli(*args, "--thp", "often")
    assert bad_thp.returncode == 2 and "thp must be one of always, madvise, never" in bad_thp.stderr
    assert not Submission.objects.exists()
    ok = cli(*args, "--boot-params", "mitigations=off nosmt", "--thp", "always")
    assert ok.returncode == 0, ok.stderr
    sub = Submission.objects.get()
    assert (sub.boot_params, sub.thp) == ("mitigations=off nosmt", "always")
    status = cli("status", str(sub.pk))
    assert "boot params: mitigations=off nosmt  thp: always" in status.stdout


# --- jobs, sharing and pooling ------------------------------------------------------------


class Lab:
    """One tree and one base kernel; submissions of several heads against it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.tree = Tree.objects.create(url=str(tmp / "tree"))
        self.base = built(self.tree, BASE_SHA, tmp)

    def submit(self, owner: User, head_sha: str, boot_params: str = "", thp: str = "") -> Submission:
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
            boot_params=boot_params,
            thp=thp,
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


def run_all(api: Api) -> list[dict[str, Any]]:
    """Claim and finish every queued job; returns the claim answers."""
    claims = []
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        claims.append(job)
        assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job)).status_code == 200
    return claims


def test_the_claim_carries_the_submissions_boot_params_and_thp_to_the_runner(
    lab: Lab, alice: User, runner_api: Any
) -> None:
    sub = lab.submit(alice, "b" * 40, boot_params="mitigations=off nosmt", thp="madvise")
    plain = lab.submit(alice, "c" * 40)
    _, api = runner_api
    kernels = {(c["id"], c["kernel"]["cmdline"], c["kernel"]["thp"]) for c in run_all(api)}
    ids = {j.pk: j.submission_id for j in Job.objects.all()}
    assert {(ids[i], cmdline, thp) for i, cmdline, thp in kernels} == {
        (sub.pk, "mitigations=off nosmt", "madvise"),
        (plain.pk, "", ""),
    }
    # Both sides of the submission, every boot.
    assert set(Job.objects.filter(submission=sub).values_list("side", "boot_params", "thp")) == {
        ("base", "mitigations=off nosmt", "madvise"),
        ("head", "mitigations=off nosmt", "madvise"),
    }


def test_base_boots_are_shared_only_between_submissions_booted_the_same_way(
    lab: Lab, alice: User, qemu_class: Any
) -> None:
    first = lab.submit(alice, "b" * 40, thp="always")
    other_thp = lab.submit(alice, "c" * 40, thp="never")
    other_words = lab.submit(alice, "d" * 40, boot_params="nosmt", thp="always")
    plain = lab.submit(alice, "e" * 40)
    same = lab.submit(alice, "f" * 40, thp="always")
    # Nothing to share for the ones booted differently: they queue their own base boots...
    for sub in (first, other_thp, other_words, plain):
        assert not SharedJob.objects.filter(submission=sub).exists(), sub
        assert Job.objects.filter(submission=sub, side="base").count() == 4
    # ... and the one booted as the first was shares the first's.
    shared = SharedJob.objects.filter(submission=same)
    assert shared.count() == 4 and {link.job.submission_id for link in shared} == {first.pk}
    assert not Job.objects.filter(submission=same, side="base").exists()
    # The base kernel is built once for all of them.
    assert set(SubmissionBuild.objects.filter(side="base").values_list("build_id", flat=True)) == {lab.base.pk}


def test_boots_with_boot_params_stay_out_of_the_kernels_history(lab: Lab, alice: User, runner_api: Any) -> None:
    tuned = lab.submit(alice, "b" * 40, boot_params="nosmt", thp="always")
    _, api = runner_api
    run_all(api)
    tuned_jobs = Job.objects.filter(submission=tuned)
    assert tuned_jobs.filter(status=Job.Status.DONE).count() == 8
    summaries.summarise(Job.objects.all())
    # Measured another way, they are not the kernels' runs the noise model pools.
    assert not RunSummary.objects.exists()
    assert compare_kernels("qemu-x86_64", "spawn", BASE_SHA, "b" * 40)["metrics"] == []
    plain = lab.submit(alice, "c" * 40)
    run_all(api)
    summaries.summarise(Job.objects.all())
    base_runs = RunSummary.objects.filter(sha=BASE_SHA)
    # The base kernel's run holds the plain submission's 4 boots, not the 4 with nosmt and THP always.
    assert base_runs.exists() and set(base_runs.values_list("boots", flat=True)) == {4}
    assert Job.objects.filter(submission=plain, side="base", status=Job.Status.DONE).count() == 4
    assert not RunSummary.objects.filter(sha="b" * 40).exists()
    compared = compare_kernels("qemu-x86_64", "spawn", BASE_SHA, "c" * 40)
    assert compared["metrics"]
    assert {(m["base_boots"], m["head_boots"]) for m in compared["metrics"]} == {(4, 4)}
