"""SeriesState.detector stored out of line without compression: a branch's
detectors are megabytes of float arrays rewritten after every commit, which
do not compress and cost as much again to try (docs/performance.md)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0029_job_summarised_flag"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE core_seriesstate ALTER COLUMN detector SET STORAGE EXTERNAL",
            reverse_sql="ALTER TABLE core_seriesstate ALTER COLUMN detector SET STORAGE EXTENDED",
        ),
    ]
