"""The API for people: tokens, benchmarks, submissions, tracked branches, results."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router, Schema, Status

from kperf.core import analysis, benchmarks, imports, presenters, tracking, workflow
from kperf.core.api.auth import USER_AUTH
from kperf.core.api.errors import ApiError
from kperf.core.models import ApiToken, MachineClass, Runner, Submission, TrackedBranch

router = Router()


class TokenIn(Schema):
    username: str
    password: str
    name: str = "cli"


class SubmissionIn(Schema):
    tree: str
    branch: str
    base: str
    benchmarks: list[str] = ["spawn"]
    grid: str = "quick"
    arches: list[str] = ["x86_64"]
    # Practical threshold in percent (0.05-50); leave out for each metric's default for its clock.
    min_effect_pct: float | None = None


@router.get("/health", auth=None, tags=["service"])
def health(request: HttpRequest) -> dict[str, str]:
    Submission.objects.exists()  # touches the database: a broken connection is a 500
    return {"status": "ok"}


@router.post("/auth/token", auth=None, tags=["accounts"], response={201: dict[str, str]})
def issue_token(request: HttpRequest, payload: TokenIn) -> Status[dict[str, Any]]:
    user = authenticate(request, username=payload.username, password=payload.password)
    if user is None:
        raise ApiError(401, "bad-credentials", "wrong user name or password")
    _, plain = ApiToken.issue(user, payload.name[:100] or "cli")
    return Status(201, {"token": plain, "username": user.get_username()})


@router.get("/benchmarks", auth=USER_AUTH, tags=["benchmarks"])
def list_benchmarks(request: HttpRequest) -> list[dict[str, Any]]:
    return benchmarks.describe()


@router.post("/submissions", auth=USER_AUTH, tags=["submissions"], response={201: dict[str, Any]})
def create_submission(request: HttpRequest, payload: SubmissionIn) -> Status[dict[str, Any]]:
    req = workflow.SubmissionRequest(
        tree_url=payload.tree,
        head_ref=payload.branch,
        base_ref=payload.base,
        benchmarks=payload.benchmarks,
        grid=payload.grid,
        arches=payload.arches,
        min_effect_pct=payload.min_effect_pct,
    )
    try:
        sub = workflow.create_submission(request.auth, req)  # type: ignore[attr-defined]
    except workflow.SubmissionError as e:
        raise ApiError(400, "invalid-submission", str(e), field=e.field) from None
    return Status(201, presenters.submission_detail(sub))


@router.get("/submissions", auth=USER_AUTH, tags=["submissions"])
def list_submissions(request: HttpRequest, limit: int = 50) -> list[dict[str, Any]]:
    subs = Submission.objects.select_related("tree", "owner")[: max(1, min(limit, 500))]
    return [presenters.submission_summary(s) for s in subs]


@router.get("/submissions/{sub_id}", auth=USER_AUTH, tags=["submissions"])
def get_submission(request: HttpRequest, sub_id: int) -> dict[str, Any]:
    sub = get_object_or_404(Submission.objects.select_related("tree", "owner"), pk=sub_id)
    return presenters.submission_detail(sub)


@router.get("/submissions/{sub_id}/mmtests", auth=USER_AUTH, tags=["submissions"])
def submission_mmtests(
    request: HttpRequest, sub_id: int, side: str, benchmark: str, clock: str | None = None
) -> dict[str, Any]:
    """One side's raw output as mmtests result directories ({path: text}), for mmtests' own extractors."""
    from kperf.core import exports

    sub = get_object_or_404(Submission, pk=sub_id)
    try:
        tree = exports.mmtests_tree(sub, side, benchmark, clock)
    except exports.ExportError as e:
        raise ApiError(400, "invalid-export", str(e)) from None
    return {
        "submission": sub.pk,
        "side": side,
        "benchmark": benchmark,
        "runs": tree.runs,
        "boots": tree.boots,
        "skipped": tree.skipped,
        "files": tree.files,
    }


@router.get("/runners", auth=USER_AUTH, tags=["lab"])
def list_runners(request: HttpRequest) -> list[dict[str, Any]]:
    return [
        {
            "name": r.name,
            "machine_class": r.machine_class.name,
            "arch": r.machine_class.arch,
            # The clock the class's new jobs are timed with; capabilities.clocks is what the runner gives.
            "clock": r.machine_class.clock,
            "health": r.health,
            "last_heartbeat": r.last_heartbeat.isoformat() if r.last_heartbeat else None,
            "version": r.version,
            "capabilities": r.capabilities,
        }
        for r in Runner.objects.select_related("machine_class").order_by("name")
    ]


class MmtestsImportIn(Schema):
    kernel_sha: str
    machine_class: str
    run_name: str = ""
    environment: dict[str, Any] = {}
    benchmarks: dict[str, dict[str, Any]]


@router.post("/imports/mmtests", auth=USER_AUTH, tags=["imports"], response={201: dict[str, Any]})
def import_mmtests(request: HttpRequest, payload: MmtestsImportIn) -> Status[dict[str, Any]]:
    try:
        result = imports.import_mmtests(payload.model_dump())
    except imports.KernelImportError as e:
        raise ApiError(400, "invalid-import", str(e)) from None
    return Status(201, {"jobs": result.jobs, "samples": result.samples})


@router.get("/compare", auth=USER_AUTH, tags=["results"])
def compare_kernels(
    request: HttpRequest, machine_class: str, benchmark: str, base: str, head: str, clock: str | None = None
) -> dict[str, Any]:
    """Every finished boot of two kernels (by sha) on one machine class and clock, compared."""
    if not benchmark or benchmark not in imports.METRIC_RULES:
        raise ApiError(
            400, "invalid-compare", f"unknown benchmark {benchmark!r}: choose from {', '.join(benchmarks.known())}"
        )
    try:
        result = analysis.compare_kernels(machine_class, benchmark, base, head, clock)
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


@router.get("/noise", auth=USER_AUTH, tags=["results"])
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


@router.post("/branches", auth=USER_AUTH, tags=["branches"], response={201: dict[str, Any]})
def track_branch(request: HttpRequest, payload: TrackIn) -> Status[dict[str, Any]]:
    """Track a branch: every commit it moves to is built, measured and searched for change points.

    Posting a branch that is already tracked updates its settings."""
    req = tracking.TrackRequest(
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
        branch = tracking.track(request.auth, req)  # type: ignore[attr-defined]
    except workflow.SubmissionError as e:
        raise ApiError(400, "invalid-branch", str(e), field=e.field) from None
    return Status(201, presenters.branch_summary(branch))


@router.get("/branches", auth=USER_AUTH, tags=["branches"])
def list_branches(request: HttpRequest) -> list[dict[str, Any]]:
    return [presenters.branch_summary(b) for b in TrackedBranch.objects.select_related("tree", "owner")]


def _branch(branch_id: int) -> TrackedBranch:
    return get_object_or_404(TrackedBranch.objects.select_related("tree", "owner"), pk=branch_id)


@router.get("/branches/{branch_id}", auth=USER_AUTH, tags=["branches"])
def get_branch(request: HttpRequest, branch_id: int) -> dict[str, Any]:
    return presenters.branch_detail(_branch(branch_id))


@router.patch("/branches/{branch_id}", auth=USER_AUTH, tags=["branches"])
def update_branch(request: HttpRequest, branch_id: int, payload: TrackUpdateIn) -> dict[str, Any]:
    """Pause (`enabled: false`) or resume polling; measurements are kept either way."""
    branch = _branch(branch_id)
    branch.enabled = payload.enabled
    branch.save(update_fields=["enabled"])
    return presenters.branch_summary(branch)


@router.post("/branches/{branch_id}/poll", auth=USER_AUTH, tags=["branches"], response={202: dict[str, Any]})
def poll_branch(request: HttpRequest, branch_id: int) -> Status[dict[str, Any]]:
    """Fetch the tree now instead of waiting for the next periodic poll."""
    from kperf.core import tasks

    branch = _branch(branch_id)
    tasks.poll_branch.delay(branch.pk)
    return Status(202, {"queued": True, "branch": branch.pk})


@router.get("/branches/{branch_id}/series", auth=USER_AUTH, tags=["branches"])
def branch_series(
    request: HttpRequest, branch_id: int, machine_class: str, benchmark: str, clock: str | None = None
) -> dict[str, Any]:
    """Per measured commit, in branch order: every boot's iterations of every
    metric of one benchmark on one machine class and clock (default: the
    class's), and the change points."""
    branch = _branch(branch_id)
    mclass = MachineClass.objects.filter(name=machine_class).first()
    if mclass is None:
        raise ApiError(404, "no-machine-class", f"no machine class {machine_class!r}: GET /api/v1/runners lists them")
    try:
        clock = analysis.requested_clock(machine_class, clock)
    except analysis.UnknownClock as e:
        raise ApiError(400, "invalid-series", str(e)) from None
    commits, metrics = tracking.series(branch, mclass.pk, benchmark, clock)
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
