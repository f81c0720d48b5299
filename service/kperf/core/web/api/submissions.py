"""The API for submissions: submit a branch or a patch series, follow it, export its raw output for mmtests."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.http import HttpRequest
from ninja import Router, Status
from pydantic import Field, model_validator

from kperf.core import access
from kperf.core.builds import artifacts
from kperf.core.mail import recipients
from kperf.core.models import Submission
from kperf.core.results import mmtests_export
from kperf.core.submissions import pipeline
from kperf.core.submissions.request import SubmissionRequest, refused
from kperf.core.web import presenters
from kperf.core.web.api.auth import USER_AUTH, user_of
from kperf.core.web.api.errors import ApiError, responses
from kperf.core.web.shapes import MmtestsTree, SubmissionDetail, SubmissionSummary

router = Router()


class SubmissionIn(SubmissionRequest):
    """The body of POST /submissions: the submission request (kperf.core.submissions.request, the schema the
    web form parses into too), whose mbox may also come as its bytes in base64."""

    mbox_b64: str | None = Field(
        None,
        description="instead of mbox, for an mbox that is not all UTF-8: the file's bytes in base64 "
        "(`base64 -w0 FILE`)",
    )

    @model_validator(mode="before")
    @classmethod
    def _mbox_from_base64(cls, data: Any) -> Any:
        """mbox_b64 decoded into mbox, before the request's own checks read it."""
        if not isinstance(data, dict) or not isinstance(data.get("mbox_b64"), str):
            # Not a string: the field's type answers (422).
            return data
        if data.get("mbox") is not None:
            raise refused("mbox", "give the mbox as mbox (text) or mbox_b64, not both")
        try:
            mbox = base64.b64decode(data["mbox_b64"], validate=True)
        except (binascii.Error, ValueError):
            raise refused(
                "mbox_b64", "mbox_b64 is not base64: give the mbox file's bytes encoded with base64 (`base64 -w0 FILE`)"
            ) from None
        return {**data, "mbox": mbox}


@router.post(
    "/submissions",
    auth=USER_AUTH,
    tags=["submissions"],
    response=responses(201, SubmissionDetail, 400, 401, 413, 415, 422, 429, 503),
)
def create_submission(request: HttpRequest, payload: SubmissionIn) -> Status[SubmissionDetail]:
    """Submit a branch or a patch series. A request the checks refuse (SubmissionRequest's) answers 400
    `invalid-submission` naming the `field` at fault (kperf.core.web.api.on_validation_error)."""
    try:
        sub = pipeline.create_submission(user_of(request), payload)
    except recipients.RecipientError as e:
        # Nothing was stored: the same request without the refused addresses goes through.
        extra = {"retry_after": e.retry_after} if e.retry_after else {}
        raise ApiError(e.status, e.code, e.message, field="mail_to", addresses=e.addresses, **extra) from None
    except artifacts.ArtifactUnavailable as e:
        raise ApiError(503, "unavailable", f"the mbox could not be stored, nothing was submitted: {e}") from None
    return Status(201, presenters.submission_detail(sub))


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
