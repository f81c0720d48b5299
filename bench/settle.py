"""What init's settle after drop_caches does to a comparison of two kernels whose allocator is the same.

Init drops the caches before every command and then sleeps (kperf.settle_ms,
100 ms by default; runners/kperf_runner/csrc/init_tuning.h) so that the work
dropping queues (RCU-freed dentries and inodes, per-CPU list drains) is done
before the benchmark starts. This script boots the untouched base and the
`pagefault-slow` fixture (a slower anonymous fault: the page allocator is the
same code) under QEMU's instruction clock, K boots each, once with no settle
(kperf.settle_ms=0) and once with the default, and reports per setting how
many of pagealloc's metrics differ between the two kernels by more than 0.1%
and by more than the instruction clock's practical threshold (0.5%), with the
largest difference and the spread between boots of one kernel.

Usage (builds the two kernels once, into ~/.cache/kperf):

    .venv/bin/python bench/settle.py [--boots 3] [--bench pagealloc] [--json out.json]

About 6 s of wall time per boot on a 2-core host. Results and the machine go
in docs/machine-tuning.md, "Settling after drop_caches".
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from kperf.stats.abtest import min_effect_for_clock
from kperf_runner.backends import BootJob
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.toolchain import compile_all
from kperf_testing.kbuild import build_fixture_kernel, ensure_test_tree

KERNELS = ("base", "pagefault-slow")
SETTINGS = {"none": 0, "default": None}  # None: init's default, no word on the command line


def boot(
    backend: QemuBackend, build: dict[str, Path], bench: str, settle_ms: int | None, state: Path
) -> dict[str, float]:
    """One boot: {metric: mean over its iterations}."""
    b = get_benchmark(bench)
    params = resolve_params(bench, "quick")
    binaries = compile_all(b.sources(), "x86_64", state)
    for name in b.artifacts():
        binaries[name] = build[name]
    job = BootJob(
        b.command(params, backend.bindir),
        binaries,
        timeout=backend.timeout(b.expected_seconds(params), 1) * 4,
        clock="instructions",
        cmdline="" if settle_ms is None else f"kperf.settle_ms={settle_ms}",
    )
    result = backend.boot(job, build["kernel"])
    values: dict[str, list[float]] = {}
    for sample in b.parse(result.raw_output, params):
        values.setdefault(sample.metric, []).append(sample.value)
    return {metric: statistics.fmean(v) for metric, v in values.items()}


def compare(runs: dict[str, list[dict[str, float]]], threshold: float) -> dict[str, Any]:
    """Differences between the two kernels' mean boots, and the largest spread within one kernel."""
    base, head = (runs[k] for k in KERNELS)
    diffs, spread = {}, 0.0
    for metric in sorted(base[0]):
        a = statistics.fmean(r[metric] for r in base)
        c = statistics.fmean(r[metric] for r in head)
        if a:
            diffs[metric] = (c - a) / a * 100.0
        for boots in (base, head):
            vals = [r[metric] for r in boots]
            mean = statistics.fmean(vals)
            if mean:
                spread = max(spread, (max(vals) - min(vals)) / mean * 100.0)
    return {
        "metrics": len(diffs),
        "over_0.1pct": sum(abs(d) > 0.1 for d in diffs.values()),
        "over_threshold": sum(abs(d) > threshold for d in diffs.values()),
        "largest_pct": max((abs(d) for d in diffs.values()), default=0.0),
        "boot_spread_pct": spread,
        "differences": {m: round(d, 3) for m, d in diffs.items() if abs(d) > 0.1},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--boots", type=int, default=3, help="boots per kernel and setting (default 3)")
    parser.add_argument("--bench", default="pagealloc")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kperf")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    tree = ensure_test_tree(args.cache)
    builds: dict[str, dict[str, Path]] = {}
    for name in KERNELS:
        result = build_fixture_kernel(tree, name, "x86_64", args.cache)
        if not result.ok:
            print(f"{name} did not build: {result.error}", file=sys.stderr)
            return 1
        builds[name] = {k: Path(v) for k, v in result.artifacts.items()}
    state = args.cache / "settle"
    state.mkdir(parents=True, exist_ok=True)
    backend = QemuBackend("x86_64", state, accel="tcg")
    threshold = min_effect_for_clock("instructions")
    started = time.monotonic()
    report: dict[str, Any] = {
        "date": date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, {platform.node()}",
        "bench": args.bench,
        "boots": args.boots,
        "threshold_pct": threshold,
    }
    for setting, settle_ms in SETTINGS.items():
        runs = {
            name: [boot(backend, builds[name], args.bench, settle_ms, state) for _ in range(args.boots)]
            for name in KERNELS
        }
        report[setting] = compare(runs, threshold)
        r = report[setting]
        print(
            f"settle {setting:>7}: {r['over_0.1pct']:3d} of {r['metrics']} metrics differ by more than 0.1%, "
            f"{r['over_threshold']:3d} by more than {threshold}%; largest {r['largest_pct']:.2f}%; "
            f"spread between boots of one kernel at most {r['boot_spread_pct']:.3f}%"
        )
    print(f"{args.boots} boots per kernel and setting, {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
