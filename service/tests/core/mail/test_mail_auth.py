"""Replies that must not triage: a From that names someone else, no verdict of the trusted MTA, none configured.

Each mail holds a valid reply token of alice's alert, and each goes in as
an attacker would send it: through the real SMTP listener (aiosmtpd on
loopback), or the IMAP poll's code path. The MTA in front of kperf is
authserv-id MX (KPERF_MAIL_AUTHSERV_ID); what it vouches for is written
as its Authentication-Results header. test_mail_replies.py has the
replies that are accepted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from email.utils import make_msgid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from kperf.core.mail import authentication, mailbox
from kperf.core.mail.listener import MailListener
from kperf.core.models import InboundMail, MachineClass, Triage

from tests.mail_fixtures import Inbox, free_port
from tests.reply_fixtures import MX, Box, alerted, answers, last_mail, send_raw, vouched

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def outbox(request: pytest.FixtureRequest) -> Inbox:
    """Where kperf's own mail goes (test_mail_replies' sink)."""
    inbox: Inbox = request.getfixturevalue("sink")
    return inbox


@pytest.fixture
def smtp_in(request: pytest.FixtureRequest) -> MailListener:
    """kperf's SMTP listener, trusting the MTA named MX (test_mail_replies' listener)."""
    server: MailListener = request.getfixturevalue("listener")
    return server


EVIL = "evil.example"
# The attacker's own domain passes DMARC: a mail system vouches for evil@evil.example, nothing more.
EVIL_PASSES = f"{MX}; dkim=pass header.d={EVIL}; dmarc=pass header.from={EVIL}"


def forged(reply_to: str, headers: list[tuple[str, str]], text: str = "#kperf invalid: noise") -> bytes:
    """A reply written by hand, header by header, as no mail library would write some of them."""
    lines = [f"{name}: {value}" for name, value in headers]
    lines += [f"To: {reply_to}", "Subject: Re: [kperf] #1", f"Message-ID: {make_msgid(domain=EVIL)}"]
    lines += ["Content-Type: text/plain; charset=utf-8", "", text, ""]
    return "\r\n".join(lines).encode()


def refused_and_owner_told(row: Triage, inbox: Inbox, reason: str, says: str) -> None:
    """Nothing changed; the mail is recorded as refused; alice, whose token it holds, hears of it, and only she."""
    row.refresh_from_db()
    assert (row.state, row.events.count()) == ("new", 1)
    mail = last_mail()
    assert (mail.outcome, mail.reason) == ("ignored", reason), mail.detail
    assert says in " ".join(mail.detail.split())
    [(to, answer)] = answers(inbox)
    assert to == ["alice@example.org"] and "Nothing was changed" in answer.get_content()


@pytest.mark.parametrize(
    ("from_headers", "says"),
    [
        # The probe's shapes: a mail client shows alice, the domain that passed is evil.example.
        ([("From", f"alice@example.org <evil@{EVIL}>")], "is malformed"),
        ([("From", f'"alice@example.org" <evil@{EVIL}>')], "holds another address than evil@evil.example"),
        ([("From", f"=?utf-8?q?alice=40example.org?= <evil@{EVIL}>")], "holds another address"),
        ([("From", f"evil@{EVIL} (alice@example.org)")], "holds another address"),
        # Fullwidth commercial at (U+FF20), base64-encoded: NFKC reads it as '@'.
        ([("From", f"=?utf-8?b?YWxpY2XvvKBleGFtcGxlLm9yZw==?= <evil@{EVIL}>")], "holds another address"),
        ([("From", f"alice@example.org, evil@{EVIL}")], "several addresses or a group"),
        ([("From", f"friends: alice@example.org, evil@{EVIL};")], "several addresses or a group"),
        ([("From", "alice@example.org"), ("From", f"evil@{EVIL}")], "2 From headers"),
        ([("From", "Alice <alice@example.org>"), ("Sender", f"evil@{EVIL}")], "its Sender, evil@evil.example"),
        ([("From", '"alice"@example.org')], "reads as different addresses"),
    ],
)
def test_a_from_that_is_not_one_plain_address_of_its_author_is_refused(
    outbox: Inbox,
    smtp_in: MailListener,
    alice: User,
    qemu_class: MachineClass,
    from_headers: list[tuple[str, str]],
    says: str,
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    raw = forged(reply_to, [("Authentication-Results", EVIL_PASSES), *from_headers])
    send_raw(smtp_in, f"evil@{EVIL}", reply_to, raw)
    refused_and_owner_told(row, outbox, "bad-from", says)


@pytest.mark.parametrize(
    ("results", "says"),
    [
        ([], "no Authentication-Results header of mx.kperf.example.org"),
        # Added by the sender: another authserv-id, or the MTA's name hidden in an encoded word.
        ([f"{EVIL}; dmarc=pass header.from=example.org"], "no Authentication-Results header"),
        ([f"=?utf-8?q?{MX}=3B_dmarc=3Dpass_header.from=3Dexample.org?="], "no Authentication-Results header"),
        # Shapes a rule at the MTA that removes forged headers by their authserv-id would not match.
        ([f'"{MX}"; dmarc=pass header.from=example.org'], "no Authentication-Results header"),
        ([f"(hi) {MX}; dmarc=pass header.from=example.org"], "no Authentication-Results header"),
        ([f"{MX}; spf=fail smtp.mailfrom=example.org; dmarc=fail header.from=example.org"], "dmarc=fail"),
        ([f"{MX}; dkim=pass header.d={EVIL}"], "neither a DMARC pass for example.org nor a DKIM"),
        ([f"{MX}; dkim=pass header.d=org"], "neither a DMARC pass"),
        ([f"{MX}; dmarc=pass header.from={EVIL}"], "neither a DMARC pass for example.org"),
        ([f"{MX}; dkim=fail header.d=example.org"], "dkim=fail (d=example.org)"),
        # The real verdict above a forged one the MTA failed to remove.
        ([f"{MX}; dmarc=fail header.from=example.org", f"{MX}; dmarc=pass header.from=example.org"], "contradict"),
    ],
)
def test_a_reply_the_trusted_mta_does_not_vouch_for_is_refused(
    outbox: Inbox,
    smtp_in: MailListener,
    alice: User,
    qemu_class: MachineClass,
    results: list[str],
    says: str,
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    raw = forged(reply_to, [*(("Authentication-Results", r) for r in results), ("From", "Alice <alice@example.org>")])
    send_raw(smtp_in, "alice@example.org", reply_to, raw)
    refused_and_owner_told(row, outbox, "unauthenticated", says)


@pytest.mark.parametrize(
    "results",
    [
        f"{MX}; dkim=pass header.d=example.org header.s=mail",  # DKIM of the From domain, no DMARC result
        f"{MX}; dkim=pass header.i=@mail.example.org",  # relaxed alignment: a subdomain signs
        f"{MX.upper()} 1; spf=pass smtp.mailfrom=example.org (aligned); dmarc=pass (p=reject) header.from=example.org",
    ],
)
def test_a_reply_the_trusted_mta_vouches_for_triages(
    outbox: Inbox,
    smtp_in: MailListener,
    alice: User,
    qemu_class: MachineClass,
    results: str,
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    raw = forged(
        reply_to, [("Authentication-Results", results), ("From", "Alice <alice@example.org>")], "#kperf confirmed"
    )
    send_raw(smtp_in, "alice@example.org", reply_to, raw)
    row.refresh_from_db()
    assert (last_mail().outcome, row.state) == ("applied", "confirmed")


@pytest.fixture
def unconfigured(settings: Any, outbox: Inbox, caplog: pytest.LogCaptureFixture) -> Iterator[MailListener]:
    """The listener of a service whose operator configured no trusted authserv-id."""
    settings.KPERF_MAIL_AUTHSERV_IDS = []
    server = MailListener("127.0.0.1", free_port())
    with caplog.at_level(logging.WARNING, logger="kperf.core.mail.listener"):
        server.start()
    try:
        yield server
    finally:
        server.stop()


def test_without_a_trusted_authserv_id_every_reply_is_refused_and_the_operator_is_told(
    outbox: Inbox,
    unconfigured: MailListener,
    alice: User,
    qemu_class: MachineClass,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Said when the listener starts (the fixture's setup), for the operator.
    started = " ".join(r.getMessage() for r in caplog.get_records("setup"))
    assert "KPERF_MAIL_AUTHSERV_ID" in started and "every reply is refused" in started
    row, reply_to = alerted(alice, qemu_class)
    # Even with a verdict that would pass: kperf cannot tell whose header it is.
    raw = forged(reply_to, [("Authentication-Results", vouched("alice@example.org")), ("From", "alice@example.org")])
    send_raw(unconfigured, "alice@example.org", reply_to, raw)
    refused_and_owner_told(row, outbox, "auth-not-configured", "has set neither KPERF_MAIL_AUTHSERV_ID")
    # The admin's list of mail received says why, for the operator.
    staff = Client()
    staff.force_login(User.objects.create_superuser("root", "root@example.org"))
    listing = staff.get("/admin/core/inboundmail/").content.decode()
    assert "auth-not-configured" in listing


def test_a_closed_setup_may_accept_unauthenticated_replies_but_never_a_forged_from(
    outbox: Inbox,
    unconfigured: MailListener,
    alice: User,
    qemu_class: MachineClass,
    settings: Any,
) -> None:
    settings.KPERF_MAIL_ACCEPT_UNAUTHENTICATED = True
    assert authentication.configuration_problem() == ""
    row, reply_to = alerted(alice, qemu_class)
    send_raw(unconfigured, f"evil@{EVIL}", reply_to, forged(reply_to, [("From", f"alice@example.org <evil@{EVIL}>")]))
    assert last_mail().reason == "bad-from"
    send_raw(unconfigured, "alice@example.org", reply_to, forged(reply_to, [("From", "alice@example.org")]))
    row.refresh_from_db()
    assert (last_mail().outcome, row.state) == ("applied", "invalid")


def test_the_mailbox_poll_refuses_what_the_listener_refuses(
    outbox: Inbox, alice: User, qemu_class: MachineClass
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    delivered = [("Delivered-To", reply_to)]
    box = Box(
        {
            "1": forged(
                reply_to,
                [*delivered, ("Authentication-Results", EVIL_PASSES), ("From", f"alice@example.org <evil@{EVIL}>")],
            ),
            "2": forged(
                reply_to,
                [
                    *delivered,
                    ("Authentication-Results", f"{EVIL}; dmarc=pass header.from=example.org"),
                    ("From", "alice@example.org"),
                ],
            ),
            "3": forged(
                reply_to,
                [*delivered, ("Authentication-Results", vouched("alice@example.org")), ("From", "alice@example.org")],
                "#kperf expected",
            ),
        }
    )
    result = mailbox.poll_box(box)
    assert (result.read, result.failed) == (3, 0)
    reasons = [m.reason or m.outcome for m in InboundMail.objects.order_by("id")]
    assert reasons == ["bad-from", "unauthenticated", "applied"]
    row.refresh_from_db()
    assert row.state == "expected"


@pytest.mark.parametrize(
    ("signer", "domain", "ok"),
    [
        ("example.org", "example.org", True),
        ("example.org", "lists.example.org", True),
        ("mail.example.org", "example.org", True),
        ("org", "example.org", False),
        ("notexample.org", "example.org", False),
        ("evil.example", "example.org", False),
        ("", "example.org", False),
        # A public suffix of two labels is nobody's organisation: without the list, `d=co.uk`
        # vouched for every address at a .co.uk domain, and `d=github.io` for every Pages site.
        ("co.uk", "example.co.uk", False),
        ("github.io", "alice.github.io", False),
        ("bob.github.io", "alice.github.io", False),
        ("mail.example.co.uk", "example.co.uk", True),
        ("example.co.uk", "other.co.uk", False),
    ],
)
def test_dkim_alignment_is_relaxed_but_never_a_public_suffix(signer: str, domain: str, ok: bool) -> None:
    assert authentication.aligned(signer, domain) is ok
