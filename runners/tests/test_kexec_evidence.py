"""Whose fault a boot that left no record of its own is: the kernel's (`boot`) or the runner's (`infra`).

pstore directories laid out as the machine's own kernel shows them after
the boot: the kernel under test's records name the boot's nonce; the
machine's own kernel, with ramoops.max_reason=4, leaves a "Shutdown" kmsg
dump of its log as it goes down, which for a kexec ends with
"kexec_core: Starting new kernel" (kernel/kexec_core.c).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kexec_fixtures import NONCE, RAMOOPS, _spawn_commands, _with_nonce
from namespace_init import run_init_with_pmsg

from kperf_runner.backends import BootFailure, BootJob
from kperf_runner.backends.kexec import KexecBackend, handover_warning
from kperf_runner.backends.pstore import JUMP_MARK, split_records
from kperf_runner.toolchain import host_arch

JOB = BootJob(commands=[["true"]], binaries={})


def _backend(tmp_path: Path) -> KexecBackend:
    (tmp_path / "pstore").mkdir()
    return KexecBackend(host_arch(), tmp_path / "state", RAMOOPS, pstore=tmp_path / "pstore")


def _state(seconds_ago: float = 95.0) -> dict[str, Any]:
    return {"started": time.time() - seconds_ago, "boot_id": "the boot it jumped from", "boot": NONCE}


def _shutdown_dump(last: str, mark: bool = True) -> str:
    """The machine's own kernel's kmsg dump as it goes down (pstore's header, then its log's end)."""
    lines = [
        "Shutdown#1 Part1",
        "<6>[  880.1] systemd-shutdown[1]: Syncing filesystems and block devices.",
        *([f"<5>[  880.4] {JUMP_MARK}{NONCE}"] if mark else []),
        "<6>[  881.0] systemd-shutdown[1]: Rebooting with kexec.",
        f"<5>[  881.3] {last}",
    ]
    return "\n".join(lines) + "\n"


def test_a_kernel_that_died_before_its_ramoops_is_the_kernels_boot_failure(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    (backend.pstore / "dmesg-ramoops-2").write_text(_shutdown_dump("kexec_core: Starting new kernel"))
    with pytest.raises(BootFailure) as failure:
        backend.resume(JOB, _state(95))
    message = failure.value.message
    assert message.startswith("the kernel under test died before its ramoops started, so it recorded nothing")
    assert "dmesg-ramoops-2, this boot's jump, by its nonce" in message
    assert f"came back 95 s later with no record naming kperf.boot={NONCE}" in message
    # The evidence goes with it: the machine's own last lines, naming the boot, then the handover.
    log = failure.value.console
    assert log.index(f"{JUMP_MARK}{NONCE}") < log.index("kexec_core: Starting new kernel")
    assert "nothing from the kernel" not in log and "other records" not in log
    # Read, not removed: cleared only once the failure is saved.
    assert [p.name for p in backend.pstore.iterdir()] == ["dmesg-ramoops-2"]


def test_a_handover_whose_log_lost_the_agents_mark_still_counts(tmp_path: Path) -> None:
    # A long shutdown pushes the mark out of the dump's last 10 kB: the
    # handover alone is this jump's, since pstore was cleared before it.
    backend = _backend(tmp_path)
    (backend.pstore / "dmesg-ramoops-0").write_text(_shutdown_dump("kexec_core: Starting new kernel", mark=False))
    with pytest.raises(BootFailure, match="the jump the agent made after clearing pstore"):
        backend.resume(JOB, _state())


@pytest.mark.parametrize(
    "last",
    ["reboot: Restarting system", "reboot: Power down"],
    ids=["rebooted", "powered-off"],
)
def test_a_machine_that_went_down_without_a_kexec_is_the_runners_fault(tmp_path: Path, last: str) -> None:
    backend = _backend(tmp_path)
    (backend.pstore / "dmesg-ramoops-0").write_text(_shutdown_dump(last))
    with pytest.raises(RuntimeError) as failure:
        backend.resume(JOB, _state())
    assert not isinstance(failure.value, BootFailure)
    assert "without having booted the kernel under test" in str(failure.value)
    assert "no kexec in the machine's own shutdown log" in str(failure.value)


def test_a_machine_that_kept_nothing_is_the_runners_fault(tmp_path: Path) -> None:
    # RAM cleared by the reset, or ramoops not set up: nothing to tell a kernel that died from one that never ran.
    backend = _backend(tmp_path)
    with pytest.raises(RuntimeError) as failure:
        backend.resume(JOB, _state())
    assert not isinstance(failure.value, BootFailure)
    assert "has nothing of the boot" in str(failure.value) and "ramoops.max_reason=4" in str(failure.value)


def test_the_machines_own_shutdown_log_is_not_the_kernel_under_tests(
    tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> None:
    commands = _spawn_commands()
    _, transcript = run_init_with_pmsg(tmp_path, init_binary, {"spawn": spawn_binary}, commands)
    backend = _backend(tmp_path)
    (backend.pstore / "pmsg-ramoops-0").write_bytes(_with_nonce(transcript))
    (backend.pstore / "dmesg-ramoops-1").write_text(_shutdown_dump("kexec_core: Starting new kernel"))
    result = backend.resume(BootJob(commands=commands, binaries={}), _state())
    assert [c.status for c in result.commands] == [0] * len(commands)
    # Neither shown as the boot's console nor taken for a crash of it.
    assert "Starting new kernel" not in result.console and "crash" not in result.console
    kernels, own = split_records({"dmesg-ramoops-1": _shutdown_dump("x"), "dmesg-ramoops-0": "Oops#1 Part1\n"})
    assert list(own) == ["dmesg-ramoops-1"] and list(kernels) == ["dmesg-ramoops-0"]


def test_a_panic_of_the_kernel_under_test_is_told_by_its_own_records(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    (backend.pstore / "dmesg-ramoops-1").write_text(_shutdown_dump("kexec_core: Starting new kernel"))
    (backend.pstore / "dmesg-ramoops-0").write_text(
        f"Panic#1 Part1\n<5>[    0.0] Command line: kperf.boot={NONCE}\n"
        "<0>[    0.5] Kernel panic - not syncing: VFS: Unable to mount root fs\n"
    )
    with pytest.raises(BootFailure) as failure:
        backend.resume(JOB, _state())
    assert failure.value.message.endswith("Unable to mount root fs")
    assert "ramoops started" not in failure.value.message and "Starting new kernel" not in failure.value.console


def test_the_agent_says_when_the_machine_does_not_dump_its_log_at_a_kexec(tmp_path: Path) -> None:
    params = tmp_path / "module" / "ramoops" / "parameters"
    params.mkdir(parents=True)
    assert handover_warning(tmp_path / "module") == ""  # a kernel from before max_reason
    (params / "max_reason").write_text("2\n")
    assert "add ramoops.max_reason=4 to this machine's kernel command line" in handover_warning(tmp_path / "module")
    (params / "max_reason").write_text("4\n")
    assert handover_warning(tmp_path / "module") == ""
