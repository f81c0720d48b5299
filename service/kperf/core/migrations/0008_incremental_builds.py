"""Incremental builds: which tree a build reused."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("core", "0007_build_leases_and_recovery")]

    operations = [
        migrations.AddField(
            model_name="kernelbuild",
            name="reused_sha",
            field=models.CharField(blank=True, default="", max_length=40),
        ),
        migrations.AddField(
            model_name="kernelbuild",
            name="compiled_files",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="kernelbuild",
            name="incremental_error",
            field=models.TextField(blank=True, default=""),
        ),
    ]
