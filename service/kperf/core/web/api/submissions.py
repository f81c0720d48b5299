"""The API for submissions: submit a branch or a patch series, follow it, export its raw output for mmtests."""

from __future__ import annotations

import base64
import binascii

from django.http import HttpRequest
from ninja import Router, Schema, Status

from kperf.core import access
from kperf.core.builds import artifacts
from kperf.core.mail import recipients
from kperf.core.models import Submission
from kperf.core.results import mmtests_export
from kperf.core.submissions import pipeline
from kperf.core.web import presenters
from kperf.core.web.api.auth import USER_AUTH, user_of
from kperf.core.web.api.errors import ApiError, responses
from kperf.core.web.api.inputs import BenchmarkNames, GridNames
from kperf.core.web.shapes import MmtestsTree, SubmissionDetail, SubmissionSummary

router = Router()


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
    # A list of names, or one as a string: "all" is every benchmark (docs/benchmarks.md).
    benchmarks: BenchmarkNames = ["spawn"]
    # One grid, or several as `grids` (["quick", "scaling"]): each benchmark runs those of them it
    # has, a comparison per grid (docs/submitting.md, "Several grids"). Neither: quick.
    grid: str = ""
    grids: GridNames = []
    arches: list[str] = ["x86_64"]
    # Practical threshold in percent (0.05-50); leave out for each metric's default for its clock.
    min_effect_pct: float | None = None
    # Kernel command line words appended last to every boot's (docs/submitting.md, "Boot parameters").
    boot_params: str = ""
    # Transparent huge pages: always, madvise or never; empty for the kernel's default.
    thp: str = ""
    # Configuration profile of both kernels (docs/kernels.md): tiny, mm or distro; empty for each
    # machine class's own.
    profile: str = ""
    # More addresses for the result mail, besides the submitter's (a list the series went to):
    # each one confirmed (POST /addresses) or allowed by the operator (docs/submitting.md).
    mail_to: list[str] = []


@router.post(
    "/submissions",
    auth=USER_AUTH,
    tags=["submissions"],
    response=responses(201, SubmissionDetail, 400, 401, 413, 415, 422, 429, 503),
)
def create_submission(request: HttpRequest, payload: SubmissionIn) -> Status[SubmissionDetail]:
    req = pipeline.SubmissionRequest(
        tree_url=payload.tree,
        head_ref=payload.branch,
        base_ref=payload.base,
        benchmarks=payload.benchmarks,
        grid=payload.grid,
        grids=payload.grids,
        arches=payload.arches,
        min_effect_pct=payload.min_effect_pct,
        boot_params=payload.boot_params,
        thp=payload.thp,
        mbox=_mbox_bytes(payload),
        mail_to=payload.mail_to,
        profile=payload.profile,
    )
    try:
        sub = pipeline.create_submission(user_of(request), req)
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
    "/submissions",
    auth=USER_AUTH,
    tags=["submissions"],
    response=responses(200, list[SubmissionSummary], 400, 401, 422),
)
def list_submissions(request: HttpRequest, limit: int = 50, owner: str | None = None) -> list[SubmissionSummary]:
    """The caller's submissions, newest first (staff: everyone's; `owner` picks one user's)."""
    subs = access.visible_submissions(user_of(request)).select_related("tree", "owner")
    if owner:
        subs = subs.filter(owner__username=owner)
    return [presenters.submission_summary(s) for s in subs[: max(1, min(limit, 500))]]


def _submission(request: HttpRequest, sub_id: int) -> Submission:
    # Someone else's submission is answered exactly like a missing one, so ids reveal nothing.
    visible = access.visible_submissions(user_of(request))
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
    response=responses(200, SubmissionDetail, 401, 404, 422),
)
def get_submission(request: HttpRequest, sub_id: int) -> SubmissionDetail:
    return presenters.submission_detail(_submission(request, sub_id))


@router.get(
    "/submissions/{sub_id}/mmtests",
    auth=USER_AUTH,
    tags=["submissions"],
    response=responses(200, MmtestsTree, 400, 401, 404, 422, 503),
)
def submission_mmtests(
    request: HttpRequest,
    sub_id: int,
    side: str,
    benchmark: str,
    clock: str | None = None,
    machine_class: str | None = None,
    grid: str | None = None,
) -> MmtestsTree:
    """One side's raw output as mmtests result directories ({path: text}), for mmtests' own extractors,
    with each boot's kernel.version and each run's kperf-run.json (how it was measured); `grid` picks
    one where the submission ran the benchmark on several."""
    sub = _submission(request, sub_id)
    try:
        tree = mmtests_export.mmtests_tree(sub, side, benchmark, clock, machine_class, grid)
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
