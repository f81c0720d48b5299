"""Storing a comparison's metric verdicts so that nothing one metric brings can lose the others.

A metric kperf fails on (its look raised, its row could not be built or
stored) is stored with the verdict "error" and a note that says the failure
is kperf's, beside its samples; every other metric of the comparison keeps
its verdict, and the submission finishes (docs/statistics.md, "When kperf
fails on a metric"). A database that went away is not such a failure: it
reaches the caller, whose task is retried (kperf.core.lifecycle.owners).
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, transaction

from kperf import stats
from kperf.core.lifecycle.owners import TEMPORARY
from kperf.core.models import Comparison, MetricComparison, MetricDef
from kperf.stats import summary

log = logging.getLogger(__name__)

Sides = dict[str, list[list[float]]]  # {"base": boots, "head": boots}, each boot its iterations

# How much of an exception's own words a note keeps: enough to name the fault, not a traceback.
FAILURE_WORDS = 300


def failure_note(exc: BaseException) -> str:
    """The note of a metric kperf failed on: what failed, and that it is kperf's fault, not the kernel's."""
    what = f"{type(exc).__name__}: {exc}"
    if len(what) > FAILURE_WORDS:
        what = what[:FAILURE_WORDS] + "..."
    return (
        f"kperf failed to judge this metric ({what}); this is a kperf fault, not the kernel's: "
        "its samples are kept, the traceback is in the analysis worker's log, tell an admin"
    )


def metric_row(
    comp: Comparison, name: str, inp: stats.MetricInput, r: stats.MetricResult, sides: Sides, mdef: MetricDef
) -> MetricComparison:
    """The stored verdict of one judged metric."""
    return MetricComparison(
        comparison=comp,
        metric=name,
        unit=mdef.unit,
        higher_is_better=mdef.higher_is_better,
        verdict=str(r.verdict),
        base_mean=r.base_mean,
        head_mean=r.head_mean,
        change_pct=r.change_pct,
        ci_low_pct=r.ci_low_pct,
        ci_high_pct=r.ci_high_pct,
        p_value=r.p_value,
        q_value=r.q_value,
        min_effect_pct=r.min_effect_pct,
        base_boots=r.base_boots,
        head_boots=r.head_boots,
        base_samples=r.base_samples,
        head_samples=r.head_samples,
        values={"base": sides["base"], "head": sides["head"]},
        summary=[row.as_dict() for row in summary.summary_rows(inp, r.verdict)],
        notes=list(r.notes),
    )


def _fit(model_field: str, value: str) -> str:
    """`value` cut to its MetricComparison column's width: an error row must store whatever failed."""
    width = getattr(MetricComparison._meta.get_field(model_field), "max_length", None)
    return value if width is None else value[:width]


def error_row(
    comp: Comparison, name: str, sides: Sides, mdef: MetricDef | None, inp: stats.MetricInput | None, note: str
) -> MetricComparison:
    """The stored verdict of a metric kperf failed on: "error", its samples, and the note saying why."""
    return MetricComparison(
        comparison=comp,
        metric=_fit("metric", name),
        unit=_fit("unit", mdef.unit) if mdef is not None else "",
        higher_is_better=mdef.higher_is_better if mdef is not None else True,
        verdict=MetricComparison.Verdict.ERROR,
        # No threshold was applied; the one the metric would have had, where kperf got that far.
        min_effect_pct=inp.min_effect_pct if inp is not None else 0.0,
        base_boots=len(sides["base"]),
        head_boots=len(sides["head"]),
        base_samples=sum(len(b) for b in sides["base"]),
        head_samples=sum(len(b) for b in sides["head"]),
        values={"base": sides["base"], "head": sides["head"]},
        summary=[],
        notes=[note],
    )


def store_metrics(
    comp: Comparison,
    inputs: dict[str, stats.MetricInput],
    results: dict[str, stats.MetricResult],
    metrics: dict[str, Sides],
    defs: dict[str, MetricDef],
    failed: dict[str, str],
) -> None:
    """Store a verdict for every metric of `metrics`: its judged one, or "error" with the note of
    `failed` or of whatever failed building or storing its row.

    The rows go in with one statement, in a savepoint; if the database refuses it, one by one,
    each in its own savepoint, so the row it refused is found and replaced by its error row.
    """
    rows: list[tuple[str, MetricComparison]] = []
    for name in sorted(metrics):
        sides, mdef, inp = metrics[name], defs.get(name), inputs.get(name)
        note = failed.get(name)
        r = results.get(name)
        if note is None and (r is None or mdef is None or inp is None):
            note = failure_note(LookupError(f"no result, input or definition of {name!r} after the look"))
        if note is None:
            assert r is not None and mdef is not None and inp is not None
            try:
                rows.append((name, metric_row(comp, name, inp, r, sides, mdef)))
                continue
            except Exception as exc:  # one metric's fault must not lose the others' verdicts
                log.exception("comparison %s: building the row of %s failed", comp.pk, name)
                note = failure_note(exc)
        rows.append((name, error_row(comp, name, sides, mdef, inp, note)))
    try:
        with transaction.atomic():
            MetricComparison.objects.bulk_create([row for _, row in rows])
        return
    except TEMPORARY:
        raise
    except DatabaseError:
        log.exception("comparison %s: storing its metrics together failed; storing them one by one", comp.pk)
    for name, row in rows:
        try:
            with transaction.atomic():
                row.pk = None
                row.save(force_insert=True)
        except TEMPORARY:
            raise
        except DatabaseError as exc:
            log.exception("comparison %s: storing %s failed", comp.pk, name)
            # If even this row cannot be stored the database is what fails: that reaches the caller.
            note = failure_note(exc)
            error_row(comp, name, metrics[name], defs.get(name), inputs.get(name), note).save(force_insert=True)
