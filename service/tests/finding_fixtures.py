"""Shared test scenarios, moved out of test_finding_first.py so no test module imports another."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core.models import MachineClass, MetricComparison, Submission
from kperf_runner import benchmarks as registry

from tests.lab_fixtures import finish_all, submission_ready_for_testing

REGRESSED = "spawn-vmas-1600"


def body(job: dict[str, Any], side: str) -> dict[str, Any]:
    """Every metric of the job's benchmark the same on both sides but REGRESSED, half as fast in the head."""
    bench = registry.get_benchmark(job["benchmark"])
    metrics = {m.name: m for m in bench.metrics(job["params"])}

    def level(metric: str) -> float:
        return 500.0 if side == "head" and metric == REGRESSED else 1000.0

    return {
        "attempt": job["attempt"],
        "boots": [
            {
                "boot": b,
                "environment": {"cpu_model": "QEMU Virtual CPU", "cpus": 1, "clock": job["clock"]},
                "raw_output": "COUNT|1000|1|lps\n",
                "samples": [{"metric": m, "iteration": i, "value": level(m) + i} for m in metrics for i in range(3)],
            }
            for b in range(job["boots"])
        ],
        "metrics": {m.name: {"unit": m.unit, "higher_is_better": m.higher_is_better} for m in metrics.values()},
        "console_log": "KPERF-DONE\n",
    }


@pytest.fixture
def finished(alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path) -> Submission:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path, benchmarks=("spawn", "pagealloc"), grid="full")
    finish_all(sub, runner_api[1], body)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE, sub.error
    # Three looks of the page allocator that each left all its metrics
    # undecided: notes that named some seventy metrics at the top of the page.
    unflagged = list(
        MetricComparison.objects.filter(comparison__submission=sub, comparison__benchmark="pagealloc").values_list(
            "metric", flat=True
        )
    )
    assert len(unflagged) > 100
    sub.reruns = [
        {
            "look": look,
            "benchmark": "pagealloc",
            "machine_class": qemu_class.name,
            "more_boots": 2,
            "inconclusive": unflagged,
        }
        for look in (1, 2, 3)
    ]
    sub.save(update_fields=["reruns"])
    return sub
