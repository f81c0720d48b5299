from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Schema


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str, **extra: object) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.extra = extra


class ErrorOut(Schema):
    """Every error the API answers: what happened and what to do, and a code clients act on."""

    detail: str
    code: str


def too_large_detail(request: HttpRequest) -> str:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    size = request.META.get("CONTENT_LENGTH") or "?"
    return (
        f"the request body ({size} bytes) is over this service's limit of {limit} bytes "
        "(KPERF_MAX_UPLOAD_BYTES): send less (a runner resends its results with the console cut to its end) "
        "or ask the operator to raise KPERF_MAX_UPLOAD_BYTES"
    )


def responses(ok: int, schema: Any, *errors: int) -> dict[int, Any]:
    """A route's documented answers: its success, and the error codes it can give (all ErrorOut)."""
    return {ok: schema, **dict.fromkeys(errors, ErrorOut)}
