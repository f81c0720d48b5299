"""pagealloc: the registry entry, its parser on captured module output, what
mmtests reads of it, the native refusals, kmodload's errors, and
(kernel-marked) the module built with the fixture kernel and run under QEMU."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mmtests_tools import MMTESTS, extract, needs_mmtests, write_runs

from kperf_runner.backends import Backend, BootJob, BootResult
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import (
    Metric,
    Pagealloc,
    get_benchmark,
    pagealloc_batches,
    pagealloc_log,
    resolve_params,
)
from kperf_runner.cli import module_vermagic, native_artifacts
from kperf_runner.toolchain import compile_all, compile_static, host_arch

_registered = get_benchmark("pagealloc")
assert isinstance(_registered, Pagealloc)  # rounds() is pagealloc's own
PAGEALLOC = _registered
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
            "/kperf/bin/kmodload", "-c", "0", "-s", "-o", "/proc/kperf_pagealloc", "/kperf/bin/pagealloc.ko",
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


def _rows(raw: str, order: int, batch: int) -> list[list[str]]:
    return [line.split() for line in raw.splitlines() if line.startswith(f"order {order:2d} batch {batch:6d} ")]


def test_parse_captured_module_output() -> None:
    raw = (DATA / "pagealloc-quick-qemu-x86_64.txt").read_text()
    samples = PAGEALLOC.parse(raw, QUICK)
    by_key = {(s.metric, s.iteration): s.value for s in samples}
    # The first two rounds of each batch size are warm-up, counted per batch
    # size across orders as mmtests does: order 0 (run first) keeps its third
    # round of 3, orders 1-4 reuse batch sizes order 0 warmed and keep all 3.
    assert len(samples) == 3 * (10 * 1 + (9 + 8 + 7 + 6) * 3)
    first = _rows(raw, 0, 1)
    assert len(first) == 3 and first[0][5] == "1814"  # a cold first round, left out
    assert [k for k in by_key if k[0] == "alloc-odr0-1"] == [("alloc-odr0-1", 0)]
    assert by_key[("alloc-odr0-1", 0)] == float(first[2][5])
    assert by_key[("free-odr0-1", 0)] == float(first[2][7])
    assert by_key[("total-odr0-1", 0)] == float(first[2][5]) + float(first[2][7])
    for iteration, row in enumerate(_rows(raw, 1, 1)):
        assert by_key[("alloc-odr1-1", iteration)] == float(row[5])
        assert by_key[("total-odr1-1", iteration)] == float(row[5]) + float(row[7])
    assert all(s.value > 0 for s in samples)
    assert PAGEALLOC.environment(raw) == {"cycle_clock": "tsc"}
    assert PAGEALLOC.environment("no clock line\n") == {}
    # Run alone (kmodload -s): the CPUs it took offline, or none on a machine of one.
    solo = "kmodload: module=pagealloc cpu=0 solo offlined={} params=orders=0\nclock: tsc\n"
    assert PAGEALLOC.environment(solo.format("1,2,3")) == {"cycle_clock": "tsc", "offlined_cpus": "1,2,3"}
    assert PAGEALLOC.environment(solo.format("none"))["offlined_cpus"] == "none"
    # Every round stays in the raw output.
    assert len(PAGEALLOC.rounds(raw, QUICK)) == 3 * 40


def test_parse_captured_arm64_output_names_the_virtual_counter() -> None:
    # arm64's get_cycles() reads CNTVCT_EL0, 62.5 MHz under QEMU: few ticks
    # per block, integers as the format has them.
    raw = (DATA / "pagealloc-quick-qemu-arm64.txt").read_text()
    samples = PAGEALLOC.parse(raw, QUICK)
    assert len(samples) == 3 * (10 * 1 + (9 + 8 + 7 + 6) * 3)
    assert all(s.value >= 1 for s in samples)
    assert PAGEALLOC.environment(raw) == {"cycle_clock": "cntvct"}


# mmtests 74aced35, ExtractPagealloc.pm: every line of pagealloc.log is split on
# whitespace into order (field 1), batch (3), alloc (5) and free (7) (lines
# 31-39); each batch size seen is counted across orders and a line is a sample
# from its batch size's third on (lines 41-49); the metrics are every order
# (from the alloc-<order> file names, lines 20-26) with every batch size
# (lines 52-58).
def _mmtests_read(log: str) -> tuple[list[str], dict[str, list[float]]]:
    """(batch sizes in the order seen, {metric: samples}) by ExtractPagealloc.pm's rules."""
    seen: Counter[str] = Counter()
    batches: list[str] = []
    samples: dict[str, list[float]] = {}
    for line in log.splitlines(keepends=True):
        fields = re.split(r"\s+", line)
        order, batch, alloc, free = (fields + [""] * 8)[1:8:2]
        seen[batch] += 1
        if seen[batch] == 1:
            batches.append(batch)
        if seen[batch] >= 3:
            samples.setdefault(f"alloc-odr{order}-{batch}", []).append(float(alloc))
            samples.setdefault(f"free-odr{order}-{batch}", []).append(float(free))
            samples.setdefault(f"total-odr{order}-{batch}", []).append(float(alloc) + float(free))
    return batches, samples


def test_the_raw_output_itself_is_not_what_mmtests_reads() -> None:
    """kmodload's and the module's own lines would be batch sizes of their own."""
    raw = (DATA / "pagealloc-quick-qemu-x86_64.txt").read_text()
    batches, _ = _mmtests_read(raw)
    assert batches[:3] == ["params=orders=0,1,2,3,4", "", "inner=100"]  # kmodload:, clock:, pagealloc-info:


def test_pagealloc_log_is_the_result_rows_and_mmtests_reads_kperfs_samples() -> None:
    raw = (DATA / "pagealloc-quick-qemu-x86_64.txt").read_text()
    log = pagealloc_log(raw)
    assert log.splitlines() == [line for line in raw.splitlines() if line.startswith("order ")]
    assert not any(word in log for word in ("kmodload", "clock", "pagealloc-info"))
    batches, read = _mmtests_read(log)
    assert batches == [str(2**i) for i in range(10)]
    kperf: dict[str, list[float]] = {}
    for sample in PAGEALLOC.parse(raw, QUICK):
        kperf.setdefault(sample.metric, []).append(sample.value)
    assert read == kperf


def test_mmtests_runs_are_pagealloc_log_and_the_per_order_files() -> None:
    raw = (DATA / "pagealloc-quick-qemu-x86_64.txt").read_text()
    files = PAGEALLOC.mmtests_runs(raw, QUICK)["pagealloc"]
    assert sorted(files) == sorted(["pagealloc.log"] + [f"{k}-{o}" for k in ("alloc", "free") for o in range(5)])
    assert files["pagealloc.log"] == pagealloc_log(raw)
    # pagealloc-bench writes "<batch> <alloc>" and "<batch> <free>" per row.
    rows = _rows(raw, 0, 1) + _rows(raw, 0, 2)
    assert files["alloc-0"].splitlines()[:6] == [f"{r[3]} {r[5]}" for r in rows]
    assert files["free-4"].splitlines()[0] == "1 " + _rows(raw, 4, 1)[0][7]
    with pytest.raises(ValueError, match="incomplete output"):
        PAGEALLOC.mmtests_runs(raw.split("order  3")[0], QUICK)


def _raw(outer: int = 3, skip: tuple[int, int] | None = None, totals: bool = False) -> str:
    """Rows of 400 and 200 cycles; with totals, each row's pagealloc-total line (inner 100: 400.37, 200.5)."""
    lines = ["clock: tsc"]
    for order in (0, 1):
        for batch in pagealloc_batches(order, 16):
            if (order, batch) != skip:
                row = [f"order {order:2d} batch {batch:6d} alloc 400 free 200"]
                if totals:
                    alloc, free = 40037 * batch, 20050 * batch
                    row.append(
                        f"pagealloc-total: order {order} batch {batch} ops {100 * batch} alloc {alloc} free {free}"
                    )
                lines += row * outer
    return "\n".join(lines) + "\n"


PARAMS = resolve_params("pagealloc", "quick", {"orders": [0, 1], "batch_limit_kb": 16, "outer": 3})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", r"incomplete output for order 0 batch 1 \(0 of 3\), order 0 batch 2 \(0 of 3\), order 1 batch 1"),
        (_raw(skip=(1, 1)), r"incomplete output for order 1 batch 1 \(0 of 3\);"),
        (_raw(outer=2), r"order 0 batch 1 \(2 of 3\)"),
        (_raw() + "order  0 batch      1 alloc 400 free 200\n", "is round 4 of order 0 batch 1"),
        (_raw() + "order  0 batch      4 alloc 400 free 200\n", "order 0 batch 4, which the job's parameters"),
        (_raw() + "order  0 batch      1 alloc -4 free 200\n", "malformed result on output line 11"),
    ],
)
def test_parse_errors_say_what_is_wrong(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PAGEALLOC.parse(raw, PARAMS)


def test_the_totals_give_each_sample_its_decimals_and_mmtests_its_rows() -> None:
    raw = _raw(totals=True)
    # order 0 batch 1 and 2 lose their first two rounds (warm-up), order 1 batch 1 keeps all three.
    assert {(s.metric, s.value) for s in PAGEALLOC.parse(raw, PARAMS)} == {
        (f"{kind}-odr{o}-{b}", value)
        for o, b in ((0, 1), (0, 2), (1, 1))
        for kind, value in (("alloc", 400.37), ("free", 200.5), ("total", 400.37 + 200.5))
    }
    assert len(PAGEALLOC.parse(raw, PARAMS)) == 3 * (1 + 1 + 3)
    # What mmtests reads is unchanged: the rows, whole cycles, nothing else in pagealloc.log.
    assert PAGEALLOC.rounds(raw, PARAMS) == PAGEALLOC.rounds(_raw(), PARAMS)
    files = PAGEALLOC.mmtests_runs(raw, PARAMS)["pagealloc"]
    assert files["pagealloc.log"] == pagealloc_log(_raw())
    assert files["alloc-0"] == PAGEALLOC.mmtests_runs(_raw(), PARAMS)["pagealloc"]["alloc-0"]
    # Beside them the totals, one line per row, in a file mmtests does not open (it globs alloc-[0-9]*).
    assert files["pagealloc-total.log"].splitlines() == [
        x for x in raw.splitlines() if x.startswith("pagealloc-total:")
    ]
    assert "pagealloc-total.log" not in PAGEALLOC.mmtests_runs(_raw(), PARAMS)["pagealloc"]
    # mmtests reads the rows of a boot with totals as it read them before.
    _, read = _mmtests_read(files["pagealloc.log"])
    assert read["alloc-odr1-1"] == [400.0, 400.0, 400.0]


_ROW = "order  0 batch      1 alloc 400 free 200"
_TOTAL = "pagealloc-total: order 0 batch 1 ops 100 alloc 40037 free 20050"


_TOTALS = _raw(totals=True)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_TOTALS.replace(_TOTAL + "\n", "", 1), "no pagealloc-total line, the first of order 0 batch 1;"),
        (_TOTALS.replace(_ROW + "\n", "", 1) + _ROW + "\n", "line 2 follows no result row of order 0 batch 1"),
        (_TOTALS.replace(_TOTAL, _TOTAL + "\n" + _TOTAL, 1), "the total on output line 4 follows no result row"),
        (_TOTALS.replace(_TOTAL, _TOTAL.replace("h 1", "h 2"), 1), "3 follows no result row of order 0 batch 2"),
        (_TOTALS.replace("alloc 40037", "alloc 39999", 1), r"\(39999 and 20050 cycles over 100\) does not round down"),
        (_TOTALS.replace("alloc 40037", "alloc 39999", 1), r"round down to its row \(alloc 400 free 200\)"),
        (_TOTALS.replace("ops 100", "ops 0", 1), "over 0"),
        (_TOTALS.replace("free 20050", "free -1", 1), "malformed total on output line 3"),
    ],
)  # fmt: skip
def test_totals_that_do_not_fit_their_rows_are_refused(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PAGEALLOC.parse(raw, PARAMS)


def test_fewer_than_three_rounds_would_leave_the_first_order_without_a_sample() -> None:
    with pytest.raises(ValueError, match=r"parameter 'outer' wants an integer in \[3, 1000\], got 2"):
        resolve_params("pagealloc", "quick", {"outer": 2})


@needs_mmtests
def test_mmtests_extract_reads_kperfs_pagealloc_output(tmp_path: Path) -> None:
    """mmtests' own extract-mmtests.pl -b pagealloc on the captured boot."""
    raw = (DATA / "pagealloc-quick-qemu-x86_64.txt").read_text()
    assert write_runs(tmp_path, PAGEALLOC, raw, QUICK) == ["pagealloc"]
    read = extract(tmp_path, "pagealloc", "pagealloc")
    kperf: dict[str, list[float]] = {}
    for sample in PAGEALLOC.parse(raw, QUICK):
        kperf.setdefault(sample.metric, []).append(sample.value)
    assert read == dict(sorted(kperf.items()))


@needs_mmtests
def test_mmtests_compare_reads_kperfs_pagealloc_output(tmp_path: Path) -> None:
    """compare-mmtests.pl on two boots of one order, kmodload's lines and all in the raw output.

    With several orders it stops at Compare.pm line 134 on mmtests' own runs
    too: the larger batch sizes of the higher orders are metrics without data.
    """
    params = resolve_params("pagealloc", "quick", {"orders": [0], "batch_limit_kb": 16, "outer": 5})
    for run, alloc in (("base", 400), ("head", 440)):
        for boot in (0, 1):
            rows = [f"order  0 batch {b:6d} alloc {alloc + r + boot} free {200 + r}" for b in (1, 2) for r in range(5)]
            raw = "\n".join(["kmodload: module=pagealloc cpu=0 params=orders=0", "clock: tsc", *rows]) + "\n"
            logs = tmp_path / run / f"iter-{boot}" / "pagealloc" / "logs"
            logs.mkdir(parents=True)
            for name, text in PAGEALLOC.mmtests_runs(raw, params)["pagealloc"].items():
                (logs / name).write_text(text)
    out = subprocess.run(
        ["perl", f"{MMTESTS}/bin/compare-mmtests.pl", "-d", str(tmp_path), "-b", "pagealloc", "-n", "base,head"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    # Rounds 3-5 of both boots: 402, 403, 404, 403, 404, 405 cycles, Amean 403.50.
    assert re.search(r"^Amean\s+alloc-odr0-1\s+403\.50 \(\s+0\.00%\)\s+443\.50 \*?\(?\s*-9\.91%", out, re.M), out


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
        (["-s", "/dev/null"], "-s keeps one CPU online: name it with -c"),
    ],
)
def test_kmodload_exits_non_zero_with_a_message(kmodload: Path, args: list[str], message: str) -> None:
    run = subprocess.run([str(kmodload), *args], capture_output=True, text=True, check=False)
    assert run.returncode != 0
    assert message in run.stderr


# -- the module, built with the fixture kernel, under QEMU ----------------------------


def _boot(
    build: Any,
    state: Path,
    params: dict[str, Any],
    runs: int = 1,
    clock: str = "wall",
    vcpus: int = 0,
    cmdline: str = "",
) -> BootResult:
    """One TCG boot of the fixture kernel running the pagealloc command `runs` times."""
    backend = QemuBackend("x86_64", state, accel="tcg")
    binaries = compile_all(PAGEALLOC.sources(), "x86_64", state)
    binaries["pagealloc.ko"] = build.artifacts["pagealloc.ko"]
    commands = PAGEALLOC.command(params, backend.bindir) * runs
    timeout = backend.timeout(PAGEALLOC.expected_seconds(params), len(commands), clock)
    job = BootJob(commands, binaries, timeout=timeout, clock=clock, vcpus=vcpus, cmdline=cmdline)
    return backend.boot(job, build.artifacts["kernel"])


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
    # No "+": the release is made without git (kperf_kbuild.sandbox.build_env).
    assert module_vermagic(module) == "6.1.192"
    params = resolve_params("pagealloc", "quick", {"inner": 50})
    started = time.monotonic()
    result = _boot(build, runner_state, params)
    print(f"pagealloc quick boot under TCG: {time.monotonic() - started:.1f} s")
    samples = PAGEALLOC.parse(result.raw_output, params)
    cases, outer = len(PAGEALLOC.metrics(params)) // 3, params["outer"]
    assert len(PAGEALLOC.rounds(result.raw_output, params)) == cases * outer
    # Order 0 runs first: its first two rounds of each batch size are warm-up.
    order0 = len(pagealloc_batches(0, params["batch_limit_kb"]))
    assert len(samples) == 3 * (order0 * (outer - 2) + (cases - order0) * outer)
    assert all(s.value > 0 for s in samples)
    # kmodload ran the module alone: the guest's other CPUs, if any, went offline for it.
    environment = PAGEALLOC.environment(result.raw_output)
    assert environment["cycle_clock"] == "tsc"
    assert re.fullmatch(r"none|\d+(,\d+)*", environment["offlined_cpus"])
    # Each row has its totals, and kperf's samples their decimals.
    assert result.raw_output.count("pagealloc-total: ") == cases * outer
    assert any(s.value != round(s.value) for s in samples)
    # The module's procfs file went with it: kmodload unloaded it.
    assert "kmodload: module=pagealloc cpu=0" in result.raw_output


@pytest.mark.kernel
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="needs qemu-system-x86")
def test_on_two_vcpus_the_module_runs_alone_and_the_other_cpu_comes_back(
    x86_64_kernel: Any,
    runner_state: Path,
) -> None:
    # The pagealloc command takes the second CPU offline for its run (kmodload
    # -s) and brings it back: a second run in the same boot finds it online
    # and takes it down again. Little work: order 4, one batch, rounds of one.
    build = x86_64_kernel
    assert build.ok, build.log_tail
    params = resolve_params("pagealloc", "quick", {"orders": [4], "batch_limit_kb": 128, "inner": 1})
    result = _boot(build, runner_state, params, runs=2, clock="instructions", vcpus=2)  # a failed command raises
    assert len(result.commands) == 2
    for command in result.commands:
        assert PAGEALLOC.environment(command.output)["offlined_cpus"] == "1"
        assert len(PAGEALLOC.rounds(command.output, params)) == params["outer"]
    # A CPU already offline (present, never brought up: maxcpus=1) is left so, not brought online after.
    result = _boot(build, runner_state, params, runs=2, clock="instructions", vcpus=2, cmdline="maxcpus=1")
    assert [PAGEALLOC.environment(c.output)["offlined_cpus"] for c in result.commands] == ["none", "none"]


def test_an_emulated_boot_waits_for_a_kernel_several_times_slower_than_expected(tmp_path: Path) -> None:
    # pagealloc-slow's head spends 5 us (5000 instructions) more per
    # allocation: several times the work of the quick grid's estimate. Its
    # boot is a regression to measure, so the emulated limit must cover it
    # where a KVM or bare-metal boot is ended sooner.
    params = resolve_params("pagealloc", "quick", {})
    expected = PAGEALLOC.expected_seconds(params)
    tcg = QemuBackend("x86_64", tmp_path / "tcg", accel="tcg")
    emulated = tcg.timeout(expected, 1, "instructions")
    assert emulated == tcg.timeout(expected, 1, "wall")
    # 600 s: the head's boots overran 195 s on a slow 2-core host under a test run.
    assert emulated >= 600 + 6 * expected
    kvm_limit = Backend.timeout(tcg, expected, 1, "wall")
    assert kvm_limit < emulated
