"""Every status change of a submission, tracked commit, build or job, as a row."""

from __future__ import annotations

from django.db import models


class StatusChange(models.Model):
    """One change of status: of what, from, to, when, moved by whom or what, and why.

    Written by kperf.core.lifecycle.states with the change itself, in the same
    transaction. What an operator reads when something looks stuck (the
    admin, `kperf-manage status_history`), and a record of how long each
    status lasted.
    """

    # The model's name (Submission, BranchCommit, KernelBuild, Job) and the row's id.
    kind = models.CharField(max_length=32)
    object_id = models.BigIntegerField()
    # "" for a row created in its first status.
    source = models.CharField(max_length=16, blank=True, default="")
    target = models.CharField(max_length=16)
    at = models.DateTimeField(auto_now_add=True)
    # Who or what moved it: "task kperf.build_kernel on host", "runner qemu-1",
    # "build machine b1", "user alice", "sweeper", a command.
    actor = models.CharField(max_length=200, blank=True, default="")
    why = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            # Serves one row's history, newest last: WHERE kind = ? AND object_id = ? ORDER BY at.
            models.Index(fields=["kind", "object_id", "at"], name="status_change_row_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.object_id}: {self.source or '(new)'} -> {self.target}"
