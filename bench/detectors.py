#!/usr/bin/env python3
"""Detector benchmark: kperf against mmtests, 0-day, Perfherder and Otava (not a test).

    .venv/bin/python bench/detectors.py --quick          # a few minutes on 2 cores
    .venv/bin/python bench/detectors.py                  # the full protocol (>=300 series per cell)
    .venv/bin/python bench/detectors.py --quick --markdown docs-table.md
    .venv/bin/python bench/detectors.py --calibrate      # thresholds per drift rate (changepoints.py)

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
no history" assumes a stationary level. Scores: recall (an alarm within +-3 commits of the
change), exact commit, precision, false alarms per 1000 commits on fresh
change-free series, latency (commits after the change until the alarm), time
per appended commit.

A/B. K=5 boots per side x 5 iterations, null pairs and shifted pairs per
noise shape; false regressions and power at alpha .02 two-sided (1% per
direction), against the two-sample test on boot means with known variance.
kperf with learned noise gets a fresh history (20 runs of 5 boots) every 20
pairs, so its rates are averages over histories, as over a service's metrics.

Everything is seeded; one extra process at most.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from kperf.stats.abtest import MetricInput, NoisePrior, compare_one
from kperf.stats.changepoints import DEFAULT_THRESHOLD, OnlineDetector, estimate_drift, threshold_for_drift

try:
    from otava.analysis import compute_change_points as otava_change_points  # type: ignore[import-untyped,import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - documented fallback below
    otava_change_points = None

LEVEL, CV = 100.0, 0.02  # sigma = 2 units = 2% of the level
N_COMMITS = 400
BUDGET = 1.0 / 1000.0  # false alarms per commit
SHAPES = ["normal", "lognormal", "bimodal", "outliers", "drift", "boot-level"]
STEPS = [0.25, 0.5, 1.0, 2.0, 3.0, 4.0]
TOL = 3
HISTORIES, HISTORY_SERIES = 50, 5  # kperf's learned drift: 50 histories of 5 earlier series (2000 commits)
CALIBRATION_RATES = [0.0, 1e-4, 3e-4, 1e-3, 2.5e-3, 1e-2, 3e-2]
SIGMA = "\u03c3"


# ----------------------------------------------------------------------------------------------
# Series generation: per-commit values and, for kperf, per-commit summaries (log of the values,
# or the boot-level summary kperf computes from samples).


def noise(rng: np.random.Generator, shape: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values seen by the peers: per-commit means, summaries seen by kperf), unit sigma before scaling."""
    if shape == "normal":
        z = rng.normal(0, 1, n)
    elif shape == "lognormal":
        s = 0.5
        raw = rng.lognormal(0, s, n)
        z = -(raw - math.exp(s * s / 2)) / math.sqrt((math.exp(s * s) - 1) * math.exp(s * s))  # slow tail
    elif shape == "bimodal":
        z = np.where(rng.random(n) < 0.5, -1, 1) * math.sqrt(0.91) + rng.normal(0, 0.3, n)
    elif shape == "outliers":
        z = rng.normal(0, 1, n)
        hit = rng.random(n) < 0.03
        z[hit] -= rng.uniform(5, 10, hit.sum())
    elif shape == "drift":
        z = rng.normal(0, 1, n) + np.cumsum(rng.normal(0, 0.05, n))
    elif shape == "boot-level":
        # 2 boots x 5 iterations; between-boot noise dominates: var(mean) = 1.6/2 + 2/10 = 1
        samples = rng.normal(0, math.sqrt(1.6), (n, 2, 1)) + rng.normal(0, math.sqrt(2.0), (n, 2, 5))
        vals = LEVEL * (1 + CV * samples)
        mean = vals.mean(axis=(1, 2))
        logs = np.sort(np.log(vals), axis=2)[:, :, 1:4].mean(axis=2).mean(axis=1)  # kperf: trimmed boots
        return mean, logs
    else:
        raise ValueError(shape)
    vals = LEVEL * (1 + CV * z)
    return vals, np.log(vals)


def make_series(rng: np.random.Generator, shape: str, step: float) -> tuple[np.ndarray, np.ndarray, int]:
    vals, logs = noise(rng, shape, N_COMMITS)
    cp = int(rng.integers(100, 301)) if step else -1
    if step:
        sign = 1 if rng.random() < 0.5 else -1
        vals[cp:] += sign * step * CV * LEVEL
        logs[cp:] = np.log(np.exp(logs[cp:]) + sign * step * CV * LEVEL)
    return vals, logs, cp


# Scenarios beyond one step: (name, size in sigma). Each gives the mean profile (in sigma) and the
# events that are scored.
PAIR_SIZE, PAIR_GAP = 2.0, 10  # two steps of the same size, 10 commits apart, same or opposite direction
TRANSIENT_SIZE, TRANSIENT_LEN = 3.0, 5  # a shift lasting 5 commits, then back
RAMP_SIZE, RAMP_LEN = 2.0, 20  # a gradual change over 20 commits
SCENARIOS = ["close pair", "transient", "ramp"]


@dataclass
class Scenario:
    x: tuple[np.ndarray, np.ndarray]  # (values, logs) as make_series
    start: int  # first commit of the change (first step, transient or ramp)
    end: int  # close pair: the second step; transient: the first commit back; ramp: the first at the new level


def make_scenario(rng: np.random.Generator, shape: str, kind: str) -> Scenario:
    vals, logs = noise(rng, shape, N_COMMITS)
    prof = np.zeros(N_COMMITS)
    sign = 1 if rng.random() < 0.5 else -1
    if kind == "close pair":
        start = int(rng.integers(100, 291))
        end = start + PAIR_GAP
        second = sign if rng.random() < 0.5 else -sign
        prof[start:] += sign * PAIR_SIZE
        prof[end:] += second * PAIR_SIZE
    elif kind == "transient":
        start = int(rng.integers(100, 301))
        end = start + TRANSIENT_LEN
        prof[start:end] = sign * TRANSIENT_SIZE
    elif kind == "ramp":
        start = int(rng.integers(100, 281))
        end = start + RAMP_LEN
        prof[start:end] = sign * RAMP_SIZE * np.arange(1, RAMP_LEN + 1) / RAMP_LEN
        prof[end:] = sign * RAMP_SIZE
    else:
        raise ValueError(kind)
    vals = vals + prof * CV * LEVEL
    logs = np.log(np.exp(logs) + prof * CV * LEVEL)
    return Scenario((vals, logs), start, end)


# ----------------------------------------------------------------------------------------------
# Detectors. Each gives, for a series, the per-commit score whose excess over a threshold is an
# alarm, and a run() that returns alarms [(index of first commit after the change, detected at)].


class Detector:
    name = ""
    uses_logs = False

    def max_score(self, x: np.ndarray) -> float:
        raise NotImplementedError

    def run(self, x: np.ndarray, h: float) -> list[tuple[int, int]]:
        raise NotImplementedError

    def count(self, x: np.ndarray, h: float) -> int:
        return len(self.run(x, h))


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


class ScanReference(KperfDetector):
    """The likelihood-ratio scan that knows sigma (the statistical reference), online, no clipping."""

    name = "LR scan, known sigma"

    def __init__(self) -> None:
        super().__init__(known_sigma=math.log(1 + CV), robust=False, window=10_000)


class Windowed(Detector):
    """Score each split k from `back` points before and `fore` after; alarm at a local maximum over threshold."""

    back, fore = 12, 12

    def scores(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _alarms(self, s: np.ndarray, h: float) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        quiet_until = -1
        for k in range(self.back + 1, len(s) - 1):
            if k <= quiet_until or not (s[k] > h and s[k] >= s[k - 1] and s[k] >= s[k + 1]):
                continue
            out.append((k, min(len(s) - 1, k + self.fore)))  # needs x[k+fore] (for s[k+1]) to be seen
            quiet_until = k + self.fore
        return out

    def max_score(self, x: np.ndarray) -> float:
        s = self.scores(x)
        loc = (s[1:-1] >= s[:-2]) & (s[1:-1] >= s[2:])
        vals = s[1:-1][loc]
        return float(vals.max()) if vals.size else 0.0

    def run(self, x: np.ndarray, h: float) -> list[tuple[int, int]]:
        return self._alarms(self.scores(x), h)

    def windows(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(x)
        ks = np.arange(n)
        valid = (ks >= self.back) & (ks + self.fore <= n)
        idx = ks[valid]
        before = np.stack([x[k - self.back : k] for k in idx]) if idx.size else np.zeros((0, self.back))
        after = np.stack([x[k : k + self.fore] for k in idx]) if idx.size else np.zeros((0, self.fore))
        return idx, before, after


class Mmtests(Windowed):
    """mmtests' compare rule on windows: the mean +- c*stddev bands do not overlap (c = 1.96 by default)."""

    name = "mmtests (band overlap)"

    def scores(self, x: np.ndarray) -> np.ndarray:
        s = np.zeros(len(x))
        idx, b, a = self.windows(x)
        sd = b.std(axis=1, ddof=1) + a.std(axis=1, ddof=1)
        s[idx] = np.abs(a.mean(axis=1) - b.mean(axis=1)) / np.maximum(sd, 1e-12)
        return s


class ZeroDay(Windowed):
    """0-day's rule: the sides separate (min above the other mean, both ways) and the means differ by >1%."""

    name = "0-day (separation + 1%)"
    back, fore = 5, 5

    def scores(self, x: np.ndarray) -> np.ndarray:
        s = np.zeros(len(x))
        idx, b, a = self.windows(x)
        mb, ma = b.mean(axis=1), a.mean(axis=1)
        up = (a.min(axis=1) > mb) & (b.max(axis=1) < ma)
        down = (a.max(axis=1) < mb) & (b.min(axis=1) > ma)
        ratio = np.abs(ma / mb - 1.0) * 100.0
        s[idx] = np.where((up | down) & (ratio > 1.0), ratio, 0.0)
        return s


class Perfherder(Windowed):
    """Perfherder: t over 12 back / 12 forward, local maximum, threshold (default 7), then a 2% floor."""

    name = "Perfherder (t + 2%)"

    def scores(self, x: np.ndarray) -> np.ndarray:
        s = np.zeros(len(x))
        idx, b, a = self.windows(x)
        mb, ma = b.mean(axis=1), a.mean(axis=1)
        se = np.sqrt(b.var(axis=1, ddof=1) / self.back + a.var(axis=1, ddof=1) / self.fore)
        t = np.abs(ma - mb) / np.maximum(se, 1e-12)
        s[idx] = np.where(np.abs(ma / mb - 1.0) * 100.0 >= 2.0, t, 0.0)
        return s


class Otava(Detector):
    """Apache Otava's E-divisive with t-test merge (its package), window 50; threshold = -log10(max p)."""

    name = "Otava (apache-otava)"

    def detect(self, x: np.ndarray, p: float) -> list[int]:
        assert otava_change_points is not None
        cps, _ = otava_change_points(list(map(float, x)), window_len=50, max_pvalue=p)
        return [int(c.index) for c in cps]

    def max_score(self, x: np.ndarray) -> float:
        # An upper bound (to 0.06) of the largest -log10(p) threshold at which Otava still reports
        # something, by bisection: at any threshold above it, it reports nothing.
        lo, hi = 0.5, 16.0
        if not self.detect(x, 10**-lo):
            return lo
        for _ in range(8):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.detect(x, 10**-mid) else (lo, mid)
        return hi

    def count(self, x: np.ndarray, h: float) -> int:
        return len(self.detect(x, 10**-h))

    def run(self, x: np.ndarray, h: float) -> list[tuple[int, int]]:
        p = 10**-h
        final = self.detect(x, p)
        out = []
        for idx in final:
            # First prefix at which Otava reports a change within +-TOL of this one (bisection on the prefix).
            lo, hi = idx + 1, len(x)
            while lo < hi:
                mid = (lo + hi) // 2
                if any(abs(c - idx) <= TOL for c in self.detect(x[: mid + 1], p)):
                    hi = mid
                else:
                    lo = mid + 1
            out.append((idx, lo))
        return out


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
        h = tune(det, [t[pick] for t in tune_set])
        fa = alarms_per_1000(det, [t[pick] for t in null_set], h)
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


# ----------------------------------------------------------------------------------------------
# A/B at fixed K x N.

AB_SHAPES = ["normal", "lognormal", "bimodal", "outliers", "iteration-level"]


def ab_boots(rng: np.random.Generator, shape: str, k: int, n: int, shift_sigma: float) -> list[list[float]]:
    """k boots of n iterations; one boot summary's sd is 1% of the level (sigma)."""
    out = []
    for _ in range(k):
        if shape == "bimodal":
            b = (0.9 if rng.random() < 0.5 else -0.9) + rng.normal(0, 0.3)
        elif shape == "iteration-level":
            b = rng.normal(0, 0.3)
        else:
            b = rng.normal(0, 0.95)
        w = math.sqrt(max(1e-9, 1 - (0.3**2 if shape == "iteration-level" else 0.95**2)) * n)
        it = rng.normal(0, w, n)
        if shape == "lognormal":
            it = (rng.lognormal(0, 0.5, n) - math.exp(0.125)) / math.sqrt((math.e**0.25 - 1) * math.e**0.25) * w
        if shape == "outliers":
            hit = rng.random(n) < 0.03
            it[hit] -= rng.uniform(20, 40, hit.sum())
        out.append(list(100.0 * (1 + 0.01 * (b + it + shift_sigma))))
    return out


def ab_rules(
    base: list[list[float]], head: list[list[float]], prior: NoisePrior | None, alpha: float
) -> dict[str, bool]:
    """Did each rule call a regression (head lower; higher is better)?"""
    kc = compare_one(MetricInput(base, head, True, 0.0), alpha)
    kw = compare_one(MetricInput(base, head, True, 0.0, noise=prior), alpha)
    pb, ph = np.concatenate(base), np.concatenate(head)
    mb, mh = pb.mean(), ph.mean()
    band = mh + 1.96 * ph.std(ddof=1) < mb - 1.96 * pb.std(ddof=1)
    bm, hm = np.array([np.mean(b) for b in base]), np.array([np.mean(h) for h in head])
    sep = hm.max() < bm.mean() and bm.min() > hm.mean() and (1 - hm.mean() / bm.mean()) * 100 > 1.0
    return {
        "kperf (no history)": kc.p_value is not None and kc.p_value < alpha and (kc.change_pct or 0) < 0,
        "kperf (learned noise)": kw.p_value is not None and kw.p_value < alpha and (kw.change_pct or 0) < 0,
        "mmtests band (pooled)": bool(band),
        "0-day separation + 1%": bool(sep),
    }


HISTORY_EVERY = 20  # pairs per learned history: each stands for one metric's own history


def run_ab(args: tuple[str, int, int]) -> dict[str, Any]:
    shape, n_pairs, seed = args
    rng = np.random.default_rng([seed, 99, AB_SHAPES.index(shape)])
    k, n, alpha = 5, 5, 0.02
    from kperf.stats.noise import variance_components

    shifts = [0.0, 1.0, 1.5, 2.0, 2.5]
    res: dict[str, Any] = {"shape": shape, "rates": {}, "pairs": {}}
    for d in shifts:
        counts: dict[str, int] = {}
        pairs = n_pairs if d == 0.0 else max(HISTORY_EVERY, n_pairs // 2)  # the false-regression rate needs more
        prior = None
        for i in range(pairs):
            if i % HISTORY_EVERY == 0:
                # A fresh history (20 earlier runs of 5 boots on the same machine class, as
                # kperf.stats.noise learns it) every HISTORY_EVERY pairs: the rates are averaged over
                # histories, as over the metrics of a service, not conditional on one lucky or unlucky one.
                prior = variance_components([ab_boots(rng, shape, 5, n, 0.0) for _ in range(20)]).prior(n)
            hits = ab_rules(ab_boots(rng, shape, k, n, 0.0), ab_boots(rng, shape, k, n, -d), prior, alpha)
            for name, hit in hits.items():
                counts[name] = counts.get(name, 0) + int(hit)
        res["rates"][d] = {name: c / pairs for name, c in counts.items()}
        res["pairs"][d] = pairs
        z = sps.norm.ppf(1 - alpha / 2)
        res["rates"][d]["z-test, known variance"] = float(sps.norm.cdf(d / math.sqrt(2 / k) - z))
    print(
        f"  A/B {shape}: "
        + "; ".join(f"{d}: " + ", ".join(f"{v:.3f}" for v in r.values()) for d, r in res["rates"].items()),
        flush=True,
    )
    return res


# ----------------------------------------------------------------------------------------------


def in_two(fn: Callable[[Any], Any], tasks: list[Any]) -> list[Any]:
    """Half the tasks in one extra process, half here."""
    if len(tasks) < 2:
        return [fn(t) for t in tasks]
    with multiprocessing.get_context("fork").Pool(1) as pool:
        far = [pool.apply_async(fn, (t,)) for t in tasks[1::2]]
        near = [fn(t) for t in tasks[0::2]]
        far_res = [f.get() for f in far]
    out: list[Any] = []
    for i in range(len(tasks)):
        out.append(near[i // 2] if i % 2 == 0 else far_res[i // 2])
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
    if ab:
        names = list(next(iter(ab[0]["rates"].values())))
        shifts = list(ab[0]["rates"])
        lines.append(
            "| A/B shape | rule | "
            + " | ".join("false regressions" if d == 0 else f"power {d}{SIGMA}" for d in shifts)
            + " |"
        )
        lines.append("|" + "---|" * (2 + len(shifts)))
        for res in ab:
            for name in names:
                lines.append(
                    f"| {res['shape']} | {name} | " + " | ".join(f"{res['rates'][d][name]:.3f}" for d in shifts) + " |"
                )
    return "\n".join(lines)


class _Absolute(KperfDetector):
    """kperf at a given drift rate with h the threshold itself (for calibration)."""

    def detector(self, x: np.ndarray, h: float) -> OnlineDetector:
        return OnlineDetector(threshold=h, window=self.window, drift=self.drift)

    def max_score(self, x: np.ndarray) -> float:
        return self.largest_z(x)


def _calibrate_one(args: tuple[float, int, int]) -> tuple[float, int, float]:
    rate, n, seed = args
    rng = np.random.default_rng([seed, int(rate * 1e6)])
    walk = math.sqrt(rate)
    series = [
        np.log(LEVEL * (1 + CV * (rng.normal(0, 1, N_COMMITS) + np.cumsum(rng.normal(0, walk, N_COMMITS)))))
        for _ in range(n)
    ]
    det = _Absolute(drift=rate)
    return rate, OnlineDetector(drift=rate).window, tune(det, series)


def calibrate(n: int, seed: int) -> str:
    """Thresholds for 1 false alarm per 1000 commits on Gaussian noise plus a random walk of each rate
    (changepoints.DRIFT_THRESHOLDS)."""
    lines = [f"# {n} series of {N_COMMITS} commits per rate, seed {seed}", "DRIFT_THRESHOLDS = ["]
    for rate, window, h in in_two(_calibrate_one, [(r, n, seed) for r in CALIBRATION_RATES]):
        lines.append(f"    ({rate:g}, {h:.2f}),  # window {window}")
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
    p.add_argument("--markdown", type=Path, help="also write the tables as markdown to this file")
    p.add_argument("--calibrate", action="store_true", help="print the detector's thresholds per drift rate and exit")
    args = p.parse_args(argv)
    if args.calibrate:
        print(calibrate(args.tune_series or 2000, args.seed))
        return 0
    n_cell = args.series or (100 if args.quick else 300)
    n_tune = args.tune_series or 5 * n_cell
    n_pairs = args.ab_pairs or (1000 if args.quick else 4000)
    shapes = [s for s in args.shapes.split(",") if s]
    t0 = time.time()
    if otava_change_points is None:
        print("apache-otava is not installed: its row is left out (pip install --no-deps apache-otava==0.8.0)")
    print(f"change points: {n_cell} series per cell, {n_tune} change-free series for tuning, {len(shapes)} shapes")
    rows = [r for rs in in_two(run_shape, [(s, n_tune, n_cell, args.seed) for s in shapes]) for r in rs]
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
