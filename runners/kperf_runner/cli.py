"""kperf-runner: the command line.

kperf-runner run --server URL --token TOKEN --name NAME [--arch x86_64]
                 [--machine-class qemu-x86_64] [--backend qemu] [--state-dir DIR]
                 [--once] [--poll SECONDS] [--qemu-accel auto|kvm|tcg] [--qemu-smp N]
                 [--backend kexec --kexec-ramoops ADDRESS:SIZE [--kexec-cmdline TEXT]
                  [--kexec-watchdog /dev/watchdog] [--kexec-boot-seconds S]
                  [--kexec-reboot auto|systemctl|kexec] [--kexec-return-timeout SECONDS]]
kperf-runner bench NAME [--grid quick] [--set key=value ...] [--json]
                   [--artifact pagealloc.ko=PATH]
kperf-runner version
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from . import __version__
from .agent import Agent, RunnerConfig
from .backends import Backend
from .backends.kexec import KexecBackend, KexecSetupError, Ramoops, check_ramoops, check_tools, handover_warning
from .backends.qemu import QemuBackend
from .benchmarks import (
    BENCHMARKS,
    BadParameters,
    UnknownBenchmark,
    get_benchmark,
    resolve_params,
)
from .client import Client
from .counters import boot_counters, per_command_counters, read_vmstat, vmstat_delta
from .perf import CommandCounters
from .toolchain import ToolchainError, compile_all, host_arch, normalize_arch

log = logging.getLogger(__name__)


def default_state_dir() -> Path:
    env = os.environ.get("KPERF_RUNNER_STATE")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "kperf-runner"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kperf-runner",
        description="kperf runner agent: pulls jobs, boots kernels, runs benchmarks.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="pull and run jobs from the kperf service")
    _add_run_arguments(run)
    _add_kexec_arguments(run.add_argument_group("kexec backend (bare metal)"))
    _add_bench_arguments(sub.add_parser("bench", help="run a benchmark natively on this machine"))
    sub.add_parser("version", help="print the version")
    return parser


def _add_run_arguments(run: argparse.ArgumentParser) -> None:
    """The agent's: where the service is, who this runner is, how it boots."""
    run.add_argument(
        "--server",
        default=os.environ.get("KPERF_SERVER"),
        help="service URL (default: $KPERF_SERVER)",
    )
    run.add_argument(
        "--token",
        default=os.environ.get("KPERF_RUNNER_TOKEN"),
        help="runner token (default: $KPERF_RUNNER_TOKEN)",
    )
    run.add_argument(
        "--name",
        default=socket.gethostname().split(".")[0],
        help="runner name registered with the token (default: short hostname)",
    )
    run.add_argument("--arch", default=None, help="x86_64 or arm64 (default: this host's)")
    run.add_argument(
        "--machine-class",
        default=None,
        help="machine class registered for the runner (default: qemu-<arch>)",
    )
    run.add_argument(
        "--backend",
        choices=["qemu", "kexec"],
        default="qemu",
        help="qemu: boot kernels in QEMU; kexec: boot them on this machine (docs/runners-bare-metal.md)",
    )
    run.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="cache of artifacts and binaries (default: $KPERF_RUNNER_STATE or ~/.cache/kperf-runner)",
    )
    run.add_argument("--once", action="store_true", help="claim once, run that job, exit")
    run.add_argument(
        "--poll",
        type=float,
        default=None,
        help="seconds between claims when idle (default: what the service says)",
    )
    run.add_argument(
        "--qemu-accel",
        choices=["auto", "kvm", "tcg"],
        default=os.environ.get("KPERF_QEMU_ACCEL", "auto"),
        help="QEMU accelerator (default: kvm when /dev/kvm works, else tcg)",
    )
    run.add_argument(
        "--qemu-smp",
        "--smp",
        type=int,
        default=2,
        metavar="N",
        help="vCPUs of a wall-clock boot whose job names none (default 2); instruction-clock boots "
        "get one unless the job says otherwise",
    )
    run.add_argument(
        "--instructions-nice",
        type=int,
        default=None,
        metavar="N",
        help="nice value (0-19) of QEMU on the instruction clock, which counts instructions and reads the same at "
        "any priority (default $KPERF_RUNNER_NICE, else 10); wall-clock boots keep the agent's priority",
    )


def _add_kexec_arguments(kexec: argparse._ArgumentGroup) -> None:
    kexec.add_argument(
        "--kexec-ramoops",
        metavar="ADDRESS:SIZE",
        help="the RAM ramoops uses on this machine's command line, e.g. 0x30000000:0x1000000 (required)",
    )
    kexec.add_argument(
        "--kexec-cmdline",
        default="",
        help='put first on the test kernel\'s command line, e.g. "console=ttyS0,115200"',
    )
    kexec.add_argument(
        "--kexec-watchdog",
        type=Path,
        default=None,
        help="hardware watchdog armed before each jump, e.g. /dev/watchdog (without one a hang is never ended)",
    )
    kexec.add_argument(
        "--kexec-watchdog-timeout",
        type=int,
        default=None,
        help="no longer used: each boot arms the watchdog for its own time limit + --kexec-boot-seconds, within "
        "what the watchdog's driver takes (accepted so that existing unit files keep working)",
    )
    kexec.add_argument(
        "--kexec-boot-seconds",
        type=float,
        default=120.0,
        help="what a boot takes here besides its benchmarks: the jump, the test kernel starting, init's reboot; "
        "the base of each boot's time limit and the watchdog's margin over it (default 120)",
    )
    kexec.add_argument("--kexec-reboot", choices=["auto", "systemctl", "kexec"], default="auto")
    kexec.add_argument(
        "--kexec-return-timeout",
        type=float,
        default=300.0,
        help="seconds this machine may take to come back to its own kernel after a boot (default 300)",
    )


def _add_bench_arguments(bench: argparse.ArgumentParser) -> None:
    bench.add_argument("benchmark", help=f"one of: {', '.join(sorted(BENCHMARKS))}")
    bench.add_argument("--grid", default="quick")
    bench.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a parameter (lists: 0,100,200)",
    )
    bench.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (params, samples, raw output, /proc/vmstat deltas) only",
    )
    bench.add_argument(
        "--artifact",
        dest="artifacts",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a build artifact the benchmark needs (pagealloc: pagealloc.ko=PATH, built with the running kernel)",
    )
    bench.add_argument("--state-dir", type=Path, default=default_state_dir())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s kperf-runner %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        if args.command == "version":
            print(f"kperf-runner {__version__}")
            return 0
        if args.command == "bench":
            return bench_command(args)
        return run_command(args)
    except (UnknownBenchmark, BadParameters, ToolchainError, NativeRunError) as error:
        print(f"kperf-runner: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kperf-runner: interrupted", file=sys.stderr)
        return 130


def run_command(args: argparse.Namespace) -> int:
    if not args.server:
        raise SystemExit("kperf-runner run: --server (or KPERF_SERVER) is required")
    if not args.token:
        raise SystemExit("kperf-runner run: --token (or KPERF_RUNNER_TOKEN) is required")
    arch = normalize_arch(args.arch or host_arch())
    config = RunnerConfig(
        name=args.name,
        arch=arch,
        machine_class=args.machine_class or f"qemu-{arch}",
        state_dir=args.state_dir,
        poll=args.poll,
        once=args.once,
    )
    config.state_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    if args.backend == "kexec":
        bare_metal = kexec_backend(args, arch, config.state_dir)
        if bare_metal is None:
            return 2
        _install_stop_handlers(stop)
        return Agent(config, Client(args.server, args.token), bare_metal, stop).run()
    try:
        qemu = QemuBackend(
            arch, config.state_dir, accel=args.qemu_accel, smp=args.qemu_smp, instructions_nice=args.instructions_nice
        )
    except (RuntimeError, ValueError) as error:  # QEMU missing, KVM refused, a bad --qemu-smp
        print(f"kperf-runner: {error}", file=sys.stderr)
        return 2
    log.info(
        "qemu backend: %s guests; wall-clock jobs with %s, instruction-clock jobs %s",
        arch,
        qemu.accel,
        "with tcg" if "instructions" in qemu.clocks() else "refused (--qemu-accel kvm)",
    )
    backend: Backend = qemu
    _install_stop_handlers(stop)
    agent = Agent(config, Client(args.server, args.token), backend, stop)
    return agent.run()


def kexec_backend(args: argparse.Namespace, arch: str, state_dir: Path) -> Backend | None:
    """The kexec backend for these flags, or None after saying what is wrong with the machine."""
    try:
        if not args.kexec_ramoops:
            raise KexecSetupError(
                "--backend kexec needs --kexec-ramoops ADDRESS:SIZE, the RAM ramoops keeps across reboots "
                "(e.g. 0x30000000:0x1000000, as on this machine's command line; docs/runners-bare-metal.md)"
            )
        ramoops = Ramoops.parse(args.kexec_ramoops)
        backend = KexecBackend(
            arch,
            state_dir,
            ramoops,
            cmdline=args.kexec_cmdline,
            watchdog=args.kexec_watchdog,
            boot_seconds=args.kexec_boot_seconds,
            reboot=args.kexec_reboot,
            return_timeout=args.kexec_return_timeout,
            kexec=check_tools(),
        )
        # Before anything else: a boot's records in ramoops last for this
        # boot of the machine only once ramoops has started.
        backend.open_pstore()
        check_ramoops(ramoops, arch=arch)
    except (KexecSetupError, ValueError) as error:
        print(f"kperf-runner: {error}", file=sys.stderr)
        return None
    if args.kexec_watchdog is None:
        log.warning("no --kexec-watchdog: a kernel that hangs keeps this machine until someone resets it")
    if args.kexec_watchdog_timeout is not None:
        log.info(
            "--kexec-watchdog-timeout %d is ignored: the watchdog is set from each boot's time limit",
            args.kexec_watchdog_timeout,
        )
    warning = handover_warning()
    if warning:
        log.warning("%s", warning)
    # Left armed by a jump that never happened, it would reset the machine mid-job; each jump arms it again.
    backend.stop_watchdog()
    log.info("kexec backend: test kernels get %s", backend.kernel_cmdline())
    return backend


def _install_stop_handlers(stop: threading.Event) -> None:
    """First SIGTERM/SIGINT: finish the current boot, then stop. Second: stop now."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            raise KeyboardInterrupt
        log.warning("%s: stopping after the current step (send it again to stop now)", name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def bench_command(args: argparse.Namespace) -> int:
    bench = get_benchmark(args.benchmark)
    overrides: dict[str, Any] = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadParameters(f"--set wants KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    params = resolve_params(bench.name, args.grid, overrides)
    extra = native_artifacts(bench.name, bench.artifacts(), args.artifacts)
    binaries = compile_all(bench.sources(), host_arch(), args.state_dir)
    binaries.update(extra)
    outputs: list[str] = []
    vmstat: list[dict[str, int]] = []
    perf: dict[int, dict[str, int]] = {}  # command index -> its counts
    perf_counters = ""
    with tempfile.TemporaryDirectory(prefix="kperf-bench-") as bindir:
        # The commands name binaries by program name, as in the initramfs.
        for name, path in binaries.items():
            os.symlink(path, Path(bindir) / name)
        for n, argv in enumerate(bench.command(params, bindir)):
            log.info("running %s", " ".join(argv))
            # The host's counters around the command, as init reads the
            # guest's; system-wide, so whatever else runs here counts too.
            before = read_vmstat()
            # Instructions and cycles of the command alone (perf.py), where the PMU is reachable.
            hardware = CommandCounters()
            perf_counters = hardware.description
            status, output = _run_streaming(argv, echo=not args.json)
            counts = hardware.read()
            after = read_vmstat()
            if before is not None and after is not None:
                vmstat.append(vmstat_delta(before, after))
            if counts is not None:
                perf[n] = counts
            outputs.append(output)
            if status != 0:
                print(
                    f"kperf-runner: {' '.join(argv)} exited with status {status}",
                    file=sys.stderr,
                )
                return 1
    raw = "".join(outputs)
    try:
        samples = bench.parse(raw, params)
        operations = bench.operations(raw, params)
    except ValueError as error:
        print(f"kperf-runner: {error}", file=sys.stderr)
        return 1
    sample_dicts = [{"metric": s.metric, "iteration": s.iteration, "value": s.value} for s in samples]
    if args.json:
        document = {
            "benchmark": bench.name,
            "grid": args.grid,
            "params": params,
            "metrics": {
                m.name: {"unit": m.unit, "higher_is_better": m.higher_is_better} for m in bench.metrics(params)
            },
            "samples": sample_dicts,
            "raw_output": raw,
            # Per command too, with the operations each performed (counts per operation).
            "counters": {**boot_counters(vmstat, list(perf.values())), **per_command_counters(perf, operations)},
            # As init records it: "instructions,cycles user+kernel", or "unsupported (why)".
            "perf_counters": perf_counters,
        }
        print(json.dumps(document, indent=2))
    else:
        print(json.dumps(sample_dicts, indent=2))
    return 0


class NativeRunError(ValueError):
    """A benchmark cannot run natively here; the message says why and what to do."""


def module_vermagic(path: Path) -> str | None:
    """The kernel release a .ko was built for (first word of its vermagic)."""
    data = path.read_bytes()
    start = data.find(b"vermagic=")
    if start < 0:
        return None
    end = data.find(b"\0", start)
    words = data[start + len(b"vermagic=") : end].decode("utf-8", "replace").split()
    return words[0] if words else None


def native_artifacts(benchmark: str, needed: list[str], given: list[str]) -> dict[str, Path]:
    """{name: path} of the build artifacts a native run needs, from --artifact NAME=PATH.

    A module only loads into the kernel it was built against, so a .ko must
    name the running kernel's release in its vermagic.
    """
    paths: dict[str, Path] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise NativeRunError(f"--artifact wants NAME=PATH, got {item!r}")
        paths[name.strip()] = Path(value.strip())
    unknown = sorted(set(paths) - set(needed))
    if unknown:
        raise NativeRunError(
            f"{benchmark} uses no artifact {', '.join(unknown)}"
            + (f"; it needs {', '.join(needed)}" if needed else "; it needs none")
        )
    release = os.uname().release
    for name in needed:
        if name not in paths:
            raise NativeRunError(
                f"{benchmark} needs {name}, a kernel module kperf builds with each kernel under test: "
                f"it runs natively only on a kperf-built kernel. Boot one (this machine runs {release}) "
                f"and pass --artifact {name}=PATH with that build's {name}, or let a runner boot the "
                "build (kperf-runner run)"
            )
        path = paths[name]
        if not path.is_file():
            raise NativeRunError(f"--artifact {name}: {path} does not exist")
        if name.endswith(".ko"):
            built_for = module_vermagic(path)
            if built_for != release:
                raise NativeRunError(
                    f"{path} was built for kernel {built_for or '(no vermagic: not a module?)'} but this "
                    f"machine runs {release}: {benchmark} needs the {name} of the running kernel's build"
                )
    return {name: paths[name] for name in needed}


def _run_streaming(argv: list[str], echo: bool) -> tuple[int, str]:
    """Run argv with stderr merged into stdout, echoing lines as they come."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if echo:
            sys.stdout.write(line)
            sys.stdout.flush()
    return proc.wait(), "".join(lines)


if __name__ == "__main__":
    sys.exit(main())
