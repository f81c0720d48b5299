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
    service unreachable at upload        abandoned: the lease expires, the job is requeued;
    or at a failure report               kexec: kept and sent again (see below)
    going quiet not delivered            fail, kind "infra", before the watchdog or the jump
    (other progress calls that fail are logged and the boot carries on)

Every boot is started and then resumed (backends/__init__.py). Before a boot
begins, the job in flight is written to the state directory (inflight.py);
on start-up the agent looks there before it claims anything. The kexec
backend resumes from it after the machine came back from the kernel under
test; a backend that cannot (qemu, when the agent itself was restarted
mid-boot) has the attempt reported as `infra` at once, so the job is
retried without waiting for its lease to expire.

A backend whose boots outlive the agent (kexec: its resume() reads the
outcome back from outside this process, from pstore) has the in-flight
record written again as soon as a boot's outcome is back: the result, or the
failure report the service is to get. Only then does the backend let go of
where it read it from (`release()`: pstore is cleared), so a power cut at
any step finds the outcome in pstore, on disk, or both (crashpoints.py
names the steps). A report the service did not get leaves that record in
place: the loop sends it again, from the record alone, with a growing
pause, at every start of the agent and every poll, and claims nothing
meanwhile, until the service takes it or answers not-held (the lease ran
out and the job is the service's to queue again).
"""

from __future__ import annotations

import logging
import platform
import secrets
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__, inflight
from .artifacts import download_bench_artifacts, download_kernel
from .backends import Backend, BenchmarkFailure, BootFailure, BootJob, BootResult, CannotResume, with_phase_seed
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
from .crashpoints import BOOT_READ, OUTCOME_SAVED, PSTORE_CLEARED, Crashpoints
from .inflight import InFlight
from .reporting import NotToldQuiet, Progress, boot_record, join_consoles, label
from .toolchain import compile_all, normalize_arch

log = logging.getLogger(__name__)

HEARTBEAT_EVERY = 30.0
DEFAULT_POLL = 5.0
# When the service refuses a body as too large (413), the console or log in
# it is sent again cut to its end (where a panic or a failing benchmark
# shows), at most this many characters.
RESEND_TAIL = 256 * 1024
# The longest pause between two tries of a report the service did not get.
RETRY_MAX = 300.0

DONE, FAILED, DROPPED, ABANDONED = "done", "failed", "dropped", "abandoned"


@dataclass
class RunnerConfig:
    name: str
    arch: str
    machine_class: str
    state_dir: Path
    poll: float | None = None  # None: what the service's heartbeat answer says
    once: bool = False


class Agent:
    def __init__(
        self,
        config: RunnerConfig,
        client: Client,
        backend: Backend,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        crashpoints: Crashpoints | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self.backend = backend
        self.stop = stop or threading.Event()
        self.clock = clock
        self.crashpoints = crashpoints or Crashpoints(config.state_dir)
        self.poll = config.poll if config.poll is not None else DEFAULT_POLL
        self.last_heartbeat = float("-inf")
        self.jobs: dict[str, int] = {DONE: 0, FAILED: 0, DROPPED: 0, ABANDONED: 0}
        # A kept report (see the module's docstring) is tried again no sooner than this.
        self.retry_at = float("-inf")
        self.retry_delay = 0.0

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
                # A job this runner started before it went away (a reboot,
                # a crash) comes before any new one.
                resumed = inflight.load(self.config.state_dir)
                if resumed is not None:
                    wait = self.retry_at - self.clock()
                    if wait > 0 and not self.config.once:
                        # The service did not take the last try; heartbeats go on meanwhile.
                        self.stop.wait(min(wait, HEARTBEAT_EVERY))
                        continue
                    self.run_job(resumed.job, resumed)
                    if self.config.once:
                        break
                    continue
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

    def run_job(self, job: dict[str, Any], resumed: InFlight | None = None) -> str:
        name = label(job)
        if resumed is None:
            log.info("%s: claimed, %d boot(s)", name, job.get("boots", 0))
        elif resumed.failure is not None:
            log.info("%s: reporting the failure kept in the state directory", name)
        elif not resumed.under_way and resumed.boot >= int(job.get("boots", 0)):
            log.info("%s: uploading the %d boot(s) kept in the state directory", name, len(resumed.results))
        else:
            log.info("%s: resuming at boot %d of %d", name, resumed.boot + 1, job.get("boots", 0))
        consoles: list[str] = []
        try:
            if resumed is not None and resumed.failure is not None:
                # Decided before the agent went away: only the telling is
                # left. pstore is not looked at again (records the agent
                # could not clear before it went are stale: the next boot's
                # start clears them).
                outcome = self._report_failure(job, name, resumed.failure)
            else:
                outcome = self._execute(job, name, consoles, resumed)
        except NotHeld as error:
            log.warning("%s: dropped, the lease is no longer ours: %s", name, error.detail)
            outcome = DROPPED
        except ServerUnavailable as error:
            log.error(
                "%s: abandoned, the service is unreachable (%s); its lease will expire "
                "and the service will queue it again",
                name,
                error,
            )
            outcome = ABANDONED
        except BadToken:
            raise
        except BootFailure as failure:
            text = join_consoles([*consoles, failure.console])
            outcome = self._fail(job, name, "boot", failure.message, text)
        except BenchmarkFailure as failure:
            text = join_consoles([*consoles, failure.console])
            outcome = self._fail(job, name, "benchmark", failure.message, text)
        except (CannotResume, NotToldQuiet) as error:
            log.error("%s: %s", name, error)
            outcome = self._fail(job, name, "infra", str(error), join_consoles(consoles))
        # Anything else is this runner's fault, not the kernel's.
        except Exception as error:
            log.exception("%s: infrastructure error", name)
            message = f"{type(error).__name__}: {error}"
            text = join_consoles(consoles) + traceback.format_exc()
            outcome = self._fail(job, name, "infra", message, text)
        if outcome == ABANDONED and self._kept_for_retry():
            self.retry_delay = min(RETRY_MAX, max(self.poll, 2 * self.retry_delay))
            self.retry_at = self.clock() + self.retry_delay
            log.warning("%s: kept in %s, to be sent again in %.0f s", name, self.config.state_dir, self.retry_delay)
        else:
            # Reported one way or another (or left to its lease): nothing to resume.
            inflight.clear(self.config.state_dir)
            self.retry_at, self.retry_delay = float("-inf"), 0.0
        self.jobs[outcome] += 1
        return outcome

    def _spans_restarts(self) -> bool:
        """Whether the backend's boots outlive this process (its own resume() reads the outcome from outside it)."""
        return type(self.backend).resume is not Backend.resume

    def _kept_for_retry(self) -> bool:
        """Whether the in-flight record is to be tried again rather than dropped with the job.

        Any record of a backend whose boots outlive the agent: a result or a
        failure to report, or a boot under way whose outcome is still in
        pstore (read again next time; dropping the record would lose it).
        """
        return self._spans_restarts() and inflight.load(self.config.state_dir) is not None

    def _save_results(self, job: dict[str, Any], boot: int, results: list[dict[str, Any]], consoles: list[str]) -> None:
        """Write the finished boots (before boot `boot`) to the in-flight record, for a backend that spans restarts.

        Its resume() read the outcome from where it was (pstore), which is
        cleared once this record is on disk: from then on it is the only copy.
        """
        if self._spans_restarts():
            done = [{**record, "console": console} for record, console in zip(results, consoles)]
            state = InFlight(job, boot, self.backend.name, {}, done, under_way=False)
            inflight.save(self.config.state_dir, state)
            self._saved()

    def _saved(self) -> None:
        """The outcome is on disk: now, and only now, the backend may let go of its copy."""
        self.crashpoints.reached(OUTCOME_SAVED)
        self.backend.release()
        self.crashpoints.reached(PSTORE_CLEARED)

    def _execute(self, job: dict[str, Any], label: str, consoles: list[str], resumed: InFlight | None) -> str:
        job_id, boots = int(job["id"]), int(job["boots"])
        progress = Progress(self.client, job, self.clock, _tail)
        bench = get_benchmark(job["benchmark"])
        params = bench.validate(job["params"])
        results: list[dict[str, Any]] = []
        if resumed is not None:
            for earlier in resumed.results:
                consoles.append(str(earlier.get("console", "")))
                results.append({k: v for k, v in earlier.items() if k != "console"})
        # A record kept after its last boot has everything the upload needs:
        # no download, no compile, and above all no second look at pstore.
        if resumed is None or resumed.under_way or resumed.boot < boots:
            self._run_boots(job, label, bench, params, progress, results, consoles, resumed)
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
            "console_log": join_consoles(consoles),
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

    def _run_boots(
        self,
        job: dict[str, Any],
        label: str,
        bench: Benchmark,
        params: dict[str, Any],
        progress: Progress,
        results: list[dict[str, Any]],
        consoles: list[str],
        resumed: InFlight | None,
    ) -> None:
        """Prepare, then the job's boots from where `resumed` left off, each added to results and consoles."""
        boots = int(job["boots"])
        progress.update("preparing", 1, "downloading the kernel")
        if normalize_arch(job["arch"]) != normalize_arch(self.config.arch):
            raise RuntimeError(f"the job is for {job['arch']} but this runner boots {self.config.arch}")
        # Downloads and compiles come from the state directory's caches when
        # the job is resumed: same sha256, same sources, no work.
        artifacts = self.config.state_dir / "artifacts"
        kernel = download_kernel(self.client, artifacts, job, label, progress)
        extra = download_bench_artifacts(self.client, artifacts, job, label, bench, progress)
        progress.update("preparing", 1, f"compiling {bench.name} for {job['arch']}")
        binaries = compile_all(bench.sources(), job["arch"], self.config.state_dir)
        binaries.update(extra)
        commands = bench.command(params, self.backend.bindir)
        # A service from before clocks sends none: it meant the wall clock.
        clock = str(job.get("clock") or "wall")
        boot_job = BootJob(
            commands=commands,
            binaries=binaries,
            cmdline=str((job.get("kernel") or {}).get("cmdline") or ""),
            # A service from before THP modes sends none: the kernel's default.
            thp=str((job.get("kernel") or {}).get("thp") or ""),
            timeout=self.backend.timeout(bench.expected_seconds(params), len(commands), clock),
            clock=clock,
            vcpus=_count(job, "vcpus", "vCPUs"),
            numa_nodes=_count(job, "numa_nodes", "NUMA nodes"),
        )
        # Before any boot: a runner that cannot give the clock fails the
        # attempt as an infrastructure fault, not the kernel.
        self.backend.check_clock(boot_job.clock)
        first = 0 if resumed is None else resumed.boot
        # One job's boots all come from one backend.
        if resumed is not None and resumed.backend != self.backend.name:
            raise CannotResume(
                f"the runner restarted during boot {resumed.boot + 1} of {boots}, which the {resumed.backend} "
                f"backend started; this runner now boots with {self.backend.name}"
            )
        if resumed is not None and resumed.under_way:
            step = f"boot {resumed.boot + 1} of {boots}"
            progress.update("running", resumed.boot + 1, f"{step}: back from the kernel under test")
            try:
                result = self.backend.resume(boot_job, resumed.state)
            except CannotResume as error:
                raise CannotResume(f"the runner restarted during {step}: {error}") from None
            except Exception:
                # A failure read from pstore is as fragile as a result: kept
                # there until the report is on disk (_fail).
                self.crashpoints.reached(BOOT_READ)
                raise
            self.crashpoints.reached(BOOT_READ)
            progress.console(result.console)
            results.append(self._record(label, bench, params, boot_job, resumed.boot, boots, result))
            consoles.append(results[-1].pop("console"))
            first = resumed.boot + 1
            self._save_results(job, first, results, consoles)
        for index in range(first, boots):
            if index and self.stop.is_set():
                raise RuntimeError(f"runner {self.config.name} was stopped after boot {index} of {boots}")
            done = [{**record, "console": console} for record, console in zip(results, consoles)]
            results.append(self._boot(job, label, bench, params, boot_job, kernel, index, progress, done))
            consoles.append(results[-1].pop("console"))
            self._save_results(job, index + 1, results, consoles)

    def _boot(
        self,
        job: dict[str, Any],
        label: str,
        bench: Benchmark,
        params: dict[str, Any],
        boot_job: BootJob,
        kernel: Path,
        index: int,
        progress: Progress,
        earlier: list[dict[str, Any]],
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

        def commit(state: dict[str, Any], quiet_seconds: float) -> None:
            # Written before the boot begins: whatever happens to this
            # process from here on, the next start of the agent finds it.
            inflight.save(self.config.state_dir, InFlight(job, index, self.backend.name, state, earlier))
            if quiet_seconds > 0:
                log.info("%s: %s: the agent goes away for up to %.0f s", label, step, quiet_seconds)
                progress.going_quiet(quiet_seconds, f"{step}: in the kernel under test")

        # A phase of its own for every boot (backends.with_phase_seed); the
        # seed comes back in the boot's environment.
        state = self.backend.start(with_phase_seed(boot_job, secrets.randbits(32)), kernel, commit, on_console)
        result: BootResult = self.backend.resume(boot_job, state)
        return self._record(label, bench, params, boot_job, index, boots, result)

    def _record(
        self,
        label: str,
        bench: Benchmark,
        params: dict[str, Any],
        boot_job: BootJob,
        index: int,
        boots: int,
        result: BootResult,
    ) -> dict[str, Any]:
        """The boot's upload record (with its console), or BenchmarkFailure for output that does not parse."""
        try:
            samples = bench.parse(result.raw_output, params)
            operations = bench.operations(result.raw_output, params)
        except ValueError as error:
            raise BenchmarkFailure(f"boot {index + 1} of {boots}: {error}", result.console) from error
        log.info("%s: boot %d finished in %.1f s, %d samples", label, index + 1, result.seconds, len(samples))
        return boot_record(
            index,
            result,
            self.backend.name,
            boot_job.clock,
            bench,
            [{"metric": s.metric, "iteration": s.iteration, "value": s.value} for s in samples],
            operations,
        )

    def _fail(
        self,
        job: dict[str, Any],
        label: str,
        kind: str,
        message: str,
        text: str,
    ) -> str:
        log.error("%s: failed (%s): %s", label, kind, message)
        failure = {"kind": kind, "message": message, "log": text}
        if self._spans_restarts():
            # On disk before the report is sent, and before pstore (where a
            # boot failure was read from) is cleared: a power cut or a
            # service outage from here on delays the report, never loses it.
            record = inflight.load(self.config.state_dir)
            boot = record.boot if record is not None else 0
            kept = InFlight(job, boot, self.backend.name, under_way=False, failure=failure)
            inflight.save(self.config.state_dir, kept)
            self._saved()
        return self._report_failure(job, label, failure)

    def _report_failure(self, job: dict[str, Any], label: str, failure: dict[str, str]) -> str:
        body = {"attempt": job["attempt"], **failure}
        try:
            try:
                self.client.fail(int(job["id"]), body)
            except TooLarge as error:
                log.warning("%s: failure report refused as too large, sending the log's end: %s", label, error)
                self.client.fail(int(job["id"]), {**body, "log": _tail(failure["log"])})
        except NotHeld as error:
            log.warning(
                "%s: could not report the failure, no longer ours: %s",
                label,
                error.detail,
            )
            return DROPPED
        except (ServerUnavailable, BadAnswer) as error:
            log.error("%s: could not report the failure: %s", label, error)
            return ABANDONED
        except ProtocolError as error:
            if isinstance(error, BadToken):
                raise
            # The service understood and refused: asking again cannot
            # change its answer, so nothing is kept; the lease runs out.
            log.error("%s: the service refused the failure report: %s", label, error)
            inflight.clear(self.config.state_dir)
            return ABANDONED
        log.info("%s: failure reported (%s)", label, failure["kind"])
        return FAILED


def _count(job: dict[str, Any], key: str, label: str) -> int:
    """The guest CPUs or NUMA nodes the job asks for; 0, or none (a service from
    before they were sent): the backend's default."""
    value = job.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        # The service's mistake, not the kernel's: an infrastructure fault.
        raise RuntimeError(f"the job asks for {value!r} {label}; a count of 0 or more was expected")
    return value


def _tail(text: str) -> str:
    keep = RESEND_TAIL
    if len(text) <= keep:
        return text
    cut = len(text) - keep
    return f"[kperf-runner: {cut} characters cut here: the service refused them as too large]\n" + text[-keep:]
