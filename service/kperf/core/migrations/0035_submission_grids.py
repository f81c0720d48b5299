"""A submission asks for several grids, and each comparison says which grid it is of.

Every existing submission asked for one grid: it becomes the list of that
grid, and its comparisons, interim looks and added boots are of it. Going
back keeps a submission's first grid; two comparisons that differ only by
grid cannot both be kept then, so going back refuses while any submission
has more than one grid.
"""

from django.db import migrations, models

import kperf.core.models.submissions

# Checks the updates would leave pending to the commit are made at once: PostgreSQL refuses to
# alter a table with pending trigger events, and the fields after the updates alter it.
IMMEDIATE = "SET CONSTRAINTS ALL IMMEDIATE"
FORWARD = [
    IMMEDIATE,
    "UPDATE core_submission SET grids = jsonb_build_array(grid)",
    # The looks taken and boots added so far name their grid now: a submission still
    # running recognises the looks it already took (kperf.core.submissions.looks).
    *(
        f"UPDATE core_submission SET {column} = (SELECT jsonb_agg(e || jsonb_build_object('grid', grid)) "
        f"FROM jsonb_array_elements({column}) e) WHERE jsonb_array_length({column}) > 0"
        for column in ("interim_looks", "reruns")
    ),
    "UPDATE core_comparison c SET grid = s.grid FROM core_submission s WHERE s.id = c.submission_id",
]
BACKWARD = [IMMEDIATE, "UPDATE core_submission SET grid = COALESCE(grids->>0, 'quick')"]
# Run first when going back (the last operation): before the old constraint is put back.
ONE_GRID_EACH = (
    "DO $$ BEGIN IF EXISTS (SELECT 1 FROM core_submission WHERE jsonb_array_length(grids) > 1) THEN "
    "RAISE EXCEPTION 'submissions with several grids cannot be kept by the single-grid schema: "
    "delete them first'; END IF; END $$"
)


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0034_shape_boot_spread"),
    ]
    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="submission",
            name="grids",
            field=models.JSONField(default=kperf.core.models.submissions.default_grids),
        ),
        migrations.AddField(
            model_name="comparison",
            name="grid",
            field=models.CharField(default="quick", max_length=32),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
        migrations.RemoveField(
            model_name="submission",
            name="grid",
        ),
        migrations.RemoveConstraint(
            model_name="comparison",
            name="unique_comparison_per_class_benchmark_clock",
        ),
        migrations.AddConstraint(
            model_name="comparison",
            constraint=models.UniqueConstraint(
                fields=("submission", "machine_class", "benchmark", "grid", "clock"),
                name="unique_comparison_per_class_benchmark_grid_clock",
            ),
        ),
        migrations.RunSQL(migrations.RunSQL.noop, ONE_GRID_EACH),
    ]
