"""Nothing a run produces can make storing its verdict fail (issue 40): a metric's notes, however many, are
stored whole, and a metric kperf fails on is stored as such while the rest of the verdict stands.

Each test measures a real submission through the runner protocol and analyses it as the analysis task
does (owners.analyse, which fails the submission when the analysis raises), on PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from kperf.core import benchmarks
from kperf.core.lifecycle import owners
from kperf.core.models import Comparison, Job, MachineClass, MetricComparison, Sample, Submission
from kperf.core.results import outcome
from kperf.core.submissions import verdicts
from kperf.core.submissions.pipeline import SUBMISSION
from kperf.stats import abtest, sequential

from tests.conftest import Api
from tests.lab_fixtures import results_body, submission_ready_for_testing
from tests.lab_fixtures import submission_page as page

pytestmark = pytest.mark.django_db

# The four notes a page-allocator metric of the mm profile on 2 vCPUs collected on 2026-12-07
# (rounding, boots set aside, more boots cannot decide, budget spent), in kperf.stats' own words.
FOUR_NOTES = [
    "readings in whole units (one is 0.24% of the level): their rounding is most of the interval, "
    "and more boots do not narrow it",
    f"boots set aside as broken (over {abtest.BOOT_OUTLIER_SDS:g} learned sds from their side's median): "
    "1 base, 2 head",
    "more boots cannot decide it: the builds' and the readings' rounding part alone spans +-2.4%, "
    "against the 1% threshold",
    "budget of 16 boots per side spent",
]


def measure_and_analyse(sub: Submission, api: Api) -> Submission:
    """Every job measured (base 1000, head 500: both metrics regress), then the analysis task's path."""
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        level = 1000.0 if Job.objects.get(pk=job["id"]).side == "base" else 500.0
        assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job, level)).status_code == 200
    owners.advance(SUBMISSION, sub.pk)
    owners.analyse(SUBMISSION, sub.pk)
    sub.refresh_from_db()
    return sub


def stored(sub: Submission) -> dict[str, MetricComparison]:
    return {m.metric: m for m in MetricComparison.objects.filter(comparison__submission=sub)}


def test_a_metric_with_all_four_notes_past_300_characters_is_stored_and_the_submission_done(
    alice: Any, alice_api: Api, qemu_class: MachineClass, runner_api: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    assert len("; ".join(FOUR_NOTES)) >= 300  # the composition that did not fit varchar(300)
    real_look = sequential.sequential_look

    def look_with_four_notes(*args: Any, **kwargs: Any) -> sequential.Look:
        look = real_look(*args, **kwargs)
        look.results["spawn-vmas-1000"].notes = list(FOUR_NOTES)
        return look

    monkeypatch.setattr(sequential, "sequential_look", look_with_four_notes)
    sub = measure_and_analyse(submission_ready_for_testing(alice, qemu_class, tmp_path), runner_api[1])

    assert sub.status == Submission.Status.DONE, sub.error
    metric = stored(sub)["spawn-vmas-1000"]
    assert metric.notes == FOUR_NOTES and metric.verdict == MetricComparison.Verdict.REGRESSION
    # Every reader gets them: the API's one line and its list, and the page's note row.
    [m] = [m for c in alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"] for m in c["metrics"]
           if m["metric"] == "spawn-vmas-1000"]  # fmt: skip
    assert (m["notes"], m["note"]) == (FOUR_NOTES, "; ".join(FOUR_NOTES))
    assert "spawn-vmas-1000: " + "; ".join(FOUR_NOTES).replace("'", "&#x27;") in page(alice, sub)


def test_one_metric_kperf_fails_to_judge_says_so_and_the_others_keep_their_verdicts(
    alice: Any, alice_api: Api, qemu_class: MachineClass, runner_api: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    real_threshold = benchmarks.min_effect_pct

    def threshold(name: str, *args: Any, **kwargs: Any) -> float:
        if name == "spawn-vmas-0":
            raise ZeroDivisionError("an injected bug in spawn-vmas-0's threshold")
        return real_threshold(name, *args, **kwargs)

    monkeypatch.setattr(benchmarks, "min_effect_pct", threshold)
    sub = measure_and_analyse(submission_ready_for_testing(alice, qemu_class, tmp_path), runner_api[1])

    assert sub.status == Submission.Status.DONE, sub.error
    rows = stored(sub)
    failed, judged = rows["spawn-vmas-0"], rows["spawn-vmas-1000"]
    assert judged.verdict == MetricComparison.Verdict.REGRESSION
    assert failed.verdict == MetricComparison.Verdict.ERROR
    [note] = failed.notes
    assert "ZeroDivisionError: an injected bug in spawn-vmas-0's threshold" in note and "kperf fault" in note
    # Its samples are kept and shown beside the others.
    assert failed.values["head"] and failed.head_boots == judged.head_boots
    verdict = "1 regression; 1 metric not judged (a kperf fault)"
    assert outcome.verdict_line(sub) == verdict
    detail = alice_api.get(f"/submissions/{sub.pk}").json()
    assert detail["verdict"] == verdict
    html = page(alice, sub)
    assert 'class="verdict-error" data-metric="spawn-vmas-0"' in html and "an injected bug" in html


def test_a_row_the_database_refuses_is_stored_as_kperfs_error_and_the_others_as_judged(
    alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    real_row = verdicts.metric_row

    def refused_row(*args: Any, **kwargs: Any) -> MetricComparison:
        row = real_row(*args, **kwargs)
        if row.metric == "spawn-vmas-1000":
            row.unit = "u" * 200  # wider than its column: PostgreSQL refuses the insert
        return row

    monkeypatch.setattr(verdicts, "metric_row", refused_row)
    sub = measure_and_analyse(submission_ready_for_testing(alice, qemu_class, tmp_path), runner_api[1])

    assert sub.status == Submission.Status.DONE, sub.error
    rows = stored(sub)
    assert rows["spawn-vmas-0"].verdict == MetricComparison.Verdict.REGRESSION
    refused = rows["spawn-vmas-1000"]
    assert refused.verdict == MetricComparison.Verdict.ERROR and refused.unit == "forks/s"
    assert "DataError" in refused.notes[0] and "kperf fault" in refused.notes[0]


def test_when_kperf_can_judge_no_metric_at_all_the_submission_fails_saying_it_is_kperf_s_fault(
    alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """With nothing judged there is no verdict to show: "no regression" beside two errors would
    read as one. The analysis fails as any kperf fault does, and the samples stay."""

    def broken(*args: Any, **kwargs: Any) -> sequential.Look:
        raise RuntimeError("an injected bug in every look")

    monkeypatch.setattr(sequential, "sequential_look", broken)
    sub = measure_and_analyse(submission_ready_for_testing(alice, qemu_class, tmp_path), runner_api[1])

    assert sub.status == Submission.Status.FAILED
    assert sub.error.startswith("the analysis failed (NothingJudged: kperf failed to judge this metric (RuntimeError: "
                                "an injected bug in every look)"), sub.error  # fmt: skip
    assert "tell an admin" in sub.error
    assert not stored(sub)
    assert Sample.objects.filter(boot_record__job__submission=sub).exists()


@pytest.mark.django_db(transaction=True)
def test_the_migration_carries_each_stored_note_over_whole_as_the_lists_one_element(
    alice: Any, qemu_class: MachineClass, tmp_path: Path
) -> None:
    before = [("core", "0031_submission_interim_looks")]
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    comp = Comparison.objects.create(
        submission=sub, machine_class=qemu_class, benchmark="spawn", method="m", alpha=0.05
    )
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps.get_model("core", "MetricComparison")
        # A note holding "; " itself: splitting it again would cut it in two.
        kept = "significant +0.52% change, below the 1% practical threshold; budget of 8 boots per side spent"
        for metric, note in (("with-note", kept), ("without", "")):
            old.objects.create(comparison_id=comp.pk, metric=metric, unit="u", higher_is_better=True,
                               verdict="no-change", min_effect_pct=1.0, base_boots=2, head_boots=2,
                               base_samples=2, head_samples=2, note=note)  # fmt: skip
    finally:
        # Forward through 0032 to the newest migration: stopping at 0032 left the tests after this
        # one a schema older than the models (a 500 on every submission once 0033 existed).
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    notes = dict(MetricComparison.objects.filter(comparison=comp).values_list("metric", "notes"))
    assert notes == {"with-note": [kept], "without": []}
