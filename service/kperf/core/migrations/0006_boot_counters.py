from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0005_clocks_and_practical_thresholds"),
    ]

    operations = [
        migrations.AddField(
            model_name="bootrecord",
            name="counters",
            field=models.JSONField(default=dict),
        ),
    ]
