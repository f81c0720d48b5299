from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("core", "0018_inbound_unique")]
    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="patchseries",
            name="apply_attempts",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
