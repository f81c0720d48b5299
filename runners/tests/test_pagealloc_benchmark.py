"""pagealloc: the registry entry, its parser on captured module output, the
native refusals, kmodload's errors, and (kernel-marked) the module built with
the fixture kernel and run under QEMU."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kperf_runner.backends import BootJob
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import Metric, get_benchmark, pagealloc_batches, resolve_params
from kperf_runner.cli import module_vermagic, native_artifacts
from kperf_runner.toolchain import compile_all, compile_static, host_arch

PAGEALLOC = get_benchmark("pagealloc")
DATA = Path(__file__).parent / "data"
QUICK = resolve_params("pagealloc", "quick")


def test_batches_follow_the_spec() -> None:
    # batch doubles from 1 while batch < (128 MiB / 4096) >> order.
    assert pagealloc_batches(0, 128 * 1024) == [2**i for i in range(15)]  # 1..16384
    assert pagealloc_batches(4, 128 * 1024) == [2**i for i in range(11)]  # 1..1024
    assert pagealloc_batches(0, 4096) == [2**i for i in range(10)]  # quick: 1..512
    assert pagealloc_batches(4, 8) == []


def test_grids_commands_and_metrics() -> None:
    assert resolve_params("pagealloc", "full") == {
        "orders": [0, 1, 2, 3, 4],
        "batch_limit_kb": 131072,
        "outer": 15,
        "inner": 10000,
    }
    assert PAGEALLOC.grids["full"].boots == 5 and PAGEALLOC.grids["quick"].boots == 4
    assert PAGEALLOC.command(QUICK, "/kperf/bin") == [
        [
            "/kperf/bin/kmodload", "-c", "0", "-o", "/proc/kperf_pagealloc", "/kperf/bin/pagealloc.ko",
            "orders=0,1,2,3,4", "batch_limit_kb=4096", "outer=3", "inner=100",
        ]
    ]  # fmt: skip
    metrics = PAGEALLOC.metrics(QUICK)
    assert len(metrics) == 3 * (10 + 9 + 8 + 7 + 6)
    assert metrics[:3] == [
        Metric("alloc-odr0-1", "cycles", False),
        Metric("free-odr0-1", "cycles", False),
        Metric("total-odr0-1", "cycles", False),
    ]
    full = PAGEALLOC.metrics(resolve_params("pagealloc", "full"))
    assert {"alloc-odr0-16384", "total-odr4-1024"} <= {m.name for m in full}
    assert "alloc-odr0-32768" not in {m.name for m in full}
    assert PAGEALLOC.artifacts() == ["pagealloc.ko"]
    assert PAGEALLOC.sources() == ["kmodload.c"]


def test_parse_captured_module_output() -> None:
    raw = (DATA / "pagealloc-quick-qemu-x86_64.txt").read_text()
    samples = PAGEALLOC.parse(raw, QUICK)
    assert len(samples) == 3 * 3 * 40
    by_key = {(s.metric, s.iteration): s.value for s in samples}
    # Round r of "order 0 batch 1" is iteration r; total = alloc + free.
    rows = [line.split() for line in raw.splitlines() if line.startswith("order  0 batch      1 ")]
    assert len(rows) == 3
    for iteration, row in enumerate(rows):
        assert by_key[("alloc-odr0-1", iteration)] == float(row[5])
        assert by_key[("free-odr0-1", iteration)] == float(row[7])
        assert by_key[("total-odr0-1", iteration)] == float(row[5]) + float(row[7])
    assert all(s.value > 0 for s in samples)
    assert PAGEALLOC.environment(raw) == {"cycle_clock": "tsc"}
    assert PAGEALLOC.environment("no clock line\n") == {}


def test_parse_captured_arm64_output_names_the_virtual_counter() -> None:
    # arm64's get_cycles() reads CNTVCT_EL0, 62.5 MHz under QEMU: few ticks
    # per block, integers as the format has them.
    raw = (DATA / "pagealloc-quick-qemu-arm64.txt").read_text()
    samples = PAGEALLOC.parse(raw, QUICK)
    assert len(samples) == 3 * 3 * 40
    assert all(s.value >= 1 for s in samples)
    assert PAGEALLOC.environment(raw) == {"cycle_clock": "cntvct"}


def _raw(outer: int = 2, skip: tuple[int, int] | None = None) -> str:
    lines = ["clock: tsc"]
    for order in (0, 1):
        for batch in pagealloc_batches(order, 16):
            if (order, batch) != skip:
                lines += [f"order {order:2d} batch {batch:6d} alloc 400 free 200"] * outer
    return "\n".join(lines) + "\n"


PARAMS = resolve_params("pagealloc", "quick", {"orders": [0, 1], "batch_limit_kb": 16, "outer": 2})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", r"incomplete output for order 0 batch 1 \(0 of 2\), order 0 batch 2 \(0 of 2\), order 1 batch 1"),
        (_raw(skip=(1, 1)), r"incomplete output for order 1 batch 1 \(0 of 2\);"),
        (_raw(outer=1), r"order 0 batch 1 \(1 of 2\)"),
        (_raw() + "order  0 batch      1 alloc 400 free 200\n", "is round 3 of order 0 batch 1"),
        (_raw() + "order  0 batch      4 alloc 400 free 200\n", "order 0 batch 4, which the job's parameters"),
        (_raw() + "order  0 batch      1 alloc -4 free 200\n", "malformed result on output line 8"),
    ],
)
def test_parse_errors_say_what_is_wrong(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PAGEALLOC.parse(raw, PARAMS)


def _bench(runner_state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kperf_runner.cli", "bench", "pagealloc", "--state-dir", str(runner_state), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_native_run_without_the_module_says_it_needs_a_kperf_kernel(runner_state: Path) -> None:
    run = _bench(runner_state)
    assert run.returncode == 2
    assert "pagealloc needs pagealloc.ko" in run.stderr
    assert "runs natively only on a kperf-built kernel" in run.stderr


def test_native_run_refuses_a_module_of_another_kernel(runner_state: Path, tmp_path: Path) -> None:
    module = tmp_path / "pagealloc.ko"
    module.write_bytes(b"\x7fELF....\0name=pagealloc\0vermagic=6.1.0-kperf SMP mod_unload \0")
    assert module_vermagic(module) == "6.1.0-kperf"
    run = _bench(runner_state, "--artifact", f"pagealloc.ko={module}")
    assert run.returncode == 2
    assert "was built for kernel 6.1.0-kperf but this machine runs" in run.stderr
    with pytest.raises(ValueError, match=r"spawn uses no artifact pagealloc\.ko; it needs none"):
        native_artifacts("spawn", [], [f"pagealloc.ko={module}"])
    with pytest.raises(ValueError, match="does not exist"):
        native_artifacts("pagealloc", ["pagealloc.ko"], [f"pagealloc.ko={tmp_path / 'missing.ko'}"])
    with pytest.raises(ValueError, match="--artifact wants NAME=PATH"):
        native_artifacts("pagealloc", ["pagealloc.ko"], ["pagealloc.ko"])


@pytest.fixture(scope="module")
def kmodload(runner_state: Path) -> Path:
    return compile_static("kmodload.c", host_arch(), runner_state)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/nonexistent/pagealloc.ko"], "open /nonexistent/pagealloc.ko: No such file"),
        (["/dev/null", "outer"], "module parameter 'outer' is not param=value"),
        (["-c", "x", "/dev/null"], "-c wants a CPU number"),
    ],
)
def test_kmodload_exits_non_zero_with_a_message(kmodload: Path, args: list[str], message: str) -> None:
    run = subprocess.run([str(kmodload), *args], capture_output=True, text=True, check=False)
    assert run.returncode != 0
    assert message in run.stderr


# -- the module, built with the fixture kernel, under QEMU ----------------------------


@pytest.mark.kernel
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="needs qemu-system-x86")
def test_the_module_builds_with_the_kernel_and_runs_under_qemu(
    x86_64_kernel: Any,
    runner_state: Path,
) -> None:
    build = x86_64_kernel
    assert build.ok, build.log_tail
    assert build.warnings == []
    module = build.artifacts["pagealloc.ko"]
    assert module_vermagic(module) == "6.1.192+"
    params = resolve_params("pagealloc", "quick", {"inner": 50})
    backend = QemuBackend("x86_64", runner_state, accel="tcg")
    binaries = compile_all(PAGEALLOC.sources(), "x86_64", runner_state)
    binaries["pagealloc.ko"] = module
    commands = PAGEALLOC.command(params, backend.bindir)
    timeout = backend.timeout(PAGEALLOC.expected_seconds(params), len(commands))
    started = time.monotonic()
    result = backend.boot(BootJob(commands, binaries, timeout=timeout), build.artifacts["kernel"])
    print(f"pagealloc quick boot under TCG: {time.monotonic() - started:.1f} s")
    samples = PAGEALLOC.parse(result.raw_output, params)
    assert len(samples) == len(PAGEALLOC.metrics(params)) * params["outer"]
    assert all(s.value > 0 for s in samples)
    assert PAGEALLOC.environment(result.raw_output) == {"cycle_clock": "tsc"}
    # The module's procfs file went with it: kmodload unloaded it.
    assert "kmodload: module=pagealloc cpu=0" in result.raw_output
