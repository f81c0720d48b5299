from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("core", "0013_submission_boot_params")]
    operations: list[migrations.operations.base.Operation] = [
        migrations.AlterModelOptions(
            name="commitsummary",
            options={"verbose_name_plural": "commit summaries"},
        ),
        migrations.AlterModelOptions(
            name="machineclass",
            options={"verbose_name_plural": "machine classes"},
        ),
        migrations.AlterModelOptions(
            name="runsummary",
            options={"verbose_name_plural": "run summaries"},
        ),
        migrations.AlterModelOptions(
            name="trackedbranch",
            options={"ordering": ["tree__url", "branch"], "verbose_name_plural": "tracked branches"},
        ),
    ]
