"""Real builds of the configuration profiles: the mm profile has what it promises
and boots; a regression in code only it builds leaves the tiny profile's
image byte for byte the same (docs/kernels.md)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from kperf_kbuild.driver import parse_fragment
from kperf_runner.backends import BenchmarkFailure, BootJob
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.toolchain import compile_all
from kperf_testing.kbuild import build_fixture_kernel

pytestmark = pytest.mark.kernel

MM_OPTIONS = {
    "CONFIG_MEMCG": "y",
    "CONFIG_BLOCK": "y",
    "CONFIG_SWAP": "y",
    "CONFIG_ZRAM": "y",
    "CONFIG_NUMA": "y",
    "CONFIG_LRU_GEN": "y",
    "CONFIG_LRU_GEN_ENABLED": "y",
    "CONFIG_PREEMPT_VOLUNTARY": "y",
    "CONFIG_X86_INTEL_PSTATE": "y",
    "CONFIG_SLUB": "y",
    "CONFIG_TRANSPARENT_HUGEPAGE": "y",
}


def digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_a_memcg_regression_is_not_in_the_tiny_profile_s_kernel(
    kernel_tree: Path, kperf_cache: Path, x86_64_kernel: Any
) -> None:
    tiny = build_fixture_kernel(kernel_tree, "memcg-charge-slower", "x86_64", kperf_cache)
    assert tiny.ok, tiny.error
    # tinyconfig has no CONFIG_MEMCG: mm/memcontrol.c is not compiled, and the
    # reproducible build gives the base's image to the byte. No boot of the tiny
    # profile, on any number of vCPUs, can see this regression.
    assert digest(tiny.artifacts["kernel"]) == digest(x86_64_kernel.artifacts["kernel"])
    assert parse_fragment(Path(tiny.artifacts["config"]).read_text()).get("CONFIG_MEMCG", "n") == "n"


def test_the_mm_profile_has_what_it_promises_and_measures_the_memcg_charge(
    kernel_tree: Path, kperf_cache: Path, tmp_path: Path
) -> None:
    base = build_fixture_kernel(kernel_tree, "base", "x86_64", kperf_cache, profile="mm")
    assert base.ok, base.error
    options = parse_fragment(Path(base.artifacts["config"]).read_text())
    assert {k: options.get(k, "n") for k in MM_OPTIONS} == MM_OPTIONS
    # 6.1's zram has no backends of its own (6.12's option): said, not dropped silently.
    assert base.warnings == ["configuration: options not applied: CONFIG_ZRAM_BACKEND_LZO (wanted y, got n)"]
    slow = build_fixture_kernel(kernel_tree, "memcg-charge-slower", "x86_64", kperf_cache, profile="mm")
    assert slow.ok, slow.error
    backend = QemuBackend("x86_64", tmp_path / "runner", accel="tcg")
    bench = get_benchmark("pft")
    params = resolve_params("pft", "quick", clock="instructions")
    commands = bench.command(params, backend.bindir)
    binaries = compile_all(bench.sources(), "x86_64", tmp_path / "runner")
    rates = {}
    for name, build in (("base", base), ("slow", slow)):
        job = BootJob(commands, binaries, timeout=600, clock="instructions")
        result = backend.boot(job, Path(build.artifacts["kernel"]))
        values = [s.value for s in bench.parse(result.raw_output, params) if s.metric == "faults/sec-threads-1"]
        rates[name] = sum(values) / len(values)
    change = (rates["slow"] - rates["base"]) / rates["base"] * 100
    # Sized for 1-3% of a fault's instructions (measured -2.6% on 2026-11-28).
    assert -3.5 < change < -1.0, rates


def test_an_mm_kernel_swaps_to_zram_inside_a_limited_memcg_across_two_numa_nodes(
    kernel_tree: Path, kperf_cache: Path, x86_64_kernel: Any, tmp_path: Path
) -> None:
    base = build_fixture_kernel(kernel_tree, "base", "x86_64", kperf_cache, profile="mm")
    assert base.ok, base.error
    backend = QemuBackend("x86_64", tmp_path / "runner", accel="tcg")
    bench = get_benchmark("pft")
    params = resolve_params("pft", "memcg-swap", clock="instructions")
    commands = bench.command(params, backend.bindir)
    assert commands[0][1:3] == ["-c", "32"]
    binaries = compile_all(bench.sources(), "x86_64", tmp_path / "runner")
    job = BootJob(commands, binaries, timeout=900, clock="instructions", vcpus=2, numa_nodes=2)
    result = backend.boot(job, Path(base.artifacts["kernel"]))
    env = result.environment
    assert env["swap"].startswith("zram ") and env["swap_total_kb"] > 100_000, env
    assert env["numa_nodes"] == 2 and env["cpus"] == 2, env
    assert result.details["numa_nodes"] == 2
    # Past the 32 MiB limit every fault reclaimed a page of the region to swap:
    # at least half of the 3 x 16384 pages went out (the rest is the kernel's own).
    [run] = result.commands
    assert run.vmstat is not None and run.vmstat.get("pswpout", 0) >= 3 * 16384 // 2, run.vmstat
    samples = bench.parse(result.raw_output, params)
    assert {s.metric for s in samples} == {"faults/sec-threads-1-memcg32m", "faults/cpu-threads-1-memcg32m"}
    # The tiny profile has neither memcg nor zram: the job fails, saying what to boot instead.
    with pytest.raises(BenchmarkFailure) as failed:
        backend.boot(
            BootJob(commands, binaries, timeout=600, clock="instructions"), Path(x86_64_kernel.artifacts["kernel"])
        )
    assert "-c needs swap and this machine has none" in failed.value.message
