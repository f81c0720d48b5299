"""Machine tuning recorded per boot: a comparison whose boots ran with different
settings says so on the page and in the API; hardware counters shown beside the verdicts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kperf.core.lab import tuning
from kperf.core.lifecycle import owners
from kperf.core.models import BootRecord, Job, Submission
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION

from tests.conftest import Api
from tests.lab_fixtures import results_body, submission_ready_for_testing
from tests.lab_fixtures import submission_page as page

pytestmark = pytest.mark.django_db

# What init records on a QEMU guest (runners/kperf_runner/csrc/init_tuning.h, init_memory.h).
TUNED = {
    "cpufreq_governor": "absent",
    "boost": "absent",
    "thp": "always [madvise] never",
    "swap": "none (no zram in this kernel)",
    "swap_total_kb": 0,
    "numa_nodes": "absent",
    "aslr": "2",
    "isolated_cpus": "none",
    "clocksource": "tsc",
    "drop_caches": "before every command",
    "settle_ms": 100,
    "phase_span_us": 1000000,
    "perf_counters": "instructions,cycles user+kernel",
}

# (side, nth boot of that side) -> the boot's environment and counters
Boot = Callable[[str, int], tuple[dict[str, Any], dict[str, Any]]]


@pytest.fixture
def sub(alice: Any, qemu_class: Any, tmp_path: Path) -> Submission:
    return submission_ready_for_testing(alice, qemu_class, tmp_path)


def run_all(sub: Submission, api: Api, boot: Boot) -> None:
    seen = {"base": 0, "head": 0}
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        side = Job.objects.get(pk=job["id"]).side
        body = results_body(job, 1000.0 if side == "base" else 600.0)
        environment, counters = boot(side, seen[side])
        body["boots"][0]["environment"].update(environment)
        body["boots"][0]["counters"] = counters
        seen[side] += 1
        resp = api.post(f"/runner/jobs/{job['id']}/results", body)
        assert resp.status_code == 200, resp.content
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE


def test_boots_with_other_settings_are_named_with_their_values(
    sub: Submission, runner_api: Any, alice_api: Api, alice: Any
) -> None:
    def boot(side: str, nth: int) -> tuple[dict[str, Any], dict[str, Any]]:
        env = dict(TUNED)
        if side == "head":
            # Head's machines have turbo on; one of them also ran the powersave governor.
            env["boost"] = "on"
            if nth == 2:
                env["cpufreq_governor"] = "powersave"
        return env, {}

    _, api = runner_api
    run_all(sub, api, boot)
    [comp] = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    found = {t["fact"]: t for t in comp["tuning_differences"]}
    assert set(found) == {"cpufreq_governor", "boost"}
    assert found["boost"]["values"] == {"base": {"absent": 4}, "head": {"on": 4}}
    assert found["boost"]["message"] == "turbo/boost differs: base absent (4 boots); head on (4 boots)"
    # Within one side too: head's boots disagree among themselves.
    assert found["cpufreq_governor"]["values"] == {"base": {"absent": 4}, "head": {"absent": 3, "powersave": 1}}
    assert found["cpufreq_governor"]["message"] == (
        "cpufreq governor differs: base absent (4 boots); head absent (3 boots), powersave (1 boot)"
    )
    # The verdicts stay the benchmark's: the warning explains, it does not judge.
    assert {m["verdict"] for m in comp["metrics"]} == {"regression"}

    html = page(alice, sub)
    assert "ran with different machine settings" in html
    assert 'data-fact="boost"' in html and 'data-fact="cpufreq_governor"' in html
    assert "head absent (3 boots), powersave (1 boot)" in html


def test_boots_with_the_same_settings_warn_of_nothing(
    sub: Submission, runner_api: Any, alice_api: Api, alice: Any
) -> None:
    _, api = runner_api
    run_all(sub, api, lambda side, nth: (dict(TUNED), {}))
    [comp] = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    assert comp["tuning_differences"] == []
    assert "different machine settings" not in page(alice, sub)


def test_a_boot_that_recorded_no_tuning_is_a_difference_not_a_match(
    sub: Submission, runner_api: Any, alice_api: Api
) -> None:
    # The first base boot comes from a runner older than the tuning: nothing recorded.
    def boot(side: str, nth: int) -> tuple[dict[str, Any], dict[str, Any]]:
        return ({} if (side, nth) == ("base", 0) else dict(TUNED)), {}

    _, api = runner_api
    run_all(sub, api, boot)
    [comp] = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    drop = next(t for t in comp["tuning_differences"] if t["fact"] == "drop_caches")
    assert drop["values"]["base"] == {"before every command": 3, "not recorded": 1}
    # The old boot lacks every fact, so all twelve are named.
    assert len(comp["tuning_differences"]) == len(tuning.TUNING_FACTS) == 12


def test_hardware_counters_are_shown_per_boot_with_instructions_per_cycle(
    sub: Submission, runner_api: Any, alice_api: Api, alice: Any
) -> None:
    def boot(side: str, nth: int) -> tuple[dict[str, Any], dict[str, Any]]:
        # Head executes 50% more instructions in twice the cycles; one base boot could not count.
        if side == "base":
            return dict(TUNED), ({} if nth == 0 else {"perf": {"instructions": 2_000_000, "cycles": 1_000_000}})
        return dict(TUNED), {"perf": {"instructions": 3_000_000, "cycles": 2_000_000}}

    _, api = runner_api
    run_all(sub, api, boot)
    assert BootRecord.objects.filter(job__submission=sub, counters__perf__instructions=3_000_000).count() == 4
    [comp] = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    assert comp["perf_boots"] == {"base": 3, "head": 4}
    rows = {r["counter"]: r for r in comp["perf_counters"]}
    assert rows["instructions"] == {
        "counter": "instructions",
        "base_per_boot": 2_000_000.0,
        "head_per_boot": 3_000_000.0,
        "change_pct": 50.0,
    }
    assert rows["cycles"]["change_pct"] == 100.0
    assert rows["instructions_per_cycle"]["base_per_boot"] == 2.0
    assert rows["instructions_per_cycle"]["head_per_boot"] == 1.5
    # Not vmstat: no vmstat counters were sent, so that table stays empty.
    assert comp["counters"] == []

    html = page(alice, sub)
    assert "Hardware counters (perf_event_open per boot; not judged)" in html
    assert 'data-perf-counter="instructions_per_cycle"' in html and "50.0%" in html


@pytest.mark.parametrize(
    ("perf", "says"),
    [
        ({"instructions": -1}, "has perf counter 'instructions' = -1: hardware counts are whole numbers >= 0"),
        ({"cycles": 1.5}, "has perf counter 'cycles' = 1.5"),
    ],
)
def test_hardware_counts_must_be_whole_and_not_negative(
    sub: Submission, runner_api: Any, perf: dict[str, Any], says: str
) -> None:
    _, api = runner_api
    job = api.post("/runner/claim").json()["job"]
    body = results_body(job)
    body["boots"][0]["counters"] = {"perf": perf}
    resp = api.post(f"/runner/jobs/{job['id']}/results", body)
    assert resp.status_code == 422, resp.content
    assert says in resp.json()["detail"], resp.json()["detail"]
    assert not BootRecord.objects.exists()
