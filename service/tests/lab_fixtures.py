"""Builders for protocol tests: a submission whose kernels are built and whose jobs are queued."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.test import Client

from kperf.core.lifecycle import owners
from kperf.core.models import Job, Submission
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION
from kperf_testing.lab import built, submission_ready_for_testing

__all__ = ["built", "finish_all", "results_body", "submission_page", "submission_ready_for_testing"]


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


def submission_page(user: Any, sub: Submission) -> str:
    """The submission's page as `user`'s browser gets it (200 or the test fails)."""
    browser = Client()
    browser.force_login(user)
    resp = browser.get(f"/submissions/{sub.pk}")
    assert resp.status_code == 200
    return str(resp.content.decode())


def finish_all(sub: Submission, api: Any, body: Callable[[dict[str, Any], str], dict[str, Any]]) -> int:
    """Claim every queued job as the runner, report `body(job, side)` for it, then analyse `sub`.

    Returns how many jobs (one boot each) were reported.
    """
    jobs = 0
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        side = Job.objects.get(pk=job["id"]).side
        assert api.post(f"/runner/jobs/{job['id']}/results", body(job, side)).status_code == 200
        jobs += 1
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    return jobs
