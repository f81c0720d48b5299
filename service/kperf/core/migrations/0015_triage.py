import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0014_verbose_names"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]
    operations: list[migrations.operations.base.Operation] = [
        migrations.CreateModel(
            name="Triage",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[("submission", "submission"), ("change-point", "change point")], max_length=16
                    ),
                ),
                ("series", models.CharField(blank=True, default="", max_length=200)),
                ("title", models.CharField(max_length=300)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("new", "New"),
                            ("confirmed", "Confirmed"),
                            ("expected", "Expected"),
                            ("invalid", "Invalid"),
                            ("fixed", "Fixed"),
                            ("wont-fix", "won't fix"),
                        ],
                        default="new",
                        max_length=16,
                    ),
                ),
                ("note", models.TextField(blank=True, default="")),
                ("fixed_by", models.CharField(blank=True, default="", max_length=40)),
                ("created", models.DateTimeField(auto_now_add=True)),
                ("updated", models.DateTimeField(auto_now=True)),
                (
                    "branch",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="triages",
                        to="core.trackedbranch",
                    ),
                ),
                (
                    "change_point",
                    models.OneToOneField(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="triage",
                        to="core.changepoint",
                    ),
                ),
                (
                    "submission",
                    models.OneToOneField(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="triage",
                        to="core.submission",
                    ),
                ),
            ],
            options={"ordering": ["-created", "-id"]},
        ),
        migrations.CreateModel(
            name="TriageEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("from_state", models.CharField(blank=True, default="", max_length=16)),
                ("to_state", models.CharField(max_length=16)),
                ("note", models.TextField(blank=True, default="")),
                ("fixed_by", models.CharField(blank=True, default="", max_length=40)),
                (
                    "via",
                    models.CharField(
                        choices=[
                            ("kperf", "kperf"),
                            ("web", "web page"),
                            ("api", "API"),
                            ("cli", "kperf triage"),
                            ("mail", "mail reply"),
                        ],
                        max_length=8,
                    ),
                ),
                ("created", models.DateTimeField(auto_now_add=True)),
                (
                    "by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "triage",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="events", to="core.triage"
                    ),
                ),
            ],
            options={"ordering": ["created", "id"]},
        ),
        # Serves the list of regressions filtered by state, newest first.
        migrations.AddIndex(
            model_name="triage",
            index=models.Index(fields=["state", "created"], name="triage_state_idx"),
        ),
        migrations.AddConstraint(
            model_name="triage",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("branch__isnull", True), ("kind", "submission"), ("submission__isnull", False)),
                    models.Q(("branch__isnull", False), ("kind", "change-point"), ("submission__isnull", True)),
                    _connector="OR",
                ),
                name="triage_has_one_target",
            ),
        ),
        migrations.AddConstraint(
            model_name="triage",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("state", "fixed"), _negated=True),
                    models.Q(("fixed_by", ""), _negated=True),
                    _connector="OR",
                ),
                name="triage_fixed_names_a_commit",
            ),
        ),
    ]
