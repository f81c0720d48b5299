"""Tasks executed by a real Celery worker over the real broker (kperf.core.tasks)."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest

from kperf.core.models import KernelBuild, Submission

from tests.conftest import Api
from tests.worker_fixtures import wait_final


@pytest.mark.django_db(transaction=True)
def test_a_worker_resolves_refs_and_reports_a_failed_build(
    worker: Path, alice_api: Api, small_tree: Path, qemu_class: Any
) -> None:
    """The tree is not a kernel: the worker fetches it, queues the builds on
    the builds queue, tuxmake refuses the tree (a fault of the build, not of
    a kernel: tried again up to the bound), and the submission says why. The
    failure is not cached: the next submission builds again."""
    resp = alice_api.post("/submissions", {"tree": str(small_tree), "branch": "feature", "base": "master"})
    assert resp.status_code == 201
    sub = wait_final(resp.json()["id"], worker)
    assert sub.status == Submission.Status.FAILED
    assert sub.base_sha and sub.head_sha
    assert "could not be built" in sub.error and "not the kernel's fault" in sub.error, sub.error
    builds = KernelBuild.objects.filter(submission_builds__submission=sub).distinct()
    assert builds.count() == 2
    # The first failed build fails the submission; the other may still be running.
    failed = [b for b in builds if b.status == KernelBuild.Status.FAILED]
    assert failed and all(b.error for b in failed)
    assert all(b.failure_kind == "infra" and b.attempt == 3 for b in failed)
    shown = alice_api.get(f"/submissions/{sub.pk}").json()
    assert shown["status"] == "failed" and "could not be built" in shown["error"]
    # A failed build has its finish time (building._store_failure sets both).
    first_finish = {b.pk: cast(datetime, b.finished) for b in failed}

    again = alice_api.post("/submissions", {"tree": str(small_tree), "branch": "feature", "base": "master"})
    wait_final(again.json()["id"], worker)
    # As above, the second submission fails with the first of its builds to
    # fail; the other can still be on its way through its attempts.
    deadline = time.monotonic() + 600
    while KernelBuild.objects.filter(pk__in=first_finish, status__in=["queued", "building"]).exists():
        assert time.monotonic() < deadline, worker.read_text()[-4000:]
        time.sleep(0.5)
    for b in KernelBuild.objects.filter(pk__in=first_finish):
        assert b.finished is not None and b.finished > first_finish[b.pk], "an infra failure was reused"


@pytest.mark.django_db(transaction=True)
def test_a_worker_fails_a_submission_whose_branch_does_not_exist(
    worker: Path, alice_api: Api, small_tree: Path, qemu_class: Any
) -> None:
    resp = alice_api.post("/submissions", {"tree": str(small_tree), "branch": "nope", "base": "master"})
    sub = wait_final(resp.json()["id"], worker)
    assert sub.status == Submission.Status.FAILED
    assert "'nope' is not a branch, tag or commit" in sub.error
