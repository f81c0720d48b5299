"""Builds belong to a scope (docs/security.md, "Builds"): existing builds are the lab's."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0021_mail_recipients"),
    ]

    operations = [
        migrations.AddField(
            model_name="kernelbuild",
            name="scope",
            field=models.CharField(default="lab", max_length=64),
        ),
        migrations.RemoveConstraint(
            model_name="kernelbuild",
            name="unique_build_per_sha_arch_config",
        ),
        migrations.AddConstraint(
            model_name="kernelbuild",
            constraint=models.UniqueConstraint(
                fields=("sha", "arch", "config_digest", "scope"), name="unique_build_per_sha_arch_config_scope"
            ),
        ),
    ]
