"""Determinism and host cost of the cycle model's plugin on real boots (docs/cycle-clock.md, "Measurements").

Boots one kernel under the instruction clock, the way the qemu backend does (its command line,
kperf's init and the benchmark's initramfs), with runners/kperf_runner/cycles' plugin loaded and
without it: `--runs` boots with the plugin per vCPU count, then one without, and reports each
boot's plugin totals, wall seconds and QEMU's CPU seconds. Two boots with the plugin must give
identical totals; the cost is the plugin boots' CPU time over the plain boot's.

    .venv/bin/python bench/cycle_model_boots.py --kernel PATH/bzImage [--vcpus 1 2] [--runs 2]
        [--benchmark spawn --grid quick] [--record bench/records/cycle_model-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.initramfs import job_initramfs
from kperf_runner.toolchain import compile_all, compile_static

CYCLES = Path(__file__).resolve().parent.parent / "runners" / "kperf_runner" / "cycles"


def build_plugin(out: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(CYCLES), f"OUT={out}", "plugin"], check=True)
    return out / "kperf_cycles.so"


def boot(argv: list[str], timeout: float) -> dict[str, Any]:
    """One QEMU run: its wall and CPU seconds, and whether init reached KPERF-DONE."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as console:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT)
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:
            process.kill()
            raise
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - start
        console.seek(0)
        text = console.read().decode(errors="replace")
    if wall > timeout:
        print(f"warning: the boot took {wall:.0f} s, more than {timeout:.0f} s", file=sys.stderr)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "done": "KPERF-DONE" in text,
        "exit": process.returncode,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", type=Path, required=True, help="an x86_64 bzImage (e.g. a fixture kernel's)")
    parser.add_argument("--vcpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--runs", type=int, default=2, help="boots with the plugin per vCPU count")
    parser.add_argument("--benchmark", default="spawn")
    parser.add_argument("--grid", default="quick")
    parser.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE", help="override a grid parameter")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--record", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    if not args.kernel.is_file():
        parser.error(f"--kernel {args.kernel} is not a file: give the path of an x86_64 bzImage")
    overrides = dict(item.split("=", 1) for item in args.set)
    state = Path(tempfile.mkdtemp(prefix="cycle-model-"))
    plugin = build_plugin(state / "plugin")
    bench = get_benchmark(args.benchmark)
    params = resolve_params(args.benchmark, args.grid, overrides)
    backend = QemuBackend("x86_64", state, accel="tcg")
    archive = job_initramfs(
        compile_static("init.c", "x86_64", state).read_bytes(),
        {name: path.read_bytes() for name, path in compile_all(bench.sources(), "x86_64", state).items()},
        bench.command(params, QemuBackend.bindir),
    )
    initrd = state / "initrd.gz"
    archive.write(initrd)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "load_at_start": os.getloadavg()},
        "kernel": str(args.kernel),
        "benchmark": args.benchmark,
        "grid": args.grid,
        "params": params,
        "boots": [],
    }
    for vcpus in args.vcpus:
        base = backend.command_line(args.kernel, initrd, clock="instructions", vcpus=vcpus)
        for run in range(args.runs + 1):
            with_plugin = run < args.runs
            report = state / f"cycles-{vcpus}-{run}.json"
            argv_run = [*base, "-plugin", f"{plugin},out={report}"] if with_plugin else base
            outcome = boot(argv_run, args.timeout)
            outcome |= {"vcpus": vcpus, "plugin": with_plugin}
            if with_plugin and report.is_file():
                outcome["report"] = json.loads(report.read_text())
            results["boots"].append(outcome)
            total = outcome.get("report", {}).get("total", {})
            print(
                f"{vcpus} vCPU(s), plugin={with_plugin}: wall {outcome['wall_s']} s, cpu {outcome['cpu_s']} s, "
                f"done={outcome['done']}, instructions={total.get('instructions')}, cycles={total.get('cycles')}",
                flush=True,
            )
    text = json.dumps(results, indent=1)
    if args.record:
        args.record.write_text(text + "\n")
        print(f"wrote {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
