"""The peers of the detector benchmark (bench/detectors.py): mmtests', 0-day's and Perfherder's rules
re-implemented on sliding windows, and Apache Otava from its package."""

from __future__ import annotations

import numpy as np
from synthetic import TOL

try:
    from otava.analysis import compute_change_points as otava_change_points  # type: ignore[import-untyped,import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - documented fallback in bench/requirements.txt
    otava_change_points = None


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
