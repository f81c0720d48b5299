"""The API for people: tokens, benchmarks, submissions, tracked branches, results."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.contrib.auth import authenticate
from django.http import HttpRequest
from ninja import Router, Schema, Status

from kperf.core import access, benchmarks
from kperf.core.builds import artifacts
from kperf.core.lab import runner_health
from kperf.core.lifecycle import dispatch
from kperf.core.lifecycle.task_names import Task
from kperf.core.mail import recipients
from kperf.core.models import ApiToken, MachineClass, Runner, Submission, TrackedBranch
from kperf.core.results import mmtests_export, mmtests_import
from kperf.core.submissions import analysis, pipeline
from kperf.core.tracking import branches
from kperf.core.web import presenters, throttle
from kperf.core.web.api import history as history_api
from kperf.core.web.api.auth import USER_AUTH
from kperf.core.web.api.errors import ApiError, responses

router = Router()


class TokenIn(Schema):
    username: str
    password: str
    name: str = "cli"


class TokenOut(Schema):
    token: str
    username: str


class SubmissionIn(Schema):
    # A series without a tree applies on the service's default tree (KPERF_DEFAULT_TREE).
    tree: str = ""
    # Either a branch, or a patch series: the mbox's text as `b4 am` or
    # `git format-patch` writes it (docs/submitting.md, "Patch series"), or
    # its bytes in base64 (mbox_b64), for an mbox that is not all UTF-8.
    branch: str = ""
    mbox: str | None = None
    mbox_b64: str | None = None
    base: str
    benchmarks: list[str] = ["spawn"]
    grid: str = "quick"
    arches: list[str] = ["x86_64"]
    # Practical threshold in percent (0.05-50); leave out for each metric's default for its clock.
    min_effect_pct: float | None = None
    # Kernel command line words appended last to every boot's (docs/submitting.md, "Boot parameters").
    boot_params: str = ""
    # Transparent huge pages: always, madvise or never; empty for the kernel's default.
    thp: str = ""
    # More addresses for the result mail, besides the submitter's (a list the series went to):
    # each one confirmed (POST /addresses) or allowed by the operator (docs/submitting.md).
    mail_to: list[str] = []


@router.get("/health", auth=None, tags=["service"])
def health(request: HttpRequest) -> dict[str, str]:
    Submission.objects.exists()  # touches the database: a broken connection is a 500
    return {"status": "ok"}


@router.post("/auth/token", auth=None, tags=["accounts"], response=responses(201, TokenOut, 401, 413, 415, 422, 429))
def issue_token(request: HttpRequest, payload: TokenIn) -> Status[dict[str, Any]]:
    user = authenticate(request, username=payload.username, password=payload.password)
    if user is None and getattr(request, "axes_locked_out", False):
        # Too many failures for this user name or from this address (kperf.core.web.throttle).
        raise ApiError(429, "throttled", throttle.lockout_message(), retry_after=throttle.cooloff_minutes() * 60)
    if user is None:
        raise ApiError(401, "bad-credentials", "wrong user name or password")
    _, plain = ApiToken.issue(user, payload.name[:100] or "cli")
    return Status(201, {"token": plain, "username": user.get_username()})


@router.get("/benchmarks", auth=USER_AUTH, tags=["benchmarks"], response=responses(200, list[dict[str, Any]], 401))
def list_benchmarks(request: HttpRequest) -> list[dict[str, Any]]:
    return benchmarks.describe()


@router.post(
    "/submissions",
    auth=USER_AUTH,
    tags=["submissions"],
    response=responses(201, dict[str, Any], 400, 401, 413, 415, 422, 429, 503),
)
def create_submission(request: HttpRequest, payload: SubmissionIn) -> Status[dict[str, Any]]:
    req = pipeline.SubmissionRequest(
        tree_url=payload.tree,
        head_ref=payload.branch,
        base_ref=payload.base,
        benchmarks=payload.benchmarks,
        grid=payload.grid,
        arches=payload.arches,
        min_effect_pct=payload.min_effect_pct,
        boot_params=payload.boot_params,
        thp=payload.thp,
        mbox=_mbox_bytes(payload),
        mail_to=payload.mail_to,
    )
    try:
        sub = pipeline.create_submission(request.auth, req)  # type: ignore[attr-defined]
    except pipeline.SubmissionError as e:
        raise ApiError(400, "invalid-submission", str(e), field=e.field) from None
    except recipients.RecipientError as e:
        # Nothing was stored: the same request without the refused addresses goes through.
        extra = {"retry_after": e.retry_after} if e.retry_after else {}
        raise ApiError(e.status, e.code, e.message, field="mail_to", addresses=e.addresses, **extra) from None
    except artifacts.ArtifactUnavailable as e:
        raise ApiError(503, "unavailable", f"the mbox could not be stored, nothing was submitted: {e}") from None
    return Status(201, presenters.submission_detail(sub))


def _mbox_bytes(payload: SubmissionIn) -> bytes | None:
    """The series' mbox as bytes: `mbox` (text) or `mbox_b64` (the file's bytes), at most one of them."""
    if payload.mbox is not None and payload.mbox_b64 is not None:
        raise ApiError(400, "invalid-submission", "give the mbox as mbox (text) or mbox_b64, not both", field="mbox")
    if payload.mbox_b64 is None:
        return None if payload.mbox is None else payload.mbox.encode("utf-8")
    try:
        return base64.b64decode(payload.mbox_b64, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(
            400,
            "invalid-submission",
            "mbox_b64 is not base64: give the mbox file's bytes encoded with base64 (`base64 -w0 FILE`)",
            field="mbox_b64",
        ) from None


@router.get(
    "/submissions", auth=USER_AUTH, tags=["submissions"], response=responses(200, list[dict[str, Any]], 400, 401, 422)
)
def list_submissions(request: HttpRequest, limit: int = 50, owner: str | None = None) -> list[dict[str, Any]]:
    """The caller's submissions, newest first (staff: everyone's; `owner` picks one user's)."""
    subs = access.visible_submissions(request.auth).select_related("tree", "owner")  # type: ignore[attr-defined]
    if owner:
        subs = subs.filter(owner__username=owner)
    return [presenters.submission_summary(s) for s in subs[: max(1, min(limit, 500))]]


def _submission(request: HttpRequest, sub_id: int) -> Submission:
    # Someone else's submission is answered exactly like a missing one, so ids reveal nothing.
    visible = access.visible_submissions(request.auth)  # type: ignore[attr-defined]
    sub = visible.select_related("tree", "owner").filter(pk=sub_id).first()
    if sub is None:
        raise ApiError(
            404, "not-found", f"no submission {sub_id} that you may read: GET /api/v1/submissions lists yours"
        )
    return sub


@router.get(
    "/submissions/{sub_id}",
    auth=USER_AUTH,
    tags=["submissions"],
    response=responses(200, dict[str, Any], 401, 404, 422),
)
def get_submission(request: HttpRequest, sub_id: int) -> dict[str, Any]:
    return presenters.submission_detail(_submission(request, sub_id))


@router.get(
    "/submissions/{sub_id}/mmtests",
    auth=USER_AUTH,
    tags=["submissions"],
    response=responses(200, dict[str, Any], 400, 401, 404, 422, 503),
)
def submission_mmtests(
    request: HttpRequest, sub_id: int, side: str, benchmark: str, clock: str | None = None
) -> dict[str, Any]:
    """One side's raw output as mmtests result directories ({path: text}), for mmtests' own extractors."""
    sub = _submission(request, sub_id)
    try:
        tree = mmtests_export.mmtests_tree(sub, side, benchmark, clock)
    except mmtests_export.ExportError as e:
        raise ApiError(400, "invalid-export", str(e)) from None
    except artifacts.ArtifactUnavailable as e:
        # An archived raw output the artifact storage cannot give back now.
        raise ApiError(503, "unavailable", f"{e}; try again later") from None
    return {
        "submission": sub.pk,
        "side": side,
        "benchmark": benchmark,
        "runs": tree.runs,
        "boots": tree.boots,
        "skipped": tree.skipped,
        "files": tree.files,
    }


@router.get("/runners", auth=USER_AUTH, tags=["lab"], response=responses(200, list[dict[str, Any]], 401))
def list_runners(request: HttpRequest) -> list[dict[str, Any]]:
    """Every runner: health, why and since when it is quarantined, its last calibrations (docs/calibration.md)."""
    return [runner_health.runner_dict(r) for r in Runner.objects.select_related("machine_class").order_by("name")]


class MmtestsImportIn(Schema):
    kernel_sha: str
    machine_class: str
    run_name: str = ""
    environment: dict[str, Any] = {}
    benchmarks: dict[str, dict[str, Any]]


@router.post(
    "/imports/mmtests",
    auth=USER_AUTH,
    tags=["imports"],
    response=responses(201, dict[str, Any], 400, 401, 403, 413, 415, 422),
)
def import_mmtests(request: HttpRequest, payload: MmtestsImportIn) -> Status[dict[str, Any]]:
    """Staff only: imported runs are lab-wide reference data that every user's comparisons read."""
    if not access.may_import(request.auth):  # type: ignore[attr-defined]
        raise ApiError(
            403,
            "forbidden",
            "an admin imports the lab's mmtests runs: they are reference data every user's comparisons read; "
            "ask an admin to import yours, or submit the kernels to have kperf measure them",
        )
    try:
        result = mmtests_import.import_mmtests(payload.model_dump())
    except mmtests_import.KernelImportError as e:
        raise ApiError(400, "invalid-import", str(e)) from None
    return Status(201, {"jobs": result.jobs, "samples": result.samples})


@router.get("/compare", auth=USER_AUTH, tags=["results"], response=responses(200, dict[str, Any], 400, 401, 404, 422))
def compare_kernels(
    request: HttpRequest, machine_class: str, benchmark: str, base: str, head: str, clock: str | None = None
) -> dict[str, Any]:
    """Every finished boot of two kernels (by sha) on one machine class and clock, compared."""
    if not benchmark or benchmark not in mmtests_import.METRIC_RULES:
        raise ApiError(
            400, "invalid-compare", f"unknown benchmark {benchmark!r}: choose from {', '.join(benchmarks.known())}"
        )
    try:
        # Only boots the caller may see: their submissions, readable tracked branches, imported runs.
        visible = access.visible_jobs(request.auth)  # type: ignore[attr-defined]
        result = analysis.compare_kernels(machine_class, benchmark, base, head, clock, jobs=visible)
    except analysis.UnknownClock as e:
        raise ApiError(400, "invalid-compare", str(e)) from None
    if not result["metrics"]:
        raise ApiError(
            404,
            "no-data",
            f"no {benchmark} results for both {base[:12]} and {head[:12]} on {machine_class} "
            f"with the {result['clock']} clock: submit them, import mmtests runs (wall clock) or choose another clock",
        )
    return result


@router.get("/noise", auth=USER_AUTH, tags=["results"], response=responses(200, dict[str, Any], 400, 401, 422))
def noise(
    request: HttpRequest, machine_class: str, boots: int = 4, iterations: int = 3, clock: str | None = None
) -> dict[str, Any]:
    """Per-metric between-build, between-boot and within-boot noise learned
    from history on one clock (default: the machine class's), and the
    smallest change K boots x N iterations per side detect (80% power)."""
    if not 2 <= boots <= 1000 or not 1 <= iterations <= 10000:
        raise ApiError(400, "invalid-noise", "boots must be 2..1000 and iterations 1..10000")
    try:
        clock = analysis.requested_clock(machine_class, clock)
    except analysis.UnknownClock as e:
        raise ApiError(400, "invalid-noise", str(e)) from None
    return {
        "machine_class": machine_class,
        "clock": clock,
        "metrics": analysis.noise_report(machine_class, boots, iterations, clock),
    }


class TrackIn(Schema):
    tree: str
    branch: str
    benchmarks: list[str] = ["spawn"]
    grid: str = "quick"
    arches: list[str] = ["x86_64"]
    boots: int = 0
    max_commits: int = 16
    backfill: int = 0
    notify: list[str] = []
    bisect: bool = True
    min_effect_pct: float | None = None


class TrackUpdateIn(Schema):
    enabled: bool


@router.post(
    "/branches",
    auth=USER_AUTH,
    tags=["branches"],
    response=responses(201, dict[str, Any], 400, 401, 409, 413, 415, 422),
)
def track_branch(request: HttpRequest, payload: TrackIn) -> Status[dict[str, Any]]:
    """Track a branch: every commit it moves to is built, measured and searched for change points.

    Posting a branch that is already tracked updates its settings, if the
    caller owns it or is staff (the owner stays); otherwise 409 already-tracked."""
    req = branches.TrackRequest(
        tree_url=payload.tree,
        branch=payload.branch,
        benchmarks=payload.benchmarks,
        grid=payload.grid,
        arches=payload.arches,
        boots=payload.boots,
        max_commits=payload.max_commits,
        backfill=payload.backfill,
        notify=payload.notify,
        bisect=payload.bisect,
        min_effect_pct=payload.min_effect_pct,
    )
    try:
        branch = branches.track(request.auth, req)  # type: ignore[attr-defined]
    except pipeline.SubmissionError as e:
        raise ApiError(400, "invalid-branch", str(e), field=e.field) from None
    except branches.AlreadyTracked as e:
        raise ApiError(409, "already-tracked", str(e)) from None
    return Status(201, presenters.branch_summary(branch))


@router.get("/branches", auth=USER_AUTH, tags=["branches"], response=responses(200, list[dict[str, Any]], 401))
def list_branches(request: HttpRequest) -> list[dict[str, Any]]:
    """The caller's tracked branches and the lab's reference series (those staff track); staff: all."""
    branches = access.visible_branches(request.auth).select_related("tree", "owner")  # type: ignore[attr-defined]
    return [presenters.branch_summary(b) for b in branches]


def _branch(request: HttpRequest, branch_id: int, change: bool = False) -> TrackedBranch:
    user = request.auth  # type: ignore[attr-defined]
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
    "/branches/{branch_id}", auth=USER_AUTH, tags=["branches"], response=responses(200, dict[str, Any], 401, 404, 422)
)
def get_branch(request: HttpRequest, branch_id: int) -> dict[str, Any]:
    return presenters.branch_detail(_branch(request, branch_id))


@router.patch(
    "/branches/{branch_id}",
    auth=USER_AUTH,
    tags=["branches"],
    response=responses(200, dict[str, Any], 401, 403, 404, 413, 415, 422),
)
def update_branch(request: HttpRequest, branch_id: int, payload: TrackUpdateIn) -> dict[str, Any]:
    """Pause (`enabled: false`) or resume polling; measurements are kept either way."""
    branch = _branch(request, branch_id, change=True)
    branch.enabled = payload.enabled
    branch.save(update_fields=["enabled"])
    return presenters.branch_summary(branch)


@router.post(
    "/branches/{branch_id}/poll",
    auth=USER_AUTH,
    tags=["branches"],
    response=responses(202, dict[str, Any], 401, 403, 404, 422),
)
def poll_branch(request: HttpRequest, branch_id: int) -> Status[dict[str, Any]]:
    """Fetch the tree now instead of waiting for the next periodic poll."""
    branch = _branch(request, branch_id, change=True)
    # A poll lost with the broker is no loss: the periodic poll comes anyway.
    queued = dispatch.send(Task.POLL_BRANCH, branch.pk)
    return Status(202, {"queued": queued, "branch": branch.pk})


@router.get(
    "/branches/{branch_id}/series",
    auth=USER_AUTH,
    tags=["branches"],
    response=responses(200, dict[str, Any], 400, 401, 404, 422),
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
    limit: int = history_api.DEFAULT_LIMIT,
) -> dict[str, Any]:
    """Per measured commit, in branch order: every boot's iterations of every
    metric of one benchmark on one machine class and clock (default: the
    class's), and the change points.

    With `metric`: that metric's per-commit points from the summaries (boots,
    level, spread), commits at positions `since`..`until` (the newest `limit`,
    at most 5000; `next_until` pages back), and its change points."""
    if metric is not None:
        return history_api.metric_series(
            _branch(request, branch_id), machine_class, benchmark, clock, metric, since, until, limit
        )
    branch = _branch(request, branch_id)
    mclass = MachineClass.objects.filter(name=machine_class).first()
    if mclass is None:
        raise ApiError(404, "no-machine-class", f"no machine class {machine_class!r}: GET /api/v1/runners lists them")
    try:
        clock = analysis.requested_clock(machine_class, clock)
    except analysis.UnknownClock as e:
        raise ApiError(400, "invalid-series", str(e)) from None
    commits, metrics = branches.series(branch, mclass.pk, benchmark, clock)
    return {
        "branch": branch.pk,
        "machine_class": machine_class,
        "benchmark": benchmark,
        "clock": clock,
        "commits": [{"sha": c.sha, "position": c.position, "subject": c.subject} for c in commits],
        "metrics": {name: points for name, points in sorted(metrics.items())},
        "change_points": [
            presenters.change_point_dict(cp)
            for cp in branch.change_points.filter(
                machine_class=mclass, benchmark=benchmark, clock=clock
            ).select_related("machine_class", "commit", "previous", "detected_at")
        ],
    }
