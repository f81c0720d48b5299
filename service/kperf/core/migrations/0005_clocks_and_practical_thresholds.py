from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_tracked_branches_and_alerts"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="changepoint",
            name="unique_change_point_per_commit",
        ),
        migrations.RemoveConstraint(
            model_name="comparison",
            name="unique_comparison_per_class_benchmark",
        ),
        migrations.AddField(
            model_name="changepoint",
            name="clock",
            field=models.CharField(default="wall", max_length=16),
        ),
        migrations.AlterField(
            model_name="comparison",
            name="method",
            field=models.CharField(max_length=500),
        ),
        migrations.AddField(
            model_name="comparison",
            name="clock",
            field=models.CharField(
                choices=[("instructions", "instruction clock"), ("wall", "wall clock")], default="wall", max_length=16
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="clock",
            field=models.CharField(
                choices=[("instructions", "instruction clock"), ("wall", "wall clock")], default="wall", max_length=16
            ),
        ),
        # Classes that exist already measured with the wall clock and keep it
        # (an operator switches one with `add_runner --clock`); new classes
        # get the instruction clock.
        migrations.AddField(
            model_name="machineclass",
            name="clock",
            field=models.CharField(
                choices=[("instructions", "instruction clock"), ("wall", "wall clock")], default="wall", max_length=16
            ),
        ),
        migrations.AlterField(
            model_name="machineclass",
            name="clock",
            field=models.CharField(
                choices=[("instructions", "instruction clock"), ("wall", "wall clock")],
                default="instructions",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="submission",
            name="min_effect_pct",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="trackedbranch",
            name="min_effect_pct",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name="changepoint",
            constraint=models.UniqueConstraint(
                fields=("branch", "machine_class", "clock", "metric", "commit"),
                name="unique_change_point_per_clock_commit",
            ),
        ),
        migrations.AddConstraint(
            model_name="comparison",
            constraint=models.UniqueConstraint(
                fields=("submission", "machine_class", "benchmark", "clock"),
                name="unique_comparison_per_class_benchmark_clock",
            ),
        ),
    ]
