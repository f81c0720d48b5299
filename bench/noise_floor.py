"""The noise floor of every benchmark under each clock: three components and what a quick grid detects.

For each clock (QEMU's instruction clock, the wall clock under TCG) and each
benchmark's quick grid, boot every kernel of a set that runs the benchmarks'
paths identically -- the untouched base and fixtures changed only where no
benchmark goes (`neutral`: a comment; `unrelated-mincore`: code in a system
call no benchmark makes) -- K times, N iterations per boot, while a second
process keeps one host core busy (a build or a second runner next to the
runner). Then, per metric:

- within-boot sd: one iteration around its boot's mean;
- between-boot sd: one boot's level around its build's (beyond what the
  iterations explain), kperf.stats.noise.variance_components;
- between-build sd: one build's level around the set's (beyond what the
  boots explain), kperf.stats.builds.between_build_noise;
- the smallest change the quick grid (K boots x N iterations per side, one
  build per side) detects with 80% power at alpha .05, with the
  between-build part that no number of boots removes, and the practical
  threshold of the clock beside it.

Usage (builds the kernels it needs once, into ~/.cache/kperf):

    .venv/bin/python bench/noise_floor.py [--clock instructions] [--bench spawn] [--boots 3]
        [--markdown out.md] [--json out.json]

Takes about 25 s of wall time per instruction-clock boot and 15-30 s per
wall-clock boot on a 2-core host: the defaults (2 clocks, 4 benchmarks, 3
kernels, 3 boots) run for about 40 minutes. Results and the machine they
ran on go in docs/statistics.md, "Noise floor".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from scipy import stats as sps

from kperf.stats import noise
from kperf.stats.abtest import min_effect_for_clock
from kperf.stats.builds import between_build_noise
from kperf_runner.backends import BootJob
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.toolchain import compile_all
from kperf_testing.kbuild import build_fixture_kernel, ensure_test_tree

KERNELS = ("base", "neutral", "unrelated-mincore")
BENCHMARKS = ("spawn", "aim9", "pft", "pagealloc")
CLOCKS = ("instructions", "wall")


Runs = dict[str, dict[str, list[list[float]]]]  # kernel -> metric -> boots of iterations


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "an unknown CPU"


def boot_once(
    backend: QemuBackend, kernel: Path, artifacts: Path, bench: str, clock: str, state: Path
) -> dict[str, list[float]]:
    """One boot of `kernel` running `bench`'s quick grid: {metric: iteration values}."""
    b = get_benchmark(bench)
    params = resolve_params(bench, "quick")
    commands = b.command(params, backend.bindir)
    binaries = compile_all(b.sources(), "x86_64", state)
    for name in b.artifacts():
        binaries[name] = artifacts / name
    job = BootJob(
        commands, binaries, timeout=backend.timeout(b.expected_seconds(params), len(commands)) * 4, clock=clock
    )
    result = backend.boot(job, kernel)
    out: dict[str, list[float]] = {}
    for sample in b.parse(result.raw_output, params):
        out.setdefault(sample.metric, []).append(sample.value)
    return out


def detectable_pct(boot_sd: float, build_sd: float, boots: int, log_scale: bool, alpha: float = 0.05) -> float:
    """The smallest true change (in %) found with 80% power by a z-test of one build per side.

    The difference of two builds' means carries 2 sd_build^2 whatever K is, and
    2 boot_sd^2 / K from the boots.
    """
    se = math.sqrt(2.0 * build_sd**2 + 2.0 * boot_sd**2 / boots)
    shift = (float(sps.norm.ppf(1 - alpha / 2)) + float(sps.norm.ppf(0.8))) * se
    return (math.exp(shift) - 1.0) * 100.0 if log_scale else shift * 100.0


def summarise(
    runs: dict[str, dict[str, list[list[float]]]], boots: int, iterations: int, clock: str
) -> list[dict[str, Any]]:
    """runs: {kernel: {metric: boots of iterations}} -> one row per metric."""
    metrics = sorted(set.intersection(*(set(m) for m in runs.values())))
    rows = []
    for metric in metrics:
        per_kernel = [runs[k][metric] for k in runs]
        model = noise.variance_components(per_kernel)
        builds = between_build_noise([per_kernel])
        scale = 100.0 if model.log_scale else 1.0
        rows.append(
            {
                "clock": clock,
                "metric": metric,
                "kernels": len(per_kernel),
                "boots": sum(len(b) for b in per_kernel),
                "log_scale": model.log_scale,
                "within_boot_pct": model.within_sd * scale,
                "between_boot_pct": model.between_sd * scale,
                "between_build_pct": builds.sd * scale,
                "between_build_p": builds.p_value,
                "detectable_pct": detectable_pct(model.boot_sd(iterations), builds.sd, boots, model.log_scale),
                "threshold_pct": min_effect_for_clock(clock),
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| clock | metric | within-boot | between-boot | between-build | detectable at quick KxN | threshold |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['clock']} | {r['metric']} | {r['within_boot_pct']:.3f}% | {r['between_boot_pct']:.3f}% "
            f"| {r['between_build_pct']:.3f}% | {r['detectable_pct']:.2f}% | {r['threshold_pct']:g}% |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clock", action="append", choices=CLOCKS)
    parser.add_argument("--bench", action="append", choices=BENCHMARKS)
    parser.add_argument("--kernel", action="append", help=f"fixture branches (default: {', '.join(KERNELS)})")
    parser.add_argument("--boots", type=int, default=3, help="boots per kernel (default 3)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kperf")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-load", action="store_true", help="leave the host idle (default: one core kept busy)")
    args = parser.parse_args(argv)
    clocks, benches = args.clock or list(CLOCKS), args.bench or list(BENCHMARKS)
    kernels = args.kernel or list(KERNELS)
    tree = ensure_test_tree(args.cache)
    builds = {}
    for name in kernels:
        result = build_fixture_kernel(tree, name, "x86_64", args.cache)
        if not result.ok:
            print(f"{name} did not build: {result.error}", file=sys.stderr)
            return 1
        builds[name] = Path(result.artifacts["kernel"])
    state = args.cache / "noise-floor"
    state.mkdir(parents=True, exist_ok=True)
    backend = QemuBackend("x86_64", state, accel="tcg")
    # A kill (SIGTERM) must still stop the busy loop below: let it unwind through `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load = None if args.no_load else subprocess.Popen([sys.executable, "-c", "while True: pass"])
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for clock in clocks:
            for bench in benches:
                runs: Runs = {}
                # Boots round-robin over the kernels, so drift of the host lands on all of them.
                for i in range(args.boots):
                    for name, kernel in builds.items():
                        t0 = time.monotonic()
                        got = boot_once(backend, kernel, kernel.parent, bench, clock, state)
                        for metric, values in got.items():
                            runs.setdefault(name, {}).setdefault(metric, []).append(values)
                        print(f"{clock} {bench} {name} boot {i + 1}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
                iterations = int(resolve_params(bench, "quick").get("iterations", 3))
                rows.extend(summarise(runs, get_benchmark(bench).grids["quick"].boots, iterations, clock))
    finally:
        if load is not None:
            load.kill()
            load.wait()
    header = (
        f"Measured {date.today().isoformat()} on {cpu_model()} "
        f"({platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
        f"{'one core kept busy' if load is not None else 'idle'}), kernels {', '.join(kernels)}, "
        f"{args.boots} boots each; {time.monotonic() - started:.0f} s."
    )
    text = markdown(rows, header)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
