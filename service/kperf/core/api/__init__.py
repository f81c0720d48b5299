"""REST API v1 (django-ninja; OpenAPI schema at /api/v1/openapi.json)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from kperf.core.api.errors import ApiError
from kperf.core.api.runner import router as runner_router
from kperf.core.api.users import router as users_router
from kperf.core.leases import ProtocolError

api = NinjaAPI(
    title="kperf",
    version="1",
    description="Submit kernel branches, follow their builds and jobs, read verdicts; runner protocol.",
    urls_namespace="api-v1",
)
api.add_router("/", users_router)
api.add_router("/runner/", runner_router)


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
    return _error(
        request,
        401,
        "bad-token",
        "missing or unknown token: send 'Authorization: Bearer <token>' (users: `kperf login`; "
        "runners: the token the operator registered)",
    )


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    parts = []
    for err in exc.errors:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "payload"))
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    return _error(request, 422, "invalid", "; ".join(parts) or "the request body is malformed")


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return _error(request, exc.status_code, "error", str(exc))
