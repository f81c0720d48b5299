from django.db import migrations, models

THP_CHOICES = [("", "kernel default"), ("always", "always"), ("madvise", "madvise"), ("never", "never")]


class Migration(migrations.Migration):
    dependencies = [("core", "0012_runner_calibration")]
    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="submission",
            name="boot_params",
            field=models.CharField(blank=True, default="", max_length=512),
        ),
        migrations.AddField(
            model_name="submission",
            name="thp",
            field=models.CharField(blank=True, choices=THP_CHOICES, default="", max_length=8),
        ),
        migrations.AddField(
            model_name="job",
            name="boot_params",
            field=models.CharField(blank=True, default="", max_length=512),
        ),
        migrations.AddField(
            model_name="job",
            name="thp",
            field=models.CharField(blank=True, choices=THP_CHOICES, default="", max_length=8),
        ),
    ]
