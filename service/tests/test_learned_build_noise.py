"""The between-build component, learned from tracked branches under the instruction clock.

Under the instruction clock the boots of one build agree exactly; builds of
code that runs the same paths still differ a little (layout). Comparisons
learn that spread from history (KPERF_LEARNED_BUILD_NOISE), so a difference
of that size is not called a regression even when the boots agree exactly.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kperf.core.models import (
    BootRecord,
    BranchCommit,
    Clock,
    Job,
    KernelBuild,
    MetricComparison,
    MetricDef,
    Sample,
    Submission,
    TrackedBranch,
    Tree,
)
from kperf_testing import reference_history

from .conftest import Api
from .lab_fixtures import finish_all, results_body, submission_ready_for_testing

pytestmark = pytest.mark.django_db

METRICS = ("spawn-vmas-0", "spawn-vmas-1000")
BUILD_SD = 0.001  # 0.1% from one build to the next


def branch_of_builds(owner: Any, mclass: Any, tmp: Path, n: int = 16, boots: int = 2) -> TrackedBranch:
    """n commits that run the same code paths: each build's level is off by
    BUILD_SD at random, and its boots (and iterations) agree exactly."""
    rng = np.random.default_rng(zlib.crc32(b"builds"))
    tree = Tree.objects.create(url=str(tmp / "builds"))
    branch = TrackedBranch.objects.create(owner=owner, tree=tree, branch="master", benchmarks=["spawn"])
    for i in range(n):
        sha = f"{i + 1:040x}"
        commit = BranchCommit.objects.create(branch=branch, sha=sha, position=i + 1, status=BranchCommit.Status.DONE)
        build = KernelBuild.objects.create(
            tree=tree, sha=sha, arch="x86_64", config_digest="d" * 64, status=KernelBuild.Status.DONE
        )
        level = 1000.0 * float(np.exp(rng.normal(0, BUILD_SD)))
        for _ in range(boots):
            job = Job.objects.create(
                build=build,
                branch_commit=commit,
                benchmark="spawn",
                grid="quick",
                params={"duration": 0.2, "iterations": 3, "extra_vmas": [0, 1000]},
                machine_class=mclass,
                clock=mclass.clock,
                status=Job.Status.DONE,
            )
            record = BootRecord.objects.create(job=job, attempt=1, boot=0)
            Sample.objects.bulk_create(
                [Sample(boot_record=record, metric=m, iteration=k, value=level) for m in METRICS for k in range(3)]
            )
    for metric in METRICS:
        MetricDef.objects.get_or_create(
            name=metric, defaults={"benchmark": "spawn", "unit": "forks/s", "higher_is_better": True}
        )
    return branch


def compared(sub: Submission) -> dict[str, MetricComparison]:
    return {m.metric: m for m in MetricComparison.objects.filter(comparison__submission=sub)}


def finish(sub: Submission, api: Api, head_value: float) -> dict[str, MetricComparison]:
    finish_all(sub, api, lambda job, side: results_body(job, 1000.0 if side == "base" else head_value))
    return compared(sub)


def test_the_between_build_spread_is_learned_from_a_branch_and_reported(
    alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    assert qemu_class.clock == Clock.INSTRUCTIONS
    branch_of_builds(alice, qemu_class, tmp_path)
    learned = reference_history.learned_build_noise(qemu_class.pk, "spawn", Clock.INSTRUCTIONS)
    for metric in METRICS:
        estimate = learned[metric]
        assert estimate.builds == 16 and estimate.boot_sd == 0.0
        assert 0.5 * BUILD_SD < estimate.sd < 2.0 * BUILD_SD, estimate
        assert estimate.prior() is not None
    # Nothing is learned for the wall clock from instruction-clock history.
    assert reference_history.learned_build_noise(qemu_class.pk, "spawn", Clock.WALL) == {}
    report = alice_api.get("/noise?machine_class=qemu-x86_64&boots=4&iterations=3").json()
    rows = {r["metric"]: r for r in report["metrics"]}
    assert report["clock"] == "instructions"
    for metric in METRICS:
        assert 0.5 * BUILD_SD < rows[metric]["between_build_sd"] < 2.0 * BUILD_SD
        assert rows[metric]["between_build_builds"] == 16
        assert rows[metric]["between_boot_sd"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("learned", [True, False])
def test_a_difference_the_size_of_build_noise_is_a_regression_only_without_the_component(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, settings: Any, learned: bool
) -> None:
    """Boots that agree exactly, heads 0.2% below base: without the learned
    component that deterministic difference is a regression beyond a 0.1%
    threshold; with it, 0.2% is what two builds of the same code differ by."""
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    sub.min_effect_pct = 0.1
    sub.save(update_fields=["min_effect_pct"])
    settings.KPERF_LEARNED_BUILD_NOISE = learned
    branch_of_builds(alice, qemu_class, tmp_path)
    got = finish(sub, api, head_value=998.0)
    for metric in METRICS:
        m = got[metric]
        assert m.min_effect_pct == 0.1 and m.change_pct == pytest.approx(-0.2, abs=0.01)
        if learned:
            assert m.verdict != MetricComparison.Verdict.REGRESSION, (metric, m.verdict, m.note)
            assert m.ci_high_pct is not None
            assert m.ci_low_pct is not None and m.ci_low_pct < -0.2 < m.ci_high_pct
        else:
            assert m.verdict == MetricComparison.Verdict.REGRESSION, (metric, m.note)
    method = got[METRICS[0]].comparison.method
    assert ("between-build noise learned for 2 of 2 metrics" in method) == learned


def test_without_history_the_interval_of_two_exact_builds_holds_the_benchs_build_part(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, alice_api: Api
) -> None:
    """No tracked branch on this class: every boot of both sides gives the same
    number, yet the interval is not a point, because another build of either
    side could differ by what the perturbed-build bench measured."""
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)

    def phased(job: dict[str, Any], side: str) -> dict[str, Any]:
        body = results_body(job)
        # Each boot at its seeded phase, as the runner reports it; the phase moved nothing here.
        body["boots"][0]["environment"] |= {"phase_seed": 1000 + job["id"], "phase_span_us": 1000000}
        return body

    boots = finish_all(sub, api, phased)
    got = compared(sub)
    for metric in METRICS:
        m = got[metric]
        assert m.change_pct == pytest.approx(0.0, abs=1e-9)
        assert m.ci_low_pct is not None and m.ci_high_pct is not None
        assert m.ci_low_pct < 0.0 < m.ci_high_pct, (metric, m.ci_low_pct, m.ci_high_pct)
        assert m.ci_high_pct - m.ci_low_pct > 0.005
        # Not "significant": exact boots of one build say nothing of another build.
        assert m.verdict == MetricComparison.Verdict.NO_CHANGE, (metric, m.verdict, m.note)
        assert "significant" not in (m.note or "")
    method = got[METRICS[0]].comparison.method
    assert "between-build noise for 2 of 2 metrics from the perturbed-build bench" in method
    assert f"boots each at a seeded phase ({boots} of {boots})" in method
    page = alice_api.get(f"/submissions/{sub.pk}").json()
    assert "perturbed-build bench" in page["comparisons"][0]["method"]
