"""JSON request bodies: parsed, and cleaned of what PostgreSQL cannot store.

PostgreSQL text and jsonb refuse U+0000, and UTF-8 has no encoding for an
unpaired surrogate ("\\ud800" is valid JSON): either in a stored string makes
the insert fail, a 500 for the client and, for a runner's progress call, a
lease that is never extended. So, before any schema sees the body:

- machine text (a console, a log, a benchmark's raw output, a message) is
  kept, with those characters replaced by U+FFFD: it is evidence, and one
  stray byte from a serial console must not lose the rest;
- anywhere else (names, ids, refs, keys, environment values) they are
  refused with 422 `invalid`, naming the field: no legitimate value has one.

A body that is not JSON is refused with 422 `invalid` too, as the runner
protocol documents for every malformed body.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from django.http import HttpRequest
from ninja.parser import Parser

# Fields holding text a machine produced, wherever they appear in a body.
MACHINE_TEXT = frozenset({"console", "console_log", "log", "raw_output", "message"})

_UNSTORABLE = re.compile("[\0\ud800-\udfff]")
# JSON text can only carry those characters as \u escapes (json.loads refuses
# raw control characters, and UTF-8 has no surrogates): a body without such
# an escape needs no walk, which matters for a results upload of thousands
# of samples. A false hit (an escaped backslash before "u0000") only costs the walk.
_UNSTORABLE_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


class BodyError(ValueError):
    """A body refused before validation; detail names the field and what to do."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _what(text: str) -> str:
    return "a NUL character (\\u0000)" if "\0" in text else "an unpaired UTF-16 surrogate"


def _clean(value: Any, path: str, key: str | None) -> Any:
    if isinstance(value, str):
        if not _UNSTORABLE.search(value):
            return value
        if key in MACHINE_TEXT:
            return _UNSTORABLE.sub("\ufffd", value)
        raise BodyError(f"{path or 'body'} contains {_what(value)}: remove it")
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if _UNSTORABLE.search(k):
                raise BodyError(f"{path or 'body'} has a key {k!r} that contains {_what(k)}: remove it")
            out[k] = _clean(v, f"{path}.{k}" if path else k, k)
        return out
    if isinstance(value, list):
        return [_clean(v, f"{path}[{i}]", None) for i, v in enumerate(value)]
    return value


def clean_json(data: Any) -> Any:
    """data with machine text made storable; BodyError for anything else unstorable."""
    try:
        return _clean(data, "", None)
    except RecursionError:
        raise BodyError("the body is nested too deeply") from None


class KperfParser(Parser):
    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        try:
            data = json.loads(request.body)
        except (ValueError, RecursionError) as e:
            raise BodyError(f"the body is not valid JSON ({e}): send one JSON object") from None
        if not _UNSTORABLE_ESCAPE.search(request.body):
            return cast(dict[str, Any], data)
        return cast(dict[str, Any], clean_json(data))
