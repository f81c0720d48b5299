"""Builds are shared only where sharing cannot carry one submitter's code
into another's kernel: within a submitter's own scope, and from the lab's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from kperf.core.builds import queue
from kperf.core.models import KernelBuild, SubmissionBuild, Tree
from kperf.core.submissions.pipeline import prepare_submission

from tests.conftest import Api, git

pytestmark = pytest.mark.django_db

SHA = "b" * 40
DIGEST = "d" * 64


def body(tree_path: Path, **kw: Any) -> dict[str, Any]:
    b: dict[str, Any] = {"tree": str(tree_path), "branch": "feature", "base": "master", "benchmarks": ["spawn"]}
    b.update(kw)
    return b


def need(tree: Tree, scope: str) -> KernelBuild:
    with transaction.atomic():
        return queue.need_build(tree, SHA, "x86_64", DIGEST, scope)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree.objects.create(url=str(tmp_path / "tree"))


def test_staff_build_in_the_lab_scope_and_everyone_else_in_their_own(alice: Any, staff: Any) -> None:
    assert queue.scope_for(staff) == "lab"
    assert queue.scope_for(alice) == f"user-{alice.pk}"
    assert queue.scope_for(None) == "lab"


def test_two_submitters_never_share_a_build_of_the_same_commit(tree: Tree, alice: Any, django_user_model: Any) -> None:
    bob = django_user_model.objects.create_user("bob", "bob@example.org", "bob-password-1")
    a, b = need(tree, queue.scope_for(alice)), need(tree, queue.scope_for(bob))
    assert a.pk != b.pk
    assert (a.scope, b.scope) == (f"user-{alice.pk}", f"user-{bob.pk}")
    # Within one scope the build is shared as before.
    assert need(tree, queue.scope_for(alice)).pk == a.pk


def test_everyone_uses_the_lab_s_build_but_the_lab_uses_nobody_else_s(tree: Tree, alice: Any, staff: Any) -> None:
    mine = need(tree, queue.scope_for(alice))
    lab = need(tree, queue.scope_for(staff))
    assert lab.pk != mine.pk and lab.scope == "lab"
    # Once the lab has it, a new submitter gets the lab's build.
    assert need(tree, "user-999").pk == lab.pk


def test_a_lab_build_that_failed_on_the_build_machine_is_not_handed_out(tree: Tree, alice: Any) -> None:
    lab = need(tree, "lab")
    KernelBuild.objects.filter(pk=lab.pk).update(status="failed", failure_kind="infra")
    mine = need(tree, queue.scope_for(alice))
    assert mine.pk != lab.pk and mine.scope == f"user-{alice.pk}"


def test_a_submission_s_builds_carry_its_owner_s_scope(
    alice_api: Api, alice: Any, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    resp = alice_api.post("/submissions", body(small_tree))
    assert resp.status_code == 201, resp.content
    prepare_submission(resp.json()["id"])
    builds = [sb.build for sb in SubmissionBuild.objects.filter(submission_id=resp.json()["id"])]
    assert {b.sha for b in builds} == {git(small_tree, "rev-parse", "master"), git(small_tree, "rev-parse", "feature")}
    assert {b.scope for b in builds} == {f"user-{alice.pk}"}
