"""Triage by replying to the alert mail, through a real SMTP listener (kperf's, aiosmtpd on loopback).

Mail goes in with smtplib to kperf.core.mail.listener.MailListener, the
server `kperf-manage mail_listener` runs; kperf's answers go out through
kperf.core.mail.alerts to an aiosmtpd sink, as every alert does. The listener
reads in its own thread with its own database connection, so these tests
commit (transaction=True). Every reply carries the Authentication-Results
the site's MTA (authserv-id MX, the one kperf trusts) adds to a mail whose
DMARC passed; test_mail_auth.py has the mails that are refused.
"""

from __future__ import annotations

import email
import email.policy
import secrets
import smtplib
import threading
from datetime import timedelta
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.db import connection, connections
from django.test import Client
from django.utils import timezone

from kperf.core import triage
from kperf.core.mail import alerts, commands, inbound, mailbox, replies
from kperf.core.mail.listener import MailListener
from kperf.core.models import (
    Alert,
    InboundMail,
    MachineClass,
    ReplyToken,
    Submission,
    TrackedBranch,
    Tree,
    Triage,
    UnreadableMail,
)
from kperf.core.tracking import branches

from tests.conftest import Api
from tests.mail_fixtures import Inbox, finished_submission, free_port
from tests.reply_fixtures import DOMAIN, KPERF, MX, Box, alerted, answers, last_mail, send_raw, vouched  # noqa: F401
from tests.tracking_fixtures import commit_n, finish_builds, run_jobs, track
from tests.triage_fixtures import regressed_submission

pytestmark = pytest.mark.django_db(transaction=True)

SMTP_POLICY = email.policy.SMTP


def reply(
    listener: MailListener,
    sender: str,
    to: str,
    text: str | None,
    *,
    html: str | None = None,
    headers: dict[str, str] | None = None,
    envelope_from: str | None = None,
    authenticated: bool = True,
) -> str:
    """Send a reply as a mail client would, through the MTA that vouches for it; returns its Message-ID."""
    msg = EmailMessage()
    if authenticated:
        msg["Authentication-Results"] = vouched(sender)
    msg["From"], msg["To"], msg["Subject"] = sender, to, "Re: [kperf] #1 mm-fix vs v6.1: 1 regression"
    msg["Message-ID"] = make_msgid(domain="example.org")
    for name, value in (headers or {}).items():
        msg[name] = value
    if text is not None:
        msg.set_content(text)
        if html is not None:
            msg.add_alternative(html, subtype="html")
    elif html is not None:
        msg.set_content(html, subtype="html")
    with smtplib.SMTP("127.0.0.1", listener.port) as client:
        # CRLF line ends, as a mail client sends them (smtplib sends bytes as they are).
        client.sendmail(sender if envelope_from is None else envelope_from, [to], msg.as_bytes(policy=SMTP_POLICY))
    return str(msg["Message-ID"])


def test_a_reply_to_the_alert_mail_triages_the_regression(
    sink: Inbox, listener: MailListener, alice: User, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    sub = finished_submission(alice, qemu_class, runner_api[1], tmp_path, head_level=500.0)
    alerts.send_pending()
    (to, alert_mail), *_ = sink.messages
    assert to == ["alice@example.org"]
    reply_to = str(alert_mail["Reply-To"])
    assert reply_to.startswith("kperf+") and reply_to.endswith(f"@{DOMAIN}")

    msgid = reply(
        listener,
        "Alice <alice@example.org>",
        reply_to,
        "#kperf expected: the series trades fork speed\nfor memory\n\nOn Mon, kperf wrote:\n> [kperf] #1 ...\n",
    )
    row = Triage.objects.get(submission=sub)
    assert (row.state, row.note) == ("expected", "the series trades fork speed for memory")
    last = row.events.order_by("-id").first()
    assert last is not None and (last.by, last.via, last.from_state) == (alice, "mail", "new")
    mail = last_mail()
    assert (mail.outcome, mail.message_id, mail.token is not None) == ("applied", msgid, True)
    assert answers(sink) == []  # a reply that worked is not answered

    # The same command again changes nothing; `fixed` with its commit does.
    reply(listener, "alice@example.org", reply_to, "#kperf expected: the series trades fork speed for memory")
    assert last_mail().outcome == "unchanged" and row.events.count() == 2
    reply(listener, "alice@example.org", reply_to, "#KPERF fixed 1A2B3C4: reverted")
    row.refresh_from_db()
    assert (row.state, row.fixed_by, row.note) == ("fixed", "1a2b3c4", "reverted")


def test_a_tracked_branch_regression_is_triaged_by_replying_to_its_alert(
    sink: Inbox,
    listener: MailListener,
    staff_api: Api,
    django_user_model: Any,
    runner_api: tuple[Any, Api],
    small_tree: Path,
    qemu_class: MachineClass,
    settings_dirs: Any,
    tmp_path: Path,
) -> None:
    # The lab's reference series: its watchers may triage it (docs/triage.md), so its alert has a Reply-To.
    django_user_model.objects.create_user("bob", "bob@example.org", "bob-password-1")
    carol = django_user_model.objects.create_user("carol", "carol@example.org", "carol-password-1")
    data = track(staff_api, small_tree, boots=2, max_commits=50, notify=["bob@example.org"])
    branch = TrackedBranch.objects.get(pk=data["id"])
    rng = np.random.default_rng(3)
    branches.poll_branch(branch.pk)
    commit_n(small_tree, 13)
    branches.poll_branch(branch.pk)
    levels = {c.sha: 1000.0 for c in branch.commits.all()}
    finish_builds(branch, tmp_path)
    run_jobs(runner_api[1], levels, rng)
    culprit, *rest = commit_n(small_tree, 8)
    branches.poll_branch(branch.pk)
    levels.update({sha: 880.0 for sha in [culprit, *rest]})
    finish_builds(branch, tmp_path)
    run_jobs(runner_api[1], levels, rng)
    alerts.send_pending()
    (to, alert_mail), *_ = [(to, m) for to, m in sink.messages if m["X-Kperf-Alert"] == "change-point"]
    assert sorted(to) == ["admin@example.org", "bob@example.org"]
    reply_to = str(alert_mail["Reply-To"])
    token = ReplyToken.objects.get(token=replies.token_of(reply_to))

    # Someone who is no watcher decides nothing, even with the token (a forwarded alert).
    reply(listener, "carol@example.org", reply_to, "#kperf invalid: noise")
    assert (last_mail().outcome, last_mail().reason) == ("ignored", "not-allowed")
    reply(listener, "bob@example.org", reply_to, "#kperf confirmed: bisecting it")
    row = token.triage
    row.refresh_from_db()
    assert (row.kind, row.branch_id, row.state, row.note) == ("change-point", branch.pk, "confirmed", "bisecting it")
    assert row.change_point is not None and row.change_point.commit.sha == culprit
    last = row.events.order_by("-id").first()
    assert last is not None and last.by is not None and (last.by.username, last.via) == ("bob", "mail")
    (to, answer), *_ = answers(sink)
    assert to == [carol.email] and "only the owner" in answer.get_content()


def test_a_forged_reply_changes_nothing_and_only_the_owner_hears_of_it(
    sink: Inbox, listener: MailListener, alice: User, django_user_model: Any, qemu_class: MachineClass
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    reply(listener, "Mallory <mallory@evil.example>", reply_to, "#kperf invalid: noise")
    row.refresh_from_db()
    assert (row.state, row.events.count()) == ("new", 1)
    assert (last_mail().outcome, last_mail().reason) == ("ignored", "unknown-sender")
    # No backscatter to the forged address: the token's owner is told someone else holds it.
    (to, answer), *more = answers(sink)
    assert to == ["alice@example.org"] and not more
    assert "mallory@evil.example" in answer.get_content() and "Nothing was changed" in answer.get_content()
    assert answer["Auto-Submitted"] == "auto-replied"

    # A kperf user who may not triage it is answered, and nothing changes either.
    django_user_model.objects.create_user("bob", "bob@example.org", "bob-password-1")
    reply(listener, "bob@example.org", reply_to, "#kperf invalid: noise")
    row.refresh_from_db()
    assert row.state == "new" and last_mail().reason == "not-allowed"
    (to, answer), *_ = answers(sink)[1:]
    assert to == ["bob@example.org"] and "only the owner" in answer.get_content()
    assert answer["In-Reply-To"] == f"<{last_mail().message_id.strip('<>')}>"


def test_replies_to_unknown_or_expired_tokens_are_answered_and_change_nothing(
    sink: Inbox, listener: MailListener, alice: User, qemu_class: MachineClass
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    reply(listener, "alice@example.org", replies.address(secrets.token_hex(16)), "#kperf invalid")
    assert last_mail().reason == "unknown-token"
    ReplyToken.objects.filter(triage=row).update(expires=timezone.now() - timedelta(seconds=1))
    reply(listener, "alice@example.org", reply_to, "#kperf invalid")
    assert last_mail().reason == "expired-token"
    row.refresh_from_db()
    assert row.state == "new"
    said = [m.get_content() for _, m in answers(sink)]
    assert len(said) == 2 and "not one kperf handed out" in said[0] and "90 days old" in " ".join(said[1].split())
    # Mail for anyone else is refused in the SMTP dialogue: the listener relays nothing.
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        reply(listener, "alice@example.org", "root@" + DOMAIN, "#kperf invalid")
    # A stranger's mail to an unknown token is not answered at all (it could be forged).
    reply(listener, "someone@elsewhere.example", replies.address(secrets.token_hex(16)), "#kperf invalid")
    assert last_mail().reason == "unknown-token" and last_mail().answer is None


def test_an_html_only_reply_is_answered_to_send_plain_text_and_a_bad_command_with_the_grammar(
    sink: Inbox, listener: MailListener, alice: User, qemu_class: MachineClass
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    reply(listener, "alice@example.org", reply_to, None, html="<p>#kperf expected: fine</p>")
    assert last_mail().reason == "html-only"
    # With a plain-text part beside the HTML, the plain text is read.
    reply(listener, "alice@example.org", reply_to, "#kperf maybe", html="<p>#kperf expected</p>")
    assert last_mail().reason == "bad-command"
    row.refresh_from_db()
    assert row.state == "new"
    (_, plain), (_, bad) = answers(sink)
    assert "Send it as plain text" in plain.get_content()
    assert "unknown triage state 'maybe'" in bad.get_content() and "#kperf expected:" in bad.get_content()


def test_a_huge_reply_is_answered_too_large_and_a_far_larger_one_is_refused(
    sink: Inbox, listener: MailListener, alice: User, qemu_class: MachineClass, settings: Any
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    limit = settings.KPERF_MAIL_MAX_BYTES
    reply(listener, "alice@example.org", reply_to, "#kperf invalid: noise\n" + ("x" * 70 + "\n") * (limit // 70 + 10))
    assert (last_mail().reason, last_mail().size > limit) == ("too-large", True)
    row.refresh_from_db()
    assert row.state == "new"
    (_, answer), *_ = answers(sink)
    assert "kperf reads replies of at most" in " ".join(answer.get_content().split())
    # smtplib announces the size (ESMTP SIZE), so the listener refuses it before the data.
    with pytest.raises(smtplib.SMTPSenderRefused) as refused:
        reply(listener, "alice@example.org", reply_to, "#kperf invalid\n" + ("x" * 70 + "\n") * (5 * limit // 70))
    assert refused.value.smtp_code == 552
    assert InboundMail.objects.count() == 1


@pytest.mark.parametrize(
    ("headers", "envelope_from", "reason"),
    [
        ({"Auto-Submitted": "auto-replied"}, None, "auto-reply"),
        ({"Precedence": "bulk"}, None, "auto-reply"),
        ({"X-Autoreply": "yes"}, None, "auto-reply"),
        ({}, "", "bounce"),
        ({"List-Id": "<linux-mm.kvack.org>"}, None, "list"),
    ],
)
def test_an_automatic_reply_is_never_answered(
    sink: Inbox,
    listener: MailListener,
    alice: User,
    qemu_class: MachineClass,
    headers: dict[str, str],
    envelope_from: str | None,
    reason: str,
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    # Even one that carries a valid command from the owner: a robot does not triage.
    reply(listener, "alice@example.org", reply_to, "#kperf invalid", headers=headers, envelope_from=envelope_from)
    assert (last_mail().outcome, last_mail().reason) == ("ignored", reason)
    row.refresh_from_db()
    assert row.state == "new"
    assert answers(sink) == []


def test_kperf_never_answers_its_own_mail_nor_anyone_without_end(
    sink: Inbox, listener: MailListener, alice: User, qemu_class: MachineClass, settings: Any
) -> None:
    _, reply_to = alerted(alice, qemu_class)
    reply(listener, "alice@example.org", reply_to, "not a command")
    (_, answer), *_ = answers(sink)
    # kperf's answer comes back to it (a forwarding rule, a bounce loop): dropped, unanswered.
    raw = answer.as_bytes(policy=SMTP_POLICY)
    with smtplib.SMTP("127.0.0.1", listener.port) as client:
        client.sendmail(f"kperf@{DOMAIN}", [reply_to], raw)
    assert (last_mail().reason, last_mail().answer) == ("loop", None)
    # A robot that ignores Auto-Submitted gets a few answers a day, then none.
    settings.KPERF_MAIL_ANSWERS_PER_DAY = 3
    for _ in range(4):
        reply(listener, "alice@example.org", reply_to, "still not a command")
    assert Alert.objects.filter(kind="reply").count() == 3
    assert len(answers(sink)) == 3


def test_an_alert_copied_to_a_mailing_list_gets_no_reply_address(
    alice: User, qemu_class: MachineClass, settings: Any
) -> None:
    settings.KPERF_MAIL_ALLOWED_RECIPIENTS = ["kvack.org"]  # the operator lets results go to the list
    sub = regressed_submission(alice, qemu_class)
    Submission.objects.filter(pk=sub.pk).update(mail_to=["linux-mm@kvack.org"])
    sub.refresh_from_db()
    alert = alerts.submission_finished(sub)
    assert replies.issue(alert, Triage.objects.get(submission=sub)) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("#kperf expected: trades forks\nfor memory\n\n> quoted", ("expected", "trades forks for memory", "")),
        ("On Tue, kperf wrote:\n> the alert\n\n#kperf won't fix", ("won't fix", "", "")),
        ("#kperf fixed 1a2b3c4: reverted", ("fixed", "reverted", "1a2b3c4")),
        ("#kperf fixed by 1a2b3c4", ("fixed", "", "1a2b3c4")),
        ("#kperf fixed --commit 1a2b3c4d: ok", ("fixed", "ok", "1a2b3c4d")),
        ("#kperf confirmed\nlooking at it\n-- \nAlice", ("confirmed", "looking at it", "")),
    ],
)
def test_the_first_line_of_a_reply_is_the_command(text: str, expected: tuple[str, str, str]) -> None:
    got = commands.parse(text)
    assert (got.state, got.note, got.fixed_by) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "no text of its own"),
        ("> only a quote", "no text of its own"),
        ("Thanks!\n#kperf expected", "'Thanks!', is not a command"),
        ("#kperfexpected", "is not a command"),
        ("#kperf fixed a b", "one fixing commit"),
        ("#kperf", "names no state"),
    ],
)
def test_a_reply_without_a_command_says_what_to_write(text: str, words: str) -> None:
    with pytest.raises(triage.TriageError) as err:
        commands.parse(text)
    assert words in str(err.value)


def test_the_mailbox_poll_reads_each_reply_once_and_keeps_what_failed(
    sink: Inbox, alice: User, qemu_class: MachineClass
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    good = EmailMessage()
    good["From"], good["To"], good["Message-ID"] = "alice@example.org", reply_to, make_msgid()
    good["Delivered-To"] = reply_to
    good["Authentication-Results"] = vouched("alice@example.org")
    good.set_content("#kperf confirmed: looking")
    box = Box({"7": good.as_bytes(), "8": b"not read"})

    def receive(raw: bytes) -> object:
        if raw == b"not read":
            raise OSError("the database went away")
        return inbound.receive(raw)

    result = mailbox.poll_box(box, receive)
    assert (result.read, result.failed, box.expunged) == (1, 1, 1)
    assert box.flags == {"7": {"\\Seen", "\\Deleted"}, "8": set()}
    row.refresh_from_db()
    assert row.state == "confirmed" and row.events.order_by("-id")[0].via == "mail"
    # The same message again (a poll that died before marking it): applied once, not answered.
    inbound.receive(good.as_bytes())
    assert (last_mail().reason, row.events.count()) == ("duplicate", 2)
    assert answers(sink) == []


def raw_reply(sender: str, to: str, text: str, subject: str = "Re: [kperf] #1", msgid: str = "") -> bytes:
    """A reply as bytes written by hand: headers no mail library would write (encoded NUL, bad Message-IDs)."""
    msgid = msgid or make_msgid(domain="example.org")
    head = f"Authentication-Results: {vouched(sender)}\r\nFrom: {sender}\r\nTo: {to}\r\n"
    head += f"Subject: {subject}\r\nMessage-ID: {msgid}\r\n"
    return (head + "Content-Type: text/plain; charset=utf-8\r\n\r\n" + text + "\r\n").encode()


def test_a_reply_with_a_nul_in_a_header_is_recorded_and_applied_not_refused_forever(
    sink: Inbox, listener: MailListener, alice: User, qemu_class: MachineClass
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    # PostgreSQL refuses NUL in text: unstripped, the listener answered 451 to this mail forever.
    raw = raw_reply(
        "=?utf-8?q?Alice=01?= <alice@example.org>", reply_to, "#kperf expected: fine", "=?utf-8?q?hi=00there?="
    )
    send_raw(listener, "alice@example.org", reply_to, raw)
    mail = last_mail()
    assert (mail.outcome, mail.subject, mail.from_address) == ("applied", "hithere", "alice@example.org")
    row.refresh_from_db()
    assert row.state == "expected"


def test_the_mailbox_poll_gives_up_a_message_that_always_fails_and_reads_the_rest(
    sink: Inbox, alice: User, qemu_class: MachineClass
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    bad = raw_reply("alice@example.org", reply_to, "#kperf invalid", msgid="<broken@example.org>")
    box = Box({"3": bad})

    def receive(raw: bytes) -> object:
        if raw == bad:
            raise ValueError("A string literal cannot contain NUL (0x00) characters.")
        return inbound.receive(raw)

    for _ in range(mailbox.GIVE_UP_AFTER - 1):
        result = mailbox.poll_box(box, receive)
        assert (result.failed, result.given_up, box.flags["3"]) == (1, 0, set())
    # Staff see the count of failures in the admin while kperf still tries.
    staff = Client()
    staff.force_login(User.objects.create_superuser("root", "root@example.org"))
    listing = staff.get("/admin/core/unreadablemail/").content.decode()
    assert "msgid:&lt;broken@example.org&gt;" in listing and "cannot contain NUL" in listing
    result = mailbox.poll_box(box, receive)
    assert (result.failed, result.given_up, box.flags["3"]) == (1, 1, {"\\Seen"})
    mail = last_mail()
    assert (mail.outcome, mail.reason, mail.message_id, mail.answer) == (
        "ignored",
        "unreadable",
        "<broken@example.org>",
        None,
    )
    assert "cannot contain NUL" in mail.detail and not UnreadableMail.objects.exists()
    # The next poll does not see it; a reply that succeeds clears its count of failures.
    assert mailbox.poll_box(box, receive).failed == 0
    good = raw_reply("alice@example.org", reply_to, "#kperf confirmed", msgid="<good@example.org>")
    box.messages["4"], box.flags["4"] = good, set()
    UnreadableMail.objects.create(key="msgid:<good@example.org>", attempts=1)
    assert mailbox.poll_box(box).read == 1 and not UnreadableMail.objects.exists()
    row.refresh_from_db()
    assert row.state == "confirmed"


def test_a_reply_token_goes_only_to_people_who_may_triage_never_to_a_list(
    alice: User, django_user_model: Any, staff: User, settings: Any
) -> None:
    settings.KPERF_MAIL_DOMAIN = DOMAIN
    django_user_model.objects.create_user("bob", "bob@example.org", "bob-password-1")
    tree = Tree.objects.create(url="https://git.example.org/mm.git")

    def token_for(owner: User, notify: list[str]) -> ReplyToken | None:
        branch = TrackedBranch.objects.create(owner=owner, tree=tree, branch=secrets.token_hex(4), notify=notify)
        row = Triage.objects.create(kind="change-point", branch=branch, title="spawn -12%")
        to = [owner.email, *notify]
        return replies.issue(alerts._queue(Alert.Kind.CHANGE_POINT, f"t:{branch.pk}", to, "s", "b"), row)

    assert token_for(alice, []) is not None
    # A mailing list in `notify`: its archives would hold the token, and anyone could reply as alice.
    assert token_for(alice, ["linux-mm@kvack.org"]) is None
    # bob has an account, but on alice's own branch only alice decides.
    assert token_for(alice, ["bob@example.org"]) is None
    # On the lab's reference series a watcher with an account decides.
    assert token_for(staff, ["bob@example.org"]) is not None
    User.objects.filter(pk=alice.pk).update(is_active=False)
    assert token_for(alice, []) is None


def test_the_same_mail_read_twice_at_once_is_applied_once(
    sink: Inbox, alice: User, qemu_class: MachineClass, monkeypatch: pytest.MonkeyPatch
) -> None:
    row, reply_to = alerted(alice, qemu_class)
    raw = raw_reply("alice@example.org", reply_to, "#kperf confirmed: looking", msgid="<twice@example.org>")
    find_token = inbound._find_token

    def other_reader_first(*args: Any) -> Any:
        # Past this reader's duplicate check, another reader (the listener, a second poll) handles it.
        monkeypatch.setattr(inbound, "_find_token", find_token)

        def other() -> None:
            try:
                inbound.receive(raw)
            finally:
                connection.close()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        return find_token(*args)

    monkeypatch.setattr(inbound, "_find_token", other_reader_first)
    mail = inbound.receive(raw)
    assert (mail.reason, mail.message_id) == ("duplicate", "")
    first = InboundMail.objects.get(message_id="<twice@example.org>")
    assert first.outcome == "applied" and f"mail {first.pk} (applied)" in mail.detail
    assert row.events.count() == 2 and InboundMail.objects.count() == 2


def test_two_mailbox_polls_never_overlap(settings: Any) -> None:
    settings.KPERF_IMAP_HOST, settings.KPERF_IMAP_PORT, settings.KPERF_IMAP_SSL = "127.0.0.1", free_port(), False
    # A second session on the very database the test uses (a copy of the live
    # connection's settings: advisory locks are per database).
    other = connections["default"].copy()
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [mailbox.POLL_LOCK])
        # The second poll returns at once, without connecting (nothing listens on the port).
        result = mailbox.poll()
        assert result is not None and result.busy and result.read == 0
    finally:
        with other.cursor() as cursor:  # close() frees it only when the backend exits: maybe too late
            cursor.execute("SELECT pg_advisory_unlock(%s)", [mailbox.POLL_LOCK])
        other.close()
    # Once the first is over, a poll runs (and fails to connect); it releases the lock all the same.
    for _ in range(2):
        with pytest.raises(OSError):
            mailbox.poll()


@pytest.mark.parametrize("msgid", ["<a b@example.org>", "<x<y>@example.org>"])
def test_an_answer_is_not_threaded_under_a_malformed_message_id(
    sink: Inbox, listener: MailListener, alice: User, qemu_class: MachineClass, msgid: str
) -> None:
    _, reply_to = alerted(alice, qemu_class)
    send_raw(
        listener, "alice@example.org", reply_to, raw_reply("alice@example.org", reply_to, "#kperf maybe", msgid=msgid)
    )
    assert (last_mail().reason, last_mail().message_id) == ("bad-command", msgid)
    (to, answer), *_ = answers(sink)
    assert to == ["alice@example.org"] and answer["In-Reply-To"] is None and answer["References"] is None
