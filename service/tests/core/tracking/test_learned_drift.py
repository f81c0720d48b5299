"""Tracked branches learn how fast each metric's level wanders (KPERF_LEARNED_DRIFT).

The series are written straight into the real database (one job of one boot
per commit, as tracking queues them); polling, building and the runner
protocol are tested in test_tracking.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core.models import (
    ChangePoint,
)
from kperf.core.tracking import branches
from kperf_testing import reference_history

from tests.conftest import Api, kperf_cli
from tests.drift_fixtures import STEADY, WANDERS, branch_with_series

pytestmark = pytest.mark.django_db


def test_drift_is_learned_per_metric_and_shown_in_the_noise_report(
    alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    # 0.1 noise-sds per commit: 2.2 sds of wander over 500 commits
    branch_with_series(alice, qemu_class, tmp_path, "wandering", 500, walk=0.1)
    drift = reference_history.learned_drift(qemu_class.pk, "spawn", qemu_class.clock)
    assert 0.003 < drift[WANDERS].rate < 0.03, drift[WANDERS]
    assert drift[WANDERS].window < 100
    assert drift[STEADY].rate == 0.0 and drift[STEADY].window == 512, drift[STEADY]
    assert drift[WANDERS].commits == drift[STEADY].commits == 500

    report = {m["metric"]: m for m in alice_api.get("/noise?machine_class=qemu-x86_64").json()["metrics"]}
    assert report[WANDERS]["drift_rate"] == pytest.approx(drift[WANDERS].rate)
    assert report[WANDERS]["change_point_window"] == drift[WANDERS].window
    assert report[STEADY]["drift_rate"] == 0.0 and report[STEADY]["change_point_window"] == 512


def test_kperf_noise_prints_the_wander_and_the_window(
    live_server: Any, alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    branch_with_series(alice, qemu_class, tmp_path, "wandering", 500, walk=0.1)
    out = kperf_cli(live_server.url, alice_api, tmp_path / "c.json")("noise", "--machine-class", "qemu-x86_64")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "qemu-x86_64, instructions clock"
    assert lines[1].endswith("drift/commit  window")
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    # 0.1 noise-sds per commit went in; the reported rate is the likelihood interval's upper end
    assert 0.06 < float(rows[WANDERS][-2]) < 0.18 and int(rows[WANDERS][-1]) < 100, rows[WANDERS]
    assert rows[STEADY][-2:] == ["0.000", "512"], rows[STEADY]


def test_stored_change_points_cut_the_history_so_a_step_is_not_taken_for_wander(
    alice: Any, qemu_class: Any, tmp_path: Path, settings: Any
) -> None:
    settings.KPERF_LEARNED_DRIFT = True
    branch, commits = branch_with_series(alice, qemu_class, tmp_path, "one-step", 400, walk=0.0, step_at=200, step=8)
    branches.analyse_series(branch, qemu_class.pk, "spawn", qemu_class.clock)
    found = {(cp.metric, cp.commit.sha) for cp in ChangePoint.objects.filter(branch=branch)}
    assert found == {(WANDERS, commits[200].sha), (STEADY, commits[200].sha)}
    # cut at the stored change points, both metrics are stationary ...
    assert {
        m: d.rate for m, d in reference_history.learned_drift(qemu_class.pk, "spawn", qemu_class.clock).items()
    } == {
        WANDERS: 0,
        STEADY: 0,
    }
    # ... while the same series taken whole would read the 8-sd step as wander
    ChangePoint.objects.filter(branch=branch).delete()
    assert all(d.rate > 0 for d in reference_history.learned_drift(qemu_class.pk, "spawn", qemu_class.clock).values())


def test_a_step_on_a_wandering_branch_is_found_without_the_false_alarms_of_a_fixed_window(
    alice: Any, qemu_class: Any, tmp_path: Path, settings: Any
) -> None:
    # No percent floor: it would hide the small wander-sized alarms this is about.
    settings.KPERF_MIN_EFFECT_PCT = 0.0
    # history: another branch on the same machine class, wandering the same way
    branch_with_series(alice, qemu_class, tmp_path, "history", 600, walk=0.1)
    branch, _ = branch_with_series(alice, qemu_class, tmp_path, "wander-step", 400, walk=0.1, step_at=300, step=6)

    settings.KPERF_LEARNED_DRIFT = False
    branches.analyse_series(branch, qemu_class.pk, "spawn", qemu_class.clock)
    fixed = [cp.commit.position - 1 for cp in ChangePoint.objects.filter(branch=branch, metric=WANDERS)]

    settings.KPERF_LEARNED_DRIFT = True
    branches.analyse_series(branch, qemu_class.pk, "spawn", qemu_class.clock)
    learned = [cp.commit.position - 1 for cp in ChangePoint.objects.filter(branch=branch, metric=WANDERS)]

    # The 512-commit scan takes the wander for changes; the learned window does not.
    assert 300 in learned, learned
    assert len([i for i in learned if i != 300]) <= 1, learned
    assert len([i for i in fixed if abs(i - 300) > 3]) >= 3, fixed
    # the steady metric is not affected by the other's drift
    steady = [cp.commit.position - 1 for cp in ChangePoint.objects.filter(branch=branch, metric=STEADY)]
    assert steady == [300]
