"""Submitting through the REST API: what is accepted, what is refused and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core.models import KernelBuild, Submission, SubmissionBuild, Tree
from kperf.core.submissions.pipeline import prepare_submission

from tests.conftest import Api, git

pytestmark = pytest.mark.django_db


def body(tree_path: Path | str, **kw: Any) -> dict[str, Any]:
    b: dict[str, Any] = {"tree": str(tree_path), "branch": "feature", "base": "master", "benchmarks": ["spawn"]}
    b.update(kw)
    return b


def test_it_creates_a_submission_and_resolves_both_refs(
    alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    resp = alice_api.post("/submissions", body(small_tree))
    assert resp.status_code == 201, resp.content
    data = resp.json()
    assert data["status"] == "queued" and data["queue_position"] == 1
    prepare_submission(data["id"])
    sub = Submission.objects.get(pk=data["id"])
    assert sub.status == Submission.Status.BUILDING
    assert sub.base_sha == git(small_tree, "rev-parse", "master")
    assert sub.head_sha == git(small_tree, "rev-parse", "feature")
    sides = {sb.side: sb.build.sha for sb in SubmissionBuild.objects.filter(submission=sub)}
    assert sides == {"base": sub.base_sha, "head": sub.head_sha}
    shown = alice_api.get(f"/submissions/{sub.pk}").json()
    assert {b["side"] for b in shown["builds"]} == {"base", "head"}
    # No practical threshold given: each metric's clock's default applies.
    assert shown["min_effect_pct"] is None and sub.min_effect_pct is None


def test_a_submission_sets_its_own_practical_threshold(
    alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    resp = alice_api.post("/submissions", body(small_tree, min_effect_pct=1.5))
    assert resp.status_code == 201, resp.content
    assert resp.json()["min_effect_pct"] == 1.5
    assert Submission.objects.get(pk=resp.json()["id"]).min_effect_pct == 1.5


def test_a_build_is_shared_by_every_submission_that_needs_it(
    alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    first = alice_api.post("/submissions", body(small_tree)).json()["id"]
    second = alice_api.post("/submissions", body(small_tree, branch="v1")).json()["id"]
    prepare_submission(first)
    prepare_submission(second)
    # master and v1 are the same commit: 2 builds for 4 (submission, side) pairs.
    assert KernelBuild.objects.count() == 2
    assert SubmissionBuild.objects.count() == 4


def test_an_unknown_ref_fails_the_submission_with_a_clear_error(
    alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    sub_id = alice_api.post("/submissions", body(small_tree, branch="no-such-branch")).json()["id"]
    prepare_submission(sub_id)
    sub = Submission.objects.get(pk=sub_id)
    assert sub.status == Submission.Status.FAILED
    assert "'no-such-branch' is not a branch, tag or commit" in sub.error
    assert not KernelBuild.objects.exists()


def test_an_unreachable_tree_fails_the_submission(
    alice_api: Api, tmp_path: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    sub_id = alice_api.post("/submissions", body(tmp_path / "nothing-here")).json()["id"]
    prepare_submission(sub_id)
    sub = Submission.objects.get(pk=sub_id)
    assert sub.status == Submission.Status.FAILED and "could not fetch" in sub.error


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"tree": "ext::sh -c 'touch /tmp/x'"}, "tree", "transport"),
        ({"tree": "http://example.org/linux.git"}, "tree", "http://"),
        ({"tree": "not a url"}, "tree", "white space"),
        ({"branch": "a..b"}, "branch", "'..'"),
        ({"branch": "-x"}, "branch", "starts with '-'"),
        ({"base": "--upload-pack=evil"}, "base", "starts with '-'"),
        # The field is the one the value came from, whatever the value says (it was read from the message).
        ({"base": "old-branch..x"}, "base", "'..'"),
        ({"benchmarks": ["dhrystone"]}, "benchmarks", "unknown benchmark 'dhrystone'"),
        ({"benchmarks": []}, "benchmarks", "no benchmark"),
        ({"grid": "huge"}, "grid", "no grid 'huge'"),
        ({"grids": ["quick", "huge"]}, "grids", "no grid 'huge' in spawn"),
        ({"grid": "quick", "grids": ["full"]}, "grids", "not both"),
        ({"benchmarks": ["spawn", "pft"], "grids": ["scaling"]}, "grids", "'spawn' has none of the grids scaling"),
        ({"arches": ["riscv"]}, "arches", "unknown architecture"),
        ({"arches": ["arm64"]}, "arches", "no machine class runs arm64"),
        ({"min_effect_pct": 0}, "min_effect_pct", "a percentage from 0.05 to 50"),
        ({"min_effect_pct": 80}, "min_effect_pct", "a percentage from 0.05 to 50"),
    ],
)
def test_bad_input_gets_a_400_that_says_what_is_wrong_and_stores_nothing(
    alice_api: Api, small_tree: Path, qemu_class: Any, change: dict[str, Any], field: str, says: str
) -> None:
    resp = alice_api.post("/submissions", body(small_tree, **change))
    assert resp.status_code == 400, resp.content
    err = resp.json()
    assert err["code"] == "invalid-submission" and err["field"] == field
    assert says in err["detail"]
    assert not Submission.objects.exists() and not Tree.objects.exists()


def test_local_trees_can_be_refused_by_the_operator(
    alice_api: Api, small_tree: Path, qemu_class: Any, settings: Any
) -> None:
    settings.KPERF_ALLOW_LOCAL_TREES = False
    resp = alice_api.post("/submissions", body(small_tree))
    assert resp.status_code == 400 and "KPERF_ALLOW_LOCAL_TREES" in resp.json()["detail"]


def test_a_malformed_body_gets_422_with_the_field_named(alice_api: Api, qemu_class: Any) -> None:
    resp = alice_api.post("/submissions", {"tree": "/x", "benchmarks": "spawn"})
    assert resp.status_code == 422
    assert resp.json()["code"] == "invalid"
    # A branch or an mbox is checked after the schema; the base is always needed.
    assert "base: Field required" in resp.json()["detail"]
    resp = alice_api.post("/submissions", raw=b"{not json")
    assert 400 <= resp.status_code < 500
    assert not Submission.objects.exists()


def test_the_api_needs_a_user_token(small_tree: Path, qemu_class: Any, runner_api: Any) -> None:
    anonymous = Api(None)
    assert anonymous.post("/submissions", body(small_tree)).status_code == 401
    assert Api("kperf_not-a-real-token").get("/submissions").status_code == 401
    _, runner = runner_api
    # A runner's token is for the runner endpoints only.
    resp = runner.post("/submissions", body(small_tree))
    assert resp.status_code == 401 and resp.json()["code"] == "bad-token"
    assert not Submission.objects.exists()


def test_login_gives_a_token_that_works(alice: Any) -> None:
    api = Api(None)
    assert api.post("/auth/token", {"username": "alice", "password": "wrong"}).status_code == 401
    resp = api.post("/auth/token", {"username": "alice", "password": "alice-password-1"})
    assert resp.status_code == 201
    token = resp.json()["token"]
    assert Api(token).get("/benchmarks").status_code == 200
    names = [b["name"] for b in Api(token).get("/benchmarks").json()]
    assert "spawn" in names


def test_the_openapi_schema_lists_the_endpoints(db: Any) -> None:
    schema = Api(None).get("/openapi.json").json()
    assert "/api/v1/submissions" in schema["paths"]
    assert "/api/v1/runner/claim" in schema["paths"]
