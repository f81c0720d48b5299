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
        # Serves the "seen this Message-ID before?" check of every mail received.
        indexes = [models.Index(fields=["message_id"], name="inbound_mail_msgid_idx")]

    def __str__(self) -> str:
        return f"mail from {self.from_address or '?'}: {self.outcome} {self.reason}"
