"""Change points over per-commit series: placed on the right commit, quiet on flat data, incremental."""

from __future__ import annotations

import numpy as np
import pytest

from kperf.stats.changepoints import OnlineDetector, detect, robust_sigma, series_change_points


def series(seed: int, n: int = 200, step_at: int | None = None, step: float = 0.0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(0.0, 1.0, n)
    if step_at is not None:
        x[step_at:] += step
    return x


def test_flat_series_stay_within_the_false_alarm_budget() -> None:
    # The default threshold allows one false alarm per 1000 commits: 20 x 200 commits expect 4.
    alarms = sum(len(detect(series(seed))) for seed in range(20))
    assert alarms <= 10


def test_a_flat_series_has_no_change_points_at_a_strict_threshold() -> None:
    assert detect(series(0), threshold=5.0) == []


@pytest.mark.parametrize(("step_at", "step"), [(57, -4.0), (120, 3.0), (30, 6.0)])
def test_a_step_is_placed_on_the_first_commit_after_it(step_at: int, step: float) -> None:
    cps = detect(series(7, step_at=step_at, step=step))
    assert [cp.index for cp in cps] == [step_at]
    assert cps[0].shift == pytest.approx(step, abs=0.6)
    assert cps[0].detected_at >= step_at


@pytest.mark.parametrize("step", [-8.0, -12.0, 20.0])
def test_a_very_large_step_after_a_short_history_is_placed_exactly(step: float) -> None:
    # Until the running median follows such a step the first commits after it
    # are clipped towards the old level; the alarm must still name the first.
    placed = []
    for seed in range(40):
        cps = detect(series(seed, n=26, step_at=16, step=step))
        placed.append([cp.index for cp in cps])
    assert sum(p == [16] for p in placed) >= 38, placed


def test_the_alarm_comes_a_few_commits_after_a_large_step() -> None:
    cps = detect(series(8, step_at=100, step=4.0))
    assert len(cps) == 1 and cps[0].detected_at - 100 <= 4


def test_isolated_outliers_do_not_raise_alarms() -> None:
    x = series(9, n=300)
    x[[40, 90, 91, 150, 220]] -= 12.0  # a daemon woke up; twice in a row once
    assert detect(x) == []


def test_sigma_from_differences_ignores_steps_and_outliers() -> None:
    x = series(10, n=400, step_at=200, step=5.0)
    x[::50] += 30.0
    assert robust_sigma(x) == pytest.approx(1.0, rel=0.15)


def test_two_changes_are_both_found() -> None:
    x = series(11, n=300, step_at=100, step=-3.0)
    x[200:] += 5.0
    assert [cp.index for cp in detect(x)] == [100, 200]


def test_appending_one_commit_at_a_time_matches_the_batch_answer() -> None:
    x = series(12, n=250, step_at=140, step=-2.5)
    det = OnlineDetector()
    alarms = [cp for cp in (det.append(v) for v in x) if cp is not None]
    assert len(alarms) == 1 and alarms[0].detected_at >= 140
    assert [cp.index for cp in det.change_points()] == [cp.index for cp in detect(x)]


def test_raw_samples_give_percent_changes_signed_like_mmtests() -> None:
    rng = np.random.default_rng(13)
    level = np.r_[np.full(60, 1000.0), np.full(60, 1100.0)]  # cycles: higher is worse
    points = [[[float(v * (1 + rng.normal(0, 0.01))) for _ in range(4)] for _ in range(2)] for v in level]
    (cp,) = series_change_points(points, higher_is_better=False)
    assert cp.index == 60 and cp.direction == "regression"
    assert cp.change_pct == pytest.approx(-10.0, abs=1.0)


def test_commits_without_samples_keep_their_place() -> None:
    rng = np.random.default_rng(14)
    points: list[list[float]] = [[float(100 + rng.normal(0, 1))] for _ in range(100)]
    for i in range(50, 100):
        points[i] = [points[i][0] - 8.0]
    points[20] = []
    points[60] = []
    (cp,) = series_change_points(points, higher_is_better=True)
    assert cp.index == 50 and cp.direction == "regression"
