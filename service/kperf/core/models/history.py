"""History kept summarised as results arrive, so that what is learned from all
of it (noise, drift, between-build noise) and the per-commit series cost the
new data, not a pass over every old sample (docs/history.md)."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from kperf.core.models.lab import MachineClass
from kperf.core.models.tracking import BranchCommit, TrackedBranch


class RunSummary(models.Model):
    """One kernel's boots of one metric on a machine class, benchmark, grid and
    clock, reduced to what the noise model pools (kperf.stats.noise.RunStats)."""

    machine_class = models.ForeignKey(MachineClass, on_delete=models.CASCADE, related_name="+")
    clock = models.CharField(max_length=16)
    benchmark = models.CharField(max_length=64)
    grid = models.CharField(max_length=32)
    sha = models.CharField(max_length=40)
    metric = models.CharField(max_length=128)
    boots = models.PositiveIntegerField()
    iterations = models.PositiveIntegerField()
    positive = models.BooleanField()
    ssb_log = models.FloatField(null=True)
    ssw_log = models.FloatField(null=True)
    dfw_log = models.PositiveIntegerField()
    ssb_lin = models.FloatField()
    ssw_lin = models.FloatField()
    dfw_lin = models.PositiveIntegerField()

    class Meta:
        verbose_name_plural = "run summaries"
        constraints = [
            # Its prefix serves the noise report (class, clock) and the learned priors (+ benchmark, grid).
            models.UniqueConstraint(
                fields=["machine_class", "clock", "benchmark", "grid", "sha", "metric"], name="unique_run_summary"
            )
        ]
        indexes = [
            # Serve the noise model's outlier test: the few runs of a metric whose boots
            # spread more than the pooled noise allows (kperf.stats.noise.outlier_floor).
            models.Index(fields=["machine_class", "clock", "metric", "boots", "ssb_log"], name="run_summary_ssb_log"),
            models.Index(fields=["machine_class", "clock", "metric", "boots", "ssb_lin"], name="run_summary_ssb_lin"),
        ]

    def __str__(self) -> str:
        return f"{self.metric} of {self.sha[:12]} ({self.boots} boots)"


class NoisePool(models.Model):
    """RunSummary rows added up per machine class, clock, benchmark, grid, metric
    and number of boots (kperf.stats.noise.RunPool): the noise model of a whole
    history from a few rows. Kept in step with RunSummary by history.refresh_run."""

    machine_class = models.ForeignKey(MachineClass, on_delete=models.CASCADE, related_name="+")
    clock = models.CharField(max_length=16)
    benchmark = models.CharField(max_length=64)
    grid = models.CharField(max_length=32)
    metric = models.CharField(max_length=128)
    boots = models.PositiveIntegerField()
    runs = models.IntegerField(default=0)
    positive_runs = models.IntegerField(default=0)
    boots_total = models.BigIntegerField(default=0)
    iterations = models.BigIntegerField(default=0)
    ssb_log = models.FloatField(default=0.0)
    ssw_log = models.FloatField(default=0.0)
    dfw_log = models.BigIntegerField(default=0)
    ssb_lin = models.FloatField(default=0.0)
    ssw_lin = models.FloatField(default=0.0)
    dfw_lin = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            # Its prefix serves the noise report (class, clock) and the learned priors (+ benchmark, grid).
            models.UniqueConstraint(
                fields=["machine_class", "clock", "benchmark", "grid", "metric", "boots"], name="unique_noise_pool"
            )
        ]

    def __str__(self) -> str:
        return f"{self.metric}: {self.runs} runs of {self.boots} boots"


class CommitSummary(models.Model):
    """One tracked commit's boots of one metric on a machine class, benchmark and
    clock: each boot reduced to its trimmed mean (of logs where every value is
    positive, and of the values), and those boot summaries to n, mean and sum of
    squares. The mean on the series' scale is the commit's point in the
    change-point search; n, mean and sum of squares feed the between-build noise."""

    commit = models.ForeignKey(BranchCommit, on_delete=models.CASCADE, related_name="summaries")
    machine_class = models.ForeignKey(MachineClass, on_delete=models.CASCADE, related_name="+")
    benchmark = models.CharField(max_length=64)
    clock = models.CharField(max_length=16)
    metric = models.CharField(max_length=128)
    boots = models.PositiveIntegerField()
    samples = models.PositiveIntegerField()
    positive = models.BooleanField()
    mean_log = models.FloatField(null=True)
    ss_log = models.FloatField(null=True)
    mean_lin = models.FloatField()
    ss_lin = models.FloatField()

    class Meta:
        verbose_name_plural = "commit summaries"
        constraints = [
            models.UniqueConstraint(
                fields=["commit", "machine_class", "benchmark", "clock", "metric"], name="unique_commit_summary"
            )
        ]
        indexes = [
            # Serves the series endpoint: one metric's points over a window of a branch's commits.
            models.Index(
                fields=["machine_class", "benchmark", "clock", "metric", "commit"], name="commit_summary_metric"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.metric} of commit {self.commit_id} ({self.boots} boots)"


class SeriesState(models.Model):
    """Per tracked branch and series (machine class, benchmark, clock, metric),
    what its last analysis left: the drift and between-build sums of its
    change-free stretches (added over branches to learn them per machine class)
    and the change-point detector, continued when the next commit comes."""

    branch = models.ForeignKey(TrackedBranch, on_delete=models.CASCADE, related_name="series_states")
    machine_class = models.ForeignKey(MachineClass, on_delete=models.CASCADE, related_name="+")
    benchmark = models.CharField(max_length=64)
    clock = models.CharField(max_length=16)
    metric = models.CharField(max_length=128)
    commits = models.PositiveIntegerField(default=0)
    # kperf.stats.history.DriftStats of the branch's segments. Arrays, not JSON: a
    # noise report reads thousands of these rows, and arrays are parsed in C.
    drift_ssq = ArrayField(models.FloatField(), default=list)
    drift_logf = ArrayField(models.FloatField(), default=list)
    drift_n = models.PositiveIntegerField(default=0)
    drift_used = models.PositiveIntegerField(default=0)
    # kperf.stats.history.BuildSums on each scale; positive: every value of the series is.
    build_log = ArrayField(models.FloatField(), default=list)
    build_lin = ArrayField(models.FloatField(), default=list)
    positive = models.BooleanField(default=True)
    # kperf.stats.history.detector_to_bytes(); empty: replay the series next time.
    detector = models.BinaryField(default=b"")
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["branch", "machine_class", "benchmark", "clock", "metric"], name="unique_series_state"
            )
        ]
        indexes = [
            # Serves learning drift and between-build noise over every branch of a class and benchmark.
            models.Index(fields=["machine_class", "benchmark", "clock"], name="series_state_class"),
        ]

    def __str__(self) -> str:
        return f"{self.metric} on branch {self.branch_id} ({self.commits} commits)"


class SeriesPool(models.Model):
    """SeriesState rows added up over the branches per machine class, benchmark,
    clock and metric: what is learned per class (drift, between-build noise)
    from one row per metric, not one per branch and metric. Kept in step with
    SeriesState by series_pools.store_branch_sums (the old row subtracted, the
    new one added); `states` counts the rows in, so a read notices rows that
    left another way (a branch deleted) and adds the pool up again."""

    machine_class = models.ForeignKey(MachineClass, on_delete=models.CASCADE, related_name="+")
    benchmark = models.CharField(max_length=64)
    clock = models.CharField(max_length=16)
    metric = models.CharField(max_length=128)
    states = models.IntegerField(default=0)
    # How many of those rows are not positive (then the linear scale applies).
    nonpositive = models.IntegerField(default=0)
    drift_ssq = ArrayField(models.FloatField(), default=list)
    drift_logf = ArrayField(models.FloatField(), default=list)
    drift_n = models.BigIntegerField(default=0)
    drift_used = models.BigIntegerField(default=0)
    build_log = ArrayField(models.FloatField(), default=list)
    build_lin = ArrayField(models.FloatField(), default=list)

    class Meta:
        constraints = [
            # Its prefix serves the noise report (class, clock) and one benchmark's analysis.
            models.UniqueConstraint(fields=["machine_class", "clock", "benchmark", "metric"], name="unique_series_pool")
        ]

    def __str__(self) -> str:
        return f"{self.metric}: {self.states} branches"


class SeriesCatchUp(models.Model):
    """A branch's series (machine class, benchmark, clock) whose commits were
    summarised while it had no SeriesState: its results reached the database
    without the change-point analysis that makes one (an import, a hook that
    failed). Noted by summaries.summarise, given its state by
    drift_pools.ensure_states before drift or between-build noise is read,
    then removed: a read never scans jobs to find such series."""

    branch = models.ForeignKey(TrackedBranch, on_delete=models.CASCADE, related_name="+")
    machine_class = models.ForeignKey(MachineClass, on_delete=models.CASCADE, related_name="+")
    benchmark = models.CharField(max_length=64)
    clock = models.CharField(max_length=16)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["machine_class", "clock", "benchmark", "branch"], name="unique_series_catch_up"
            )
        ]

    def __str__(self) -> str:
        return f"branch {self.branch_id} {self.benchmark} on class {self.machine_class_id}: no state yet"
