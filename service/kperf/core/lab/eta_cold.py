"""The first estimates on a fresh lab: builds and jobs from the host's measured speed.

Before a lab has finished a build or a job, kperf.core.lab.eta_model had
nothing but fixed guesses (600 s a build, 120 s a job): a `quick`
submission was promised its first verdict 15 times later than it came,
and a grid whose boots take minutes would be promised one far too early. Here a short CPU probe, measured once per host
(kperf.core.lab.host_speed: `kperf-up` and `kperf-manage measure_host_speed`),
is held against the same probe on the reference host, where the durations
below were measured (docs/eta.md, "A fresh lab"), and each kind of work
takes the reference's duration scaled by how much slower or faster this
host is. As soon as a build or job of a kind is measured, it wins
(eta_model.History).

No Django here: the service passes what it read (the probe, the profile,
the benchmark's seconds from the registry), bench/eta_cold.py the same from
a record.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from kperf.core.lab.eta_model import Typical

# The probe: a fixed loop of integer arithmetic, dictionary updates and
# branches (what a compiler and QEMU's TCG do most: no floating point, no
# large memory), timed in the thread's CPU time, so a busy host (the load
# of a test run beside it) does not read as a slow one; the fastest of a
# few repeats, so an interrupt or a cold cache does not either.
PROBE_LOOPS = 1_000_000
PROBE_REPEATS = 5

# The probe on the reference host: the durations below come from VMs on
# which the x86_64 `tiny` base built cold in 308-355 s at nice 10 beside the
# service tests (docs/test-runs.md, 2026-11-29 afternoon, 2026-12-01 and
# 2026-12-02; the real queues of bench/records/eta-queue-2026-11-29*). None
# of those is left to probe: this is a 2-core Intel Xeon VM of 2026-12-07
# (CPython 3.11.7), taken to be of their speed, not checked by a build
# beside it (docs/eta.md, "A fresh lab", has how to redo it).
REFERENCE_PROBE_S = 0.222

# A clean build on the reference host with an empty ccache (a fresh lab's),
# per profile, x86_64: `tiny` 308-355 s, `mm` 316-364 s (docs/test-runs.md,
# 2026-12-01 and 2026-12-02); `distro` 4.2 times `mm`, as on 2026-11-28's
# VM (docs/kernels.md, "Profiles measured"; an upper bound, built beside a
# test run). An unknown profile is taken as `tiny`.
CLEAN_BUILD_S = {"tiny": 330.0, "mm": 340.0, "distro": 1430.0}
# arm64 (cross-compiled) against x86_64 on the same VMs: 256-306 s against
# 308-355 s.
ARCH_BUILD_FACTOR = {"x86_64": 1.0, "arm64": 0.85}
# A clean build whose every object is already in the ccache (a lab that
# built these sources before, under another database): 49 s and 71 s
# against 327 s cold on the VM of the two real queues (bench/records/
# eta-queue-2026-11-29*), 270 s against 961-1030 s on 2026-11-29 morning's.
CCACHE_WARM_FACTOR = 0.2
# An incremental build from a warm object tree: 9-13 s alone (docs/test-
# runs.md, 2026-12-01), 15-55 s beside boots (the real queues), 17-29 s
# across the profiles (docs/kernels.md); the middle of those.
INCREMENTAL_BUILD_S = {"tiny": 20.0, "mm": 25.0, "distro": 30.0}

# A job from its lease to its done, beyond the benchmark's commands: the
# kernel's download, QEMU's start, the boot, the upload. Fitted to the first
# real queue (bench/records/eta-queue-2026-11-29: spawn `quick` 12.5 s and
# aim9 `quick` 19.5 s at the median on the instruction clock, for 1.2 s and
# 2.4 s of guest time): 6 host seconds a guest second (TCG at about 1.7e8
# instructions a second, where KPERF_INSTRUCTION_CLOCK_RATE is the slow end
# that sizes refusals), and 5 s more.
JOB_OVERHEAD_S = 5.0
HOST_S_PER_GUEST_S = 6.0
# Each vCPU beyond the first under one host thread (the instruction clock):
# a spawn `quick` + pft `scaling` boot took 9-10, 10 and 13-14 s with 1, 2
# and 4 vCPUs (docs/kernels.md, "Profiles measured").
PER_EXTRA_VCPU = 0.13

# The range stated around a prior: the probe says how fast the host's CPU
# is, not how busy the lab will be; a build beside boots on two cores takes
# two to three times its time alone (docs/eta.md, "Running work").
LOW, HIGH = 0.5, 2.5


def _work(loops: int) -> int:
    x, acc = 12345, 0
    seen: dict[int, int] = {}
    for i in range(loops):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        k = x & 4095
        seen[k] = seen.get(k, 0) + (i & 7)
        acc = acc + k if x & 1 else acc ^ k
    return acc + len(seen)


def probe(loops: int = PROBE_LOOPS, repeats: int = PROBE_REPEATS) -> float:
    """CPU seconds the probe's loop takes on this host: the fastest of `repeats`."""
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        _work(loops)
        best = min(best, time.thread_time() - start)
    return best


@dataclass(frozen=True)
class HostSpeed:
    """A host's probe (CPU seconds), and whether its ccache already holds objects."""

    probe_s: float
    ccache_warm: bool = False

    @property
    def factor(self) -> float:
        """How many times longer work takes here than on the reference host."""
        return self.probe_s / REFERENCE_PROBE_S

    def about(self) -> str:
        return f"this host's probe {self.probe_s:.3f} s, {self.factor:.2f} x the reference host's time"


def _typical(seconds: float, what: str, speed: HostSpeed) -> Typical:
    low, high = seconds * LOW, seconds * HIGH
    return Typical(
        low, seconds, high, f"~{seconds:.0f} s {what}: none measured yet, {speed.about()}", (low, seconds, high)
    )


def build_prior(speed: HostSpeed, profile: str, arches: Iterable[str]) -> dict[str, Typical]:
    """A clean and an incremental build of `profile` (the slowest of `arches`) on this host."""
    arch_factor = max((ARCH_BUILD_FACTOR.get(a, 1.0) for a in arches), default=1.0)
    name = profile if profile in CLEAN_BUILD_S else "tiny"
    clean = CLEAN_BUILD_S[name] * arch_factor * speed.factor
    cache = ""
    if speed.ccache_warm:
        clean *= CCACHE_WARM_FACTOR
        cache = ", ccache warm"
    incremental = INCREMENTAL_BUILD_S[name] * arch_factor * speed.factor
    return {
        "clean": _typical(clean, f"clean {name} build{cache}", speed),
        "incremental": _typical(incremental, f"incremental {name} build", speed),
    }


def job_seconds(speed: HostSpeed, *, guest_s: float | None, fixed_s: float, clock: str, vcpus: int) -> float:
    """A job's seconds from lease to done on this host.

    `guest_s`: the seconds of the guest's clock the grid's commands run for
    (None when they do a fixed amount of work, which takes `fixed_s` host
    seconds under TCG, the registry's expected_seconds). On the instruction
    clock guest time is executed instructions, so it costs host time at the
    host's speed; on the wall clock it is real time, whatever the host.
    """
    if guest_s is None:
        host_bound, wall = fixed_s, 0.0
    elif clock == "instructions":
        host_bound, wall = guest_s * HOST_S_PER_GUEST_S, 0.0
    else:
        host_bound, wall = 0.0, guest_s
    extra = max(vcpus, 1) - 1
    cpu = (JOB_OVERHEAD_S + host_bound) * (1 + PER_EXTRA_VCPU * extra if clock == "instructions" else 1.0)
    return cpu * speed.factor + wall


def job_prior(speed: HostSpeed, seconds: float, benchmark: str, grid: str) -> Typical:
    return _typical(seconds, f"{benchmark} {grid} job", speed)
