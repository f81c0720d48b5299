"""A scope's ccache: shared by the scope's builds under different uids, and bounded.

Shared across uids. Each running build has a uid of its own
(kperf_kbuild.build_uids), but a scope's ccache is written by all of them,
one after the other or at once. Every build uid has the same group
(``KPERF_BUILD_GID``), the scope's directories belong to it with mode 2770
(group-writable, setgid so that what is made inside keeps the group), and
ccache writes with ``CCACHE_UMASK=002``: any build of the scope reads every
entry and makes or removes entries in every directory, whoever made them.
Handing the directory over by chown before each build (as the object tree
is) would have root walk a directory that another build of the same scope
may be rewriting at that moment, planting symlinks; the group needs no
walk. kperf's own passes over the directory (below) work through directory
file descriptors and never follow a link.

Bounded. A submitter's scope (not the lab's, which its operators size in
its own ccache.conf) holds at most ``KPERF_CCACHE_SCOPE_MAX_BYTES``:

- it is ccache's own ``max_size`` (``CCACHE_MAXSIZE``) during the build,
  so ccache keeps an honest build's cache under it by itself;
- after every build ``ccache --cleanup`` runs with that size, in the
  sandbox, as the build's uid (the directory's ccache.conf is the build's
  to write, so root never runs ccache on it);
- then kperf walks the directory itself: what ccache never writes (any
  entry at the top other than its sixteen level directories, ``tmp`` and
  ``ccache.conf``; anything anywhere that is neither a file, a directory
  nor one of ccache's lock links) is removed, every byte left is counted,
  and if ccache was fooled into keeping more than the bound the oldest
  files go until it holds.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kperf_kbuild.sandbox import MiB, Sandbox

# What ccache 4 makes at a cache directory's top.
_TOP_DIR = re.compile(r"[0-9a-f]|tmp")
_TOP_FILES = frozenset({"ccache.conf"})
# Its bookkeeping in each level directory: counted, never evicted (ccache remakes them).
_BOOKKEEPING = frozenset({"stats", "CACHEDIR.TAG"})
SHARED_DIR_MODE = 0o2770


@dataclass
class Trimmed:
    """What trim() found and left."""

    before: int = 0
    after: int = 0
    # Entries removed because ccache does not make such things (relative paths).
    strays: list[str] = field(default_factory=list)
    # Files evicted, oldest first, because ccache's own cleanup left too much.
    evicted: int = 0


def ccache_env(scope: str, sandbox: Sandbox) -> dict[str, str]:
    """ccache's settings for a build of ``scope``: its size bound, and the umask that shares it across build uids."""
    env: dict[str, str] = {}
    if sandbox.drops_to_uid:
        env["CCACHE_UMASK"] = "002"
    if scope != "lab":
        env["CCACHE_MAXSIZE"] = max_size_value(sandbox.limits.ccache_scope_bytes)
    return env


def max_size_value(nbytes: int) -> str:
    # ccache reads a bare number as gigabytes: say kibibytes.
    return f"{max(1, nbytes // 1024)}Ki"


def prepare(scope_dir: Path, sandbox: Sandbox) -> None:
    """Make ``scope_dir`` (created if missing) writable to every build uid of the group."""
    scope_dir.mkdir(parents=True, exist_ok=True)
    if not sandbox.drops_to_uid:
        # Root with the sandbox off owns it; an ordinary user does already.
        sandbox.own(scope_dir)
        return
    st = os.lstat(scope_dir)
    if st.st_gid == sandbox.gid and stat.S_IMODE(st.st_mode) == SHARED_DIR_MODE:
        return  # the layout already: ccache makes its directories under it with the group and 2770
    # A scope written before builds had uids of their own (every file the
    # one build uid's, directories 0755): every directory joins the group.
    _walk(scope_dir, sandbox.gid, keep_all=True)


def trim(scope_dir: Path, sandbox: Sandbox, log: Callable[[str], None]) -> Trimmed:
    """Bring a submitter's scope back under ``KPERF_CCACHE_SCOPE_MAX_BYTES``
    after a build (see the module's docstring)."""
    bound = sandbox.limits.ccache_scope_bytes
    lines: list[str] = []
    env = {
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C",
        "CCACHE_DIR": str(scope_dir),
        "CCACHE_MAXSIZE": max_size_value(bound),
        # Not the directory's own ccache.conf, which the build could write.
        "CCACHE_CONFIGPATH": "/dev/null",
        **ccache_env("lab", sandbox),
    }
    quick = sandbox.with_limits(wall_seconds=min(sandbox.limits.wall_seconds, 600.0))
    ran = quick.run(["ccache", "--cleanup"], cwd=scope_dir, env=env, on_line=lines.append, writable=[scope_dir])
    if ran.returncode != 0 or ran.stopped:
        log(f"ccache --cleanup in {scope_dir.name} failed ({ran.stopped or ran.returncode}): {' '.join(lines)[-200:]}")
    gid = sandbox.gid if sandbox.drops_to_uid else None
    trimmed = _walk(scope_dir, gid, keep_all=False, bound=bound)
    if trimmed.strays or trimmed.evicted:
        log(
            f"ccache scope {scope_dir.name}: {trimmed.before / MiB:.0f} MiB, over its "
            f"{bound / MiB:.0f} MiB (KPERF_CCACHE_SCOPE_MAX_BYTES) or not ccache's: removed "
            f"{len(trimmed.strays)} foreign entr{'y' if len(trimmed.strays) == 1 else 'ies'} "
            f"({', '.join(trimmed.strays[:3])[:120]}) and {trimmed.evicted} oldest file(s); "
            f"{trimmed.after / MiB:.0f} MiB left"
        )
    return trimmed


def usage(scope_dir: Path) -> int:
    """Every byte under ``scope_dir``, as trim() counts them."""
    return _walk(scope_dir, None, keep_all=True, bound=None).after


def _walk(scope_dir: Path, gid: int | None, *, keep_all: bool, bound: int | None = None) -> Trimmed:
    """One pass through file descriptors, never following a link: give every
    directory to ``gid`` (if not None), remove what ccache does not make
    (unless ``keep_all``), count the rest, and evict the oldest files while
    more than ``bound`` bytes are left."""
    out = Trimmed()
    stray_bytes = 0
    files: list[tuple[float, int, str]] = []
    top = os.open(scope_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for dirpath, dirnames, filenames, dirfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            at_top = dirpath == "."
            if gid is not None:
                os.fchown(dirfd, -1, gid)
                os.fchmod(dirfd, SHARED_DIR_MODE)
            out.after += os.fstat(dirfd).st_blocks * 512
            for name in [*dirnames, *filenames]:
                try:
                    st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                kind = stat.S_IFMT(st.st_mode)
                size = 0 if kind == stat.S_IFDIR else st.st_blocks * 512  # a directory counts as it is walked
                if keep_all or _made_by_ccache(name, kind, at_top):
                    out.after += size
                    if kind == stat.S_IFREG and name not in _BOOKKEEPING:
                        files.append((st.st_mtime, size, name if at_top else f"{dirpath[2:]}/{name}"))
                    continue
                _remove(dirfd, name, kind == stat.S_IFDIR)
                out.strays.append(name if at_top else f"{dirpath[2:]}/{name}")
                stray_bytes += size
                if name in dirnames:
                    dirnames.remove(name)
        out.before = out.after + stray_bytes
        if bound is not None and out.after > bound:
            for _mtime, size, rel in sorted(files):
                if out.after <= bound:
                    break
                _unlink_beneath(top, rel)
                out.after -= size
                out.evicted += 1
    finally:
        os.close(top)
    return out


def _made_by_ccache(name: str, kind: int, at_top: bool) -> bool:
    """Whether ccache 4 makes such an entry: at the top its level directories, ``tmp`` and its
    configuration; below, files and directories; anywhere, the links it locks with."""
    if kind == stat.S_IFLNK:
        return name.endswith(".lock")
    if kind == stat.S_IFDIR:
        return not at_top or _TOP_DIR.fullmatch(name) is not None
    if kind == stat.S_IFREG:
        return not at_top or name in _TOP_FILES
    return False


def _remove(dirfd: int, name: str, is_dir: bool) -> None:
    try:
        if is_dir:
            shutil.rmtree(name, dir_fd=dirfd)  # fd-based: never follows a link it meets
        else:
            os.unlink(name, dir_fd=dirfd)
    except FileNotFoundError:
        pass


def _unlink_beneath(top: int, rel: str) -> None:
    """Unlink ``rel`` under the directory ``top``, opening each directory on
    the way without following a link (another build of the scope may have
    swapped one in since the walk)."""
    *dirs, name = rel.split("/")
    fds: list[int] = []
    try:
        cur = top
        for part in dirs:
            cur = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=cur)
            fds.append(cur)
        os.unlink(name, dir_fd=cur)
    except (FileNotFoundError, NotADirectoryError):
        pass  # gone already, or no longer what was counted
    except OSError as exc:
        if exc.errno != errno.ELOOP:  # a link in the way: not followed
            raise
    finally:
        for fd in reversed(fds):
            os.close(fd)
