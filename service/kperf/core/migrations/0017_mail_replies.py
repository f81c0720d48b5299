import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("core", "0016_patch_series")]
    operations: list[migrations.operations.base.Operation] = [
        migrations.AlterField(
            model_name="alert",
            name="kind",
            field=models.CharField(
                choices=[("submission", "Submission"), ("change-point", "Change Point"), ("reply", "Reply")],
                max_length=16,
            ),
        ),
        migrations.CreateModel(
            name="ReplyToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("token", models.CharField(max_length=64, unique=True)),
                ("created", models.DateTimeField(auto_now_add=True)),
                ("expires", models.DateTimeField()),
                (
                    "alert",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="reply_token", to="core.alert"
                    ),
                ),
                (
                    "triage",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="reply_tokens", to="core.triage"
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="InboundMail",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("received", models.DateTimeField(auto_now_add=True)),
                ("message_id", models.CharField(blank=True, default="", max_length=300)),
                ("envelope_from", models.CharField(blank=True, default="", max_length=300)),
                ("from_address", models.CharField(blank=True, default="", max_length=300)),
                ("subject", models.CharField(blank=True, default="", max_length=300)),
                ("size", models.PositiveIntegerField(default=0)),
                (
                    "outcome",
                    models.CharField(
                        choices=[("applied", "Applied"), ("unchanged", "Unchanged"), ("ignored", "Ignored")],
                        max_length=16,
                    ),
                ),
                ("reason", models.CharField(blank=True, default="", max_length=32)),
                ("detail", models.TextField(blank=True, default="")),
                (
                    "answer",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="answered",
                        to="core.alert",
                    ),
                ),
                (
                    "token",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="mails",
                        to="core.replytoken",
                    ),
                ),
            ],
            options={
                "ordering": ["-received", "-id"],
                "indexes": [models.Index(fields=["message_id"], name="inbound_mail_msgid_idx")],
            },
        ),
    ]
