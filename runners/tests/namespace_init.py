"""kperf init (csrc/init.c) as PID 1 of a PID and mount namespace: no kernel needed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kperf_runner.initramfs import job_initramfs


def run_init(
    root: Path,
    init: Path,
    binaries: dict[str, Path],
    commands: list[list[str]],
    *,
    extra: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    end: str = "poweroff",
    merge_stderr: bool = True,
    timeout: float = 60,
) -> subprocess.CompletedProcess[bytes]:
    """Unpack the job's initramfs (plus `extra` files under /kperf) into root and run its /init there.

    KPERF_INIT_NO_POWER_OFF makes init exit instead of calling reboot(): the
    namespace alone would already contain it, this is belt and braces.
    With merge_stderr the output is one stream, as on a serial console.
    """
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("cpio") is None:
        pytest.skip("running init as PID 1 of a namespace needs root, unshare and cpio")
    archive = job_initramfs(
        init.read_bytes(), {name: path.read_bytes() for name, path in binaries.items()}, commands, end=end
    )
    root.mkdir()
    subprocess.run(["cpio", "-idm", "--quiet"], input=archive.to_cpio(), cwd=root, check=True)
    for name, text in (extra or {}).items():
        (root / "kperf" / name).write_text(text)
    return subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", f"--root={root}", "/init"],
        env={"KPERF_INIT_NO_POWER_OFF": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        timeout=timeout,
        check=False,
    )


def run_init_with_pmsg(
    tmp_path: Path, init: Path, binaries: dict[str, Path], commands: list[list[str]], end: str = "poweroff"
) -> tuple[str, bytes]:
    """Run the real init as PID 1 of a namespace; its console and what it wrote to pmsg."""
    root = tmp_path / "root"
    # The transcript goes to /pmsg in the root, not a device.
    run = run_init(
        root, init, binaries, commands, env={"KPERF_INIT_PMSG": "/pmsg"}, end=end, merge_stderr=False, timeout=120
    )
    return run.stdout.decode("utf-8", "replace"), (root / "pmsg").read_bytes()
