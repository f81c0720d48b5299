"""The kexec backend: bare metal, the job's kernel booted on the runner machine itself.

For each boot the agent loads the job's kernel with the kperf initramfs
(`kexec -l`), persists the job in flight (the commit callback), arms a
hardware watchdog and jumps (`systemctl kexec`, or sync + `kexec -e`). The
agent goes down with the machine's own kernel. In the kernel under test
kperf init writes its transcript to /dev/pmsg0 as well as to the console and
ends with a reboot (/kperf/end in the initramfs); a panic reboots too
(panic=10), and a hang is ended by the watchdog. Back on the machine's own
kernel the agent starts again, and `resume()` reads what pstore kept in RAM
across the reboot (backends/pstore.py): pmsg-ramoops-0 (init's transcript),
console-ramoops-0 (the test kernel's console), dmesg-ramoops-* (the log of
a panic, or the machine's own kernel's as it went down for the jump). The
test kernel's records count only if they name the boot's nonce (kperf.boot=
on its command line): a machine that reset without ever jumping holds its
own kernel's records, which say nothing about the kernel under test. The
records are copied to the state directory as soon as ramoops hands them
over (`open_pstore()`, at the agent's start) and stay in pstore until the
agent has saved what it made of them (`release()`), so a reset in between
loses nothing.

Both kernels must reserve the same RAM for ramoops (memmap=, ramoops.*):
the machine's own ramoops has it (checked by `check_ramoops()`), and
the agent puts the same on the test kernel's (docs/runners-bare-metal.md).
"""

from __future__ import annotations

import logging
import os
import platform
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from .. import inflight
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
from .pstore import (
    JUMP_MARK,
    Snapshot,
    booted_under_test,
    clear_records,
    console_from_records,
    died_early,
    explain_return,
    forget,
    handover,
    load_snapshot,
    note_reading,
    read_records,
    reading_note,
    save_snapshot,
    split_records,
)
from .watchdog import WATCHDOG_SYSFS, Watchdog, rounding_allowance

log = logging.getLogger(__name__)

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
KMSG = Path("/dev/kmsg")
# ramoops' max_reason on the machine's own kernel from which it dumps its log
# at a shutdown or kexec (KMSG_DUMP_SHUTDOWN in include/linux/kmsg_dump.h):
# the evidence that it handed over to the kernel under test.
MAX_REASON_SHUTDOWN = 4


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

    def module_options(self) -> list[str]:
        """ramoops' options for the machine's own kernel when the agent loads it (modprobe ramoops ...)."""
        return [
            f"mem_address={self.address:#x}",
            f"mem_size={self.size:#x}",
            f"record_size={RECORD_SIZE:#x}",
            f"console_size={CONSOLE_SIZE:#x}",
            f"pmsg_size={PMSG_SIZE:#x}",
            "ecc=0",
            f"max_reason={MAX_REASON_SHUTDOWN}",
        ]

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


def check_tools(root_needed: bool = True) -> str:
    """The kexec binary's path, or KexecSetupError saying what the machine lacks."""
    kexec = find_kexec()
    if kexec is None:
        raise KexecSetupError("the kexec backend needs kexec-tools: apt-get install kexec-tools")
    if root_needed and os.geteuid() != 0:
        raise KexecSetupError("the kexec backend loads and boots kernels and arms the watchdog: run the agent as root")
    return kexec


def check_ramoops(ramoops: Ramoops, sys_module: Path = SYS_MODULE, arch: str = "x86_64") -> None:
    """KexecSetupError unless the running kernel has ramoops on the RAM --kexec-ramoops names."""
    want = f"add to the machine's kernel command line: {ramoops.cmdline(arch)} ramoops.max_reason=4, and reboot"
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


def handover_warning(sys_module: Path = SYS_MODULE) -> str:
    """What to change when the machine's ramoops does not dump its log at a kexec; "" when it does.

    Not fatal: without that dump everything works, except that a kernel
    under test that dies before its own ramoops starts cannot be told from
    a machine that never jumped, and is reported as the runner's (`infra`).
    """
    try:
        reason = int((sys_module / "ramoops" / "parameters" / "max_reason").read_text().strip())
    except (OSError, ValueError):
        return ""  # a kernel from before max_reason: nothing to set
    if reason >= MAX_REASON_SHUTDOWN:
        return ""
    return (
        f"ramoops here has max_reason={reason}: add ramoops.max_reason={MAX_REASON_SHUTDOWN} to this machine's "
        "kernel command line, or a kernel under test that dies before its ramoops starts is reported as infra "
        "instead of boot (docs/runners-bare-metal.md)"
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
        boot_seconds: float = DEFAULT_BOOT_SECONDS,
        reboot: str = "auto",
        return_timeout: float = DEFAULT_RETURN,
        pstore: Path = PSTORE,
        kexec: str = "kexec",
        watchdog_sysfs: Path = WATCHDOG_SYSFS,
        kmsg: Path = KMSG,
        sys_module: Path = SYS_MODULE,
    ) -> None:
        if reboot not in ("auto", "systemctl", "kexec"):
            raise ValueError(f"--kexec-reboot must be auto, systemctl or kexec, not {reboot!r}")
        self.arch = normalize_arch(arch)
        self.state_dir = state_dir
        self.ramoops = ramoops
        self.extra_cmdline = cmdline
        self.watchdog = watchdog
        self.boot_seconds = boot_seconds
        self.reboot = reboot
        self.return_timeout = return_timeout
        self.pstore = pstore
        self.kexec = kexec
        self.kmsg = kmsg
        self.sys_module = sys_module
        # The backend's files: the job's initramfs, pstore's copy and note.
        self.work = state_dir / "kexec"
        self.watchdog_driver = Watchdog(watchdog, watchdog_sysfs) if watchdog is not None else None

    def clocks(self) -> tuple[str, ...]:
        # Real hardware, real time: there is no instruction clock here.
        return ("wall",)

    def timeout(self, expected_seconds: float, commands: int, clock: str = "wall") -> float:
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
        # job.vcpus and job.numa_nodes are not looked at: the kernel under
        # test gets all of this machine's CPUs and nodes, the machine class's.
        if not kernel.is_file():
            raise RuntimeError(f"kernel image {kernel} does not exist")
        self.work.mkdir(parents=True, exist_ok=True)
        initrd = self.work / "initrd.gz"
        init = compile_static("init.c", self.arch, self.state_dir).read_bytes()
        binaries = {name: path.read_bytes() for name, path in job.binaries.items()}
        # init reboots at its end, and at any failure before it: a machine
        # that powered itself off would stay off.
        job_initramfs(init, binaries, job.commands, end="reboot", thp=job.thp).write(initrd)
        boot = secrets.token_hex(16)
        cmdline = self.kernel_cmdline(job.cmdline, boot)
        self.load(kernel, initrd, cmdline)
        # The boot's time limit sets the watchdog (the driver having its
        # say), and a job it cannot cover fails here, before anything is
        # committed.
        watchdog = self.watchdog_seconds(job.timeout)
        # Records left from before belong to no boot of ours: every earlier
        # boot's outcome is saved already (the agent starts a boot only
        # then). Cleared before the jump, so anything pstore holds when the
        # machine is back was written after this point.
        if not self.ramoops_loaded():
            raise RuntimeError("ramoops is not running on this machine: the boot's records would be lost")
        stale = clear_records(self.pstore)
        if stale:
            log.warning("removed stale pstore records from before this boot: %s", ", ".join(stale))
        forget(self.work)
        state = {
            "started": time.time(),
            "timeout": job.timeout,
            "watchdog_seconds": watchdog,
            "cmdline": cmdline,
            "boot": boot,
            "boot_id": self.boot_id(),
            "machine_hostname": platform.node(),
            "machine_kernel_release": os.uname().release,
        }
        # The machine is away until the boot ends or the watchdog ends it,
        # and then on its way back. The period's rounding by the driver
        # (checked when armed) is included.
        away = max(job.timeout, watchdog + rounding_allowance(watchdog) if watchdog else 0.0)
        # Persisted (and the lease extended) before the watchdog is armed:
        # nothing may stop the agent between arming and jumping.
        commit(state, away + self.return_timeout)
        self.arm_watchdog(watchdog)
        # systemd stops the agent on the way to the kexec: its SIGTERM must
        # end the agent at once (everything is persisted), not after the
        # current boot as the agent's own handler would have it, which would
        # hold the jump up for systemd's whole stop timeout.
        previous = _sigterm(signal.SIG_DFL)
        try:
            self.mark_jump(boot)
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

    def watchdog_seconds(self, boot_timeout: float) -> int:
        """The watchdog's period for a boot with this time limit (0: no watchdog); WatchdogError if it cannot.

        The limit plus --kexec-boot-seconds again, so that a boot that is
        slow but healthy is never cut: the watchdog is the last resort.
        """
        if self.watchdog_driver is None:
            return 0
        return self.watchdog_driver.plan(boot_timeout + self.boot_seconds)

    def arm_watchdog(self, seconds: float) -> None:
        """Start the watchdog for `seconds`; it is never closed cleanly.

        Closing without the magic 'V' leaves it counting: if the test kernel
        hangs, nothing feeds it, and it resets the machine back to its own
        kernel (which needs watchdog.stop_on_reboot=0 so the kexec itself
        does not stop it).
        """
        if self.watchdog_driver is None or seconds <= 0:
            return
        got = self.watchdog_driver.arm(int(seconds))
        log.info("watchdog %s armed for %d s", self.watchdog, got)

    def disarm_watchdog(self) -> None:
        if self.watchdog_driver is not None:
            self.watchdog_driver.disarm()

    def stop_watchdog(self) -> None:
        """Stop a watchdog that may have been left counting.

        At agent start-up and when the agent finds it never jumped: the
        watchdog armed for a jump that did not happen (the agent died between
        arming and jumping) would reset the machine in the middle of the next
        job. The agent arms it again right before each jump.
        """
        if self.watchdog_driver is not None:
            self.watchdog_driver.stop_if_running()

    def mark_jump(self, boot: str) -> None:
        """Say in the kernel log which boot the machine jumps into: its shutdown dump then names it."""
        try:
            fd = os.open(self.kmsg, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except OSError as error:
            log.warning("could not write to %s: %s", self.kmsg, error)
            return
        try:
            os.write(fd, f"<5>{JUMP_MARK}{boot}\n".encode())
        except OSError as error:
            log.warning("could not write to %s: %s", self.kmsg, error)
        finally:
            os.close(fd)

    def boot_id(self) -> str:
        """This boot of the machine's own kernel (changes at every boot)."""
        try:
            return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            return ""

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
            if self.watchdog_driver is not None:
                # Until the jump the machine is fine: keep the watchdog from firing.
                self.watchdog_driver.keepalive()
            if on_console is not None:
                on_console("")
        raise RuntimeError(f"the machine did not kexec into the kernel under test within {JUMP_LIMIT:.0f} s")

    # -- resume: what pstore kept ------------------------------------------

    def ramoops_loaded(self) -> bool:
        return (self.sys_module / "ramoops" / "parameters" / "mem_address").exists()

    def load_ramoops(self) -> None:
        """modprobe ramoops on --kexec-ramoops' RAM; KexecSetupError when it cannot be."""
        argv = ["modprobe", "ramoops", *self.ramoops.module_options()]
        run = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
        if run.returncode != 0:
            raise KexecSetupError(
                f"{' '.join(argv)} failed ({(run.stderr or run.stdout).strip()[-300:]}): this machine's kernel "
                "needs ramoops (CONFIG_PSTORE_RAM), and the RAM reserved with memmap= (docs/runners-bare-metal.md)"
            )
        log.info("loaded ramoops: %s", " ".join(argv[2:]))

    def open_pstore(self) -> None:
        """At the agent's start: start ramoops if need be, keeping first what it hands over of a boot in flight.

        Starting ramoops empties the console and pmsg zones into pstore's
        files, for this boot of the machine only: the records of a boot
        under way (the job in flight) are copied to the state directory at
        once, and a note says beforehand that this boot is the one taking them.
        """
        record = inflight.load(self.state_dir)
        state = record.state if record is not None and record.backend == self.name and record.under_way else {}
        boot = str(state.get("boot") or "")
        if boot and state.get("boot_id") != self.boot_id():
            if self.ramoops_loaded() and reading_note(self.work).get("boot_id") != self.boot_id():
                log.warning(
                    "ramoops was started before the agent (built in, or in modules-load.d): a reset of this "
                    "boot before now would have lost the boot's records unnoticed; let the agent load it"
                )
            self._records_of(boot, start_ramoops=True)
        # Running in any case: each jump clears what is left in it first.
        if not self.ramoops_loaded():
            self.load_ramoops()

    def _records_of(self, boot: str, start_ramoops: bool = False) -> Snapshot:
        """What pstore held of boot `boot` when first read: the copy if there is one, else read (and copied) now."""
        kept = load_snapshot(self.work, boot)
        if kept is not None:
            return kept
        note = reading_note(self.work)
        lost = note.get("boot") == boot and note.get("boot_id") != self.boot_id()
        if note.get("boot") != boot:
            note_reading(self.work, boot, self.boot_id())
        if start_ramoops and not self.ramoops_loaded():
            self.load_ramoops()
        snapshot = Snapshot(read_records(self.pstore), lost)
        save_snapshot(self.work, boot, snapshot)
        return snapshot

    def resume(self, job: BootJob, state: dict[str, Any]) -> BootResult:
        if not state or "started" not in state:
            raise CannotResume("the kexec backend has no record of the boot it started")
        if state.get("boot_id") and state.get("boot_id") == self.boot_id():
            # The watchdog may have been armed already: it must not reset the machine mid next job.
            self.stop_watchdog()
            raise CannotResume("the machine never left its own kernel: the agent stopped before the kexec")
        seconds = max(0.0, time.time() - float(state["started"]))
        # A state from before boots had a nonce has nothing to check.
        boot = str(state.get("boot") or "")
        snapshot = self._records_of(boot) if boot else Snapshot(read_records(self.pstore), False)
        records = snapshot.records
        kernels, own = split_records(records)
        if boot and not booted_under_test(kernels, boot):
            if snapshot.lost:
                raise RuntimeError(
                    f"the machine came back after {seconds:.0f} s, and a boot of its own kernel took the boot's "
                    "records out of ramoops and was reset before the agent could keep them: what the kernel "
                    f"under test left is lost (pstore now holds {', '.join(sorted(records)) or 'nothing'})"
                )
            evidence = handover(own, boot)
            if evidence is not None:
                # The machine's own kernel handed over, and nothing came
                # from the kernel under test: it died before its ramoops.
                message, text = died_early(seconds, boot, evidence, kernels)
                raise BootFailure(message, text)
            if records:
                raise RuntimeError(
                    f"the machine came back after {seconds:.0f} s without having booted the kernel under test "
                    f"(no kperf.boot={boot} in what pstore kept, and no kexec in the machine's own shutdown log): "
                    f"pstore held {', '.join(sorted(records))}, the machine's own kernel's records. The jump never "
                    "happened (systemctl kexec failing after the agent was stopped, or the machine's kernel "
                    "crashing on the way down) and the watchdog or a crash reset the machine; see the machine's "
                    "journal of the previous boot"
                )
        if not kernels:
            raise RuntimeError(
                f"the machine came back after {seconds:.0f} s and {self.pstore} has nothing of the boot: nothing "
                "is known of it. Is ramoops reserving the same RAM on both command lines (and dumping at "
                f"shutdown: ramoops.max_reason={MAX_REASON_SHUTDOWN}), does this machine's RAM survive a reset, "
                "and is systemd-pstore.service masked (it moves the records away)?"
            )
        console = console_from_records(kernels)
        details = {
            "clock": "wall",
            "machine_hostname": state.get("machine_hostname", platform.node()),
            "machine_kernel_release": state.get("machine_kernel_release", os.uname().release),
        }
        try:
            record = parse_boot(console, job.commands)
        except BootFailure as failure:
            watchdog = int(state.get("watchdog_seconds") or 0)
            raise BootFailure(explain_return(failure.message, console, seconds, watchdog), console) from None
        return BootResult(console, record.environment, record.commands, seconds, True, details)

    def release(self) -> None:
        """What resume() read is saved: pstore's records go (which frees their RAM in ramoops), and the copy."""
        removed = clear_records(self.pstore)
        if removed:
            log.info("cleared pstore: %s", ", ".join(removed))
        forget(self.work)


def _sigterm(handler: Any) -> Any:
    """Set SIGTERM's handler; the one before (None where signals cannot be set: not the main thread)."""
    if handler is None:
        return None
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None
