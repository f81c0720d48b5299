"""REST API v1 (django-ninja; OpenAPI schema at /api/v1/openapi.json)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from kperf.core.lab.uploads import ProtocolError
from kperf.core.submissions import request as request_schema
from kperf.core.web.api.accounts import router as accounts_router
from kperf.core.web.api.addresses import router as addresses_router
from kperf.core.web.api.branches import router as branches_router
from kperf.core.web.api.builder import router as builder_router
from kperf.core.web.api.errors import ApiError, too_large_detail
from kperf.core.web.api.lab import router as lab_router
from kperf.core.web.api.parsing import BodyError, KperfParser
from kperf.core.web.api.results import router as results_router
from kperf.core.web.api.runner import router as runner_router
from kperf.core.web.api.submissions import router as submissions_router
from kperf.core.web.api.triage import router as triage_router

api = NinjaAPI(
    title="kperf",
    version="1",
    description="Submit kernel branches, follow their builds and jobs, read verdicts; runner protocol.",
    urls_namespace="api-v1",
    parser=KperfParser(),
)
log = logging.getLogger(__name__)
api.add_router("/", accounts_router)
api.add_router("/", submissions_router)
api.add_router("/", results_router)
api.add_router("/", branches_router)
api.add_router("/", lab_router)
api.add_router("/", triage_router)
api.add_router("/", addresses_router)
api.add_router("/runner/", runner_router)
api.add_router("/builder/", builder_router)


def _error(request: HttpRequest, status: int, code: str, detail: str, **extra: object) -> HttpResponse:
    return api.create_response(request, {"detail": detail, "code": code, **extra}, status=status)


@api.exception_handler(ApiError)
def on_api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return _error(request, exc.status, exc.code, exc.detail, **exc.extra)


@api.exception_handler(ProtocolError)
def on_protocol_error(request: HttpRequest, exc: ProtocolError) -> HttpResponse:
    return _error(request, exc.status, exc.code, exc.detail)


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    if request.headers.get("Authorization"):
        what = "the token was not accepted (unknown, revoked, mistyped, or not a 'Bearer' token of this kind)"
    else:
        what = "no token: send 'Authorization: Bearer <token>'"
    return _error(
        request,
        401,
        "bad-token",
        f"{what}; users: get a new one with `kperf login`; runners: use the token the operator registered "
        "(user and runner tokens do not work on each other's endpoints)",
    )


def _where(loc: tuple[Any, ...]) -> str:
    """A validation error's location as the body reads: boots[0].samples[2].value."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        # A body's first part is the view's parameter name, not a field of the JSON.
        parts = parts[2:] if parts[0] == "body" else parts[1:]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def _describe(err: Any) -> str:
    loc = tuple(err.get("loc", ()))
    msg = str(err.get("msg", "invalid"))
    if err.get("type") == "kperf_invalid":
        # kperf's own messages read on from the field name; a bad dict key
        # is named in the message, after the object that holds it.
        where = _where(loc[:-2] if loc[-1:] == ("[key]",) else loc)
        return f"{where} {msg}"
    return f"{_where(loc)}: {msg}"


# A refusal, by its pydantic error type: input of the right shape that kperf
# will not act on, answered 400 with its code (not 422) and the field its location names.
REFUSALS = {request_schema.REFUSED: "invalid-submission"}


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = list(exc.errors)
    if errors and all(err.get("type") in REFUSALS for err in errors):
        # The first, as a refusal always was: fixing it may change what the others would say.
        first = errors[0]
        field = _where(tuple(first.get("loc", ())))
        return _error(request, 400, REFUSALS[first["type"]], str(first.get("msg")), field=field)
    parts = [_describe(err) for err in errors]
    where = _where(tuple(errors[0].get("loc", ()))) if errors else "body"
    extra = {"field": where} if where != "body" else {}
    return _error(request, 422, "invalid", "; ".join(parts) or "the request body is malformed", **extra)


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # django-ninja wraps whatever the body parser raised in a 400; the
    # protocol promises 422 `invalid` for a malformed body.
    if isinstance(exc.__cause__, BodyError):
        return _error(request, 422, "invalid", exc.__cause__.detail)
    return _error(request, exc.status_code, "error", str(exc))


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(
        request,
        404,
        "not-found",
        f"{exc or 'not found'}: check the id in the URL; GET /api/v1/submissions and /api/v1/branches list them",
    )


@api.exception_handler(RequestDataTooBig)
def on_too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return _error(request, 413, "too-large", too_large_detail(request))


@api.exception_handler(SuspiciousOperation)
def on_suspicious(request: HttpRequest, exc: SuspiciousOperation) -> HttpResponse:
    return _error(request, 400, "bad-request", f"the request was refused: {exc}")


# How long a client should wait before trying again while the database is away.
DATABASE_RETRY_AFTER_SECONDS = 15


@api.exception_handler(DatabaseError)
def on_database_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return on_internal_error(request, exc)
    # The database is restarting or unreachable: not a bug, and nothing was
    # stored (the request's transaction did not commit), so the client is
    # told to try again rather than given an incident to report.
    log.warning("database unavailable on %s %s: %s", request.method, request.path, str(exc).splitlines()[0][:200])
    response = _error(
        request,
        503,
        "unavailable",
        f"the database is unavailable ({type(exc).__name__}); nothing was stored: "
        f"retry in {DATABASE_RETRY_AFTER_SECONDS} s",
    )
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


@api.exception_handler(Exception)
def on_internal_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    # The client gets an id to quote; the log has the traceback under it.
    incident = uuid.uuid4().hex[:12]
    log.exception("internal error %s on %s %s", incident, request.method, request.path, exc_info=exc)
    return _error(
        request,
        500,
        "internal",
        f"internal error, logged as {incident}: retry later, or quote it to the operator if it persists",
    )
