"""Replies to alerts read from an IMAP mailbox (`kperf-manage poll_mailbox`, the beat task; docs/triage.md).

For a site where kperf cannot receive SMTP: the MTA delivers
`kperf+*@domain` into one mailbox, and kperf polls it with the standard
library's imaplib. Each unread message is read with
kperf.core.inbound.receive and then marked \\Seen and \\Deleted (and the
mailbox expunged), so a message is handled once; one that dies half-way
(the database away) stays unread and is tried at the next poll, and
inbound.receive drops a Message-ID it has already handled.
"""

from __future__ import annotations

import imaplib
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings

from kperf.core import inbound

log = logging.getLogger("kperf.mail_poll")

# A poll reads at most this many messages; the next poll takes the rest.
BATCH = 100


class Mailbox(Protocol):
    """The few IMAP4 calls a poll makes (imaplib.IMAP4 has them)."""

    def uid(self, command: str, *args: str) -> tuple[str, list[object]]: ...

    def expunge(self) -> tuple[str, list[object]]: ...


@dataclass
class PollResult:
    read: int = 0
    failed: int = 0


def _message_bytes(data: list[object]) -> bytes | None:
    for item in data:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], bytes):
            return item[1]
    return None


def poll_box(box: Mailbox, receive: Callable[[bytes], object] | None = None, batch: int = BATCH) -> PollResult:
    """Read the unread messages of a selected mailbox; each handled one is deleted."""
    handle = receive or (lambda raw: inbound.receive(raw))
    result = PollResult()
    typ, data = box.uid("SEARCH", "UNSEEN")
    if typ != "OK":
        raise imaplib.IMAP4.error(f"SEARCH UNSEEN answered {typ}: {data!r}")
    first = data[0] if data else b""
    uids = [u.decode() for u in (first.split() if isinstance(first, bytes) else [])][:batch]
    for uid in uids:
        # BODY.PEEK: the message stays unread until kperf has handled it.
        typ, fetched = box.uid("FETCH", uid, "(BODY.PEEK[])")
        raw = _message_bytes(fetched) if typ == "OK" else None
        if raw is None:
            log.warning("IMAP message %s could not be fetched (%s); it stays for the next poll", uid, typ)
            result.failed += 1
            continue
        try:
            handle(raw)
        except Exception:
            log.exception("IMAP message %s could not be read; it stays unread for the next poll", uid)
            result.failed += 1
            continue
        box.uid("STORE", uid, "+FLAGS", "(\\Seen \\Deleted)")
        result.read += 1
    if result.read:
        box.expunge()
    return result


def connect() -> imaplib.IMAP4:
    """Log in to KPERF_IMAP_HOST and select KPERF_IMAP_MAILBOX."""
    host, port = settings.KPERF_IMAP_HOST, settings.KPERF_IMAP_PORT
    box: imaplib.IMAP4
    if settings.KPERF_IMAP_SSL:
        box = imaplib.IMAP4_SSL(host, port, ssl_context=ssl.create_default_context(), timeout=60)
    else:
        box = imaplib.IMAP4(host, port, timeout=60)
        if settings.KPERF_IMAP_STARTTLS:
            box.starttls(ssl.create_default_context())
    box.login(settings.KPERF_IMAP_USER, settings.KPERF_IMAP_PASSWORD)
    typ, data = box.select(settings.KPERF_IMAP_MAILBOX)
    if typ != "OK":
        box.logout()
        raise imaplib.IMAP4.error(f"cannot select mailbox {settings.KPERF_IMAP_MAILBOX!r}: {data!r}")
    return box


def poll() -> PollResult | None:
    """One poll of the configured mailbox; None when no KPERF_IMAP_HOST is set."""
    if not settings.KPERF_IMAP_HOST:
        return None
    box = connect()
    try:
        result = poll_box(box)
    finally:
        try:
            box.close()
            box.logout()
        except (imaplib.IMAP4.error, OSError) as e:
            log.warning("IMAP logout from %s failed: %s", settings.KPERF_IMAP_HOST, e)
    if result.read or result.failed:
        log.info("IMAP poll: %d messages read, %d left for the next poll", result.read, result.failed)
    return result
