"""Warm build trees without a compiler: which tree a build takes, what a
reused tree keeps and drops, and eviction by budget and free space, on a
tiny real git repository."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from kperf_kbuild import driver, trees
from kperf_kbuild.trees import TreeState, WarmTree

DIGEST = "d" * 64


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, list[str]]:
    """A bare repository with a line of commits: c0 has ten files, c1 changes
    one, c2 two more, c3 seven more."""
    work = tmp_path / "work-clone"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    shas = [commit(work, {f"mm/f{i}.c": "v0\n" for i in range(10)}, "c0")]
    shas.append(commit(work, {"mm/f0.c": "v1\n"}, "c1"))
    shas.append(commit(work, {"mm/f1.c": "v2\n", "mm/f2.c": "v2\n"}, "c2"))
    shas.append(commit(work, {f"mm/f{i}.c": "v3\n" for i in range(3, 10)}, "c3"))
    bare = tmp_path / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare.resolve(), shas


def built_tree(work_root: Path, repo: Path, sha: str, *, clean: bool = True, used: float = 0.0) -> WarmTree:
    """A tree as a finished build leaves it: src at sha, an obj with a
    .config, an object file and an image, its state saved, unlocked."""
    tree, _ = trees.claim(work_root, repo, sha, "x86_64", DIGEST, fresh=True)
    trees.create_worktree(tree, repo, sha)
    (tree.obj / ".config").write_text("CONFIG_MODULES=y\n")
    (tree.obj / ".version").write_text("1\n")
    (tree.obj / "mm").mkdir()
    (tree.obj / "mm" / "f0.o").write_bytes(b"\x7fELF")
    (tree.obj / "arch" / "x86" / "boot").mkdir(parents=True)
    (tree.obj / "arch" / "x86" / "boot" / "bzImage").write_bytes(b"old image")
    assert tree.state is not None
    tree.state.sha, tree.state.clean = sha, clean
    tree.state.last_used = used or time.time()
    tree.state.bytes = tree.measure()
    tree.save()
    tree.unlock()
    return tree


def test_a_build_takes_the_tree_whose_last_commit_differs_least(
    history: tuple[Path, list[str]], tmp_path: Path
) -> None:
    repo, (c0, _c1, c2, c3) = history
    work = tmp_path / "w"
    at_c0 = built_tree(work, repo, c0)
    at_c3 = built_tree(work, repo, c3)
    # c2 differs from c0 in 3 files and from c3 in 7.
    assert trees.changed_files(repo, c0, c2) == 3
    assert trees.changed_files(repo, c3, c2) == 7
    tree, distance = trees.claim(work, repo, c2, "x86_64", DIGEST)
    try:
        assert (tree.name, distance) == (at_c0.name, 3)
        # Locked by this build: the next build of c2 takes the other tree.
        other, other_distance = trees.claim(work, repo, c2, "x86_64", DIGEST)
        assert (other.name, other_distance) == (at_c3.name, 7)
        other.unlock()
    finally:
        tree.unlock()


def test_a_tree_of_another_config_arch_or_repository_is_never_taken(
    history: tuple[Path, list[str]], tmp_path: Path
) -> None:
    repo, (c0, c1, *_) = history
    work = tmp_path / "w"
    mine = built_tree(work, repo, c0)
    for arch, digest, other_repo in [("arm64", DIGEST, repo), ("x86_64", "e" * 64, repo), ("x86_64", DIGEST, work)]:
        tree, distance = trees.claim(work, other_repo, c1, arch, digest)
        tree.unlock()
        assert tree.name != mine.name and distance is None
        assert tree.state is not None and tree.state.sha == ""
    assert trees.claim(work, repo, c1, "x86_64", DIGEST)[0].name == mine.name


def test_an_interrupted_tree_comes_after_every_clean_one(history: tuple[Path, list[str]], tmp_path: Path) -> None:
    repo, (_c0, c1, _c2, c3) = history
    work = tmp_path / "w"
    killed = built_tree(work, repo, c1, clean=False)  # 0 files from c1, but its build was killed
    far = built_tree(work, repo, c3)
    ranked = trees.rank(repo, c1, [t for t in trees.list_trees(work)])
    assert [t.name for t, _ in ranked] == [far.name, killed.name]


def test_a_reused_tree_checks_out_only_the_changed_files_and_keeps_its_objects(
    history: tuple[Path, list[str]], tmp_path: Path
) -> None:
    repo, (c0, _c1, c2, _) = history
    work = tmp_path / "w"
    built_tree(work, repo, c0)
    tree, distance = trees.claim(work, repo, c2, "x86_64", DIGEST)
    before = {f.name: (f.stat().st_ino, f.stat().st_mtime_ns) for f in (tree.src / "mm").iterdir()}
    time.sleep(0.05)
    (tree.src / "stray.o").write_text("left by hand")
    try:
        reused = driver._prepare_tree(tree, repo, c2, distance, lambda phase, message: None)
    finally:
        tree.unlock()
    assert reused == c0
    fresh = {f.name for f in (tree.src / "mm").iterdir() if (f.stat().st_ino, f.stat().st_mtime_ns) != before[f.name]}
    # make rebuilds what is newer than its objects: git rewrote exactly the
    # three files c2 changed and left the others as they were.
    assert fresh == {"f0.c", "f1.c", "f2.c"}
    assert git(tree.src, "rev-parse", "HEAD") == c2
    assert not (tree.src / "stray.o").exists()
    # Objects stay; the .config is made afresh and a stale image cannot be collected.
    assert (tree.obj / "mm" / "f0.o").exists()
    assert not (tree.obj / ".config").exists()
    assert not (tree.obj / ".version").exists()  # the next link is #1, as in a clean build
    assert not (tree.obj / "arch" / "x86" / "boot" / "bzImage").exists()
    state = trees.list_trees(work)[0].state
    assert state is not None and (state.sha, state.clean) == (c2, False)


def test_a_tree_whose_build_was_killed_starts_from_an_empty_object_tree(
    history: tuple[Path, list[str]], tmp_path: Path
) -> None:
    repo, (c0, c1, *_) = history
    work = tmp_path / "w"
    built_tree(work, repo, c0, clean=False)
    tree, distance = trees.claim(work, repo, c1, "x86_64", DIGEST)
    try:
        assert driver._prepare_tree(tree, repo, c1, distance, lambda phase, message: None) == ""
    finally:
        tree.unlock()
    assert list(tree.obj.iterdir()) == []
    assert git(tree.src, "rev-parse", "HEAD") == c1


def test_a_tree_whose_worktree_is_gone_is_checked_out_afresh(history: tuple[Path, list[str]], tmp_path: Path) -> None:
    repo, (c0, c1, *_) = history
    work = tmp_path / "w"
    old = built_tree(work, repo, c0)
    (old.src / ".git").write_text("gitdir: /nowhere\n")  # its repository was re-cloned
    messages: list[str] = []
    tree, distance = trees.claim(work, repo, c1, "x86_64", DIGEST)
    try:
        assert driver._prepare_tree(tree, repo, c1, distance, lambda p, m: messages.append(m)) == ""
    finally:
        tree.unlock()
    assert git(tree.src, "rev-parse", "HEAD") == c1
    assert any("unusable" in m for m in messages)


def test_eviction_removes_least_recently_used_unlocked_trees_until_within_budget(
    history: tuple[Path, list[str]], tmp_path: Path
) -> None:
    repo, (c0, c1, c2, c3) = history
    work = tmp_path / "w"
    oldest = built_tree(work, repo, c0, used=1000.0)
    locked = built_tree(work, repo, c1, used=2000.0)
    middle = built_tree(work, repo, c2, used=3000.0)
    newest = built_tree(work, repo, c3, used=4000.0)
    sizes = {t.name: t.state.bytes for t in trees.list_trees(work) if t.state}
    assert all(size > 0 for size in sizes.values())
    assert locked.lock()
    try:
        budget = sizes[newest.name] + sizes[locked.name]
        removed = trees.evict(work, budget_bytes=budget)
    finally:
        locked.unlock()
    # The locked tree is over the budget's LRU line but in use: it stays, and
    # the next least recently used trees go instead.
    assert removed == [oldest.name, middle.name]
    assert {t.name for t in trees.list_trees(work)} == {locked.name, newest.name}
    assert not oldest.path.exists() and not oldest.lock_path.exists()
    # Their worktrees are forgotten by the repository too.
    assert str(oldest.src) not in git(repo, "worktree", "list")
    assert trees.evict(work, budget_bytes=budget) == []
    # A budget of 0 keeps nothing that is not in use.
    assert trees.evict(work, budget_bytes=0) == [locked.name, newest.name]
    assert trees.list_trees(work) == []


def test_eviction_frees_disk_space_but_keeps_the_tree_being_built(
    history: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, (c0, c1, c2, _) = history
    work = tmp_path / "w"
    old = built_tree(work, repo, c0, used=1000.0)
    current = built_tree(work, repo, c1, used=2000.0)
    spare = built_tree(work, repo, c2, used=3000.0)
    # Pretend the disk is short until one tree is gone.
    monkeypatch.setattr(trees, "free_bytes", lambda path: 10**12 if not old.path.exists() else 0)
    assert trees.evict(work, budget_bytes=10**15, need_free=10**9, keep=frozenset({current.name})) == [old.name]
    assert {t.name for t in trees.list_trees(work)} == {current.name, spare.name}
    monkeypatch.setattr(trees, "free_bytes", lambda path: 0)
    assert trees.evict(work, budget_bytes=10**15, need_free=10**9, keep=frozenset({current.name})) == [spare.name]
    assert [t.name for t in trees.list_trees(work)] == [current.name]


def test_a_tree_without_a_readable_state_is_evicted_first(history: tuple[Path, list[str]], tmp_path: Path) -> None:
    repo, (c0, *_) = history
    work = tmp_path / "w"
    kept = built_tree(work, repo, c0)
    broken = trees.trees_dir(work) / "x86_64-dddddddddddd-7"
    broken.mkdir()
    (broken / "half-written").write_bytes(b"x" * 10000)
    assert kept.state is not None
    assert trees.evict(work, budget_bytes=kept.state.bytes) == [broken.name]


def test_a_new_tree_takes_the_first_free_number(history: tuple[Path, list[str]], tmp_path: Path) -> None:
    repo, (c0, *_) = history
    work = tmp_path / "w"
    first = built_tree(work, repo, c0)
    second = built_tree(work, repo, c0)
    assert (first.name, second.name) == ("x86_64-dddddddddddd-0", "x86_64-dddddddddddd-1")
    trees.remove(first)
    third, _ = trees.claim(work, repo, c0, "x86_64", DIGEST, fresh=True)
    third.unlock()
    assert third.name == first.name
    state = TreeState(str(repo), "x86_64", DIGEST)
    assert third.state == state


def _object_tree(obj: Path, objects: int) -> Path:
    for n in range(objects):
        (obj / f"dir{n % 7}").mkdir(parents=True, exist_ok=True)
        (obj / f"dir{n % 7}" / f"file{n}.o").write_bytes(b"\x7fELF")
    (obj / ".config").write_text("CONFIG_MMU=y\n")
    return obj


def test_a_build_that_compiled_every_object_of_its_tree_is_not_incremental(tmp_path: Path) -> None:
    """6.1's objects under a 6.12 build: all 1143 files compiled anew, nothing reused."""
    obj = _object_tree(tmp_path / "obj", 1143)
    assert not driver.reused_objects(obj, compiled=1143)
    assert not driver.reused_objects(obj, compiled=1190)  # host tools and linker scripts besides
    # A nearby commit: a handful compiled, the rest kept.
    assert driver.reused_objects(obj, compiled=12)


def test_objects_reached_through_a_link_are_not_counted(tmp_path: Path) -> None:
    """The build writes the tree: a link to elsewhere must not make a clean build look incremental."""
    elsewhere = _object_tree(tmp_path / "elsewhere", 500)
    obj = _object_tree(tmp_path / "obj", 3)
    (obj / "linked").symlink_to(elsewhere, target_is_directory=True)
    assert not driver.reused_objects(obj, compiled=3)
