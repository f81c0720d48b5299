"""What runners measured, and what kperf concluded from it."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from kperf.core.models.lab import Clock, Job, MachineClass
from kperf.core.models.submissions import Submission


class MetricDef(models.Model):
    benchmark = models.CharField(max_length=64)
    name = models.CharField(max_length=128, unique=True)
    unit = models.CharField(max_length=32)
    higher_is_better = models.BooleanField()

    def __str__(self) -> str:
        return f"{self.name} ({self.unit})"


class BootRecord(models.Model):
    """One boot of a job's kernel: its environment and raw benchmark output."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="boot_records")
    attempt = models.PositiveIntegerField()
    boot = models.PositiveIntegerField()
    environment = models.JSONField(default=dict)
    raw_output = models.TextField(blank=True, default="")
    # {"key", "sha256", "size"} once `kperf-manage archive` moved the raw
    # output to the artifact storage (raw_output is then empty); read it
    # through kperf.core.builds.archive.raw_output.
    raw_output_archive = models.JSONField(default=dict, blank=True)
    # The kernel's own counters across the benchmark's commands, by source:
    # {"vmstat": {"pgfault": 1234, "nr_free_pages": -56}} (summed deltas).
    # Secondary data, shown beside the verdicts and never judged; {} from
    # runners older than counters and kernels without /proc/vmstat.
    counters = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "boot"], name="unique_boot_per_job")]

    def __str__(self) -> str:
        return f"job {self.job_id} boot {self.boot}"


class Sample(models.Model):
    boot_record = models.ForeignKey(BootRecord, on_delete=models.CASCADE, related_name="samples")
    metric = models.CharField(max_length=128)
    iteration = models.PositiveIntegerField()
    value = models.FloatField()

    class Meta:
        # Serves loading one submission's samples metric by metric.
        indexes = [models.Index(fields=["metric", "boot_record"], name="sample_metric_idx")]

    def __str__(self) -> str:
        return f"{self.metric}[{self.iteration}] = {self.value}"


class Comparison(models.Model):
    """Base against head for one submission, machine class, benchmark, grid and clock."""

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="comparisons")
    machine_class = models.ForeignKey(MachineClass, on_delete=models.PROTECT, related_name="comparisons")
    benchmark = models.CharField(max_length=64)
    # The benchmark's grid: a submission may ask for several, and two grids of one benchmark
    # name their metrics alike (pft's quick and scaling both have faults/sec-threads-1).
    grid = models.CharField(max_length=32, default="quick")
    # The clock every compared sample was timed with (one comparison, one clock).
    clock = models.CharField(max_length=16, choices=Clock.choices, default=Clock.WALL)
    # Test, alpha spending and what history lent it (noise, between-build): it grows with each, and
    # names where a lab's own noise record came from (its KPERF_BUILD_NOISE_RECORDS source, any
    # length), so no length bounds it: text, not a column a long source could make the analysis fail on.
    method = models.TextField()
    alpha = models.FloatField()
    # Sequential design: which look this is, of how many; interim comparisons
    # are replaced when the boots kperf added come in.
    look = models.PositiveIntegerField(default=1)
    looks = models.PositiveIntegerField(default=1)
    final = models.BooleanField(default=True)
    # How many of the base boots compared were measured once for several
    # submissions of the same base kernel (kperf.core.lab.sharing), not for this one.
    shared_base_boots = models.PositiveIntegerField(default=0)
    # How many metrics' intervals rest on their boots alone: no noise learned from history and no
    # boot spread measured yet for the shape (kperf.core.submissions.shape_spread); the page and
    # the mail say so.
    boots_alone = models.PositiveIntegerField(default=0)
    # The mmtests-style table a developer pastes into a cover letter.
    table = models.TextField(blank=True, default="")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["submission", "machine_class", "benchmark", "grid", "clock"],
                name="unique_comparison_per_class_benchmark_grid_clock",
            )
        ]

    def __str__(self) -> str:
        return f"submission {self.submission_id} {self.benchmark} {self.grid}"


class MetricComparison(models.Model):
    class Verdict(models.TextChoices):
        REGRESSION = "regression"
        IMPROVEMENT = "improvement"
        NO_CHANGE = "no-change"
        INCONCLUSIVE = "inconclusive"
        # kperf failed to judge this metric (a bug, not the data): its notes say what failed, and the
        # rest of the comparison stands (kperf.core.submissions.analysis).
        ERROR = "error"

    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="metrics")
    metric = models.CharField(max_length=128)
    unit = models.CharField(max_length=32)
    higher_is_better = models.BooleanField()
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    base_mean = models.FloatField(null=True)
    head_mean = models.FloatField(null=True)
    change_pct = models.FloatField(null=True)
    ci_low_pct = models.FloatField(null=True)
    ci_high_pct = models.FloatField(null=True)
    p_value = models.FloatField(null=True)
    q_value = models.FloatField(null=True)
    min_effect_pct = models.FloatField()
    base_boots = models.PositiveIntegerField()
    head_boots = models.PositiveIntegerField()
    base_samples = models.PositiveIntegerField()
    head_samples = models.PositiveIntegerField()
    # Per-boot iteration values, as compared: {"base": [[..], ..], "head": [[..], ..]}
    values = models.JSONField(default=dict)
    # mmtests summary rows: [{"label": "Hmean", "base": .., "head": .., "change_pct": .., "significant": ..}]
    summary = models.JSONField(default=list)
    # What a reader needs beside the numbers, one sentence each (kperf.stats MetricResult.notes). A
    # list of text, not one joined string in a bounded column: a metric can collect several notes
    # (rounding, boots set aside, more boots cannot decide, ...) and once their sum passed 300
    # characters the whole verdict failed to store.
    notes = ArrayField(models.TextField(), default=list, blank=True)

    class Meta:
        ordering = ["metric"]

    def __str__(self) -> str:
        return f"{self.metric}: {self.verdict}"

    @property
    def note(self) -> str:
        """The notes as one line, as the page's row, tables and the CLI print them."""
        return "; ".join(self.notes)
