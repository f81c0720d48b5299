"""Job.summarised and its partial index in place of the SummarisedJob table,
and SeriesCatchUp: the catch-up before a read of history reads what arrived
since the last read, not every job (docs/history.md)."""

import django.db.models.deletion
from django.db import migrations, models

# The jobs SummarisedJob listed are summarised; the rest are caught up on the next read.
COPY_FLAGS = "UPDATE core_job SET summarised = true WHERE id IN (SELECT job_id FROM core_summarisedjob)"
# The series a read used to find by scanning the jobs, noted once.
NOTE_SERIES = """
INSERT INTO core_seriescatchup (branch_id, machine_class_id, benchmark, clock)
SELECT DISTINCT c.branch_id, j.machine_class_id, j.benchmark, j.clock
FROM core_job j JOIN core_branchcommit c ON c.id = j.branch_commit_id
WHERE j.status = 'done' AND NOT EXISTS (
    SELECT 1 FROM core_seriesstate s
    WHERE s.branch_id = c.branch_id AND s.machine_class_id = j.machine_class_id
      AND s.benchmark = j.benchmark AND s.clock = j.clock
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0028_numa_nodes"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="summarised",
            field=models.BooleanField(default=False),
        ),
        migrations.RunSQL(COPY_FLAGS, reverse_sql=migrations.RunSQL.noop),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status", "done"), ("summarised", False)),
                fields=["machine_class", "clock"],
                name="job_unsummarised",
            ),
        ),
        migrations.CreateModel(
            name="SeriesCatchUp",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("benchmark", models.CharField(max_length=64)),
                ("clock", models.CharField(max_length=16)),
                (
                    "branch",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.trackedbranch"
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
                "constraints": [
                    models.UniqueConstraint(
                        fields=("machine_class", "clock", "benchmark", "branch"), name="unique_series_catch_up"
                    )
                ],
            },
        ),
        migrations.RunSQL(NOTE_SERIES, reverse_sql=migrations.RunSQL.noop),
        migrations.DeleteModel(name="SummarisedJob"),
    ]
