"""Request checks and error shapes that apply before or outside the API's own views.

(A NUL byte anywhere in a request, and a query Django cannot read, are
refused before this, by kperf.core.web.request_guard, in the same JSON shape.)

- A body under /api/ must be JSON: another declared media type gets 415
  before anything (django-axes reading request.POST, say) parses it as a form.
- Every 4xx and 5xx under /api/ is JSON `{"detail": ..., "code": ...}`,
  including the ones Django or django-ninja answer in plain text or HTML
  (unknown endpoint, method not allowed).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.http.request import split_domain_port, validate_host

from kperf.core.web.api.errors import too_large_detail

API_PREFIX = "/api/"
# The one API body that is not JSON: a chunk of a build's file, sent by a
# build machine (kperf.core.web.api.builder).
RAW_UPLOAD = re.compile(r"/api/v1/builder/builds/[0-9]+/artifacts/[^/]+")


def _media_problem(request: HttpRequest) -> str | None:
    if request.method not in ("POST", "PUT", "PATCH") or request.META.get("CONTENT_LENGTH") in (None, "", "0"):
        return None
    media = request.content_type or ""
    if media == "application/octet-stream" and RAW_UPLOAD.fullmatch(request.path_info):
        return None
    # No Content-Type at all is read as JSON, as it always was.
    if media in ("", "application/json") or media.endswith("+json"):
        return None
    return f"the body is sent as {media!r}, but the API reads only JSON: send it with 'Content-Type: application/json'"


def _is_json(response: HttpResponseBase) -> bool:
    return str(response.get("Content-Type", "")).startswith("application/json")


def _raw_host(request: HttpRequest) -> str:
    # What get_host() would check, without the exception it raises for a host not allowed.
    return str(request.META.get("HTTP_HOST") or request.META.get("SERVER_NAME", ""))


def _host_allowed(request: HttpRequest) -> bool:
    domain, _ = split_domain_port(_raw_host(request))
    return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


def _json_for(request: HttpRequest, response: HttpResponseBase) -> JsonResponse:
    status = response.status_code
    path = request.path
    if status == 404:
        code, detail = "not-found", f"there is no API endpoint {path}: /api/v1/docs lists them"
    elif status == 405:
        allowed = response.get("Allow", "") or "another method"
        code, detail = "method-not-allowed", f"{request.method} is not allowed on {path}: use {allowed}"
    elif status == 413:
        code, detail = "too-large", too_large_detail(request)
    elif status >= 500:
        code, detail = "internal", "internal error; the server's log has the details"
    elif status == 400 and not _host_allowed(request):
        # The code stays the generic one clients know; the detail says what to change.
        code = "bad-request"
        detail = (
            f"this service does not answer to the host name {_raw_host(request)!r}: use one it is "
            "configured for, or ask the operator to add it to KPERF_ALLOWED_HOSTS"
        )
    else:
        code, detail = "bad-request", f"the request was refused ({status}): check the URL, headers and body"
    answer = JsonResponse({"detail": detail, "code": code}, status=status)
    if response.has_header("Allow"):
        answer["Allow"] = response["Allow"]
    return answer


class ApiErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        is_api = request.path_info.startswith(API_PREFIX)
        media = _media_problem(request) if is_api else None
        if media is not None:
            return JsonResponse({"detail": media, "code": "unsupported-media-type"}, status=415)
        response = self.get_response(request)
        if is_api and response.status_code >= 400 and not _is_json(response):
            return _json_for(request, response)
        return response
