"""Every bounded text column the analysis and the tracking write holds the longest text kperf composes for it.

A page-allocator metric's four notes once passed MetricComparison.note's 300 characters and failed
the whole verdict (issue 40). Here every CharField of every model the analysis of a submission or
of a tracked branch writes is listed with why it fits: its choices, the column it is copied from,
or the function that composes it, driven by hypothesis to its worst case. A new CharField on one
of these models fails the first test until it is listed here; free text whose length kperf does
not bound is a TextField.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.db import models
from hypothesis import given, settings
from hypothesis import strategies as st

from kperf.core import triage
from kperf.core.lifecycle import states
from kperf.core.models import (
    Alert,
    BranchCommit,
    ChangePoint,
    CommitSummary,
    Comparison,
    Job,
    MachineClass,
    MetricComparison,
    MetricDef,
    NoisePool,
    PatchSeries,
    ReplyToken,
    RunSummary,
    Sample,
    SeriesCatchUp,
    SeriesPool,
    SeriesState,
    StatusChange,
    Submission,
    TrackedBranch,
    Triage,
    TriageEvent,
)
from kperf.core.submissions import verdicts


@dataclass(frozen=True)
class Choices:
    """Written only from the field's choices."""


@dataclass(frozen=True)
class CopiedFrom:
    """Written from another column, never longer than it."""

    model: type[models.Model]
    field: str


@dataclass(frozen=True)
class Composed:
    """Composed by kperf: `check` (a hypothesis test below) drives the composition to its worst case."""

    check: Callable[[], None]


@dataclass(frozen=True)
class NotWritten:
    """Set when the row is made, by what `by` says; the analysis never writes it."""

    by: str


def width(model: type[models.Model], name: str) -> int:
    field = model._meta.get_field(name)
    assert isinstance(field, models.CharField) and field.max_length is not None
    return int(field.max_length)


# Worst cases: every copied part at its column's width, numbers at their longest rendering.
REFS = st.text(min_size=0, max_size=255)
METRICS = st.text(min_size=1, max_size=128)
PCTS = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.just(-1.7976931348623157e308))
PKS = st.integers(min_value=1, max_value=2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(PKS, REFS, REFS, st.lists(st.tuples(METRICS, st.one_of(st.none(), PCTS)), min_size=1, max_size=6))
def check_submission_triage_title(pk: int, head: str, base: str, worst: list[tuple[str, float | None]]) -> None:
    sub = Submission(pk=pk, head_ref=head, base_ref=base)
    regressions = [MetricComparison(metric=m, change_pct=c) for m, c in worst]
    assert len(triage.submission_title(sub, regressions)) <= width(Triage, "title")


def _change_point(branch: str, metric: str, pct: float, mclass: str, clock: str) -> ChangePoint:
    cp = ChangePoint(metric=metric, change_pct=pct, clock=clock, machine_class_id=1, benchmark="b" * 64)
    cp.branch = TrackedBranch(branch=branch)
    cp.commit = BranchCommit(sha="f" * 40, subject="s" * 300)
    cp.machine_class = MachineClass(pk=2**63 - 1, name=mclass)
    return cp


@settings(max_examples=200, deadline=None)
@given(REFS, METRICS, PCTS, st.text(max_size=64), st.sampled_from(["instructions", "wall", "x" * 16]))
def check_change_point_texts(branch: str, metric: str, pct: float, mclass: str, clock: str) -> None:
    cp = _change_point(branch, metric, pct, mclass, clock)
    assert len(triage.change_point_title(cp)) <= width(Triage, "title")
    assert len(triage.series_key(cp)) <= width(Triage, "series")


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=2000))
def check_alert_subjects(subject: str) -> None:
    # Every subject (a submission's refs and verdict line, a branch's name and metric) goes
    # through _queue; the key is "submission:<pk>", "change:<pk>" or "confirm:<pk>:<16 hex>".
    assert len(subject[: width(Alert, "subject")]) <= width(Alert, "subject")
    assert len(f"confirm:{2**63 - 1}:{'f' * 16}") <= width(Alert, "key")


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=1000))
def check_status_change_actor(actor: str) -> None:
    # states.record cuts the actor to the column; kind is a model's class name.
    assert len(actor[:200]) <= width(StatusChange, "actor")
    assert all(len(m.__name__) <= width(StatusChange, "kind") for m in states.TRANSITIONS)


def check_change_point_direction() -> None:
    assert all(len(word) <= width(ChangePoint, "direction") for word in ("regression", "improvement"))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=2000))
def check_error_rows(name: str) -> None:
    # A metric kperf failed on is stored whatever its name and unit: cut to their columns.
    sides: verdicts.Sides = {"base": [[1.0]], "head": [[1.0]]}
    mdef = MetricDef(name=name, unit=name, higher_is_better=True)
    row = verdicts.error_row(Comparison(), name, sides, mdef, None, verdicts.failure_note(ValueError(name)))
    assert len(row.metric) <= width(MetricComparison, "metric") and len(row.unit) <= width(MetricComparison, "unit")
    assert len(verdicts.failure_note(ValueError(name))) < 1000  # a note, not a log


COLUMNS: dict[tuple[type[models.Model], str], Choices | CopiedFrom | Composed | NotWritten] = {
    # A submission's analysis (kperf.core.submissions.analysis and verdicts).
    (Comparison, "benchmark"): CopiedFrom(Job, "benchmark"),
    (Comparison, "grid"): CopiedFrom(Job, "grid"),
    (Comparison, "clock"): CopiedFrom(Job, "clock"),
    (MetricComparison, "metric"): CopiedFrom(Sample, "metric"),
    (MetricComparison, "unit"): CopiedFrom(MetricDef, "unit"),
    (MetricComparison, "verdict"): Choices(),
    (Submission, "status"): Choices(),
    (Submission, "kind"): NotWritten("the submission form"),
    (Submission, "head_ref"): NotWritten("the submission form"),
    (Submission, "head_sha"): NotWritten("the pipeline's resolve step"),
    (Submission, "base_ref"): NotWritten("the submission form"),
    (Submission, "base_sha"): NotWritten("the pipeline's resolve step"),
    (Submission, "boot_params"): NotWritten("the submission form"),
    (Submission, "thp"): NotWritten("the submission form"),
    (Submission, "profile"): NotWritten("the submission form"),
    (StatusChange, "kind"): Composed(check_status_change_actor),
    # Every owner's status column is 16 wide, as the submission's is.
    (StatusChange, "source"): CopiedFrom(Submission, "status"),
    (StatusChange, "target"): CopiedFrom(Submission, "status"),
    (StatusChange, "actor"): Composed(check_status_change_actor),
    (Alert, "kind"): Choices(),
    (Alert, "key"): Composed(check_alert_subjects),
    (Alert, "subject"): Composed(check_alert_subjects),
    (Alert, "in_reply_to"): CopiedFrom(PatchSeries, "message_id"),
    (Alert, "status"): Choices(),
    (ReplyToken, "token"): NotWritten("replies.issue: secrets.token_hex(TOKEN_BYTES), checked in test_mail_replies"),
    (Triage, "kind"): Choices(),
    (Triage, "series"): Composed(check_change_point_texts),
    (Triage, "title"): Composed(check_submission_triage_title),
    (Triage, "state"): Choices(),
    (Triage, "fixed_by"): NotWritten("a triage command, checked as a sha there"),
    (TriageEvent, "from_state"): CopiedFrom(Triage, "state"),
    (TriageEvent, "to_state"): CopiedFrom(Triage, "state"),
    (TriageEvent, "fixed_by"): CopiedFrom(Triage, "fixed_by"),
    (TriageEvent, "via"): Choices(),
    # A tracked branch's analysis (kperf.core.tracking, kperf.core.results summaries and pools).
    (ChangePoint, "benchmark"): CopiedFrom(Job, "benchmark"),
    (ChangePoint, "metric"): CopiedFrom(Sample, "metric"),
    (ChangePoint, "clock"): CopiedFrom(Job, "clock"),
    (ChangePoint, "direction"): Composed(check_change_point_direction),
    (BranchCommit, "sha"): NotWritten("git: 40 hex digits"),
    (BranchCommit, "subject"): NotWritten("bisection.add_commits, cut to 300"),
    (BranchCommit, "status"): Choices(),
    (RunSummary, "clock"): CopiedFrom(Job, "clock"),
    (RunSummary, "benchmark"): CopiedFrom(Job, "benchmark"),
    (RunSummary, "grid"): CopiedFrom(Job, "grid"),
    (RunSummary, "sha"): CopiedFrom(BranchCommit, "sha"),
    (RunSummary, "metric"): CopiedFrom(Sample, "metric"),
    (NoisePool, "clock"): CopiedFrom(Job, "clock"),
    (NoisePool, "benchmark"): CopiedFrom(Job, "benchmark"),
    (NoisePool, "grid"): CopiedFrom(Job, "grid"),
    (NoisePool, "metric"): CopiedFrom(Sample, "metric"),
    (CommitSummary, "benchmark"): CopiedFrom(Job, "benchmark"),
    (CommitSummary, "clock"): CopiedFrom(Job, "clock"),
    (CommitSummary, "metric"): CopiedFrom(Sample, "metric"),
    (SeriesState, "benchmark"): CopiedFrom(Job, "benchmark"),
    (SeriesState, "clock"): CopiedFrom(Job, "clock"),
    (SeriesState, "metric"): CopiedFrom(Sample, "metric"),
    (SeriesPool, "benchmark"): CopiedFrom(Job, "benchmark"),
    (SeriesPool, "clock"): CopiedFrom(Job, "clock"),
    (SeriesPool, "metric"): CopiedFrom(Sample, "metric"),
    (SeriesCatchUp, "benchmark"): CopiedFrom(Job, "benchmark"),
    (SeriesCatchUp, "clock"): CopiedFrom(Job, "clock"),
}

# The models the analyses write: each of their bounded columns must be listed above.
WRITTEN = sorted({model for model, _ in COLUMNS}, key=lambda m: m.__name__)


def test_every_bounded_text_column_the_analyses_write_is_listed_with_why_it_fits() -> None:
    bounded = {
        (model, f.name)
        for model in WRITTEN
        for f in model._meta.get_fields()
        if isinstance(f, models.CharField) and f.max_length is not None
    }
    assert sorted((m.__name__, f) for m, f in bounded - set(COLUMNS)) == []
    assert sorted((m.__name__, f) for m, f in set(COLUMNS) - bounded) == []


def test_what_a_comparison_and_its_metrics_say_in_words_is_unbounded_text() -> None:
    # Composed from a lab's own noise-record source and any number of notes: no width fits them.
    assert isinstance(Comparison._meta.get_field("method"), models.TextField)
    notes = MetricComparison._meta.get_field("notes")
    assert isinstance(getattr(notes, "base_field", None), models.TextField)


@pytest.mark.parametrize(
    ("model", "name"),
    [key for key, why in COLUMNS.items() if isinstance(why, Choices)],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_a_column_written_from_its_choices_holds_every_choice(model: type[models.Model], name: str) -> None:
    field = model._meta.get_field(name)
    assert isinstance(field, models.CharField) and field.choices, f"{model.__name__}.{name} has no choices"
    assert all(len(str(value)) <= width(model, name) for value, _ in field.choices)


@pytest.mark.parametrize(
    ("model", "name"),
    [key for key, why in COLUMNS.items() if isinstance(why, CopiedFrom)],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_a_column_copied_from_another_is_at_least_as_wide(model: type[models.Model], name: str) -> None:
    source = COLUMNS[(model, name)]
    assert isinstance(source, CopiedFrom)
    assert width(source.model, source.field) <= width(model, name)


@pytest.mark.parametrize(
    "check",
    sorted({why.check for why in COLUMNS.values() if isinstance(why, Composed)}, key=lambda c: str(c)),
    ids=lambda c: getattr(c, "__name__", "check"),
)
def test_a_composed_column_holds_its_longest_composition(check: Callable[[], None]) -> None:
    check()


def test_a_metric_kperf_failed_on_is_stored_whatever_its_name_unit_and_failure() -> None:
    check_error_rows()
