"""Builders for protocol tests: a submission whose kernels are built and whose jobs are queued."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from kperf.core.models import KernelBuild, MachineClass, Submission, SubmissionBuild, Tree
from kperf.core.workflow import schedule_jobs


def built(tree: Tree, sha: str, tmp: Path) -> KernelBuild:
    kernel = tmp / f"bzImage-{sha[:6]}"
    kernel.write_bytes(b"not really a kernel " + sha.encode())
    return KernelBuild.objects.create(
        tree=tree,
        sha=sha,
        arch="x86_64",
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
    owner: Any, mclass: MachineClass, tmp: Path, benchmarks: tuple[str, ...] = ("spawn",), grid: str = "quick"
) -> Submission:
    tree = Tree.objects.create(url=str(tmp / "tree"))
    sub = Submission.objects.create(
        owner=owner,
        tree=tree,
        head_ref="feature",
        base_ref="master",
        head_sha="b" * 40,
        base_sha="a" * 40,
        benchmarks=list(benchmarks),
        grid=grid,
        arches=["x86_64"],
        status=Submission.Status.TESTING,
    )
    base, head = built(tree, "a" * 40, tmp), built(tree, "b" * 40, tmp)
    links = [
        SubmissionBuild.objects.create(submission=sub, build=base, side="base"),
        SubmissionBuild.objects.create(submission=sub, build=head, side="head"),
    ]
    schedule_jobs(sub, links)
    return sub


def results_body(job: dict[str, Any], value: float = 1000.0) -> dict[str, Any]:
    metrics = [f"spawn-vmas-{v}" for v in job["params"]["extra_vmas"]]
    return {
        "attempt": job["attempt"],
        "boots": [
            {
                "boot": 0,
                "environment": {
                    "cpu_model": "QEMU Virtual CPU",
                    "cpus": 1,
                    "kernel_cmdline": "console=ttyS0",
                    # The clock the job asked for, as a runner reports it.
                    "clock": job["clock"],
                },
                "raw_output": "COUNT|1000|1|lps\n",
                "samples": [
                    {"metric": m, "iteration": i, "value": value + i}
                    for m in metrics
                    for i in range(job["params"]["iterations"])
                ],
            }
        ],
        "metrics": {m: {"unit": "forks/s", "higher_is_better": True} for m in metrics},
        "console_log": "KPERF-DONE\n",
    }
