"""Shared test scenarios, moved out of test_mail_replies.py so no test module imports another."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email.utils import parseaddr
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth.models import User

from kperf.core.mail import alerts, replies
from kperf.core.mail.listener import MailListener
from kperf.core.models import (
    InboundMail,
    MachineClass,
    Triage,
)

from tests.mail_fixtures import Inbox, free_port
from tests.triage_fixtures import regressed_submission

DOMAIN = "kperf.example.org"


KPERF = f"kperf <kperf@{DOMAIN}>"


# The authserv-id of the MTA in front of kperf (KPERF_MAIL_AUTHSERV_ID).
MX = "mx.kperf.example.org"


def vouched(sender: str) -> str:
    """The Authentication-Results the MTA adds to a mail from `sender` that passed DMARC."""
    domain = parseaddr(sender)[1].rpartition("@")[2]
    return f"{MX}; spf=pass smtp.mailfrom={domain}; dkim=pass header.d={domain}; dmarc=pass header.from={domain}"


@pytest.fixture
def sink(settings: Any) -> Iterator[Inbox]:
    """Where kperf's own mail goes (alerts and answers)."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.KPERF_MAIL_DOMAIN = DOMAIN
    settings.DEFAULT_FROM_EMAIL = KPERF
    settings.KPERF_BASE_URL = "https://kperf.example.org"
    settings.KPERF_MAIL_AUTHSERV_IDS = [MX]
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    try:
        yield inbox
    finally:
        controller.stop()


@pytest.fixture
def listener(sink: Inbox) -> Iterator[MailListener]:
    server = MailListener("127.0.0.1", free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def alerted(owner: User, mclass: MachineClass) -> tuple[Triage, str]:
    """A regressed submission, its alert queued with a reply token; (its triage, the Reply-To address)."""
    sub = regressed_submission(owner, mclass)
    alert = alerts.submission_finished(sub)
    token = replies.issue(alert, Triage.objects.get(submission=sub))
    assert token is not None
    return token.triage, replies.address(token.token)


def answers(sink: Inbox) -> list[tuple[list[str], Any]]:
    """kperf's answers that went out (not the alerts)."""
    alerts.send_pending()
    return [(to, m) for to, m in sink.messages if m["X-Kperf-Alert"] == "reply"]


def last_mail() -> InboundMail:
    mail = InboundMail.objects.order_by("-id").first()
    assert mail is not None
    return mail


class Box:
    """An IMAP mailbox as poll_box sees it, to check what it marks and when (the network path is not here)."""

    def __init__(self, messages: dict[str, bytes]) -> None:
        self.messages, self.flags, self.expunged = messages, {u: set[str]() for u in messages}, 0

    def uid(self, command: str, *args: str) -> tuple[str, list[object]]:
        if command == "SEARCH":
            return "OK", [" ".join(u for u in self.messages if "\\Seen" not in self.flags[u]).encode()]
        if command == "FETCH":
            return "OK", [(f"{args[0]} (BODY[] {{n}}".encode(), self.messages[args[0]]), b")"]
        assert command == "STORE" and args[1] == "+FLAGS"
        self.flags[args[0]] |= set(args[2].strip("()").split())
        return "OK", []

    def expunge(self) -> tuple[str, list[object]]:
        self.expunged += 1
        return "OK", []


def send_raw(listener: MailListener, sender: str, to: str, raw: bytes) -> None:
    with smtplib.SMTP("127.0.0.1", listener.port) as client:
        client.sendmail(sender, [to], raw)
