"""Noise per (machine class, metric), learned from history, and what it lets kperf detect.

History is many runs (a run: one kernel on one machine class, several boots,
several iterations per boot). Runs may differ in their true mean, so the
variance components are estimated within runs, by one-way random-effects
ANOVA pooled over runs (REML and ANOVA agree for balanced data; for
unbalanced data this is the usual moment estimate):

    within-boot  sigma_w^2: pooled variance of iterations around their boot's mean
    between-boot sigma_b^2: pooled variance of boot means around their run's
                            mean, minus sigma_w^2 / n_iterations (never below 0)

Robustness: boots are summarised by their trimmed mean (as the A/B test
does), and runs whose boot variance is implausibly large against the pooled
value (a broken runner, a benchmark that failed half-way) are dropped before
the final estimate.

The variance of one boot summary with N iterations is sigma_b^2 + sigma_w^2/N;
with K boots per side the difference of means has variance twice that over K.
From it follow the minimum detectable effect and the cheapest K x N design.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

from kperf.stats.abtest import BOOT_TRIM, PRIOR_DOF_CAP, NoisePrior, normalise_boots, sum_sq_dev, trimmed_mean

OUTLIER_RUN_P = 0.001


@dataclass(frozen=True)
class NoiseModel:
    between_sd: float  # sd of a boot's level around the kernel's mean
    within_sd: float  # sd of one iteration around its boot's level
    between_dof: float
    within_dof: float
    iterations: float  # typical iterations per boot in the history
    log_scale: bool  # True: the sds are of log values (roughly coefficients of variation)
    runs: int = 0
    dropped_runs: int = 0
    # Observed variance of one boot summary (at the history's iterations per boot), when known.
    boot_var: float | None = None

    def boot_sd(self, iterations: float | None = None) -> float:
        """sd of one boot summary with `iterations` iterations (default: as in history).

        From the boot summaries' own spread, moved to another iteration count by the within-boot
        part. That equals between^2 + within^2 / N except where between was clipped at 0: when
        every boot repeats the same pattern over its iterations (a warm-up, as under the
        instruction clock, where boots of one build are bit-identical) the iterations spread
        without adding anything to a boot summary's noise, and the model's within^2 / N would
        invent noise the boots do not have.
        """
        n = max(self.iterations if iterations is None else iterations, 1.0)
        if self.boot_var is None:
            return math.sqrt(self.between_sd**2 + self.within_sd**2 / n)
        moved = self.boot_var + self.within_sd**2 * (1.0 / n - 1.0 / max(self.iterations, 1.0))
        return math.sqrt(max(0.0, moved))

    def prior(self, iterations: float | None = None) -> NoisePrior:
        """The noise prior the A/B test takes (MetricInput.noise).

        Its degrees of freedom are the between-boot ones, capped at
        PRIOR_DOF_CAP: crediting fewer than the estimate has pays for its
        error, so that averaged over histories the moderated t keeps alpha.
        """
        return NoisePrior(self.boot_sd(iterations), min(self.between_dof, PRIOR_DOF_CAP))


def _boot_stats(boots: list[list[float]], log_scale: bool) -> tuple[np.ndarray, float, int]:
    """(boot summaries, within-boot sum of squares, its dof).

    Iterations are winsorized at their boot's median +- 3 robust sds first, so a
    daemon that woke up in one iteration (which the trimmed boot summary
    ignores) does not inflate the within-boot noise either.
    """
    summaries, ss, dof = [], 0.0, 0
    xs = [np.log(b) if log_scale else np.asarray(b, dtype=float) for b in boots]
    devs = np.concatenate([x - np.median(x) for x in xs if x.size > 1]) if any(x.size > 1 for x in xs) else None
    scale = 1.4826 * float(np.median(np.abs(devs))) if devs is not None and devs.size else 0.0
    for x in xs:
        summaries.append(trimmed_mean(x, BOOT_TRIM))
        if x.size > 1:
            med = float(np.median(x))
            w = np.clip(x, med - 3 * scale, med + 3 * scale) if scale > 0 else x
            ss += sum_sq_dev(w)
            dof += x.size - 1
    return np.asarray(summaries), ss, dof


def variance_components(runs: Sequence[Sequence[Sequence[float]]]) -> NoiseModel:
    """Estimate between- and within-boot noise from many runs (each: boots of iterations)."""
    cleaned = [normalise_boots(r) for r in runs]
    cleaned = [r for r in cleaned if r]
    if not cleaned:
        raise ValueError("no samples: need at least one run with data")
    log_scale = all(v > 0 for r in cleaned for b in r for v in b)
    per_run = [_boot_stats(r, log_scale) for r in cleaned]
    iters = float(np.mean([len(b) for r in cleaned for b in r]))

    def pooled(idx: Sequence[int]) -> tuple[float, float, float, float]:
        ssb = sum(sum_sq_dev(per_run[i][0]) for i in idx)
        dfb = sum(len(per_run[i][0]) - 1 for i in idx)
        ssw = sum(per_run[i][1] for i in idx)
        dfw = sum(per_run[i][2] for i in idx)
        return ssb, float(dfb), ssw, float(dfw)

    keep = list(range(len(per_run)))
    ssb, dfb, _, _ = pooled(keep)
    dropped = 0
    if dfb > 0 and ssb > 0:
        s2 = ssb / dfb
        ok = []
        for i in keep:
            k = len(per_run[i][0])
            if k < 2:
                ok.append(i)
                continue
            v = sum_sq_dev(per_run[i][0]) / (k - 1)
            # Drop a run only when its boots are implausibly spread for the pooled noise.
            if float(sps.chi2.sf((k - 1) * v / s2, k - 1)) >= OUTLIER_RUN_P / len(keep):
                ok.append(i)
        dropped = len(keep) - len(ok)
        keep = ok
    ssb, dfb, ssw, dfw = pooled(keep)
    within2 = ssw / dfw if dfw > 0 else 0.0
    boot2 = ssb / dfb if dfb > 0 else 0.0
    between2 = max(0.0, boot2 - within2 / iters)
    return NoiseModel(
        between_sd=math.sqrt(between2),
        within_sd=math.sqrt(within2),
        between_dof=dfb,
        within_dof=dfw,
        iterations=iters,
        log_scale=log_scale,
        runs=len(keep),
        dropped_runs=dropped,
        boot_var=boot2 if dfb > 0 else None,  # one boot per run: no spread of boots seen, keep the model's
    )


def _to_pct(delta: float, log_scale: bool) -> float:
    return (math.exp(delta) - 1.0) * 100.0 if log_scale else delta * 100.0


def detectable_shift(
    boot_sd: float, boots: int, alpha: float = 0.05, power: float = 0.8, dof: float | None = None
) -> float:
    """Smallest true shift (same unit as boot_sd) a two-sided test finds with `power`.

    dof None: the variance is known (z-test, the statistical limit);
    otherwise a t-test with that many degrees of freedom (exact, noncentral t).
    """
    if boots < 1 or boot_sd <= 0.0:
        return math.inf if boots < 1 else 0.0
    se = boot_sd * math.sqrt(2.0 / boots)
    if dof is None:
        return (float(sps.norm.ppf(1 - alpha / 2)) + float(sps.norm.ppf(power))) * se
    if dof <= 0:
        return math.inf
    crit = float(sps.t.ppf(1 - alpha / 2, dof))

    def gap(ncp: float) -> float:
        return float(sps.nct.sf(crit, dof, ncp) + sps.nct.cdf(-crit, dof, ncp)) - power

    # The answer lies below crit + z_power plus a margin for the t's heavier tails.
    hi = crit + float(sps.norm.ppf(power)) + 5.0
    return float(optimize.brentq(gap, 0.0, hi)) * se


def min_detectable_effect(
    model: NoiseModel,
    boots: int,
    iterations: int,
    alpha: float = 0.05,
    power: float = 0.8,
    use_history: bool = True,
    build_sd: float = 0.0,
) -> float:
    """Minimum change in percent kperf's A/B test finds with `power` at K=boots x N=iterations.

    use_history: the test borrows the learned noise (as MetricInput.noise does),
    so its degrees of freedom are 2(K-1) plus the prior's on each side.
    build_sd: the between-build component (kperf.stats.builds), which no
    number of boots removes: the difference carries 2 build_sd^2 on top of
    the boots' 2 boot_sd^2 / K, the same as boots of sd
    sqrt(boot_sd^2 + K build_sd^2).
    """
    extra = min(model.between_dof, PRIOR_DOF_CAP) if use_history else 0.0
    dof = 2.0 * (boots - 1 + extra)
    boot_sd = math.sqrt(model.boot_sd(iterations) ** 2 + boots * build_sd**2)
    shift = detectable_shift(boot_sd, boots, alpha, power, dof)
    return _to_pct(shift, model.log_scale)


@dataclass(frozen=True)
class Design:
    boots: int  # per side
    iterations: int  # per boot
    min_effect_pct: float  # what this design detects with the asked power
    cost: float


def choose_design(
    model: NoiseModel,
    target_effect_pct: float,
    alpha: float = 0.05,
    power: float = 0.8,
    max_boots: int = 20,
    max_iterations: int = 50,
    boot_cost: float = 10.0,
    iteration_cost: float = 1.0,
) -> Design:
    """The cheapest K boots x N iterations (per side) that detects `target_effect_pct`.

    Cost per side: K * (boot_cost + N * iteration_cost), in any unit (e.g.
    seconds of machine time). When no design within the limits reaches the
    target, the one with the smallest detectable effect is returned: check
    its min_effect_pct.
    """
    best: Design | None = None
    closest: Design | None = None
    for k in range(2, max_boots + 1):
        for n in range(1, max_iterations + 1):
            mde = min_detectable_effect(model, k, n, alpha, power)
            d = Design(k, n, mde, k * (boot_cost + n * iteration_cost))
            if closest is None or (mde, d.cost) < (closest.min_effect_pct, closest.cost):
                closest = d
            if mde <= target_effect_pct and (best is None or d.cost < best.cost):
                best = d
            if mde <= target_effect_pct:
                break  # more iterations only cost more at this K
    assert closest is not None
    return best if best is not None else closest
