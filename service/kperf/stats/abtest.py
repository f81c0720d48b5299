"""A/B comparison of base and head that respects boots.

A sample is mu(kernel) + b(boot) + e(iteration). Iterations within one boot
share the boot's page placement, cache colouring and firmware state, so they
are not independent: pooling them (as mmtests' compare does) overstates
confidence when between-boot noise dominates. This module therefore reduces
each boot to one summary (the 20% trimmed mean of its iterations, so a daemon
waking up during one iteration does not move the boot) and compares the boot
summaries of the two sides with Welch's t-test. With K boots per side that is
honest whatever the ratio of the two noise levels is; more iterations then
only sharpen each boot summary, more boots sharpen the comparison.

Throughput-like metrics are compared as ratios: on the log scale when every
value is positive, so a 10% change means the same on a fast and a slow
machine and right-skewed noise is tamed.

With K=5 boots a side Welch's test has about 8 degrees of freedom, and its
critical value (2.31 at alpha .05) costs power against a test that knows the
noise (1.96). When the noise of this (machine class, metric) has been learned
from history (kperf.stats.noise), MetricInput.noise carries it and the boot
variance is moderated towards it (Smyth's empirical-Bayes t: prior variance
with its own degrees of freedom, at most PRIOR_DOF_CAP). The prior is dropped,
with a note, when the boots at hand are much noisier than history says (F-test
at 1%), so a noisy runner cannot borrow confidence it does not have. With the
prior's scale known, a boot far from the others of its side (over
BOOT_OUTLIER_SDS upper-bound sds from their median: two slow iterations in one
boot, which the trimmed mean cannot absorb) is set aside, with a note.

Validity with learned noise is over histories: a prior estimated from 20
earlier runs of 5 boots is off by about 8% (sd), and for one particular history
the false-alarm rate is correspondingly above or below alpha/2 (on Gaussian
boots at alpha .02: 1.4% per direction for a history 8% low, 0.55% for one 8%
high, 2.0% for one 16% low); averaged over histories, i.e. over the metrics
and machine classes of a service, it stays at or under alpha/2 (0.87% on
Gaussian boots; bench/detectors.py, docs/statistics.md). More history narrows
the spread, not the average.

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

METHOD = "welch-t on trimmed boot means (log scale), noise prior when learned, Benjamini-Hochberg across metrics"

BOOT_TRIM = 0.2  # proportion cut from each end of a boot's iterations
PRIOR_DOF_CAP = 30.0  # history never counts for more than this many boots' worth of variance
PRIOR_REJECT_P = 0.01
# With learned noise, a boot whose summary lies this many sds from the median of its side is a broken
# boot (two daemons in one boot, a throttled run) and is set aside; the sd is the 95% upper confidence
# bound of the prior's, so a prior that came out low by chance does not make clean boots look broken.
BOOT_OUTLIER_SDS = 4.0


class Verdict(enum.StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no-change"
    INCONCLUSIVE = "inconclusive"


Boots = Sequence[Sequence[float]]


@dataclass(frozen=True)
class NoisePrior:
    """What history says about one boot summary's noise, on the scale compared.

    sd: standard deviation of one boot summary (log scale when the values are
    positive: roughly the coefficient of variation); dof: how many degrees of
    freedom that estimate is worth. kperf.stats.noise.NoiseModel.prior() makes
    one for a given number of iterations per boot.
    """

    sd: float
    dof: float


@dataclass(frozen=True)
class MetricInput:
    base: Boots  # one inner sequence of iteration values per boot
    head: Boots
    higher_is_better: bool
    min_effect_pct: float = 3.0
    noise: NoisePrior | None = None


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


def boot_summaries(boots: list[list[float]], log_scale: bool) -> np.ndarray:
    """One number per boot: the trimmed mean of its iterations (of their logs on the log scale)."""
    return np.array(
        [float(sps.trim_mean(np.log(b) if log_scale else np.asarray(b), BOOT_TRIM)) for b in boots], dtype=float
    )


def _keep_boots(x: np.ndarray, prior: NoisePrior | None) -> np.ndarray:
    """Mask of the boots kept: with a prior, those within BOOT_OUTLIER_SDS sds of the side's median.

    The sd is the prior's, raised to the 95% upper confidence bound its degrees of
    freedom allow (x1.27 at 30). Under that noise a boot lies 4 sds from the median
    of five about once in 50,000, so clean data is practically never touched, while
    one boot knocked far off by two slow iterations (which the trimmed mean cannot
    absorb) no longer decides the comparison or makes the F-test drop the prior. At
    most a minority of a side's boots (never below 2 kept) is set aside.
    """
    keep = np.ones(len(x), dtype=bool)
    if prior is None or prior.sd <= 0.0 or prior.dof <= 0.0 or len(x) < 3:
        return keep
    d0 = min(prior.dof, PRIOR_DOF_CAP)
    upper = prior.sd * math.sqrt(d0 / float(sps.chi2.ppf(0.05, d0)))
    dev = np.abs(x - float(np.median(x)))
    far = np.flatnonzero(dev > BOOT_OUTLIER_SDS * upper)
    limit = (len(x) - 1) // 2
    if far.size:
        keep[far[np.argsort(-dev[far])][:limit]] = False
    return keep


def _moderated_var(x: np.ndarray, prior: NoisePrior | None) -> tuple[float, float, bool]:
    """(variance of one boot summary, its degrees of freedom, prior used?)."""
    n = len(x)
    s2 = float(np.var(x, ddof=1)) if n > 1 else 0.0
    if prior is None or prior.sd <= 0.0 or prior.dof <= 0.0:
        return s2, float(n - 1), False
    d0 = min(prior.dof, PRIOR_DOF_CAP)
    s02 = prior.sd**2
    if n > 1 and float(sps.f.sf(s2 / s02, n - 1, d0)) < PRIOR_REJECT_P:
        return s2, float(n - 1), False
    return (d0 * s02 + (n - 1) * s2) / (d0 + n - 1), d0 + n - 1, True


@dataclass(frozen=True)
class BootTest:
    """The two-sample test on boot summaries that every A/B decision in kperf uses."""

    diff: float  # head - base, on the compared scale
    se: float
    dof: float
    log_scale: bool
    base_level: float  # mean of base boot summaries (linear scale) for percent conversion
    prior_used: bool
    set_aside: tuple[int, int] = (0, 0)  # boots of (base, head) set aside as broken (only with a prior)

    @property
    def t(self) -> float:
        return self.diff / self.se if self.se > 0 else (0.0 if self.diff == 0 else math.copysign(math.inf, self.diff))

    def p_value(self) -> float:
        if self.se == 0.0:
            return 1.0 if self.diff == 0.0 else 0.0
        return float(2.0 * sps.t.sf(abs(self.t), self.dof))

    def to_pct(self, d: float, higher_is_better: bool) -> float:
        ratio = math.exp(d) if self.log_scale else (self.base_level + d) / self.base_level
        return _signed_change(ratio, higher_is_better)


def boot_test(base: list[list[float]], head: list[list[float]], prior: NoisePrior | None = None) -> BootTest | None:
    """Welch's t on trimmed boot summaries, moderated by a noise prior; None below 2 boots a side."""
    if len(base) < 2 or len(head) < 2:
        return None
    log_scale = all(v > 0 for b in (*base, *head) for v in b)
    xb, xh = boot_summaries(base, log_scale), boot_summaries(head, log_scale)
    kb, kh = _keep_boots(xb, prior), _keep_boots(xh, prior)
    aside = (int(len(xb) - kb.sum()), int(len(xh) - kh.sum()))
    xb, xh = xb[kb], xh[kh]
    var_b, dof_b, used_b = _moderated_var(xb, prior)
    var_h, dof_h, used_h = _moderated_var(xh, prior)
    vb, vh = var_b / len(xb), var_h / len(xh)
    se = math.sqrt(vb + vh)
    denom = (vb**2 / dof_b if vb else 0.0) + (vh**2 / dof_h if vh else 0.0)
    dof = (vb + vh) ** 2 / denom if denom > 0 else dof_b + dof_h
    level = float(np.mean(xb)) if not log_scale else float(np.exp(np.mean(xb)))
    return BootTest(float(np.mean(xh) - np.mean(xb)), se, dof, log_scale, level, used_b and used_h, aside)


def compare_one(inp: MetricInput, alpha: float = 0.05) -> MetricResult:
    """Compare one metric; the q-value is filled in by compare_metrics."""
    base = normalise_boots(inp.base)
    head = normalise_boots(inp.head)
    log_all = all(v > 0 for b in (*base, *head) for v in b)
    base_means = boot_summaries(base, log_all)
    head_means = boot_summaries(head, log_all)
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

    diff = float(np.mean(head_means) - np.mean(base_means))
    level = float(np.exp(np.mean(base_means))) if log_all else float(np.mean(base_means))
    if log_all:
        result.change_pct = _signed_change(math.exp(diff), inp.higher_is_better)
    elif level != 0.0:
        result.change_pct = _signed_change((level + diff) / level, inp.higher_is_better)
    test = boot_test(base, head, inp.noise)
    if test is None:
        result.note = "needs at least 2 boots per side to estimate between-boot noise"
        return result
    result.p_value = test.p_value()
    if any(test.set_aside):
        # The change is the test's: without the boots set aside.
        diff = test.diff
        result.change_pct = test.to_pct(diff, inp.higher_is_better)
    if test.se == 0.0:
        # Identical boots on both sides: nothing varies, so any difference is exact.
        result.ci_low_pct = result.ci_high_pct = result.change_pct
    elif test.log_scale or test.base_level != 0.0:
        half = float(sps.t.ppf(1.0 - alpha / 2.0, test.dof)) * test.se
        lo, hi = sorted(
            (test.to_pct(diff - half, inp.higher_is_better), test.to_pct(diff + half, inp.higher_is_better))
        )
        result.ci_low_pct, result.ci_high_pct = lo, hi
    result.extra["dof"] = test.dof
    result.extra["log_scale"] = 1.0 if test.log_scale else 0.0
    result.extra["noise_prior"] = 1.0 if test.prior_used else 0.0
    notes = []
    if any(test.set_aside):
        result.extra["boots_set_aside"] = float(sum(test.set_aside))
        notes.append(
            f"boots set aside as broken (over {BOOT_OUTLIER_SDS:g} learned sds from their side's median): "
            f"{test.set_aside[0]} base, {test.set_aside[1]} head"
        )
    if inp.noise is not None and not test.prior_used:
        notes.append("boots noisier than history: learned noise not used")
    result.note = "; ".join(notes)
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
