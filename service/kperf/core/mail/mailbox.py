"""Replies to alerts read from an IMAP mailbox (`kperf-manage poll_mailbox`, the beat task; docs/triage.md).

For a site where kperf cannot receive SMTP: the MTA delivers
`kperf+*@domain` into one mailbox, and kperf polls it with the standard
library's imaplib. Each unread message is read with
kperf.core.mail.inbound.receive and then marked \\Seen and \\Deleted (and the
mailbox expunged), so a message is handled once; one that dies half-way
(the database away) stays unread and is tried at the next poll, and
inbound.receive drops a Message-ID it has already handled. One that fails
GIVE_UP_AFTER polls in a row is marked \\Seen (left in the mailbox for a
look) and recorded as ignored, `unreadable`: a mail that can never be read
would otherwise be tried forever, and enough of them fill every batch.
Two polls never overlap (a PostgreSQL advisory lock; the second returns).
The mail system that delivers into the mailbox must add Authentication-Results
with the authserv-id kperf trusts, as for the listener (kperf.core.mail.authentication).
"""

from __future__ import annotations

import imaplib
import logging
import ssl
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F

from kperf.core.mail import authentication, inbound
from kperf.core.mail.text import printable
from kperf.core.models import UnreadableMail

log = logging.getLogger(__name__)

# A poll reads at most this many messages; the next poll takes the rest.
BATCH = 100
# A message that failed this many polls is given up (marked read, recorded as unreadable).
GIVE_UP_AFTER = 3
# The session advisory lock one poll holds: a beat poll that runs long and the
# next one, or `kperf-manage poll_mailbox` beside beat, would read the same messages.
POLL_LOCK = zlib.crc32(b"kperf.mail_poll") - (1 << 31)


class Mailbox(Protocol):
    """The few IMAP4 calls a poll makes (imaplib.IMAP4 has them)."""

    def uid(self, command: str, *args: str) -> tuple[str, list[object]]: ...

    def expunge(self) -> tuple[str, list[object]]: ...


@dataclass
class PollResult:
    read: int = 0
    failed: int = 0
    given_up: int = 0  # of the failed: marked read and recorded as unreadable
    busy: bool = False  # another poll was running: this one read nothing


def _message_bytes(data: list[object]) -> bytes | None:
    for item in data:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], bytes):
            return item[1]
    return None


def _key(raw: bytes, uid: str) -> str:
    try:
        msgid = inbound.message_id(raw)
    except Exception:  # the message may be what is broken
        msgid = ""
    return f"msgid:{msgid}" if msgid else f"uid:{uid}"


def _failed(raw: bytes, uid: str, error: BaseException) -> bool:
    """Count one more failure of a message; True when it is given up (and recorded as unreadable)."""
    key = _key(raw, uid)
    text = f"{type(error).__name__}: {error}"[:2000]
    with transaction.atomic():
        row, _ = UnreadableMail.objects.select_for_update().get_or_create(key=key)
        UnreadableMail.objects.filter(pk=row.pk).update(attempts=F("attempts") + 1, error=printable(text))
        row.refresh_from_db()
        if row.attempts < GIVE_UP_AFTER:
            return False
        inbound.unreadable(raw, text)
        row.delete()
    return True


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
        except Exception as e:
            result.failed += 1
            try:
                given_up = _failed(raw, uid, e)
            except DatabaseError:  # the database is away: that is no reason to give the message up
                log.exception("IMAP message %s: its failure could not be counted", uid)
                given_up = False
            if given_up:
                log.exception("IMAP message %s could not be read %d times; marked read, recorded", uid, GIVE_UP_AFTER)
                box.uid("STORE", uid, "+FLAGS", "(\\Seen)")
                result.given_up += 1
            else:
                log.exception("IMAP message %s could not be read; it stays unread for the next poll", uid)
            continue
        box.uid("STORE", uid, "+FLAGS", "(\\Seen \\Deleted)")
        UnreadableMail.objects.filter(key=_key(raw, uid)).delete()
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


def _try_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [POLL_LOCK])
        row = cursor.fetchone()
    return bool(row and row[0])


def _unlock() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [POLL_LOCK])
    except DatabaseError as e:  # the connection broke: the lock went with it
        log.warning("IMAP poll lock not released: %s", e)


def poll() -> PollResult | None:
    """One poll of the configured mailbox; None when no KPERF_IMAP_HOST is set.

    When another poll holds the lock, returns at once with `busy` set.
    """
    if not settings.KPERF_IMAP_HOST:
        return None
    if not _try_lock():
        log.info("IMAP poll skipped: another poll of %s is running", settings.KPERF_IMAP_HOST)
        return PollResult(busy=True)
    try:
        box = connect()
        try:
            result = poll_box(box)
        finally:
            try:
                box.close()
                box.logout()
            except (imaplib.IMAP4.error, OSError) as e:
                log.warning("IMAP logout from %s failed: %s", settings.KPERF_IMAP_HOST, e)
    finally:
        _unlock()
    if result.read and (problem := authentication.configuration_problem()):
        log.warning("IMAP poll: replies cannot be authenticated: %s", problem)
    if result.read or result.failed:
        log.info(
            "IMAP poll: %d messages read, %d left for the next poll, %d given up as unreadable",
            result.read,
            result.failed - result.given_up,
            result.given_up,
        )
    return result
