"""Calibration and quarantine of runners (docs/calibration.md)."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def explain_existing_quarantines(apps, schema_editor):
    # A runner an admin quarantined before there was a reason field: the lab page says so, not nothing.
    Runner = apps.get_model("core", "Runner")
    Runner.objects.filter(health="quarantined", health_reason="").update(
        health_reason="quarantined before kperf recorded reasons: see the admin's notes, release when fixed"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0011_shared_base"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="pinned_runner",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="pinned_jobs",
                to="core.runner",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="suspect_note",
            field=models.CharField(blank=True, default="", max_length=500),
        ),
        migrations.AddField(
            model_name="machineclass",
            name="calibration_benchmark",
            field=models.CharField(default="spawn", max_length=64),
        ),
        migrations.AddField(
            model_name="machineclass",
            name="calibration_boots",
            field=models.PositiveIntegerField(default=2),
        ),
        migrations.AddField(
            model_name="machineclass",
            name="calibration_grid",
            field=models.CharField(default="quick", max_length=32),
        ),
        migrations.AddField(
            model_name="machineclass",
            name="reference_build",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="reference_for",
                to="core.kernelbuild",
            ),
        ),
        migrations.AddField(
            model_name="runner",
            name="calibration_baseline_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="runner",
            name="health_reason",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="runner",
            name="health_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="runner",
            name="last_calibration",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="runner",
            name="last_calibration_result",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.AddField(
            model_name="runner",
            name="last_good_calibration",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="RunnerEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[("calibration", "Calibration"), ("quarantine", "Quarantine"), ("release", "Release")],
                        max_length=16,
                    ),
                ),
                (
                    "result",
                    models.CharField(
                        blank=True,
                        choices=[("learning", "Learning"), ("good", "Good"), ("drift", "Drift"), ("failed", "Failed")],
                        default="",
                        max_length=16,
                    ),
                ),
                ("reason", models.TextField(blank=True, default="")),
                ("note", models.TextField(blank=True, default="")),
                ("summary", models.JSONField(blank=True, default=dict)),
                ("judgement", models.JSONField(blank=True, default=dict)),
                ("marked_jobs", models.PositiveIntegerField(default=0)),
                ("created", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="runner_events",
                        to="core.job",
                    ),
                ),
                (
                    "runner",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="events", to="core.runner"
                    ),
                ),
            ],
            options={
                "ordering": ["-created", "-id"],
                "indexes": [models.Index(fields=["runner", "kind", "created"], name="runner_event_idx")],
            },
        ),
        migrations.RunPython(explain_existing_quarantines, migrations.RunPython.noop),
    ]
