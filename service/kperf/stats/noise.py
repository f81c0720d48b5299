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

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

from kperf.stats import dist
from kperf.stats.abtest import PRIOR_DOF_CAP, NoisePrior, boot_cut, boot_mean, normalise_boots, sum_sq_dev

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
        summaries.append(boot_mean(x))
        if x.size > 1:
            med = float(np.median(x))
            w = np.clip(x, med - 3 * scale, med + 3 * scale) if scale > 0 else x
            ss += sum_sq_dev(w)
            dof += x.size - 1
    return np.asarray(summaries), ss, dof


@dataclass(frozen=True)
class RunStats:
    """What variance_components needs of one run, on both scales: a summary kept per kernel.

    ssb: sum of squared deviations of the boot summaries from their mean; ssw, dfw: the
    winsorized within-boot sum of squares and its dof. The log-scale numbers are only
    meaningful when `positive` (every value above 0); the pooled estimate uses the log
    scale when every run is positive, so both are kept.
    """

    boots: int
    iterations: int  # over all boots
    positive: bool
    ssb_log: float
    ssw_log: float
    dfw_log: int
    ssb_lin: float
    ssw_lin: float
    dfw_lin: int


def run_stats(run: Sequence[Sequence[float]]) -> RunStats | None:
    """The summary of one run (boots of iterations); None when it holds no finite value."""
    boots = normalise_boots(run)
    if not boots:
        return None
    positive = all(v > 0 for b in boots for v in b)
    lin = _boot_stats(boots, False)
    log = _boot_stats(boots, True) if positive else (np.zeros(0), math.nan, 0)
    return RunStats(
        boots=len(boots),
        iterations=sum(len(b) for b in boots),
        positive=positive,
        ssb_log=sum_sq_dev(log[0]) if positive else math.nan,
        ssw_log=log[1],
        dfw_log=log[2],
        ssb_lin=sum_sq_dev(lin[0]),
        ssw_lin=lin[1],
        dfw_lin=lin[2],
    )


def _ss_dev(x: np.ndarray) -> np.ndarray:
    """sum_sq_dev() along the last axis (exactly 0 where every value is equal)."""
    if x.shape[-1] < 2:
        return np.zeros(x.shape[:-1])
    ss = np.sum((x - x.mean(axis=-1, keepdims=True)) ** 2, axis=-1)
    return np.where(np.ptp(x, axis=-1) == 0.0, 0.0, ss)


def boot_stats_batch(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """_boot_stats() of many runs of one shape, x[run, boot, iteration] (every value finite):
    (boot summaries [run, boot], their sum of squares [run], within-boot sum of squares [run], its dof)."""
    runs, boots, n = x.shape
    cut = boot_cut(n)
    summaries = x.mean(axis=2) if cut == 0 else np.sort(x, axis=2)[:, :, cut : n - cut].mean(axis=2)
    ss = np.zeros(runs)
    if n > 1:
        med = np.median(x, axis=2)
        scale = 1.4826 * np.median(np.abs(x - med[:, :, None]).reshape(runs, boots * n), axis=1)
        lo = med - 3 * scale[:, None]
        hi = med + 3 * scale[:, None]
        w = np.where(scale[:, None, None] > 0, np.clip(x, lo[:, :, None], hi[:, :, None]), x)
        per_boot = _ss_dev(w)
        # Boot by boot, as _boot_stats adds them.
        for b in range(boots):
            ss = ss + per_boot[:, b]
    return summaries, _ss_dev(summaries), ss, boots * (n - 1)


def run_stats_batch(x: np.ndarray) -> tuple[list[RunStats], np.ndarray, np.ndarray]:
    """run_stats() of many runs of one shape at once, x[run, boot, iteration] (every value
    finite), with each boot's summary on the linear and the log scale (nan where the
    boot holds a value <= 0): what rebuilding a long history needs, without a call per run."""
    _, boots, n = x.shape
    boot_positive: np.ndarray = np.all(x > 0, axis=2)
    positive: np.ndarray = np.all(boot_positive, axis=1)
    lin = boot_stats_batch(x)
    log = boot_stats_batch(np.log(np.where(boot_positive[:, :, None], x, 1.0)))
    out = [
        RunStats(
            boots=boots,
            iterations=boots * n,
            positive=bool(p),
            ssb_log=float(log[1][i]) if p else math.nan,
            ssw_log=float(log[2][i]) if p else math.nan,
            dfw_log=log[3] if p else 0,
            ssb_lin=float(lin[1][i]),
            ssw_lin=float(lin[2][i]),
            dfw_lin=lin[3],
        )
        for i, p in enumerate(positive)
    ]
    return out, lin[0], np.where(boot_positive, log[0], np.nan)


def variance_components(runs: Sequence[Sequence[Sequence[float]]]) -> NoiseModel:
    """Estimate between- and within-boot noise from many runs (each: boots of iterations)."""
    return components_from_runs([s for s in (run_stats(r) for r in runs) if s is not None])


def components_from_runs(runs: Sequence[RunStats]) -> NoiseModel:
    """variance_components() from the runs' summaries (run_stats), in the same order:
    what the service keeps per kernel, so the model needs no pass over old samples."""
    if not runs:
        raise ValueError("no samples: need at least one run with data")
    log_scale = all(r.positive for r in runs)
    # (sum of squares of boot summaries, boots, within sum of squares, its dof) per run
    per_run = [
        (r.ssb_log, r.boots, r.ssw_log, r.dfw_log) if log_scale else (r.ssb_lin, r.boots, r.ssw_lin, r.dfw_lin)
        for r in runs
    ]
    iters = sum(r.iterations for r in runs) / sum(r.boots for r in runs)

    def pooled(idx: Sequence[int]) -> tuple[float, float, float, float]:
        ssb = sum(per_run[i][0] for i in idx)
        dfb = sum(per_run[i][1] - 1 for i in idx)
        ssw = sum(per_run[i][2] for i in idx)
        dfw = sum(per_run[i][3] for i in idx)
        return ssb, float(dfb), ssw, float(dfw)

    keep = list(range(len(per_run)))
    ssb, dfb, _, _ = pooled(keep)
    dropped = 0
    if dfb > 0 and ssb > 0:
        s2 = ssb / dfb
        ok = []
        for i in keep:
            k = per_run[i][1]
            if k < 2:
                ok.append(i)
                continue
            v = per_run[i][0] / (k - 1)
            # Drop a run only when its boots are implausibly spread for the pooled noise.
            if dist.chi2_sf((k - 1) * v / s2, k - 1) >= OUTLIER_RUN_P / len(keep):
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


@dataclass(frozen=True)
class RunPool:
    """RunStats added up over runs of the same number of boots: what the noise
    model needs of a whole history, kept so that it is not read run by run.

    The log-scale sums hold the positive runs only; they are used when every run is.
    """

    runs: int = 0
    positive_runs: int = 0
    boots: int = 0
    iterations: int = 0
    ssb_log: float = 0.0
    ssw_log: float = 0.0
    dfw_log: int = 0
    ssb_lin: float = 0.0
    ssw_lin: float = 0.0
    dfw_lin: int = 0

    @classmethod
    def of(cls, r: RunStats) -> RunPool:
        on_log = r.positive
        return cls(
            1,
            int(on_log),
            r.boots,
            r.iterations,
            r.ssb_log if on_log else 0.0,
            r.ssw_log if on_log else 0.0,
            r.dfw_log if on_log else 0,
            r.ssb_lin,
            r.ssw_lin,
            r.dfw_lin,
        )

    def __add__(self, o: RunPool) -> RunPool:
        return RunPool(*(a + b for a, b in zip(self.astuple(), o.astuple(), strict=True)))  # type: ignore[arg-type]

    def __sub__(self, o: RunPool) -> RunPool:
        return RunPool(*(a - b for a, b in zip(self.astuple(), o.astuple(), strict=True)))  # type: ignore[arg-type]

    def astuple(self) -> tuple[float, ...]:
        return (
            self.runs,
            self.positive_runs,
            self.boots,
            self.iterations,
            self.ssb_log,
            self.ssw_log,
            self.dfw_log,
            self.ssb_lin,
            self.ssw_lin,
            self.dfw_lin,
        )

    @property
    def log_scale(self) -> bool:
        return self.positive_runs == self.runs

    def between(self) -> tuple[float, float]:
        """(sum of squares of boot summaries, its dof) on the pool's scale."""
        return (self.ssb_log if self.log_scale else self.ssb_lin), float(self.boots - self.runs)


def outlier_floor(total: RunPool, boots: int) -> float | None:
    """The sum of squares of boot summaries (on `total`'s scale) below which a run
    of `boots` boots is never dropped by components_from_pool; None: none is dropped.

    Lets the caller fetch only the few runs above it instead of every run; the
    floor sits a little below the exact limit, which components_from_pool applies.
    """
    ssb, dfb = total.between()
    if boots < 2 or not (dfb > 0 and ssb > 0) or total.runs < 1:
        return None
    limit = dist.chi2_isf(OUTLIER_RUN_P / total.runs, boots - 1)
    return 0.999 * limit * ssb / dfb


def components_from_pool(total: RunPool, candidates: Sequence[RunStats]) -> NoiseModel:
    """components_from_runs() from the runs added up (`total`) and the runs that
    may be dropped as outliers: at least those above outlier_floor (any others
    are tested and kept). Equal to components_from_runs on the same runs, up to
    the order of the additions."""
    if total.runs < 1:
        raise ValueError("no samples: need at least one run with data")
    log_scale = total.log_scale
    iters = total.iterations / total.boots
    kept = total
    ssb, dfb = total.between()
    if dfb > 0 and ssb > 0:
        s2 = ssb / dfb
        for r in candidates:
            k = r.boots
            run_ssb = r.ssb_log if log_scale else r.ssb_lin
            if k >= 2 and dist.chi2_sf(run_ssb / s2, k - 1) < OUTLIER_RUN_P / total.runs:
                kept = kept - RunPool.of(r)
    ssb, dfb = kept.between()
    ssw, dfw = (kept.ssw_log, kept.dfw_log) if log_scale else (kept.ssw_lin, kept.dfw_lin)
    within2 = ssw / dfw if dfw > 0 else 0.0
    boot2 = max(0.0, ssb) / dfb if dfb > 0 else 0.0
    between2 = max(0.0, boot2 - within2 / iters)
    return NoiseModel(
        between_sd=math.sqrt(between2),
        within_sd=math.sqrt(max(0.0, within2)),
        between_dof=dfb,
        within_dof=float(dfw),
        iterations=iters,
        log_scale=log_scale,
        runs=kept.runs,
        dropped_runs=total.runs - kept.runs,
        boot_var=boot2 if dfb > 0 else None,
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
        return (dist.norm_ppf(1 - alpha / 2) + dist.norm_ppf(power)) * se
    if dof <= 0:
        return math.inf
    return _noncentrality(float(dof), alpha, power) * se


@functools.lru_cache(maxsize=1024)
def _noncentrality(dof: float, alpha: float, power: float) -> float:
    """The shift in standard errors a t-test with `dof` finds with `power`.

    It does not depend on the noise, and a noise report asks it for every
    metric at the same few degrees of freedom: solved once each (milliseconds).
    """
    crit = float(sps.t.ppf(1 - alpha / 2, dof))

    def gap(ncp: float) -> float:
        return float(sps.nct.sf(crit, dof, ncp) + sps.nct.cdf(-crit, dof, ncp)) - power

    # The answer lies below crit + z_power plus a margin for the t's heavier tails.
    hi = crit + float(sps.norm.ppf(power)) + 5.0
    return float(optimize.brentq(gap, 0.0, hi))


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
