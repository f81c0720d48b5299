"""Shared test scenarios, moved out of test_learned_build_noise.py so no test module imports another."""

from __future__ import annotations

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

METRICS = ("spawn-vmas-0", "spawn-vmas-1000")


BUILD_SD = 0.001  # 0.1% from one build to the next


def branch_of_builds(owner: Any, mclass: Any, tmp: Path, n: int = 16, boots: int = 2) -> TrackedBranch:
    """n commits that run the same code paths: each build's level is off by
    BUILD_SD at random, and its boots (and iterations) agree exactly."""
    rng = np.random.default_rng(zlib.crc32(b"builds"))
    tree = Tree.objects.create(url=str(tmp / "builds"))
    branch = TrackedBranch.objects.create(owner=owner, tree=tree, branch="master", benchmarks=["spawn"])
    for i in range(n):
        sha = f"{i + 1:040x}"
        commit = BranchCommit.objects.create(branch=branch, sha=sha, position=i + 1, status=BranchCommit.Status.DONE)
        build = KernelBuild.objects.create(
            tree=tree, sha=sha, arch="x86_64", config_digest="d" * 64, status=KernelBuild.Status.DONE
        )
        level = 1000.0 * float(np.exp(rng.normal(0, BUILD_SD)))
        for _ in range(boots):
            job = Job.objects.create(
                build=build,
                branch_commit=commit,
                benchmark="spawn",
                grid="quick",
                params={"duration": 0.2, "iterations": 3, "extra_vmas": [0, 1000]},
                machine_class=mclass,
                clock=mclass.clock,
                status=Job.Status.DONE,
            )
            record = BootRecord.objects.create(job=job, attempt=1, boot=0)
            Sample.objects.bulk_create(
                [Sample(boot_record=record, metric=m, iteration=k, value=level) for m in METRICS for k in range(3)]
            )
    for metric in METRICS:
        MetricDef.objects.get_or_create(
            name=metric, defaults={"benchmark": "spawn", "unit": "forks/s", "higher_is_better": True}
        )
    return branch
