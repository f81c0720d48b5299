"""The errors waitress answers itself, before Django sees the request, as JSON under /api/.

waitress refuses a request it cannot parse, or will not read, with a
plain-text answer of its own: a header line that is malformed or holds a
NUL or other control character, a Content-Length that is not digits, a
broken chunked body, a body over its limit (kperf-web sets that limit
above Django's, so this is a body far too large), headers over its limit,
an unsupported Transfer-Encoding. API clients (the CLI, runners) read
every error as JSON `{"detail": ..., "code": ...}`, so when the request
line is readable and names a path under /api/, the answer is that JSON.

When the request line itself cannot be read (no line break in the
headers, say), or headers over the limit arrived in a single read, there
is no path to go by, and the answer stays waitress's plain text; so does
every answer for a path outside /api/ (docs/operations.md, "The web server").
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote, urlsplit

from django.conf import settings
from waitress.task import ErrorTask

API_PREFIX = "/api/"


def request_target(request: Any) -> str | None:
    """The path (percent-decoded, without the query) a request waitress refused was for; None if unreadable.

    waitress parses the header lines before the request line, so a request
    refused for a bad header has no `path` yet, only its `first_line`. For
    headers over the limit, waitress puts a made-up "GET /" there instead,
    and the request line is read from what had been received before the
    last read (all of it but the read that crossed the limit).
    """
    line = getattr(request, "first_line", b"") or b""
    if not line or getattr(request.error, "code", None) == 431:
        received = getattr(request, "header_plus", b"") or b""
        line = received.lstrip().split(b"\r\n", 1)[0].split(b"\n", 1)[0]
    parts = line.split(b" ")
    if len(parts) < 2 or not parts[1]:
        return None
    target = parts[1].decode("latin-1")
    if "://" in target:
        # The absolute form a proxy sends: GET http://host/api/v1/... HTTP/1.1
        target = urlsplit(target).path
    return unquote(target.split("?", 1)[0].split("#", 1)[0])


def _detail(error: Any, request: Any) -> tuple[str, str]:
    """The error's code and what to do about it."""
    reason = str(getattr(error, "body", "") or "")
    if error.code == 400:
        return "bad-request", (
            f"the HTTP request could not be read ({reason}): send well-formed HTTP/1.1 (header lines "
            "'Name: value' without NUL or other control characters, a Content-Length of digits only, "
            "well-formed chunks)"
        )
    if error.code == 413:
        size = getattr(request, "content_length", 0) or 0
        sent = f" ({size} bytes)" if size > 0 else ""
        return "too-large", (
            f"the request body{sent} is over this service's limit of {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} "
            "bytes (KPERF_MAX_UPLOAD_BYTES): send less (a runner resends its results with the console cut to "
            "its end) or ask the operator to raise KPERF_MAX_UPLOAD_BYTES"
        )
    if error.code == 431:
        return "headers-too-large", (
            f"the request's headers are over the web server's limit ({reason}): send fewer or shorter "
            "headers (cookies count)"
        )
    if error.code == 501:
        return "not-implemented", f"{reason}: send the body with a Content-Length, or chunked"
    return "internal", "internal error in the web server; the server's log has the details: retry later"


class ApiErrorTask(ErrorTask):  # type: ignore[misc]  # waitress has no type hints
    def execute(self) -> None:
        target = request_target(self.request)
        if target is None or not target.startswith(API_PREFIX):
            super().execute()
            return
        error = self.request.error
        code, detail = _detail(error, self.request)
        body = json.dumps({"detail": detail, "code": code}).encode()
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        # As waitress does for its own errors: what follows on the
        # connection cannot be trusted to start a new request.
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


def answer_api_errors_in_json(server: Any) -> None:
    """Make a listening server's connections answer waitress's own errors with ApiErrorTask.

    The server's channel class (waitress's, or one of its subclasses with
    other duties) is kept, and only its error task replaced.
    """
    base = server.channel_class
    server.channel_class = type(f"JsonErrors{base.__name__}", (base,), {"error_task_class": ApiErrorTask})
