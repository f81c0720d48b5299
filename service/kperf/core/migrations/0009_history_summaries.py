"""History kept summarised as results arrive (docs/history.md).

Creates the tables only: `kperf-manage rebuild_history` fills them from the
raw samples of an existing deployment (and anything not yet summarised is
caught up on first read anyway).
"""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("core", "0008_incremental_builds")]

    operations = [
        migrations.CreateModel(
            name="SummarisedJob",
            fields=[
                (
                    "job",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="core.job",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="CommitSummary",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("benchmark", models.CharField(max_length=64)),
                ("clock", models.CharField(max_length=16)),
                ("metric", models.CharField(max_length=128)),
                ("boots", models.PositiveIntegerField()),
                ("samples", models.PositiveIntegerField()),
                ("positive", models.BooleanField()),
                ("mean_log", models.FloatField(null=True)),
                ("ss_log", models.FloatField(null=True)),
                ("mean_lin", models.FloatField()),
                ("ss_lin", models.FloatField()),
                (
                    "commit",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="summaries", to="core.branchcommit"
                    ),
                ),
                (
                    "machine_class",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.machineclass"
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["machine_class", "benchmark", "clock", "metric", "commit"], name="commit_summary_metric"
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("commit", "machine_class", "benchmark", "clock", "metric"), name="unique_commit_summary"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="RunSummary",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("clock", models.CharField(max_length=16)),
                ("benchmark", models.CharField(max_length=64)),
                ("grid", models.CharField(max_length=32)),
                ("sha", models.CharField(max_length=40)),
                ("metric", models.CharField(max_length=128)),
                ("boots", models.PositiveIntegerField()),
                ("iterations", models.PositiveIntegerField()),
                ("positive", models.BooleanField()),
                ("ssb_log", models.FloatField(null=True)),
                ("ssw_log", models.FloatField(null=True)),
                ("dfw_log", models.PositiveIntegerField()),
                ("ssb_lin", models.FloatField()),
                ("ssw_lin", models.FloatField()),
                ("dfw_lin", models.PositiveIntegerField()),
                (
                    "machine_class",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.machineclass"
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["machine_class", "clock", "metric", "boots", "ssb_log"], name="run_summary_ssb_log"
                    ),
                    models.Index(
                        fields=["machine_class", "clock", "metric", "boots", "ssb_lin"], name="run_summary_ssb_lin"
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("machine_class", "clock", "benchmark", "grid", "sha", "metric"),
                        name="unique_run_summary",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="NoisePool",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("clock", models.CharField(max_length=16)),
                ("benchmark", models.CharField(max_length=64)),
                ("grid", models.CharField(max_length=32)),
                ("metric", models.CharField(max_length=128)),
                ("boots", models.PositiveIntegerField()),
                ("runs", models.IntegerField(default=0)),
                ("positive_runs", models.IntegerField(default=0)),
                ("boots_total", models.BigIntegerField(default=0)),
                ("iterations", models.BigIntegerField(default=0)),
                ("ssb_log", models.FloatField(default=0.0)),
                ("ssw_log", models.FloatField(default=0.0)),
                ("dfw_log", models.BigIntegerField(default=0)),
                ("ssb_lin", models.FloatField(default=0.0)),
                ("ssw_lin", models.FloatField(default=0.0)),
                ("dfw_lin", models.BigIntegerField(default=0)),
                (
                    "machine_class",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.machineclass"
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("machine_class", "clock", "benchmark", "grid", "metric", "boots"),
                        name="unique_noise_pool",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="SeriesState",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("benchmark", models.CharField(max_length=64)),
                ("clock", models.CharField(max_length=16)),
                ("metric", models.CharField(max_length=128)),
                ("commits", models.PositiveIntegerField(default=0)),
                ("drift_ssq", django.contrib.postgres.fields.ArrayField(models.FloatField(), default=list, size=None)),
                ("drift_logf", django.contrib.postgres.fields.ArrayField(models.FloatField(), default=list, size=None)),
                ("drift_n", models.PositiveIntegerField(default=0)),
                ("drift_used", models.PositiveIntegerField(default=0)),
                ("build_log", django.contrib.postgres.fields.ArrayField(models.FloatField(), default=list, size=None)),
                ("build_lin", django.contrib.postgres.fields.ArrayField(models.FloatField(), default=list, size=None)),
                ("positive", models.BooleanField(default=True)),
                ("detector", models.BinaryField(default=b"")),
                ("updated", models.DateTimeField(auto_now=True)),
                (
                    "branch",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="series_states",
                        to="core.trackedbranch",
                    ),
                ),
                (
                    "machine_class",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.machineclass"
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["machine_class", "benchmark", "clock"], name="series_state_class")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("branch", "machine_class", "benchmark", "clock", "metric"), name="unique_series_state"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="SeriesPool",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("benchmark", models.CharField(max_length=64)),
                ("clock", models.CharField(max_length=16)),
                ("metric", models.CharField(max_length=128)),
                ("states", models.IntegerField(default=0)),
                ("nonpositive", models.IntegerField(default=0)),
                ("drift_ssq", django.contrib.postgres.fields.ArrayField(models.FloatField(), default=list, size=None)),
                ("drift_logf", django.contrib.postgres.fields.ArrayField(models.FloatField(), default=list, size=None)),
                ("drift_n", models.BigIntegerField(default=0)),
                ("drift_used", models.BigIntegerField(default=0)),
                ("build_log", django.contrib.postgres.fields.ArrayField(models.FloatField(), default=list, size=None)),
                ("build_lin", django.contrib.postgres.fields.ArrayField(models.FloatField(), default=list, size=None)),
                (
                    "machine_class",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.machineclass"
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("machine_class", "clock", "benchmark", "metric"), name="unique_series_pool"
                    )
                ],
            },
        ),
    ]
