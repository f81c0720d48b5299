"""A metric's notes as a list of text and a comparison's method as text: no composition can overflow them.

The notes were one string of at most 300 characters, joined with "; ", and
a page-allocator metric with four notes passed it, failing the whole
verdict's storing. Each existing note is carried over whole, as the list's
one element: splitting it again on "; " would cut notes that hold "; "
themselves. Going back joins the list and cuts it to the old width.
"""

import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0031_submission_interim_looks"),
    ]
    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="metriccomparison",
            name="notes",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.TextField(), blank=True, default=list, size=None
            ),
        ),
        # One statement over the table: it may hold a row per metric of every comparison ever made.
        migrations.RunSQL(
            "UPDATE core_metriccomparison SET notes = ARRAY[note] WHERE note <> ''",
            "UPDATE core_metriccomparison SET note = left(array_to_string(notes, '; '), 300)",
        ),
        migrations.RemoveField(
            model_name="metriccomparison",
            name="note",
        ),
        migrations.AlterField(
            model_name="comparison",
            name="method",
            field=models.TextField(),
        ),
        migrations.AlterField(
            model_name="metriccomparison",
            name="verdict",
            field=models.CharField(
                choices=[
                    ("regression", "Regression"),
                    ("improvement", "Improvement"),
                    ("no-change", "No Change"),
                    ("inconclusive", "Inconclusive"),
                    ("error", "Error"),
                ],
                max_length=16,
            ),
        ),
    ]
