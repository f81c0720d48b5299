"""A job's boots are for one owner at most: the database refuses a job claimed by two."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import IntegrityError, transaction

from kperf.core.models import BranchCommit, Job, Runner, TrackedBranch

from tests.lab_fixtures import submission_ready_for_testing

pytestmark = pytest.mark.django_db


def test_a_job_of_a_submission_cannot_also_be_a_branch_commits_or_a_calibration(
    alice: Any, qemu_class: Any, tmp_path: Path
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    job = sub.jobs.first()
    assert job is not None
    branch = TrackedBranch.objects.create(owner=alice, tree=sub.tree, branch="master", benchmarks=["spawn"])
    commit = BranchCommit.objects.create(branch=branch, sha="c" * 40, subject="c", position=1)
    runner, _ = Runner.register("qemu-1", qemu_class)
    for field, value in (("branch_commit", commit), ("pinned_runner", runner)):
        with pytest.raises(IntegrityError, match="job_has_one_owner_at_most"), transaction.atomic():
            Job.objects.filter(pk=job.pk).update(**{field: value})
    # One owner each is fine, and so is none (a job imported from mmtests).
    Job.objects.filter(pk=job.pk).update(submission=None, branch_commit=commit)
    Job.objects.filter(pk=job.pk).update(branch_commit=None, pinned_runner=runner)
    Job.objects.filter(pk=job.pk).update(pinned_runner=None)
