"""The kexec backend: bare metal, the job's kernel booted on the runner machine itself.

For each boot the agent loads the job's kernel with the kperf initramfs
(`kexec -l`), persists the job in flight (the commit callback), arms a
hardware watchdog and jumps (`systemctl kexec`, or sync + `kexec -e`). The
agent goes down with the machine's own kernel. In the kernel under test
kperf init writes its transcript to /dev/pmsg0 as well as to the console and
ends with a reboot (/kperf/end in the initramfs); a panic reboots too
(panic=10), and a hang is ended by the watchdog. Back on the machine's own
kernel the agent starts again, and `resume()` reads what pstore kept in RAM
across the reboot: pmsg-ramoops-0 (init's transcript), console-ramoops-0
(the test kernel's console), dmesg-ramoops-* (the log of a panic). Those
records count only if they name the boot's nonce (kperf.boot= on the test
kernel's command line): a machine that reset without ever jumping holds its
own kernel's records, which say nothing about the kernel under test.

Both kernels must reserve the same RAM for ramoops (memmap=, ramoops.*):
the machine's own command line has it (checked by `check_machine()`), and
the agent puts the same on the test kernel's (docs/runners-bare-metal.md).
"""

from __future__ import annotations

import fcntl
import logging
import os
import platform
import re
import secrets
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ..initramfs import GUEST_BINDIR, job_initramfs
from ..toolchain import compile_static, normalize_arch
from . import (
    BENCHMARK_CMDLINE,
    Backend,
    BootFailure,
    BootJob,
    BootResult,
    CannotResume,
    CommitCallback,
    ConsoleCallback,
    parse_boot,
)

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

# How ramoops splits its RAM (the same on both kernels, or the test kernel's
# records are unreadable on the way back): dmesg records of a panic, the
# kernel's console, init's transcript (pmsg). What is left after the console
# and pmsg goes to dmesg records.
RECORD_SIZE = 0x40000
CONSOLE_SIZE = 0x200000
PMSG_SIZE = 0x800000
RAMOOPS_MIN = CONSOLE_SIZE + PMSG_SIZE + RECORD_SIZE

# How long the jump may take (systemd stopping every service first) before
# the boot is given up as the runner's fault.
JUMP_LIMIT = 300.0
# What a boot may take besides its benchmarks (the machine shutting down for
# the jump, the test kernel coming up, init's reboot), unless
# --kexec-boot-seconds says how long this machine takes. It is both the base
# of a boot's time limit and the watchdog's margin over that limit.
DEFAULT_BOOT_SECONDS = 120.0
DEFAULT_RETURN = 300.0
PSTORE = Path("/sys/fs/pstore")
SYS_MODULE = Path("/sys/module")
WATCHDOG_SYSFS = Path("/sys/class/watchdog")
# The kernel's own account of its command line, early in its log: "Command
# line: ..." on x86_64, "Kernel command line: ..." on arm64.
COMMAND_LINE = re.compile(r"(?:Kernel command|Command) line: (.*)")


class KexecSetupError(RuntimeError):
    """The machine is not set up for the kexec backend; the message says what to do."""


@dataclass(frozen=True)
class Ramoops:
    address: int
    size: int

    @classmethod
    def parse(cls, text: str) -> Ramoops:
        """ADDRESS:SIZE, e.g. 0x30000000:0x1000000 (suffixes K, M, G allowed)."""
        address, sep, size = text.partition(":")
        if not sep:
            raise ValueError(f"--kexec-ramoops wants ADDRESS:SIZE (e.g. 0x30000000:0x1000000), got {text!r}")
        ramoops = cls(_number(address), _number(size))
        if ramoops.size < RAMOOPS_MIN:
            raise ValueError(
                f"--kexec-ramoops: {ramoops.size:#x} bytes is too small; kperf needs at least {RAMOOPS_MIN:#x} "
                f"({CONSOLE_SIZE:#x} console, {PMSG_SIZE:#x} pmsg, {RECORD_SIZE:#x} per panic record)"
            )
        return ramoops

    def cmdline(self, arch: str = "x86_64") -> str:
        """What reserves the RAM and sets ramoops up on a kernel's command line (both kernels).

        x86_64 reserves the RAM with memmap=; arm64 has no memmap=, so there
        the RAM is reserved by the board's device tree (a reserved-memory
        node) or kept out of the kernel's reach with mem=
        (docs/runners-bare-metal.md), and only ramoops' own settings go on
        the line.
        """
        size = f"{self.size >> 20}M" if self.size % (1 << 20) == 0 else f"{self.size:#x}"
        reserve = [f"memmap={size}${self.address:#x}"] if normalize_arch(arch) == "x86_64" else []
        return " ".join(
            [
                *reserve,
                f"ramoops.mem_address={self.address:#x}",
                f"ramoops.mem_size={self.size:#x}",
                f"ramoops.record_size={RECORD_SIZE:#x}",
                f"ramoops.console_size={CONSOLE_SIZE:#x}",
                f"ramoops.pmsg_size={PMSG_SIZE:#x}",
                "ramoops.ecc=0",
            ]
        )


def _number(text: str) -> int:
    text = text.strip()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    if scale != 1:
        text = text[:-1]
    try:
        return int(text, 0) * scale
    except ValueError:
        raise ValueError(f"--kexec-ramoops: {text!r} is not a number (0x30000000, 16M)") from None


def find_kexec() -> str | None:
    for candidate in (shutil.which("kexec"), "/usr/sbin/kexec", "/sbin/kexec"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def check_machine(
    ramoops: Ramoops, sys_module: Path = SYS_MODULE, root_needed: bool = True, arch: str = "x86_64"
) -> str:
    """The kexec binary's path, or KexecSetupError saying what the machine lacks."""
    kexec = find_kexec()
    if kexec is None:
        raise KexecSetupError("the kexec backend needs kexec-tools: apt-get install kexec-tools")
    if root_needed and os.geteuid() != 0:
        raise KexecSetupError("the kexec backend loads and boots kernels and arms the watchdog: run the agent as root")
    check_ramoops(ramoops, sys_module, arch)
    return kexec


def check_ramoops(ramoops: Ramoops, sys_module: Path = SYS_MODULE, arch: str = "x86_64") -> None:
    """KexecSetupError unless the running kernel has ramoops on the RAM --kexec-ramoops names."""
    want = f"add to the machine's kernel command line: {ramoops.cmdline(arch)}, and reboot"
    params = sys_module / "ramoops" / "parameters"
    try:
        address = int((params / "mem_address").read_text().strip(), 0)
        size = int((params / "mem_size").read_text().strip(), 0)
    except (OSError, ValueError):
        raise KexecSetupError(
            f"ramoops is not loaded on this machine ({params} is missing): the test kernel's records would "
            f"be lost on the way back; {want}"
        ) from None
    if (address, size) != (ramoops.address, ramoops.size):
        raise KexecSetupError(
            f"ramoops here uses {size:#x} bytes at {address:#x} but --kexec-ramoops says {ramoops.size:#x} at "
            f"{ramoops.address:#x}: both kernels must use the same RAM; {want}"
        )


def systemd_is_init() -> bool:
    return Path("/run/systemd/system").is_dir()


class KexecBackend(Backend):
    name = "kexec"
    bindir = GUEST_BINDIR

    def __init__(
        self,
        arch: str,
        state_dir: Path,
        ramoops: Ramoops,
        cmdline: str = "",
        watchdog: Path | None = None,
        watchdog_timeout: int = 120,
        boot_seconds: float = DEFAULT_BOOT_SECONDS,
        reboot: str = "auto",
        return_timeout: float = DEFAULT_RETURN,
        pstore: Path = PSTORE,
        kexec: str = "kexec",
        watchdog_sysfs: Path = WATCHDOG_SYSFS,
    ) -> None:
        if reboot not in ("auto", "systemctl", "kexec"):
            raise ValueError(f"--kexec-reboot must be auto, systemctl or kexec, not {reboot!r}")
        self.arch = normalize_arch(arch)
        self.state_dir = state_dir
        self.ramoops = ramoops
        self.extra_cmdline = cmdline
        self.watchdog = watchdog
        self.watchdog_timeout = watchdog_timeout
        self.boot_seconds = boot_seconds
        self.reboot = reboot
        self.return_timeout = return_timeout
        self.pstore = pstore
        self.kexec = kexec
        self.watchdog_sysfs = watchdog_sysfs
        self._watchdog_fd: int | None = None

    def clocks(self) -> tuple[str, ...]:
        # Real hardware, real time: there is no instruction clock here.
        return ("wall",)

    def timeout(self, expected_seconds: float, commands: int) -> float:
        # A server's firmware-free kexec boot takes seconds, a board's
        # shutdown for the jump can take a minute: the machine's own figure,
        # not QEMU's, so that a hang is ended as soon as it can be told apart.
        return self.boot_seconds + 2.0 * expected_seconds + 5.0 * commands

    def kernel_cmdline(self, extra: str = "", boot: str = "") -> str:
        """The test kernel's command line; boot is the boot's nonce (kperf.boot=), from start()."""
        # The job's own command line comes last: its panic= (or anything
        # else) wins over kperf's.
        parts = [
            self.extra_cmdline,
            BENCHMARK_CMDLINE,
            "panic=10",
            "kperf.end=reboot",
            # Which boot this is: resume() finds it in what pstore kept, or
            # the machine came back without ever running the kernel under test.
            f"kperf.boot={boot}" if boot else "",
            # A kernel under test with the board's watchdog driver built in
            # would otherwise find the watchdog running (armed for the jump)
            # and keep pinging it until userspace opens it, which kperf init
            # never does: a hang would last forever.
            "watchdog.handle_boot_enabled=0",
            self.ramoops.cmdline(self.arch),
            extra,
        ]
        return " ".join(part.strip() for part in parts if part.strip())

    # -- start: load, persist, arm, jump -----------------------------------

    def start(
        self,
        job: BootJob,
        kernel: Path,
        commit: CommitCallback,
        on_console: ConsoleCallback | None = None,
    ) -> dict[str, Any]:
        self.check_clock(job.clock)
        if not kernel.is_file():
            raise RuntimeError(f"kernel image {kernel} does not exist")
        work = self.state_dir / "kexec"
        work.mkdir(parents=True, exist_ok=True)
        initrd = work / "initrd.gz"
        init = compile_static("init.c", self.arch, self.state_dir).read_bytes()
        binaries = {name: path.read_bytes() for name, path in job.binaries.items()}
        # init reboots at its end, and at any failure before it: a machine
        # that powered itself off would stay off.
        job_initramfs(init, binaries, job.commands, end="reboot", thp=job.thp).write(initrd)
        boot = secrets.token_hex(16)
        cmdline = self.kernel_cmdline(job.cmdline, boot)
        self.load(kernel, initrd, cmdline)
        # Records left from before belong to no boot of ours.
        stale = self.take_records()
        if stale:
            log.warning("removed stale pstore records from before this boot: %s", ", ".join(sorted(stale)))
        state = {
            "started": time.time(),
            "timeout": job.timeout,
            "cmdline": cmdline,
            "boot": boot,
            "boot_id": _boot_id(),
            "machine_hostname": platform.node(),
            "machine_kernel_release": os.uname().release,
        }
        # Persisted (and the lease extended) before the watchdog is armed:
        # nothing may stop the agent between arming and jumping.
        commit(state, job.timeout + self.return_timeout)
        self.arm_watchdog(job.timeout)
        # systemd stops the agent on the way to the kexec: its SIGTERM must
        # end the agent at once (everything is persisted), not after the
        # current boot as the agent's own handler would have it, which would
        # hold the jump up for systemd's whole stop timeout.
        previous = _sigterm(signal.SIG_DFL)
        try:
            self.jump()
            self._wait_for_jump(on_console)
        except BaseException:
            # No jump after all (systemctl refusing, a time out, Ctrl-C):
            # the machine must not be reset under the agent's feet.
            _sigterm(previous)
            self.disarm_watchdog()
            raise

    def load(self, kernel: Path, initrd: Path, cmdline: str) -> None:
        argv = [self.kexec, "-l", str(kernel), f"--initrd={initrd}", f"--command-line={cmdline}"]
        log.info("loading %s: %s", kernel, cmdline)
        run = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
        if run.returncode == 0:
            return
        said = (run.stderr or run.stdout).strip()
        # kexec-tools' words for an image it does not know how to boot.
        if any(word in said for word in ("Cannot determine the file type", "Invalid kernel", "not a bzImage")):
            raise BootFailure(f"kexec -l refused the kernel image: {said[-300:]}", said)
        raise RuntimeError(f"kexec -l failed with status {run.returncode}: {said[-300:]}")

    def arm_watchdog(self, boot_timeout: float) -> None:
        """Open the watchdog and give it long enough for the whole boot; it is never closed cleanly.

        Closing without the magic 'V' leaves it counting: if the test kernel
        hangs, nothing pings it, and it resets the machine back to its own
        kernel (which needs watchdog.stop_on_reboot=0 so the kexec itself
        does not stop it).
        """
        if self.watchdog is None:
            return
        seconds = max(self.watchdog_timeout, int(boot_timeout + self.boot_seconds))
        if self._watchdog_fd is None:
            try:
                self._watchdog_fd = os.open(self.watchdog, os.O_WRONLY | os.O_CLOEXEC)
            except OSError as error:
                raise RuntimeError(f"cannot open the watchdog {self.watchdog}: {error}") from error
        try:
            fcntl.ioctl(self._watchdog_fd, WDIOC_SETTIMEOUT, struct.pack("i", seconds))
            fcntl.ioctl(self._watchdog_fd, WDIOC_KEEPALIVE, struct.pack("i", 0))
        except OSError as error:
            raise RuntimeError(
                f"the watchdog {self.watchdog} refused a {seconds} s timeout ({error}); "
                "a shorter --kexec-watchdog-timeout or a shorter job is needed"
            ) from error

    def disarm_watchdog(self) -> None:
        """Stop the watchdog: the magic close ('V', then close)."""
        if self._watchdog_fd is None:
            return
        fd, self._watchdog_fd = self._watchdog_fd, None
        try:
            os.write(fd, b"V")
        except OSError as error:
            log.warning("could not stop the watchdog %s: %s", self.watchdog, error)
        finally:
            os.close(fd)

    def stop_watchdog(self) -> None:
        """Stop a watchdog that may have been left counting: open it, magic close.

        At agent start-up and when the agent finds it never jumped: the
        watchdog armed for a jump that did not happen (the agent died between
        arming and jumping) would reset the machine in the middle of the next
        job. The agent arms it again right before each jump. A watchdog sysfs
        says is inactive is left alone: opening it would start it.
        """
        if self.watchdog is None:
            return
        if self._watchdog_fd is None:
            name = self.watchdog.name if self.watchdog.name != "watchdog" else "watchdog0"
            try:
                state = (self.watchdog_sysfs / name / "state").read_text().strip()
            except OSError:
                state = ""  # no CONFIG_WATCHDOG_SYSFS: it may be running
            if state == "inactive":
                return
            try:
                self._watchdog_fd = os.open(self.watchdog, os.O_WRONLY | os.O_CLOEXEC)
            except OSError as error:
                log.warning("could not open the watchdog %s to stop it: %s", self.watchdog, error)
                return
        log.info("stopping the watchdog %s in case a jump that never happened left it armed", self.watchdog)
        self.disarm_watchdog()

    def jump(self) -> None:
        how = self.reboot
        if how == "auto":
            how = "systemctl" if systemd_is_init() else "kexec"
        log.info("jumping into the kernel under test (%s)", how)
        if how == "systemctl":
            argv = ["systemctl", "kexec"]
        else:
            os.sync()
            argv = [self.kexec, "-e"]
        run = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed with status {run.returncode}: {run.stderr.strip()[-300:]}")

    def _wait_for_jump(self, on_console: ConsoleCallback | None) -> NoReturn:
        deadline = time.monotonic() + JUMP_LIMIT
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if self._watchdog_fd is not None:
                # Until the jump the machine is fine: keep the watchdog from firing.
                fcntl.ioctl(self._watchdog_fd, WDIOC_KEEPALIVE, struct.pack("i", 0))
            if on_console is not None:
                on_console("")
        raise RuntimeError(f"the machine did not kexec into the kernel under test within {JUMP_LIMIT:.0f} s")

    # -- resume: what pstore kept ------------------------------------------

    def take_records(self) -> dict[str, str]:
        """Every pstore record by file name, removed from pstore (which frees it in ramoops)."""
        records: dict[str, str] = {}
        try:
            entries = sorted(self.pstore.iterdir())
        except OSError:
            return records
        for entry in entries:
            try:
                records[entry.name] = entry.read_bytes().decode("utf-8", "replace").replace("\r", "")
                entry.unlink()
            except OSError as error:
                log.warning("pstore record %s: %s", entry, error)
        return records

    def resume(self, job: BootJob, state: dict[str, Any]) -> BootResult:
        if not state or "started" not in state:
            raise CannotResume("the kexec backend has no record of the boot it started")
        if state.get("boot_id") and state.get("boot_id") == _boot_id():
            # The watchdog may have been armed already: it must not reset the machine mid next job.
            self.stop_watchdog()
            raise CannotResume("the machine never left its own kernel: the agent stopped before the kexec")
        seconds = max(0.0, time.time() - float(state["started"]))
        records = self.take_records()
        console = console_from_records(records)
        if not records:
            raise RuntimeError(
                f"the machine came back after {seconds:.0f} s and {self.pstore} is empty: nothing is known of "
                "the boot. Is ramoops reserving the same RAM on both command lines, and is "
                "systemd-pstore.service masked (it moves the records away)?"
            )
        # A state from before boots had a nonce has nothing to check.
        boot = str(state.get("boot") or "")
        if boot and not booted_under_test(records, boot):
            raise RuntimeError(
                f"the machine came back after {seconds:.0f} s without having booted the kernel under test "
                f"(no kperf.boot={boot} in what pstore kept): pstore held {', '.join(sorted(records))}, the "
                "machine's own kernel's records. The jump never happened (systemctl kexec failing after the "
                "agent was stopped, or the machine's kernel crashing on the way down) and the watchdog or a "
                "crash reset the machine; see the machine's journal of the previous boot"
            )
        details = {
            "clock": "wall",
            "machine_hostname": state.get("machine_hostname", platform.node()),
            "machine_kernel_release": state.get("machine_kernel_release", os.uname().release),
        }
        try:
            record = parse_boot(console, job.commands)
        except BootFailure as failure:
            raise BootFailure(explain_return(failure.message, console, seconds), console) from None
        return BootResult(console, record.environment, record.commands, seconds, True, details)


def booted_under_test(records: dict[str, str], boot: str) -> bool:
    """Whether pstore's records come from the boot with nonce boot: its command line has kperf.boot=<boot>.

    init's transcript (pmsg) names the command line in KPERF-ENV
    kernel_cmdline; the kernel's console and panic logs in "Command line:".
    Only those lines count: the machine's own log may mention the nonce
    elsewhere (the agent logs the command line it loads).
    """
    word = f"kperf.boot={boot}"
    for name, text in records.items():
        for line in text.splitlines():
            if name.startswith("pmsg-"):
                _, marker, rest = line.partition("KPERF-ENV kernel_cmdline=")
                found = rest if marker else None
            else:
                match = COMMAND_LINE.search(line)
                found = match.group(1) if match else None
            if found is not None and word in found.split():
                return True
    return False


def console_from_records(records: dict[str, str]) -> str:
    """Init's transcript, then the test kernel's console, then any panic log: the boot's console."""
    transcript = "".join(text for name, text in sorted(records.items()) if name.startswith("pmsg-"))
    kernel = "".join(text for name, text in sorted(records.items()) if name.startswith("console-"))
    panics = [text for name, text in sorted(records.items()) if name.startswith("dmesg-")]
    parts = [transcript]
    if kernel:
        parts.append(f"--- kperf: the kernel's console (pstore) ---\n{kernel}")
    for text in panics:
        parts.append(f"--- kperf: the kernel's log at the crash (pstore) ---\n{text}")
    return "\n".join(part.rstrip("\n") + "\n" for part in parts if part)


def explain_return(message: str, console: str, seconds: float) -> str:
    if "Kernel panic" in console or "KPERF-ERROR" in console:
        return f"came back without KPERF-DONE after {seconds:.0f} s: {message}"
    return (
        f"came back without KPERF-DONE after {seconds:.0f} s: hang ended by the watchdog "
        f"(no panic was recorded): {message}"
    )


def _sigterm(handler: Any) -> Any:
    """Set SIGTERM's handler; the one before (None where signals cannot be set: not the main thread)."""
    if handler is None:
        return None
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
