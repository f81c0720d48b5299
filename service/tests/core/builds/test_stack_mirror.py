"""The test stacks' services build in the warm trees the fixture kernels were
built in (kperf_testing.kbuild, tests/test_e2e.py `stack_env`). That holds
only while the test side names the mirror as the service does and fills it
in a way the service's own fetches go on from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core.builds import gitops
from kperf.core.models import Tree
from kperf_testing.kbuild import stack_build_root, stack_mirror, sync_stack_mirror

from tests.conftest import git


def test_the_stack_mirror_is_the_one_the_service_names_for_the_tree(tmp_path: Path, settings: Any) -> None:
    tree = tmp_path / "cache" / "linux-test.git"
    settings.KPERF_MIRROR_ROOT = stack_mirror(tree, tmp_path / "cache").parent
    assert Tree(url=str(tree)).mirror_path == stack_mirror(tree, tmp_path / "cache")


def test_a_commit_the_mirror_lacks_is_fetched_and_the_service_fetches_on_from_it(
    small_tree: Path, tmp_path: Path, settings: Any
) -> None:
    cache = tmp_path / "cache"
    master = git(small_tree, "rev-parse", "master")
    mirror = sync_stack_mirror(small_tree, cache, master)
    assert (mirror / "HEAD").exists() and gitops.has_commit(mirror, master)

    # A commit made after the mirror: fetched when a build asks for it.
    git(small_tree, "checkout", "-q", "-b", "later")
    (small_tree / "README").write_text("later\n")
    git(small_tree, "commit", "-q", "-am", "later")
    later = git(small_tree, "rev-parse", "later")
    assert not gitops.has_commit(mirror, later)
    assert sync_stack_mirror(small_tree, cache, later) == mirror
    assert gitops.has_commit(mirror, later)

    # A fetch prunes what the tree no longer has, but not the service's own
    # refs (applied patch series), as the service's fetch does.
    git(mirror, "update-ref", f"{gitops.KPERF_REFS}series/1", master)
    git(small_tree, "checkout", "-q", "feature")
    git(small_tree, "branch", "-q", "-D", "later")
    git(small_tree, "commit", "-q", "--allow-empty", "-m", "newer")
    newest = git(small_tree, "rev-parse", "feature")
    sync_stack_mirror(small_tree, cache, newest)
    assert gitops.has_commit(mirror, newest)
    assert git(mirror, "rev-parse", f"{gitops.KPERF_REFS}series/1") == master
    assert "later" not in git(mirror, "branch", "--list")

    # And the service fetches into it as into a mirror of its own making.
    settings.KPERF_ALLOW_LOCAL_TREES = True
    gitops.update_mirror(str(small_tree), mirror, timeout=60)
    assert gitops.resolve_ref(mirror, "feature") == newest


@pytest.mark.parametrize(("worker", "name"), [("", "work"), ("gw0", "work"), ("gw1", "work-gw1")])
def test_stacks_running_at_once_build_in_work_roots_of_their_own(
    worker: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two stacks' databases both have a build 1, whose outputs go under outputs/1.
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    assert stack_build_root(tmp_path) == tmp_path.resolve() / name
