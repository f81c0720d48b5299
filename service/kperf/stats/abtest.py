"""A/B comparison of base and head that respects boots.

A sample is mu(kernel) + b(boot) + e(iteration). Iterations within one boot
share the boot's page placement, cache colouring and firmware state, so they
are not independent: pooling them (as mmtests' compare does) overstates
confidence when between-boot noise dominates. This module therefore reduces
each boot to one summary (the mean of its iterations) and compares the boot
summaries of the two sides with Welch's t-test. With K boots per side that is
honest whatever the ratio of the two noise levels is; more iterations then
only sharpen each boot summary, more boots sharpen the comparison.

Throughput-like metrics are compared as ratios: on the log scale when every
value is positive, so a 10% change means the same on a fast and a slow
machine and right-skewed noise is tamed.

Verdicts (signed change: negative is worse, like mmtests):
- regression:   q < alpha and change <= -min_effect
- improvement:  q < alpha and change >= +min_effect
- no-change:    the whole confidence interval lies inside (-min_effect, +min_effect)
- inconclusive: anything else, including fewer than two boots on a side.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

METHOD = "welch-t on boot means (log scale), Benjamini-Hochberg across metrics"


class Verdict(enum.StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no-change"
    INCONCLUSIVE = "inconclusive"


Boots = Sequence[Sequence[float]]


@dataclass(frozen=True)
class MetricInput:
    base: Boots  # one inner sequence of iteration values per boot
    head: Boots
    higher_is_better: bool
    min_effect_pct: float = 3.0


@dataclass
class MetricResult:
    verdict: Verdict
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    q_value: float | None
    base_mean: float | None
    head_mean: float | None
    base_boots: int
    head_boots: int
    base_samples: int
    head_samples: int
    min_effect_pct: float
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)


def normalise_boots(values: Sequence[float] | Boots) -> list[list[float]]:
    """A flat list means one boot; drop empty boots and non-finite values."""
    if not values:
        return []
    if all(isinstance(v, (int, float)) for v in values):
        flat = [float(v) for v in values if math.isfinite(float(v))]  # type: ignore[arg-type]
        return [flat] if flat else []
    boots: list[list[float]] = []
    for boot in values:
        if isinstance(boot, (int, float)):
            raise ValueError("mix of numbers and per-boot lists: give either a flat list or one list per boot")
        cleaned = [float(v) for v in boot if math.isfinite(float(v))]
        if cleaned:
            boots.append(cleaned)
    return boots


def _signed_change(ratio: float, higher_is_better: bool) -> float:
    """Percent change with the sign mmtests uses: negative is worse.

    Higher-is-better: (head - base) / base. Lower-is-better: (base - head) /
    base, so cycles going from 425 to 348 reads +18.12% as in mmtests.
    """
    return (ratio - 1.0) * 100.0 if higher_is_better else (1.0 - ratio) * 100.0


def compare_one(inp: MetricInput, alpha: float = 0.05) -> MetricResult:
    """Compare one metric; the q-value is filled in by compare_metrics."""
    base = normalise_boots(inp.base)
    head = normalise_boots(inp.head)
    base_means = np.array([np.mean(b) for b in base], dtype=float)
    head_means = np.array([np.mean(b) for b in head], dtype=float)
    result = MetricResult(
        verdict=Verdict.INCONCLUSIVE,
        change_pct=None,
        ci_low_pct=None,
        ci_high_pct=None,
        p_value=None,
        q_value=None,
        base_mean=float(np.mean(np.concatenate(base))) if base else None,
        head_mean=float(np.mean(np.concatenate(head))) if head else None,
        base_boots=len(base),
        head_boots=len(head),
        base_samples=sum(len(b) for b in base),
        head_samples=sum(len(b) for b in head),
        min_effect_pct=inp.min_effect_pct,
    )
    if not base or not head:
        result.note = "no samples on one side"
        return result

    log_scale = bool(np.all(base_means > 0) and np.all(head_means > 0))
    xb = np.log(base_means) if log_scale else base_means
    xh = np.log(head_means) if log_scale else head_means
    diff = float(np.mean(xh) - np.mean(xb))

    def to_pct(d: float) -> float:
        ratio = math.exp(d) if log_scale else (float(np.mean(base_means)) + d) / float(np.mean(base_means))
        return _signed_change(ratio, inp.higher_is_better)

    result.change_pct = to_pct(diff)
    if len(base) < 2 or len(head) < 2:
        result.note = "needs at least 2 boots per side to estimate between-boot noise"
        return result

    vb = float(np.var(xb, ddof=1)) / len(xb)
    vh = float(np.var(xh, ddof=1)) / len(xh)
    se = math.sqrt(vb + vh)
    if se == 0.0:
        # Identical boots on both sides: nothing varies, so any difference is exact.
        result.p_value = 1.0 if diff == 0.0 else 0.0
        result.ci_low_pct = result.ci_high_pct = result.change_pct
    else:
        # Welch-Satterthwaite degrees of freedom.
        dof = (vb + vh) ** 2 / ((vb**2 / (len(xb) - 1) if vb else 0.0) + (vh**2 / (len(xh) - 1) if vh else 0.0))
        t = diff / se
        result.p_value = float(2.0 * sps.t.sf(abs(t), dof))
        half = float(sps.t.ppf(1.0 - alpha / 2.0, dof)) * se
        lo, hi = sorted((to_pct(diff - half), to_pct(diff + half)))
        result.ci_low_pct, result.ci_high_pct = lo, hi
        result.extra["dof"] = dof
    result.extra["log_scale"] = 1.0 if log_scale else 0.0
    return result


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """q-values controlling the false discovery rate across one comparison."""
    n = len(p_values)
    if n == 0:
        return []
    order = np.argsort(p_values)
    ranked = np.array(p_values, dtype=float)[order] * n / np.arange(1, n + 1)
    q_sorted = np.minimum.accumulate(ranked[::-1])[::-1]
    q = np.empty(n)
    q[order] = np.minimum(q_sorted, 1.0)
    return [float(x) for x in q]


def _verdict(r: MetricResult, alpha: float) -> Verdict:
    if r.q_value is None or r.change_pct is None or r.ci_low_pct is None or r.ci_high_pct is None:
        return Verdict.INCONCLUSIVE
    if r.q_value < alpha and r.change_pct <= -r.min_effect_pct:
        return Verdict.REGRESSION
    if r.q_value < alpha and r.change_pct >= r.min_effect_pct:
        return Verdict.IMPROVEMENT
    if -r.min_effect_pct < r.ci_low_pct and r.ci_high_pct < r.min_effect_pct:
        return Verdict.NO_CHANGE
    return Verdict.INCONCLUSIVE


def compare_metrics(metrics: Mapping[str, MetricInput], alpha: float = 0.05) -> dict[str, MetricResult]:
    """Compare every metric of one comparison and control the FDR across them."""
    results = {name: compare_one(inp, alpha) for name, inp in metrics.items()}
    tested = [name for name, r in results.items() if r.p_value is not None]
    for name, q in zip(tested, benjamini_hochberg([results[n].p_value for n in tested]), strict=True):  # type: ignore[misc]
        results[name].q_value = q
    for r in results.values():
        r.verdict = _verdict(r, alpha)
    return results
