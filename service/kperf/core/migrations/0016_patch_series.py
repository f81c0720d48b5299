import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("core", "0015_triage")]
    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="submission",
            name="kind",
            field=models.CharField(
                choices=[("branch", "Branch"), ("series", "Series")], default="branch", max_length=8
            ),
        ),
        migrations.AddField(
            model_name="submission",
            name="mail_to",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="alert",
            name="in_reply_to",
            field=models.CharField(blank=True, default="", max_length=250),
        ),
        migrations.CreateModel(
            name="PatchSeries",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("subject", models.CharField(max_length=300)),
                ("author", models.CharField(max_length=300)),
                ("message_id", models.CharField(max_length=250)),
                ("has_cover", models.BooleanField(default=False)),
                ("patch_count", models.PositiveIntegerField()),
                ("patches", models.JSONField(default=list)),
                ("mbox", models.JSONField(default=dict)),
                ("failed_patch", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "submission",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="series", to="core.submission"
                    ),
                ),
            ],
            options={"verbose_name_plural": "patch series"},
        ),
    ]
