"""The agent's bookkeeping for one job: progress calls, labels, the boot records it uploads."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from . import __version__
from .backends import BootResult
from .benchmarks import Benchmark, Operations
from .client import BadAnswer, BadToken, Client, NotHeld, ProtocolError, ServerUnavailable, TooLarge
from .counters import per_command_counters
from .toolchain import COMMON_HEADER, CSRC

log = logging.getLogger(__name__)

CONSOLE_EVERY = 3.0
# The most lease the service adds for a quiet runner (docs/runner-protocol.md).
QUIET_MAX = 21600


class NotToldQuiet(RuntimeError):
    """The service could not be told that the agent goes quiet: the boot must not begin (an infrastructure fault)."""


class Progress:
    """Progress calls for one job: phase changes at once, console in batches.

    Console text is held back and sent at most every CONSOLE_EVERY seconds;
    with nothing to send, a call still goes out every keepalive seconds so
    the lease never lapses during a long, quiet benchmark.
    """

    def __init__(
        self,
        client: Client,
        job: dict[str, Any],
        clock: Callable[[], float],
        tail: Callable[[str], str],
    ) -> None:
        self.client = client
        self.tail = tail  # the agent's cut of a console the service refused as too large
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

    def going_quiet(self, seconds: float, message: str) -> None:
        """Tell the service the agent cannot call for `seconds` (a reboot into the kernel under test).

        Unlike every other progress call this one must arrive: without it the
        lease runs out while the machine is away and the job is handed to
        another runner. NotToldQuiet when it did not (after the client's own
        retries), so that the caller neither arms the watchdog nor jumps;
        NotHeld and BadToken as they are.
        """
        self.message = message
        quiet = max(0, min(QUIET_MAX, int(seconds) + 1))
        try:
            self._deliver({**self._payload(), "quiet_seconds": quiet})
        except (NotHeld, BadToken):
            raise
        except (ServerUnavailable, BadAnswer, ProtocolError) as error:
            raise NotToldQuiet(
                f"the service could not be told that the runner goes quiet for {quiet} s ({error}), so the "
                "kernel under test was not booted: its lease would have run out while the machine was away. "
                "The job is tried again; if this repeats, check the runner's connection to the service"
            ) from error
        self.pending = []
        self.last_call = self.clock()

    def _payload(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "phase": self.phase,
            "boot": self.boot,
            "boots": self.boots,
            "message": self.message,
            "console": "".join(self.pending),
        }

    def send(self) -> None:
        payload = self._payload()
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
        consoles = list(dict.fromkeys((payload["console"], self.tail(payload["console"]), "")))
        for n, console in enumerate(consoles, 1):
            try:
                self.client.progress(self.job_id, {**payload, "console": console})
                return
            except TooLarge as error:
                if n == len(consoles):
                    raise
                log.warning("job %d: progress refused as too large, sending less console: %s", self.job_id, error)


def label(job: dict[str, Any]) -> str:
    kernel = job.get("kernel") or {}
    sha = str(kernel.get("sha", ""))[:12]
    return (
        f"job {job.get('id')} attempt {job.get('attempt')} "
        f"({job.get('benchmark')}/{job.get('grid')}, build {kernel.get('build_id')} {sha})"
    )


def join_consoles(consoles: list[str]) -> str:
    if len(consoles) == 1:
        return consoles[0]
    return "".join(
        f"--- kperf: console of boot {index + 1} ---\n{console}" for index, console in enumerate(consoles) if console
    )


def sources_digest(bench: Benchmark) -> str:
    """sha256 over the benchmark's C sources and the init, in a fixed order."""
    h = hashlib.sha256()
    # Every header is part of some source (init.c includes init_tuning.h and
    # init_output.h): all of them, as toolchain's compile cache key has them.
    headers = {path.name for path in CSRC.glob("*.h")}
    for name in sorted({*bench.sources(), "init.c", COMMON_HEADER, *headers}):
        h.update(name.encode() + b"\0" + (CSRC / name).read_bytes())
    return h.hexdigest()


def boot_record(
    index: int,
    result: BootResult,
    backend: str,
    clock: str,
    bench: Benchmark,
    samples: list[dict[str, Any]],
    operations: Operations | None = None,
) -> dict[str, Any]:
    """One boot as the results upload carries it, plus its "console" (taken out before the upload).

    operations: what each command performed (Benchmark.operations), sent
    with the commands' own hardware counts for counts per operation.
    """
    # What ran, as well as where: a change to the runner or to a
    # benchmark's C source, or a different accelerator, must show in the
    # data rather than silently shift it.
    environment = dict(result.environment)
    environment["runner_version"] = __version__
    environment["backend"] = backend
    environment.update({k: v for k, v in result.details.items() if k in ENVIRONMENT_DETAILS})
    # Which clock timed the samples: they are comparable only with samples of the same clock.
    environment["clock"] = clock
    environment["bench_sources_sha256"] = sources_digest(bench)
    # What the benchmark itself states about the run (pagealloc: which
    # cycle counter get_cycles() read).
    environment.update(bench.environment(result.raw_output))
    return {
        "boot": index,
        "environment": environment,
        "raw_output": result.raw_output,
        "samples": samples,
        # The kernel's own account of the run (/proc/vmstat deltas): shown
        # beside the verdicts, never judged.
        "counters": {
            **result.counters,
            **per_command_counters({c.index: c.perf for c in result.commands if c.perf}, operations or {}),
        },
        "console": result.console,
    }


# The backend details that are facts about where a benchmark ran: qemu's
# accelerator, instruction clock and version (instruction counts move with
# it); kexec's machine and its own kernel.
ENVIRONMENT_DETAILS = ("accel", "icount", "qemu_version", "machine_hostname", "machine_kernel_release")
