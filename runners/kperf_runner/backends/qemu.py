"""The qemu backend: boot the job's kernel under QEMU with a kperf initramfs.

The initramfs holds kperf's init (csrc/init.c), the benchmark binaries and
the job file; everything comes back over the serial console, which QEMU
writes to its stdout (-nographic). KVM is used when /dev/kvm works and the
guest arch is the host's; TCG otherwise (and in CI).
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import logging
import math
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ..initramfs import GUEST_BINDIR, job_initramfs
from ..toolchain import compile_static, host_arch, normalize_arch
from . import BENCHMARK_CMDLINE, Backend, BootFailure, BootJob, BootResult, ConsoleCallback, parse_boot
from .qemu_version import QEMU_BINARY, QEMU_PACKAGE, icount_smp_refusal, qemu_version

log = logging.getLogger(__name__)

KVM_GET_API_VERSION = 0xAE00
KVM_API_VERSION = 12

# Once init has printed KPERF-DONE it only syncs and powers off.
POWER_OFF_GRACE = 30.0

_CONSOLE = {"x86_64": "ttyS0", "arm64": "ttyAMA0"}

# QEMU's instruction clock: with icount the guest's clocks advance by 2^shift
# ns per executed instruction (shift=0: 1 ns each), whatever the host is
# doing, and sleep=off skips idle time instead of waiting for the host's
# clock. A benchmark timed with the guest's CLOCK_MONOTONIC then counts
# instructions per operation. Only TCG has it: KVM runs the guest on the
# host CPU, whose clock is real time.
ICOUNT = "shift=0,sleep=off"
# The guest's RTC under the instruction clock: a fixed date that advances
# with the guest's own clock. With the host's date (QEMU's default) two boots
# with several vCPUs drift apart by milliseconds of guest time; with one vCPU
# the date changes nothing (measured: docs/runners.md).
ICOUNT_RTC = "clock=vm,base=2020-01-01T00:00:00"
# Kernel words for several vCPUs on the instruction clock. x86: qemu64 is
# an AMD model without an invariant TSC, and Linux takes the TSCs of more
# than one such CPU to be unsynchronised and moves its clocks to the HPET;
# tsc=reliable keeps the TSC, the clock the benchmarks read with one vCPU.
# No lpj=: without it each x86 secondary CPU calibrates its delay loop
# (0.15-0.25 s of guest time in the boot, the same in every boot), and its
# right value depends on the kernel's HZ, which the runner does not know;
# a wrong one would scale every udelay of the kernel under test. arm64
# needs nothing, and nothing tried made its several-vCPU boots repeat to
# the digit (docs/runners.md).
ICOUNT_SMP_CMDLINE = {"x86_64": "tsc=reliable", "arm64": ""}


def running_nested() -> bool:
    """Whether this x86 host is itself a guest (CPUID's hypervisor bit)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return "hypervisor" in line.split()
    except OSError:
        pass
    return False


def kvm_device_usable() -> bool:
    """/dev/kvm opens read-write and speaks the one KVM API there is."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return fcntl.ioctl(fd, KVM_GET_API_VERSION) == KVM_API_VERSION
    except OSError:
        return False
    finally:
        os.close(fd)


# A 64 KiB x86 BIOS whose reset vector writes 1 to the isa-debug-exit port:
# QEMU then exits with status (1 << 1) | 1 = 3. Everything else is hlt.
_PROBE_CODE = bytes([0xB0, 0x01, 0xE6, 0xF4, 0xF4])  # mov al, 1; out 0xf4, al; hlt
_PROBE_EXIT = 3
_kvm_cpu_cache: dict[str, list[str] | None] = {}


def x86_kvm_cpu_args(qemu: str, scratch: Path) -> list[str] | None:
    """The -cpu arguments with which KVM really runs a vCPU here, or None.

    /dev/kvm can answer its ioctls and still fail QEMU: nested setups refuse
    MSRs that `-cpu host` sets (QEMU aborts) or never run a vCPU at all. So
    run a few instructions of real code under KVM, first with the host's CPU
    model (what a lab wants measured), then with QEMU's default.
    """
    if qemu in _kvm_cpu_cache:
        return _kvm_cpu_cache[qemu]
    result: list[str] | None = None
    if kvm_device_usable():
        bios = bytearray(b"\xf4" * 65536)
        bios[0xFFF0 : 0xFFF0 + len(_PROBE_CODE)] = _PROBE_CODE
        scratch.mkdir(parents=True, exist_ok=True)
        probe = scratch / "kvm-probe.bin"
        probe.write_bytes(bytes(bios))
        for cpu in (["-cpu", "host"], []):
            argv = [
                qemu,
                "-accel",
                "kvm",
                *cpu,
                "-machine",
                "pc",
                "-m",
                "16",
                "-nodefaults",
            ]
            argv += [
                "-display",
                "none",
                "-monitor",
                "none",
                "-serial",
                "none",
                "-no-reboot",
            ]
            argv += [
                "-bios",
                str(probe),
                "-device",
                "isa-debug-exit,iobase=0xf4,iosize=0x04",
            ]
            try:
                run = subprocess.run(argv, capture_output=True, timeout=20, check=False)
            except subprocess.TimeoutExpired:
                continue
            if run.returncode == _PROBE_EXIT:
                result = cpu
                break
            log.debug("KVM probe %s failed: %s", cpu or "default cpu", run.stderr[-300:])
    _kvm_cpu_cache[qemu] = result
    return result


def _lower_autogroup(pid: int, nice: int) -> None:
    """Its own session is its own scheduler autogroup (where the kernel has
    them, the default in most distributions): the group's weight, not the
    process's nice value, sets its share against the service's processes,
    each in a session of its own. Best effort; unprivileged writes are
    limited to one per 100 ms machine-wide."""
    for _ in range(10):
        try:
            Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
            return
        except BlockingIOError:
            time.sleep(0.1)
        except OSError:
            return


def default_instructions_nice() -> int:
    """KPERF_RUNNER_NICE, else 10: the nice value of instruction-clock boots."""
    raw = os.environ.get("KPERF_RUNNER_NICE", "").strip()
    try:
        return int(raw) if raw else 10
    except ValueError:
        raise ValueError(f"KPERF_RUNNER_NICE={raw!r} is not a whole number: use 0 (no change) to 19") from None


class QemuBackend(Backend):
    name = "qemu"
    bindir = GUEST_BINDIR

    def __init__(
        self,
        arch: str,
        state_dir: Path,
        accel: str = "auto",
        memory_mb: int = 512,
        smp: int = 2,
        instructions_nice: int | None = None,
    ) -> None:
        self.arch = normalize_arch(arch)
        self.state_dir = state_dir
        if instructions_nice is None:
            instructions_nice = default_instructions_nice()
        if not 0 <= instructions_nice <= 19:
            raise ValueError(f"the instruction clock's nice value is 0 to 19, not {instructions_nice}")
        # An instruction-clock boot counts instructions, not seconds: it reads
        # the same at any CPU priority, so it runs below the service's web
        # server and analyses on a shared host (docs/operations.md, "CPU
        # priority"). A wall-clock boot keeps the agent's priority.
        self.instructions_nice = instructions_nice
        if accel not in ("auto", "kvm", "tcg"):
            raise ValueError(f"accel must be auto, kvm or tcg, not {accel!r}")
        if smp < 1:
            raise ValueError(f"a guest needs at least one vCPU, not {smp}")
        if accel == "kvm" and self.arch != host_arch():
            raise ValueError(f"KVM runs only {host_arch()} guests here; use tcg for {self.arch}")
        self.cpu_args: list[str] = []  # with KVM; TCG uses a fixed model
        if accel == "auto" and running_nested():
            # Nested KVM can pass every probe and still not boot Linux (seen:
            # firmware and a long-mode test run, the kernel hangs before its
            # first message), and its timing is noise on noise. A runner that
            # wants it anyway says --qemu-accel kvm.
            log.info("this host is itself a virtual machine: using TCG, not nested KVM")
            accel = "tcg"
        if accel != "tcg" and self.arch == host_arch():
            kvm_cpu = self._kvm_cpu_args(state_dir)
            if kvm_cpu is not None:
                accel, self.cpu_args = "kvm", kvm_cpu
            elif accel == "kvm":
                raise RuntimeError("QEMU cannot run a vCPU with KVM here; use --qemu-accel tcg")
        self.accel = "tcg" if accel == "auto" else accel
        # Asked for KVM by name: the instruction clock (TCG only) is refused
        # rather than silently measured on another accelerator.
        self.kvm_only = accel == "kvm"
        self.memory_mb = memory_mb
        self.smp = smp

    def clocks(self) -> tuple[str, ...]:
        return ("wall",) if self.kvm_only else ("instructions", "wall")

    def accel_for(self, clock: str) -> str:
        """The accelerator a boot timed with `clock` uses: the instruction clock needs TCG."""
        return "tcg" if clock == "instructions" else self.accel

    def timeout(self, expected_seconds: float, commands: int, clock: str = "wall") -> float:
        if self.accel_for(clock) != "tcg":
            return super().timeout(expected_seconds, commands, clock)
        # Emulated, a boot's real time follows the host's load and the
        # kernel under test: a head kernel several times slower on the path a
        # benchmark runs (pagealloc-slow's 5 us per allocation is seven times
        # the work) is a regression to measure, not a hang. The limit only
        # has to end a kernel that never finishes: on a 2-core host under a
        # test run the slowed allocator's head boots took more than the 195 s
        # the old 180 s base gave them (2026-11-29, twice), and a real hang
        # costs one runner ten minutes.
        return 600.0 + 6.0 * expected_seconds + 5.0 * commands

    def _kvm_cpu_args(self, state_dir: Path) -> list[str] | None:
        if self.arch == "x86_64":
            return x86_kvm_cpu_args(self.qemu_binary(), state_dir / "tmp")
        # No probe for arm64 yet: trust /dev/kvm; "max" is the host CPU under KVM.
        return ["-cpu", "max"] if kvm_device_usable() else None

    def qemu_binary(self) -> str:
        path = shutil.which(QEMU_BINARY[self.arch])
        if path is None:
            raise RuntimeError(
                f"{QEMU_BINARY[self.arch]} not found; install it with: apt-get install {QEMU_PACKAGE[self.arch]}"
            )
        return path

    def kernel_cmdline(self, extra: str = "") -> str:
        # panic=-1 reboots at once on a panic and -no-reboot turns that into
        # QEMU exiting, so a crashed kernel ends the run instead of hanging.
        base = f"console={_CONSOLE[self.arch]} panic=-1 quiet loglevel=3 {BENCHMARK_CMDLINE}"
        return f"{base} {extra}".strip()

    def guest_cpus(self, clock: str, vcpus: int = 0) -> int:
        """The vCPUs a boot gets: the job's count, else one on the instruction clock and --smp on the wall clock."""
        if vcpus:
            return vcpus
        return 1 if clock == "instructions" else self.smp

    def check_icount_smp(self, binary: str, vcpus: int) -> None:
        """Several vCPUs on the instruction clock need QEMU 8.1: an older one is refused (an infrastructure fault)."""
        refusal = icount_smp_refusal(binary, self.arch, vcpus, "the job")
        if refusal is not None:
            raise RuntimeError(refusal)

    def numa_args(self, nodes: int, cpus: int) -> list[str]:
        """-numa options for `nodes` nodes: memory split evenly, CPUs in contiguous
        blocks from node 0 (the last nodes get none when there are fewer CPUs
        than nodes, as memory-only nodes of a real machine)."""
        if nodes <= 1:
            return []
        if self.memory_mb % nodes or self.memory_mb // nodes < 64:
            # The runner's shape, not the kernel's fault: an infrastructure error.
            raise RuntimeError(
                f"the job wants {nodes} NUMA nodes, and this runner's {self.memory_mb} MiB guests cannot be "
                "split into that many equal nodes of at least 64 MiB: give the machine class fewer nodes"
            )
        args: list[str] = []
        block = -(-cpus // nodes)  # CPUs per node, the first nodes full
        for node in range(nodes):
            args += ["-object", f"memory-backend-ram,id=kperf-mem{node},size={self.memory_mb // nodes}M"]
            first, last = node * block, min((node + 1) * block, cpus) - 1
            cpu = f",cpus={first}-{last}" if last >= first else ""
            args += ["-numa", f"node,nodeid={node}{cpu},memdev=kperf-mem{node}"]
        return args

    def command_line(
        self,
        kernel: Path,
        initrd: Path,
        extra_cmdline: str = "",
        clock: str = "wall",
        vcpus: int = 0,
        numa_nodes: int = 0,
    ) -> list[str]:
        self.check_clock(clock)
        accel = self.accel_for(clock)
        smp = self.guest_cpus(clock, vcpus)
        argv = [self.qemu_binary()]
        if clock == "instructions":
            argv += ["-icount", ICOUNT, "-rtc", ICOUNT_RTC]
            if smp > 1:
                self.check_icount_smp(argv[0], smp)
                extra_cmdline = f"{ICOUNT_SMP_CMDLINE[self.arch]} {extra_cmdline}".strip()
        if self.arch == "x86_64":
            argv += ["-accel", accel]
            if accel == "kvm":
                argv += self.cpu_args
        else:
            # dtb-randomness=off: the board otherwise puts a fresh rng-seed and
            # kaslr-seed from the host into the device tree of every boot, and
            # with several vCPUs under icount two boots then part by 0.05-0.14%
            # (docs/runners.md); without them they repeat to the digit.
            machine = "virt,gic-version=max" if accel == "kvm" else "virt"
            machine += ",dtb-randomness=off"
            argv += ["-M", machine, "-accel", accel]
            argv += self.cpu_args if accel == "kvm" else ["-cpu", "cortex-a57"]
        argv += ["-m", str(self.memory_mb), "-smp", str(smp), *self.numa_args(numa_nodes, smp)]
        argv += [
            "-nographic",
            "-no-reboot",
            "-kernel",
            str(kernel),
            "-initrd",
            str(initrd),
        ]
        argv += ["-append", self.kernel_cmdline(extra_cmdline)]
        return argv

    def init_binary(self) -> Path:
        return compile_static("init.c", self.arch, self.state_dir)

    def run_boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
        # The whole boot runs here, inside start(); resume() hands over its outcome.
        self.check_clock(job.clock)
        if not kernel.is_file():
            # Our file went missing: a runner problem, not the kernel's.
            raise RuntimeError(f"kernel image {kernel} does not exist")
        archive = job_initramfs(
            self.init_binary().read_bytes(),
            {name: path.read_bytes() for name, path in job.binaries.items()},
            job.commands,
            thp=job.thp,
        )
        tmp_root = self.state_dir / "tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="boot-", dir=tmp_root) as tmp:
            initrd = Path(tmp) / "initrd.gz"
            archive.write(initrd)
            argv = self.command_line(kernel, initrd, job.cmdline, job.clock, job.vcpus, job.numa_nodes)
            log.debug("starting %s", " ".join(argv))
            start = time.monotonic()
            nice = self.instructions_nice if job.clock == "instructions" else 0
            console, outcome = self._run(argv, job.timeout, on_console, nice)
            seconds = time.monotonic() - start
        accel = self.accel_for(job.clock)
        details: dict[str, Any] = {
            "accel": accel,
            "qemu": argv[0],
            "clock": job.clock,
            "vcpus": self.guest_cpus(job.clock, job.vcpus),
            "numa_nodes": job.numa_nodes,
            "nice": nice,
            # Instruction counts move with QEMU's version: it belongs with the numbers.
            "qemu_version": qemu_version(argv[0])[0],
            **outcome,
        }
        if job.clock == "instructions":
            details["icount"] = ICOUNT
        if outcome["timed_out"] and job.clock == "instructions" and _starved(outcome["cpu_s"], seconds):
            # Under the instruction clock a guest that runs, and one that
            # hangs, keep QEMU's vCPU busy (idle time is skipped): a boot
            # that got the CPU for less than a quarter of its limit was held
            # up by the host, not by the kernel. Seen on a 2-core host running a
            # test suite, benches and a second stack at load 6: the slowed
            # allocator's third and fourth boots of one kernel whose first
            # two had finished. The host's fault, so the job is retried.
            raise RuntimeError(
                f"QEMU ran only {outcome['cpu_s']:.0f} s of CPU in the boot's {seconds:.0f} s "
                f"before its limit of {job.timeout:.0f} s: the host was too busy to tell a hang"
            )
        status = outcome["exit_status"]
        if status is not None and status < 0 and "KPERF-DONE" not in console:
            # QEMU itself crashed (an assertion in its KVM code, the OOM
            # killer): nothing to blame on the kernel; let the job be retried.
            raise RuntimeError(f"QEMU died of signal {-status}: {outcome['stderr'].strip()[-300:]}")
        try:
            record = parse_boot(console, job.commands)
        except BootFailure as failure:
            raise BootFailure(self._explain(failure.message, outcome, job.timeout), console) from None
        log.debug("boot finished in %.1f s (%s, %s clock)", seconds, accel, job.clock)
        return BootResult(console, record.environment, record.commands, seconds, True, details)

    @staticmethod
    def _explain(message: str, outcome: dict[str, Any], timeout: float) -> str:
        if outcome["timed_out"]:
            return f"no KPERF-DONE within {timeout:.0f} s, QEMU killed: {message}"
        status, stderr = outcome["exit_status"], outcome["stderr"].strip()
        if status not in (0, None):
            detail = f" ({stderr.splitlines()[-1]})" if stderr else ""
            return f"QEMU exited with status {status}{detail}: {message}"
        return message

    def _run(
        self, argv: list[str], timeout: float, on_console: ConsoleCallback | None, nice: int = 0
    ) -> tuple[str, dict[str, Any]]:
        """Run QEMU to its end or the deadline; the console text and how it ended."""
        proc = _start(argv, nice)
        assert proc.stdout is not None and proc.stderr is not None
        chunks: queue.Queue[bytes | None] = queue.Queue()
        stderr_chunks: list[bytes | None] = []
        readers = [
            threading.Thread(target=_pump, args=(proc.stdout, chunks.put), daemon=True),
            threading.Thread(target=_pump, args=(proc.stderr, stderr_chunks.append), daemon=True),
        ]
        for reader in readers:
            reader.start()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        cpu_s = 0.0
        console: list[str] = []
        window = ""  # the console's last few characters: a marker may span chunks
        deadline = time.monotonic() + timeout
        done_at: float | None = None
        timed_out = False
        eof = False
        try:
            while not eof:
                data = bytearray()
                try:
                    # Wait up to a second, then take whatever else is queued.
                    chunk = chunks.get(timeout=1.0)
                    while chunk is not None:
                        data += chunk
                        chunk = chunks.get_nowait()
                    eof = True
                except queue.Empty:
                    pass
                text = decoder.decode(bytes(data)).replace("\r", "")
                console.append(text)
                if on_console is not None:
                    on_console(text)
                now = time.monotonic()
                window = window[-16:] + text
                if done_at is None and "KPERF-DONE" in window:
                    done_at = now
                if done_at is not None and now > done_at + POWER_OFF_GRACE:
                    log.warning(
                        "QEMU still running %.0f s after KPERF-DONE; killing it",
                        now - done_at,
                    )
                    break
                if done_at is None and now > deadline:
                    timed_out = True
                    cpu_s = _cpu_seconds(proc.pid)
                    break
        finally:
            if eof and not timed_out:
                # QEMU closes its output a moment before it exits: let it.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()
            exit_status = proc.wait()
            for reader in readers:
                reader.join(timeout=5)
        tail = decoder.decode(b"", final=True).replace("\r", "")
        console.append(tail)
        outcome = {
            "timed_out": timed_out,
            "cpu_s": cpu_s,
            "exit_status": None if timed_out else exit_status,
            "stderr": b"".join(c for c in stderr_chunks if c).decode("utf-8", "replace"),
        }
        return "".join(console), outcome


# A boot that ran on the CPU for less than this share of its time was
# starved: a TCG vCPU that runs or hangs takes a whole core; at nice 10
# beside kernel builds it still had more than half of one.
STARVED_SHARE = 0.25


def _starved(cpu_s: float, seconds: float) -> bool:
    return seconds > 0 and cpu_s < STARVED_SHARE * seconds


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a running process has had (its threads
    included), from /proc/<pid>/stat; infinite where that cannot be read, so
    that a boot is never called starved without the evidence."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        # utime and stime, the stat file's 14th and 15th fields (11th and
        # 12th after the command's name).
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return math.inf


def _start(argv: list[str], nice: int) -> subprocess.Popen[bytes]:
    """QEMU started at ``nice`` (process and autogroup) in a session of its own."""
    # `nice` in front rather than setpriority() after the start: QEMU's
    # vCPU threads, made at once, would keep the old priority.
    prefix = [shutil.which("nice") or "/usr/bin/nice", "-n", str(nice), "--"] if nice > 0 else []
    try:
        proc = subprocess.Popen(
            [*prefix, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Its own session: a Ctrl-C meant for the agent reaches QEMU
            # only through us, and killing it touches nothing else.
            start_new_session=True,
        )
    except OSError as error:
        raise RuntimeError(f"cannot start {argv[0]}: {error}") from error
    if nice > 0:
        _lower_autogroup(proc.pid, nice)
    return proc


def _pump(stream: IO[bytes], put: Callable[[bytes | None], None]) -> None:
    """Copy a pipe into put() chunk by chunk; None marks its end."""
    fd = stream.fileno()
    try:
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            put(data)
    except OSError:
        pass
    finally:
        put(None)
