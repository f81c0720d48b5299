"""History kept as summaries: what the learned drift, between-build noise and
change-point search need of old data, so that new data costs only itself.

Every estimate here equals its full-history counterpart on the same data
(tests compare them):

- drift: estimate_drift() pools, over change-free segments, the Kalman
  filter's sums per rate of the grid; DriftStats holds those sums for any set
  of segments (one branch's, say) and sums add across sets.
- between-build noise: between_build_noise() pools mean squares over groups
  of builds; BuildSums holds them for any set of groups, on both scales
  (which one applies depends on every value of every branch).
- change points: an OnlineDetector fed the series' summaries is kept
  (detector_to_bytes), so a commit appended at the end costs one append, not
  a replay of the whole series.
"""

from __future__ import annotations

import bisect
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from kperf.stats.abtest import sum_sq_dev
from kperf.stats.builds import BuildNoise, between_build_noise_from_sums
from kperf.stats.changepoints import (
    DRIFT_GRID,
    DRIFT_MIN_SEGMENT,
    HUBER_C,
    MEDIAN_SPAN,
    ChangePoint,
    DriftEstimate,
    OnlineDetector,
    _signed_pct,
    drift_from_sums,
    robust_sigma,
)


@dataclass(frozen=True)
class DriftStats:
    """The local-level model's sums over some segments, per rate of DRIFT_GRID."""

    ssq: tuple[float, ...]
    logf: tuple[float, ...]
    n: int
    used: int

    @staticmethod
    def empty() -> DriftStats:
        zeros = tuple(0.0 for _ in DRIFT_GRID)
        return DriftStats(zeros, zeros, 0, 0)

    def __add__(self, other: DriftStats) -> DriftStats:
        return DriftStats(
            tuple(a + b for a, b in zip(self.ssq, other.ssq, strict=True)),
            tuple(a + b for a, b in zip(self.logf, other.logf, strict=True)),
            self.n + other.n,
            self.used + other.used,
        )


def _clipped(y: np.ndarray) -> np.ndarray:
    """A segment clipped as estimate_drift clips it: HUBER_C sigma from the running median."""
    sigma = robust_sigma(y)
    if sigma <= 0.0:
        return y
    med = np.empty(y.size)
    # The medians of the first few prefixes from one sorted list: np.median's
    # answer exactly (the middle value, or the two middle ones' mean), without
    # its per-call cost, which made up a fifth of an analysis after a commit.
    ordered: list[float] = []
    for i in range(min(y.size, MEDIAN_SPAN)):
        bisect.insort(ordered, float(y[i]))
        k = len(ordered) // 2
        med[i] = ordered[k] if len(ordered) % 2 else (ordered[k - 1] + ordered[k]) / 2.0
    if y.size > MEDIAN_SPAN:
        windows = np.lib.stride_tricks.sliding_window_view(y, MEDIAN_SPAN + 1)
        med[MEDIAN_SPAN:] = np.median(windows, axis=1)
    clipped: np.ndarray = np.clip(y, med - HUBER_C * sigma, med + HUBER_C * sigma)
    return clipped


def drift_stats(segments: Sequence[Sequence[float] | np.ndarray]) -> DriftStats:
    """estimate_drift's sums over `segments`, the Kalman filters of all segments run
    side by side (one pass over the longest, not one Python loop per segment)."""
    return drift_stats_many([segments])[0]


def drift_stats_many(groups: Sequence[Sequence[Sequence[float] | np.ndarray]]) -> list[DriftStats]:
    """drift_stats() of each group of segments (e.g. every metric of a series), every
    segment of every group filtered side by side: one pass over the longest segment
    for all of them, since a pass costs its length in Python steps whatever its width."""
    ys: list[np.ndarray] = []
    owner: list[int] = []
    for g, segments in enumerate(groups):
        for seg in segments:
            y = np.asarray(seg, dtype=float)
            y = y[np.isfinite(y)]
            if y.size >= DRIFT_MIN_SEGMENT:
                ys.append(_clipped(y))
                owner.append(g)
    if not ys:
        return [DriftStats.empty() for _ in groups]
    rates = DRIFT_GRID[None, :]
    longest = max(y.size for y in ys)
    values = np.zeros((len(ys), longest))
    live = np.zeros((len(ys), longest), dtype=bool)
    for i, y in enumerate(ys):
        values[i, : y.size] = y
        live[i, : y.size] = True
    level = np.repeat(values[:, :1], DRIFT_GRID.size, axis=1)
    p = np.ones((len(ys), DRIFT_GRID.size))
    ssq = np.zeros((len(ys), DRIFT_GRID.size))
    logf = np.zeros((len(ys), DRIFT_GRID.size))
    for t in range(1, longest):
        on = live[:, t][:, None]
        pred = p + rates
        f = pred + 1.0
        innov = values[:, t][:, None] - level
        # A finished segment adds nothing and keeps its state.
        ssq = np.where(on, ssq + innov * innov / f, ssq)
        logf = np.where(on, logf + np.log(f), logf)
        gain = pred / f
        level = np.where(on, level + gain * innov, level)
        p = np.where(on, pred / f, p)
    out = []
    for g in range(len(groups)):
        rows = [i for i, o in enumerate(owner) if o == g]
        if not rows:
            out.append(DriftStats.empty())
            continue
        # Summed segment by segment, in order, as estimate_drift pools them.
        total_ssq = np.zeros(DRIFT_GRID.size)
        total_logf = np.zeros(DRIFT_GRID.size)
        for i in rows:
            total_ssq = total_ssq + ssq[i]
            total_logf = total_logf + logf[i]
        n = sum(ys[i].size - 1 for i in rows)
        out.append(DriftStats(tuple(total_ssq.tolist()), tuple(total_logf.tolist()), n, len(rows)))
    return out


def drift_from_stats(stats: DriftStats) -> DriftEstimate:
    """estimate_drift() from pooled sums."""
    return drift_from_sums(np.asarray(stats.ssq), np.asarray(stats.logf), stats.n, stats.used)


class BuildStat(NamedTuple):
    """One build's boot summaries on one scale: how many, their mean, their sum of squared deviations.

    A named tuple, not a dataclass: an analysis makes one per commit and metric
    of the window (a hundred thousand), and a tuple is made several times faster.
    """

    boots: int
    mean: float
    ss: float


def build_stat(summaries: np.ndarray) -> BuildStat:
    return BuildStat(int(summaries.size), float(summaries.mean()), sum_sq_dev(summaries))


@dataclass(frozen=True)
class BuildSums:
    """between_build_noise's mean squares over some groups of builds (kperf.stats.builds)."""

    ssb: float = 0.0
    dfb: float = 0.0
    ssw: float = 0.0
    dfw: float = 0.0
    n0_num: float = 0.0
    builds: int = 0
    groups: int = 0

    def __add__(self, other: BuildSums) -> BuildSums:
        return BuildSums(
            self.ssb + other.ssb,
            self.dfb + other.dfb,
            self.ssw + other.ssw,
            self.dfw + other.dfw,
            self.n0_num + other.n0_num,
            self.builds + other.builds,
            self.groups + other.groups,
        )

    def as_list(self) -> list[float]:
        return [self.ssb, self.dfb, self.ssw, self.dfw, self.n0_num, float(self.builds), float(self.groups)]

    @staticmethod
    def from_list(v: Sequence[float]) -> BuildSums:
        return BuildSums(v[0], v[1], v[2], v[3], v[4], int(v[5]), int(v[6]))


def build_sums(groups: Sequence[Sequence[BuildStat]]) -> BuildSums:
    """The mean squares of groups of builds, each build given by its BuildStat (as _mean_squares)."""
    ssb = dfb = ssw = dfw = n0_num = 0.0
    builds = used = 0
    for g in groups:
        g = [b for b in g if b.boots > 0]
        if len(g) >= 2:
            sizes = np.array([b.boots for b in g], dtype=float)
            means = np.array([b.mean for b in g])
            total = float(sizes.sum())
            grand = float(np.dot(sizes, means) / total)
            ssb += float(np.dot(sizes, (means - grand) ** 2))
            dfb += len(g) - 1
            n0_num += total - float(np.dot(sizes, sizes)) / total
            builds += len(g)
            used += 1
        for b in g:
            ssw += b.ss
            dfw += b.boots - 1
    return BuildSums(ssb, dfb, ssw, dfw, n0_num, builds, used)


def build_sums_of_arrays(
    boots: np.ndarray, means: np.ndarray, ss: np.ndarray, bounds: Sequence[tuple[int, int]]
) -> BuildSums:
    """build_sums() of a series given as arrays (one entry per commit; boots 0 where
    it measured nothing) cut into groups at `bounds` (start, end): what build_sums
    computes, without a BuildStat per commit (an analysis has a hundred thousand)."""
    ssb = dfb = ssw = dfw = n0_num = 0.0
    builds = used = 0
    for start, end in bounds:
        on = boots[start:end] > 0
        sizes = boots[start:end][on].astype(float)
        if sizes.size >= 2:
            m = means[start:end][on]
            total = float(sizes.sum())
            grand = float(np.dot(sizes, m) / total)
            ssb += float(np.dot(sizes, (m - grand) ** 2))
            dfb += sizes.size - 1
            n0_num += total - float(np.dot(sizes, sizes)) / total
            builds += sizes.size
            used += 1
        ssw += float(ss[start:end][on].sum())
        dfw += float((sizes - 1.0).sum())
    return BuildSums(ssb, dfb, ssw, dfw, n0_num, builds, used)


def build_noise_from_sums(sums: BuildSums, log_scale: bool) -> BuildNoise:
    """between_build_noise() from pooled mean squares (no boot-noise prior)."""
    return between_build_noise_from_sums(
        sums.ssb, sums.dfb, sums.ssw, sums.dfw, sums.n0_num, sums.builds, sums.groups, log_scale
    )


# The detector's state: a JSON header (scalars, alarms, the commits fed) and its two arrays.
_HEADER = struct.Struct("<I")


def detector_to_bytes(det: OnlineDetector, commits: Sequence[int], log_scale: bool) -> bytes:
    """An OnlineDetector and the ids of the commits it was fed, to store between analyses."""
    header = {
        "drift": det.drift,
        "threshold": det.threshold,
        "window": det.window,
        "sigma": det.known_sigma,
        "robust": det.robust,
        "min_history": det.min_history,
        "n": det.n,
        "segment_start": det.segment_start,
        "last_max": det.last_max,
        "alarms": [[a.index, a.detected_at, a.statistic, a.p_value, a.shift] for a in det.alarms],
        "commits": list(commits),
        "log_scale": log_scale,
    }
    head = json.dumps(header).encode()
    return _HEADER.pack(len(head)) + head + det.raw.tobytes() + det.prefix.tobytes()


def detector_from_bytes(data: bytes) -> tuple[OnlineDetector, list[int], bool]:
    """The detector, the commit ids it was fed and the scale of its summaries."""
    (size,) = _HEADER.unpack_from(data)
    header = json.loads(data[_HEADER.size : _HEADER.size + size])
    n = int(header["n"])
    arrays = np.frombuffer(data[_HEADER.size + size :], dtype=np.float64)
    det = OnlineDetector(
        threshold=header["threshold"],
        window=header["window"],
        sigma=header["sigma"],
        robust=header["robust"],
        min_history=header["min_history"],
        drift=header["drift"],
    )
    capacity = max(256, 1 << (n + 1).bit_length())
    det._raw = np.zeros(capacity)
    det._prefix = np.zeros(capacity + 1)
    det._raw[:n] = arrays[:n]
    det._prefix[: n + 1] = arrays[n : 2 * n + 1]
    det.n = n
    det.segment_start = int(header["segment_start"])
    det.last_max = float(header["last_max"])
    det.alarms = [
        ChangePoint(index=int(i), detected_at=int(d), statistic=s, p_value=p, shift=sh)
        for i, d, s, p, sh in header["alarms"]
    ]
    return det, [int(c) for c in header["commits"]], bool(header["log_scale"])


def finish_change_points(
    det: OnlineDetector, places: Sequence[int], log_scale: bool, higher_is_better: bool, min_effect_pct: float
) -> list[ChangePoint]:
    """series_change_points' answer from a detector fed the finite summaries:
    refined, signed, below the practical threshold dropped; `places[i]` is where
    the detector's i-th point sits in the caller's list."""
    summaries = det.raw
    out: list[ChangePoint] = []
    for cp in det.change_points():
        before = summaries[: cp.index]
        level = float(np.mean(before)) if before.size else 0.0
        cp.change_pct = _signed_pct(cp.shift, log_scale, level, higher_is_better)
        if abs(cp.change_pct) < min_effect_pct:
            continue
        cp.direction = "regression" if cp.change_pct < 0 else "improvement"
        cp.index = places[cp.index]
        cp.detected_at = places[cp.detected_at]
        out.append(cp)
    return out
