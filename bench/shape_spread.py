"""Coverage and width of kperf's intervals on a shape the phase bench never measured, with the lab's own spread.

The phase bench measured the boot spread of one shape (the quick grid, one
vCPU, no NUMA nodes). 6.1 against 6.12 with spawn's `full` grid on the `mm`
profile and two vCPUs read +38.0% [+0.4, +89.8] at 3200 extra VMAs: Welch's
interval on two boots a side. A lab now measures each shape's spread from
seeded base boots (kperf.core.submissions.shape_spread). This script asks
whether that gives what issue 41 wants:

- half-widths of at most 3 points at all 8 points of the grid with 2-4 boots
  a side, and
- at least 95% of the intervals holding the true difference, over repeated
  runs.

What it does, on QEMU's instruction clock (TCG), every boot at a seeded phase
of its own (kperf.phase_seed, as the runner gives each boot):

1. the shape's spread: --spread-boots boots of the base, measured as the lab
   measures it (kperf.stats.boot_spread.measured_spread, the first
   submission's base boots with KPERF_SHAPE_SPREAD_BOOTS extra);
2. a pool of --pool boots of each kernel; the true difference per metric is
   the difference of the pool's boot summaries (geometric means of the
   trimmed boot means, as the A/B test computes them);
3. --runs runs of K boots a side for each K of --boots, drawn from the pool
   without replacement within a run (fresh boots for each run with --fresh,
   which multiplies the boots by runs): kperf's A/B test at alpha 0.05 with
   the shape's spread as the boot-noise prior and the between-build part
   the service adds (kperf.stats.builds.measured_build_prior), and the same
   test without the spread (the interval from boots alone) beside it;
4. per K and metric: the largest and median half-width in points, and the
   share of runs whose interval holds the true difference.

It needs the two kernels built with the `mm` profile for x86_64 (kperf builds
them: submit the two refs once, or `kperf-build`/tuxmake with
kernel-builds/profiles/mm.config), and hours: a `full` boot of spawn on two
vCPUs takes about 4 minutes of a host core, so the defaults (12 spread boots,
2 x 24 pool boots) are about 4 hours on 2 cores with --jobs 2. Run it on a
lab machine with nothing else on it, not beside a test run:

    .venv/bin/python bench/shape_spread.py --base-kernel 6.1/bzImage --head-kernel 6.12/bzImage \\
        [--vcpus 2] [--numa-nodes 0] [--grid full] [--bench spawn] [--spread-boots 12] [--pool 24] \\
        [--runs 200] [--boots 2 --boots 3 --boots 4] [--jobs 2] [--json out.json] [--markdown out.md]

`--reanalyse out.json` judges a record again without booting. The figures,
with the machine, the kernels and the date, go in docs/statistics.md,
"Each shape's own boot spread".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from kperf.stats.abtest import MetricInput, NoisePrior, boot_summaries, compare_metrics, normalise_boots
from kperf.stats.boot_spread import measured_spread
from kperf.stats.builds import measured_build_prior
from kperf_runner.backends import BootJob
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.toolchain import compile_all

CLOCK = "instructions"
ALPHA = 0.05
# Issue 41's goal: half-widths of at most this many points, coverage of at least this share.
GOAL_HALF_WIDTH = 3.0
GOAL_COVERAGE = 0.95
BOOT_ATTEMPTS = 3

Boots = list[list[float]]
Runs = dict[str, dict[str, Boots]]  # kernel ("spread", "base", "head") -> metric -> boots of iterations


def boot_once(kernel: Path, args: argparse.Namespace, state: Path) -> dict[str, list[float]]:
    """One instruction-clock boot of `kernel` at a seeded phase: {metric: iteration values}."""
    backend = QemuBackend("x86_64", state, accel="tcg")
    bench = get_benchmark(args.bench)
    params = resolve_params(args.bench, args.grid, clock=CLOCK)
    commands = bench.command(params, backend.bindir)
    binaries = compile_all(bench.sources(), backend.arch, state)
    for name in bench.artifacts():
        binaries[name] = kernel.parent / name
    timeout = backend.timeout(bench.expected_seconds(params), len(commands), CLOCK) * 2
    cmdline = f"kperf.phase_seed={random.getrandbits(32)}"
    job = BootJob(
        commands, binaries, cmdline=cmdline, timeout=timeout, clock=CLOCK, vcpus=args.vcpus, numa_nodes=args.numa_nodes
    )
    result = backend.boot(job, kernel)
    out: dict[str, list[float]] = {}
    for sample in bench.parse(result.raw_output, params):
        out.setdefault(sample.metric, []).append(sample.value)
    return out


def boot_all(tasks: Sequence[tuple[str, Path]], args: argparse.Namespace) -> Runs:
    """Boot every (label, kernel) of `tasks` once, --jobs at a time; a boot the host starved is made again."""

    def one(task: tuple[str, Path]) -> tuple[str, dict[str, list[float]]]:
        label, kernel = task
        state = args.cache / "shape-spread" / f"thread-{threading.get_ident()}"
        state.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            try:
                return label, boot_once(kernel, args, state)
            except Exception as e:  # the host's fault, not the kernel's: boot again
                print(f"{label} attempt {attempt} failed: {e}", file=sys.stderr, flush=True)
                if attempt == BOOT_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    runs: Runs = {}
    with ThreadPoolExecutor(args.jobs) as pool:
        for n, (label, got) in enumerate(pool.map(one, tasks), 1):
            print(f"boot {n}/{len(tasks)}: {label}", file=sys.stderr, flush=True)
            for metric, values in got.items():
                runs.setdefault(label, {}).setdefault(metric, []).append(values)
    return runs


def level(boots: Boots) -> float:
    """A side's estimate on the log scale: the mean of its boot summaries (as the A/B test's)."""
    return float(np.mean(boot_summaries(normalise_boots(boots), True)))


def true_change_pct(base: Boots, head: Boots, higher_is_better: bool) -> float:
    ratio = math.exp(level(head) - level(base))
    return (ratio - 1.0) * 100.0 if higher_is_better else (1.0 - ratio) * 100.0


def draws(pool: Boots, k: int, n_runs: int, fresh: bool, rng: random.Random) -> list[Boots]:
    """n_runs sets of k boots of one kernel: disjoint slices of the pool in boot order with `fresh`
    (each run its own boots), else drawn without replacement within a run."""
    if fresh:
        return [pool[i * k : (i + 1) * k] for i in range(min(n_runs, len(pool) // k))]
    return [rng.sample(pool, k) for _ in range(n_runs)]


def judge(
    runs: Runs, spread: Mapping[str, NoisePrior], k: int, args: argparse.Namespace, rng: random.Random
) -> dict[str, Any]:
    """Per metric, over --runs runs of k boots a side: half-widths and coverage, with the shape's
    spread and from the boots alone."""
    build = measured_build_prior(args.bench)
    metrics = sorted(set(runs["base"]) & set(runs["head"]))
    out: dict[str, Any] = {}
    for metric in metrics:
        base_pool, head_pool = runs["base"][metric], runs["head"][metric]
        if min(len(base_pool), len(head_pool)) < k:
            continue
        # Spawn's metrics are rates (forks per 10^9 instructions): higher is better.
        truth = true_change_pct(base_pool, head_pool, True)
        row: dict[str, Any] = {"truth_pct": truth}
        pairs = list(
            zip(draws(base_pool, k, args.runs, args.fresh, rng), draws(head_pool, k, args.runs, args.fresh, rng))
        )
        for label, prior in (("shape", spread.get(metric)), ("boots_alone", None)):
            halves: list[float] = []
            held = 0
            for base, head in pairs:
                inp = MetricInput(base, head, True, min_effect_pct=0.25, noise=prior, build_noise=build)
                r = compare_metrics({metric: inp}, alpha=ALPHA)[metric]
                if r.ci_low_pct is None or r.ci_high_pct is None:
                    continue
                halves.append((r.ci_high_pct - r.ci_low_pct) / 2.0)
                held += r.ci_low_pct <= truth <= r.ci_high_pct
            row[label] = {
                "runs": len(halves),
                "half_width_max": max(halves, default=math.nan),
                "half_width_median": float(np.median(halves)) if halves else math.nan,
                "coverage": held / len(halves) if halves else math.nan,
            }
        out[metric] = row
    return out


def analyse(runs: Runs, args: argparse.Namespace) -> dict[str, Any]:
    spread = {m: p for m, s in measured_spread({"spread": runs["spread"]}).items() if (p := s.prior()) is not None}
    rng = random.Random(args.seed)
    by_k = {str(k): judge(runs, spread, k, args, rng) for k in args.boots}
    goal = all(
        row["shape"]["half_width_max"] <= GOAL_HALF_WIDTH and row["shape"]["coverage"] >= GOAL_COVERAGE
        for rows in by_k.values()
        for row in rows.values()
    )
    return {"spread": {m: {"sd": p.sd, "dof": p.dof} for m, p in spread.items()}, "by_boots": by_k, "goal_met": goal}


def markdown(record: dict[str, Any]) -> str:
    lines = [
        record["header"],
        "",
        "| boots a side | metric | true change | half-width max / median (shape's spread) | coverage | "
        "half-width max / median (boots alone) | coverage |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, rows in record["result"]["by_boots"].items():
        for metric, row in rows.items():
            cells = [k, metric, f"{row['truth_pct']:+.2f}%"]
            for way in (row["shape"], row["boots_alone"]):
                cells += [f"{way['half_width_max']:.2f} / {way['half_width_median']:.2f}", f"{way['coverage']:.1%}"]
            lines.append("| " + " | ".join(cells) + " |")
    met = "met" if record["result"]["goal_met"] else "NOT met"
    lines += ["", f"Goal (half-widths <= {GOAL_HALF_WIDTH:g} points, coverage >= {GOAL_COVERAGE:.0%}): {met}."]
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--base-kernel", type=Path, help="the base's kernel image (6.1, mm profile, x86_64)")
    p.add_argument("--head-kernel", type=Path, help="the head's kernel image (6.12, mm profile, x86_64)")
    p.add_argument("--bench", default="spawn")
    p.add_argument("--grid", default="full")
    p.add_argument("--vcpus", type=int, default=2)
    p.add_argument("--numa-nodes", type=int, default=0)
    p.add_argument("--spread-boots", type=int, default=12, help="base boots the shape's spread is measured from")
    p.add_argument("--pool", type=int, default=24, help="boots of each kernel the runs are drawn from")
    p.add_argument("--runs", type=int, default=200, help="runs per number of boots a side")
    p.add_argument("--boots", type=int, action="append", help="boots a side of a run (default 2, 3 and 4)")
    p.add_argument("--fresh", action="store_true", help="boot every run's boots afresh instead of drawing them")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--seed", type=int, default=41)
    p.add_argument("--cache", type=Path, default=Path(os.environ.get("KPERF_CACHE", Path.home() / ".cache/kperf")))
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    p.add_argument("--reanalyse", type=Path, help="a --json record to judge again without booting")
    args = p.parse_args(argv)
    args.boots = args.boots or [2, 3, 4]
    if args.reanalyse is None and (args.base_kernel is None or args.head_kernel is None):
        p.error("give --base-kernel and --head-kernel (or --reanalyse a record)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.reanalyse is not None:
        old = json.loads(args.reanalyse.read_text())
        runs, header = old["runs"], old["header"]
    else:
        pool = args.pool if not args.fresh else args.runs * max(args.boots)
        tasks = [("spread", args.base_kernel)] * args.spread_boots
        tasks += [
            (side, kernel)
            for _ in range(pool)
            for side, kernel in (("base", args.base_kernel), ("head", args.head_kernel))
        ]
        runs = boot_all(tasks, args)
        header = (
            f"Measured {date.today().isoformat()} on {platform.node()} ({platform.machine()}, {os.cpu_count()} cores): "
            f"{args.base_kernel} against {args.head_kernel}, {args.bench} `{args.grid}`, {args.vcpus} vCPUs, "
            f"{args.numa_nodes} NUMA nodes, instruction clock, each boot at a seeded phase; spread from "
            f"{args.spread_boots} base boots, runs drawn from {pool} boots a kernel"
        )
    record = {"header": header, "runs": runs, "result": analyse(runs, args)}
    if args.json:
        args.json.write_text(json.dumps(record))
    text = markdown(record)
    if args.markdown:
        args.markdown.write_text(text)
    print(text)
    return 0 if record["result"]["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
