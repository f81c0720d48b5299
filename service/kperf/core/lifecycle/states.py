"""Every status a row can be in, and the only ways out of it.

Submissions, tracked-branch commits, kernel builds and jobs each have a
status. Their allowed changes are declared once, on the model
(`TRANSITIONS`, and `FINAL` derived from it), and every change goes
through `move` or `set_status` (or `move_where` for a conditional update),
which refuse a change the table does not list and write the change as a
StatusChange row: from, to, when, who or what (`acting_as`), and why.
The table is also the recovery contract: every status that is not final
has a way out, and `kperf.core.tasks.sweeper` re-drives any row that stays in
one too long.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Model, QuerySet
from django.db.models.signals import post_save
from django.utils import timezone

from kperf.core.models import BranchCommit, Job, KernelBuild, StatusChange, Submission

# Declared on each model (kperf.core.models.lifecycle), gathered here.
TRANSITIONS: dict[type[Model], dict[str, frozenset[str]]] = {
    model: model.TRANSITIONS for model in (Submission, BranchCommit, KernelBuild, Job)
}


# Who or what is changing statuses in this context (a task, a runner's
# request, a user's page): set at each entry point, read by every change.
_actor: ContextVar[str | Callable[[], str]] = ContextVar("kperf_actor", default="")


@contextmanager
def acting_as(actor: str | Callable[[], str]) -> Iterator[None]:
    """Name the actor of every status change made inside (a callable is asked only when a change is made)."""
    token = _actor.set(actor)
    try:
        yield
    finally:
        _actor.reset(token)


def actor_token(actor: str) -> Token[str | Callable[[], str]]:
    """Name the actor until `reset_actor(token)` (a Celery task from prerun to postrun)."""
    return _actor.set(actor)


def reset_actor(token: Token[str | Callable[[], str]]) -> None:
    _actor.reset(token)


def name_actor(actor: str) -> None:
    """Name the actor for the rest of the current `acting_as` block (an API token's owner, once authenticated)."""
    _actor.set(actor)


def current_actor() -> str:
    actor = _actor.get()
    name = actor() if callable(actor) else actor
    # Outside any entry point that names itself: the program and the host.
    return name or f"{Path(sys.argv[0]).name or 'python'} on {socket.gethostname()}"


def record(kind: type[Model], ids_sources: list[tuple[int, str]], target: str, why: str = "") -> None:
    """Write the history rows of changes made (or about to be saved) in the caller's transaction."""
    actor = current_actor()[:200]
    StatusChange.objects.bulk_create(
        StatusChange(kind=kind.__name__, object_id=pk, source=source, target=target, actor=actor, why=why)
        for pk, source in ids_sources
    )


def _why(fields: dict[str, Any]) -> str:
    # A change that carries an error message says why in it.
    return str(fields.get("error") or fields.get("failure_message") or "")


class IllegalTransition(RuntimeError):
    """A change of status the table does not allow: a bug, never bad input."""


def allowed(model: type[Model], source: str, target: str) -> bool:
    return target in TRANSITIONS[model][source]


def sources(model: type[Model], target: str) -> list[str]:
    """The statuses a row may move to `target` from."""
    return [s for s, targets in TRANSITIONS[model].items() if target in targets]


def set_status(obj: Any, target: str, why: str = "") -> None:
    """Change `obj.status` in memory (the caller saves it in the same
    transaction), refusing what the table does not allow; the change's
    history row is written now."""
    model = type(obj)
    if not allowed(model, obj.status, target):
        raise IllegalTransition(f"{model.__name__} {obj.pk}: {obj.status} -> {target} is not allowed")
    record(model, [(obj.pk, obj.status)], target, why)
    obj.status = target


def _created(sender: type[Model], instance: Any, created: bool, raw: bool = False, **_: Any) -> None:
    """The history row of a row created in its first status: a submission, a
    tracked commit, a build, a job — an imported result created already done too."""
    if created and not raw:
        record(sender, [(instance.pk, "")], instance.status)


for _model in TRANSITIONS:
    post_save.connect(_created, sender=_model, dispatch_uid=f"kperf.states.created.{_model.__name__}")


def move(obj: Any, target: str, why: str = "", **fields: Any) -> None:
    """Change status (and `fields`) and save them; the caller holds the row lock."""
    set_status(obj, target, why or _why(fields))
    for name, value in fields.items():
        setattr(obj, name, value)
    update = ["status", *fields]
    if any(f.name == "updated" for f in type(obj)._meta.get_fields()):
        update.append("updated")
    obj.save(update_fields=update)


def move_where(queryset: QuerySet[Any], target: str, why: str = "", **fields: Any) -> int:
    """Conditional update: move the rows of `queryset` that may go to
    `target`; returns how many moved (0 when another worker got there first)."""
    model = queryset.model
    extra = {"updated": timezone.now()} if any(f.name == "updated" for f in model._meta.get_fields()) else {}
    with transaction.atomic():
        # Locked first, so the rows recorded are exactly the rows moved.
        movable = queryset.filter(status__in=sources(model, target)).select_for_update()
        ids_sources = list(movable.values_list("pk", "status"))
        if not ids_sources:
            return 0
        moved = model.objects.filter(pk__in=[pk for pk, _ in ids_sources]).update(status=target, **fields, **extra)
        record(model, ids_sources, target, why or _why(fields))
    return int(moved)
