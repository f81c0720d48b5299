"""kperf's SMTP listener for replies to its alerts (`kperf-manage mail_listener`, docs/triage.md).

A small aiosmtpd server: it accepts mail only for kperf's reply addresses
(`<KPERF_MAIL_LOCAL_PART>+<token>@<KPERF_MAIL_DOMAIN>`), so it relays
nothing, and hands each message to kperf.core.mail.inbound.receive. It is meant
to sit behind the site's MTA (which forwards `kperf+*@domain` to it) on
loopback, not on the open internet: it does no TLS. Who sent a reply is
what that MTA's Authentication-Results header says (DMARC, DKIM), read only
from the authserv-id the operator trusts (kperf.core.mail.authentication).

On a laptop (`make up`) the same listener is also the local mailbox: with
KPERF_MAIL_LOCAL_MAILDIR set, kperf's own mail (alerts, answers) is sent to
it and every message not for a reply address is stored in that Maildir,
where `kperf mail` reads it and answers through this listener. It then
accepts mail for any address, so it refuses to listen anywhere but on
loopback (docs/alerts.md, "Mail on a laptop").
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import mailbox
import signal
import threading
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from django.conf import settings
from django.db import connection

from kperf.core.mail import authentication, inbound, replies

log = logging.getLogger(__name__)

# Over this a message is refused in the SMTP dialogue (552), and the sending
# MTA bounces it to its sender; between KPERF_MAIL_MAX_BYTES and this, kperf
# reads its headers and answers "too large" itself.
REFUSE_FACTOR = 4


def _receive(content: bytes, mail_from: str, rcpt_tos: list[str]) -> str:
    # Runs in a worker thread: the ORM may not run inside the event loop.
    # Replies are few, so each one connects afresh rather than leaving a
    # connection open in an idle pool thread.
    try:
        mail = inbound.receive(content, mail_from, rcpt_tos)
        return f"{mail.outcome} {mail.reason}".strip()
    finally:
        connection.close()


def _deliver(maildir: Path, content: bytes) -> None:
    """Store one message in the local Maildir (written to tmp/, then moved to new/: a reader never sees half)."""
    mailbox.Maildir(maildir, create=True).add(content)


class ReplyHandler:
    """aiosmtpd handler: RCPT only for reply addresses (and, with a local Maildir, any
    other address, stored there); DATA for reply addresses goes to kperf.core.mail.inbound."""

    def __init__(self, maildir: Path | None = None) -> None:
        self.maildir = maildir

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        if not replies.is_reply_address(address) and self.maildir is None:
            return "550 5.1.1 not a kperf reply address: kperf reads only replies to its alerts"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        if isinstance(envelope.content, bytes) and not content:
            content = envelope.content
        loop = asyncio.get_running_loop()
        local = [a for a in envelope.rcpt_tos if not replies.is_reply_address(a)]
        if local and self.maildir is not None:
            try:
                await loop.run_in_executor(None, _deliver, self.maildir, content)
            except OSError:
                log.exception("mail to %s could not be stored in %s", ", ".join(local), self.maildir)
                return "451 4.3.0 the local mailbox cannot store the mail now; try again later"
            log.info("mail from %s to %s: stored in %s", envelope.mail_from or "<>", ", ".join(local), self.maildir)
        rcpts = [a for a in envelope.rcpt_tos if replies.is_reply_address(a)]
        if not rcpts:
            return "250 2.0.0 delivered"
        try:
            what = await loop.run_in_executor(None, _receive, content, envelope.mail_from or "", rcpts)
        except Exception:
            # The database is away: the sending MTA keeps the mail and tries again.
            log.exception("mail from %s could not be read; asked the sender to retry", envelope.mail_from)
            return "451 4.3.0 kperf cannot store the mail now; try again later"
        log.info("mail from %s to %s: %s", envelope.mail_from or "<>", ", ".join(rcpts), what)
        # Accepted whatever became of it: an ignored reply is answered by kperf, not bounced.
        return "250 2.0.0 accepted"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MailListener:
    """The SMTP listener on host:port, in a thread of its own (aiosmtpd's Controller)."""

    def __init__(self, host: str | None = None, port: int | None = None, maildir: Path | None = None) -> None:
        self.host = host if host is not None else settings.KPERF_MAIL_LISTEN_HOST
        self.port = port if port is not None else settings.KPERF_MAIL_LISTEN_PORT
        local = maildir if maildir is not None else settings.KPERF_MAIL_LOCAL_MAILDIR
        self.maildir = Path(local) if local else None
        if self.maildir is not None and not _loopback(self.host):
            raise ValueError(
                f"KPERF_MAIL_LOCAL_MAILDIR makes the listener accept mail for any address: it listens only on "
                f"loopback (127.0.0.1, ::1), not on {self.host}; unset it on a server (docs/alerts.md)"
            )
        self.controller = Controller(
            ReplyHandler(self.maildir),
            hostname=self.host,
            port=self.port,
            server_hostname=settings.KPERF_MAIL_DOMAIN or None,
            data_size_limit=settings.KPERF_MAIL_MAX_BYTES * REFUSE_FACTOR,
        )

    def start(self) -> None:
        if not replies.enabled():
            log.warning("KPERF_MAIL_DOMAIN is not set: alerts carry no Reply-To and every recipient is refused")
        if problem := authentication.configuration_problem():
            log.warning("replies cannot be authenticated: %s", problem)
        self.controller.start()
        where = f"; other mail stored in {self.maildir}" if self.maildir else ""
        log.info("listening for replies on %s:%d%s", self.host, self.port, where)

    def stop(self) -> None:
        self.controller.stop()

    def serve_forever(self) -> None:
        """Start, then run until SIGINT or SIGTERM."""
        done = threading.Event()

        def on_signal(signum: int, frame: Any) -> None:
            done.set()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        self.start()
        try:
            while not done.wait(1.0):
                pass
        finally:
            self.stop()
