#!/usr/bin/env python3
"""A/B per clock: the between-build component and the practical threshold (not a test).

    .venv/bin/python bench/ab_clocks.py                     # about 3 minutes on 2 cores
    .venv/bin/python bench/ab_clocks.py --pairs 1000 --markdown clocks.md

Two builds of one source differ by more than two boots of one build do
(MEASUREMENT.md): under the instruction clock (QEMU -icount shift=0,sleep=off)
boots of one build agree to 0.01-0.3% or bit for bit, while an unrelated
change moved metrics by up to 0.06% (norandmaps nokaslr). Under the wall
clock, TCG boots differ by 12-43%. Simulated here, on the log scale:

    boot summary = level + B(build) + b(boot) + mean of e(iteration) + a fixed warm-up pattern

base and head are one build each, so an unrelated change (the null) is two
draws of B. Cells: between-build sd 0.03-0.1% with boots identical, at
0.01% or at 0.3% (instructions, K=3 boots x N=3 iterations), and TCG
wall-clock boots of 12% and 43% (K=8 x N=3).

Rules, each at alpha .02 two-sided (1% per direction), a regression when
p < alpha, the change is negative and at least the practical threshold:
- "no build component": kperf with the boot noise learned from 20 earlier
  runs (as the service runs today), no MetricInput.build_noise;
- "build component, 40 builds" / "12 builds": plus the between-build sd
  learned by kperf.stats.builds from a history of 8 groups of 5 builds
  (3 groups of 4) with 2 boots each; a fresh history every 20 pairs, so the
  rates are averages over histories, as over a service's metrics;
- "z-test, knows the noise": the difference of boot-summary means over its
  true sd (2 sd_build^2 + 2 sd_boot-summary^2 / K).

Reported: false regressions on unrelated changes and power at shifts of 2,
3 and 4 sd of the difference (threshold 0), then false regressions and power
at absolute shifts per practical threshold. Seeded; one extra process.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from synthetic import in_two

from kperf.stats.abtest import MetricInput, NoisePrior, compare_one
from kperf.stats.builds import between_build_noise
from kperf.stats.noise import variance_components

ALPHA = 0.02
LEVEL = 10_000.0
PATTERN = np.array([0.011, 0.0, -0.0015])  # warm-up: the first iteration of a boot is faster, as fork0's
HISTORY_EVERY = 20
SIGMAS = [2.0, 3.0, 4.0]  # shifts in sd of the difference, for power against the z-test
FLOORS = {"instructions": [0.0, 0.25, 0.5, 1.0], "wall": [0.0, 3.0, 5.0]}
SHIFTS_PCT = {"instructions": [0.25, 0.5, 0.75, 1.0, 1.5, 2.0], "wall": [10.0, 25.0, 50.0]}
HISTORIES = {"40 builds": (8, 5), "12 builds": (3, 4)}  # groups x builds per group, 2 boots per build


@dataclass(frozen=True)
class Cell:
    clock: str
    name: str
    build_sd: float  # log scale, so 0.001 is 0.1%
    boot_sd: float
    iter_sd: float
    boots: int
    iterations: int = 3

    @property
    def summary_sd(self) -> float:
        """sd of one boot summary around its build's level."""
        return math.sqrt(self.boot_sd**2 + self.iter_sd**2 / self.iterations)

    @property
    def diff_sd(self) -> float:
        return math.sqrt(2.0 * self.build_sd**2 + 2.0 * self.summary_sd**2 / self.boots)


CELLS = [
    Cell("instructions", "boots identical, builds 0.03%", 0.0003, 0.0, 0.0, 3),
    Cell("instructions", "boots identical, builds 0.1%", 0.001, 0.0, 0.0, 3),
    Cell("instructions", "boots 0.01%, builds 0.06%", 0.0006, 0.0001, 0.0001, 3),
    Cell("instructions", "boots 0.3%, builds 0.03%", 0.0003, 0.003, 0.003, 3),
    Cell("instructions", "boots 0.3%, builds 0.1%", 0.001, 0.003, 0.003, 3),
    Cell("wall", "TCG boots 12%, builds 0.1%", 0.001, 0.12, 0.06, 8),
    Cell("wall", "TCG boots 43%, builds 0.1%", 0.001, 0.43, 0.2, 8),
]


def build(rng: np.random.Generator, cell: Cell, shift: float, boots: int) -> list[list[float]]:
    """One build's boots: its own level B, then per boot b and per iteration e (log scale)."""
    level = shift + (rng.normal(0.0, cell.build_sd) if cell.build_sd else 0.0)
    out = []
    for _ in range(boots):
        b = rng.normal(0.0, cell.boot_sd) if cell.boot_sd else 0.0
        e = rng.normal(0.0, cell.iter_sd, cell.iterations) if cell.iter_sd else np.zeros(cell.iterations)
        out.append([float(v) for v in LEVEL * np.exp(level + b + e + PATTERN[: cell.iterations])])
    return out


def history(rng: np.random.Generator, cell: Cell, groups: int, per_group: int) -> NoisePrior | None:
    """The between-build sd as the service would learn it: groups of builds that share a level."""
    data = []
    for _ in range(groups):
        source = rng.normal(0.0, 0.05)  # each group its own level: only the spread inside counts
        data.append([build(rng, cell, source, 2) for _ in range(per_group)])
    return between_build_noise(data).prior()


def run_cell(args: tuple[Cell, int, int]) -> dict[str, Any]:
    cell, n_pairs, seed = args
    rng = np.random.default_rng([seed, CELLS.index(cell)])
    z = float(sps.norm.ppf(1.0 - ALPHA / 2.0))
    floors = FLOORS[cell.clock]
    shifts: list[tuple[str, float]] = [("null", 0.0)]
    shifts += [(f"{s:g}sd", s * cell.diff_sd) for s in SIGMAS]
    shifts += [(f"{p:g}%", -math.log(1.0 - p / 100.0)) for p in SHIFTS_PCT[cell.clock]]
    rules = ["no build component", *(f"build component, {h}" for h in HISTORIES), "z-test, knows the noise"]
    rates: dict[str, dict[str, dict[float, float]]] = {}
    t0 = time.time()
    for label, shift in shifts:
        pairs = n_pairs if shift == 0.0 else max(HISTORY_EVERY, n_pairs // 4)
        hits = {rule: dict.fromkeys(floors, 0) for rule in rules}
        boot_prior: NoisePrior | None = None
        build_priors: dict[str, NoisePrior | None] = {}
        for i in range(pairs):
            if i % HISTORY_EVERY == 0:
                runs = [build(rng, cell, 0.0, cell.boots) for _ in range(20)]
                boot_prior = variance_components(runs).prior(cell.iterations)
                build_priors = {h: history(rng, cell, g, b) for h, (g, b) in HISTORIES.items()}
            base = build(rng, cell, 0.0, cell.boots)
            head = build(rng, cell, -shift, cell.boots)
            inputs = {"no build component": MetricInput(base, head, True, 0.0, noise=boot_prior)}
            for h, prior in build_priors.items():
                inputs[f"build component, {h}"] = MetricInput(base, head, True, 0.0, boot_prior, prior)
            for rule, inp in inputs.items():
                r = compare_one(inp, ALPHA)
                if r.p_value is None or r.change_pct is None or not (r.p_value < ALPHA and r.change_pct < 0):
                    continue
                for f in floors:
                    hits[rule][f] += -r.change_pct >= f
            d = float(np.mean([np.mean(np.log(b)) for b in head]) - np.mean([np.mean(np.log(b)) for b in base]))
            if d / cell.diff_sd < -z:
                for f in floors:
                    hits["z-test, knows the noise"][f] += (1.0 - math.exp(d)) * 100.0 >= f
        rates[label] = {rule: {f: c / pairs for f, c in per.items()} for rule, per in hits.items()}
    print(f"  {cell.clock} / {cell.name}: {time.time() - t0:.0f} s", flush=True)
    return {"cell": cell, "rates": rates, "rules": rules}


def markdown(results: list[dict[str, Any]], meta: str) -> str:
    lines = [meta, ""]
    head = "| clock | cell | rule | false regressions | " + " | ".join(f"power {s:g} sd" for s in SIGMAS) + " |"
    lines += [head, "|" + "---|" * (4 + len(SIGMAS))]
    for res in results:
        cell, rates = res["cell"], res["rates"]
        for rule in res["rules"]:
            vals = [rates["null"][rule][0.0]] + [rates[f"{s:g}sd"][rule][0.0] for s in SIGMAS]
            lines.append(f"| {cell.clock} | {cell.name} | {rule} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    lines.append("")
    for clock in ("instructions", "wall"):
        pcts = SHIFTS_PCT[clock]
        lines.append(
            f"| {clock}: cell | rule | threshold | false regressions | "
            + " | ".join(f"power {p:g}%" for p in pcts)
            + " |"
        )
        lines.append("|" + "---|" * (4 + len(pcts)))
        for res in results:
            cell, rates = res["cell"], res["rates"]
            if cell.clock != clock:
                continue
            for rule in res["rules"]:
                if rule == "build component, 12 builds":
                    continue
                for f in FLOORS[clock]:
                    vals = [rates["null"][rule][f]] + [rates[f"{p:g}%"][rule][f] for p in pcts]
                    lines.append(f"| {cell.name} | {rule} | {f:g}% | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=4000, help="null pairs per cell (a quarter of it per shift)")
    p.add_argument("--seed", type=int, default=20261123)
    p.add_argument("--markdown", type=Path, help="also write the tables as markdown to this file")
    args = p.parse_args(argv)
    t0 = time.time()
    results = in_two(run_cell, [(c, args.pairs, args.seed) for c in CELLS])
    meta = (
        f"seed {args.seed}; {args.pairs} null pairs (unrelated changes) and {max(HISTORY_EVERY, args.pairs // 4)} "
        f"per shift and cell, a fresh history every {HISTORY_EVERY}; alpha {ALPHA:g}; wall {time.time() - t0:.0f} s"
    )
    text = markdown(results, meta)
    print()
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
