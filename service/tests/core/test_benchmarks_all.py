"""`"all"` means every benchmark, as docs/benchmarks.md says, however it is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from kperf.core import benchmarks
from kperf.core.models import MachineClass, Submission, TrackedBranch

from tests.conftest import Api

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("named", ["all", ["all"]], ids=["a-string", "a-list"])
def test_all_as_a_string_or_a_list_submits_every_benchmark(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass, named: str | list[str]
) -> None:
    resp = alice_api.post(
        "/submissions", {"tree": str(small_tree), "branch": "feature", "base": "master", "benchmarks": named}
    )
    assert resp.status_code == 201, resp.content
    assert resp.json()["benchmarks"] == benchmarks.known()
    assert Submission.objects.get().benchmarks == benchmarks.known()


def test_a_tracked_branch_takes_all_as_a_string(alice_api: Api, small_tree: Path, qemu_class: MachineClass) -> None:
    resp = alice_api.post("/branches", {"tree": str(small_tree), "branch": "feature", "benchmarks": "all"})
    assert resp.status_code == 201, resp.content
    assert TrackedBranch.objects.get().benchmarks == benchmarks.known()


def test_one_unknown_name_as_a_string_is_refused_with_the_choices(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass
) -> None:
    resp = alice_api.post(
        "/submissions", {"tree": str(small_tree), "branch": "feature", "base": "master", "benchmarks": "nope"}
    )
    assert resp.status_code == 400, resp.content
    assert "unknown benchmark 'nope'" in resp.json()["detail"] and "or 'all'" in resp.json()["detail"]
    assert not Submission.objects.exists()
