"""The API's service check and its tokens for people (`kperf login`)."""

from __future__ import annotations

from django.contrib.auth import authenticate
from django.http import HttpRequest
from ninja import Router, Schema, Status

from kperf.core.models import ApiToken, Submission
from kperf.core.web import throttle
from kperf.core.web.api.errors import ApiError, responses
from kperf.core.web.shapes import HealthOut, TokenOut

router = Router()


class TokenIn(Schema):
    username: str
    password: str
    name: str = "cli"


@router.get("/health", auth=None, tags=["service"], response=HealthOut)
def health(request: HttpRequest) -> HealthOut:
    Submission.objects.exists()  # touches the database: a broken connection is a 500
    return {"status": "ok"}


@router.post("/auth/token", auth=None, tags=["accounts"], response=responses(201, TokenOut, 401, 413, 415, 422, 429))
def issue_token(request: HttpRequest, payload: TokenIn) -> Status[TokenOut]:
    user = authenticate(request, username=payload.username, password=payload.password)
    if user is None and getattr(request, "axes_locked_out", False):
        # Too many failures for this user name or from this address (kperf.core.web.throttle).
        raise ApiError(429, "throttled", throttle.lockout_message(), retry_after=throttle.cooloff_minutes() * 60)
    if user is None:
        raise ApiError(401, "bad-credentials", "wrong user name or password")
    _, plain = ApiToken.issue(user, payload.name[:100] or "cli")
    return Status(201, {"token": plain, "username": user.get_username()})
