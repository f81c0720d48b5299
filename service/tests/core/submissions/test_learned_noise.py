"""Comparisons borrow the noise learned from earlier runs on the machine class (KPERF_LEARNED_NOISE)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kperf.core.lifecycle import owners
from kperf.core.models import BootRecord, Comparison, Job, MetricComparison, Sample, Submission, Tree
from kperf.core.submissions.analysis import analyse_submission, learned_priors, load_boots
from kperf.core.submissions.pipeline import SUBMISSION

from tests.lab_fixtures import built, results_body, submission_ready_for_testing

pytestmark = pytest.mark.django_db

METRICS = ("spawn-vmas-0", "spawn-vmas-1000")


def earlier_runs(mclass: Any, tmp: Path, kernels: int, boots: int = 4, sd: float = 0.01) -> None:
    """Finished one-boot spawn jobs of other kernels, 1% between-boot noise."""
    rng = np.random.default_rng(11)
    tree = Tree.objects.create(url=str(tmp / "history"))
    for k in range(kernels):
        build = built(tree, f"{k + 1:040x}", tmp)
        for _ in range(boots):
            job = Job.objects.create(
                build=build,
                benchmark="spawn",
                grid="quick",
                params={"iterations": 3, "extra_vmas": [0, 1000]},
                machine_class=mclass,
                clock=mclass.clock,
                status=Job.Status.DONE,
            )
            record = BootRecord.objects.create(job=job, attempt=1, boot=0)
            level = 1000.0 * (1 + 0.02 * k) * math.exp(rng.normal(0, sd))
            Sample.objects.bulk_create(
                [
                    Sample(boot_record=record, metric=m, iteration=i, value=level * math.exp(rng.normal(0, 0.002)))
                    for m in METRICS
                    for i in range(3)
                ]
            )


def measured_submission(alice: Any, mclass: Any, runner: Any, tmp: Path) -> Submission:
    sub = submission_ready_for_testing(alice, mclass, tmp)
    rng = np.random.default_rng(5)
    while (job := runner.post("/runner/claim").json()["job"]) is not None:
        level = 1000.0 if Job.objects.get(pk=job["id"]).side == "base" else 900.0
        runner.post(f"/runner/jobs/{job['id']}/results", results_body(job, level * math.exp(rng.normal(0, 0.01))))
    owners.advance(SUBMISSION, sub.pk)
    return sub


def analyse(sub: Submission) -> tuple[Comparison, dict[str, MetricComparison]]:
    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.ANALYSING)
    analyse_submission(sub.pk)
    comp = Comparison.objects.get(submission=sub)
    return comp, {m.metric: m for m in comp.metrics.all()}


def test_history_narrows_the_interval_and_the_comparison_says_so(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, settings: Any
) -> None:
    _, runner = runner_api
    earlier_runs(qemu_class, tmp_path, kernels=6)
    sub = measured_submission(alice, qemu_class, runner, tmp_path)

    settings.KPERF_LEARNED_NOISE = False
    comp, alone = analyse(sub)
    assert "noise learned" not in comp.method

    settings.KPERF_LEARNED_NOISE = True
    group = (qemu_class.pk, "spawn", "quick", qemu_class.clock)
    priors = learned_priors(sub, *group, load_boots(sub)[group])
    assert set(priors) == set(METRICS)
    for prior in priors.values():
        # 1% between boots was put in; 6 kernels x 4 boots give ~18 degrees of freedom
        assert 0.005 < prior.sd < 0.02 and prior.dof >= 10
    comp, helped = analyse(sub)
    assert "noise learned from history for 2 of 2 metrics" in comp.method
    for m in METRICS:
        assert alone[m].verdict == helped[m].verdict == "regression"
        width_alone = alone[m].ci_high_pct - alone[m].ci_low_pct  # type: ignore[operator]
        width_helped = helped[m].ci_high_pct - helped[m].ci_low_pct  # type: ignore[operator]
        assert width_helped < width_alone


def test_too_little_history_and_the_submissions_own_boots_are_not_used(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, settings: Any
) -> None:
    _, runner = runner_api
    settings.KPERF_LEARNED_NOISE = True
    earlier_runs(qemu_class, tmp_path, kernels=1)  # one kernel: no between-kernel spread to learn from
    sub = measured_submission(alice, qemu_class, runner, tmp_path)
    # The submission's own 8 boots of two kernels would be enough history,
    # but they are the data being compared, so they are left out.
    group = (qemu_class.pk, "spawn", "quick", qemu_class.clock)
    assert learned_priors(sub, *group, load_boots(sub)[group]) == {}
    comp, _ = analyse(sub)
    assert "noise learned" not in comp.method
