"""Replies whose headers hold raw 8-bit bytes, as many mail clients still write a name (`From: Alicé`).

RFC 5322 wants such text as an encoded word (`=?utf-8?q?Alic=C3=A9?=`);
plenty of mail arrives with the bytes as they are, in UTF-8 or in latin-1.
Each mail goes in through the real SMTP listener (aiosmtpd on loopback),
as the site's MTA would hand it over, and must be accepted (250),
recorded, and applied like a plain reply: a 451 makes the MTA retry it
for days, and the person never learns why their reply did nothing.
"""

from __future__ import annotations

import smtplib
from email.utils import make_msgid

import pytest
from django.contrib.auth.models import User

from kperf.core.mail import inbound
from kperf.core.mail.listener import MailListener
from kperf.core.models import InboundMail, MachineClass, Triage

from tests.mail_fixtures import Inbox
from tests.reply_fixtures import alerted, answers, last_mail, vouched

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def outbox(request: pytest.FixtureRequest) -> Inbox:
    """Where kperf's own mail goes (test_mail_replies' sink)."""
    inbox: Inbox = request.getfixturevalue("sink")
    return inbox


@pytest.fixture
def smtp_in(request: pytest.FixtureRequest) -> MailListener:
    """kperf's SMTP listener, trusting the MTA of test_mail_replies (its listener)."""
    server: MailListener = request.getfixturevalue("listener")
    return server


def raw_reply(reply_to: str, name: bytes, msgid: bytes, subject: bytes = b"Re: [kperf] #1") -> bytes:
    """alice's reply, authenticated by the MTA, with `name`, `msgid` and `subject` written byte for byte."""
    head = f"Authentication-Results: {vouched('alice@example.org')}\r\n".encode()
    head += b"From: " + name + b" <alice@example.org>\r\n"
    head += f"To: {reply_to}\r\n".encode()
    head += b"Subject: " + subject + b"\r\nMessage-ID: " + msgid + b"\r\n"
    return head + b"Content-Type: text/plain; charset=utf-8\r\n\r\n#kperf expected: fine by us\r\n"


def send(server: MailListener, reply_to: str, raw: bytes) -> tuple[int, bytes]:
    """Hand the mail over as an MTA does; (the listener's answer to the data, its text)."""
    with smtplib.SMTP("127.0.0.1", server.port) as client:
        client.ehlo()
        client.mail("alice@example.org")
        client.rcpt(reply_to)
        return client.data(raw)


def applied(row: Triage, mail: InboundMail) -> None:
    row.refresh_from_db()
    assert (mail.outcome, mail.from_address, mail.token is not None) == ("applied", "alice@example.org", True)
    assert (row.state, row.note) == ("expected", "fine by us")


@pytest.mark.parametrize("charset", ["utf-8", "latin-1"])
def test_a_reply_with_raw_8bit_bytes_in_its_from_name_and_message_id_is_applied(
    outbox: Inbox, smtp_in: MailListener, alice: User, qemu_class: MachineClass, charset: str
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    msgid = "<réponse.1@example.org>"
    name, subject = "Alicé Dupré".encode(charset), "Re: [kperf] déjà vu".encode(charset)
    raw = raw_reply(reply_to, name, msgid.encode(charset), subject)
    code, _ = send(smtp_in, reply_to, raw)
    assert code == 250  # not 451: the MTA would retry it for days
    mail = last_mail()
    applied(row, mail)
    # Stored as text: the bytes as the charset wrote them, or, where they are no UTF-8, as latin-1 reads them.
    assert (mail.message_id, mail.subject) == (msgid, "Re: [kperf] déjà vu")
    assert answers(outbox) == []  # a reply that worked is not answered


def test_the_same_raw_8bit_reply_read_twice_is_applied_once(
    outbox: Inbox, smtp_in: MailListener, alice: User, qemu_class: MachineClass
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    raw = raw_reply(reply_to, b"Alic\xe9", b"<r\xe9ponse.2@example.org>")
    assert send(smtp_in, reply_to, raw)[0] == 250
    applied(row, last_mail())
    events = row.events.count()
    # The IMAP poll's path reads the very same mail again: its Message-ID is the one stored.
    again = inbound.receive(raw)
    assert (again.reason, row.events.count()) == ("duplicate", events)


def test_a_reply_with_nul_and_undecodable_bytes_in_a_long_message_id_is_stored_within_its_column(
    outbox: Inbox, smtp_in: MailListener, alice: User, qemu_class: MachineClass
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    msgid = b"<" + b"\xff\xfe\x00" * 200 + make_msgid(domain="example.org").encode() + b">"
    raw = raw_reply(reply_to, b"\xc3\xff Alice \x00", msgid)
    assert send(smtp_in, reply_to, raw)[0] == 250
    mail = last_mail()
    applied(row, mail)
    assert len(mail.message_id) <= 300 and "\x00" not in mail.message_id
    mail.message_id.encode("utf-8")  # valid text: no lone surrogates left of undecodable bytes


def test_a_raw_8bit_name_that_shows_another_address_is_refused_and_recorded(
    outbox: Inbox, smtp_in: MailListener, alice: User, qemu_class: MachineClass
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    # A fullwidth at sign (U+FF20) in raw UTF-8: a mail client shows "boss@example.org", nearly.
    shown = "boss\uff20example.org"
    raw = raw_reply(reply_to, shown.encode(), b"<x.3@example.org>")
    assert send(smtp_in, reply_to, raw)[0] == 250
    mail = last_mail()
    assert (mail.outcome, mail.reason) == ("ignored", "bad-from")
    assert f"{shown} <alice@example.org>" in mail.detail  # written as the client shows it
    row.refresh_from_db()
    assert row.state == "new"
