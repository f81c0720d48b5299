"""Reading and writing files a sandboxed build could have written.

The worker (often root) reads the build's outputs and writes a few files
beside them. A hostile build can leave a symlink where an output should be
(``build.log`` -> ``/etc/passwd``, ``config`` -> the worker's secret key): a
plain ``open`` would follow it outside the sandbox, to write as root or to
copy a secret into the submitter's artifacts. Everything here refuses to
follow a symlink and accepts only regular files. The build has ended (its
PID namespace is gone) when the driver collects, so nothing can swap a file
between the check and the use; during the build only ``open`` with
O_NOFOLLOW is used.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def is_regular(path: Path) -> bool:
    """A regular file, not a symlink (or anything else)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def read_bytes(path: Path) -> bytes:
    """The content of a regular file; OSError for a symlink or anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read()


def read_text(path: Path) -> str:
    return read_bytes(path).decode("utf-8", "replace")


def write_text(path: Path, text: str) -> None:
    """(Re)create ``path`` as a new regular file: whatever stood there
    (a planted symlink included) is removed, never written through."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def copy(src: Path, dst: Path) -> Path:
    """Copy a regular file ``src`` to a new file ``dst``."""
    data = read_bytes(src)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(dst)
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return dst


def drop_irregular(directory: Path) -> list[str]:
    """Remove every entry of ``directory`` (not recursively) that is neither
    a regular file nor a real directory: what the build may have planted."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            if entry.is_symlink() or not (entry.is_file(follow_symlinks=False) or entry.is_dir(follow_symlinks=False)):
                os.unlink(entry.path)
                removed.append(entry.name)
    return removed
