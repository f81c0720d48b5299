"""Gzip'd newc cpio archives in pure Python: the initramfs the qemu backend boots.

The kernel unpacks a "newc" (SVR4, no CRC) cpio archive into its rootfs
before running /init. Writing it here instead of calling `cpio` keeps the
runner free of external tools and makes the archive deterministic: fixed
mtimes, owners and inode numbers, entries in insertion order, gzip with no
timestamp. Same inputs, same bytes, so a cached initramfs can be keyed by
its contents.
"""

from __future__ import annotations

import gzip
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# Fixed, non-zero mtime: the kernel and cpio both accept it, and some tools
# treat 0 as "unset".
MTIME = 1


@dataclass(frozen=True)
class Entry:
    path: str  # relative, no leading "/" (as `find . | cpio -o` would write it)
    mode: int  # file type bits | permissions
    data: bytes = b""
    rdev_major: int = 0
    rdev_minor: int = 0


class Initramfs:
    """An archive under construction; parents of every path are added implicitly."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def add_dir(self, path: str, mode: int = 0o755) -> None:
        self._add(Entry(self._norm(path), stat.S_IFDIR | mode))

    def add_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._add(Entry(self._norm(path), stat.S_IFREG | mode, data))

    def add_symlink(self, path: str, target: str) -> None:
        self._add(Entry(self._norm(path), stat.S_IFLNK | 0o777, target.encode()))

    def add_char_device(self, path: str, major: int, minor: int, mode: int = 0o600) -> None:
        self._add(Entry(self._norm(path), stat.S_IFCHR | mode, b"", major, minor))

    @property
    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def to_cpio(self) -> bytes:
        """The uncompressed newc archive, trailer included."""
        out = bytearray()
        for ino, entry in enumerate(self._entries.values(), start=1):
            nlink = 2 if stat.S_ISDIR(entry.mode) else 1
            out += _record(
                entry.path,
                ino,
                entry.mode,
                nlink,
                entry.data,
                entry.rdev_major,
                entry.rdev_minor,
            )
        out += _record("TRAILER!!!", 0, 0, 1, b"", 0, 0)
        # The kernel reads the archive in 512-byte blocks like cpio does.
        out += b"\0" * (-len(out) % 512)
        return bytes(out)

    def to_gzip(self) -> bytes:
        return gzip.compress(self.to_cpio(), compresslevel=6, mtime=0)

    def write(self, path: Path) -> None:
        path.write_bytes(self.to_gzip())

    def _add(self, entry: Entry) -> None:
        parts = PurePosixPath(entry.path).parts
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            existing = self._entries.get(parent)
            if existing is None:
                self._entries[parent] = Entry(parent, stat.S_IFDIR | 0o755)
            elif not stat.S_ISDIR(existing.mode):
                raise ValueError(f"initramfs: {parent} is not a directory, cannot hold {entry.path}")
        if entry.path in self._entries:
            raise ValueError(f"initramfs: {entry.path} added twice")
        self._entries[entry.path] = entry

    @staticmethod
    def _norm(path: str) -> str:
        parts = [part for part in PurePosixPath(path).parts if part != "/"]
        if not parts or any(part in (".", "..") for part in parts):
            raise ValueError(f"initramfs: bad path {path!r}")
        return "/".join(parts)


def _record(name: str, ino: int, mode: int, nlink: int, data: bytes, rmajor: int, rminor: int) -> bytes:
    encoded = name.encode() + b"\0"
    fields = (
        ino,
        mode,
        0,  # uid: root
        0,  # gid: root
        nlink,
        MTIME if name != "TRAILER!!!" else 0,
        len(data),
        0,  # devmajor / devminor of the file system the entry came from
        0,
        rmajor,
        rminor,
        len(encoded),
        0,  # check: only used by the "crc" format
    )
    header = b"070701" + b"".join(b"%08X" % value for value in fields)
    # The name is padded so that header + name ends on 4 bytes, then the data.
    body = header + encoded
    body += b"\0" * (-len(body) % 4)
    body += data
    body += b"\0" * (-len(body) % 4)
    return body


# Where things live inside the initramfs the qemu backend boots.
GUEST_BINDIR = "/kperf/bin"
GUEST_JOB = "/kperf/job"
# How init ends the boot: "reboot" (bare metal: back to the machine's own
# kernel) or, without the file, a power-off (QEMU: the VM ends).
GUEST_END = "/kperf/end"
END_CHOICES = ("poweroff", "reboot")
# The transparent huge page mode init sets before the first command (its
# tune_thp); without the file the kernel's default stays.
GUEST_THP = "/kperf/thp"
THP_CHOICES = ("always", "madvise", "never")


def job_file(commands: Sequence[Sequence[str]]) -> bytes:
    """/kperf/job: one command per line, argv separated by single spaces.

    init splits on single spaces and nothing else (no quoting, no shell), so
    an argument that is empty or holds whitespace cannot be expressed.
    """
    lines = []
    for argv in commands:
        if not argv:
            raise ValueError("job: empty command")
        for arg in argv:
            if not arg or any(char.isspace() for char in arg):
                raise ValueError(
                    f"job: argument {arg!r} of {list(argv)} is empty or has whitespace; "
                    "init splits commands on single spaces"
                )
        lines.append(" ".join(argv) + "\n")
    return "".join(lines).encode()


def job_initramfs(
    init: bytes,
    binaries: dict[str, bytes],
    commands: Sequence[Sequence[str]],
    end: str = "poweroff",
    thp: str = "",
) -> Initramfs:
    """The initramfs for one boot: /init, the binaries in /kperf/bin, /kperf/job, /kperf/end
    for a reboot, and /kperf/thp when the job asks for a THP mode.

    init reads /kperf/end before anything that can fail, so that even its
    earliest failure reboots a bare-metal machine rather than leaving it
    powered off, out of reach of its watchdog.
    """
    if end not in END_CHOICES:
        raise ValueError(f"initramfs: end must be one of {', '.join(END_CHOICES)}, not {end!r}")
    if thp and thp not in THP_CHOICES:
        raise ValueError(f"initramfs: thp must be one of {', '.join(THP_CHOICES)} or empty, not {thp!r}")
    archive = Initramfs()
    for directory in ("dev", "proc", "sys", "tmp", "kperf", "kperf/bin"):
        archive.add_dir(directory, 0o1777 if directory == "tmp" else 0o755)
    # The kernel opens /dev/console for init before anything mounts devtmpfs.
    archive.add_char_device("dev/console", 5, 1)
    archive.add_file("init", init, 0o755)
    for name, data in sorted(binaries.items()):
        archive.add_file(f"{GUEST_BINDIR}/{name}", data, 0o755)
    archive.add_file(GUEST_JOB, job_file(commands), 0o644)
    if end == "reboot":
        archive.add_file(GUEST_END, b"reboot\n", 0o644)
    if thp:
        archive.add_file(GUEST_THP, f"{thp}\n".encode(), 0o644)
    return archive
