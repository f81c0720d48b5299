"""Every status a row can be in, and the only ways out of it.

Submissions, tracked-branch commits, kernel builds and jobs each have a
status. Their allowed changes are declared here, once, and every change goes
through `move` or `set_status` (or `move_where` for a conditional update),
which refuse a change the table does not list. The table is also the
recovery contract: every status that is not final has a way out, and
`kperf.core.sweeper` re-drives any row that stays in one too long.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model, QuerySet
from django.utils import timezone

from kperf.core.models import BranchCommit, Job, KernelBuild, Submission

_S, _C, _B, _J = Submission.Status, BranchCommit.Status, KernelBuild.Status, Job.Status

TRANSITIONS: dict[type[Model], dict[str, frozenset[str]]] = {
    Submission: {
        # Refs resolved and builds attached, or the tree/refs were bad.
        _S.QUEUED: frozenset({_S.BUILDING, _S.FAILED}),
        # Every build done: jobs queued. A build failed: the submission fails.
        _S.BUILDING: frozenset({_S.TESTING, _S.FAILED}),
        # Every job done, or one failed for good.
        _S.TESTING: frozenset({_S.ANALYSING, _S.FAILED}),
        # Verdicts stored; or an inconclusive look queued more boots (back to
        # testing); or the analysis itself failed.
        _S.ANALYSING: frozenset({_S.DONE, _S.TESTING, _S.FAILED}),
        _S.DONE: frozenset(),
        _S.FAILED: frozenset(),
    },
    BranchCommit: {
        _C.BUILDING: frozenset({_C.TESTING, _C.FAILED}),
        _C.TESTING: frozenset({_C.ANALYSING, _C.FAILED}),
        _C.ANALYSING: frozenset({_C.DONE, _C.FAILED}),
        _C.DONE: frozenset(),
        _C.FAILED: frozenset(),
    },
    KernelBuild: {
        _B.QUEUED: frozenset({_B.BUILDING}),
        # Built, or the kernel does not build (kind kernel), or the machine
        # failed (kind infra) after its last attempt; back to queued for
        # another attempt after an infrastructure fault or a lost worker.
        _B.BUILDING: frozenset({_B.DONE, _B.FAILED, _B.QUEUED}),
        _B.DONE: frozenset(),
        # Only an infrastructure failure leaves here, when a later submission
        # or tracked commit needs the build again.
        _B.FAILED: frozenset({_B.QUEUED}),
    },
    Job: {
        _J.QUEUED: frozenset({_J.LEASED, _J.CANCELLED}),
        # Results stored; failed for good; or back to the queue (infra fault
        # before the last attempt, or the lease ran out).
        _J.LEASED: frozenset({_J.DONE, _J.FAILED, _J.QUEUED}),
        _J.DONE: frozenset(),
        _J.FAILED: frozenset(),
        _J.CANCELLED: frozenset(),
    },
}


class IllegalTransition(RuntimeError):
    """A change of status the table does not allow: a bug, never bad input."""


def allowed(model: type[Model], source: str, target: str) -> bool:
    return target in TRANSITIONS[model][source]


def sources(model: type[Model], target: str) -> list[str]:
    """The statuses a row may move to `target` from."""
    return [s for s, targets in TRANSITIONS[model].items() if target in targets]


def set_status(obj: Any, target: str) -> None:
    """Change `obj.status` in memory (the caller saves), refusing what the table does not allow."""
    model = type(obj)
    if not allowed(model, obj.status, target):
        raise IllegalTransition(f"{model.__name__} {obj.pk}: {obj.status} -> {target} is not allowed")
    obj.status = target


def move(obj: Any, target: str, **fields: Any) -> None:
    """Change status (and `fields`) and save them; the caller holds the row lock."""
    set_status(obj, target)
    for name, value in fields.items():
        setattr(obj, name, value)
    update = ["status", *fields]
    if any(f.name == "updated" for f in type(obj)._meta.get_fields()):
        update.append("updated")
    obj.save(update_fields=update)


def move_where(queryset: QuerySet[Any], target: str, **fields: Any) -> int:
    """Conditional update: move the rows of `queryset` that may go to
    `target`; returns how many moved (0 when another worker got there first)."""
    model = queryset.model
    extra = {"updated": timezone.now()} if any(f.name == "updated" for f in model._meta.get_fields()) else {}
    return queryset.filter(status__in=sources(model, target)).update(status=target, **fields, **extra)


def is_final(model: type[Model], status: str) -> bool:
    return not TRANSITIONS[model][status]
