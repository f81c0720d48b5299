"""The hardware watchdog that ends a boot of a kernel under test that hangs.

The agent arms it right before the jump and never closes it cleanly: in the
kernel under test nothing feeds it (watchdog.handle_boot_enabled=0), so a
hang ends with a reset back to the machine's own kernel. Its period comes
from the boot's own time limit, not from a fixed setting, and what the
driver really set is checked, because the driver has the last word: it may
refuse, round, or count in hardware less than it says (docs/runners-bare-metal.md,
"The watchdog").
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import struct
from pathlib import Path

log = logging.getLogger(__name__)

# Linux's ioctl numbers (include/uapi/asm-generic/ioctl.h, used by x86 and
# arm64): dir << 30 | size << 16 | type << 8 | nr, with _IOC_WRITE = 1 and
# _IOC_READ = 2. The watchdog's are in include/uapi/linux/watchdog.h:
#   WDIOC_KEEPALIVE  = _IOR('W', 5, int)
#   WDIOC_SETTIMEOUT = _IOWR('W', 6, int)
_IOC_WRITE, _IOC_READ = 1, 2


def _ioc(direction: int, kind: str, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (ord(kind) << 8) | nr


WDIOC_KEEPALIVE = _ioc(_IOC_READ, "W", 5, struct.calcsize("i"))  # 0x80045705
WDIOC_SETTIMEOUT = _ioc(_IOC_READ | _IOC_WRITE, "W", 6, struct.calcsize("i"))  # 0xc0045706

WATCHDOG_SYSFS = Path("/sys/class/watchdog")


def rounding_allowance(seconds: int) -> int:
    """How much longer than asked a driver may set the period (its granularity) before it is refused.

    The lease the agent asks for covers the asked period plus this much: a
    longer period could outlast the lease before a hang comes back.
    """
    return max(5, math.ceil(seconds * 0.1))


class WatchdogError(RuntimeError):
    """The watchdog cannot be trusted to end this boot: the runner's fault, found before the jump."""


class Watchdog:
    def __init__(self, device: Path, sysfs: Path = WATCHDOG_SYSFS) -> None:
        self.device = device
        self.sysfs = sysfs
        self.fd: int | None = None

    def _attribute(self, name: str) -> str:
        """A sysfs attribute of this watchdog; "" when there is none (no CONFIG_WATCHDOG_SYSFS, not this driver's)."""
        node = self.device.name if self.device.name != "watchdog" else "watchdog0"
        try:
            return (self.sysfs / node / name).read_text().strip()
        except OSError:
            return ""

    def _number(self, name: str) -> int:
        text = self._attribute(name)
        return int(text) if text.isdigit() else 0

    def plan(self, seconds: float) -> int:
        """The whole seconds to arm for `seconds`, within what the driver says it takes; WatchdogError beyond.

        Called before anything is committed, so a job this watchdog cannot
        cover fails as the runner's (`infra`) without a jump.
        """
        wanted = math.ceil(seconds)
        least, most = self._number("min_timeout"), self._number("max_timeout")
        if most and wanted > most:
            raise WatchdogError(
                f"the watchdog {self.device} counts at most {most} s (its driver's max_timeout) and this boot needs "
                f"{wanted} s: it would reset the machine in the middle of a healthy boot. Use a watchdog with a "
                "longer range (the BMC's IPMI watchdog), or a shorter job"
            )
        return max(wanted, least)

    def arm(self, seconds: int) -> int:
        """Open (which starts it), set `seconds`, feed it: the period the driver set.

        WatchdogError, with the watchdog stopped again, when that period
        cannot end this boot.
        """
        if self.fd is None:
            try:
                self.fd = os.open(self.device, os.O_WRONLY | os.O_CLOEXEC)
            except OSError as error:
                raise WatchdogError(f"cannot open the watchdog {self.device}: {error}") from error
        try:
            # The driver writes back the period it really set (rounded to
            # what its hardware counts, or refused with EINVAL).
            got = self._ioctl(WDIOC_SETTIMEOUT, seconds)
            self.keepalive()
        except OSError as error:
            self.disarm()
            raise WatchdogError(
                f"the watchdog {self.device} refused a {seconds} s timeout ({error}): this boot needs that long"
            ) from error
        problem = ""
        if got < seconds:
            problem = f"it set {got} s when asked for {seconds} s: it would reset the machine in the middle of the boot"
        elif got > seconds + rounding_allowance(seconds):
            problem = (
                f"it set {got} s when asked for {seconds} s: a hang would outlast the lease the service was asked for"
            )
        else:
            # A driver that keeps a longer period going by feeding a shorter
            # hardware counter itself stops feeding it at the jump: what the
            # hardware has left (where the driver can tell) is what counts.
            left = self._number("timeleft")
            if self._attribute("timeleft") and left + 2 < seconds:
                problem = (
                    f"its hardware has {left} s left right after being fed for {seconds} s (the driver feeds a "
                    "shorter counter itself, which stops at the jump)"
                )
        if problem:
            self.disarm()
            raise WatchdogError(f"the watchdog {self.device} cannot end this boot: {problem}")
        return got

    def keepalive(self) -> None:
        if self.fd is not None:
            self._ioctl(WDIOC_KEEPALIVE, 0)

    def _ioctl(self, request: int, value: int) -> int:
        """One of the watchdog's ioctls on an int; the int as the driver left it."""
        assert self.fd is not None
        answer = fcntl.ioctl(self.fd, request, struct.pack("i", value))
        return int(struct.unpack("i", answer)[0])

    def disarm(self) -> None:
        """Stop it: the magic close ('V', then close)."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            os.write(fd, b"V")
        except OSError as error:
            log.warning("could not stop the watchdog %s: %s", self.device, error)
        finally:
            os.close(fd)

    def stop_if_running(self) -> None:
        """Stop a watchdog that may have been left counting (by a jump that never happened).

        One that sysfs says is inactive is left alone: opening it would start it.
        """
        if self.fd is None:
            if self._attribute("state") == "inactive":
                return
            try:
                self.fd = os.open(self.device, os.O_WRONLY | os.O_CLOEXEC)
            except OSError as error:
                log.warning("could not open the watchdog %s to stop it: %s", self.device, error)
                return
        log.info("stopping the watchdog %s in case a jump that never happened left it armed", self.device)
        self.disarm()
