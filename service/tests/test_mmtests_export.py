"""A submission's stored raw output, exported as mmtests result directories, reads back as kperf's samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core.models import Job, Sample
from kperf.mmtests import read_run
from kperf_runner.benchmarks import get_benchmark

from .conftest import Api, kperf_cli
from .lab_fixtures import results_body, submission_ready_for_testing

pytestmark = pytest.mark.django_db

# A real spawn run (quick grid: 0.2 s, 3 iterations, 0 and 1000 extra VMAs) as the runner uploads it.
RAW = (Path(__file__).parents[2] / "runners" / "tests" / "data" / "spawn-native-x86_64.txt").read_text()
SPAWN = get_benchmark("spawn")
# The kernel the export is imported back as: none of the submission's.
IMPORTED = "d" * 40


def upload_every_job(api: Api) -> dict[str, list[float]]:
    """Every queued job gets the captured run; kperf's samples of one boot, per metric."""
    samples: dict[str, list[float]] = {}
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        body = results_body(job)
        parsed = SPAWN.parse(RAW, job["params"])
        body["boots"][0]["raw_output"] = RAW
        body["boots"][0]["samples"] = [{"metric": s.metric, "iteration": s.iteration, "value": s.value} for s in parsed]
        assert api.post(f"/runner/jobs/{job['id']}/results", body).status_code == 200
        samples = {}
        for s in parsed:
            samples.setdefault(s.metric, []).append(s.value)
    return samples


def test_a_side_exports_as_mmtests_runs_that_read_back_as_kperfs_samples(
    alice: Any, alice_api: Api, staff_api: Api, qemu_class: Any, runner_api: Any, tmp_path: Path, live_server: Any
) -> None:
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    one_boot = upload_every_job(api)
    boots = Job.objects.filter(submission=sub, side="base").count()
    d = alice_api.get(f"/submissions/{sub.pk}/mmtests?side=base&benchmark=spawn").json()
    assert d["boots"] == boots and d["runs"] == ["spawn-vmas-0", "spawn-vmas-1000"] and d["skipped"] == []
    # UnixBench's layout: one spawn-1-<i>.log per pass, in each iteration (boot) directory.
    assert "spawn-vmas-0/iter-0/unixbench-spawn/logs/spawn-1-1.log" in d["files"]
    # What kperf's own mmtests reader (the import's) finds there is what kperf measured.
    cli = kperf_cli(live_server.url, alice_api, tmp_path / "c.json")
    out = cli("export-mmtests", str(sub.pk), "--side", "base", "--bench", "spawn", "--out", str(tmp_path / "log"))
    assert out.returncode == 0, out.stderr
    assert "extract-mmtests.pl -d" in out.stdout
    for extra in (0, 1000):
        run = read_run(tmp_path / "log" / f"spawn-vmas-{extra}")
        # Each run is its own experiment: its extra VMAs name every sample, as kperf named them.
        assert {m for m, _, _ in run.benchmarks["spawn"].samples} == {f"spawn-vmas-{extra}"}
        read = [v for _, _, v in run.benchmarks["spawn"].samples]
        assert read == pytest.approx(one_boot[f"spawn-vmas-{extra}"] * boots, rel=1e-3)
    again = cli("export-mmtests", str(sub.pk), "--side", "base", "--bench", "spawn", "--out", str(tmp_path / "log"))
    assert again.returncode != 0 and "is not empty" in again.stderr
    # Imported back, both runs to one kernel: two series, each with its own values.
    admin = kperf_cli(live_server.url, staff_api, tmp_path / "admin.json")
    for extra in (0, 1000):
        run_dir = str(tmp_path / "log" / f"spawn-vmas-{extra}")
        out = admin("import-mmtests", run_dir, "--kernel-sha", IMPORTED, "--machine-class", qemu_class.name)
        assert out.returncode == 0, out.stderr
        assert f"spawn ({3 * boots} samples)" in out.stdout and "left out" not in out.stdout
    stored: dict[str, list[float]] = {}
    for metric, value in (
        Sample.objects.filter(boot_record__job__build__sha=IMPORTED)
        .order_by("boot_record__job_id", "iteration")
        .values_list("metric", "value")
    ):
        stored.setdefault(metric, []).append(value)
    assert stored.keys() == {"spawn-vmas-0", "spawn-vmas-1000"}
    for metric, values in stored.items():
        # UnixBench's index row has one decimal of kperf's forks/s.
        assert values == pytest.approx(one_boot[metric] * boots, abs=0.051)


def test_an_export_without_boots_says_what_is_missing(
    alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    resp = alice_api.get(f"/submissions/{sub.pk}/mmtests?side=head&benchmark=spawn")
    assert resp.status_code == 400 and "no finished spawn boot on the head side" in resp.json()["detail"]
    resp = alice_api.get(f"/submissions/{sub.pk}/mmtests?side=left&benchmark=spawn")
    assert resp.status_code == 400 and "side must be base or head" in resp.json()["detail"]
    resp = alice_api.get(f"/submissions/{sub.pk}/mmtests?side=base&benchmark=dhrystone")
    assert resp.status_code == 400 and "dhrystone" in resp.json()["detail"]
