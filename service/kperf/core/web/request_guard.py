"""What every request passes before a view sees it, and the page shown while the database is away.

RequestGuardMiddleware refuses, with 400, a NUL byte anywhere a view or
Django itself may hand a value to PostgreSQL: the path, the query string,
cookies (Django unquotes `"\\000"` in a cookie to a NUL, and the session
middleware looks the session id up), headers, and the fields and file names
of a form. PostgreSQL refuses U+0000 in text, so such a value would
otherwise end as a 500 wherever it reaches a query; no kperf name, id,
token or note contains one. A JSON body under /api/ is not read here: its
parser (kperf.core.web.api.parsing) keeps machine text with the NUL replaced
and refuses it elsewhere, naming the field. A query or form Django cannot
read (too many fields, too large, a broken multipart body) is refused here
too, with what was wrong, rather than as a bare error page later.

DatabaseUnavailableMiddleware answers a page whose view found the database
unreachable with a plain 503 page (the API answers its own 503 in JSON).
The page is rendered without the request: context processors would reach
for the session and the user, which live in the database.

Under /api/ every answer from here is JSON `{"detail": ..., "code": ...}`,
as the API's own errors are.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

from django.conf import settings
from django.core.exceptions import BadRequest, RequestDataTooBig, SuspiciousOperation
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.template.loader import render_to_string

API_PREFIX = "/api/"
# How long a client should wait before trying again while the database is
# away; the API says the same (kperf.core.web.api.DATABASE_RETRY_AFTER_SECONDS).
DATABASE_RETRY_AFTER_SECONDS = 15
# The form bodies a page view reads through request.POST; any other body
# (JSON, say) is left to the view.
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
# ASCII digits only: str.isdigit() also accepts "²" and other characters
# int() refuses, and 18 digits always fit PostgreSQL's bigint, so int()
# never meets the 4300-digit limit of Python's int from text either.
_WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")

log = logging.getLogger(__name__)


def whole_number(text: str) -> int | None:
    """text as an id or count from a request (0 to 10**18 - 1), or None when it is not one."""
    return int(text) if _WHOLE_NUMBER.fullmatch(text) else None


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def refusal(request: HttpRequest, status: int, code: str, detail: str) -> HttpResponse:
    """An error answer in the request's own kind: JSON under /api/, plain text on the pages."""
    if is_api(request):
        return JsonResponse({"detail": detail, "code": code}, status=status)
    return HttpResponse(f"{detail}\n", status=status, content_type="text/plain; charset=utf-8")


def _first_nul(
    pairs: Iterable[tuple[str, Iterable[str]]], what: str, fix: str, nul: str = "a NUL byte (%00)"
) -> str | None:
    for key, values in pairs:
        if "\0" in key:
            return f"a {what} name ({key!r}) contains {nul}: remove it"
        if any("\0" in v for v in values):
            return f"{what} {key!r} contains {nul}: {fix}"
    return None


def _nul_in_envelope(request: HttpRequest) -> str | None:
    """The NUL in the path, query, cookies or headers, said as what to fix; None when there is none."""
    if "\0" in request.path_info:
        return "the URL path contains a NUL byte (%00): remove it; no kperf name or id contains one"
    problem = _first_nul(request.GET.lists(), "query parameter", "remove it; no kperf value contains one")
    if problem:
        return problem
    cookies = ((k, [v]) for k, v in request.COOKIES.items())
    # A cookie's NUL arrives quoted ("\000"), which Django unquotes.
    problem = _first_nul(
        cookies, "cookie", "delete this site's cookies (or sign out) and sign in again", nul="a NUL byte (\\000)"
    )
    if problem:
        return problem
    for key, value in request.META.items():
        # Headers as the server passed them (waitress refuses a raw NUL
        # itself; another server in front might not).
        if (key.startswith("HTTP_") or key in ("CONTENT_TYPE", "CONTENT_LENGTH")) and "\0" in str(value):
            header = key.removeprefix("HTTP_").replace("_", "-").title()
            return f"header {header} contains a NUL byte: remove it"
    return None


def _nul_in_form(request: HttpRequest) -> str | None:
    if request.method != "POST" or (request.content_type or "") not in _FORM_TYPES:
        return None
    problem = _first_nul(request.POST.lists(), "form field", "remove it; no kperf value contains one")
    if problem:
        return problem
    for field, uploads in request.FILES.lists():
        if any("\0" in (upload.name or "") for upload in uploads):
            return f"the name of the file sent as {field!r} contains a NUL byte: rename the file"
    return None


class RequestGuardMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        try:
            problem = _nul_in_envelope(request)
            # An API body is JSON, read by its own parser (and a form body
            # there is refused with 415 by ApiErrorsMiddleware).
            if problem is None and not is_api(request):
                problem = _nul_in_form(request)
        except RequestDataTooBig:
            return refusal(request, 413, "too-large", _too_large(request))
        except (SuspiciousOperation, BadRequest, MultiPartParserError) as e:
            # Too many fields or files, a malformed multipart body.
            return refusal(
                request, 400, "bad-request", f"the request's query or form could not be read ({e}): send less or fix it"
            )
        if problem is not None:
            return refusal(request, 400, "invalid-parameter", problem)
        return self.get_response(request)


def _too_large(request: HttpRequest) -> str:
    size = request.META.get("CONTENT_LENGTH") or "?"
    return (
        f"the form ({size} bytes) is over this service's limit of {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes "
        "(KPERF_MAX_UPLOAD_BYTES): send less, or ask the operator to raise KPERF_MAX_UPLOAD_BYTES"
    )


def database_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The 503 for a request that found the database unreachable: JSON under /api/, a plain page elsewhere."""
    # Not a bug in kperf, and nothing was stored (the request's transaction
    # did not commit): a warning without a traceback.
    first_line = (str(exc).splitlines() or [""])[0][:200]
    log.warning("database unavailable on %s %s: %s", request.method, request.path, first_line)
    if is_api(request):
        response: HttpResponse = JsonResponse(
            {
                "detail": f"the database is unavailable ({type(exc).__name__}); nothing was stored: "
                f"retry in {DATABASE_RETRY_AFTER_SECONDS} s",
                "code": "unavailable",
            },
            status=503,
        )
    else:
        response = HttpResponse(render_to_string("kperf/503.html"), status=503)
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        # Raised by a view, a decorator (login_required reading the session)
        # or a template the view rendered. OperationalError: the server is
        # down or refused the connection; InterfaceError: the connection
        # broke under the request.
        if isinstance(exception, (OperationalError, InterfaceError)):
            return database_unavailable(request, exception)
        return None
