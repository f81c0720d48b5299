"""aim9 and pft in the fixture kernel under QEMU TCG, as a runner runs them."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from kperf_runner.backends import BootJob
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.toolchain import compile_all

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="needs qemu-system-x86"),
]


@pytest.mark.parametrize(
    ("name", "overrides", "samples", "clock"),
    [
        ("aim9", {"testtime": 0.3, "iterations": 1}, 4, "wall"),
        ("pft", {"size_mb": 32, "clients": [1, 2], "iterations": 2}, 8, "wall"),
        ("pft", {"size_mb": 32, "clients": [2], "iterations": 2, "mode": "processes"}, 4, "wall"),
        # Several vCPUs on the instruction clock too (wall-clock guests have 2).
        ("aim9", {"testtime": 0.1, "iterations": 1}, 4, "instructions"),
    ],
)
def test_quick_runs_in_the_fixture_kernel(
    x86_64_kernel: Any, runner_state: Path, name: str, overrides: dict[str, Any], samples: int, clock: str
) -> None:
    build = x86_64_kernel
    assert build.ok, build.log_tail
    bench = get_benchmark(name)
    params = resolve_params(name, "quick", overrides)
    backend = QemuBackend("x86_64", runner_state, accel="tcg")
    commands = bench.command(params, backend.bindir)
    job = BootJob(
        commands,
        compile_all(bench.sources(), "x86_64", runner_state),
        timeout=backend.timeout(bench.expected_seconds(params), len(commands)),
        clock=clock,
        vcpus=2,
    )
    started = time.monotonic()
    result = backend.boot(job, build.artifacts["kernel"])
    print(f"{name} {overrides} boot under TCG: {time.monotonic() - started:.1f} s")
    assert result.environment["cpus"] == 2
    parsed = bench.parse(result.raw_output, params)
    assert len(parsed) == samples
    assert all(s.value > 0 for s in parsed)
    assert {s.metric for s in parsed} <= {m.name for m in bench.metrics(params)}
    if name == "pft":
        # The fragment has madvise(2): THP is turned off for the region itself.
        assert "thp_off=madvise" in result.raw_output
