"""Tracked branches learn how fast each metric's level wanders (KPERF_LEARNED_DRIFT).

The series are written straight into the real database (one job of one boot
per commit, as tracking queues them); polling, building and the runner
protocol are tested in test_tracking.py.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kperf.core.models import (
    BootRecord,
    BranchCommit,
    ChangePoint,
    Job,
    KernelBuild,
    MetricDef,
    Sample,
    TrackedBranch,
    Tree,
)
from kperf.core.tracking import branches
from kperf_testing import reference_history

from .conftest import Api, kperf_cli

pytestmark = pytest.mark.django_db

WANDERS, STEADY = "spawn-vmas-0", "spawn-vmas-1000"
NOISE = 0.01  # 1% per commit


def branch_with_series(
    owner: Any, mclass: Any, tmp: Path, name: str, n: int, walk: float, step_at: int = -1, step: float = 0.0
) -> tuple[TrackedBranch, list[BranchCommit]]:
    """A tracked branch of n measured commits. WANDERS follows a random walk of
    `walk` noise-sds per commit, STEADY a fixed level; both drop by `step`
    noise-sds from commit `step_at` on (a regression: spawn is a time)."""
    seed = zlib.crc32(name.encode())
    rng = np.random.default_rng(seed)
    tree = Tree.objects.create(url=str(tmp / name))
    branch = TrackedBranch.objects.create(
        owner=owner, tree=tree, branch="master", benchmarks=["spawn"], arches=["x86_64"]
    )
    shas = [f"{seed:08x}{i:032x}" for i in range(n)]
    commits = BranchCommit.objects.bulk_create(
        [
            BranchCommit(branch=branch, sha=s, position=i + 1, status=BranchCommit.Status.DONE)
            for i, s in enumerate(shas)
        ]
    )
    builds = KernelBuild.objects.bulk_create(
        [
            KernelBuild(tree=tree, sha=s, arch="x86_64", config_digest="d" * 64, status=KernelBuild.Status.DONE)
            for s in shas
        ]
    )
    jobs = Job.objects.bulk_create(
        [
            Job(
                build=b,
                branch_commit=c,
                benchmark="spawn",
                grid="quick",
                params={"iterations": 3, "extra_vmas": [0, 1000]},
                machine_class=mclass,
                clock=mclass.clock,
                status=Job.Status.DONE,
            )
            for b, c in zip(builds, commits, strict=True)
        ]
    )
    records = BootRecord.objects.bulk_create([BootRecord(job=j, attempt=1, boot=0) for j in jobs])
    wander = np.cumsum(rng.normal(0, walk, n))
    shift = np.where(np.arange(n) >= step_at, step, 0.0) if step_at >= 0 else np.zeros(n)
    samples = []
    for i, record in enumerate(records):
        for metric, level in ((WANDERS, wander[i]), (STEADY, 0.0)):
            # slower is worse: a regression raises the time
            centre = 1000.0 * math.exp(NOISE * (level + shift[i] + rng.normal(0, 1)))
            samples += [
                Sample(boot_record=record, metric=metric, iteration=k, value=centre * math.exp(rng.normal(0, 0.001)))
                for k in range(3)
            ]
    Sample.objects.bulk_create(samples)
    for metric in (WANDERS, STEADY):
        MetricDef.objects.get_or_create(
            name=metric, defaults={"benchmark": "spawn", "unit": "us", "higher_is_better": False}
        )
    return branch, commits


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
