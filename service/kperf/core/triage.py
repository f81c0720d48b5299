"""Triage of regressions: the only place a triage is opened or changes state (docs/triage.md).

A regression is either a finished submission with regression verdicts or a
regression change point of a tracked branch; kperf opens one Triage for
each, in state `new`, in the transaction that finds it. People move it on
with `triage()` from the web page, the API, `kperf triage` or a reply to the
alert mail; every change is a TriageEvent (who, when, from, to, note, how).

Who may triage is decided with kperf.core.access, like everything else: a
submission's owner, a tracked branch's owner or watchers (its owner and the
addresses it mails, `notify`), and staff. Surfaces look the target up
through access.visible_* first, so what a user may not see is a 404 before
this module is asked.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from typing_extensions import TypedDict

from kperf.core import access
from kperf.core.models import ChangePoint, MetricComparison, Submission, Triage, TriageEvent

log = logging.getLogger(__name__)

State = Triage.State
Via = TriageEvent.Via

# A commit as people write it: an abbreviated or full sha.
SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")
NOTE_MAX = 4000
# `new` is kperf's alone: it is what a regression is when found, and no one
# returns a decided regression to undecided (confirmed is "look at it again").
SETTABLE = tuple(s.value for s in State if s != State.NEW)
# How people may write `won't fix` (and the others, in any case) on a command line or in mail.
_ALIASES = {"wontfix": State.WONT_FIX.value, "won't-fix": State.WONT_FIX.value, "wont-fix": State.WONT_FIX.value}
PEOPLE_VIA = (Via.WEB, Via.API, Via.CLI, Via.MAIL)


class TriageError(ValueError):
    """Bad input to a triage: what was wrong and how to say it instead. Nothing was changed."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class TriageForbidden(PermissionError):
    """The user may see the regression but not decide on it. Nothing was changed."""


def parse_state(word: str) -> str:
    """A state as a person typed it ("Expected", "won't fix", "wontfix") -> its value; TriageError if none."""
    norm = re.sub(r"[\s_]+", "-", word.strip().lower())
    norm = _ALIASES.get(norm, norm)
    if norm in SETTABLE:
        return norm
    if norm == State.NEW:
        raise TriageError(
            "'new' is what kperf sets when it finds a regression; choose: " + ", ".join(SETTABLE), "state"
        )
    raise TriageError(f"unknown triage state {word.strip()[:40]!r}: choose one of {', '.join(SETTABLE)}", "state")


def parse_commit(sha: str) -> str:
    sha = sha.strip().lower()
    if not SHA_RE.match(sha):
        raise TriageError(
            f"fixed_by {sha[:60]!r} is not a commit: give its sha in hex, 7 to 40 characters (git rev-parse --short)",
            "fixed_by",
        )
    return sha


def may_triage(user: Any, triage: Triage) -> bool:
    """Owners, watchers and staff decide on a regression (docs/triage.md)."""
    if access.is_staff(user):
        return True
    if not (getattr(user, "is_authenticated", False) and user.is_active):
        return False
    if triage.submission_id is not None:
        return access.visible_submissions(user).filter(pk=triage.submission_id).exists()
    branch = triage.branch
    if branch is None or not access.visible_branches(user).filter(pk=branch.pk).exists():
        return False
    # A watcher is an address the branch mails its regressions to.
    email = (user.email or "").strip().lower()
    return access.may_change_branch(user, branch) or bool(email and email in {a.strip().lower() for a in branch.notify})


def visible(user: Any) -> QuerySet[Triage]:
    """Every triage of a submission or tracked branch the user may read."""
    if access.is_staff(user):
        return Triage.objects.all()
    return Triage.objects.filter(submission__in=access.visible_submissions(user)) | Triage.objects.filter(
        branch__in=access.visible_branches(user)
    )


def _resolve(target: Triage | Submission | ChangePoint) -> Triage:
    if isinstance(target, Triage):
        return target
    row = Triage.objects.filter(
        **({"submission": target} if isinstance(target, Submission) else {"change_point": target})
    ).first()
    if row is None:
        what = f"submission {target.pk}" if isinstance(target, Submission) else f"change point {target.pk}"
        raise TriageError(
            f"{what} has no regression to triage (only finished submissions with regression verdicts "
            "and regression change points have one)",
            "target",
        )
    return row


def triage(
    target: Triage | Submission | ChangePoint,
    user: Any,
    state: str,
    note: str = "",
    fixed_by: str = "",
    via: str = Via.API,
) -> TriageEvent:
    """Set a regression's triage state and note as `user` did by `via` (web, api, cli or mail).

    `fixed` needs the sha of the commit that fixed it (7-40 hex digits); no
    other state takes one. Setting the state it already has records a new
    note or commit; when neither changes, nothing is written and the event
    that set it is returned (a retry is harmless). Raises TriageError
    for bad input and TriageForbidden for a user who may not decide;
    either way nothing is changed.
    """
    if via not in PEOPLE_VIA:
        raise TriageError(f"via must be one of {', '.join(PEOPLE_VIA)}, not {via!r}", "via")
    row = _resolve(target)
    if not may_triage(user, row):
        raise TriageForbidden(
            f"only the owner, the watchers of the branch or an admin may triage {row.title}; "
            "ask one of them, or an admin to add you to the branch's notify list"
        )
    value = parse_state(state)
    note = (note or "").strip()
    if len(note) > NOTE_MAX:
        raise TriageError(f"the note is {len(note)} characters: at most {NOTE_MAX}", "note")
    commit = (fixed_by or "").strip()
    if value == State.FIXED:
        if not commit:
            raise TriageError("'fixed' needs the commit that fixed it: give its sha (--commit, fixed_by)", "fixed_by")
        commit = parse_commit(commit)
    elif commit:
        raise TriageError(f"a fixing commit is given only with 'fixed', not with {value!r}", "fixed_by")
    with transaction.atomic():
        # Locked: two people deciding at once are two events in order, not one lost.
        locked = Triage.objects.select_for_update().get(pk=row.pk)
        if value == locked.state and note == locked.note and commit == locked.fixed_by:
            # A retry, or the same reply mailed twice: nothing changes and no event is written.
            last = locked.events.order_by("-created", "-id").first()
            if last is not None:
                return last
        event = TriageEvent.objects.create(
            triage=locked, by=user, from_state=locked.state, to_state=value, note=note, fixed_by=commit, via=via
        )
        locked.state, locked.note, locked.fixed_by = value, note, commit
        locked.save(update_fields=["state", "note", "fixed_by", "updated"])
    if isinstance(target, Triage):
        target.state, target.note, target.fixed_by = value, note, commit
    log.info("triage %s: %s -> %s by %s via %s", locked.pk, event.from_state, value, user, via)
    return event


def _opened(row: Triage) -> Triage:
    TriageEvent.objects.create(triage=row, to_state=row.state, via=Via.KPERF, note="found by kperf")
    return row


def open_for_submission(sub: Submission) -> Triage | None:
    """Open the triage of a finished submission that has regression verdicts (caller's transaction)."""
    regressions = list(
        MetricComparison.objects.filter(
            comparison__submission=sub, verdict=MetricComparison.Verdict.REGRESSION
        ).order_by("change_pct", "metric")
    )
    if not regressions:
        return None
    with transaction.atomic():
        row, created = Triage.objects.get_or_create(
            submission=sub, defaults={"kind": Triage.Kind.SUBMISSION, "title": submission_title(sub, regressions)}
        )
        return _opened(row) if created else row


def submission_title(sub: Submission, regressions: list[MetricComparison]) -> str:
    """A submission's triage title: its refs and worst regressions, cut to the column (refs run to 255 each)."""
    worst = ", ".join(
        f"{m.metric} {m.change_pct:+.2f}%" if m.change_pct is not None else m.metric for m in regressions[:3]
    )
    more = f" and {len(regressions) - 3} more" if len(regressions) > 3 else ""
    n = len(regressions)
    title = f"#{sub.pk} {sub.head_ref} vs {sub.base_ref}: {n} regression{'s' if n != 1 else ''} ({worst}{more})"
    return title[:300]


def series_key(cp: ChangePoint) -> str:
    return f"{cp.machine_class_id}:{cp.clock}:{cp.metric}"


def change_point_title(cp: ChangePoint) -> str:
    return (
        f"{cp.branch.branch}: {cp.metric} {cp.change_pct:+.2f}% at {cp.commit.sha[:12]} "
        f"on {cp.machine_class.name} ({cp.clock} clock)"
    )[:300]


def open_for_change_point(cp: ChangePoint) -> Triage | None:
    """Open the triage of a regression change point, once the series' stale change points are gone.

    A change point a re-analysis moved (bisection put it on another commit)
    takes over the triage its old row left: people decided on the change,
    not on where kperf first placed it.
    """
    if cp.direction != "regression":
        return None
    existing = Triage.objects.filter(change_point=cp).first()
    if existing is not None:
        title = change_point_title(cp)
        if existing.title != title:
            Triage.objects.filter(pk=existing.pk).update(title=title)
        return existing
    key = series_key(cp)
    # Its own transaction when the caller has none (a savepoint inside the analysis').
    with transaction.atomic():
        orphan = (
            Triage.objects.select_for_update()
            .filter(branch_id=cp.branch_id, series=key, change_point__isnull=True)
            .order_by("-updated")
            .first()
        )
        if orphan is not None:
            orphan.change_point = cp
            orphan.title = change_point_title(cp)
            orphan.save(update_fields=["change_point", "title", "updated"])
            TriageEvent.objects.create(
                triage=orphan,
                from_state=orphan.state,
                to_state=orphan.state,
                via=Via.KPERF,
                note=f"the change point moved to {cp.commit.sha[:12]} (re-analysis)",
            )
            return orphan
        row = Triage.objects.create(
            kind=Triage.Kind.CHANGE_POINT,
            branch_id=cp.branch_id,
            change_point=cp,
            series=key,
            title=change_point_title(cp),
        )
        return _opened(row)


def page_path(row: Triage) -> str:
    """Where the regression is shown: its submission's page, or its branch's at the change point."""
    if row.submission_id is not None:
        return f"/submissions/{row.submission_id}#triage"
    anchor = f"#triage-{row.pk}"
    return f"/branches/{row.branch_id}{anchor}"


class TriageEventOut(TypedDict):
    by: str | None
    at: datetime
    from_state: str
    to_state: str
    note: str
    fixed_by: str
    via: str


class TriageOut(TypedDict):
    id: int
    kind: str
    title: str
    state: str
    note: str
    fixed_by: str
    submission: int | None
    branch: int | None
    # None once a re-analysis no longer finds the change (the triage and its history stay).
    change_point: int | None
    created: datetime
    updated: datetime
    path: str
    may_triage: bool
    states: list[str]
    history: list[TriageEventOut]


def event_dict(e: TriageEvent) -> TriageEventOut:
    return {
        "by": e.by.get_username() if e.by is not None else None,
        "at": e.created,
        "from_state": e.from_state,
        "to_state": e.to_state,
        "note": e.note,
        "fixed_by": e.fixed_by,
        "via": e.via,
    }


def triage_dict(row: Triage, user: Any) -> TriageOut:
    """A triage with its history, oldest first, as the API, the CLI and the pages read it."""
    events = row.events.all()  # oldest first (TriageEvent.Meta); lists prefetch them with their users
    return {
        "id": row.pk,
        "kind": row.kind,
        "title": row.title,
        "state": row.state,
        "note": row.note,
        "fixed_by": row.fixed_by,
        "submission": row.submission_id,
        "branch": row.branch_id,
        "change_point": row.change_point_id,
        "created": row.created,
        "updated": row.updated,
        "path": page_path(row),
        "may_triage": may_triage(user, row),
        "states": list(SETTABLE),
        "history": [event_dict(e) for e in events],
    }
