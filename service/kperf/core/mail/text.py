"""A mail's header text as kperf stores and shows it: valid, printable text.

Many mail clients still write a name or a subject with raw 8-bit bytes
(`From: Alicé <a@example.org>` in UTF-8 or latin-1) rather than as the
encoded words RFC 5322 asks for. Python's email package keeps such bytes
as lone surrogates (`\\udce9`), which no UTF-8 text, and so no PostgreSQL
column, can hold: a reply carrying one could not be recorded, the SMTP
listener answered 451, and the sending MTA retried it for days.
"""

from __future__ import annotations

import re

# The surrogates the email package's surrogateescape leaves for bytes 0x80-0xff.
_ESCAPED = re.compile(r"[\udc80-\udcff]+")
# Any surrogate still left: none can be stored.
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Control characters but tab and newline. PostgreSQL refuses NUL in text
# (`=?utf-8?q?hi=00there?=` decodes to one), so a mail carrying one could
# never be recorded and its sender's MTA or the IMAP poll would retry it
# forever; the others have no place in what kperf stores or writes back.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _bytes_as_text(run: re.Match[str]) -> str:
    """One run of escaped bytes as the text its writer meant: UTF-8 where they are UTF-8, else latin-1."""
    raw = run.group().encode("utf-8", "surrogateescape")
    # Bytes that are no UTF-8 come back escaped once more; latin-1 reads any byte.
    text = raw.decode("utf-8", "surrogateescape")
    return _ESCAPED.sub(lambda m: m.group().encode("utf-8", "surrogateescape").decode("latin-1"), text)


def unescaped(text: str) -> str:
    """`text` with the raw 8-bit bytes of a header read as characters (see the module's doc)."""
    if not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub("", _ESCAPED.sub(_bytes_as_text, text))


def has_raw_bytes(text: str) -> bool:
    """Whether a header value as the email package read it holds raw 8-bit bytes."""
    return _ESCAPED.search(text) is not None


def printable(text: str) -> str:
    """`text` as valid text without control characters, but for tab and newline."""
    return _CONTROL.sub("", unescaped(text))
