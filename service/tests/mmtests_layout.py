"""Make mmtests result directories (work/log/<run>) from raw benchmark output."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

AIM9_OPS = {"page_test": 1700, "brk_test": 17000, "exec_test": 5, "fork_test": 100}
AIM9_DESC = {
    "page_test": "System Allocations & Pages/second",
    "brk_test": "System Memory Allocations/second",
    "exec_test": "Program Loads/second",
    "fork_test": "Task Creations/second",
}


def make_run(
    root: Path, name: str, seed: int, *, page_test_scale: float = 1.0, iterations: int = 12, gz_aim9: bool = False
) -> Path:
    """One mmtests run of aim9, pagealloc, pft (threads) and unixbench-spawn."""
    rng = np.random.default_rng(seed)
    run = root / "work" / "log" / name
    it = run / "iter-0"
    it.mkdir(parents=True)
    (run / "mmtests-activity").write_text("1700000000 run-mmtests: Start\n")
    (it / "kernel.version").write_text("Linux lab-1 6.1.0-kperf #1 SMP x86_64 GNU/Linux\n")
    (it / "tests-timestamp").write_text("start :: 1700000000\n")

    aim9 = it / "aim9" / "logs"
    aim9.mkdir(parents=True)
    base_rates = {"page_test": 110.0 * page_test_scale, "brk_test": 40.0, "exec_test": 900.0, "fork_test": 60.0}
    for i in range(1, iterations + 1):
        lines = [
            " Test        Test        Elapsed  Iteration    Iteration          Operation",
            "Number       Name      Time (sec)   Count   Rate (loops/sec)    Rate (ops/sec)",
        ]
        for n, (test, loops) in enumerate(base_rates.items(), start=2):
            rate = loops * float(rng.normal(1.0, 0.01))
            count = int(rate * 15)
            ops = rate * AIM9_OPS[test]
            lines.append(f"{n:6d} {test:<17s} {15.0:6.2f} {count:10d} {rate:10.5f} {ops:15.2f} {AIM9_DESC[test]}")
        text = "\n".join(lines) + "\n"
        if gz_aim9:
            (aim9 / f"aim9-{i}.gz").write_bytes(gzip.compress(text.encode()))
        else:
            (aim9 / f"aim9-{i}").write_text(text)

    pa = it / "pagealloc" / "logs"
    pa.mkdir(parents=True)
    rows = []
    for order in (0, 1):
        for batch in (1, 2, 4):
            for _ in range(15):
                alloc, free = int(rng.normal(400, 5)), int(rng.normal(200, 3))
                rows.append(f"order {order:2d} batch {batch:6d} alloc {alloc} free {free}")
    (pa / "pagealloc.log").write_text("\n".join(rows) + "\n")

    pft = it / "pft" / "logs"
    pft.mkdir(parents=True)
    (pft / "commands.log").write_text("./pft -m 1073741824 -t 1\n./pft -m 1073741824 -t 2\n")
    for clients in (1, 2):
        lines = []
        for _ in range(5):
            wall = 300000.0 * clients * float(rng.normal(1.0, 0.02))
            # pft's own format: " %3ld %4ld %3ld %8.2fs %8.2fs %8.2fs  %10.3f %10.3f"
            cols = (0, clients, 1, 0.01, 0.50, 0.14, wall / clients, wall)
            lines.append(" %3d %4d %3d %8.2fs %8.2fs %8.2fs  %10.3f %10.3f" % cols)  # noqa: UP031
        (pft / f"pft-{clients}.log").write_text("\n".join(lines) + "\n")

    spawn = it / "unixbench-spawn" / "logs"
    spawn.mkdir(parents=True)
    (spawn / "workloads").write_text("spawn\n")
    for i in range(1, 4):
        for threads in (1, 4):
            lps = 4000.0 * threads * float(rng.normal(1.0, 0.01))
            (spawn / f"spawn-{threads}-{i}.log").write_text(unixbench_spawn_log(lps, threads))
    return run


def unixbench_spawn_log(lps: float, copies: int) -> str:
    """What `./Run -q -c <copies> spawn` prints, as mmtests tees it to spawn-<copies>-<iteration>.log.

    UnixBench 5.1.3's Run script (github.com/kdlucas/byte-unixbench): -q
    sets verbose to 0, which `|| 1` in main turns back into 1, so the
    heartbeat and the report file are printed (main, runBenchmark); the
    report is summarizeRun's: logResults' score line, then logIndexCat's
    index table. The logo before it is left out.
    """
    return "".join(
        [
            "\n",
            f"{copies} x Process Creation  1 2 3\n",
            "\n",
            "=" * 72 + "\n",
            "   BYTE UNIX Benchmarks (Version 5.1.3)\n\n",
            "   System: lab-1: GNU/Linux\n",
            "   OS: GNU/Linux -- 6.1.0-kperf -- #1 SMP PREEMPT_DYNAMIC\n",
            "   Machine: x86_64 (unknown)\n",
            '   Language: en_US.utf8 (charmap="UTF-8", collate="UTF-8")\n',
            "   CPU 0: QEMU Virtual CPU version 2.5+ (4800.0 bogomips)\n",
            "          x86-64, MMX, Physical Address Extension, SYSENTER/SYSEXIT, SYSCALL/SYSRET\n",
            "   10:00:00 up 1 min,  0 users,  load average: 0.08, 0.02, 0.01; runlevel 2024-01-01\n\n",
            "-" * 72 + "\n",
            "Benchmark Run: Mon Jan 01 2024 10:00:00 - 10:01:39\n",
            f"4 CPUs in system; running {copies} parallel cop{'y' if copies == 1 else 'ies'} of tests\n\n",
            f"{'Process Creation':<40} {lps:12.1f} {'lps':<5} ({30.0:.1f} s, {2} samples)\n\n",
            f"{'System Benchmarks Partial Index':<40} {'BASELINE':>12} {'RESULT':>12} {'INDEX':>8}\n",
            f"{'Process Creation':<40} {126.0:12.1f} {lps:12.1f} {lps / 126.0 * 10:8.1f}\n",
            f"{'':<40} {'':>12} {'':>12} {'========':>8}\n",
            f"{'System Benchmarks Index Score (Partial Only)':<66} {lps / 126.0 * 10:8.1f}\n\n",
        ]
    )


def kperf_spawn_output(extra_vmas: list[int], iterations: int, seed: int) -> str:
    """What kperf's spawn (runners/kperf_runner/csrc/spawn.c) prints for these extra-VMA counts.

    Per count its spawn-info line, then per iteration UnixBench's COUNT line,
    spawn's own result line and UnixBench's index row, in spawn.c's formats.
    Fewer forks with more VMAs, as copying the VMA tree costs.
    """
    rng = np.random.default_rng(seed)
    lines = []
    for extra in extra_vmas:
        lines.append(f"spawn-info: extra_vmas={extra} total_vmas={extra + 12} cpu=0 seconds=0.200")
        for i in range(iterations):
            count = max(1, int(1200 / (1 + extra / 100) * float(rng.normal(1.0, 0.03))))
            elapsed = f"{0.2 + float(rng.uniform(0, 0.002)):.9f}"
            rate = count / float(elapsed)
            lines += [
                f"COUNT|{count}|1|lps",
                f"spawn vmas={extra} iteration={i} count={count} elapsed={elapsed}",
                f"{'Process Creation':<40} {126.0:12.1f} {rate:12.1f} {rate / 126.0 * 10:8.1f}",
            ]
    return "\n".join(lines) + "\n"
