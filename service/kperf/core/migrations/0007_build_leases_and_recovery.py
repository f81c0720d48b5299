"""Builds leased like jobs, failures told apart (kernel or infra), and an
`updated` stamp on builds and tracked commits for the sweeper's deadlines."""

from django.db import migrations, models


def classify_failures(apps, schema_editor):
    """Earlier infrastructure failures were stored with this prefix
    (kperf.core.builds.queue before leases): mark them infra, so the next
    submission that needs such a build queues it again."""
    KernelBuild = apps.get_model("core", "KernelBuild")
    failed = KernelBuild.objects.filter(status="failed")
    failed.filter(error__startswith="the build could not run").update(failure_kind="infra")
    failed.filter(failure_kind="").update(failure_kind="kernel")
    # A build left `building` by a worker that died before leases existed has
    # no lease: give it one that has already run out, so the sweeper takes it.
    KernelBuild.objects.filter(status="building", lease_expires__isnull=True).update(
        lease_expires=models.F("created"), attempt=1
    )


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0006_boot_counters"),
    ]

    operations = [
        migrations.AddField(
            model_name="branchcommit",
            name="updated",
            field=models.DateTimeField(auto_now=True),
        ),
        migrations.AddField(
            model_name="kernelbuild",
            name="attempt",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="kernelbuild",
            name="failure_kind",
            field=models.CharField(
                blank=True, choices=[("kernel", "Kernel"), ("infra", "Infra")], default="", max_length=16
            ),
        ),
        migrations.AddField(
            model_name="kernelbuild",
            name="lease_expires",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="kernelbuild",
            name="updated",
            field=models.DateTimeField(auto_now=True),
        ),
        migrations.AddField(
            model_name="kernelbuild",
            name="worker",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
        migrations.RunPython(classify_failures, migrations.RunPython.noop),
    ]
