"""Warm build trees: a checkout and its object tree kept from one build to
the next, so that a build of a nearby commit (a submission's head after its
base, a bisection step after its neighbour) recompiles only what changed.

Layout under ``work_root/trees``::

    registry.lock        held for the moment a tree is chosen, made or evicted
    <name>.lock          held by the build using tree <name> (flock: a killed
                         build's lock goes with its process)
    <name>/src           a detached git worktree of the repository
    <name>/obj           the build directory (make O=...)
    <name>/tree.json     TreeState: repo, arch, config digest, sha last built,
                         last use, whether that build ended, size

``<name>`` is ``<arch>-<config digest 12>-<n>`` (``<scope>-`` first outside
the lab scope). A tree serves one repository, arch, config digest and scope; among the unlocked ones a build takes
the tree whose last sha differs from the wanted one in the fewest files
(make's work follows changed files, not the number of commits between
them). ``git checkout`` rewrites only the files that differ, with fresh
mtimes, so make rebuilds exactly what depends on them.

Trees are evicted least recently used first when their total size passes
the budget, or when the disk under work_root runs short; a locked tree is
never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from kperf_kbuild.host import BuildInfraError, file_lock, free_bytes, git, try_lock

# What the trees of one builds worker may take on disk by default: a 6.1
# checkout is ~1.4 GB and a tinyconfig object tree ~0.3 GB, so this keeps
# several trees per arch and config warm.
DEFAULT_BUDGET_BYTES = 20 * 1024**3

_STATE = "tree.json"


@dataclass
class TreeState:
    repo: str
    arch: str
    config_digest: str
    # The commit src holds and obj was last built from; "" until a build ran.
    sha: str = ""
    # False from the moment src or obj starts to change until the build's
    # tuxmake run has ended by itself: a tree left False (worker killed,
    # disk full) may hold half-written objects, so its obj is wiped.
    clean: bool = False
    last_used: float = 0.0
    # Size of the whole tree after its last build (0 = not measured).
    bytes: int = 0
    # Whose builds may write this tree's objects (kperf_kbuild.driver,
    # "scopes"): a tree is only ever built again within its scope, so one
    # submitter's build cannot plant objects in another's kernel.
    scope: str = "lab"


class WarmTree:
    def __init__(self, path: Path, state: TreeState | None) -> None:
        self.path = path
        self.state = state
        self._lock: IO[str] | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def src(self) -> Path:
        return self.path / "src"

    @property
    def obj(self) -> Path:
        return self.path / "obj"

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(f"{self.name}.lock")

    def lock(self) -> bool:
        self._lock = try_lock(self.lock_path)
        return self._lock is not None

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def save(self) -> None:
        assert self.state is not None
        tmp = self.path / f"{_STATE}.tmp"
        tmp.write_text(json.dumps(asdict(self.state), indent=2, sort_keys=True) + "\n")
        tmp.replace(self.path / _STATE)

    def measure(self) -> int:
        return _disk_usage(self.path)

    def wipe_obj(self) -> None:
        shutil.rmtree(self.obj, ignore_errors=True)
        self.obj.mkdir(parents=True)

    def checkout(self, sha: str) -> None:
        """Make src hold `sha`, rewriting only the files that differ, and
        drop anything that is not part of the commit."""
        what = f"check out {sha} in the build tree {self.src}"
        git(self.src, "-c", "checkout.workers=0", "checkout", "--quiet", "--detach", "--force", sha, what=what)
        # Out-of-tree builds write nothing into src; anything there was left
        # by hand or by a killed tool, and kbuild refuses an unclean srctree.
        git(self.src, "clean", "-ffdxq", what=f"clean the build tree {self.src}")


def trees_dir(work_root: Path) -> Path:
    return work_root / "trees"


def list_trees(work_root: Path) -> list[WarmTree]:
    """Every tree directory, with its state (None when unreadable: a tree
    whose creation was interrupted, evicted first)."""
    root = trees_dir(work_root)
    if not root.is_dir():
        return []
    return [WarmTree(d, _read_state(d)) for d in sorted(root.iterdir()) if d.is_dir()]


def changed_paths(repo: Path, a: str, b: str) -> list[str] | None:
    """The paths that differ between commits a and b (None if git cannot
    tell, e.g. a was pruned from the mirror)."""
    if a == b:
        return []
    proc = subprocess.run(
        ["git", "-C", str(repo), "diff", "--no-renames", "--name-only", "-z", a, b, "--"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        return None
    return [p.decode("utf-8", "surrogateescape") for p in proc.stdout.split(b"\0") if p]


def changed_files(repo: Path, a: str, b: str) -> int | None:
    """How many files differ between commits a and b (None if git cannot tell)."""
    paths = changed_paths(repo, a, b)
    return None if paths is None else len(paths)


def rank(repo: Path, sha: str, trees: list[WarmTree]) -> list[tuple[WarmTree, int | None]]:
    """The trees a build of `sha` could reuse, best first: trees whose last
    build ended cleanly before the others (theirs must be wiped), then the
    fewest changed files, then the most recently used."""
    scored: list[tuple[WarmTree, int | None]] = []
    for tree in trees:
        assert tree.state is not None
        scored.append((tree, changed_files(repo, tree.state.sha, sha) if tree.state.sha else None))

    def key(item: tuple[WarmTree, int | None]) -> tuple[bool, float, float]:
        tree, distance = item
        assert tree.state is not None
        usable = tree.state.clean and distance is not None
        return (not usable, float("inf") if distance is None else distance, -tree.state.last_used)

    return sorted(scored, key=key)


def claim(
    work_root: Path, repo: Path, sha: str, arch: str, digest: str, *, fresh: bool = False, scope: str = "lab"
) -> tuple[WarmTree, int | None]:
    """Lock the best tree for this build, or a new empty one (always with
    `fresh`). Returns the tree and how many files differ from its last
    build (None for a new tree or an unknown distance). The caller unlocks."""
    root = trees_dir(work_root)
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / "registry.lock"):
        mine = [
            t
            for t in list_trees(work_root)
            if t.state is not None
            and (t.state.repo, t.state.arch, t.state.config_digest, t.state.scope) == (str(repo), arch, digest, scope)
        ]
        if not fresh:
            for tree, distance in rank(repo, sha, mine):
                if tree.lock():
                    return tree, distance
        taken = {t.name for t in list_trees(work_root)}
        prefix = f"{arch}-{digest[:12]}" if scope == "lab" else f"{scope}-{arch}-{digest[:12]}"
        n = 0
        while f"{prefix}-{n}" in taken:
            n += 1
        tree = WarmTree(root / f"{prefix}-{n}", TreeState(str(repo), arch, digest, scope=scope))
        if not tree.lock():  # a leftover lock file of an evicted name is free; held means a bug
            raise BuildInfraError(f"the lock of the new build tree {tree.path} is held by another process")
        tree.path.mkdir()
        tree.save()
        return tree, None


def create_worktree(tree: WarmTree, repo: Path, sha: str) -> None:
    """Check `sha` out into a new tree's src (a worktree of repo)."""
    shutil.rmtree(tree.src, ignore_errors=True)
    # Forget worktrees whose directory is gone (this one, an evicted tree, or
    # one removed by hand), or git refuses a path it still has registered.
    _prune(repo)
    git(
        repo,
        "-c",
        "checkout.workers=0",  # parallel checkout: one worker per core
        "worktree",
        "add",
        "--detach",
        str(tree.src),
        sha,
        what=f"check out {sha} from {repo}",
    )
    tree.obj.mkdir(exist_ok=True)


def remove(tree: WarmTree) -> None:
    """Delete a tree (the caller holds its lock or knows nobody uses it)."""
    repo = tree.state.repo if tree.state else ""
    # Deleting the files and then pruning is `git worktree remove --force`
    # without its per-file checks: 2-3 s instead of ~9 s for 78k files.
    shutil.rmtree(tree.path, ignore_errors=True)
    if repo:
        _prune(Path(repo))


def evict(
    work_root: Path,
    *,
    budget_bytes: int,
    need_free: int = 0,
    keep: frozenset[str] = frozenset(),
    log: Callable[[str], None] | None = None,
) -> list[str]:
    """Delete unlocked trees, least recently used first, until their total
    size is within `budget_bytes` and `need_free` bytes are free under
    work_root. Trees named in `keep` and locked trees stay. Returns the
    names of the trees deleted."""
    root = trees_dir(work_root)
    if not root.is_dir():
        return []
    removed: list[str] = []
    with file_lock(root / "registry.lock"):
        trees = list_trees(work_root)
        sizes = {t.name: _size(t) for t in trees}
        total = sum(sizes.values())
        for tree in sorted(trees, key=lambda t: t.state.last_used if t.state else -1.0):
            if total <= budget_bytes and (need_free <= 0 or free_bytes(work_root) >= need_free):
                break
            if tree.name in keep or not tree.lock():
                continue
            try:
                remove(tree)
            finally:
                tree.unlock()
            with contextlib.suppress(FileNotFoundError):
                tree.lock_path.unlink()  # nobody waits on it: claims hold the registry lock
            total -= sizes[tree.name]
            removed.append(tree.name)
            if log:
                log(f"evicted build tree {tree.name} ({sizes[tree.name] / 1024**3:.1f} GiB)")
    return removed


def _size(tree: WarmTree) -> int:
    # The size recorded after the tree's last build; a tree without one
    # (its build never finished) is measured now.
    if tree.state is not None and tree.state.bytes > 0:
        return tree.state.bytes
    return _disk_usage(tree.path)


def _disk_usage(path: Path) -> int:
    """Bytes allocated under path (like du, not counting hard links twice)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [str(path)]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    if st.st_nlink > 1:
                        if (st.st_dev, st.st_ino) in seen:
                            continue
                        seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def _read_state(path: Path) -> TreeState | None:
    try:
        data = json.loads((path / _STATE).read_text())
        return TreeState(
            repo=str(data["repo"]),
            arch=str(data["arch"]),
            config_digest=str(data["config_digest"]),
            sha=str(data.get("sha", "")),
            clean=bool(data.get("clean", False)),
            last_used=float(data.get("last_used", 0.0)),
            bytes=int(data.get("bytes", 0)),
            scope=str(data.get("scope", "lab")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _prune(repo: Path) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "prune"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
