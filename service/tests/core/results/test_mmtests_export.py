"""A submission's stored raw output, exported as mmtests result directories, reads back as kperf's samples
(kperf.core.results.mmtests_export)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core.models import Job, MachineClass, Sample
from kperf.mmtests import read_run

from tests.conftest import Api, kperf_cli
from tests.lab_fixtures import submission_ready_for_testing
from tests.mmtests_fixtures import upload_every_job

pytestmark = pytest.mark.django_db

# A kernel the export is not of: none of the submission's.
IMPORTED = "d" * 40


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
    # Imported back under another kernel's name: refused, the run says which kernel it measured.
    admin = kperf_cli(live_server.url, staff_api, tmp_path / "admin.json")
    run_dir = str(tmp_path / "log" / "spawn-vmas-0")
    out = admin("import-mmtests", run_dir, "--kernel-sha", IMPORTED, "--machine-class", qemu_class.name)
    assert out.returncode != 0 and f"says it measured kernel {'a' * 40}, not {IMPORTED}" in out.stderr
    # Imported back into another lab's class of the same shape, both runs to the kernel
    # they measured (kperf-run.json's): two series, each with its own values.
    other = MachineClass.objects.create(name="lab-b-qemu", arch="x86_64")
    for extra in (0, 1000):
        out = admin("import-mmtests", str(tmp_path / "log" / f"spawn-vmas-{extra}"), "--machine-class", other.name)
        assert out.returncode == 0, out.stderr
        # Each boot the export wrote (iter-<boot>) is a boot again.
        assert f"spawn ({3 * boots} samples in {boots} boots)" in out.stdout and "left out" not in out.stdout
        assert f"as {'a' * 12} on lab-b-qemu (instructions clock" in out.stdout
    assert Job.objects.filter(machine_class=other).count() == 2 * boots
    stored: dict[str, list[float]] = {}
    for metric, value in (
        Sample.objects.filter(boot_record__job__machine_class=other)
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
