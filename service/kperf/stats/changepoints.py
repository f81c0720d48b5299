"""Change points over a tracked branch's per-commit series, found as commits arrive.

Each commit's samples (boots x iterations) are reduced to one summary: the
mean over boots of each boot's trimmed mean, on the log scale when every value
is positive. The detector then runs a likelihood-ratio scan for one shift in
the mean over the current segment (the commits since the last change point):

    Z(k) = (mean(x[k:t]) - mean(x[s:k])) / (sigma * sqrt(1/(k-s) + 1/(t-k)))

for every split k, and raises an alarm when max |Z(k)| exceeds a threshold
calibrated by simulation to at most one false alarm per 1000 commits on every
noise shape of the benchmark. The change is placed at the argmax (the
maximum-likelihood split), which is what bisection needs: the first commit
after the change. Once later commits arrive the location is refined over the
segment between the neighbouring change points.

Robustness:
- sigma comes from the series itself, from its first differences (which a
  step hardly moves), with a winsorized mean square so a few outliers do not
  inflate it and a two-mode series is not underestimated the way a MAD is;
- each summary is clipped to within HUBER_C sigma of the median of the
  previous few commits before it enters the scan (a Huber-type guard), so one
  slow commit cannot raise an alarm on its own;
- the scan needs MIN_AFTER commits after the split.

Incremental: the detector keeps prefix sums, so appending a commit costs one
vectorized pass over at most `window` split points.

The default window (512 commits) keeps the power for small steps on
stationary noise. On a series whose level wanders (a random walk) long
segments see the wander as a change. How fast a metric wanders cannot be
told from one series of a few hundred commits, but it can from the history
of the machine class: estimate_drift() fits the local-level model (a random
walk observed with noise) to change-free stretches of earlier series, and
the rate picks the window (drift_window: the side length that best trades
noise against wander) and its calibrated threshold (threshold_for_drift).
A stationary metric keeps rate 0 and the long window. bench/detectors.py
measures both (docs/statistics.md, "Against the targets").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special
from scipy import stats as sps

from kperf.stats.abtest import boot_mean, normalise_boots, trimmed_mean

# Calibrated by simulation (bench/detectors.py --calibrate) to at most one false alarm
# per 1000 commits on change-free series of 400 commits of every noise shape of the
# benchmark, with sigma estimated from the series as below. Gaussian noise alone needs
# 3.58; log-normal (4.09) and one-sided outliers (4.11) need more, because what the
# clip lets through of a long slow tail still leans one way. One threshold for all
# shapes, as the service cannot tell them apart: Gaussian metrics pay for it with
# fewer false alarms (about 0.2 per 1000) and a little recall.
DEFAULT_THRESHOLD = 4.15
DEFAULT_WINDOW = 512
MIN_HISTORY = 12  # commits before the first alarm is possible: sigma needs some data
MIN_BEFORE = 3
MIN_AFTER = 1
HUBER_C = 3.0
MEDIAN_SPAN = 9
RELOCATE_GAIN = HUBER_C * HUBER_C  # Huber-loss gain (sigma units) an alarm's split must show to move
WINSOR_Q = 0.85
SIGMA_DOF_PER_DIFF = 0.35  # differences overlap and are winsorized: fewer dof than their number


def _winsor_factor(q: float) -> float:
    """E[min(Z^2, c^2)] for standard normal Z, c its two-sided q quantile: makes the estimator consistent."""
    c = float(sps.norm.ppf(0.5 + q / 2.0))
    inside = (2.0 * sps.norm.cdf(c) - 1.0) - 2.0 * c * sps.norm.pdf(c)
    return float(inside + c * c * (1.0 - q))


_WINSOR_FACTOR = _winsor_factor(WINSOR_Q)


def robust_sigma(values: Sequence[float] | np.ndarray) -> float:
    """Noise of one point, from first differences, winsorized at their 85th percentile of |d|."""
    x = np.asarray(values, dtype=float)
    if x.size < 3:
        return 0.0
    d = np.abs(x[1:] - x[:-1])
    idx = min(d.size - 1, int(WINSOR_Q * d.size))
    cap = float(np.partition(d, idx)[idx])
    if cap == 0.0:
        # Most differences are exactly 0 (a deterministic clock, a quantised metric): winsorizing
        # would call the series noise-free and any single jump infinitely significant. The plain
        # mean square of the differences keeps a scale whenever anything moved at all.
        return math.sqrt(float(np.dot(d, d)) / d.size / 2.0)
    np.minimum(d, cap, out=d)
    ms = float(np.dot(d, d)) / d.size
    return math.sqrt(ms / (2.0 * _WINSOR_FACTOR))


def commit_summary(samples: Sequence[float] | Sequence[Sequence[float]], log_scale: bool) -> float:
    """One number per commit: the mean over boots of each boot's summary (kperf.stats.abtest.boot_mean)."""
    boots = normalise_boots(samples)
    if not boots:
        return math.nan
    per_boot = [boot_mean(np.log(b) if log_scale else np.asarray(b, dtype=float)) for b in boots]
    return float(np.mean(per_boot))


@dataclass
class ChangePoint:
    index: int  # first point after the change
    detected_at: int  # index of the commit whose arrival raised the alarm
    statistic: float  # |Z| at the split
    p_value: float
    shift: float  # mean after - mean before, on the scale of the summaries
    change_pct: float = 0.0  # negative is worse
    direction: str = ""  # "regression" / "improvement"


def _scan(
    prefix: np.ndarray,
    start: int,
    stop: int,
    sigma: float,
    min_before: int,
    min_after: int,
    around: tuple[int, int] | None = None,
) -> tuple[float, int]:
    """max |Z(k)| and its argmax over splits k of the segment [start, stop), k within `around` if given."""
    k_lo, k_hi = start + min_before, stop - min_after
    if around is not None:
        k_lo, k_hi = max(k_lo, around[0]), min(k_hi, around[1])
    ks = np.arange(k_lo, k_hi + 1)
    if ks.size == 0 or sigma <= 0.0:
        return 0.0, -1
    n1 = (ks - start).astype(float)
    n2 = (stop - ks).astype(float)
    total = prefix[stop] - prefix[start]
    left = prefix[ks] - prefix[start]
    z = ((total - left) / n2 - left / n1) / (sigma * np.sqrt(1.0 / n1 + 1.0 / n2))
    i = int(np.argmax(np.abs(z)))
    return float(z[i]), int(ks[i])


# Thresholds for at most one false alarm per 1000 commits when the level wanders at
# a given rate, each with its own window (drift_window): `bench/detectors.py
# --calibrate` (each noise shape plus a random walk of the rate, 1000 series of 400
# commits per rate and shape), the largest over the shapes plus 0.03 for the
# calibration's own sampling error, rounded up to 0.05. The shape that needs the
# most is named. Between rates the threshold is interpolated in log rate; beyond
# the last, it is held.
DRIFT_THRESHOLDS: list[tuple[float, float]] = [
    (0.0, DEFAULT_THRESHOLD),  # window 512; outliers 4.11 (normal 3.58)
    (1e-4, 4.35),  # window 346; outliers 4.30 (normal 3.77)
    (3e-4, 4.40),  # window 200; outliers 4.35 (normal 3.86)
    (1e-3, 4.50),  # window 110; log-normal 4.46 (normal 4.03)
    (2.5e-3, 4.55),  # window 69; log-normal 4.49 (normal 4.15)
    (1e-2, 4.65),  # window 35; log-normal 4.58 (normal 4.23)
    (3e-2, 4.95),  # window 24; log-normal 4.91 (normal 4.62)
]


def threshold_for_drift(rate: float) -> float:
    """The calibrated threshold for a level that wanders at `rate` (0: DEFAULT_THRESHOLD)."""
    if rate <= 0.0 or len(DRIFT_THRESHOLDS) < 2:
        return DRIFT_THRESHOLDS[0][1]
    rates = np.log([r for r, _ in DRIFT_THRESHOLDS[1:]])
    hs = [h for _, h in DRIFT_THRESHOLDS[1:]]
    return float(np.interp(math.log(rate), rates, hs))


def drift_window(drift: float, window: int = 512) -> int:
    """Scan window for a level that wanders: twice the side length that best
    trades noise (sigma^2/a) against wander (drift a/3), i.e. 2 sqrt(3/drift)."""
    if drift <= 0.0:
        return window
    return int(min(window, max(2 * MIN_HISTORY, round(2.0 * math.sqrt(3.0 / drift)))))


@dataclass(frozen=True)
class DriftEstimate:
    """How fast a metric's level wanders between change points, learned from history.

    rate: variance of the level's random-walk step per commit, relative to the
    noise of one commit's summary (0: a stationary level). lr: twice the
    log-likelihood gain of the local-level model over a fixed level; rate is
    only non-zero when lr clears DRIFT_LR_CRITICAL.
    """

    rate: float
    lr: float
    commits: int
    segments: int

    @property
    def window(self) -> int:
        return drift_window(self.rate)


DRIFT_GRID = np.concatenate([[0.0], np.geomspace(1e-5, 0.1, 41)])
DRIFT_LR_CRITICAL = 5.41  # 1% for a variance on the boundary (half chi2(0), half chi2(1))
DRIFT_MIN_SEGMENT = 24
DRIFT_UPPER_DROP = 0.5  # log-likelihood drop to the reported rate: about one standard error above the maximum


def _local_level_loglik(y: np.ndarray, rates: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Sum of squared standardized innovations and of log F, per rate, for one segment.

    Kalman filter of the local-level model y_t = mu_t + e_t, mu_t = mu_{t-1} + w_t,
    var(e) = s2, var(w) = rate * s2, with the first value as the (diffuse) initial
    level; s2 is profiled out by the caller from the pooled sums.
    """
    level = np.full(rates.size, y[0])
    p = np.ones(rates.size)  # variance of the level estimate, in units of s2
    ssq = np.zeros(rates.size)
    logf = np.zeros(rates.size)
    for v in y[1:]:
        pred = p + rates
        f = pred + 1.0
        innov = v - level
        ssq += innov * innov / f
        logf += np.log(f)
        gain = pred / f
        level = level + gain * innov
        p = pred / f
    return ssq, logf, y.size - 1


def estimate_drift(segments: Sequence[Sequence[float] | np.ndarray]) -> DriftEstimate:
    """The random-walk rate of a metric's level from change-free stretches of history.

    Each segment is one branch's per-commit summaries between two change points,
    in commit order. The local-level model's likelihood is pooled over segments
    on a grid of rates. Outliers are clipped first as the detector clips them
    (HUBER_C sigma from the running median), so a broken commit does not look
    like wander. The rate is reported as 0 unless the likelihood-ratio test
    against a fixed level rejects at 1%, so a stationary metric keeps the long
    window; otherwise it is the upper end of the likelihood interval
    (DRIFT_UPPER_DROP below the maximum), because a rate too low costs false
    alarms while one too high costs only a little power.
    """
    ssq = np.zeros(DRIFT_GRID.size)
    logf = np.zeros(DRIFT_GRID.size)
    n = used = 0
    for seg in segments:
        y = np.asarray(seg, dtype=float)
        y = y[np.isfinite(y)]
        if y.size < DRIFT_MIN_SEGMENT:
            continue
        sigma = robust_sigma(y)
        if sigma > 0.0:
            med = np.array([np.median(y[max(0, i - MEDIAN_SPAN) : i + 1]) for i in range(y.size)])
            y = np.clip(y, med - HUBER_C * sigma, med + HUBER_C * sigma)
        a, b, m = _local_level_loglik(y, DRIFT_GRID)
        ssq, logf, n, used = ssq + a, logf + b, n + m, used + 1
    return drift_from_sums(ssq, logf, n, used)


def drift_from_sums(ssq: np.ndarray, logf: np.ndarray, n: int, used: int) -> DriftEstimate:
    """The drift estimate from the local-level likelihood's sums over `used`
    segments of `n` steps: estimate_drift()'s last step, shared with the
    summaries that keep these sums (kperf.stats.history)."""
    if n == 0:
        return DriftEstimate(0.0, 0.0, 0, 0)
    loglik = -0.5 * (n * np.log(np.maximum(ssq, 1e-300) / n) + logf)
    best = int(np.argmax(loglik))
    lr = float(2.0 * (loglik[best] - loglik[0]))
    if lr <= DRIFT_LR_CRITICAL:
        return DriftEstimate(0.0, lr, n + used, used)
    upper = best
    while upper + 1 < DRIFT_GRID.size and loglik[upper + 1] >= loglik[best] - DRIFT_UPPER_DROP:
        upper += 1
    return DriftEstimate(rate=float(DRIFT_GRID[upper]), lr=lr, commits=n + used, segments=used)


class OnlineDetector:
    """Feed per-commit summaries with append(); alarms come back as ChangePoints.

    sigma: the noise of one summary if known (e.g. learned from history);
    otherwise it is estimated from the series itself as it grows.
    """

    def __init__(
        self,
        threshold: float | None = None,
        window: int = DEFAULT_WINDOW,
        sigma: float | None = None,
        robust: bool = True,
        min_history: int = MIN_HISTORY,
        drift: float = 0.0,
    ) -> None:
        self.drift = max(0.0, drift)
        self.threshold = threshold_for_drift(self.drift) if threshold is None else threshold
        self.window = drift_window(self.drift, window)
        self.known_sigma = sigma
        self.robust = robust
        self.min_history = min_history
        self.n = 0
        self._raw = np.zeros(256)
        self._prefix = np.zeros(257)  # _prefix[i] = sum of the first i clipped summaries
        self.segment_start = 0
        self.alarms: list[ChangePoint] = []
        self.last_max = 0.0  # max |Z| of the latest scan, for calibration

    @property
    def raw(self) -> np.ndarray:
        return self._raw[: self.n]

    @property
    def prefix(self) -> np.ndarray:
        return self._prefix[: self.n + 1]

    @property
    def sigma(self) -> float:
        if self.known_sigma is not None:
            return self.known_sigma
        # The last 256 differences: recent noise, bounded work per commit.
        return robust_sigma(self._raw[max(0, self.n - 257) : self.n])

    def append(self, value: float) -> ChangePoint | None:
        sigma = self.sigma
        x = float(value)
        n = self.n
        if sigma == 0.0 and n >= 3 and self.known_sigma is None:
            # Every commit so far was identical: the first one that is not gets its scale from itself,
            # so it is clipped like any outlier instead of entering the scan at full size.
            sigma = robust_sigma(np.append(self._raw[max(0, n - 256) : n], x))
        if self.robust and sigma > 0.0 and n >= 3:
            # The level of the current segment: after an alarm, only commits since the change.
            lo = max(0, n - MEDIAN_SPAN)
            if self.alarms and n > self.segment_start:
                lo = max(lo, self.segment_start)
            recent = sorted(self._raw[lo:n].tolist())
            m = len(recent)
            centre = recent[m // 2] if m % 2 else 0.5 * (recent[m // 2 - 1] + recent[m // 2])
            x = min(max(x, centre - HUBER_C * sigma), centre + HUBER_C * sigma)
        if n + 1 >= self._raw.size:
            self._raw = np.concatenate([self._raw, np.zeros(self._raw.size)])
            self._prefix = np.concatenate([self._prefix, np.zeros(self._raw.size - self._prefix.size + 1)])
        self._raw[n] = float(value)
        self._prefix[n + 1] = self._prefix[n] + x
        self.n = t = n + 1
        if t < self.min_history:
            return None
        start = max(self.segment_start, t - self.window)
        z, k = _scan(self._prefix, start, t, sigma, MIN_BEFORE, MIN_AFTER)
        if self.known_sigma is None:
            z = self._z_equivalent(z, t)
        self.last_max = abs(z)
        if k < 0 or abs(z) <= self.threshold:
            return None
        if self.robust:
            k = self._relocate(start, k, t, sigma)
        cp = self._make(start, k, t, z, sigma, detected_at=t - 1)
        self.alarms.append(cp)
        self.segment_start = k
        self._reclip(k, sigma)
        return cp

    def _z_equivalent(self, z: float, t: int) -> float:
        """Discount |Z| for a sigma estimated from few commits (t-like tails), so early commits keep the budget.

        The winsorized estimate from t-1 differences is worth about SIGMA_DOF_PER_DIFF
        degrees of freedom per difference; |Z| is mapped to the normal quantile with
        the same tail probability under Student's t with that many degrees of freedom.
        """
        dof = SIGMA_DOF_PER_DIFF * min(t - 1, 256)
        if dof >= 400 or abs(z) < 2.0:
            return z
        p = float(special.stdtr(dof, -abs(z)))
        return math.copysign(-float(special.ndtri(p)), z) if p > 0 else z

    def _relocate(self, start: int, k: int, stop: int, sigma: float) -> int:
        """Where a change that just raised an alarm really starts.

        Until the running median follows a large step, the first commits
        after it are clipped to HUBER_C sigma from the old level, so the scan
        over clipped values puts the split at the commit where the median
        flipped, up to MEDIAN_SPAN // 2 + 1 commits off. Here each candidate
        split near k is scored by the Huber loss of the raw summaries
        around the median of each side: a misplaced commit costs in
        proportion to its distance from its side's level, so the split that
        fits both levels wins, while an outlier still costs no more than
        linearly.
        """

        def cost(j: int) -> float:
            left, right = self._raw[start:j], self._raw[j:stop]
            r = np.concatenate([left - np.median(left), right - np.median(right)]) / sigma
            a = np.abs(r)
            return float(np.where(a <= HUBER_C, 0.5 * r * r, HUBER_C * a - 0.5 * HUBER_C * HUBER_C).sum())

        at_k = cost(k)
        best_k, best_cost = k, at_k
        for j in range(max(start + MIN_BEFORE, k - MEDIAN_SPAN), min(stop - MIN_AFTER, k + MEDIAN_SPAN) + 1):
            if j == k:
                continue
            c = cost(j)
            if c < best_cost:
                best_k, best_cost = j, c
        # Only a clear gain moves the split: the clipping bias costs about
        # HUBER_C x (step - HUBER_C) per late commit, noise far less.
        return best_k if at_k - best_cost > RELOCATE_GAIN else k

    def _reclip(self, k: int, sigma: float) -> None:
        """Re-clip the new segment's points around its own level.

        They were clipped against the level before the change, so a large
        step would otherwise look smaller than it is and raise a second alarm
        a few commits later.
        """
        if not self.robust or sigma <= 0.0:
            return
        seg = self._raw[k : self.n]
        centre = float(np.median(seg))
        clipped = np.clip(seg, centre - HUBER_C * sigma, centre + HUBER_C * sigma)
        self._prefix[k + 1 : self.n + 1] = self._prefix[k] + np.cumsum(clipped)

    def _make(self, start: int, k: int, stop: int, z: float, sigma: float, detected_at: int) -> ChangePoint:
        # The size of the change from the raw summaries (trimmed), not the clipped ones.
        # trimmed_mean cuts as scipy's trim_mean does, without its per-call overhead
        # (a millisecond, paid for every alarm of every metric at each analysis).
        shift = trimmed_mean(self._raw[k:stop], 0.1) - trimmed_mean(self._raw[start:k], 0.1)
        # Bonferroni over the splits scanned: conservative, never below the two-sample p.
        n_splits = max(1, stop - start - MIN_BEFORE - MIN_AFTER + 1)
        # special.ndtr(-z) is what norm.sf computes, without the distribution's per-call wrapper.
        pv = min(1.0, 2.0 * float(special.ndtr(-abs(z))) * n_splits)
        return ChangePoint(index=k, detected_at=detected_at, statistic=abs(z), p_value=pv, shift=shift)

    def change_points(self, refine: bool = True) -> list[ChangePoint]:
        """Alarms so far, each re-placed at the best split between its neighbours."""
        if not refine:
            return list(self.alarms)
        prefix = self.prefix
        sigma = self.sigma
        out: list[ChangePoint] = []
        n = self.n
        for j, cp in enumerate(self.alarms):
            lo = self.alarms[j - 1].index if j > 0 else 0
            hi = self.alarms[j + 1].index if j + 1 < len(self.alarms) else n
            # Every commit between the neighbours sharpens the two means; the split may only
            # move near the alarm's: later data sharpen the location, they do not move it far.
            reach = max(10, 2 * (cp.detected_at - cp.index + 1))
            lo = max(lo, cp.index - self.window)
            hi = min(hi, cp.index + self.window)
            z, k = _scan(prefix, lo, hi, sigma, MIN_BEFORE, MIN_AFTER, (cp.index - reach, cp.index + reach))
            if k < 0:
                out.append(cp)
                continue
            refined = self._make(lo, k, hi, z, sigma, cp.detected_at)
            out.append(refined)
        return out


def detect(
    values: Sequence[float] | np.ndarray,
    threshold: float | None = None,
    sigma: float | None = None,
    robust: bool = True,
    window: int = DEFAULT_WINDOW,
    drift: float = 0.0,
) -> list[ChangePoint]:
    """Run the online detector over a whole series of summaries; refined change points."""
    det = OnlineDetector(threshold=threshold, window=window, sigma=sigma, robust=robust, drift=drift)
    for v in values:
        det.append(v)
    return det.change_points()


def _signed_pct(shift: float, log_scale: bool, level: float, higher_is_better: bool) -> float:
    ratio = math.exp(shift) if log_scale else (level + shift) / level if level else 1.0
    return (ratio - 1.0) * 100.0 if higher_is_better else (1.0 - ratio) * 100.0


def series_summaries(points: Sequence[Sequence[float] | Sequence[Sequence[float]]]) -> tuple[list[float], bool]:
    """Per-commit summaries of one metric's raw samples (nan where a commit has none), and whether on log scale."""
    log_scale = all(v > 0 for pt in points for b in normalise_boots(pt) for v in b)
    return [commit_summary(pt, log_scale) for pt in points], log_scale


def series_change_points(
    points: Sequence[Sequence[float] | Sequence[Sequence[float]]],
    higher_is_better: bool,
    threshold: float | None = None,
    min_effect_pct: float = 0.0,
    drift: float = 0.0,
) -> list[ChangePoint]:
    """Change points of one metric from raw per-commit samples (the JSON command's input).

    drift: the level's random-walk rate learned from history (estimate_drift);
    it picks the scan window and, unless `threshold` is given, the threshold.
    Commits with no finite samples are skipped for the scan but keep their
    place, so `index` always refers to the caller's list.
    """
    summaries, log_scale = series_summaries(points)
    keep = [i for i, s in enumerate(summaries) if math.isfinite(s)]
    found = detect([summaries[i] for i in keep], threshold=threshold, drift=drift)
    out: list[ChangePoint] = []
    for cp in found:
        before = [summaries[i] for i in keep[: cp.index]]
        level = float(np.mean(before)) if before else 0.0
        cp.change_pct = _signed_pct(cp.shift, log_scale, level, higher_is_better)
        if abs(cp.change_pct) < min_effect_pct:
            continue
        cp.direction = "regression" if cp.change_pct < 0 else "improvement"
        cp.index = keep[cp.index]
        cp.detected_at = keep[cp.detected_at]
        out.append(cp)
    return out
