"""A/B at fixed K boots x N iterations for the detector benchmark (bench/detectors.py).

Null pairs and shifted pairs per noise shape; false regressions and power at alpha .02 two-sided
(1% per direction), against the two-sample test on boot means with known variance. kperf with
learned noise gets a fresh history (20 runs of 5 boots) every 20 pairs, so its rates are averages
over histories, as over a service's metrics.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats as sps
from synthetic import SIGMA

from kperf.stats.abtest import MetricInput, NoisePrior, compare_one

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


def markdown_ab(ab: list[dict[str, Any]]) -> list[str]:
    """The A/B table: false regressions and power per shape and rule."""
    if not ab:
        return []
    names = list(next(iter(ab[0]["rates"].values())))
    shifts = list(ab[0]["rates"])
    lines = [
        "| A/B shape | rule | "
        + " | ".join("false regressions" if d == 0 else f"power {d}{SIGMA}" for d in shifts)
        + " |",
        "|" + "---|" * (2 + len(shifts)),
    ]
    for res in ab:
        for name in names:
            lines.append(
                f"| {res['shape']} | {name} | " + " | ".join(f"{res['rates'][d][name]:.3f}" for d in shifts) + " |"
            )
    return lines
