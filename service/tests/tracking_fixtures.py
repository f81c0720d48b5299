"""Shared test scenarios, moved out of test_tracking.py so no test module imports another."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from kperf.core.lifecycle import owners
from kperf.core.models import BranchCommit, Job, KernelBuild, TrackedBranch
from kperf.core.tracking import branches

from tests.conftest import Api, git
from tests.lab_fixtures import results_body


def commit_n(repo: Path, n: int, branch: str = "master") -> list[str]:
    git(repo, "checkout", "-q", branch)
    shas = []
    for _ in range(n):
        counter = repo / "COUNTER"
        value = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(f"{value}\n")
        git(repo, "add", "COUNTER")
        git(repo, "commit", "-q", "-m", f"step {value}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def track(api: Api, repo: Path, **extra: Any) -> dict[str, Any]:
    body = {"tree": str(repo), "branch": "master", "benchmarks": ["spawn"], "grid": "quick", **extra}
    resp = api.post("/branches", body)
    assert resp.status_code == 201, resp.content
    data: dict[str, Any] = resp.json()
    return data


def finish_builds(branch: TrackedBranch, tmp: Path, fail: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Stand in for the build worker (builds are tested for real elsewhere): give
    every queued build of the branch an artifact, or fail the named shas."""
    for build in KernelBuild.objects.filter(branch_commits__branch=branch, status=KernelBuild.Status.QUEUED):
        if build.sha in fail:
            build.status, build.error = KernelBuild.Status.FAILED, "mm/memory.c:42: error: expected ';'"
        else:
            kernel = tmp / f"bzImage-{build.sha[:8]}"
            kernel.write_bytes(b"kernel " + build.sha.encode())
            build.status = KernelBuild.Status.DONE
            build.artifacts = {
                "kernel": {
                    "path": str(kernel),
                    "sha256": hashlib.sha256(kernel.read_bytes()).hexdigest(),
                    "size": kernel.stat().st_size,
                }
            }
        build.save()
    for commit in branch.commits.filter(status=BranchCommit.Status.BUILDING):
        owners.advance(branches.COMMIT, commit.pk)


def run_jobs(runner: Api, level_of: dict[str, float], rng: np.random.Generator) -> int:
    """Claim every queued job over the runner protocol and upload samples
    around the level given for its kernel (1% noise per boot)."""
    done = 0
    while True:
        resp = runner.post("/runner/claim")
        assert resp.status_code == 200, resp.content
        job = resp.json()["job"]
        if job is None:
            return done
        level = level_of[job["kernel"]["sha"]] * (1 + rng.normal(0, 0.01))
        assert runner.post(f"/runner/jobs/{job['id']}/results", results_body(job, value=level)).status_code == 200
        commit = Job.objects.get(pk=job["id"]).branch_commit
        assert commit is not None
        owners.advance(branches.COMMIT, commit.pk)
        commit.refresh_from_db()
        if commit.status == BranchCommit.Status.ANALYSING:
            branches.analyse_branch_commit(commit.pk)
        done += 1


def land_a_step_in_a_gap(
    api: Api, runner: Api, repo: Path, tmp: Path, bisect: bool, broken: int | None = None
) -> tuple[TrackedBranch, list[str], int]:
    """16 measured commits at one level, then 20 land at once of which 8 are
    measured; from the sixth of them on, spawn is 12% slower. Measures
    everything kperf queues, except that `broken` does not build; returns
    the branch, the 20 shas and the rounds."""
    rng = np.random.default_rng(9)
    data = track(api, repo, boots=2, max_commits=50, bisect=bisect)
    branch = TrackedBranch.objects.get(pk=data["id"])
    branches.poll_branch(branch.pk)
    commit_n(repo, 15)
    branches.poll_branch(branch.pk)
    levels = {c.sha: 1000.0 for c in branch.commits.all()}
    finish_builds(branch, tmp)
    run_jobs(runner, levels, rng)
    # (A commit's change counts for at most 3 sigma until the series' level
    # follows it, so a step needs a few measured commits after it to alarm.)
    TrackedBranch.objects.filter(pk=branch.pk).update(max_commits=8)
    landed = commit_n(repo, 20)
    levels.update({sha: 1000.0 if i < 5 else 880.0 for i, sha in enumerate(landed)})
    first = [c.sha for c in branches.poll_branch(branch.pk)]
    assert len(first) == 8 and landed[5] not in first and landed[4] in first and landed[7] in first
    rounds = 0
    while branch.commits.filter(status=BranchCommit.Status.BUILDING).exists():
        finish_builds(branch, tmp, fail={landed[broken]} if broken is not None else set())
        if broken is not None and branch.commits.filter(sha=landed[broken], status="failed").exists():
            branches.reanalyse_branch(branch.pk)  # what the failure queues
        run_jobs(runner, levels, rng)
        rounds += 1
        assert rounds < 8, "bisection does not converge"
    return branch, landed, rounds
