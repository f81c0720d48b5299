"""Base boots measured once for every submission of the same base kernel."""

from __future__ import annotations

from django.db import models

from kperf.core.models.lab import Job
from kperf.core.models.submissions import Submission


class SharedJob(models.Model):
    """A submission uses another owner's boot of its base kernel as one of its own base boots.

    The job stays its owner's (claim order, attempts, console); the sharer
    reads its samples and moves on when it finishes (kperf.core.lab.sharing).
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="sharers")
    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="shared_jobs")
    # The side of the sharer's comparison the boot counts for (always base).
    side = models.CharField(max_length=4, default="base")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "submission"], name="unique_shared_job_per_submission")]

    def __str__(self) -> str:
        return f"job {self.job_id} shared with submission {self.submission_id}"
