"""The watchdog is armed from each boot's own time limit, and the driver's answer is checked.

A regular file stands in for /dev/watchdog (the magic 'V' of a stop is
written to it for real), a directory for /sys/class/watchdog, and
`Driver` answers the ioctls as a watchdog driver would: it may refuse a
period, round it, or count less in hardware than it says.
"""

from __future__ import annotations

import errno
import math
from pathlib import Path
from typing import Any

import pytest
from kexec_fixtures import RAMOOPS

from kperf_runner.backends import BootJob
from kperf_runner.backends.kexec import KexecBackend
from kperf_runner.backends.watchdog import WDIOC_KEEPALIVE, WDIOC_SETTIMEOUT, Watchdog, WatchdogError
from kperf_runner.toolchain import host_arch


class Driver(Watchdog):
    """The kernel's side of the watchdog's ioctls: `answer` maps the asked period to the one set."""

    def __init__(self, device: Path, sysfs: Path, answer: Any = None) -> None:
        super().__init__(device, sysfs)
        self.answer = answer or (lambda seconds: seconds)
        self.calls: list[tuple[str, int]] = []

    def _ioctl(self, request: int, value: int) -> int:
        name = {WDIOC_SETTIMEOUT: "settimeout", WDIOC_KEEPALIVE: "keepalive"}[request]
        self.calls.append((name, value))
        if name == "settimeout":
            got = self.answer(value)
            if got is None:
                raise OSError(errno.EINVAL, "Invalid argument")
            return int(got)
        return 0


class JumpsAway(KexecBackend):
    """start() up to the jump; the jump itself is the machine going away (SystemExit)."""

    jumped = False

    def ramoops_loaded(self) -> bool:
        return True

    def load(self, kernel: Path, initrd: Path, cmdline: str) -> None:
        pass

    def mark_jump(self, boot: str) -> None:
        pass

    def jump(self) -> None:
        self.jumped = True
        raise SystemExit("the machine went into the kernel under test")


def _machine(tmp_path: Path, runner_state: Path, attributes: dict[str, int], answer: Any = None) -> JumpsAway:
    """A kexec backend whose watchdog0 has these sysfs attributes and answers as `answer` says."""
    state = tmp_path / "state"
    state.mkdir()
    (runner_state / "bin").mkdir(exist_ok=True)
    (state / "bin").symlink_to(runner_state / "bin", target_is_directory=True)
    device, sysfs = tmp_path / "watchdog", tmp_path / "class"
    device.write_bytes(b"")
    (sysfs / "watchdog0").mkdir(parents=True)
    for name, value in attributes.items():
        (sysfs / "watchdog0" / name).write_text(f"{value}\n")
    backend = JumpsAway(
        host_arch(),
        state,
        RAMOOPS,
        watchdog=device,
        watchdog_sysfs=sysfs,
        boot_seconds=45,
        return_timeout=300,
        pstore=tmp_path / "pstore",
    )
    backend.watchdog_driver = Driver(device, sysfs, answer)
    return backend


def _start(backend: JumpsAway, tmp_path: Path, timeout: float) -> list[tuple[dict[str, Any], float]]:
    """start() a boot with this time limit; the (state, quiet seconds) it committed."""
    kernel = tmp_path / "bzImage"
    kernel.write_bytes(b"kernel")
    commits: list[tuple[dict[str, Any], float]] = []
    job = BootJob(commands=[["true"]], binaries={}, timeout=timeout)
    backend.start(job, kernel, lambda state, quiet: commits.append((state, quiet)))
    return commits


@pytest.mark.parametrize("timeout", [60.0, 610.5])
def test_each_boot_arms_the_watchdog_for_its_own_time_limit_and_the_lease_covers_it(
    tmp_path: Path, runner_state: Path, timeout: float
) -> None:
    backend = _machine(tmp_path, runner_state, {"min_timeout": 1, "max_timeout": 2046})
    with pytest.raises(SystemExit):
        _start(backend, tmp_path, timeout)
    assert backend.jumped
    assert isinstance(backend.watchdog_driver, Driver)
    # The boot's limit plus the boot allowance again: no fixed period.
    seconds = math.ceil(timeout + 45)
    assert backend.watchdog_driver.calls[:2] == [("settimeout", seconds), ("keepalive", 0)]


def test_the_lease_asked_for_covers_the_watchdogs_period_and_the_way_back(tmp_path: Path, runner_state: Path) -> None:
    backend = _machine(tmp_path, runner_state, {"max_timeout": 2046})
    commits: list[tuple[dict[str, Any], float]] = []
    kernel = tmp_path / "bzImage"
    kernel.write_bytes(b"kernel")
    with pytest.raises(SystemExit):
        backend.start(
            BootJob(commands=[["true"]], binaries={}, timeout=200),
            kernel,
            lambda state, quiet: commits.append((state, quiet)),
        )
    [(state, quiet)] = commits
    # 245 s of watchdog, 25 s for the driver's rounding, 300 s to come back.
    assert state["watchdog_seconds"] == 245 and quiet == 245 + 25 + 300


def test_a_driver_minimum_is_what_a_short_boot_gets(tmp_path: Path, runner_state: Path) -> None:
    backend = _machine(tmp_path, runner_state, {"min_timeout": 300, "max_timeout": 2046})
    assert backend.watchdog_seconds(10) == 300


def test_a_watchdog_that_cannot_count_the_boot_fails_it_before_anything_is_committed(
    tmp_path: Path, runner_state: Path
) -> None:
    backend = _machine(tmp_path, runner_state, {"max_timeout": 120})
    with pytest.raises(WatchdogError, match=r"counts at most 120 s .* this boot needs 645 s"):
        _start(backend, tmp_path, 600)
    assert isinstance(backend.watchdog_driver, Driver)
    assert backend.watchdog_driver.calls == [] and not backend.jumped
    # Never opened, so never started.
    assert (tmp_path / "watchdog").read_bytes() == b""


@pytest.mark.parametrize(
    ("answer", "attributes", "why"),
    [
        (lambda s: s // 2, {}, "would reset the machine in the middle of the boot"),
        (lambda s: s * 2, {}, "a hang would outlast the lease"),
        (lambda s: None, {}, "refused a 105 s timeout"),
        (lambda s: s, {"timeleft": 42}, "its hardware has 42 s left"),
    ],
    ids=["shorter", "much-longer", "refused", "hardware-shorter"],
)
def test_a_period_the_driver_did_not_set_as_asked_stops_the_watchdog_and_the_jump(
    tmp_path: Path, runner_state: Path, answer: Any, attributes: dict[str, int], why: str
) -> None:
    backend = _machine(tmp_path, runner_state, attributes, answer)
    with pytest.raises(WatchdogError, match=why):
        _start(backend, tmp_path, 60)
    assert not backend.jumped
    # Stopped again with the magic close: it must not reset the machine later.
    assert (tmp_path / "watchdog").read_bytes() == b"V"


def test_a_driver_that_rounds_up_a_little_is_accepted(tmp_path: Path, runner_state: Path) -> None:
    backend = _machine(tmp_path, runner_state, {"timeleft": 110}, lambda s: s + 5)
    with pytest.raises(SystemExit):
        _start(backend, tmp_path, 60)
    assert backend.jumped
