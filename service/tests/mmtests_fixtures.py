"""Shared test scenarios, moved out of test_mmtests_export.py so no test module imports another."""

from __future__ import annotations

from pathlib import Path

from kperf_runner.benchmarks import get_benchmark

from tests.conftest import Api
from tests.lab_fixtures import results_body

# A real spawn run (quick grid: 0.2 s, 3 iterations, 0 and 1000 extra VMAs) as the runner uploads it.
RAW = (Path(__file__).parents[2] / "runners" / "tests" / "data" / "spawn-native-x86_64.txt").read_text()


SPAWN = get_benchmark("spawn")


def upload_every_job(api: Api) -> dict[str, list[float]]:
    """Every queued job gets the captured run; kperf's samples of one boot, per metric."""
    samples: dict[str, list[float]] = {}
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        body = results_body(job)
        parsed = SPAWN.parse(RAW, job["params"])
        body["boots"][0]["raw_output"] = RAW
        body["boots"][0]["samples"] = [{"metric": s.metric, "iteration": s.iteration, "value": s.value} for s in parsed]
        assert api.post(f"/runner/jobs/{job['id']}/results", body).status_code == 200
        samples = {}
        for s in parsed:
            samples.setdefault(s.metric, []).append(s.value)
    return samples
