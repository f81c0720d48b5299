"""The host's speed, measured once where the lab starts, and the priors the ETA takes from it.

`kperf-up` runs `measure` after its migrations, on the host that builds and
boots (docs/eta.md, "A fresh lab"); a lab laid out otherwise runs
`kperf-manage measure_host_speed` there. kperf.core.lab.eta reads the newest
measure through `prior` and uses it only for kinds of work the lab has not
measured yet.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings

from kperf.core import benchmarks
from kperf.core.lab import eta_cold
from kperf.core.lab.eta_model import Prior, Typical
from kperf.core.models import HostSpeed, MachineClass
from kperf_runner import benchmarks as registry

# A ccache holding this much holds some tree's objects: a `tiny` kernel's
# are tens of MiB. The walk stops there, so a large cache costs no more.
CCACHE_WARM_BYTES = 8 * 1024 * 1024


def ccache_bytes(root: Path, cap: int = CCACHE_WARM_BYTES) -> int:
    """Bytes of the files under `root`, counted until `cap` is reached (0 when it does not exist)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += (Path(folder) / name).stat().st_size
            except OSError:
                continue  # removed by a cleanup meanwhile
            if total >= cap:
                return total
    return total


def measure() -> HostSpeed:
    """Run the probe on this host and keep its result (a second or two of one core)."""
    return HostSpeed.objects.create(
        hostname=socket.gethostname()[:255],
        probe_seconds=eta_cold.probe(),
        python=platform.python_version(),
        ccache_bytes=ccache_bytes(Path(settings.KPERF_CCACHE_DIR)),
    )


def latest() -> eta_cold.HostSpeed | None:
    row = HostSpeed.objects.order_by("-measured", "-pk").first()
    if row is None:
        return None
    return eta_cold.HostSpeed(row.probe_seconds, ccache_warm=row.ccache_bytes >= CCACHE_WARM_BYTES)


def _job(speed: eta_cold.HostSpeed, mclass: MachineClass, benchmark: str, grid: str) -> Typical | None:
    try:
        _, params = benchmarks.grid_for(benchmark, grid, mclass.clock)
    except benchmarks.BenchmarkChoiceError:
        return None  # a grid the registry no longer has: the fixed default
    bench = registry.get_benchmark(benchmark)
    seconds = eta_cold.job_seconds(
        speed,
        guest_s=bench.guest_seconds(params),
        fixed_s=bench.expected_seconds(params),
        clock=mclass.clock,
        vcpus=mclass.vcpus,
    )
    return eta_cold.job_prior(speed, seconds, benchmark, grid)


def prior(
    profile: str, arches: Iterable[str], classes: Iterable[MachineClass], work: Iterable[tuple[str, str]]
) -> Prior | None:
    """Builds of `profile` for `arches`, and each (benchmark, grid) of `work` on each class, on this host.

    None when no host was measured: the ETA then says it rests on the fixed defaults.
    """
    speed = latest()
    if speed is None:
        return None
    jobs: dict[tuple[str, str, str], Typical] = {}
    for mclass in classes:
        for benchmark, grid in set(work):
            t = _job(speed, mclass, benchmark, grid)
            if t is not None:
                jobs[(mclass.name, benchmark, grid)] = t
    return Prior(builds=eta_cold.build_prior(speed, profile, arches), jobs=jobs)
