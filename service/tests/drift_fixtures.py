"""Shared test scenarios, moved out of test_learned_drift.py so no test module imports another."""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from kperf.core.models import (
    BootRecord,
    BranchCommit,
    Job,
    KernelBuild,
    MetricDef,
    Sample,
    TrackedBranch,
    Tree,
)

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
