"""Hardware counters per operation: boots made by the runner's own code from a
console with KPERF-PERF lines and a benchmark's real output, uploaded through
the runner protocol, shown per command on the page and in the API, never judged
(kperf.core.results.per_op)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kperf.core.lifecycle import owners
from kperf.core.models import BootRecord, Job, Submission
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION
from kperf_runner.backends import BootResult
from kperf_runner.benchmarks import get_benchmark
from kperf_runner.console import parse_console
from kperf_runner.reporting import boot_record

from tests.conftest import Api
from tests.lab_fixtures import results_body, submission_ready_for_testing
from tests.lab_fixtures import submission_page as page

pytestmark = pytest.mark.django_db

DATA = Path(__file__).parents[4] / "runners" / "tests" / "data"
# A native run of spawn's quick grid: command 0 (extra_vmas=0) forked 3570 times, command 1 (1000) 348.
SPAWN_OUTPUT = (DATA / "spawn-native-x86_64.txt").read_text()

# side -> what init printed after each command (the KPERF-PERF fields)
PerfLines = Callable[[str], list[str]]


@pytest.fixture
def sub(alice: Any, qemu_class: Any, tmp_path: Path) -> Submission:
    return submission_ready_for_testing(alice, qemu_class, tmp_path)


def console(perf: list[str]) -> str:
    """init's console for the two spawn commands, each followed by its KPERF-PERF line."""
    second = SPAWN_OUTPUT.index("spawn-info: extra_vmas=1000")
    outputs = [SPAWN_OUTPUT[:second], SPAWN_OUTPUT[second:]]
    lines = [
        f"KPERF-BEGIN {n}\n{output}KPERF-END {n} 0\nKPERF-PERF {n} {fields}\n"
        for n, (output, fields) in enumerate(zip(outputs, perf, strict=True))
    ]
    return "".join(lines) + "KPERF-DONE\n"


def run_all(sub: Submission, api: Api, perf: PerfLines, extra_operations: dict[str, int] | None = None) -> None:
    """Every job's one boot as the agent uploads it (reporting.boot_record), the verdict's samples synthetic."""
    bench = get_benchmark("spawn")
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        side = Job.objects.get(pk=job["id"]).side
        text = console(perf(side))
        result = BootResult(text, {}, parse_console(text).commands, 1.0)
        operations = bench.operations(result.raw_output, job["params"])
        record = boot_record(0, result, "qemu", job["clock"], bench, [], operations)
        body = results_body(job, 1000.0 if side == "base" else 600.0)
        body["boots"][0]["counters"] = record["counters"]
        body["boots"][0]["counters"]["operations"].update(extra_operations or {})
        resp = api.post(f"/runner/jobs/{job['id']}/results", body)
        assert resp.status_code == 200, resp.content
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE


def test_instructions_and_cycles_per_fork_are_shown_per_command(
    sub: Submission, runner_api: Any, alice_api: Api, alice: Any
) -> None:
    def perf(side: str) -> list[str]:
        # Head: 10% more instructions per fork with no extra VMAs, the same cycles.
        if side == "base":
            return ["instructions=35700000 cycles=71400000", "instructions=34800000 cycles=34800000"]
        return ["instructions=39270000 cycles=71400000", "instructions=34800000 cycles=34800000"]

    _, api = runner_api
    run_all(sub, api, perf)
    stored = BootRecord.objects.filter(job__submission=sub, job__side="head").first()
    assert stored is not None
    assert stored.counters["operations"] == {"0.fork": 3570, "1.fork": 348}
    assert stored.counters["perf_by_command"]["0.instructions"] == 39_270_000

    [comp] = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    assert comp["perf_per_op_boots"] == {"base": 4, "head": 4}
    rows = {(r["command"], r["counter"]): r for r in comp["perf_per_op"]}
    assert rows[(0, "instructions")] == {
        "command": 0,
        "label": "extra_vmas=0",
        "operation": "fork",
        "counter": "instructions",
        "unit": "instructions/fork",
        "base": pytest.approx(10_000.0),
        "head": pytest.approx(11_000.0),
        "change_pct": pytest.approx(10.0),
        "base_operations": 4 * 3570,
        "head_operations": 4 * 3570,
    }
    assert rows[(0, "cycles")]["unit"] == "cycles/fork" and rows[(0, "cycles")]["head"] == pytest.approx(20_000.0)
    assert rows[(0, "instructions_per_cycle")]["unit"] == "instructions/cycle"
    assert rows[(0, "instructions_per_cycle")]["base"] == pytest.approx(0.5)
    assert rows[(0, "instructions_per_cycle")]["head"] == pytest.approx(0.55)
    assert rows[(1, "instructions")]["label"] == "extra_vmas=1000"
    assert rows[(1, "instructions")]["base"] == pytest.approx(100_000.0)
    assert rows[(1, "instructions")]["change_pct"] == pytest.approx(0.0)
    # Secondary: no verdict anywhere near them, and the verdicts are the benchmark's alone.
    assert all("verdict" not in r for r in comp["perf_per_op"])
    assert comp["perf_per_op_mixed"] == []

    html = page(alice, sub)
    assert "Per operation (secondary: not judged, instruction clock only)" in html
    assert 'data-per-op="0-instructions"' in html
    assert "instructions/fork" in html and "11000.00" in html and "10.0%" in html


def test_software_counters_give_page_faults_per_fork(sub: Submission, runner_api: Any, alice_api: Api) -> None:
    # init's software mode (/kperf/perf = "software"), as on a guest without a PMU.
    def perf(side: str) -> list[str]:
        faults = 35700 if side == "base" else 71400
        return [f"task_clock_ns=357000000 page_faults={faults}", "task_clock_ns=34800000 page_faults=3480"]

    _, api = runner_api
    run_all(sub, api, perf)
    [comp] = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    rows = {(r["command"], r["counter"]): r for r in comp["perf_per_op"]}
    faults = rows[(0, "page_faults")]
    assert (faults["unit"], faults["base"], faults["head"]) == ("page faults/fork", 10.0, 20.0)
    assert faults["change_pct"] == pytest.approx(100.0)
    assert rows[(0, "task_clock_ns")]["unit"] == "ns/fork"
    assert rows[(0, "task_clock_ns")]["base"] == pytest.approx(100_000.0)
    # No instructions and cycles, no instructions per cycle.
    assert (0, "instructions_per_cycle") not in rows


def test_an_upload_without_operations_still_works_and_shows_no_per_op_values(
    sub: Submission, runner_api: Any, alice_api: Api, alice: Any
) -> None:
    _, api = runner_api
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        side = Job.objects.get(pk=job["id"]).side
        body = results_body(job, 1000.0 if side == "base" else 600.0)
        # What a runner older than operations sends.
        body["boots"][0]["counters"] = {"perf": {"instructions": 2_000_000, "cycles": 1_000_000}}
        assert api.post(f"/runner/jobs/{job['id']}/results", body).status_code == 200
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    [comp] = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    assert comp["perf_boots"] == {"base": 4, "head": 4}
    assert comp["perf_per_op"] == [] and comp["perf_per_op_boots"] == {"base": 0, "head": 0}
    html = page(alice, sub)
    assert "Hardware counters (perf_event_open per boot" in html and "Per operation (secondary" not in html


def test_a_command_with_several_kinds_of_operation_is_named_not_divided(
    sub: Submission, runner_api: Any, alice_api: Api, alice: Any
) -> None:
    # As aim9's one command, which runs four tests with four kinds of operation.
    _, api = runner_api
    run_all(sub, api, lambda side: ["instructions=1000 cycles=2000"] * 2, {"1.exec": 7})
    [comp] = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    assert {r["command"] for r in comp["perf_per_op"]} == {0}
    assert comp["perf_per_op_mixed"] == [{"command": 1, "label": "extra_vmas=1000", "operations": ["exec", "fork"]}]
    assert "extra_vmas=1000: several kinds of operation (exec, fork) in one" in page(alice, sub)


@pytest.mark.parametrize(
    ("counters", "says"),
    [
        ({"operations": {"fork": 3}}, "has operations name 'fork': per-command names are <command index>.<name>"),
        ({"perf_by_command": {"0.cycles": -5}}, "has perf_by_command '0.cycles' = -5: counts are whole numbers >= 0"),
        ({"operations": {"0.fork": 2.5}}, "has operations '0.fork' = 2.5"),
    ],
)
def test_per_command_counts_must_name_their_command_and_be_whole(
    sub: Submission, runner_api: Any, counters: dict[str, Any], says: str
) -> None:
    _, api = runner_api
    job = api.post("/runner/claim").json()["job"]
    body = results_body(job)
    body["boots"][0]["counters"] = counters
    resp = api.post(f"/runner/jobs/{job['id']}/results", body)
    assert resp.status_code == 422, resp.content
    assert says in resp.json()["detail"], resp.json()["detail"]
    assert not BootRecord.objects.exists()
