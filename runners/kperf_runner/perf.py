"""Hardware counters around a command on this machine, as init counts them in the guest.

`kperf-runner bench` runs benchmarks natively; where the CPU's PMU is
reachable it reads instructions and cycles across every command through
perf_event_open(2), the same way csrc/init_tuning.h does: the events are
opened on this process disabled, with inherit (the command and its
children count) and enable_on_exec (counting starts at the command's exec,
so this process's own work stays out). The counts of a child are added to
this process's events when it exits, so reading after the command ended
gives the command's total.

Standard library only: the system call goes through ctypes. Where it fails
(no PMU, as in most virtual machines; a kernel without perf events;
perf_event_paranoid forbidding even user-space counting) the reason is
kept and the counts are simply absent.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# perf_event_open's number per architecture (the generic table's 241 is arm64's).
_SYSCALL = {"x86_64": 298, "aarch64": 241, "arm64": 241}
_TYPE_HARDWARE, _TYPE_SOFTWARE = 0, 1
_FORMAT_TIMES = 1 | 2  # TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING
# attr flag bits: disabled, inherit, exclude_kernel, exclude_hv, enable_on_exec
_DISABLED, _INHERIT, _EXCLUDE_KERNEL, _EXCLUDE_HV, _ENABLE_ON_EXEC = 1, 2, 1 << 5, 1 << 6, 1 << 12
_ATTR_SIZE = 64  # PERF_ATTR_SIZE_VER0: every later kernel takes it
_FD_CLOEXEC = 8
# (name, type, config): what is counted, as init counts it.
HARDWARE = (("instructions", _TYPE_HARDWARE, 1), ("cycles", _TYPE_HARDWARE, 0))
# The kernel's own task clock and page faults: the same counting on a machine
# without a PMU, which is how the counting itself is checked there.
SOFTWARE = (("task_clock_ns", _TYPE_SOFTWARE, 1), ("page_faults", _TYPE_SOFTWARE, 2))


def _attr(kind: int, config: int, exclude_kernel: bool) -> bytes:
    flags = _DISABLED | _INHERIT | _EXCLUDE_HV | _ENABLE_ON_EXEC | (_EXCLUDE_KERNEL if exclude_kernel else 0)
    head = struct.pack("=IIQQQQQ", kind, _ATTR_SIZE, config, 0, 0, _FORMAT_TIMES, flags)
    return head + bytes(_ATTR_SIZE - len(head))


def _open(kind: int, config: int, exclude_kernel: bool) -> int:
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"perf_event_open's system call number on {platform.machine()} is not known")
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(_attr(kind, config, exclude_kernel), _ATTR_SIZE)
    fd = libc.syscall(number, attr, 0, -1, -1, _FD_CLOEXEC)
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


class CommandCounters:
    """Open before starting a command, read() after it ended; one per command."""

    def __init__(self, events: tuple[tuple[str, int, int], ...] = HARDWARE) -> None:
        self.events = events
        self.fds: list[tuple[str, int]] = []
        self.mode = "unsupported"
        self.reason = ""
        for exclude_kernel in (False, True):
            try:
                for name, kind, config in events:
                    self.fds.append((name, _open(kind, config, exclude_kernel)))
            except OSError as error:
                self.close()
                self.reason = error.strerror or str(error)
                # Only a permission problem is worth a second, user-only try.
                if error.errno not in (errno.EACCES, errno.EPERM):
                    return
                continue
            self.mode = "user" if exclude_kernel else "user+kernel"
            return

    @property
    def description(self) -> str:
        """The environment fact init records as perf_counters."""
        if not self.fds and self.mode == "unsupported":
            return f"unsupported ({self.reason})"
        return f"{','.join(name for name, _, _ in self.events)} {self.mode}"

    def read(self) -> dict[str, int] | None:
        """{name: count} for the command that ran, or None when nothing could count."""
        if not self.fds:
            return None
        out = {}
        for name, fd in self.fds:
            data = os.read(fd, 24)
            if len(data) != 24:
                continue
            value, enabled, running = struct.unpack("=QQQ", data)
            if running == 0:
                continue  # never on the PMU: no count rather than 0
            # Multiplexed with other events: scaled to the whole run, as perf stat does.
            out[name] = value * enabled // running if running < enabled else value
        self.close()
        return out

    def close(self) -> None:
        for _, fd in self.fds:
            os.close(fd)
        self.fds = []
