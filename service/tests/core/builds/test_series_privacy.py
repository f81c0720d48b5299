"""A patch series is its submitter's: no one else names, reaches, builds on or learns of it.

Every submitter of a tree URL shares its mirror, and kperf applies each
series in that mirror. Alice's series is applied for real; Bob then tries
every way of naming it through the submission path the API uses (a POST,
then the worker's prepare_submission), and each refusal must read exactly
as the one for a name that does not exist.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from kperf.core.builds import apply_series, gitops
from kperf.core.models import ApiToken, Submission, SubmissionBuild, TrackedBranch
from kperf.core.submissions.pipeline import prepare_submission
from kperf.core.tracking import branches
from kperf_testing.mbox import b4_mbox

from tests.conftest import Api, git
from tests.series_fixtures import lists_allowed, series_body  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


@pytest.fixture
def bob(django_user_model: Any) -> User:
    user: User = django_user_model.objects.create_user("bob", "bob@example.org", "bob-password-1")
    return user


@pytest.fixture
def bob_api(bob: User) -> Api:
    _, token = ApiToken.issue(bob)
    return Api(token)


@pytest.fixture
def other_mbox(series_tree: Path, tmp_path: Path) -> bytes:
    """A one-patch series that adds a file of its own, so it applies on any commit of the tree."""
    git(series_tree, "checkout", "-q", "-b", "other", "master")
    (series_tree / "OTHER").write_text("other\n")
    git(series_tree, "add", "OTHER")
    git(series_tree, "commit", "-q", "-m", "other: add other")
    git(series_tree, "checkout", "-q", "master")
    data = b4_mbox(series_tree, ["master..other"], tmp_path / "other-patches", "other", "master")
    git(series_tree, "branch", "-q", "-D", "other")
    return data


class Applied:
    """Alice's series, applied in the tree's mirror: its head sha and the ref kperf keeps it under."""

    def __init__(self, sub: Submission) -> None:
        self.sub = sub
        self.head = sub.head_sha
        self.mirror = sub.tree.mirror_path
        self.tree = Path(sub.tree.url)
        [self.ref] = git(self.mirror, "for-each-ref", "--format=%(refname)", "--points-at", self.head).split()


@pytest.fixture
def alices_series(
    alice_api: Api,
    series_tree: Path,
    mbox: bytes,
    qemu_class: Any,
    settings_dirs: Any,
) -> Applied:
    resp = alice_api.post("/submissions", series_body(series_tree, mbox))
    assert resp.status_code == 201, resp.content
    prepare_submission(resp.json()["id"])
    sub = Submission.objects.select_related("tree").get(pk=resp.json()["id"])
    assert sub.status == Submission.Status.BUILDING, sub.error
    # The tree itself does not have it: the series lives only in kperf's mirror.
    assert sub.head_sha not in git(series_tree, "rev-list", "--all")
    return Applied(sub)


def submit_branch(api: Api, tree: Path, branch: str, base: str = "master") -> Submission:
    """A branch submission through the API, prepared as the worker would."""
    resp = api.post("/submissions", {"tree": str(tree), "branch": branch, "base": base, "benchmarks": ["spawn"]})
    assert resp.status_code == 201, resp.content
    prepare_submission(resp.json()["id"])
    return Submission.objects.get(pk=resp.json()["id"])


def absent_hex(mirror: Path, length: int) -> str:
    """A hex string of `length` digits that is the prefix of no object in the mirror."""
    for digit in "0123456789abcdef":
        candidate = digit * length
        if not git(mirror, "rev-parse", f"--disambiguate={candidate}"):
            return candidate
    raise AssertionError("every repeated digit is an object's prefix")


def refused_as_missing(sub: Submission, name: str, missing: Submission, missing_name: str) -> None:
    """`sub` failed on `name` with exactly the words a name that does not exist gets."""
    assert sub.status == Submission.Status.FAILED, f"{name!r} was resolved to {sub.head_sha or sub.base_sha}"
    assert missing.status == Submission.Status.FAILED
    assert sub.error.replace(name, "NAME") == missing.error.replace(missing_name, "NAME")
    assert not SubmissionBuild.objects.filter(submission=sub).exists()


# How Bob might name Alice's series: (a name of it, a name of the same shape that names nothing).
WAYS: dict[str, Callable[[Applied, User], tuple[str, str]]] = {
    "its ref": lambda a, _: (a.ref, a.ref.rsplit("/", 1)[0] + f"/{a.sub.pk + 1000}"),
    # git itself would also find refs/<name>.
    "its ref without refs/": lambda a, _: (
        a.ref.removeprefix("refs/"),
        a.ref.removeprefix("refs/").rsplit("/", 1)[0] + f"/{a.sub.pk + 1000}",
    ),
    "the old-style ref": lambda a, _: (f"refs/kperf/series/{a.sub.pk}", f"refs/kperf/series/{a.sub.pk + 1000}"),
    "the per-user ref": lambda a, alice: (
        f"refs/kperf/users/{alice.pk}/series/{a.sub.pk}",
        f"refs/kperf/users/{alice.pk}/series/{a.sub.pk + 1000}",
    ),
    "its full sha": lambda a, _: (a.head, absent_hex(a.mirror, 40)),
    "a 12-hex prefix": lambda a, _: (a.head[:12], absent_hex(a.mirror, 12)),
    "a 4-hex prefix": lambda a, _: (a.head[:4], absent_hex(a.mirror, 4)),
    # git reads "<anything>-g<hex>" as `git describe` output: the hex is the commit.
    "a describe-like name": lambda a, _: (f"v1-1-g{a.head[:12]}", f"v1-1-g{absent_hex(a.mirror, 12)}"),
}


@pytest.mark.parametrize("how", WAYS)
def test_another_users_series_cannot_be_named_and_the_refusal_reads_as_for_a_missing_name(
    how: str, alices_series: Applied, alice: User, bob_api: Api
) -> None:
    tree = alices_series.tree
    name, missing_name = WAYS[how](alices_series, alice)
    sub = submit_branch(bob_api, tree, name)
    missing = submit_branch(bob_api, tree, missing_name)
    assert alices_series.head != sub.head_sha
    refused_as_missing(sub, name, missing, missing_name)
    # As the base too: nothing is compared against it either.
    sub = submit_branch(bob_api, tree, "feature", base=name)
    missing = submit_branch(bob_api, tree, "feature", base=missing_name)
    refused_as_missing(sub, name, missing, missing_name)


def test_another_users_series_cannot_be_the_base_of_ones_own_series(
    alices_series: Applied, bob_api: Api, other_mbox: bytes
) -> None:
    tree = alices_series.tree
    head = alices_series.head
    made = {}
    for base in (head, head[:12], absent_hex(alices_series.mirror, 40)):
        resp = bob_api.post("/submissions", series_body(tree, other_mbox, base=base))
        assert resp.status_code == 201, resp.content
        prepare_submission(resp.json()["id"])
        made[base] = Submission.objects.get(pk=resp.json()["id"])
    missing = absent_hex(alices_series.mirror, 40)
    for base in (head, head[:12]):
        refused_as_missing(made[base], base, made[missing], missing)
        assert "does not apply" not in made[base].error
    # Nothing was applied for Bob on Alice's commits.
    tips = git(alices_series.mirror, "for-each-ref", "--format=%(objectname)", "refs/kperf/").split()
    assert tips == [head]


def test_the_owner_builds_on_their_own_series_by_ref_and_sha(
    alices_series: Applied, alice_api: Api, other_mbox: bytes
) -> None:
    tree = alices_series.tree
    head = alices_series.head
    for name in (head, head[:12], alices_series.ref):
        sub = submit_branch(alice_api, tree, name)
        assert sub.status == Submission.Status.BUILDING, (name, sub.error)
        assert sub.head_sha == head
    resp = alice_api.post("/submissions", series_body(tree, other_mbox, base=head[:12]))
    prepare_submission(resp.json()["id"])
    on_top = Submission.objects.get(pk=resp.json()["id"])
    assert on_top.status == Submission.Status.BUILDING, on_top.error
    assert on_top.base_sha == head
    assert git(alices_series.mirror, "rev-parse", f"{on_top.head_sha}~1") == head


def test_published_branches_tags_and_the_commits_they_reach_resolve_for_everyone(
    alices_series: Applied, bob_api: Api
) -> None:
    tree = alices_series.tree
    inside = git(tree, "rev-parse", "series~1")  # on a branch, not its tip
    expected = {
        "feature": git(tree, "rev-parse", "feature"),
        "refs/heads/feature": git(tree, "rev-parse", "feature"),
        "v1": git(tree, "rev-parse", "v1^{commit}"),
        "refs/tags/v1": git(tree, "rev-parse", "v1^{commit}"),
        "HEAD": git(tree, "rev-parse", "master"),  # the tree's default branch
        inside: inside,
        inside[:12]: inside,
        inside[:7].upper(): inside,
    }
    for name, sha in expected.items():
        sub = submit_branch(bob_api, tree, name)
        assert sub.status == Submission.Status.BUILDING, (name, sub.error)
        assert sub.head_sha == sha, name


def test_another_users_series_cannot_be_tracked_as_a_branch(alices_series: Applied, bob_api: Api) -> None:
    tree = alices_series.tree

    def track(name: str) -> Any:
        body = {"tree": str(tree), "branch": name, "benchmarks": ["spawn"], "grid": "quick"}
        return bob_api.post("/branches", body)

    # A full ref name is never a branch to poll: refused whoever's it would be.
    for name in (alices_series.ref, "refs/kperf/series/1000", "refs/heads/feature"):
        resp = track(name)
        assert resp.status_code == 400, (name, resp.content)
        assert resp.json()["field"] == "branch" and "full ref name" in resp.json()["detail"]
    assert not TrackedBranch.objects.exists()

    # Short names and shas are polled as refs/heads/<name> alone: Alice's series reads as no branch.
    head = alices_series.head
    for name, missing in ((alices_series.ref.removeprefix("refs/"), "kperf/nothing/here"), (head, "f" * 40)):
        errors = []
        for each in (name, missing):
            assert track(each).status_code == 201
            branch = TrackedBranch.objects.get(branch=each)
            assert branches.poll_branch(branch.pk) == []
            branch.refresh_from_db()
            assert branch.head_sha == "" and not branch.commits.exists()
            errors.append(branch.last_error.replace(each, "NAME"))
        assert errors[0] == errors[1] and "no branch" in errors[0]


def commit_with_prefix(mirror: Path, parent: str, prefix: str) -> str:
    """A commit on `parent` whose sha starts with `prefix`, written into the mirror (found by trying messages)."""
    tree = git(mirror, "rev-parse", f"{parent}^{{tree}}")
    who = "Dev <dev@example.org> 1700000000 +0000"
    for n in range(1 << 22):
        body = f"tree {tree}\nparent {parent}\nauthor {who}\ncommitter {who}\n\nprivate {n}\n".encode()
        if hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest().startswith(prefix):
            args = ["git", "-C", str(mirror), "hash-object", "-t", "commit", "-w", "--stdin"]
            return subprocess.run(args, input=body, capture_output=True, check=True).stdout.decode().strip()
    raise AssertionError(f"no commit with prefix {prefix} found")


def test_a_private_commit_sharing_a_public_prefix_neither_hides_nor_shows_itself(
    small_tree: Path, tmp_path: Path
) -> None:
    mirror = tmp_path / "mirror.git"
    gitops.update_mirror(str(small_tree), mirror)
    public = git(small_tree, "rev-parse", "feature")
    private = commit_with_prefix(mirror, public, public[:4])
    git(mirror, "update-ref", "refs/kperf/users/1/series/20", private)
    # git alone finds the prefix ambiguous: that difference would tell others the private commit exists.
    assert git(mirror, "rev-parse", f"--disambiguate={public[:4]}").split().count(private) == 1
    assert gitops.resolve_ref(mirror, public[:4]) == public
    alice = gitops.Reader(namespace="refs/kperf/users/1/series/")
    bob = gitops.Reader(namespace="refs/kperf/users/2/series/")
    assert gitops.resolve_ref(mirror, public[:4], bob) == public
    with pytest.raises(gitops.AmbiguousSha, match="give more digits"):
        gitops.resolve_ref(mirror, public[:4], alice)
    assert gitops.resolve_ref(mirror, private[:12], alice) == private
    with pytest.raises(gitops.GitError, match="is not a branch, tag or commit"):
        gitops.resolve_ref(mirror, private[:12], bob)


def test_names_git_would_guess_into_kperfs_refs_or_fetch_head_do_not_resolve(small_tree: Path, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror.git"
    gitops.update_mirror(str(small_tree), mirror)
    private = commit_with_prefix(mirror, git(small_tree, "rev-parse", "master"), "")
    # Where a series was, and what a fetch of one into the mirror leaves behind.
    git(mirror, "update-ref", "refs/kperf/series/20", private)
    (mirror / "FETCH_HEAD").write_text(f"{private}\t\t'{private}' of /tmp/am-x/tree\n")
    git(mirror, "update-ref", "refs/remotes/origin/secret", private)
    git(mirror, "update-ref", "refs/pull/1/head", private)
    guesses = ["kperf/series/20", "refs/kperf/series/20", "FETCH_HEAD", "origin/secret", "pull/1/head"]
    guesses += ["refs/pull/1/head", "refs/remotes/origin/secret", private, private[:8], f"x-g{private[:8]}"]
    for name in guesses:
        with pytest.raises(gitops.GitError, match="is not a branch, tag or commit"):
            gitops.resolve_ref(mirror, name)
    # The tree's own refs still resolve, and a series' owner reads theirs by its name only in their namespace.
    assert gitops.resolve_ref(mirror, "refs/tags/v1") == git(small_tree, "rev-parse", "v1^{commit}")
    legacy = gitops.Reader(namespace=apply_series.series_namespace(7), reaching=("refs/kperf/series/20",))
    assert gitops.resolve_ref(mirror, private, legacy) == private
    with pytest.raises(gitops.GitError):
        gitops.resolve_ref(mirror, "refs/kperf/series/20", legacy)


def test_a_series_applied_under_the_old_name_is_reused_and_readable_by_its_owner_alone(
    alices_series: Applied, alice: User, alice_api: Api, bob_api: Api
) -> None:
    tree = alices_series.tree
    sub, mirror, head = alices_series.sub, alices_series.mirror, alices_series.head
    # As a mirror made before the per-user namespaces holds it.
    git(mirror, "update-ref", "-d", alices_series.ref)
    git(mirror, "update-ref", apply_series.legacy_series_ref(sub.pk), head)
    assert apply_series.apply(sub) == head
    assert git(mirror, "for-each-ref", "--format=%(refname)", "refs/kperf/") == f"refs/kperf/series/{sub.pk}"

    mine = submit_branch(alice_api, tree, head[:12])
    assert mine.status == Submission.Status.BUILDING and mine.head_sha == head, mine.error
    theirs = submit_branch(bob_api, tree, head[:12])
    assert theirs.status == Submission.Status.FAILED and "is not a branch, tag or commit" in theirs.error
    for name in (f"refs/kperf/series/{sub.pk}", f"kperf/series/{sub.pk}"):
        assert submit_branch(alice_api, tree, name).status == Submission.Status.FAILED
