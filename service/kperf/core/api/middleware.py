"""Request checks and error shapes that apply before or outside the API's own views.

- A NUL byte in the path or query string is refused with 400 before any
  view sees it: PostgreSQL cannot store or compare text containing one, so
  it would otherwise surface as a 500 wherever the value reaches a query.
- A body under /api/ must be JSON: another declared media type gets 415
  before anything (django-axes reading request.POST, say) parses it as a form.
- Every 4xx and 5xx under /api/ is JSON `{"detail": ..., "code": ...}`,
  including the ones Django or django-ninja answer in plain text or HTML
  (unknown endpoint, method not allowed).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse

from kperf.core.api.errors import too_large_detail

API_PREFIX = "/api/"


def _nul_problem(request: HttpRequest) -> str | None:
    if "\0" in request.path_info:
        return "the URL path contains a NUL byte (%00): remove it; no kperf name or id contains one"
    for key, values in request.GET.lists():
        if "\0" in key:
            return f"a query parameter name ({key!r}) contains a NUL byte (%00): remove it"
        if any("\0" in v for v in values):
            return f"query parameter {key!r} contains a NUL byte (%00): remove it; no kperf value contains one"
    return None


def _media_problem(request: HttpRequest) -> str | None:
    if request.method not in ("POST", "PUT", "PATCH") or request.META.get("CONTENT_LENGTH") in (None, "", "0"):
        return None
    media = request.content_type or ""
    # No Content-Type at all is read as JSON, as it always was.
    if media in ("", "application/json") or media.endswith("+json"):
        return None
    return f"the body is sent as {media!r}, but the API reads only JSON: send it with 'Content-Type: application/json'"


def _is_json(response: HttpResponseBase) -> bool:
    return str(response.get("Content-Type", "")).startswith("application/json")


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
        problem = _nul_problem(request)
        if problem is not None:
            if is_api:
                return JsonResponse({"detail": problem, "code": "invalid-parameter"}, status=400)
            return HttpResponse(problem, status=400, content_type="text/plain; charset=utf-8")
        media = _media_problem(request) if is_api else None
        if media is not None:
            return JsonResponse({"detail": media, "code": "unsupported-media-type"}, status=415)
        response = self.get_response(request)
        if is_api and response.status_code >= 400 and not _is_json(response):
            return _json_for(request, response)
        return response
