"""End to end with two vCPUs: a regression only work across CPUs shows,
found through the service.

`make up --vcpus 2` gives the local class's guests two vCPUs on the
instruction clock. The `ipi-resched-slower` fixture
(kernel-builds/fixtures/ipi-resched-slower.patch) spins in the x86
reschedule IPI, which only a wake-up aimed at another CPU sends: spawn's
`cross-cpu` grid (unpinned fork, exit and wait) sends about one a fork. One
submission, its own stack; kernel-builds/tests/test_smp_kernels.py boots the
same kernels directly with one vCPU (where it sees nothing) and checks the
controls.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_fixtures import own_stack, verdicts, wait_final

from kperf_testing.prebuild import prebuilt
from kperf_testing.stack import RunningStack

pytestmark = [pytest.mark.kernel, pytest.mark.e2e]


@pytest.fixture(scope="module")
def smp_stack(tmp_path_factory: pytest.TempPathFactory, kperf_cache: Path, kernel_tree: Path) -> Iterator[RunningStack]:
    # The test cache's x86_64 kernels first, for their warm trees (tests/test_e2e.py, `stack_env`).
    assert all(r.ok for r in prebuilt(kernel_tree, kperf_cache, "x86_64"))
    with own_stack(tmp_path_factory, kperf_cache, "e2e-smp", ["--vcpus", "2"]) as running:
        yield running


def test_a_slower_cross_cpu_wakeup_is_a_regression_on_two_vcpus(smp_stack: RunningStack, kernel_tree: Path) -> None:
    started = time.monotonic()
    stack = smp_stack
    runners = stack.api("GET", "/runners").json()
    assert runners and {r["vcpus"] for r in runners} == {2}, runners
    resp = stack.api(
        "POST",
        "/submissions",
        {
            "tree": str(kernel_tree),
            "branch": "ipi-resched-slower",
            "base": "base",
            "benchmarks": ["spawn"],
            "grid": "cross-cpu",
        },
    )
    assert resp.status_code == 201, resp.text
    d = wait_final(stack, resp.json()["id"])
    print(f"two-vCPU submission {d['id']} finished in {time.monotonic() - started:.0f} s", flush=True)
    assert d["status"] == "done", d["error"]
    [comp] = d["comparisons"]
    assert (comp["benchmark"], comp["clock"], comp["vcpus"]) == ("spawn", "instructions", 2), comp
    v = verdicts(d)
    assert v == {"spawn-vmas-0-anycpu": "regression"}, comp
    [m] = comp["metrics"]
    # Measured directly: -3.0 to -3.5% (docs/kernels.md); the interval lies below zero.
    assert -5.0 < m["change_pct"] < -1.5 and m["ci_high_pct"] < 0, m
    assert m["base_boots"] >= 2 and m["head_boots"] >= 2
