"""Who kperf mails besides the user: confirmed addresses, and whose limit each alert counts against."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0020_imported_spawn_extra_vmas"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]
    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="alert",
            name="owner",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="alerts",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AlterField(
            model_name="alert",
            name="kind",
            field=models.CharField(
                choices=[
                    ("submission", "Submission"),
                    ("change-point", "Change Point"),
                    ("reply", "Reply"),
                    ("confirm-address", "Confirm"),
                ],
                max_length=16,
            ),
        ),
        migrations.CreateModel(
            name="RecipientAddress",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("address", models.CharField(max_length=254)),
                ("token_hash", models.CharField(blank=True, db_index=True, default="", max_length=64)),
                ("requested", models.DateTimeField()),
                ("expires", models.DateTimeField()),
                ("confirmed", models.DateTimeField(blank=True, null=True)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="recipient_addresses",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["address"],
                "verbose_name_plural": "recipient addresses",
                "constraints": [
                    models.UniqueConstraint(fields=("user", "address"), name="recipient_address_once_per_user")
                ],
            },
        ),
    ]
