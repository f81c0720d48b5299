"""End to end on arm64: a submission for arm64 is built with the cross
compiler, booted under qemu-system-aarch64 with the instruction clock, and
judged per arm64 machine class, on the page and in the API.

One submission, kept as cheap as the suite allows: the `fork-slow` fixture
(kernel-builds/fixtures/fork-slow.patch) busy-waits in every fork, so the
spawn benchmark's quick grid finds the regression on arm64 as on x86_64
(tests/test_e2e.py). A stack of its own: kperf-up's local runner is one
QEMU architecture, here arm64.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_fixtures import own_stack, verdicts, wait_final, web_page

from kperf_testing.prebuild import prebuilt
from kperf_testing.stack import RunningStack

pytestmark = [pytest.mark.kernel, pytest.mark.e2e]


@pytest.fixture(scope="module")
def arm64_stack(
    tmp_path_factory: pytest.TempPathFactory, kperf_cache: Path, kernel_tree: Path
) -> Iterator[RunningStack]:
    # The arm64 base in the test cache first: the stack's build of it then
    # finds it built in the lab's warm tree (tests/test_e2e.py, `stack_env`).
    assert all(r.ok for r in prebuilt(kernel_tree, kperf_cache, "arm64"))
    with own_stack(tmp_path_factory, kperf_cache, "e2e-arm64", ["--arch", "arm64"]) as running:
        yield running


def test_a_fork_slowdown_submitted_for_arm64_is_an_arm64_spawn_regression(
    arm64_stack: RunningStack, kernel_tree: Path
) -> None:
    started = time.monotonic()
    stack = arm64_stack
    runners = stack.api("GET", "/runners").json()
    # One local runner per core, every one of them an arm64 runner of the arm64 class.
    assert runners and {(r["machine_class"], r["arch"]) for r in runners} == {("qemu-arm64", "arm64")}, runners
    resp = stack.api(
        "POST",
        "/submissions",
        {"tree": str(kernel_tree), "branch": "fork-slow", "base": "base", "benchmarks": ["spawn"], "arches": ["arm64"]},
    )
    assert resp.status_code == 201, resp.text
    d = wait_final(stack, resp.json()["id"])
    print(f"arm64 submission {d['id']} finished in {time.monotonic() - started:.0f} s", flush=True)
    assert d["status"] == "done", d["error"]
    assert d["arches"] == ["arm64"]
    assert {b["arch"] for b in d["builds"]} == {"arm64"}
    assert {j["machine_class"] for j in d["jobs"]} == {"qemu-arm64"}

    [comp] = d["comparisons"]
    assert (comp["machine_class"], comp["benchmark"], comp["clock"]) == ("qemu-arm64", "spawn", "instructions")
    v = verdicts(d)
    assert v["spawn-vmas-0"] == "regression", comp
    assert "improvement" not in v.values()
    m0 = next(m for m in comp["metrics"] if m["metric"] == "spawn-vmas-0")
    assert m0["change_pct"] < 0 and m0["ci_high_pct"] < 0
    # Every boot ran on the same tuned machine (csrc/init_tuning.h): no settings warning.
    assert comp["tuning_differences"] == [], comp["tuning_differences"]
    # QEMU's virt machine emulates arm64's PMU, so every boot counted its
    # instructions (under the instruction clock a cycle is an instruction).
    assert comp["perf_boots"] == {"base": m0["base_boots"], "head": m0["head_boots"]}
    perf = {r["counter"]: r for r in comp["perf_counters"]}
    assert perf["instructions"]["base_per_boot"] > 0 and perf["instructions"]["head_per_boot"] > 0
    assert perf["instructions_per_cycle"]["base_per_boot"] == pytest.approx(1.0)

    page = web_page(stack, f"/submissions/{d['id']}")
    assert "spawn on qemu-arm64" in page and 'data-clock="instructions"' in page
    assert 'data-metric="spawn-vmas-0"' in page and "verdict-regression" in page
    assert "different machine settings" not in page and 'data-perf-counter="instructions"' in page
    # What each boot recorded: the tuning facts and why there are no hardware counts.
    console = web_page(stack, f"/jobs/{d['jobs'][0]['id']}/console")
    assert "KPERF-ENV drop_caches=before every command" in console
    assert "KPERF-ENV aslr=" in console and "KPERF-ENV boost=" in console
    assert "KPERF-ENV perf_counters=instructions,cycles user+kernel" in console
    assert re.search(r"KPERF-PERF 0 instructions=[1-9]\d* cycles=[1-9]\d*", console), console[-2000:]
