"""Every status a row can be in, and the only ways out of it.

Submissions, tracked-branch commits, kernel builds and jobs each have a
status. Their allowed changes are declared once, on the model
(`TRANSITIONS`, and `FINAL` derived from it), and every change goes
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

# Declared on each model (kperf.core.models.lifecycle), gathered here.
TRANSITIONS: dict[type[Model], dict[str, frozenset[str]]] = {
    model: model.TRANSITIONS for model in (Submission, BranchCommit, KernelBuild, Job)
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
