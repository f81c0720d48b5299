"""The API for triage: a regression's state, note and history, and the list of regressions (docs/triage.md)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema

from kperf.core import access, triage
from kperf.core.models import ChangePoint, Triage
from kperf.core.triage import TriageOut
from kperf.core.web.api.auth import USER_AUTH, user_of
from kperf.core.web.api.errors import ApiError, responses

router = Router()


class TriageIn(Schema):
    # confirmed, expected, invalid, fixed or wont-fix ("won't fix" is read too).
    state: str
    note: str = ""
    # The sha of the commit that fixed it: required with `fixed`, refused with any other state.
    fixed_by: str = ""


def _via(request: HttpRequest) -> str:
    # `kperf triage` says who it is; the change is recorded as made from the command line.
    return triage.Via.CLI if request.headers.get("User-Agent", "").startswith("kperf-cli") else triage.Via.API


def _submission_triage(request: HttpRequest, sub_id: int) -> Triage:
    user = user_of(request)
    sub = access.visible_submissions(user).filter(pk=sub_id).first()
    if sub is None:
        raise ApiError(
            404, "not-found", f"no submission {sub_id} that you may read: GET /api/v1/submissions lists yours"
        )
    row = Triage.objects.filter(submission=sub).first()
    if row is None:
        raise ApiError(
            404,
            "no-regression",
            f"submission {sub_id} has nothing to triage: only a finished submission with regression verdicts has "
            f"(it is {sub.status})",
        )
    return row


def _change_point_triage(request: HttpRequest, cp_id: int) -> Triage:
    user = user_of(request)
    cp = ChangePoint.objects.filter(pk=cp_id, branch__in=access.visible_branches(user)).first()
    if cp is None:
        raise ApiError(
            404,
            "not-found",
            f"no change point {cp_id} that you may read: GET /api/v1/branches/ID lists a branch's change points",
        )
    row = Triage.objects.filter(change_point=cp).first()
    if row is None:
        raise ApiError(404, "no-regression", f"change point {cp_id} is an {cp.direction}: only regressions are triaged")
    return row


def _change(request: HttpRequest, row: Triage, payload: TriageIn) -> TriageOut:
    user = user_of(request)
    try:
        triage.triage(row, user, payload.state, payload.note, payload.fixed_by, via=_via(request))
    except triage.TriageForbidden as e:
        raise ApiError(403, "forbidden", str(e)) from None
    except triage.TriageError as e:
        raise ApiError(400, "invalid-triage", str(e), field=e.field) from None
    row.refresh_from_db()
    return triage.triage_dict(row, user)


READ = responses(200, TriageOut, 401, 404, 422)
CHANGE = responses(200, TriageOut, 400, 401, 403, 404, 413, 415, 422)


@router.get("/submissions/{sub_id}/triage", auth=USER_AUTH, tags=["triage"], response=READ)
def get_submission_triage(request: HttpRequest, sub_id: int) -> TriageOut:
    """A finished submission's regressions as triaged: state, note, fixing commit and history, oldest first."""
    return triage.triage_dict(_submission_triage(request, sub_id), user_of(request))


@router.post("/submissions/{sub_id}/triage", auth=USER_AUTH, tags=["triage"], response=CHANGE)
def triage_submission(request: HttpRequest, sub_id: int, payload: TriageIn) -> TriageOut:
    """Set the triage state (the submission's owner or staff); `fixed` needs `fixed_by`."""
    return _change(request, _submission_triage(request, sub_id), payload)


@router.get("/change-points/{cp_id}/triage", auth=USER_AUTH, tags=["triage"], response=READ)
def get_change_point_triage(request: HttpRequest, cp_id: int) -> TriageOut:
    """A tracked branch's regression change point as triaged, with its history."""
    return triage.triage_dict(_change_point_triage(request, cp_id), user_of(request))


@router.post("/change-points/{cp_id}/triage", auth=USER_AUTH, tags=["triage"], response=CHANGE)
def triage_change_point(request: HttpRequest, cp_id: int, payload: TriageIn) -> TriageOut:
    """Set the triage state (the branch's owner, its watchers, or staff); `fixed` needs `fixed_by`."""
    return _change(request, _change_point_triage(request, cp_id), payload)


@router.get("/regressions", auth=USER_AUTH, tags=["triage"], response=responses(200, list[TriageOut], 400, 401, 422))
def list_regressions(
    request: HttpRequest, state: str | None = None, kind: str | None = None, limit: int = 50
) -> list[TriageOut]:
    """Regressions the caller may read, newest first: `state` (comma-separated) and `kind`
    (submission or change-point) narrow the list."""
    user = user_of(request)
    rows = triage.visible(user)
    if state:
        states = [s.strip() for s in state.split(",") if s.strip()]
        unknown = [s for s in states if s not in Triage.State.values]
        if unknown:
            raise ApiError(
                400, "invalid-filter", f"unknown state {unknown[0]!r}: choose from {', '.join(Triage.State.values)}"
            )
        rows = rows.filter(state__in=states)
    if kind:
        if kind not in Triage.Kind.values:
            raise ApiError(400, "invalid-filter", f"unknown kind {kind!r}: choose from {', '.join(Triage.Kind.values)}")
        rows = rows.filter(kind=kind)
    page = rows.order_by("-created", "-id").prefetch_related("events__by")[: max(1, min(limit, 500))]
    return [triage.triage_dict(r, user) for r in page]
