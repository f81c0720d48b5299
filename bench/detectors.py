#!/usr/bin/env python3
"""Detector benchmark: kperf against mmtests, 0-day, Perfherder and Otava (not a test).

    .venv/bin/python bench/detectors.py --quick          # a few minutes on 2 cores
    .venv/bin/python bench/detectors.py                  # the full protocol (>=300 series per cell)
    .venv/bin/python bench/detectors.py --quick --markdown docs-table.md
    .venv/bin/python bench/detectors.py --calibrate      # thresholds per drift rate (changepoints.py)
    .venv/bin/python bench/detectors.py --series 100 --no-ab   # change points only, reduced

The series come from synthetic.py, the peers from peers.py, the A/B part
from ab.py; ab_clocks.py is the A/B study per clock.

Protocol (docs/statistics.md, "The benchmark"):

Change points. 400-commit series of per-commit values, level 100, noise of
2% of the level (sigma = 2), one step of 0.25-4 sigma, either direction, at a
commit drawn uniformly from 100..300. Noise shapes: normal, log-normal,
bimodal (two modes), one-sided outliers (3% of commits 5-10 sigma slow),
slow drift (random walk), boot-level (each commit is 2 boots x 5 iterations,
between-boot noise dominating). Besides single steps: a close pair (two 2-sigma
steps 10 commits apart, same or opposite direction: recall of each), a
transient (3 sigma for 5 commits, then back: how often its start and its end
are reported) and a ramp (2 sigma spread over 20 commits: an alarm inside the
ramp +-3). Every detector is tuned on change-free series of the same shape (5
per scored series) to one false alarm per 1000 commits, restarts included,
then scored on fresh series. kperf runs as the service does: with the drift
rate learned from a history of 5 earlier change-free series of the same shape
(one of 50 histories per series), which picks its window and threshold; "kperf,
no history" assumes a stationary level. "kperf, shipped threshold" and "kperf,
shipped, no history" are the same two at the shipped thresholds, not tuned: their
false alarms are counted on every change-free series of the shape. Scores: recall (an alarm within +-3 commits of the
change), exact commit, precision, false alarms per 1000 commits on fresh
change-free series, latency (commits after the change until the alarm), time
per appended commit.

A/B. K=5 boots per side x 5 iterations, null pairs and shifted pairs per
noise shape; false regressions and power at alpha .02 two-sided (1% per
direction), against the two-sample test on boot means with known variance.
kperf with learned noise gets a fresh history (20 runs of 5 boots) every 20
pairs, so its rates are averages over histories, as over a service's metrics.

Calibration (--calibrate): for each drift rate of changepoints.DRIFT_THRESHOLDS, the
threshold that gives one false alarm per 1000 commits on each noise shape plus a
random walk of that rate; the shipped value is the largest over the shapes.

Everything is seeded; one extra process at most.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from ab import AB_SHAPES, HISTORY_EVERY, markdown_ab, run_ab
from peers import Detector, Mmtests, Otava, Perfherder, ZeroDay, otava_change_points
from synthetic import (
    CV,
    LEVEL,
    N_COMMITS,
    PAIR_GAP,
    PAIR_SIZE,
    RAMP_LEN,
    RAMP_SIZE,
    SCENARIOS,
    SHAPES,
    SIGMA,
    STEPS,
    TOL,
    TRANSIENT_LEN,
    TRANSIENT_SIZE,
    Scenario,
    in_two,
    make_scenario,
    make_series,
    with_walk,
)

from kperf.stats.changepoints import (
    DEFAULT_THRESHOLD,
    DRIFT_THRESHOLDS,
    OnlineDetector,
    estimate_drift,
    threshold_for_drift,
)

BUDGET = 1.0 / 1000.0  # false alarms per commit
HISTORIES, HISTORY_SERIES = 50, 5  # kperf's learned drift: 50 histories of 5 earlier series (2000 commits)
CALIBRATION_RATES = [rate for rate, _ in DRIFT_THRESHOLDS]
# The shapes every threshold must hold the budget on (drift is normal noise plus a walk: the
# calibration adds the walk to each of them).
CALIBRATION_SHAPES = ["normal", "lognormal", "bimodal", "outliers", "boot-level"]


# ----------------------------------------------------------------------------------------------
# kperf's detector as the benchmark runs it; the peers are in peers.py.


class KperfDetector(Detector):
    """kperf's OnlineDetector with no history: a stationary level assumed, scan window 512."""

    name = "kperf, no history"
    uses_logs = True

    def __init__(
        self, known_sigma: float | None = None, robust: bool = True, window: int = 512, drift: float = 0.0
    ) -> None:
        self.known_sigma, self.robust, self.window, self.drift = known_sigma, robust, window, drift

    def drift_for(self, x: np.ndarray) -> float:
        return self.drift

    def detector(self, x: np.ndarray, h: float) -> OnlineDetector:
        # h scales the calibrated threshold for the drift in use, so one tuned
        # number serves every history (h = DEFAULT_THRESHOLD: as shipped).
        rate = self.drift_for(x)
        th = h * threshold_for_drift(rate) / DEFAULT_THRESHOLD
        return OnlineDetector(threshold=th, sigma=self.known_sigma, robust=self.robust, window=self.window, drift=rate)

    def largest_z(self, x: np.ndarray) -> float:
        """The largest |Z| the detector sees over the series, with no alarm raised."""
        d = self.detector(x, math.inf)
        best = 0.0
        for v in x:
            d.append(float(v))
            best = max(best, d.last_max)
        return best

    def max_score(self, x: np.ndarray) -> float:
        return self.largest_z(x) * DEFAULT_THRESHOLD / threshold_for_drift(self.drift_for(x))

    def run(self, x: np.ndarray, h: float) -> list[tuple[int, int]]:
        d = self.detector(x, h)
        for v in x:
            d.append(float(v))
        return [(cp.index, cp.detected_at) for cp in d.change_points()]


class KperfLearnedDrift(KperfDetector):
    """kperf as the service runs it: the level's drift rate learned from earlier change-free history.

    Each series is given one of HISTORIES histories of the same shape (chosen by
    a hash of the series, so the tuning and scoring sets see all of them), each
    HISTORY_SERIES earlier series of 400 commits; estimate_drift() turns it into
    a rate, which picks the scan window and its calibrated threshold.
    """

    name = "kperf"

    def __init__(self, shape: str, seed: int) -> None:
        super().__init__()
        rng = np.random.default_rng([seed, SHAPES.index(shape), 99])
        self.rates = [
            estimate_drift([make_series(rng, shape, 0.0)[1] for _ in range(HISTORY_SERIES)]).rate
            for _ in range(HISTORIES)
        ]

    def drift_for(self, x: np.ndarray) -> float:
        return self.rates[zlib.crc32(x.tobytes()) % len(self.rates)]


class KperfShipped(KperfLearnedDrift):
    """kperf exactly as shipped: learned drift and the default thresholds, not tuned to the budget.

    Its false alarms are counted on every change-free series of the shape (the tuning set is
    fresh data for a detector that is not tuned), so the budget check has the most commits.
    """

    name = "kperf, shipped threshold"
    fixed = DEFAULT_THRESHOLD


class KperfShippedNoHistory(KperfDetector):
    """kperf as shipped for a metric with no history: rate 0, window 512, DEFAULT_THRESHOLD."""

    name = "kperf, shipped, no history"
    fixed = DEFAULT_THRESHOLD


class ScanReference(KperfDetector):
    """The likelihood-ratio scan that knows sigma (the statistical reference), online, no clipping."""

    name = "LR scan, known sigma"

    def __init__(self) -> None:
        super().__init__(known_sigma=math.log(1 + CV), robust=False, window=10_000)


# ----------------------------------------------------------------------------------------------


@dataclass
class Cell:
    recall: float
    exact: float
    precision: float
    latency_med: float
    latency_p90: float
    n: int


@dataclass
class ScenarioCell:
    first: float  # close pair: an alarm within +-TOL of the first step; transient: of its start; ramp: in the ramp
    second: float  # close pair: of the second step; transient: of its end (the return); ramp: nan
    both: float  # close pair, transient: both; ramp: nan
    n: int


@dataclass
class Row:
    detector: str
    shape: str
    threshold: float
    fa_per_1000: float
    cells: dict[float, Cell] = field(default_factory=dict)
    scenarios: dict[str, ScenarioCell] = field(default_factory=dict)


def alarms_per_1000(det: Detector, xs: Sequence[np.ndarray], h: float, scores: np.ndarray | None = None) -> float:
    """Alarms per 1000 commits at threshold h; with each series' largest score known, only series whose
    largest score exceeds h are run (the others raise nothing: every detector's first alarm needs a score
    over h, and a run follows the threshold-free one until its first alarm)."""
    run = range(len(xs)) if scores is None else [int(i) for i in np.flatnonzero(scores > h)]
    alarms = sum(det.count(xs[i], h) for i in run)
    return alarms / (len(xs) * N_COMMITS) * 1000


def tune(det: Detector, nulls: Sequence[np.ndarray]) -> float:
    """The threshold at which the change-free tuning series raise 1 alarm per 1000 commits.

    Start from the quantile of each series' largest score (P(any alarm in 400
    commits) = 1 - exp(-0.4)), then find by bisection the lowest threshold at
    which the alarms actually raised, restarts included, fit the budget.
    """
    target = 1.0 - math.exp(-N_COMMITS * BUDGET)
    scores = np.array([det.max_score(x) for x in nulls])

    def fa(h: float) -> float:
        return alarms_per_1000(det, nulls, h, scores)

    lo = float(np.quantile(scores, 1.0 - target))
    step = 0.05 * abs(lo) + 1e-3
    if fa(lo) <= BUDGET * 1000:
        hi, lo = lo, lo - step
        for _ in range(30):
            if fa(lo) > BUDGET * 1000:
                break
            hi, lo = lo, lo - step
    else:
        hi = lo + step
        for _ in range(30):
            if fa(hi) <= BUDGET * 1000:
                break
            lo, hi = hi, hi + step
    for _ in range(8):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fa(mid) <= BUDGET * 1000 else (mid, hi)
    return hi


def score_series(det: Detector, series: Sequence[tuple[np.ndarray, int]], h: float) -> Cell:
    hits = exact = alarms_total = tp_alarms = 0
    lat: list[int] = []
    for x, cp in series:
        alarms = det.run(x, h)
        alarms_total += len(alarms)
        near = [a for a in alarms if abs(a[0] - cp) <= TOL]
        tp_alarms += len(near)
        if near:
            hits += 1
            exact += any(a[0] == cp for a in alarms)
            lat.append(max(0, min(a[1] for a in near) - cp))
    n = len(series)
    return Cell(
        recall=hits / n,
        exact=exact / n,
        precision=tp_alarms / alarms_total if alarms_total else float("nan"),
        latency_med=float(np.median(lat)) if lat else float("nan"),
        latency_p90=float(np.quantile(lat, 0.9)) if lat else float("nan"),
        n=n,
    )


def score_scenarios(det: Detector, kind: str, series: Sequence[tuple[np.ndarray, Scenario]], h: float) -> ScenarioCell:
    first = second = both = 0
    for x, sc in series:
        idx = [a[0] for a in det.run(x, h)]
        if kind == "ramp":
            first += any(sc.start - TOL <= i <= sc.end + TOL for i in idx)
            continue
        f = any(abs(i - sc.start) <= TOL for i in idx)
        g = any(abs(i - sc.end) <= TOL for i in idx)
        first, second, both = first + f, second + g, both + (f and g)
    n = len(series)
    if kind == "ramp":
        return ScenarioCell(first / n, float("nan"), float("nan"), n)
    return ScenarioCell(first / n, second / n, both / n, n)


def detectors(shape: str, seed: int) -> list[Detector]:
    out: list[Detector] = [
        KperfShipped(shape, seed),
        KperfShippedNoHistory(),
        KperfLearnedDrift(shape, seed),
        KperfDetector(),
        ScanReference(),
        Mmtests(),
        ZeroDay(),
        Perfherder(),
    ]
    if otava_change_points is not None:
        out.append(Otava())
    return out


def run_shape(args: tuple[str, int, int, int]) -> list[Row]:
    shape, n_tune, n_cell, seed = args
    rng = np.random.default_rng([seed, SHAPES.index(shape)])
    tune_set = [make_series(rng, shape, 0.0)[:2] for _ in range(n_tune)]
    null_set = [make_series(rng, shape, 0.0)[:2] for _ in range(n_cell)]
    step_sets = {}
    for step in STEPS:
        step_sets[step] = [make_series(rng, shape, step) for _ in range(n_cell)]
    scen_sets = {kind: [make_scenario(rng, shape, kind) for _ in range(n_cell)] for kind in SCENARIOS}
    rows = []
    for det in detectors(shape, seed):
        t0 = time.time()
        pick = 1 if det.uses_logs else 0
        fixed: float | None = getattr(det, "fixed", None)
        if fixed is None:
            h = tune(det, [t[pick] for t in tune_set])
            fa = alarms_per_1000(det, [t[pick] for t in null_set], h)
        else:
            h = fixed
            fa = alarms_per_1000(det, [t[pick] for t in tune_set + null_set], h)
        row = Row(det.name, shape, h, fa)
        for step, sset in step_sets.items():
            row.cells[step] = score_series(det, [(s[0] if pick == 0 else s[1], s[2]) for s in sset], h)
        for kind, scs in scen_sets.items():
            row.scenarios[kind] = score_scenarios(det, kind, [(sc.x[pick], sc) for sc in scs], h)
        rows.append(row)
        print(
            f"  {shape:<10} {det.name:<24} h={h:7.3f} fa/1000={fa:5.2f} "
            + " ".join(f"{s}:{c.recall:.2f}/{c.exact:.2f}" for s, c in row.cells.items())
            + " | "
            + " ".join(f"{k}:{c.first:.2f}/{c.second:.2f}" for k, c in row.scenarios.items())
            + f" ({time.time() - t0:.0f} s)",
            flush=True,
        )
    return rows


def append_cost(n: int = 1000, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    x = np.log(LEVEL * (1 + CV * rng.normal(0, 1, n)))
    det = OnlineDetector()
    t0 = time.perf_counter()
    for v in x:
        det.append(float(v))
    per = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(20):
        det.append(float(x[-1]))
    at_end = (time.perf_counter() - t0) / 20
    out = {"kperf mean ms/commit (1000 commits)": per * 1000, "kperf ms/commit at commit 1000": at_end * 1000}
    if otava_change_points is not None:
        vals = LEVEL * (1 + CV * rng.normal(0, 1, n))
        t0 = time.perf_counter()
        otava_change_points(list(map(float, vals)), window_len=50, max_pvalue=0.001)
        out["Otava ms per re-analysis of 1000 commits"] = (time.perf_counter() - t0) * 1000
    return out


def markdown(rows: list[Row], ab: list[dict[str, Any]], cost: dict[str, float], meta: str) -> str:
    lines = [meta, ""]
    lines.append(
        "| shape | detector | FA/1000 | "
        + " | ".join(f"recall {s}{SIGMA}" for s in STEPS)
        + " | "
        + " | ".join(f"exact {s}{SIGMA}" for s in STEPS)
        + f" | precision (1{SIGMA} / 2{SIGMA}) | latency med/p90 (1{SIGMA}) | (2{SIGMA}) |"
    )
    lines.append("|" + "---|" * (5 + 2 * len(STEPS)))
    for r in rows:
        c = r.cells
        lines.append(
            f"| {r.shape} | {r.detector} | {r.fa_per_1000:.2f} | "
            + " | ".join(f"{c[s].recall:.2f}" for s in STEPS)
            + " | "
            + " | ".join(f"{c[s].exact:.2f}" for s in STEPS)
            + f" | {c[1.0].precision:.2f} / {c[2.0].precision:.2f}"
            + f" | {c[1.0].latency_med:.0f} / {c[1.0].latency_p90:.0f}"
            + f" | {c[2.0].latency_med:.0f} / {c[2.0].latency_p90:.0f} |"
        )
    if rows and rows[0].scenarios:
        lines.append("")
        lines.append(
            f"| shape | detector | close pair ({PAIR_SIZE:g}{SIGMA}, {PAIR_GAP} apart): first | second | both "
            f"| transient ({TRANSIENT_SIZE:g}{SIGMA}, {TRANSIENT_LEN} commits): start reported | return reported "
            f"| both | ramp ({RAMP_SIZE:g}{SIGMA} over {RAMP_LEN}): recall |"
        )
        lines.append("|" + "---|" * 9)
        for r in rows:
            cp, tr, rp = (r.scenarios[k] for k in SCENARIOS)
            lines.append(
                f"| {r.shape} | {r.detector} | {cp.first:.2f} | {cp.second:.2f} | {cp.both:.2f} "
                f"| {tr.first:.2f} | {tr.second:.2f} | {tr.both:.2f} | {rp.first:.2f} |"
            )
    lines.append("")
    lines.append("Time per appended commit: " + "; ".join(f"{k}: {v:.2f}" for k, v in cost.items()))
    lines.append("")
    lines.extend(markdown_ab(ab))
    return "\n".join(lines)


class _Absolute(KperfDetector):
    """kperf at a given drift rate with h the threshold itself (for calibration)."""

    def detector(self, x: np.ndarray, h: float) -> OnlineDetector:
        return OnlineDetector(threshold=h, window=self.window, drift=self.drift)

    def max_score(self, x: np.ndarray) -> float:
        return self.largest_z(x)


def _calibrate_one(args: tuple[float, str, int, int]) -> tuple[float, str, int, float]:
    rate, shape, n, seed = args
    rng = np.random.default_rng([seed, int(rate * 1e6), CALIBRATION_SHAPES.index(shape)])
    series = [with_walk(rng, shape, rate) for _ in range(n)]
    det = _Absolute(drift=rate)
    return rate, shape, OnlineDetector(drift=rate).window, tune(det, series)


def calibrate(n: int, seed: int, shapes: Sequence[str]) -> str:
    """Thresholds for 1 false alarm per 1000 commits per drift rate (changepoints.DRIFT_THRESHOLDS):
    for each rate the largest over the noise shapes, each shape with a random walk of that rate."""
    found = in_two(_calibrate_one, [(r, sh, n, seed) for r in CALIBRATION_RATES for sh in shapes])
    lines = [f"# {n} series of {N_COMMITS} commits per rate and shape, seed {seed}", "DRIFT_THRESHOLDS = ["]
    for rate in CALIBRATION_RATES:
        per = {sh: h for r, sh, _, h in found if r == rate}
        window = next(w for r, _, w, _ in found if r == rate)
        worst = max(per, key=lambda sh: per[sh])
        detail = ", ".join(f"{sh} {h:.2f}" for sh, h in per.items())
        lines.append(f"    ({rate:g}, {per[worst]:.2f}),  # window {window}; {detail}")
    lines.append("]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="100 series per cell instead of 300")
    p.add_argument("--seed", type=int, default=20261122)
    p.add_argument("--series", type=int, help="series per cell (overrides --quick)")
    p.add_argument("--tune-series", type=int, help="change-free series per shape for tuning (default 5 per cell)")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--ab-pairs", type=int, help="A/B pairs per shape and shift")
    p.add_argument("--no-ab", action="store_true")
    p.add_argument("--no-cp", action="store_true", help="skip the change-point part")
    p.add_argument("--markdown", type=Path, help="also write the tables as markdown to this file")
    p.add_argument("--calibrate", action="store_true", help="print the detector's thresholds per drift rate and exit")
    args = p.parse_args(argv)
    if args.calibrate:
        cal_shapes = [s for s in args.shapes.split(",") if s in CALIBRATION_SHAPES] or CALIBRATION_SHAPES
        print(calibrate(args.tune_series or 2000, args.seed, cal_shapes), flush=True)
        return 0
    n_cell = args.series or (100 if args.quick else 300)
    n_tune = args.tune_series or 5 * n_cell
    n_pairs = args.ab_pairs or (1000 if args.quick else 4000)
    shapes = [s for s in args.shapes.split(",") if s]
    t0 = time.time()
    if otava_change_points is None:
        print("apache-otava is not installed: its row is left out (pip install --no-deps apache-otava==0.8.0)")
    print(f"change points: {n_cell} series per cell, {n_tune} change-free series for tuning, {len(shapes)} shapes")
    tasks = [] if args.no_cp else [(s, n_tune, n_cell, args.seed) for s in shapes]
    rows = [r for rs in in_two(run_shape, tasks) for r in rs]
    cost = append_cost()
    ab = [] if args.no_ab else in_two(run_ab, [(s, n_pairs, args.seed) for s in AB_SHAPES])
    meta = (
        f"seed {args.seed}; {n_cell} series per cell ({n_tune} for tuning), {N_COMMITS} commits each; "
        f"A/B: {n_pairs} null pairs and {max(HISTORY_EVERY, n_pairs // 2)} per shift, a fresh history every "
        f"{HISTORY_EVERY}, K=5 x N=5, alpha .02; wall {time.time() - t0:.0f} s"
    )
    text = markdown(rows, ab, cost, meta)
    print()
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
