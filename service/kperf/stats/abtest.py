"""A/B comparison of base and head that respects boots.

A sample is mu(kernel) + b(boot) + e(iteration). Iterations within one boot
share the boot's page placement, cache colouring and firmware state, so they
are not independent: pooling them (as mmtests' compare does) overstates
confidence when between-boot noise dominates. This module therefore reduces
each boot to one summary (the 20% trimmed mean of its iterations, at least one
cut from each end of three or more, so a daemon waking up during one
iteration does not move the boot: boot_mean) and compares the boot
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

Base and head are each one build. A build has a level of its own: an
unrelated code change moves functions and data, and with them cache and TLB
behaviour, so two builds of what is meant to be the same kernel differ by
more than two boots of one build do. Under the instruction clock two boots of
one build agree to 0.01-0.3% or exactly, so this between-build component is
most of the noise there (MEASUREMENT.md). MetricInput.build_noise carries it
(learned by kperf.stats.builds); the difference of the two sides then has
variance 2 sd_build^2 on top of the boots' standard error, with
Welch-Satterthwaite degrees of freedom for the sum. With no boot variance at
all the test rests on the build component alone.

Readings have a resolution. A benchmark that prints whole units (the rows of
the page allocator in mmtests' format, 14-55 cycles per block on arm64's coarse
counter; kperf's own samples are its totals' quotients, with decimals)
reports a level only to within half a unit, and when every iteration and
boot of a side rounds alike, which under the instruction clock they do, that
error is shared by the whole side: no number of boots shows it or removes it.
So when all readings of both sides are positive whole numbers (reading_unit),
their difference is known only to within half a unit of each: a bound, not a
noise (two builds a hair apart that straddle a half-unit boundary read one
unit apart in every boot; as a uniform error's variance that unit is 2.45
sds). The test shrinks the difference by the bound before dividing by the
standard error, so what rounding alone can do is never significant, and the
interval is widened by the bound (0.41% at 245 units, 5.9% at 17;
docs/statistics.md, "The readings' resolution").

Verdicts (signed change: negative is worse, like mmtests; min_effect is the
practical threshold, DEFAULT_MIN_EFFECT_PCT per clock):
- regression:   q < alpha and change <= -min_effect
- improvement:  q < alpha and change >= +min_effect
- no-change:    the whole confidence interval lies inside (-min_effect, +min_effect)
- inconclusive: anything else, including fewer than two boots on a side
                without learned boot noise.
A significant change smaller than min_effect is never a regression or an
improvement: MetricResult.significant says it was significant and the note
gives its size against the threshold.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from kperf.stats import dist

METHOD = "welch-t on trimmed boot means (log scale), noise prior when learned, Benjamini-Hochberg across metrics"

BOOT_TRIM = 0.2  # proportion cut from each end of a boot's iterations
PRIOR_DOF_CAP = 30.0  # history never counts for more than this many boots' worth of variance
PRIOR_REJECT_P = 0.01
# With learned noise, a boot whose summary lies this many sds from the median of its side is a broken
# boot (two daemons in one boot, a throttled run) and is set aside; the sd is the 95% upper confidence
# bound of the prior's, so a prior that came out low by chance does not make clean boots look broken.
BOOT_OUTLIER_SDS = 4.0
# A between-build prior given without degrees of freedom is treated as worth one: the least an
# estimate from two builds has, so a guessed sd widens the interval instead of being taken as exact.
BUILD_DOF_FLOOR = 1.0
# A boot-noise prior worth less than one degree of freedom says nothing usable: it is ignored.
MIN_PRIOR_DOF = 1.0
DOF_CAP = 1e6  # an "exactly known" variance (dof inf) is a z-test; keep the number finite for storage
# The most one side's level can be off by its readings' rounding, in units.
ROUNDING_BOUND_UNITS = 0.5

# Practical thresholds (percent) per clock: a significant change smaller than this is reported but is
# never a regression or an improvement. Measured in bench/ab_clocks.py (docs/statistics.md, "The
# practical threshold"). Instructions: above the largest difference two builds of unrelated changes
# show when no between-build history is known yet, below the smallest hot-path changes measured.
# Wall: at 12-43% between-boot noise it never binds; it is the floor for quieter machines.
CLOCKS = ("instructions", "wall")
DEFAULT_MIN_EFFECT_PCT: dict[str, float] = {"instructions": 0.5, "wall": 3.0}
# Benchmarks whose default on a clock is lower than the clock's: those for
# which bench/build_noise.py found no unrelated pair flagged at that
# threshold on every profile and architecture it measured, the between-build
# and phase parts included (docs/statistics.md, "The practical threshold per
# benchmark"). The page allocator keeps the clock's for its readings' resolution:
# below 0.5% most of its metrics could only be called inconclusive (measured
# with whole-cycle readings, before the module printed its totals).
# So does aim9: nothing false was flagged at 0.25% either, but its interval
# at two boots a side is about +-0.25% wide, so at 0.25% an unchanged
# metric could not be called unchanged at the first look, and every aim9
# submission would take a second.
DEFAULT_MIN_EFFECT_PCT_BY_BENCHMARK: dict[str, dict[str, float]] = {
    "instructions": {"spawn": 0.25, "pft": 0.25},
}


def min_effect_for_clock(clock: str, benchmark: str = "") -> float:
    """The default practical threshold (percent) for metrics of `benchmark` measured on `clock`."""
    try:
        default = DEFAULT_MIN_EFFECT_PCT[clock]
    except KeyError:
        raise ValueError(f"unknown clock {clock!r}: use one of {', '.join(CLOCKS)}") from None
    return DEFAULT_MIN_EFFECT_PCT_BY_BENCHMARK.get(clock, {}).get(benchmark, default)


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
    # one inner sequence of iteration values per boot, or a flat list for one boot (normalise_boots)
    base: Sequence[float] | Boots
    head: Sequence[float] | Boots
    higher_is_better: bool
    min_effect_pct: float = DEFAULT_MIN_EFFECT_PCT["wall"]
    noise: NoisePrior | None = None  # one boot summary's noise, learned (kperf.stats.noise)
    # sd of one build's level around its source's, on the compared scale, and its dof
    # (kperf.stats.builds); base and head are one build each, so it counts twice.
    build_noise: NoisePrior | None = None


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
    notes: list[str] = field(default_factory=list)  # one sentence each, apart: no column's width can cut them
    extra: dict[str, float] = field(default_factory=dict)
    # q < alpha, whatever the size: a significant change below min_effect_pct is shown as a
    # change (and in the notes) but its verdict is no-change or inconclusive.
    significant: bool = False


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


def trimmed_mean(x: np.ndarray, proportion: float = BOOT_TRIM) -> float:
    """scipy.stats.trim_mean for one short vector: int(proportion * n) cut from each end.

    The same cut as scipy's, without its per-call argument handling, which costs
    milliseconds: a comparison or a branch history summarises thousands of boots.
    """
    return _mean_cut(x, int(proportion * x.size))


def _mean_cut(x: np.ndarray, cut: int) -> float:
    """The mean of x without its `cut` smallest and `cut` largest values."""
    if cut == 0:
        return float(np.mean(x))
    return float(np.mean(np.sort(x)[cut : x.size - cut]))


def sum_sq_dev(x: np.ndarray) -> float:
    """Sum of squared deviations from the mean, exactly 0 when every value is equal.

    The mean of three equal logs can differ from them in the last bit, and a variance of 1e-30
    would read as "boots noisier than a history of identical boots" under the instruction clock.
    """
    if x.size < 2 or float(np.ptp(x)) == 0.0:
        return 0.0
    return float(np.sum((x - x.mean()) ** 2))


def boot_cut(n: int) -> int:
    """How many of a boot's n iterations its summary cuts from each end: BOOT_TRIM of them, and at
    least one once there are three.

    At 20% alone the quick grid's 3 iterations would cut none, and one iteration that an event hits
    (a vmstat fold or a per-CPU list drain landing in the measured window: +1% on the page
    allocator's total-odr3-2 in one iteration of three, in most boots of 4 unrelated stand-ins out
    of 20) would move its boot, and with it the comparison (docs/statistics.md, "One iteration
    of three").
    """
    cut = int(BOOT_TRIM * n)
    return max(cut, 1) if n >= 3 else cut


def boot_mean(x: np.ndarray) -> float:
    """One boot's summary: the mean of its iterations without the boot_cut(n) at each end (for
    three iterations, their median)."""
    return _mean_cut(x, boot_cut(x.size))


def boot_summaries(boots: list[list[float]], log_scale: bool) -> np.ndarray:
    """One number per boot: boot_mean of its iterations (of their logs on the log scale)."""
    return np.array([boot_mean(np.log(b) if log_scale else np.asarray(b, dtype=float)) for b in boots], dtype=float)


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
    if prior is None or prior.sd <= 0.0 or not prior.dof >= MIN_PRIOR_DOF or len(x) < 3:
        return keep
    d0 = min(prior.dof, PRIOR_DOF_CAP)
    upper = prior.sd * math.sqrt(d0 / dist.chi2_ppf(0.05, d0))
    dev = np.abs(x - float(np.median(x)))
    far = np.flatnonzero(dev > BOOT_OUTLIER_SDS * upper)
    limit = (len(x) - 1) // 2
    if far.size:
        keep[far[np.argsort(-dev[far])][:limit]] = False
    return keep


def _moderated_var(x: np.ndarray, prior: NoisePrior | None) -> tuple[float, float, bool]:
    """(variance of one boot summary, its degrees of freedom, prior used?).

    A prior of sd 0 is what history says under the instruction clock (boots of one build agree
    exactly); it is used while the boots at hand agree too, and dropped as soon as they do not.
    """
    n = len(x)
    s2 = sum_sq_dev(x) / (n - 1) if n > 1 else 0.0
    if prior is None or not prior.sd >= 0.0 or not math.isfinite(prior.sd) or not prior.dof >= MIN_PRIOR_DOF:
        return s2, float(n - 1), False
    d0 = min(prior.dof, PRIOR_DOF_CAP)
    s02 = prior.sd**2
    if n > 1 and s2 > 0.0 and (s02 == 0.0 or dist.f_sf(s2 / s02, n - 1, d0) < PRIOR_REJECT_P):
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
    build_var: float = 0.0  # the part of se^2 that is 2 sd_build^2
    # The most the readings' rounding can move diff (both sides), on the compared scale: not in se,
    # it shrinks the difference before the test and widens the interval by as much.
    bound: float = 0.0
    unit: float = 0.0  # the readings' resolution (reading_unit), 0 when they have none to speak of

    @property
    def beyond(self) -> float:
        """The part of diff that the readings' rounding cannot explain (signed; 0 inside the bound)."""
        return math.copysign(max(0.0, abs(self.diff) - self.bound), self.diff)

    @property
    def t(self) -> float:
        d = self.beyond
        return d / self.se if self.se > 0 else (0.0 if d == 0 else math.copysign(math.inf, d))

    def p_value(self) -> float:
        if self.se == 0.0:
            return 1.0 if self.beyond == 0.0 else 0.0
        return 2.0 * dist.t_sf(abs(self.t), self.dof)

    def fixed_half(self, z: float) -> float:
        """The half width more boots cannot shrink, at boundary z: the builds' part and the rounding's."""
        return self.bound + z * math.sqrt(self.build_var)

    def to_pct(self, d: float, higher_is_better: bool) -> float | None:
        """A difference on the compared scale as a signed percent; None when base is 0 on a linear scale."""
        if self.log_scale:
            # An interval from a test with almost no degrees of freedom can reach past exp's range.
            return _signed_change(math.exp(d) if d < 700.0 else math.inf, higher_is_better)
        if self.base_level == 0.0:
            return None
        return _signed_change((self.base_level + d) / self.base_level, higher_is_better)


def _build_term(build: NoisePrior | None) -> tuple[float, float]:
    """(2 sd_build^2, its degrees of freedom); (0, inf) without a between-build component."""
    if build is None or not build.sd > 0.0 or not math.isfinite(build.sd):
        return 0.0, math.inf
    dof = build.dof if build.dof >= BUILD_DOF_FLOOR else BUILD_DOF_FLOOR  # also catches nan
    return 2.0 * build.sd**2, dof


def reading_unit(base: list[list[float]], head: list[list[float]]) -> float:
    """1 when every reading of both sides is a whole number (printed to a unit, so each is the true
    value to within half of it), else 0. Finer units are not guessed at: a reading with decimals is
    as often a computed rate as a printed one, and its rounding is far below any threshold."""
    values = np.fromiter((v for b in (*base, *head) for v in b), dtype=float)
    if values.size == 0 or not np.all(values == np.round(values)):
        return 0.0
    return 1.0


def _round_bound(unit: float, xb: np.ndarray, xh: np.ndarray, log_scale: bool) -> float:
    """The most the readings' rounding can move head - base: half a unit a side, relative on the
    log scale.

    Not divided by the boots or iterations: under the instruction clock they all round alike, so the
    error is the side's, not the reading's, and a median or mean of values rounded to whole units is
    off by no more than half of one.
    """
    if unit <= 0.0 or not log_scale:
        # On the linear scale (a side with readings at or below 0: counters, deltas) a whole unit
        # is no fraction of a level, and the change has no percentage to widen.
        return 0.0
    half = ROUNDING_BOUND_UNITS * unit
    return half * (math.exp(-float(np.mean(xb))) + math.exp(-float(np.mean(xh))))


def boot_test(
    base: list[list[float]],
    head: list[list[float]],
    prior: NoisePrior | None = None,
    build: NoisePrior | None = None,
) -> BootTest | None:
    """Welch's t on trimmed boot summaries, moderated by a noise prior, plus the between-build component.

    None below 2 boots a side, unless the boot noise is known (a prior): then one boot is a sample
    of known variance. Under the instruction clock one boot per side is a sensible design.
    """
    known = prior is not None and prior.dof >= MIN_PRIOR_DOF and prior.sd >= 0.0 and math.isfinite(prior.sd)
    if not base or not head or (not known and (len(base) < 2 or len(head) < 2)):
        return None
    log_scale = all(v > 0 for b in (*base, *head) for v in b)
    xb, xh = boot_summaries(base, log_scale), boot_summaries(head, log_scale)
    kb, kh = _keep_boots(xb, prior), _keep_boots(xh, prior)
    aside = (int(len(xb) - kb.sum()), int(len(xh) - kh.sum()))
    xb, xh = xb[kb], xh[kh]
    var_b, dof_b, used_b = _moderated_var(xb, prior)
    var_h, dof_h, used_h = _moderated_var(xh, prior)
    vb, vh = var_b / len(xb), var_h / len(xh)
    vbuild, dof_build = _build_term(build)
    unit = reading_unit(base, head)
    bound = _round_bound(unit, xb, xh, log_scale)
    total = vb + vh + vbuild
    se = math.sqrt(total)
    # Welch-Satterthwaite over the three independent variance estimates; a term with no
    # variance carries no uncertainty, and a known one (dof inf) none either.
    denom = sum(v * v / d for v, d in ((vb, dof_b), (vh, dof_h), (vbuild, dof_build)) if v > 0.0 and d > 0.0)
    dof = DOF_CAP if vbuild > 0.0 else max(dof_b + dof_h, 1.0)
    if denom > 0.0:
        dof = total**2 / denom
    level = float(np.mean(xb)) if not log_scale else float(np.exp(np.mean(xb)))
    return BootTest(
        float(np.mean(xh) - np.mean(xb)),
        se,
        min(dof, DOF_CAP),
        log_scale,
        level,
        used_b and used_h,
        aside,
        vbuild,
        bound,
        unit if bound > 0.0 else 0.0,
    )


def compare_one(inp: MetricInput, alpha: float = 0.05) -> MetricResult:
    """Compare one metric; the q-value and the verdict are filled in by compare_metrics."""
    return compare_with_test(inp, alpha)[0]


def compare_with_test(inp: MetricInput, alpha: float = 0.05) -> tuple[MetricResult, BootTest | None]:
    """compare_one, and the boot test it rests on (None where there is none): a sequential look
    needs both, and the test reads every value of both sides."""
    base = normalise_boots(inp.base)
    head = normalise_boots(inp.head)
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
        result.notes = ["no samples on one side"]
        return result, None
    log_all = all(v > 0 for b in (*base, *head) for v in b)
    base_means = boot_summaries(base, log_all)
    head_means = boot_summaries(head, log_all)
    diff = float(np.mean(head_means) - np.mean(base_means))
    level = float(np.exp(np.mean(base_means))) if log_all else float(np.mean(base_means))
    notes: list[str] = []
    if log_all:
        result.change_pct = _signed_change(math.exp(diff), inp.higher_is_better)
    elif level != 0.0:
        result.change_pct = _signed_change((level + diff) / level, inp.higher_is_better)
    elif diff == 0.0:
        result.change_pct = 0.0  # both sides at 0: nothing changed
    else:
        notes.append("base mean is 0: the change has no percentage")
    test = boot_test(base, head, inp.noise, inp.build_noise)
    if test is None:
        result.notes = ["needs at least 2 boots per side to estimate between-boot noise"]
        return result, None
    result.p_value = test.p_value()
    if any(test.set_aside):
        # The change is the test's: without the boots set aside.
        diff = test.diff
        result.change_pct = test.to_pct(diff, inp.higher_is_better)
    if test.se == 0.0 and test.bound == 0.0:
        # Identical boots within each side and no between-build component: nothing varies, so the
        # difference is exact (the instruction clock gives this when no build history is known).
        result.ci_low_pct = result.ci_high_pct = result.change_pct
        if diff != 0.0 and result.change_pct is not None:
            notes.append("boots identical within each side: the difference is exact")
    else:
        half = test.bound + (dist.t_ppf(1.0 - alpha / 2.0, test.dof) * test.se if test.se > 0.0 else 0.0)
        lo, hi = test.to_pct(diff - half, inp.higher_is_better), test.to_pct(diff + half, inp.higher_is_better)
        if lo is not None and hi is not None:
            result.ci_low_pct, result.ci_high_pct = sorted((lo, hi))
    notes.extend(_test_extras(result, test, inp.noise, dist.t_ppf(1.0 - alpha / 2.0, test.dof)))
    result.notes = notes
    return result, test


def _test_extras(result: MetricResult, test: BootTest, noise: NoisePrior | None, crit: float) -> list[str]:
    """Record in result.extra what went into the test; the notes that say so to a reader."""
    notes: list[str] = []
    result.extra["dof"] = test.dof
    result.extra["log_scale"] = 1.0 if test.log_scale else 0.0
    result.extra["noise_prior"] = 1.0 if test.prior_used else 0.0
    if test.build_var > 0.0:
        result.extra["build_sd"] = math.sqrt(test.build_var / 2.0)
        result.extra["build_share"] = test.build_var / test.se**2
    if test.bound > 0.0:
        # The rounding's share of the interval's half width.
        result.extra["resolution"] = test.unit
        result.extra["resolution_share"] = test.bound / (test.bound + crit * test.se)
    if test.bound > 0.0 and result.extra["resolution_share"] > 0.5 and test.base_level > 0.0:
        unit_pct = 100.0 * test.unit / test.base_level  # a bound is only on the log scale
        notes.append(
            f"readings in whole units (one is {unit_pct:.2g}% of the level): "
            "their rounding is most of the interval, and more boots do not narrow it"
        )
    if any(test.set_aside):
        result.extra["boots_set_aside"] = float(sum(test.set_aside))
        notes.append(
            f"boots set aside as broken (over {BOOT_OUTLIER_SDS:g} learned sds from their side's median): "
            f"{test.set_aside[0]} base, {test.set_aside[1]} head"
        )
    if noise is not None and not test.prior_used:
        notes.append("boots noisier than history: learned noise not used")
    return notes


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """q-values controlling the false discovery rate across one comparison (scipy's
    Benjamini-Hochberg adjustment)."""
    if not p_values:
        return []
    return [float(q) for q in sps.false_discovery_control(np.asarray(p_values, dtype=float), method="bh")]


# Relative slack when comparing a change with the threshold: a deterministic -1% read back through
# exp(log(99) - log(100)) may come out a few ulps short of -1.
_THRESHOLD_SLACK = 1e-9


def decide(r: MetricResult, alpha: float) -> None:
    """Set r.significant and r.verdict from q, the change and its interval; note a change below the threshold.

    A significant change whose size is below the practical threshold (r.min_effect_pct) is a
    change worth showing, never a regression or an improvement: kperf calls those only when
    they matter in practice.
    """
    m = r.min_effect_pct
    r.significant = r.q_value is not None and r.change_pct is not None and r.q_value < alpha
    if r.q_value is None or r.change_pct is None or r.ci_low_pct is None or r.ci_high_pct is None:
        r.verdict = Verdict.INCONCLUSIVE
        return
    c, lo, hi = r.change_pct, r.ci_low_pct, r.ci_high_pct
    large = abs(c) >= m * (1.0 - _THRESHOLD_SLACK) and c != 0.0
    if r.significant and large:
        r.verdict = Verdict.REGRESSION if c < 0 else Verdict.IMPROVEMENT
        return
    if r.significant:
        # Below 0.01% two decimals would print "+0.00%": show the first digit that is not 0.
        size = f"{c:+.2f}%" if abs(c) >= 0.01 else f"{c:+.1g}%"
        if lo == hi == c:
            # Boots identical within each side (the instruction clock without a
            # build component): the test's "significant" only says the boots agree.
            below = (
                f"{size} in every boot, below the {m:g}% practical threshold; boots this alike "
                "say nothing of what another build of the same source would measure"
            )
        else:
            below = f"significant {size} change, below the {m:g}% practical threshold"
        if below not in r.notes:  # deciding again (a later look) does not repeat it
            r.notes.insert(0, below)
    # lo == hi == 0: both sides identical and nothing varies, a no-change even with no threshold.
    inside = -m < lo and hi < m
    r.verdict = Verdict.NO_CHANGE if inside or lo == hi == 0.0 else Verdict.INCONCLUSIVE


def compare_metrics(metrics: Mapping[str, MetricInput], alpha: float = 0.05) -> dict[str, MetricResult]:
    """Compare every metric of one comparison and control the FDR across them."""
    results = {name: compare_one(inp, alpha) for name, inp in metrics.items()}
    tested = [name for name, r in results.items() if r.p_value is not None]
    for name, q in zip(tested, benjamini_hochberg([results[n].p_value for n in tested]), strict=True):  # type: ignore[misc]
        results[name].q_value = q
    for r in results.values():
        decide(r, alpha)
    return results
