"""QEMU's version, and what several vCPUs on the instruction clock ask of it.

Shared by the runner's QEMU backend (which refuses such a job on an older
QEMU) and by `kperf-up` (which refuses to start a local class that would ask
for it). Debian 12 ships QEMU 7.2: the commands that give it a newer one are
named in full, the backports source included, since a stock Debian 12 has no
backports source and `apt-get install -t bookworm-backports` alone fails there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

# Before 8.1 (commit 83ecdb18eb65) QEMU gave one vCPU an icount turn's whole
# instruction budget, and an x86 guest's SMP bring-up livelocks.
ICOUNT_SMP_QEMU = (8, 1)

QEMU_BINARY = {"x86_64": "qemu-system-x86_64", "arm64": "qemu-system-aarch64"}
QEMU_PACKAGE = {"x86_64": "qemu-system-x86", "arm64": "qemu-system-arm"}

BACKPORTS_SOURCE = "deb http://deb.debian.org/debian bookworm-backports main"
BACKPORTS_LIST = "/etc/apt/sources.list.d/backports.list"

# (resolved path, device, inode, size, mtime_ns) -> (first line, (major, minor)).
# A package upgrade replaces the file (a new inode, usually a new size and
# mtime): a runner that outlives the upgrade then reads the new version
# instead of measuring with one QEMU and recording another.
_versions: dict[tuple[str, int, int, int, int], tuple[str, tuple[int, int]]] = {}


def _identity(binary: str) -> tuple[str, int, int, int, int]:
    found = shutil.which(binary) or binary
    path = os.path.realpath(found)
    try:
        st = os.stat(path)
    except OSError as error:
        raise RuntimeError(f"cannot run {binary} --version: {error}") from error
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def qemu_version(binary: str) -> tuple[str, tuple[int, int]]:
    """The first line of `binary --version` and its (major, minor), asked again only when the file changes."""
    key = _identity(binary)
    if key not in _versions:
        try:
            run = subprocess.run([key[0], "--version"], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise RuntimeError(f"cannot run {binary} --version: {error}") from error
        line = next((text.strip() for text in run.stdout.splitlines() if text.strip()), "")
        found = re.search(r"version (\d+)\.(\d+)", line)
        if found is None:
            raise RuntimeError(f"cannot tell the version of {binary}: --version said {line or run.stderr.strip()!r}")
        _versions[key] = (line, (int(found[1]), int(found[2])))
    return _versions[key]


def backports_commands(arch: str) -> list[str]:
    """What gives a stock Debian 12 a QEMU new enough (10.0 in bookworm-backports), run as root."""
    return [
        f"echo '{BACKPORTS_SOURCE}' > {BACKPORTS_LIST}",
        "apt-get update",
        f"apt-get install -t bookworm-backports {QEMU_PACKAGE[arch]}",
    ]


def icount_smp_refusal(binary: str, arch: str, vcpus: int, who: str) -> str | None:
    """Why `binary` cannot boot `vcpus` vCPUs on the instruction clock, and what to run; None when it can.

    `who` says who asks: "the job", "the local machine class".
    """
    if vcpus <= 1:
        return None
    line, version = qemu_version(binary)
    if version >= ICOUNT_SMP_QEMU:
        return None
    # Named by the path PATH gives it: the QEMU the runners boot, which may not be the one the user upgraded.
    binary = shutil.which(binary) or binary
    commands = "".join(f"\n  {command}" for command in backports_commands(arch))
    return (
        f"{who} wants {vcpus} vCPUs on the instruction clock, which needs QEMU 8.1 or later "
        f"(older ones hang the guest's SMP bring-up under -icount); {binary} is {line!r}: install "
        f"QEMU >= 8.1. On Debian 12, as root (the first line adds the backports source a stock "
        f"Debian 12 lacks):{commands}"
    )
