"""One submission asks for several grids: pft's scaling beside quick, a comparison per grid (issue 41)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone

from kperf.cli.status import render_status
from kperf.core import benchmarks
from kperf.core.lab import eta
from kperf.core.lifecycle import owners
from kperf.core.mail import alerts
from kperf.core.models import (
    Comparison,
    Job,
    KernelBuild,
    MachineClass,
    SharedJob,
    Submission,
    SubmissionBuild,
    Tree,
)
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION, prepare_submission, schedule_jobs
from kperf.core.web import presenters

from tests.conftest import Api, kperf_cli
from tests.lab_fixtures import built, submission_page, submission_ready_for_testing

pytestmark = pytest.mark.django_db

BOOTS = 4  # pft's quick and scaling grids: boots per side


def pft_raw(params: dict[str, Any], value: float) -> str:
    """pft's console output for these parameters: an info line, pft's heading and a row per iteration."""
    lines = []
    for n in params["clients"]:
        lines += [
            f"pft-info: mode={params['mode']} clients={n} iterations={params['iterations']} bytes=1 pages=1 cpus=4",
            "  Gb  Thr CLine   User     System   Wall    flt/cpu/s fault/wsec",
        ]
        lines += [f"   0 {n:4d}   1     0.01s     0.10s     0.05s  {value:10.3f} {value:10.3f}"] * params["iterations"]
    return "\n".join(lines) + "\n"


def pft_results(job: dict[str, Any], value: float) -> dict[str, Any]:
    """One boot of a pft job as a runner uploads it: both metrics of every client count, each iteration."""
    params = job["params"]
    names = [f"faults/{kind}-{params['mode']}-{n}" for n in params["clients"] for kind in ("sec", "cpu")]
    return {
        "attempt": job["attempt"],
        "boots": [
            {
                "boot": 0,
                "environment": {"cpus": 4, "kernel_cmdline": "console=ttyS0", "clock": job["clock"]},
                "raw_output": pft_raw(params, value),
                "samples": [
                    {"metric": m, "iteration": i, "value": value * (1 + 0.001 * i)}
                    for m in names
                    for i in range(params["iterations"])
                ],
            }
        ],
        "metrics": {m: {"unit": "faults/s", "higher_is_better": True} for m in names},
        "console_log": "KPERF-DONE\n",
    }


def run_all(api: Api, head_value: float) -> None:
    """The runner claims until nothing is queued: base boots at 1000 faults/s, head boots at `head_value`."""
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        value = 1000.0 if Job.objects.get(pk=job["id"]).side == "base" else head_value
        resp = api.post(f"/runner/jobs/{job['id']}/results", pft_results(job, value))
        assert resp.status_code == 200, resp.content


def test_an_api_submission_of_two_grids_queues_the_jobs_of_both(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass, runner_api: Any, settings_dirs: Any
) -> None:
    runner, _ = runner_api
    runner.last_heartbeat = timezone.now()
    runner.save(update_fields=["last_heartbeat"])
    body = {"tree": str(small_tree), "branch": "feature", "base": "master", "benchmarks": ["pft", "spawn"]}
    resp = alice_api.post("/submissions", {**body, "grids": ["quick", "scaling"]})
    assert resp.status_code == 201, resp.content
    d = resp.json()
    # The first grid stays `grid`, for clients of the single-grid form.
    assert d["grids"] == ["quick", "scaling"] and d["grid"] == "quick"
    sub = Submission.objects.get(pk=d["id"])
    # spawn has no scaling grid: it runs the one it has.
    assert benchmarks.submission_runs(sub) == [("pft", "quick"), ("pft", "scaling"), ("spawn", "quick")]
    prepare_submission(sub.pk)
    KernelBuild.objects.update(status=KernelBuild.Status.DONE)
    schedule_jobs(sub, list(SubmissionBuild.objects.filter(submission=sub).select_related("build")))
    per_run = {
        (bench, grid, side): Job.objects.filter(submission=sub, benchmark=bench, grid=grid, side=side).count()
        for bench, grid in benchmarks.submission_runs(sub)
        for side in ("base", "head")
    }
    assert per_run == {key: BOOTS for key in per_run} and len(per_run) == 6
    assert not Job.objects.filter(submission=sub, benchmark="spawn", grid="scaling").exists()
    scaling = Job.objects.filter(submission=sub, grid="scaling").first()
    assert scaling is not None and scaling.params["clients"] == [1, 2, 3, 4]
    # The estimate counts every grid's jobs, and the boots further looks may add to each (up to twice K a side).
    jobs = presenters.submission_jobs(sub)
    assert {(j["benchmark"], j["grid"]) for j in jobs} == {("pft", "quick"), ("pft", "scaling"), ("spawn", "quick")}
    estimate = eta.for_submission(sub, jobs)["eta"]
    assert estimate is not None and estimate["more_jobs"] == 3 * 2 * BOOTS


def test_the_single_grid_form_still_works(alice_api: Api, small_tree: Path, qemu_class: MachineClass) -> None:
    body = {"tree": str(small_tree), "branch": "feature", "base": "master", "benchmarks": ["pft"]}
    resp = alice_api.post("/submissions", {**body, "grid": "scaling"})
    assert resp.status_code == 201, resp.content
    assert resp.json()["grids"] == ["scaling"] and resp.json()["grid"] == "scaling"
    # Neither: the quick grid, as before.
    resp = alice_api.post("/submissions", body)
    assert resp.status_code == 201 and resp.json()["grids"] == ["quick"]
    # One name as a string is the list of it.
    resp = alice_api.post("/submissions", {**body, "grids": "scaling"})
    assert resp.status_code == 201 and resp.json()["grids"] == ["scaling"]


def test_a_grid_that_is_no_list_of_names_gets_a_422_naming_the_field(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass
) -> None:
    body = {"tree": str(small_tree), "branch": "feature", "base": "master", "benchmarks": ["pft"]}
    resp = alice_api.post("/submissions", {**body, "grids": [{"name": "quick"}]})
    assert resp.status_code == 422 and resp.json()["code"] == "invalid"
    assert "grids" in resp.json()["detail"]
    assert not Submission.objects.exists()


def test_the_analysis_stores_a_comparison_per_grid_and_every_view_names_it(
    alice: User, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path, benchmarks=("pft",), grids=("quick", "scaling"))
    _, api = runner_api
    run_all(api, head_value=800.0)
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE, sub.error
    comps = {c.grid: c for c in Comparison.objects.filter(submission=sub)}
    assert set(comps) == {"quick", "scaling"}
    assert all(c.benchmark == "pft" for c in comps.values())
    # Both grids have faults/sec-threads-1: each comparison holds its own grid's boots alone.
    quick = {m.metric: m for m in comps["quick"].metrics.all()}
    scaling = {m.metric: m for m in comps["scaling"].metrics.all()}
    assert set(quick) == {"faults/sec-threads-1", "faults/cpu-threads-1"}
    assert len(scaling) == 8 and "faults/sec-threads-4" in scaling
    assert quick["faults/sec-threads-1"].base_boots == BOOTS == scaling["faults/sec-threads-1"].base_boots
    assert {m.verdict for m in [*quick.values(), *scaling.values()]} == {"regression"}

    page = submission_page(alice, sub)
    assert 'data-grid="quick"' in page and 'data-grid="scaling"' in page
    assert "(scaling grid)" in page and "&amp;grid=scaling" in page
    d = presenters.submission_detail(sub)
    assert sorted(c["grid"] for c in d["comparisons"]) == ["quick", "scaling"]
    status = render_status(dict(d), everything=True)
    assert "pft (quick grid) on qemu-x86_64" in status and "pft (scaling grid) on qemu-x86_64" in status
    _, body = alerts.submission_mail(sub)
    assert "pft (scaling grid), qemu-x86_64" in body and "(quick, scaling grids)" in body


def test_a_plot_and_an_export_name_their_grid(
    alice: User, alice_api: Api, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path, benchmarks=("pft",), grids=("quick", "scaling"))
    run_all(runner_api[1], head_value=800.0)
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    browser = Client()
    browser.force_login(alice)
    url = f"/submissions/{sub.pk}/plots/metric.svg?class=qemu-x86_64&benchmark=pft&clock=instructions"
    assert browser.get(f"{url}&grid=scaling&metric=faults/sec-threads-4").status_code == 200
    assert browser.get(f"{url}&grid=quick&metric=faults/sec-threads-4").status_code == 404
    # A link without a grid (made before there were several) is the first grid's.
    assert browser.get(f"{url}&metric=faults/sec-threads-1").status_code == 200
    assert browser.get(f"{url}&metric=faults/sec-threads-4").status_code == 404
    # One mmtests run is one grid's boots: of two, the export asks which.
    export = f"/submissions/{sub.pk}/mmtests?side=base&benchmark=pft"
    resp = alice_api.get(export)
    assert resp.status_code == 400 and "ran 2 grids (quick, scaling)" in resp.json()["detail"]
    assert "--grid" in resp.json()["detail"]
    resp = alice_api.get(f"{export}&grid=scaling")
    assert resp.status_code == 200, resp.content
    assert resp.json()["boots"] == BOOTS and not resp.json()["skipped"]


def test_base_boots_are_shared_only_with_a_submission_of_the_same_grid(
    alice: User, qemu_class: MachineClass, settings: Any, tmp_path: Path
) -> None:
    settings.KPERF_BASE_SHARE_WINDOW_SECONDS = 3600
    tree = Tree.objects.create(url=str(tmp_path / "tree"))
    base = built(tree, "a" * 40, tmp_path)

    def submit(head_sha: str, grids: list[str]) -> Submission:
        sub = Submission.objects.create(
            owner=alice,
            tree=tree,
            head_ref=f"feature-{head_sha[0]}",
            base_ref="master",
            head_sha=head_sha,
            base_sha=base.sha,
            benchmarks=["pft"],
            grids=grids,
            arches=["x86_64"],
            status=Submission.Status.TESTING,
        )
        head = built(tree, head_sha, tmp_path)
        schedule_jobs(
            sub,
            [
                SubmissionBuild.objects.create(submission=sub, build=base, side="base"),
                SubmissionBuild.objects.create(submission=sub, build=head, side="head"),
            ],
        )
        return sub

    first = submit("b" * 40, ["quick"])
    second = submit("c" * 40, ["quick", "scaling"])
    shared = SharedJob.objects.filter(submission=second).select_related("job")
    # Its quick base boots are the first's (queued, the same build and parameters); its scaling ones its own.
    assert {link.job.grid for link in shared} == {"quick"} and shared.count() == BOOTS
    assert {link.job.submission_id for link in shared} == {first.pk}
    assert Job.objects.filter(submission=second, grid="scaling", side="base").count() == BOOTS
    assert not Job.objects.filter(submission=second, grid="quick", side="base").exists()


@pytest.mark.django_db(transaction=True)
def test_the_migration_carries_each_submission_s_grid_into_its_list_and_its_comparisons(
    alice: User, qemu_class: MachineClass, tmp_path: Path
) -> None:
    before = [("core", "0034_shape_boot_spread")]
    executor = MigrationExecutor(connection)
    leaf = executor.loader.graph.leaf_nodes("core")
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        tree = old.get_model("core", "Tree").objects.create(url=str(tmp_path / "tree"))
        look = {"machine_class_id": qemu_class.pk, "benchmark": "pft", "clock": "instructions", "jobs": 8}
        rerun = {"machine_class": qemu_class.name, "benchmark": "pft", "look": 1, "more_boots": 4, "inconclusive": []}
        sub = old.get_model("core", "Submission").objects.create(
            owner_id=alice.pk,
            tree=tree,
            head_ref="feature",
            base_ref="master",
            benchmarks=["pft"],
            grid="scaling",
            arches=["x86_64"],
            interim_looks=[look],
            reruns=[rerun],
        )
        old.get_model("core", "Comparison").objects.create(
            submission=sub, machine_class_id=qemu_class.pk, benchmark="pft", method="m", alpha=0.05
        )
    finally:
        MigrationExecutor(connection).migrate(leaf)
    new = Submission.objects.get(pk=sub.pk)
    assert new.grids == ["scaling"]
    # The looks taken and the boots added name the grid, so a running submission knows them again.
    assert new.interim_looks == [{**look, "grid": "scaling"}] and new.reruns == [{**rerun, "grid": "scaling"}]
    assert list(Comparison.objects.filter(submission=new).values_list("grid", flat=True)) == ["scaling"]


def test_kperf_submit_takes_grid_again_for_each_grid(
    live_server: Any, alice_api: Api, small_tree: Path, qemu_class: MachineClass, tmp_path: Path
) -> None:
    cli = kperf_cli(live_server.url, alice_api, tmp_path / "c.json")
    args = ("submit", "--tree", str(small_tree), "--branch", "feature", "--base", "master", "--bench", "pft")
    refused = cli(*args, "--grid", "quick", "--grid", "huge")
    assert refused.returncode == 2 and "400: no grid 'huge' in pft" in refused.stderr, refused.stderr
    assert not Submission.objects.exists()
    ok = cli(*args, "--grid", "quick", "--grid", "scaling")
    assert ok.returncode == 0, ok.stderr
    sub = Submission.objects.get()
    assert sub.grids == ["quick", "scaling"]
    # Wrapped to the terminal's width: read as one line.
    assert "benchmarks pft (quick, scaling)" in " ".join(cli("status", str(sub.pk)).stdout.split())
    # One --grid is the single-grid form any server takes.
    assert cli(*args, "--grid", "scaling").returncode == 0
    assert Submission.objects.latest("pk").grids == ["scaling"]
