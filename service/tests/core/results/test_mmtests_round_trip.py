"""An export carries how kperf measured it (clock, profile, machine shape, kernel), and an import keeps it:
an imported comparison is judged as the original was (kperf.core.results.mmtests_export, mmtests_import)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kperf.core import benchmarks
from kperf.core.models import BootRecord, Job, KernelBuild, MachineClass
from kperf.core.submissions.pipeline import schedule_jobs
from kperf.mmtests import MmtestsImportError, read_run
from kperf_runner.benchmarks import get_benchmark

from tests.conftest import Api, kperf_cli
from tests.lab_fixtures import finish_all, results_body, submission_ready_for_testing
from tests.mmtests_layout import kperf_spawn_output

pytestmark = pytest.mark.django_db

BASE, HEAD = "a" * 40, "b" * 40
# Where the export says how a run was measured (docs/benchmarks.md): the name is the contract.
KPERF_RUN_FILE = "kperf-run.json"
SPAWN = get_benchmark("spawn")
# What each side's kernel said `uname -r` was (kperf's init reports it; docs/runner-protocol.md).
RELEASE = {"base": "6.12.0-kperf-00001-gaaaaaaaaaaaa", "head": "6.12.0-kperf-00002-gbbbbbbbbbbbb"}


def spawn_boot(job: dict[str, Any], side: str) -> dict[str, Any]:
    """One boot of kperf's spawn as a runner reports it: its own raw output (seeded by the job), the samples
    kperf's parser reads from it, and the release the booted kernel reported."""
    raw = kperf_spawn_output(job["params"]["extra_vmas"], job["params"]["iterations"], seed=job["id"])
    body = results_body(job)
    boot = body["boots"][0]
    boot["environment"]["kernel_release"] = RELEASE[side]
    boot["raw_output"] = raw
    boot["samples"] = [
        {"metric": s.metric, "iteration": s.iteration, "value": s.value} for s in SPAWN.parse(raw, job["params"])
    ]
    return body


def mm_submission_on_two_vcpus(alice: Any, mclass: MachineClass, tmp_path: Path) -> Any:
    """A submission measured on the `mm` profile with 2 vCPUs under the instruction clock, its jobs queued."""
    mclass.profile, mclass.vcpus = "mm", 2
    mclass.save(update_fields=["profile", "vcpus"])
    # The stand-in builds are the default profile's; the class measures mm kernels only.
    sub = submission_ready_for_testing(alice, mclass, tmp_path)
    KernelBuild.objects.filter(submission_builds__submission=sub).update(profile="mm")
    schedule_jobs(sub, list(sub.submission_builds.select_related("build")))
    assert set(Job.objects.filter(submission=sub).values_list("clock", "vcpus")) == {("instructions", 2)}
    return sub


def test_an_exported_instruction_clock_run_imports_and_is_judged_as_the_original(
    alice: Any, alice_api: Api, staff_api: Api, qemu_class: Any, runner_api: Any, tmp_path: Path, live_server: Any
) -> None:
    _, runner = runner_api
    sub = mm_submission_on_two_vcpus(alice, qemu_class, tmp_path)
    assert finish_all(sub, runner, spawn_boot) >= 4
    cli = kperf_cli(live_server.url, alice_api, tmp_path / "c.json")
    admin = kperf_cli(live_server.url, staff_api, tmp_path / "admin.json")
    # Another lab's machine class of the same shape: the imported kernels are compared
    # there, beside nothing of the original's.
    lab_b = MachineClass.objects.create(name="lab-b-qemu-mm", arch="x86_64", profile="mm", vcpus=2)
    for side, sha in (("base", BASE), ("head", HEAD)):
        out_dir = tmp_path / side
        out = cli("export-mmtests", str(sub.pk), "--side", side, "--bench", "spawn", "--out", str(out_dir))
        assert out.returncode == 0, out.stderr
        boots = Job.objects.filter(submission=sub, side=side, status=Job.Status.DONE).count()
        for extra in (0, 1000):
            run_dir = out_dir / f"spawn-vmas-{extra}"
            # mmtests' own record of the booted kernel, in its format (`uname -a`), for every boot.
            line = f"Linux (none) {RELEASE[side]} kperf:{sha[:12]} x86_64 GNU/Linux\n"
            assert [(run_dir / f"iter-{i}" / "kernel.version").read_text() for i in range(boots)] == [line] * boots
            meta = json.loads((run_dir / KPERF_RUN_FILE).read_text())
            assert meta | {"submission": 0} == {
                "format": 1,
                "kernel_sha": sha,
                "kernel_version": line.strip(),
                "arch": "x86_64",
                "machine_class": qemu_class.name,
                "clock": "instructions",
                "profile": "mm",
                "vcpus": 2,
                "numa_nodes": 0,
                "benchmark": "spawn",
                "submission": 0,
                "side": side,
                "boots": boots,
            }
            run = read_run(run_dir)
            assert run.kernel_version == line.strip()
            assert run.kperf is not None and (run.kperf.clock, run.kperf.profile, run.kperf.vcpus) == (
                "instructions",
                "mm",
                2,
            )
            # Given as a user would for a plain mmtests run; the file's clock and shape still come along.
            out = admin("import-mmtests", str(run_dir), "--kernel-sha", sha, "--machine-class", lab_b.name)
            assert out.returncode == 0, out.stderr
            assert f"({line.strip()})" in out.stdout and "kernel version unknown" not in out.stdout
            assert "instructions clock, mm profile, 2 vCPUs, 0 NUMA nodes" in out.stdout
    imported = Job.objects.filter(machine_class=lab_b)
    assert set(imported.values_list("clock", "vcpus", "numa_nodes", "build__profile")) == {("instructions", 2, 0, "mm")}
    versions = BootRecord.objects.filter(job__in=imported).values_list("environment__kernel_version", flat=True)
    assert {v.split()[2] for v in versions} == set(RELEASE.values())

    def compare(mclass: str) -> dict[str, Any]:
        resp = alice_api.get(f"/compare?machine_class={mclass}&benchmark=spawn&base={BASE}&head={HEAD}")
        assert resp.status_code == 200, resp.content
        return dict(resp.json())

    original, again = compare(qemu_class.name), compare(lab_b.name)
    # Judged on the instruction clock, with its thresholds (not the wall clock's 3%), by the same method...
    assert again["clock"] == original["clock"] == "instructions"
    assert again["method"] == original["method"] and again["alpha"] == original["alpha"]
    threshold = benchmarks.min_effect_pct("spawn-vmas-0", "instructions", benchmark="spawn")
    assert threshold != benchmarks.min_effect_pct("spawn-vmas-0", "wall", benchmark="spawn")
    mine = {m["metric"]: m for m in original["metrics"]}
    assert [m["metric"] for m in again["metrics"]] == sorted(mine) == ["spawn-vmas-0", "spawn-vmas-1000"]
    for m in again["metrics"]:
        assert m["min_effect_pct"] == mine[m["metric"]]["min_effect_pct"] == threshold
        assert (m["base_boots"], m["head_boots"]) == (mine[m["metric"]]["base_boots"], mine[m["metric"]]["head_boots"])
        # The same samples but for UnixBench's one decimal: the same answer.
        assert m["verdict"] == mine[m["metric"]]["verdict"]
        assert m["change_pct"] == pytest.approx(mine[m["metric"]]["change_pct"], abs=0.01)
    # ...and it says the shape it compared, as the submission's own comparison does.
    (comparison,) = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    shape = {k: comparison[k] for k in ("clock", "profile", "vcpus", "numa_nodes")}
    assert shape == {"clock": "instructions", "profile": "mm", "vcpus": 2, "numa_nodes": 0}
    assert {k: again[k] for k in shape} == {k: original[k] for k in shape} == shape
    out = cli("compare-kernels", "--base", BASE, "--head", HEAD, "--machine-class", lab_b.name, "--bench", "spawn")
    assert out.returncode == 0, out.stderr
    assert "spawn on lab-b-qemu-mm, instructions clock, mm profile, 2 vCPUs, 0 NUMA nodes:" in out.stdout


def test_an_import_refuses_a_class_of_another_shape_and_an_unknown_clock(
    alice: Any, staff_api: Api, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    _, runner = runner_api
    sub = mm_submission_on_two_vcpus(alice, qemu_class, tmp_path)
    finish_all(sub, runner, spawn_boot)
    files = staff_api.get(f"/submissions/{sub.pk}/mmtests?side=base&benchmark=spawn").json()["files"]
    for rel, text in files.items():
        (tmp_path / "log" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "log" / rel).write_text(text)
    run_dir = tmp_path / "log" / "spawn-vmas-0"
    run = read_run(run_dir)
    assert run.kperf is not None
    body = {
        "kernel_sha": BASE,
        "run_name": run.run_name,
        "environment": {"kernel_version": run.kernel_version},
        "benchmarks": {
            "spawn": {
                "samples": [{"metric": m, "iteration": i, "value": v} for m, i, v in run.benchmarks["spawn"].samples]
            }
        },
        "clock": run.kperf.clock,
        "arch": run.kperf.arch,
        "profile": run.kperf.profile,
        "vcpus": run.kperf.vcpus,
        "numa_nodes": run.kperf.numa_nodes,
    }
    before = Job.objects.count()
    # A class of the default shape never compares mm boots on 2 vCPUs: said, not stored out of sight.
    MachineClass.objects.create(name="tiny-one", arch="x86_64")
    resp = staff_api.post("/imports/mmtests", body | {"machine_class": "tiny-one"})
    assert resp.status_code == 400, resp.content
    assert "measured as the mm profile with 2 vCPUs" in resp.json()["detail"]
    assert "tiny-one measures the tiny profile with 0 vCPUs" in resp.json()["detail"]
    resp = staff_api.post("/imports/mmtests", body | {"machine_class": qemu_class.name, "clock": "sundial"})
    assert resp.status_code == 400 and "unknown clock 'sundial'" in resp.json()["detail"]
    resp = staff_api.post("/imports/mmtests", body | {"machine_class": qemu_class.name, "arch": "arm64"})
    assert resp.status_code == 400 and "measured on 'arm64'" in resp.json()["detail"]
    assert Job.objects.count() == before
    # The file's own clock is checked before anything is sent.
    meta = json.loads((run_dir / KPERF_RUN_FILE).read_text())
    (run_dir / KPERF_RUN_FILE).write_text(json.dumps(meta | {"clock": "sundial"}))
    with pytest.raises(
        MmtestsImportError, match=r"kperf-run.json: unknown clock 'sundial' \(kperf's are instructions, wall\)"
    ):
        read_run(run_dir)
    (run_dir / KPERF_RUN_FILE).write_text(json.dumps(meta | {"format": 2}))
    with pytest.raises(MmtestsImportError, match="is format 2, this kperf reads format 1"):
        read_run(run_dir)
    # Without the file it is a plain mmtests run again: the wall clock, as mmtests times.
    (run_dir / KPERF_RUN_FILE).unlink()
    assert read_run(run_dir).kperf is None


def test_an_export_of_boots_measured_two_ways_is_refused_and_one_way_is_chosen(
    alice: Any, alice_api: Api, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    _, runner = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    finish_all(sub, runner, spawn_boot)
    # Say the class was on the wall clock when one of its boots ran.
    first = Job.objects.filter(submission=sub, side="base").order_by("id").first()
    assert first is not None
    Job.objects.filter(pk=first.pk).update(clock="wall")
    resp = alice_api.get(f"/submissions/{sub.pk}/mmtests?side=base&benchmark=spawn")
    assert resp.status_code == 400
    assert "measured 2 ways" in resp.json()["detail"] and "--clock" in resp.json()["detail"]
    d = alice_api.get(f"/submissions/{sub.pk}/mmtests?side=base&benchmark=spawn&clock=wall").json()
    assert d["boots"] == 1
    assert json.loads(d["files"][f"spawn-vmas-0/{KPERF_RUN_FILE}"])["clock"] == "wall"
