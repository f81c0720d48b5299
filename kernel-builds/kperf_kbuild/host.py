"""The build machine's side of a build: its tools, the repository, disk
space, ccache's directory, locks. Everything here raises BuildInfraError,
never a kernel's failure."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO

# Free space a build needs under work_root: a 6.1 checkout is 1.5 GB and a
# tinyconfig-sized obj dir a few hundred MB; larger configs need more.
MIN_FREE_BYTES = 3 * 1024**3

# tuxmake picks x86_64-linux-gnu- for x86_64 (Debian's native gcc answers to
# that name too); arm64 is cross-built with Debian's gcc-aarch64-linux-gnu.
CROSS_COMPILE = {"x86_64": "x86_64-linux-gnu-", "arm64": "aarch64-linux-gnu-"}

# Commands the build needs and the Debian package that provides each, so the
# error tells an operator exactly what to install.
_HOST_TOOLS = {
    "git": "git",
    "make": "make",
    "gcc": "gcc",
    "ccache": "ccache",
    "flex": "flex",
    "bison": "bison",
    "bc": "bc",
    "perl": "perl",
    "tar": "tar",
    "xz": "xz-utils",
}
_CROSS_PACKAGES = {"x86_64": "gcc-x86-64-linux-gnu", "arm64": "gcc-aarch64-linux-gnu"}


class BuildInfraError(Exception):
    """The build could not run for a reason that is not the kernel's fault
    (missing tool, unknown commit, no disk space...). The message says what
    went wrong and what to do about it."""


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if missing): one process at a time."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def try_lock(path: Path) -> IO[str] | None:
    """An exclusive flock on `path` if nobody holds it, else None. The lock
    lasts until the returned handle is closed (or the process dies, which is
    what makes a killed build's tree usable again)."""
    handle = path.open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def git(repo: Path, *args: str, what: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BuildInfraError(f"could not {what}: git says: {proc.stderr.strip()}")
    return proc.stdout


def check_tools(arch: str) -> None:
    missing = {pkg for tool, pkg in _HOST_TOOLS.items() if shutil.which(tool) is None}
    if shutil.which(f"{CROSS_COMPILE[arch]}gcc") is None:
        missing.add(_CROSS_PACKAGES[arch])
    if missing:
        raise BuildInfraError(
            f"build tools missing for {arch}: install them with `apt-get install {' '.join(sorted(missing))}`"
        )


def check_commit(repo: Path, sha: str) -> None:
    if not repo.exists():
        raise BuildInfraError(f"repository {repo} does not exist: mirror the tree first")
    probe = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--git-dir"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        raise BuildInfraError(f"{repo} is not a usable git repository: {probe.stderr.strip()}")
    found = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        raise BuildInfraError(
            f"commit {sha} is not in {repo}: fetch the branch that contains it "
            f"into the mirror (git -C {repo} fetch <remote> <ref>) and retry"
        )


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def check_free_space(path: Path, needed: int = MIN_FREE_BYTES) -> None:
    free = free_bytes(path)
    if free < needed:
        raise BuildInfraError(
            f"only {free / 1024**3:.1f} GiB free under {path} after evicting every unused build "
            f"tree; a build needs at least {needed / 1024**3:.0f} GiB: free space (old build "
            f"outputs, ccache -C) or point work_root elsewhere"
        )


def default_ccache_dir() -> Path:
    # tuxmake's ccache wrapper would default to ~/.ccache; ask ccache for its
    # own default (~/.cache/ccache on ccache 4) so "None" means what ccache means.
    proc = subprocess.run(
        ["ccache", "--get-config", "cache_dir"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    value = proc.stdout.strip()
    if proc.returncode != 0 or not value:
        raise BuildInfraError(f"ccache does not report its cache_dir: {proc.stderr.strip()}")
    return Path(value)
