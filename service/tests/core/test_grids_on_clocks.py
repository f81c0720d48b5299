"""Every grid runs on every clock: on the instruction clock time-based parameters
are sized by work, and a grid that still cannot fit a boot is refused at
submission with the reason (docs/benchmarks.md, "Grids on the instruction clock")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core import benchmarks
from kperf.core.models import Clock, Job, KernelBuild, MachineClass, Submission, SubmissionBuild
from kperf.core.submissions.pipeline import prepare_submission, schedule_jobs

from tests.conftest import Api

pytestmark = pytest.mark.django_db

SEED_POINTS = [0, 100, 200, 400, 800, 1600, 3200, 6400]


def submit(api: Api, tree: Path, **kw: Any) -> Any:
    body = {"tree": str(tree), "branch": "feature", "base": "master", "benchmarks": ["spawn"], **kw}
    return api.post("/submissions", body)


def test_the_seed_s_fork_sweep_runs_on_both_clocks_sized_for_each(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass, settings_dirs: Any
) -> None:
    assert qemu_class.clock == Clock.INSTRUCTIONS
    wall = MachineClass.objects.create(name="lab-x86_64", arch="x86_64", clock=Clock.WALL)
    resp = submit(alice_api, small_tree, grid="full")
    assert resp.status_code == 201, resp.content
    sub = Submission.objects.get(pk=resp.json()["id"])
    prepare_submission(sub.pk)
    links = list(SubmissionBuild.objects.filter(submission=sub).select_related("build"))
    KernelBuild.objects.update(status=KernelBuild.Status.DONE)
    schedule_jobs(sub, links)
    params = {j.machine_class_id: j.params for j in Job.objects.filter(submission=sub)}
    # All eight points of the seed's sweep on both; 30 s a point only where time is time.
    assert params[wall.pk] == {"duration": 30, "iterations": 3, "extra_vmas": SEED_POINTS}
    assert params[qemu_class.pk] == {"duration": 0.1, "iterations": 2, "extra_vmas": SEED_POINTS}


def test_a_grid_that_cannot_fit_a_boot_on_the_instruction_clock_is_refused_with_the_grids_that_do(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass, settings: Any
) -> None:
    # pft's full grid faults MemTotal/5 for every client count up to 64, 30 times.
    assert benchmarks.instruction_clock_refusal("pft", "quick") is None
    resp = submit(alice_api, small_tree, grid="full", benchmarks=["pft"])
    if benchmarks.instruction_clock_refusal("pft", "full") is None:
        # Sized to fit: then a budget of a minute must refuse it.
        settings.KPERF_INSTRUCTION_CLOCK_BOOT_BUDGET = 60.0
        resp = submit(alice_api, small_tree, grid="full", benchmarks=["pft"])
    assert resp.status_code == 400, resp.content
    err = resp.json()
    assert err["field"] == "grid"
    assert "the full grid of pft would take about" in err["detail"]
    assert "a boot on the instruction clock" in err["detail"] and "quick" in err["detail"]
    assert not Submission.objects.exists()
    # A lab of wall-clock classes only takes it: there a boot takes what the machine takes.
    MachineClass.objects.filter(pk=qemu_class.pk).update(clock=Clock.WALL)
    assert submit(alice_api, small_tree, grid="full", benchmarks=["pft"]).status_code == 201


def test_a_time_based_grid_is_refused_when_tcg_is_slower_than_the_budget_allows(settings: Any) -> None:
    settings.KPERF_INSTRUCTION_CLOCK_RATE = 1e6
    refusal = benchmarks.instruction_clock_refusal("spawn", "full")
    assert refusal is not None
    # 8 points x 2 iterations x 0.1 s: 1.6x10^9 instructions, at 10^6 a second.
    assert "1.6e+09 instructions" in refusal and "about 27 min a boot" in refusal
