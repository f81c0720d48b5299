"""The host speed probe's results: the first estimates on a fresh lab (docs/eta.md, "A fresh lab")."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0032_metric_notes_as_list"),
    ]

    operations = [
        migrations.CreateModel(
            name="HostSpeed",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("hostname", models.CharField(max_length=255)),
                ("probe_seconds", models.FloatField()),
                ("python", models.CharField(blank=True, default="", max_length=32)),
                ("ccache_bytes", models.BigIntegerField(default=0)),
                ("measured", models.DateTimeField(auto_now_add=True, db_index=True)),
            ],
            options={
                "verbose_name_plural": "host speeds",
            },
        ),
    ]
