"""Base measurements shared between submissions."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("core", "0010_artifact_storage")]

    operations = [
        migrations.CreateModel(
            name="SharedJob",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("side", models.CharField(default="base", max_length=4)),
                ("created", models.DateTimeField(auto_now_add=True)),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="sharers", to="core.job"
                    ),
                ),
                (
                    "submission",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="shared_jobs", to="core.submission"
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("job", "submission"), name="unique_shared_job_per_submission")
                ],
            },
        ),
        # Existing runners start a new identity now: what they measured
        # before is never shared (the conservative side).
        migrations.AddField(
            model_name="runner",
            name="identity_changed",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddField(
            model_name="comparison",
            name="shared_base_boots",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
