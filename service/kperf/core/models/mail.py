"""Triage by replying to an alert mail: the reply tokens kperf hands out and the mail it read (docs/triage.md)."""

from __future__ import annotations

from django.db import models

from kperf.core.models.alerts import Alert
from kperf.core.models.triage import Triage


class ReplyToken(models.Model):
    """The secret in an alert's Reply-To address (`kperf+<token>@domain`).

    Whoever replies to the alert writes to this address, so the token says
    which regression the reply is about and that its sender saw the alert;
    the sender must still be one of the people who may triage it.
    """

    # secrets.token_hex: lower-case hex, because mail systems may fold the case of local parts.
    token = models.CharField(max_length=64, unique=True)
    alert = models.OneToOneField(Alert, on_delete=models.CASCADE, related_name="reply_token")
    triage = models.ForeignKey(Triage, on_delete=models.CASCADE, related_name="reply_tokens")
    created = models.DateTimeField(auto_now_add=True)
    expires = models.DateTimeField()

    def __str__(self) -> str:
        return f"reply token of alert {self.alert_id} (triage {self.triage_id})"


class InboundMail(models.Model):
    """One mail kperf received on its reply address, and what became of it.

    Kept so an operator (and the admin) can answer "why did my reply do
    nothing?", and so a mail seen twice (an IMAP poll that died before it
    marked the message read) is applied once.
    """

    class Outcome(models.TextChoices):
        APPLIED = "applied"  # the triage changed
        UNCHANGED = "unchanged"  # the reply said what the triage already was
        IGNORED = "ignored"  # not applied; `reason` says why

    received = models.DateTimeField(auto_now_add=True)
    message_id = models.CharField(max_length=300, blank=True, default="")
    envelope_from = models.CharField(max_length=300, blank=True, default="")
    from_address = models.CharField(max_length=300, blank=True, default="")
    subject = models.CharField(max_length=300, blank=True, default="")
    size = models.PositiveIntegerField(default=0)
    token = models.ForeignKey(ReplyToken, on_delete=models.SET_NULL, null=True, blank=True, related_name="mails")
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    # A short code (`forged-sender`, `auto-reply`, ...) and the sentence the answer said.
    reason = models.CharField(max_length=32, blank=True, default="")
    detail = models.TextField(blank=True, default="")
    answer = models.ForeignKey(Alert, on_delete=models.SET_NULL, null=True, blank=True, related_name="answered")

    class Meta:
        ordering = ["-received", "-id"]
        # One row per Message-ID: two readers of the same mail at once (two
        # IMAP polls, the listener and a poll) insert the second row into
        # this constraint, and that reader's transaction, triage included,
        # is rolled back and recorded as a duplicate without its Message-ID
        # (kperf.core.mail.inbound.receive). It also serves the "seen this
        # Message-ID before?" check of every mail received.
        constraints = [
            models.UniqueConstraint(
                fields=["message_id"], condition=~models.Q(message_id=""), name="inbound_mail_unique_msgid"
            )
        ]

    def __str__(self) -> str:
        return f"mail from {self.from_address or '?'}: {self.outcome} {self.reason}"


class UnreadableMail(models.Model):
    """A message in the IMAP mailbox that kperf failed to read, and how often.

    A message whose reading fails for good (not because the database was
    away) would stay unread and be tried at every poll forever, and enough
    of them would fill every poll's batch. After
    kperf.core.mail.mailbox.GIVE_UP_AFTER failures it is marked read and
    recorded as an ignored InboundMail (reason `unreadable`).
    """

    # "msgid:<Message-ID>", or "uid:<IMAP UID>" for a message without one.
    key = models.CharField(max_length=320, unique=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    first = models.DateTimeField(auto_now_add=True)
    last = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.key}: failed {self.attempts} times"
