"""Builders for tests of the runner protocol and the service: submissions whose kernels are built and jobs queued.

Shared by the service's tests and the runner's tests that talk to a live
service (the runner itself only ever speaks HTTP to it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from kperf.core.models import KernelBuild, MachineClass, Submission, SubmissionBuild, Tree
from kperf.core.submissions.pipeline import schedule_jobs


def built(tree: Tree, sha: str, tmp: Path, arch: str = "x86_64") -> KernelBuild:
    kernel = tmp / f"bzImage-{sha[:6]}-{arch}"
    kernel.write_bytes(b"not really a kernel " + sha.encode())
    return KernelBuild.objects.create(
        tree=tree,
        sha=sha,
        arch=arch,
        config_digest="d" * 64,
        status=KernelBuild.Status.DONE,
        artifacts={
            "kernel": {
                "path": str(kernel),
                "sha256": hashlib.sha256(kernel.read_bytes()).hexdigest(),
                "size": kernel.stat().st_size,
            }
        },
    )


def submission_ready_for_testing(
    owner: Any,
    mclass: MachineClass,
    tmp: Path,
    benchmarks: tuple[str, ...] = ("spawn",),
    grid: str = "quick",
    arches: tuple[str, ...] = ("x86_64",),
    grids: tuple[str, ...] = (),
) -> Submission:
    """A submission whose base and head are built for every arch, with its jobs queued (as the service makes them).

    The kernels are stand-in files: protocol and service tests never boot them.
    """
    tree = Tree.objects.create(url=str(tmp / "tree"))
    sub = Submission.objects.create(
        owner=owner,
        tree=tree,
        head_ref="feature",
        base_ref="master",
        head_sha="b" * 40,
        base_sha="a" * 40,
        benchmarks=list(benchmarks),
        grids=list(grids or (grid,)),
        arches=list(arches),
        status=Submission.Status.TESTING,
    )
    links = [
        SubmissionBuild.objects.create(submission=sub, build=built(tree, sha, tmp, arch), side=side)
        for arch in arches
        for side, sha in (("base", "a" * 40), ("head", "b" * 40))
    ]
    schedule_jobs(sub, links)
    return sub
