"""Kernel counters: uploaded per boot, stored, shown beside the comparison, never judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kperf.core.lifecycle import owners
from kperf.core.models import BootRecord, Job, Sample, Submission
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION
from kperf.core.web import presenters

from tests.conftest import Api
from tests.lab_fixtures import results_body, submission_ready_for_testing

pytestmark = pytest.mark.django_db

# Counters that do not move between base and head: 30 rows of no change,
# more than the page shows.
FILLERS = {f"fill_{i:02d}": 5 for i in range(30)}


@pytest.fixture
def sub(alice: Any, qemu_class: Any, tmp_path: Path) -> Submission:
    return submission_ready_for_testing(alice, qemu_class, tmp_path)


def claim(api: Api) -> dict[str, Any] | None:
    job: dict[str, Any] | None = api.post("/runner/claim").json()["job"]
    return job


def vmstat_for(side: str, nth: int) -> dict[str, int] | None:
    """Base: pgfault 900, 1000, 1100 per boot after a first boot from a runner without
    counters; head: twice the faults, a level moving the other way, and a THP counter
    base never touched."""
    if side == "base":
        if nth == 0:
            return None
        return {"pgfault": 800 + 100 * nth, "nr_free_pages": -10, "pgmajfault": 4, **FILLERS}
    return {"pgfault": 2000, "nr_free_pages": 10, "thp_fault_alloc": 3, **FILLERS}


def run_all(sub: Submission, api: Api) -> None:
    seen = {"base": 0, "head": 0}
    while (job := claim(api)) is not None:
        side = Job.objects.get(pk=job["id"]).side
        body = results_body(job, 1000.0 if side == "base" else 600.0)
        vmstat = vmstat_for(side, seen[side])
        if vmstat is not None:
            body["boots"][0]["counters"] = {"vmstat": vmstat}
        seen[side] += 1
        resp = api.post(f"/runner/jobs/{job['id']}/results", body)
        assert resp.status_code == 200, resp.content
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE


def test_counters_are_stored_per_boot_and_shown_beside_unchanged_verdicts(
    sub: Submission, runner_api: Any, alice_api: Api, alice: Any
) -> None:
    _, api = runner_api
    run_all(sub, api)
    stored = [r.counters for r in BootRecord.objects.filter(job__submission=sub, job__side="base").order_by("job__seq")]
    assert stored[0] == {} and stored[1]["vmstat"]["pgfault"] == 900

    [comp] = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    # The verdicts are the benchmark's metrics alone: no counter is a metric, none is judged.
    assert {m["metric"]: m["verdict"] for m in comp["metrics"]} == {
        "spawn-vmas-0": "regression",
        "spawn-vmas-1000": "regression",
    }
    # The boot without counters is left out, not counted as a boot where nothing moved.
    assert comp["counter_boots"] == {"base": 3, "head": 4}
    rows = {r["counter"]: r for r in comp["counters"]}
    assert rows["pgfault"] == {
        "counter": "pgfault",
        "base_per_boot": 1000.0,
        "head_per_boot": 2000.0,
        "change_pct": 100.0,
    }
    assert rows["nr_free_pages"]["change_pct"] == pytest.approx(200.0)
    assert rows["pgmajfault"]["head_per_boot"] == 0 and rows["pgmajfault"]["change_pct"] == -100.0
    assert rows["thp_fault_alloc"]["base_per_boot"] == 0 and rows["thp_fault_alloc"]["change_pct"] is None
    # Largest relative change first; a counter new in head before any percentage.
    order = [r["counter"] for r in comp["counters"]]
    assert order[:4] == ["thp_fault_alloc", "nr_free_pages", "pgfault", "pgmajfault"]
    assert order[4:] == sorted(FILLERS) and len(order) == 34

    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/submissions/{sub.pk}").content.decode()
    assert "Kernel counters (/proc/vmstat deltas per boot; not judged)" in page
    assert 'data-counter="pgfault"' in page and "new in head" in page and "100.0%" in page
    # The top 20 on the page, and how many are not.
    assert page.count("data-counter=") == 20 and "14 more counters" in page


def test_counters_cost_one_query_per_submission(
    sub: Submission, runner_api: Any, django_assert_num_queries: Any
) -> None:
    _, api = runner_api
    run_all(sub, api)
    sub = Submission.objects.get(pk=sub.pk)
    # Comparisons, their metrics (prefetched), every boot's counters, and the
    # vCPUs its jobs booted per class: a fixed number, however many comparisons.
    with django_assert_num_queries(4):
        [comp] = presenters.comparisons(sub)
    assert comp["counters"]


def test_boots_without_counters_on_one_side_show_no_table(sub: Submission, runner_api: Any, alice_api: Api) -> None:
    _, api = runner_api
    while (job := claim(api)) is not None:
        body = results_body(job)
        if Job.objects.get(pk=job["id"]).side == "head":
            body["boots"][0]["counters"] = {"vmstat": {"pgfault": 10}}
        assert api.post(f"/runner/jobs/{job['id']}/results", body).status_code == 200
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    [comp] = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    assert comp["counters"] == [] and comp["counter_boots"] == {"base": 0, "head": 4}


@pytest.mark.parametrize(
    ("counters", "says"),
    [
        ([1, 2], "boots[0].counters must be an object"),
        ({"vmstat": [1]}, "boots[0].counters.vmstat must be an object of counter names to numbers"),
        ({"vmstat": {"pgfault": "12"}}, "boots[0].counters.vmstat.pgfault must be a finite number, not '12'"),
        ({"vmstat": {"pgfault": float("nan")}}, "must be a finite number, not nan"),
        ({"vmstat": {"pgfault": True}}, "must be a finite number, not True"),
        ({"vmstat": {"pgfault": 10**400}}, "boots[0].counters.vmstat.pgfault must be a finite number"),
        ({"vmstat": {"x" * 65: 1}}, "must be 1 to 64 characters long"),
        ({"vmstat": {"": 1}}, "counter '' must be 1 to 64 characters long"),
        # Refused for every field that is not machine text (kperf.core.web.api.parsing).
        ({"vmstat": {"pg\x00fault": 1}}, "counters.vmstat has a key 'pg\\x00fault' that contains a NUL character"),
        ({"vm\x00stat": {"pgfault": 1}}, "boots[0].counters has a key 'vm\\x00stat' that contains a NUL character"),
        ({"vmstat": {f"c{i}": 1 for i in range(4097)}}, "has more than 4096 counters"),
    ],
)
def test_bad_counters_get_422_and_store_nothing(sub: Submission, runner_api: Any, counters: Any, says: str) -> None:
    _, api = runner_api
    job = claim(api)
    assert job is not None
    body = results_body(job)
    body["boots"][0]["counters"] = counters
    # json.dumps writes NaN as the literal JavaScript does; the service must not store it.
    resp = api.post(f"/runner/jobs/{job['id']}/results", raw=json.dumps(body).encode())
    assert resp.status_code == 422, resp.content
    assert resp.json()["code"] == "invalid" and says in resp.json()["detail"], resp.json()["detail"]
    assert not BootRecord.objects.exists() and not Sample.objects.exists()
    assert Job.objects.get(pk=job["id"]).status == Job.Status.LEASED
    # The same upload without counters, as an older runner sends it, is stored.
    del body["boots"][0]["counters"]
    assert api.post(f"/runner/jobs/{job['id']}/results", body).status_code == 200
    assert BootRecord.objects.get().counters == {}
