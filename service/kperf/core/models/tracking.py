"""Tracked branches: every new commit is built and measured, and the per-commit
series is searched for change points."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models

from kperf.core.models.builds import KernelBuild
from kperf.core.models.lifecycle import final_statuses
from kperf.core.models.trees import Tree


class TrackedBranch(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="tracked_branches")
    tree = models.ForeignKey(Tree, on_delete=models.PROTECT, related_name="tracked_branches")
    branch = models.CharField(max_length=255)
    benchmarks = models.JSONField(default=list)
    grid = models.CharField(max_length=32, default="quick")
    # The configuration profile its commits are built with ("": each machine
    # class's own); measured only on classes of that profile (docs/kernels.md).
    profile = models.CharField(max_length=16, blank=True, default="")
    arches = models.JSONField(default=list)
    # Practical threshold in percent for change points (None: per-clock default).
    min_effect_pct = models.FloatField(null=True, blank=True)
    # Boots per commit and machine class; 0 means the grid's boots per side.
    boots = models.PositiveIntegerField(default=0)
    # At most this many commits are measured per move of the branch; when more
    # arrive at once (a merge window), evenly spaced ones are, newest included.
    max_commits = models.PositiveIntegerField(default=16)
    # Measure the unmeasured commits inside a change point's range, halving
    # it each time, until the change sits on one commit.
    bisect = models.BooleanField(default=True)
    enabled = models.BooleanField(default=True)
    # Who is mailed when a change point is a regression, besides the owner.
    notify = models.JSONField(default=list, blank=True)
    head_sha = models.CharField(max_length=40, blank=True, default="")
    last_polled = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "tracked branches"
        ordering = ["tree__url", "branch"]
        constraints = [models.UniqueConstraint(fields=["tree", "branch"], name="unique_tracked_branch")]

    def __str__(self) -> str:
        return f"{self.tree.url} {self.branch}"


class BranchCommit(models.Model):
    """One measured commit of a tracked branch."""

    class Status(models.TextChoices):
        BUILDING = "building"
        TESTING = "testing"
        ANALYSING = "analysing"
        DONE = "done"
        FAILED = "failed"

    # Every status and the only ways out of it (kperf.core.lifecycle.states).
    TRANSITIONS: ClassVar[dict[str, frozenset[str]]] = {
        Status.BUILDING: frozenset({Status.TESTING, Status.FAILED}),
        Status.TESTING: frozenset({Status.ANALYSING, Status.FAILED}),
        Status.ANALYSING: frozenset({Status.DONE, Status.FAILED}),
        Status.DONE: frozenset(),
        Status.FAILED: frozenset(),
    }
    FINAL = final_statuses(TRANSITIONS)

    branch = models.ForeignKey(TrackedBranch, on_delete=models.CASCADE, related_name="commits")
    sha = models.CharField(max_length=40)
    # Number of first-parent ancestors: orders the series and survives
    # backfills and gaps.
    position = models.PositiveIntegerField()
    subject = models.CharField(max_length=300, blank=True, default="")
    # False once a forced push took the commit off the branch; it then leaves
    # the series but its measurements stay.
    on_branch = models.BooleanField(default=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.BUILDING)
    error = models.TextField(blank=True, default="")
    builds = models.ManyToManyField(KernelBuild, related_name="branch_commits")
    created = models.DateTimeField(auto_now_add=True)
    # When the status last changed: the sweeper re-drives a commit that has
    # not moved within its deadline (a task lost while the broker was down).
    updated = models.DateTimeField(auto_now=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["branch", "position"]
        constraints = [models.UniqueConstraint(fields=["branch", "sha"], name="unique_commit_per_branch")]

    def __str__(self) -> str:
        return f"{self.branch.branch}@{self.sha[:12]}"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL


class ChangePoint(models.Model):
    """A change in one metric's per-commit series, at the first commit after it."""

    branch = models.ForeignKey(TrackedBranch, on_delete=models.CASCADE, related_name="change_points")
    machine_class = models.ForeignKey("core.MachineClass", on_delete=models.PROTECT, related_name="change_points")
    benchmark = models.CharField(max_length=64)
    metric = models.CharField(max_length=128)
    # The clock of the series the change was found in (one series, one clock).
    clock = models.CharField(max_length=16, default="wall")
    commit = models.ForeignKey(BranchCommit, on_delete=models.CASCADE, related_name="change_points")
    # The last measured commit before the change: bisection searches between.
    previous = models.ForeignKey(
        BranchCommit, on_delete=models.CASCADE, related_name="change_points_after", null=True, blank=True
    )
    detected_at = models.ForeignKey(BranchCommit, on_delete=models.CASCADE, related_name="alarms_raised")
    direction = models.CharField(max_length=16)  # regression / improvement
    change_pct = models.FloatField()  # negative is worse
    p_value = models.FloatField()
    statistic = models.FloatField()
    # Kept when the series is re-analysed and the change is still there, so
    # "new since" questions (alerts) have an answer.
    first_seen = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["branch", "commit__position", "metric"]
        constraints = [
            models.UniqueConstraint(
                fields=["branch", "machine_class", "clock", "metric", "commit"],
                name="unique_change_point_per_clock_commit",
            )
        ]

    def __str__(self) -> str:
        return f"{self.metric} {self.direction} {self.change_pct:+.2f}% at {self.commit}"

    @property
    def untested_between(self) -> int:
        """First-parent commits between the last good measured commit and the
        first bad one that have no measurement: 0 means the culprit is known."""
        if self.previous is None:
            return 0
        return max(0, self.commit.position - self.previous.position - 1)
