"""The outbox of plain-text mails kperf sends (docs/alerts.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Alert(models.Model):
    """One mail: written in the same transaction as what it reports, sent later.

    Writing first and sending from a task means a mail server that is down,
    or not configured yet, loses nothing: the alert waits and is retried.
    """

    class Kind(models.TextChoices):
        SUBMISSION = "submission"  # a submission finished (done or failed)
        CHANGE_POINT = "change-point"  # a tracked branch regressed
        REPLY = "reply"  # the answer to a mail kperf ignored, saying why (kperf.core.mail.inbound)
        CONFIRM = "confirm-address"  # asks an address to agree to get a user's results (kperf.core.mail.confirmations)

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"  # gave up after KPERF_ALERT_MAX_ATTEMPTS
        NO_RECIPIENT = "no-recipient"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    # The user on whose behalf it is mailed: their daily limit of recipients
    # besides themselves is counted on these rows when it goes out (kperf.core.mail.recipients).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    # One alert per event: a re-analysis that finds the same change again
    # does not mail again.
    key = models.CharField(max_length=300, unique=True)
    recipients = models.JSONField(default=list)
    subject = models.CharField(max_length=300)
    body = models.TextField()
    # The Message-ID (without angle brackets) this mail answers: sent as
    # In-Reply-To and References so it lands in that thread (a patch series' cover letter).
    in_reply_to = models.CharField(max_length=250, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    created = models.DateTimeField(auto_now_add=True)
    sent = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["status", "created"], name="alert_outbox_idx")]

    def __str__(self) -> str:
        return f"{self.kind} {self.status}: {self.subject}"
