"""The runner agent's loop: heartbeat, claim, boot, upload (docs/runner-protocol.md).

One job at a time. For each job the agent downloads the kernel, compiles
the benchmark for the job's arch, boots the kernel `boots` times with the
backend, parses every boot's output with the benchmark registry and uploads
samples, environment and console in one call. While it works it calls
progress often enough to keep the lease (at least every lease_seconds / 3)
and streams the console, at most every few seconds.

What went wrong decides how the job is reported:

    BootFailure                          fail, kind "boot"
    BenchmarkFailure, unparseable output fail, kind "benchmark"
    anything else on this side           fail, kind "infra" (the job is retried)
    409 not-held                         dropped: the lease is someone else's now
    409 duplicate on results             done: the results are already stored
    413 too-large                        sent again with the console or log cut to its end;
                                         results still too large: fail, kind "infra"
    service unreachable at upload        abandoned: the lease expires, the job is requeued
    (progress calls that fail are logged and the boot carries on)
"""

from __future__ import annotations

import hashlib
import logging
import platform
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__
from .backends import Backend, BenchmarkFailure, BootFailure, BootJob, BootResult
from .benchmarks import BENCHMARKS, Benchmark, get_benchmark
from .client import (
    BadAnswer,
    BadToken,
    Client,
    Duplicate,
    Invalid,
    NotHeld,
    ProtocolError,
    ServerUnavailable,
    TooLarge,
)
from .toolchain import COMMON_HEADER, CSRC, compile_all, normalize_arch

log = logging.getLogger("kperf_runner")

HEARTBEAT_EVERY = 30.0
CONSOLE_EVERY = 3.0
DEFAULT_POLL = 5.0
# When the service refuses a body as too large (413), the console or log in
# it is sent again cut to its end (where a panic or a failing benchmark
# shows), at most this many characters.
RESEND_TAIL = 256 * 1024

DONE, FAILED, DROPPED, ABANDONED = "done", "failed", "dropped", "abandoned"


@dataclass
class RunnerConfig:
    name: str
    arch: str
    machine_class: str
    state_dir: Path
    poll: float | None = None  # None: what the service's heartbeat answer says
    once: bool = False


class _Progress:
    """Progress calls for one job: phase changes at once, console in batches.

    Console text is held back and sent at most every CONSOLE_EVERY seconds;
    with nothing to send, a call still goes out every keepalive seconds so
    the lease never lapses during a long, quiet benchmark.
    """

    def __init__(self, client: Client, job: dict[str, Any], clock: Callable[[], float]) -> None:
        self.client = client
        self.job_id: int = job["id"]
        self.attempt: int = job["attempt"]
        self.boots: int = job["boots"]
        # The protocol asks for a call at least every lease_seconds / 3; a
        # quarter leaves room for a slow answer or a retry.
        self.keepalive = max(1.0, float(job.get("lease_seconds", 900)) / 4)
        self.clock = clock
        self.phase = "preparing"
        self.boot = 1
        self.message = ""
        self.pending: list[str] = []
        self.last_call = float("-inf")

    def update(self, phase: str, boot: int, message: str) -> None:
        self.phase, self.boot, self.message = phase, boot, message
        self.send()

    def console(self, text: str) -> None:
        if text:
            self.pending.append(text)
        since = self.clock() - self.last_call
        if (self.pending and since >= CONSOLE_EVERY) or since >= self.keepalive:
            self.send()

    def send(self) -> None:
        payload = {
            "attempt": self.attempt,
            "phase": self.phase,
            "boot": self.boot,
            "boots": self.boots,
            "message": self.message,
            "console": "".join(self.pending),
        }
        try:
            self._deliver(payload)
        except ServerUnavailable as error:
            # A service restart must not kill a long boot: keep the console
            # for the next call. If the outage outlasts the lease, the upload
            # gets not-held and the job is dropped then.
            log.warning("job %d: progress not delivered, carrying on: %s", self.job_id, error)
        else:
            self.pending = []
        self.last_call = self.clock()

    def _deliver(self, payload: dict[str, Any]) -> None:
        # A console too large for the service must not cost the lease: send
        # its end, or else no console, so the call still extends it.
        consoles = list(dict.fromkeys((payload["console"], _tail(payload["console"]), "")))
        for n, console in enumerate(consoles, 1):
            try:
                self.client.progress(self.job_id, {**payload, "console": console})
                return
            except TooLarge as error:
                if n == len(consoles):
                    raise
                log.warning("job %d: progress refused as too large, sending less console: %s", self.job_id, error)


class Agent:
    def __init__(
        self,
        config: RunnerConfig,
        client: Client,
        backend: Backend,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.client = client
        self.backend = backend
        self.stop = stop or threading.Event()
        self.clock = clock
        self.poll = config.poll if config.poll is not None else DEFAULT_POLL
        self.last_heartbeat = float("-inf")
        self.jobs: dict[str, int] = {DONE: 0, FAILED: 0, DROPPED: 0, ABANDONED: 0}

    # -- the loop ----------------------------------------------------------

    def run(self) -> int:
        """Poll for jobs until stopped (or after one claim with --once); the exit code."""
        log.info(
            "runner %s (%s, %s, backend %s) polling %s",
            self.config.name,
            self.config.arch,
            self.config.machine_class,
            self.backend.name,
            self.client.server,
        )
        while not self.stop.is_set():
            try:
                if self.clock() - self.last_heartbeat >= HEARTBEAT_EVERY:
                    self.heartbeat()
                job = self.client.claim()
                if job is not None:
                    self.run_job(job)
                elif self.config.once:
                    log.info("no job queued for %s", self.config.machine_class)
                if self.config.once:
                    break
                if job is not None:
                    continue  # more may be queued: claim again at once
            except BadToken as error:
                log.error(
                    "the service refused this runner's token (%s); check --token or "
                    "KPERF_RUNNER_TOKEN against the one `kperf-manage add_runner` printed",
                    error.detail,
                )
                return 2
            except (ServerUnavailable, BadAnswer) as error:
                if self.config.once:
                    log.error("%s", error)
                    return 1
                log.warning("%s; trying again in %.0f s", error, self.poll)
            except ProtocolError as error:
                # mismatch and the like: configuration, not something retrying fixes.
                log.error("the service refused %s: %s", error.endpoint, error)
                return 2
            self.stop.wait(self.poll)
        log.info(
            "runner %s stopping: %s",
            self.config.name,
            ", ".join(f"{count} {outcome}" for outcome, count in self.jobs.items()),
        )
        return 0

    def heartbeat(self) -> None:
        answer = self.client.heartbeat(
            {
                "name": self.config.name,
                "arch": self.config.arch,
                "machine_class": self.config.machine_class,
                "version": __version__,
                "hostname": platform.node(),
                "capabilities": {
                    "backends": [self.backend.name],
                    "benchmarks": sorted(BENCHMARKS),
                    # The service hands this runner only jobs timed with one of these.
                    "clocks": list(self.backend.clocks()),
                },
            }
        )
        self.last_heartbeat = self.clock()
        if self.config.poll is None and isinstance(answer.get("poll_seconds"), (int, float)):
            self.poll = float(answer["poll_seconds"])

    def _heartbeat_during_job(self) -> None:
        """Heartbeats keep going during long jobs; their failure never fails the job."""
        if self.clock() - self.last_heartbeat < HEARTBEAT_EVERY:
            return
        try:
            self.heartbeat()
        except BadToken:
            raise
        except (ProtocolError, ServerUnavailable) as error:
            log.warning("heartbeat failed during a job: %s", error)
            self.last_heartbeat = self.clock()

    # -- one job -----------------------------------------------------------

    def run_job(self, job: dict[str, Any]) -> str:
        label = _label(job)
        log.info("%s: claimed, %d boot(s)", label, job.get("boots", 0))
        consoles: list[str] = []
        try:
            outcome = self._execute(job, label, consoles)
        except NotHeld as error:
            log.warning("%s: dropped, the lease is no longer ours: %s", label, error.detail)
            outcome = DROPPED
        except ServerUnavailable as error:
            log.error(
                "%s: abandoned, the service is unreachable (%s); its lease will expire "
                "and the service will queue it again",
                label,
                error,
            )
            outcome = ABANDONED
        except BadToken:
            raise
        except BootFailure as failure:
            text = _join_consoles([*consoles, failure.console])
            outcome = self._fail(job, label, "boot", failure.message, text)
        except BenchmarkFailure as failure:
            text = _join_consoles([*consoles, failure.console])
            outcome = self._fail(job, label, "benchmark", failure.message, text)
        # Anything else is this runner's fault, not the kernel's.
        except Exception as error:
            log.exception("%s: infrastructure error", label)
            message = f"{type(error).__name__}: {error}"
            text = _join_consoles(consoles) + traceback.format_exc()
            outcome = self._fail(job, label, "infra", message, text)
        self.jobs[outcome] += 1
        return outcome

    def _execute(self, job: dict[str, Any], label: str, consoles: list[str]) -> str:
        job_id, boots = int(job["id"]), int(job["boots"])
        progress = _Progress(self.client, job, self.clock)
        progress.update("preparing", 1, "downloading the kernel")
        if normalize_arch(job["arch"]) != normalize_arch(self.config.arch):
            raise RuntimeError(f"the job is for {job['arch']} but this runner boots {self.config.arch}")
        bench = get_benchmark(job["benchmark"])
        params = bench.validate(job["params"])
        kernel = self._download_kernel(job, label, progress)
        extra = self._download_bench_artifacts(job, label, bench, progress)
        progress.update("preparing", 1, f"compiling {bench.name} for {job['arch']}")
        binaries = compile_all(bench.sources(), job["arch"], self.config.state_dir)
        binaries.update(extra)
        commands = bench.command(params, self.backend.bindir)
        boot_job = BootJob(
            commands=commands,
            binaries=binaries,
            cmdline=str((job.get("kernel") or {}).get("cmdline") or ""),
            timeout=self.backend.timeout(bench.expected_seconds(params), len(commands)),
            # A service from before clocks sends none: it meant the wall clock.
            clock=str(job.get("clock") or "wall"),
        )
        # Before any boot: a runner that cannot give the clock fails the
        # attempt as an infrastructure fault, not the kernel.
        self.backend.check_clock(boot_job.clock)
        results: list[dict[str, Any]] = []
        for index in range(boots):
            if index and self.stop.is_set():
                raise RuntimeError(f"runner {self.config.name} was stopped after boot {index} of {boots}")
            results.append(self._boot(job, label, bench, params, boot_job, kernel, index, progress))
            consoles.append(results[-1].pop("console"))
        progress.update("uploading", boots, f"uploading {boots} boot(s)")
        payload = {
            "attempt": job["attempt"],
            "boots": results,
            "metrics": {
                metric.name: {
                    "unit": metric.unit,
                    "higher_is_better": metric.higher_is_better,
                }
                for metric in bench.metrics(params)
            },
            "console_log": _join_consoles(consoles),
        }
        try:
            try:
                self.client.results(job_id, payload)
            except TooLarge as error:
                log.warning("%s: results refused as too large, sending them with the console cut: %s", label, error)
                self.client.results(job_id, {**payload, "console_log": _tail(payload["console_log"])})
        except Duplicate:
            log.info("%s: results were already stored (duplicate upload); done", label)
            return DONE
        except Invalid as error:
            raise RuntimeError(f"the service rejected the results: {error.detail}") from error
        except TooLarge as error:
            # Reported as an infra failure (the samples or raw output alone are too large).
            raise RuntimeError(f"the service refused the results as too large: {error.detail}") from error
        samples = sum(len(boot["samples"]) for boot in results)
        log.info("%s: done, %d samples from %d boot(s) uploaded", label, samples, boots)
        return DONE

    def _boot(
        self,
        job: dict[str, Any],
        label: str,
        bench: Benchmark,
        params: dict[str, Any],
        boot_job: BootJob,
        kernel: Path,
        index: int,
        progress: _Progress,
    ) -> dict[str, Any]:
        boots = int(job["boots"])
        step = f"boot {index + 1} of {boots}"
        log.info("%s: %s (%s)", label, step, self.backend.name)
        progress.update("booting", index + 1, step)

        def on_console(text: str) -> None:
            # The first command starting is the end of the boot proper.
            if progress.phase == "booting" and "KPERF-BEGIN" in text:
                progress.pending.append(text)
                progress.update("running", index + 1, f"{step}: running {bench.name}")
            else:
                progress.console(text)
            self._heartbeat_during_job()

        result: BootResult = self.backend.boot(boot_job, kernel, on_console)
        try:
            samples = bench.parse(result.raw_output, params)
        except ValueError as error:
            raise BenchmarkFailure(f"{step}: {error}", result.console) from error
        log.info(
            "%s: %s finished in %.1f s, %d samples",
            label,
            step,
            result.seconds,
            len(samples),
        )
        # What ran, as well as where: a change to the runner or to a
        # benchmark's C source, or a different accelerator, must show in the
        # data rather than silently shift it.
        environment = dict(result.environment)
        environment["runner_version"] = __version__
        environment["backend"] = self.backend.name
        environment.update({k: v for k, v in result.details.items() if k in ("accel", "icount")})
        # Which clock timed the samples: they are comparable only with samples of the same clock.
        environment["clock"] = boot_job.clock
        environment["bench_sources_sha256"] = sources_digest(bench)
        # What the benchmark itself states about the run (pagealloc: which
        # cycle counter get_cycles() read).
        environment.update(bench.environment(result.raw_output))
        return {
            "boot": index,
            "environment": environment,
            "raw_output": result.raw_output,
            "samples": [{"metric": s.metric, "iteration": s.iteration, "value": s.value} for s in samples],
            # The kernel's own account of the run (/proc/vmstat deltas): shown
            # beside the verdicts, never judged.
            "counters": result.counters,
            "console": result.console,
        }

    def _download_bench_artifacts(
        self, job: dict[str, Any], label: str, bench: Benchmark, progress: _Progress
    ) -> dict[str, Path]:
        """The build artifacts the benchmark runs (e.g. pagealloc.ko), by name.

        A build without one is a fact about the kernel under test (a kernel
        without CONFIG_MODULES, a module that does not compile against it),
        so the job fails as a benchmark failure, not as the runner's fault.
        """
        artifacts = {artifact["name"]: artifact for artifact in job.get("artifacts", [])}
        out: dict[str, Path] = {}
        for name in bench.artifacts():
            if name not in artifacts:
                raise BenchmarkFailure(
                    f"{bench.name} needs the build artifact {name}, which build "
                    f"{(job.get('kernel') or {}).get('build_id')} does not have (has: "
                    f"{', '.join(sorted(artifacts))}): the kernel was built without "
                    "CONFIG_MODULES or the module did not compile against it; the build's "
                    "warnings say which"
                )
            out[name] = self._download(artifacts[name], label, progress)
        return out

    def _download_kernel(self, job: dict[str, Any], label: str, progress: _Progress) -> Path:
        artifacts = {artifact["name"]: artifact for artifact in job.get("artifacts", [])}
        if "kernel" not in artifacts:
            raise RuntimeError(f"the job lists no kernel artifact (has: {sorted(artifacts)})")
        return self._download(artifacts["kernel"], label, progress)

    def _download(self, artifact: dict[str, Any], label: str, progress: _Progress) -> Path:
        start = self.clock()
        path = self.client.download(
            artifact["url"],
            self.config.state_dir / "artifacts",
            artifact["sha256"],
            artifact.get("size"),
            on_chunk=lambda _received: progress.console(""),
        )
        log.info(
            "%s: %s %s (%d bytes) ready in %.1f s",
            label,
            artifact.get("name", "artifact"),
            artifact["sha256"][:12],
            path.stat().st_size,
            self.clock() - start,
        )
        return path

    def _fail(
        self,
        job: dict[str, Any],
        label: str,
        kind: str,
        message: str,
        text: str,
    ) -> str:
        log.error("%s: failed (%s): %s", label, kind, message)
        body = {"attempt": job["attempt"], "kind": kind, "message": message, "log": text}
        try:
            try:
                self.client.fail(int(job["id"]), body)
            except TooLarge as error:
                log.warning("%s: failure report refused as too large, sending the log's end: %s", label, error)
                self.client.fail(int(job["id"]), {**body, "log": _tail(text)})
        except NotHeld as error:
            log.warning(
                "%s: could not report the failure, no longer ours: %s",
                label,
                error.detail,
            )
            return DROPPED
        except (ProtocolError, ServerUnavailable) as error:
            if isinstance(error, BadToken):
                raise
            log.error("%s: could not report the failure: %s", label, error)
            return ABANDONED
        return FAILED


def _label(job: dict[str, Any]) -> str:
    kernel = job.get("kernel") or {}
    sha = str(kernel.get("sha", ""))[:12]
    return (
        f"job {job.get('id')} attempt {job.get('attempt')} "
        f"({job.get('benchmark')}/{job.get('grid')}, build {kernel.get('build_id')} {sha})"
    )


def _tail(text: str) -> str:
    keep = RESEND_TAIL
    if len(text) <= keep:
        return text
    cut = len(text) - keep
    return f"[kperf-runner: {cut} characters cut here: the service refused them as too large]\n" + text[-keep:]


def _join_consoles(consoles: list[str]) -> str:
    if len(consoles) == 1:
        return consoles[0]
    return "".join(
        f"--- kperf: console of boot {index + 1} ---\n{console}" for index, console in enumerate(consoles) if console
    )


def sources_digest(bench: Benchmark) -> str:
    """sha256 over the benchmark's C sources and the init, in a fixed order."""
    h = hashlib.sha256()
    for name in sorted({*bench.sources(), "init.c", COMMON_HEADER}):
        h.update(name.encode() + b"\0" + (CSRC / name).read_bytes())
    return h.hexdigest()
