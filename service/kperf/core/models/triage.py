"""What people decided about a regression: its triage state, note and history (docs/triage.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from kperf.core.models.submissions import Submission
from kperf.core.models.tracking import ChangePoint, TrackedBranch


class Triage(models.Model):
    """One regression to decide on: a finished submission with regression
    verdicts, or a regression change point of a tracked branch.

    Every change goes through kperf.core.triage.triage, which writes a
    TriageEvent beside it in the same transaction.
    """

    class State(models.TextChoices):
        NEW = "new"
        CONFIRMED = "confirmed"
        EXPECTED = "expected"
        INVALID = "invalid"
        FIXED = "fixed"
        WONT_FIX = "wont-fix", "won't fix"

    class Kind(models.TextChoices):
        SUBMISSION = "submission", "submission"
        CHANGE_POINT = "change-point", "change point"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    submission = models.OneToOneField(
        Submission, on_delete=models.CASCADE, null=True, blank=True, related_name="triage"
    )
    branch = models.ForeignKey(TrackedBranch, on_delete=models.CASCADE, null=True, blank=True, related_name="triages")
    # SET_NULL, not CASCADE: a re-analysis that moves a change point (a
    # bisection narrowing it) deletes the old row; the triage and its history
    # stay, and the change point found in its place takes them over.
    change_point = models.OneToOneField(
        ChangePoint, on_delete=models.SET_NULL, null=True, blank=True, related_name="triage"
    )
    # The series a change point is in ("<machine class id>:<clock>:<metric>"):
    # what a moved change point is matched on.
    series = models.CharField(max_length=200, blank=True, default="")
    # What regressed, in one line, as lists show it; kept when the change point is gone.
    title = models.CharField(max_length=300)
    state = models.CharField(max_length=16, choices=State.choices, default=State.NEW)
    note = models.TextField(blank=True, default="")
    # The commit that fixed it (state fixed only).
    fixed_by = models.CharField(max_length=40, blank=True, default="")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(kind="submission", submission__isnull=False, branch__isnull=True)
                    | models.Q(kind="change-point", submission__isnull=True, branch__isnull=False)
                ),
                name="triage_has_one_target",
            ),
            models.CheckConstraint(
                condition=~models.Q(state="fixed") | ~models.Q(fixed_by=""), name="triage_fixed_names_a_commit"
            ),
        ]
        # Serves the list of regressions filtered by state, newest first.
        indexes = [models.Index(fields=["state", "created"], name="triage_state_idx")]

    def __str__(self) -> str:
        return f"{self.title}: {self.state}"


class TriageEvent(models.Model):
    """One change of a triage: who, when, from what to what, why, and how they said it."""

    class Via(models.TextChoices):
        KPERF = "kperf", "kperf"  # kperf opened it when it found the regression
        WEB = "web", "web page"
        API = "api", "API"
        CLI = "cli", "kperf triage"
        MAIL = "mail", "mail reply"

    triage = models.ForeignKey(Triage, on_delete=models.CASCADE, related_name="events")
    # None: kperf itself (opened it, or moved it with its change point).
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    from_state = models.CharField(max_length=16, blank=True, default="")
    to_state = models.CharField(max_length=16)
    note = models.TextField(blank=True, default="")
    fixed_by = models.CharField(max_length=40, blank=True, default="")
    via = models.CharField(max_length=8, choices=Via.choices)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created", "id"]

    def __str__(self) -> str:
        return f"triage {self.triage_id}: {self.from_state or '-'} -> {self.to_state} via {self.via}"
