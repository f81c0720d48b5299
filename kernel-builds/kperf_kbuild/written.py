"""What a build wrote outside its own object tree, outputs and scratch:
counted against its disk limit while it runs, and removed (or bounded)
after it.

A build can write in two more places (kperf_kbuild.sandbox):

- the checkout's top directory, where it may add entries but change none
  (kconfig's merge_config.sh makes its temporary files there): what it
  adds is counted and removed once the build ends (``NewEntries``);
- its scope's ccache, which the next builds of the scope read and which
  concurrent builds of the scope write too: what it grows by is counted
  (``Growth``), and the scope is brought back under its bound after the
  build (kperf_kbuild.ccache_scope).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from kperf_kbuild.sandbox import disk_usage


def usage(path: Path) -> int:
    """Bytes allocated for ``path``: a file's, or a directory's and everything under it (symlinks not followed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    own = st.st_blocks * 512
    return own + disk_usage(path) if stat.S_ISDIR(st.st_mode) else own


class NewEntries:
    """The entries a build adds to a directory it may only add to (the checkout's top)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.before = frozenset(os.listdir(path))

    def added(self) -> list[str]:
        try:
            return sorted(set(os.listdir(self.path)) - self.before)
        except OSError:
            return []

    def usage(self) -> int:
        return sum(usage(self.path / name) for name in self.added())

    def remove(self) -> list[str]:
        """Delete what the build added (its processes are gone: nothing races this). Returns the names."""
        names = self.added()
        for name in names:
            path = self.path / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        return names


class Growth:
    """What a directory grew by since this object was made: a build's share
    of a directory it writes with others (a ccache scope). Concurrent
    builds of the scope count each other's growth too, which errs on the
    side of the limit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.baseline = disk_usage(path)

    def usage(self) -> int:
        return max(0, disk_usage(self.path) - self.baseline)
