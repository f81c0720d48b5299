"""A results upload costs a fixed number of queries, whatever its size (kperf.core.lab.leases).

A pagealloc `full` job has 195 metrics and 15 iterations: 2,925 samples per
boot. Uploads were once a round trip per metric definition and a model
instance per sample; these tests pin what replaced that (bulk metric
definitions, COPY for samples, no walk of a body that carries nothing to
clean) by what it stores and how many queries it makes, not by time
(bench/lab_speed.py measures the time).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from kperf.core.models import BootRecord, MachineClass, MetricDef, Sample, Submission
from kperf_runner import benchmarks as registry

from tests.lab_fixtures import submission_ready_for_testing


def _pagealloc_full(owner: Any, mclass: MachineClass, tmp: Path) -> Submission:
    # On the wall clock: the instruction clock sizes the full grid down to 3 rounds (docs/benchmarks.md).
    MachineClass.objects.filter(pk=mclass.pk).update(clock="wall")
    mclass.refresh_from_db()
    return submission_ready_for_testing(owner, mclass, tmp, benchmarks=("pagealloc",), grid="full")


def _body(job: dict[str, Any], raw: str = "pagealloc raw output\n") -> dict[str, Any]:
    metrics = registry.get_benchmark("pagealloc").metrics(job["params"])
    outer = job["params"]["outer"]
    return {
        "attempt": job["attempt"],
        "boots": [
            {
                "boot": 0,
                "environment": {"clock": job["clock"], "cpus": 1},
                "raw_output": raw,
                "samples": [
                    {"metric": m.name, "iteration": i, "value": 1000.0 + i} for m in metrics for i in range(outer)
                ],
            }
        ],
        "metrics": {m.name: {"unit": m.unit, "higher_is_better": m.higher_is_better} for m in metrics},
        "console_log": "KPERF-DONE\n",
    }


def test_a_large_upload_is_stored_whole_in_a_fixed_number_of_queries(
    alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    _pagealloc_full(alice, qemu_class, tmp_path)
    _, api = runner_api
    counts = []
    for _ in range(2):
        job = api.post("/runner/claim").json()["job"]
        body = _body(job)
        with CaptureQueriesContext(connection) as queries:
            resp = api.post(f"/runner/jobs/{job['id']}/results", body)
        assert resp.status_code == 200, resp.content
        counts.append(len(queries))
        record = BootRecord.objects.get(job_id=job["id"])
        stored = sorted(Sample.objects.filter(boot_record=record).values_list("metric", "iteration", "value"))
        sent = sorted((s["metric"], s["iteration"], s["value"]) for s in body["boots"][0]["samples"])
        assert len(sent) == 195 * 15
        assert stored == sent
    # The first upload defines 195 metrics, the second finds them: neither
    # pays per metric or per sample. (It was over 400 queries when each metric was its own round trips.)
    assert max(counts) < 25, counts
    assert MetricDef.objects.filter(benchmark="pagealloc").count() == 195


def test_a_metric_definition_that_changed_is_updated_by_the_next_upload(
    alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    _pagealloc_full(alice, qemu_class, tmp_path)
    _, api = runner_api
    job = api.post("/runner/claim").json()["job"]
    name = registry.get_benchmark("pagealloc").metrics(job["params"])[0].name
    # As a service older than a unit fix left it.
    MetricDef.objects.create(name=name, benchmark="pagealloc", unit="furlongs", higher_is_better=True)
    assert api.post(f"/runner/jobs/{job['id']}/results", _body(job)).status_code == 200
    fixed = MetricDef.objects.get(name=name)
    truth = registry.get_benchmark("pagealloc").metrics(job["params"])[0]
    assert (fixed.unit, fixed.higher_is_better) == (truth.unit, truth.higher_is_better)


def test_a_nul_in_a_large_upload_is_still_cleaned_or_refused(
    alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    """The fast path skips the walk only when no escape could hide a NUL or a surrogate."""
    _pagealloc_full(alice, qemu_class, tmp_path)
    _, api = runner_api
    job = api.post("/runner/claim").json()["job"]
    body = _body(job, raw="before\0after\n")
    body["boots"][0]["environment"]["kernel"] = "6.1\0"
    resp = api.post(f"/runner/jobs/{job['id']}/results", raw=json.dumps(body).encode())
    assert resp.status_code == 422, resp.content
    assert "boots[0].environment.kernel" in resp.json()["detail"]
    del body["boots"][0]["environment"]["kernel"]
    assert api.post(f"/runner/jobs/{job['id']}/results", body).status_code == 200
    assert BootRecord.objects.get(job_id=job["id"]).raw_output == "before\ufffdafter\n"
