"""Shared test scenarios, moved out of test_triage.py so no test module imports another."""

from __future__ import annotations

from django.contrib.auth.models import User

from kperf.core import triage
from kperf.core.models import (
    BranchCommit,
    ChangePoint,
    Comparison,
    MachineClass,
    MetricComparison,
    Submission,
    TrackedBranch,
    Tree,
)

TREE = "https://git.example.org/linux.git"


def regressed_submission(owner: User, mclass: MachineClass) -> Submission:
    """A finished submission with one regression verdict, and the triage kperf opens for it."""
    tree, _ = Tree.objects.get_or_create(url=TREE)
    sub = Submission.objects.create(
        owner=owner, tree=tree, head_ref="mm-fix", base_ref="v6.1", status=Submission.Status.DONE
    )
    comp = Comparison.objects.create(submission=sub, machine_class=mclass, benchmark="spawn", method="t", alpha=0.05)
    MetricComparison.objects.create(
        comparison=comp,
        metric="spawn-vmas-0",
        unit="forks/s",
        higher_is_better=True,
        verdict=MetricComparison.Verdict.REGRESSION,
        change_pct=-8.5,
        min_effect_pct=0.5,
        base_boots=4,
        head_boots=4,
        base_samples=12,
        head_samples=12,
    )
    assert triage.open_for_submission(sub) is not None
    return sub


def regressed_branch(owner: User, mclass: MachineClass, notify: list[str] | None = None) -> ChangePoint:
    """A tracked branch with a regression change point, and its triage."""
    tree, _ = Tree.objects.get_or_create(url=TREE)
    branch = TrackedBranch.objects.create(owner=owner, tree=tree, branch=f"{owner.username}-mm", notify=notify or [])
    before = BranchCommit.objects.create(branch=branch, sha="a" * 40, position=1, status="done")
    at = BranchCommit.objects.create(branch=branch, sha="b" * 40, position=2, status="done", subject="mm: slower")
    cp = regression_between(branch, mclass, before, at)
    assert triage.open_for_change_point(cp) is not None
    return cp


def regression_between(
    branch: TrackedBranch, mclass: MachineClass, before: BranchCommit, at: BranchCommit
) -> ChangePoint:
    """A -12% spawn-vmas-0 regression change point first seen at `at`, right after `before`."""
    return ChangePoint.objects.create(
        branch=branch,
        machine_class=mclass,
        benchmark="spawn",
        metric="spawn-vmas-0",
        clock="instructions",
        commit=at,
        previous=before,
        detected_at=at,
        direction="regression",
        change_pct=-12.0,
        p_value=0.001,
        statistic=5.0,
    )
