"""A developer's request: compare head against base on some benchmarks."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models

from kperf.core.models.builds import KernelBuild
from kperf.core.models.lifecycle import final_statuses
from kperf.core.models.trees import Tree

BOOT_PARAMS_MAX_LENGTH = 512


class Thp(models.TextChoices):
    """The transparent huge page mode init sets before the benchmark ('': the kernel's default)."""

    DEFAULT = "", "kernel default"
    ALWAYS = "always", "always"
    MADVISE = "madvise", "madvise"
    NEVER = "never", "never"


def default_grids() -> list[str]:
    return ["quick"]


class Submission(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"  # waiting for git fetch and ref resolution
        BUILDING = "building"
        TESTING = "testing"
        ANALYSING = "analysing"
        DONE = "done"
        FAILED = "failed"

    class Kind(models.TextChoices):
        BRANCH = "branch"  # head_ref is a branch, tag or sha of the tree
        SERIES = "series"  # a patch series (mbox) applied on base; see PatchSeries

    # Every status and the only ways out of it (kperf.core.lifecycle.states).
    TRANSITIONS: ClassVar[dict[str, frozenset[str]]] = {
        # Refs resolved and builds attached, or the tree/refs were bad.
        Status.QUEUED: frozenset({Status.BUILDING, Status.FAILED}),
        # Every build done: jobs queued. A build failed: the submission fails.
        Status.BUILDING: frozenset({Status.TESTING, Status.FAILED}),
        # Every job done, or one failed for good.
        Status.TESTING: frozenset({Status.ANALYSING, Status.FAILED}),
        # Verdicts stored; or an inconclusive look queued more boots (back to
        # testing); or the analysis itself failed.
        Status.ANALYSING: frozenset({Status.DONE, Status.TESTING, Status.FAILED}),
        Status.DONE: frozenset(),
        Status.FAILED: frozenset(),
    }
    FINAL = final_statuses(TRANSITIONS)

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="submissions")
    tree = models.ForeignKey(Tree, on_delete=models.PROTECT, related_name="submissions")
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.BRANCH)
    # A branch's ref; a series' label ("series: <subject>"), for lists and mail.
    head_ref = models.CharField(max_length=255)
    head_sha = models.CharField(max_length=40, blank=True, default="")
    base_ref = models.CharField(max_length=255)
    base_sha = models.CharField(max_length=40, blank=True, default="")
    benchmarks = models.JSONField(default=list)
    # The grids asked for, in the order given: each benchmark runs every one of
    # them it has (kperf.core.benchmarks.runs), one comparison per grid.
    grids = models.JSONField(default=default_grids)
    arches = models.JSONField(default=list)
    # The practical threshold in percent for every metric of this submission:
    # a smaller difference is shown as a change but never called a
    # regression. None: each metric's default for its clock (settings).
    min_effect_pct = models.FloatField(null=True, blank=True)
    # Kernel command line words appended last to the runner's, and the THP
    # mode, for every boot of both sides (kperf.core.lab.boot_params checks what
    # people give). Boots with other values are never shared or pooled.
    boot_params = models.CharField(max_length=BOOT_PARAMS_MAX_LENGTH, blank=True, default="")
    thp = models.CharField(max_length=8, choices=Thp.choices, blank=True, default="")
    # The configuration profile both sides are built with ("": each machine
    # class's own, MachineClass.profile). docs/kernels.md.
    profile = models.CharField(max_length=16, blank=True, default="")
    # Addresses the submitter wants the result mail sent to, besides the owner (a list, say).
    mail_to = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True, default="")
    # Boots kperf added because a look was inconclusive:
    # [{"machine_class": .., "benchmark": .., "grid": .., "look": 1, "more_boots": 4, "inconclusive": [..]}]
    reruns = models.JSONField(default=list, blank=True)
    # Looks taken at one comparison while others still ran (kperf.core.submissions.looks),
    # so a second advance never takes the same one again:
    # [{"machine_class_id": .., "benchmark": .., "grid": .., "clock": .., "jobs": finished jobs at that look}]
    interim_looks = models.JSONField(default=list, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.head_ref} vs {self.base_ref}"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL


class SubmissionBuild(models.Model):
    """Which builds a submission needs, and on which side of the comparison."""

    class Side(models.TextChoices):
        BASE = "base"
        HEAD = "head"

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="submission_builds")
    build = models.ForeignKey(KernelBuild, on_delete=models.PROTECT, related_name="submission_builds")
    side = models.CharField(max_length=4, choices=Side.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["submission", "build", "side"], name="unique_submission_build_side")
        ]

    def __str__(self) -> str:
        return f"submission {self.submission_id} {self.side}: build {self.build_id}"
