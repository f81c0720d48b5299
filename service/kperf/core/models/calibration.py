"""A runner's health history: calibrations, quarantines, releases (docs/calibration.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from kperf.core.models.lab import Job, Runner


class RunnerEvent(models.Model):
    """One entry of a runner's history; the calibration series is its calibration rows."""

    class Kind(models.TextChoices):
        CALIBRATION = "calibration"  # a calibration job finished, or failed for good
        QUARANTINE = "quarantine"
        RELEASE = "release"

    class Result(models.TextChoices):
        # Too few good calibrations yet to judge against: taken as the start of the series.
        LEARNING = "learning"
        GOOD = "good"
        DRIFT = "drift"
        FAILED = "failed"

    # The results that make up the series a new calibration is judged against.
    SERIES = (Result.LEARNING, Result.GOOD)

    runner = models.ForeignKey(Runner, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    result = models.CharField(max_length=16, choices=Result.choices, blank=True, default="")
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="runner_events")
    # The admin who quarantined or released; None: kperf did, by a check.
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    note = models.TextField(blank=True, default="")
    # A calibration's per-metric summary: {metric: median of its samples}.
    summary = models.JSONField(default=dict, blank=True)
    # How it was judged, per metric: {metric: {"center", "noise_pct", "change_pct", "times_noise", "drift"}}.
    judgement = models.JSONField(default=dict, blank=True)
    # Quarantine: how many finished jobs were marked suspect.
    marked_jobs = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["runner", "kind", "created"], name="runner_event_idx")]
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.runner_id} {self.kind} {self.result}".strip()
