"""Artifacts and old outputs through Django's storage API."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("core", "0009_history_summaries")]

    # KernelBuild.artifacts keeps its shape: new rows name a storage "key"
    # where old ones name a local "path", and readers take both
    # (kperf.core.builds.artifacts), so no row needs rewriting here.
    operations = [
        migrations.AddField(
            model_name="job",
            name="console_log_archive",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="bootrecord",
            name="raw_output_archive",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
