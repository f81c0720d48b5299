"""The API for tracked branches: track, list, pause and poll them, and read their series."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema, Status

from kperf.core import access
from kperf.core.lifecycle import dispatch
from kperf.core.lifecycle.task_names import Task
from kperf.core.models import TrackedBranch
from kperf.core.submissions.checks import SubmissionError
from kperf.core.tracking import branches
from kperf.core.tracking.request import TrackRequest
from kperf.core.web import presenters
from kperf.core.web.api import history as history_api
from kperf.core.web.api.auth import USER_AUTH, user_of
from kperf.core.web.api.errors import ApiError, responses
from kperf.core.web.shapes import BranchDetail, BranchSeries, BranchSummary, MetricSeries, PollQueued

router = Router()


class TrackIn(TrackRequest):
    """The body of POST /branches: the tracked-branch request (kperf.core.tracking.request)."""


class TrackUpdateIn(Schema):
    enabled: bool


@router.post(
    "/branches",
    auth=USER_AUTH,
    tags=["branches"],
    response=responses(201, BranchSummary, 400, 401, 409, 413, 415, 422),
)
def track_branch(request: HttpRequest, payload: TrackIn) -> Status[BranchSummary]:
    """Track a branch: every commit it moves to is built, measured and searched for change points.

    Posting a branch that is already tracked updates its settings, if the
    caller owns it or is staff (the owner stays); otherwise 409 already-tracked."""
    try:
        branch = branches.track(user_of(request), payload)
    except SubmissionError as e:
        raise ApiError(400, "invalid-branch", str(e), field=e.field) from None
    except branches.AlreadyTracked as e:
        raise ApiError(409, "already-tracked", str(e)) from None
    return Status(201, presenters.branch_summary(branch))


@router.get("/branches", auth=USER_AUTH, tags=["branches"], response=responses(200, list[BranchSummary], 401))
def list_branches(request: HttpRequest) -> list[BranchSummary]:
    """The caller's tracked branches and the lab's reference series (those staff track); staff: all."""
    branches = access.visible_branches(user_of(request)).select_related("tree", "owner")
    return [presenters.branch_summary(b) for b in branches]


def _branch(request: HttpRequest, branch_id: int, change: bool = False) -> TrackedBranch:
    user = user_of(request)
    branch = access.visible_branches(user).select_related("tree", "owner").filter(pk=branch_id).first()
    if branch is None:
        raise ApiError(
            404, "not-found", f"no tracked branch {branch_id} that you may read: GET /api/v1/branches lists them"
        )
    if change and not access.may_change_branch(user, branch):
        raise ApiError(
            403,
            "forbidden",
            f"tracked branch {branch_id} is one of the lab's reference series: only its owner or an admin may "
            "pause, resume or poll it; ask an admin",
        )
    return branch


@router.get(
    "/branches/{branch_id}", auth=USER_AUTH, tags=["branches"], response=responses(200, BranchDetail, 401, 404, 422)
)
def get_branch(request: HttpRequest, branch_id: int) -> BranchDetail:
    return presenters.branch_detail(_branch(request, branch_id))


@router.patch(
    "/branches/{branch_id}",
    auth=USER_AUTH,
    tags=["branches"],
    response=responses(200, BranchSummary, 401, 403, 404, 413, 415, 422),
)
def update_branch(request: HttpRequest, branch_id: int, payload: TrackUpdateIn) -> BranchSummary:
    """Pause (`enabled: false`) or resume polling; measurements are kept either way."""
    branch = _branch(request, branch_id, change=True)
    branch.enabled = payload.enabled
    branch.save(update_fields=["enabled"])
    return presenters.branch_summary(branch)


@router.post(
    "/branches/{branch_id}/poll",
    auth=USER_AUTH,
    tags=["branches"],
    response=responses(202, PollQueued, 401, 403, 404, 422),
)
def poll_branch(request: HttpRequest, branch_id: int) -> Status[PollQueued]:
    """Fetch the tree now instead of waiting for the next periodic poll."""
    branch = _branch(request, branch_id, change=True)
    # A poll lost with the broker is no loss: the periodic poll comes anyway.
    queued = dispatch.send(Task.POLL_BRANCH, branch.pk)
    return Status(202, {"queued": queued, "branch": branch.pk})


@router.get(
    "/branches/{branch_id}/series",
    auth=USER_AUTH,
    tags=["branches"],
    response=responses(200, BranchSeries | MetricSeries, 400, 401, 404, 422),
)
def branch_series(
    request: HttpRequest,
    branch_id: int,
    machine_class: str,
    benchmark: str,
    clock: str | None = None,
    metric: str | None = None,
    since: int | None = None,
    until: int | None = None,
    limit: int | None = None,
) -> BranchSeries | MetricSeries:
    """Per measured commit, in branch order: every boot's iterations of every
    metric of one benchmark on one machine class and clock (default: the
    class's), and the change points; the newest `limit` commits of
    `since`..`until` (default 20, at most 100) that hold at most 10,000
    samples together (at least one commit), `next_until` pages back.

    With `metric`: that metric's per-commit points from the summaries (boots,
    level, spread), commits at positions `since`..`until` (the newest `limit`,
    default 1000, at most 5000; `next_until` pages back), and its change points."""
    if metric is not None:
        return history_api.metric_series(
            _branch(request, branch_id),
            machine_class,
            benchmark,
            clock,
            metric,
            since,
            until,
            history_api.DEFAULT_LIMIT if limit is None else limit,
        )
    branch = _branch(request, branch_id)
    mclass, clock = history_api.class_and_clock(machine_class, clock)
    limit = history_api.RAW_DEFAULT_LIMIT if limit is None else limit
    if not 1 <= limit <= history_api.RAW_MAX_LIMIT:
        raise ApiError(
            400,
            "invalid-series",
            f"limit must be 1 to {history_api.RAW_MAX_LIMIT} commits for every boot's samples; "
            "page with next_until, or ask for one metric's summaries with metric=NAME (up to "
            f"{history_api.MAX_LIMIT} commits)",
        )
    commits, metrics, more = branches.series(
        branch,
        mclass.pk,
        benchmark,
        clock,
        since=since,
        until=until,
        limit=limit,
        max_samples=history_api.RAW_MAX_SAMPLES,
    )
    change_points = branch.change_points.filter(machine_class=mclass, benchmark=benchmark, clock=clock)
    return {
        "branch": branch.pk,
        "machine_class": machine_class,
        "benchmark": benchmark,
        "clock": clock,
        "commits": [{"sha": c.sha, "position": c.position, "subject": c.subject} for c in commits],
        "metrics": {name: points for name, points in sorted(metrics.items())},
        "next_until": commits[0].position - 1 if more and commits else None,
        "change_points": history_api.change_points_between(change_points, commits[0].position, commits[-1].position)
        if commits
        else [],
    }
