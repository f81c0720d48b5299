"""The initramfs writer: real cpio reads what it writes."""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from kperf_runner.initramfs import Initramfs, job_file, job_initramfs

pytestmark = pytest.mark.skipif(shutil.which("cpio") is None, reason="needs cpio")


def _archive() -> Initramfs:
    archive = Initramfs()
    archive.add_dir("proc")
    archive.add_char_device("/dev/console", 5, 1)
    archive.add_file("/init", b"#!/bin/sh\necho hi\n", 0o755)
    archive.add_file("kperf/job", b"/kperf/bin/spawn -t 1\n")
    archive.add_file("kperf/bin/odd-size", b"x" * 4099, 0o700)
    archive.add_symlink("bin/sh", "/kperf/bin/odd-size")
    return archive


def _cpio(args: list[str], archive: bytes, cwd: Path) -> str:
    run = subprocess.run(
        ["cpio", *args],
        input=gzip.decompress(archive),
        capture_output=True,
        cwd=cwd,
        check=True,
    )
    return run.stdout.decode()


def test_cpio_lists_every_entry_with_its_parents(tmp_path: Path) -> None:
    listing = _cpio(["-t", "--quiet"], _archive().to_gzip(), tmp_path).split()
    assert listing == [
        "proc",
        "dev",
        "dev/console",
        "init",
        "kperf",
        "kperf/job",
        "kperf/bin",
        "kperf/bin/odd-size",
        "bin",
        "bin/sh",
    ]


def test_the_console_is_character_device_5_1(tmp_path: Path) -> None:
    verbose = _cpio(["-tv", "--quiet"], _archive().to_gzip(), tmp_path)
    console = next(line for line in verbose.splitlines() if line.endswith("dev/console"))
    assert console.startswith("crw-------")
    assert "5,   1" in console or "5, 1" in console


def test_cpio_extracts_files_modes_links_and_the_device(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    _cpio(["-idm", "--quiet", "--no-absolute-filenames"], _archive().to_gzip(), tmp_path)
    assert (tmp_path / "init").read_bytes() == b"#!/bin/sh\necho hi\n"
    assert stat.S_IMODE((tmp_path / "init").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "kperf/job").stat().st_mode) == 0o644
    assert (tmp_path / "kperf/bin/odd-size").read_bytes() == b"x" * 4099
    assert os.readlink(tmp_path / "bin/sh") == "/kperf/bin/odd-size"
    console = (tmp_path / "dev/console").lstat()
    assert stat.S_ISCHR(console.st_mode)
    assert (os.major(console.st_rdev), os.minor(console.st_rdev)) == (5, 1)
    # -m keeps the archive's fixed mtime.
    assert int((tmp_path / "init").stat().st_mtime) == 1


def test_the_same_contents_give_the_same_bytes() -> None:
    assert _archive().to_gzip() == _archive().to_gzip()


def test_bad_paths_and_duplicates_are_refused() -> None:
    archive = Initramfs()
    archive.add_file("a", b"")
    with pytest.raises(ValueError, match="added twice"):
        archive.add_file("a", b"")
    with pytest.raises(ValueError, match="not a directory"):
        archive.add_file("a/b", b"")
    with pytest.raises(ValueError, match="bad path"):
        archive.add_file("../etc/passwd", b"")


def test_the_job_initramfs_holds_init_binaries_and_the_job(tmp_path: Path) -> None:
    archive = job_initramfs(b"INIT", {"spawn": b"SPAWN"}, [["/kperf/bin/spawn", "-t", "1"]])
    listing = _cpio(["-t", "--quiet"], archive.to_gzip(), tmp_path).split()
    for path in (
        "dev/console",
        "init",
        "kperf/bin/spawn",
        "kperf/job",
        "proc",
        "sys",
        "tmp",
    ):
        assert path in listing


def test_the_job_file_is_one_command_per_line_with_single_spaces() -> None:
    assert job_file([["/a", "-x", "1"], ["/b"]]) == b"/a -x 1\n/b\n"
    with pytest.raises(ValueError, match="whitespace"):
        job_file([["/a", "two words"]])
    with pytest.raises(ValueError, match="empty"):
        job_file([["/a", ""]])


def test_a_job_initramfs_that_ends_by_rebooting_says_so_in_kperf_end(tmp_path: Path) -> None:
    # The kexec backend's: init reads it before anything that can fail.
    archive = job_initramfs(b"INIT", {}, [["/kperf/bin/spawn"]], end="reboot")
    assert "kperf/end" in _cpio(["-t", "--quiet"], archive.to_gzip(), tmp_path).split()
    _cpio(["-idm", "--quiet", "--no-absolute-filenames"], archive.to_gzip(), tmp_path)
    assert (tmp_path / "kperf/end").read_bytes() == b"reboot\n"
    # QEMU's VM powers off: no file, and the archive is what it always was.
    plain = job_initramfs(b"INIT", {}, [["/kperf/bin/spawn"]])
    assert "kperf/end" not in _cpio(["-t", "--quiet"], plain.to_gzip(), tmp_path).split()
    assert plain.to_gzip() == job_initramfs(b"INIT", {}, [["/kperf/bin/spawn"]], end="poweroff").to_gzip()
    with pytest.raises(ValueError, match="end must be one of poweroff, reboot"):
        job_initramfs(b"INIT", {}, [], end="halt")


def test_a_job_that_asks_for_a_thp_mode_gets_it_in_kperf_thp(tmp_path: Path) -> None:
    # init's tune_thp writes the mode from /kperf/thp before the first command.
    archive = job_initramfs(b"INIT", {}, [["/kperf/bin/spawn"]], thp="never")
    _cpio(["-idm", "--quiet", "--no-absolute-filenames"], archive.to_gzip(), tmp_path)
    assert (tmp_path / "kperf/thp").read_bytes() == b"never\n"
    # No mode asked: no file, and the kernel's default stays.
    plain = job_initramfs(b"INIT", {}, [["/kperf/bin/spawn"]], thp="")
    assert "kperf/thp" not in _cpio(["-t", "--quiet"], plain.to_gzip(), tmp_path).split()
    with pytest.raises(ValueError, match="thp must be one of always, madvise, never or empty, not 'sometimes'"):
        job_initramfs(b"INIT", {}, [], thp="sometimes")
