"""Synthetic series for the detector benchmark (bench/detectors.py): noise shapes, steps, scenarios.

Per-commit values as the peers see them (the per-commit mean) and the summaries kperf computes
from samples (log of the values, or trimmed boot means), with known changes.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

LEVEL, CV = 100.0, 0.02  # sigma = 2 units = 2% of the level
N_COMMITS = 400
BUDGET = 1.0 / 1000.0  # false alarms per commit
SHAPES = ["normal", "lognormal", "bimodal", "outliers", "drift", "boot-level"]
STEPS = [0.25, 0.5, 1.0, 2.0, 3.0, 4.0]
TOL = 3
SIGMA = "\u03c3"


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


def with_walk(rng: np.random.Generator, shape: str, rate: float, n: int = N_COMMITS) -> np.ndarray:
    """kperf's per-commit summaries of `shape` noise whose level also wanders: a random walk whose
    step has variance `rate` (in units of one commit's noise), added to the values as a step is."""
    _, logs = noise(rng, shape, n)
    if rate <= 0.0:
        return logs
    walk = np.cumsum(rng.normal(0.0, math.sqrt(rate), n))
    return np.log(np.exp(logs) + walk * CV * LEVEL)


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
