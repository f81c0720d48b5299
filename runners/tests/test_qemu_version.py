"""QEMU's version as a running runner reads it: asked again when the binary
changes, so a QEMU upgraded under a runner is seen without restarting it
(kperf_runner.backends.qemu_version)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.backends.qemu_version import icount_smp_refusal, qemu_version

OLD = "QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)"
NEW = "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)"


def _script(version: str, calls: Path) -> str:
    return f"#!/bin/sh\necho \"$*\" >> {calls}\nprintf '%s\\n' '{version}'\n"


def _install(binary: Path, version: str) -> None:
    """As dpkg does: the new file written beside the old one, then renamed over it."""
    new = binary.with_name(binary.name + ".dpkg-new")
    new.write_text(_script(version, binary.parent / "calls"))
    new.chmod(0o755)
    os.replace(new, binary)


@pytest.fixture
def qemu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """qemu-system-x86_64 first on PATH, QEMU 7.2 (Debian 12's) for now."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    binary = bindir / "qemu-system-x86_64"
    _install(binary, OLD)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return binary


def _asked(binary: Path) -> int:
    return (binary.parent / "calls").read_text().splitlines().count("--version")


def test_a_qemu_upgraded_under_a_running_backend_is_seen(qemu: Path, tmp_path: Path) -> None:
    backend = QemuBackend("x86_64", tmp_path / "state", accel="tcg")
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"needs QEMU 8\.1 or later"):
            backend.command_line(Path("/k"), Path("/i.gz"), clock="instructions", vcpus=2)
    assert _asked(qemu) == 1  # the same binary: asked once
    _install(qemu, NEW)
    # The same backend, the same process: the new QEMU boots two vCPUs on the instruction clock.
    argv = backend.command_line(Path("/k"), Path("/i.gz"), clock="instructions", vcpus=2)
    assert argv[argv.index("-smp") + 1] == "2"
    assert qemu_version(str(qemu)) == (NEW, (10, 0))
    assert _asked(qemu) == 2


def test_a_binary_rewritten_in_place_is_asked_again(qemu: Path) -> None:
    assert qemu_version("qemu-system-x86_64") == (OLD, (7, 2))
    inode = qemu.stat().st_ino
    qemu.write_text(_script(NEW, qemu.parent / "calls"))
    assert qemu.stat().st_ino == inode
    assert qemu_version("qemu-system-x86_64") == (NEW, (10, 0))
    assert qemu_version(str(qemu)) == (NEW, (10, 0))
    assert _asked(qemu) == 2


def test_a_link_to_the_binary_is_the_binary(qemu: Path, tmp_path: Path) -> None:
    link = tmp_path / "qemu-link"
    link.symlink_to(qemu)
    assert qemu_version(str(qemu))[1] == (7, 2)
    assert qemu_version(str(link))[1] == (7, 2)
    assert _asked(qemu) == 1


def test_the_refusal_gives_the_commands_a_stock_debian_12_needs(qemu: Path) -> None:
    assert icount_smp_refusal("qemu-system-x86_64", "x86_64", 1, "the job") is None
    refusal = icount_smp_refusal("qemu-system-x86_64", "arm64", 4, "the local machine class")
    assert refusal is not None
    assert refusal.startswith("the local machine class wants 4 vCPUs on the instruction clock"), refusal
    assert refusal.splitlines()[1:] == [
        "  echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/backports.list",
        "  apt-get update",
        "  apt-get install -t bookworm-backports qemu-system-arm",
    ]
    _install(qemu, NEW)
    assert icount_smp_refusal("qemu-system-x86_64", "x86_64", 4, "the job") is None


def test_a_binary_that_is_not_there_says_so(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"cannot run .*nowhere --version"):
        qemu_version(str(tmp_path / "nowhere"))
