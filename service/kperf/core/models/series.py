"""A patch series as it was posted: the mbox a submission applies on its base (docs/submitting.md)."""

from __future__ import annotations

from django.db import models

from kperf.core.models.submissions import Submission


class PatchSeries(models.Model):
    """What kperf read from a submitted mbox, and where the mbox itself is kept.

    The applied commits live in the tree's mirror under
    refs/kperf/series/<submission id>; a build machine without them makes
    them again from the stored mbox (kperf.core.builds.apply_series), which gives
    the same sha because the committer and dates are fixed.
    """

    submission = models.OneToOneField(Submission, on_delete=models.CASCADE, related_name="series")
    # The series' title: the cover letter's subject, or the first patch's,
    # without the "[PATCH v2 0/3]" prefix.
    subject = models.CharField(max_length=300)
    author = models.CharField(max_length=300)
    # The message the result mail answers (In-Reply-To/References), without
    # angle brackets: the cover letter's, else the first patch's parent's or its own.
    message_id = models.CharField(max_length=250)
    has_cover = models.BooleanField(default=False)
    patch_count = models.PositiveIntegerField()
    # [{"number": 1, "subject": "[PATCH 1/2] mm: ...", "author": "...", "message_id": "..."}], in apply order.
    patches = models.JSONField(default=list)
    # The mbox in the artifact storage: {"key", "sha256", "size"} (kperf.core.builds.artifacts).
    mbox = models.JSONField(default=dict)
    # The patch git am stopped at (1-based), when the series did not apply.
    failed_patch = models.PositiveIntegerField(null=True, blank=True)
    # Workers that began applying it (kperf.core.submissions.pipeline): counted before
    # the work, so one killed or out of disk counts too, and the submission
    # fails after KPERF_SERIES_APPLY_ATTEMPTS instead of being re-sent forever.
    apply_attempts = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name_plural = "patch series"

    def __str__(self) -> str:
        return f"series of submission {self.submission_id}: {self.subject}"
