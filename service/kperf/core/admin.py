from __future__ import annotations

from django.contrib import admin

from kperf.core import models


@admin.register(models.Submission)
class SubmissionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("pk", "head_ref", "base_ref", "status", "owner", "created")
    list_filter = ("status",)


@admin.register(models.KernelBuild)
class KernelBuildAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("pk", "sha", "arch", "status", "phase", "created")
    list_filter = ("status", "arch")


@admin.register(models.Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("pk", "submission", "side", "benchmark", "machine_class", "status", "attempt", "runner")
    list_filter = ("status", "machine_class")


@admin.register(models.Runner)
class RunnerAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "machine_class", "health", "last_heartbeat", "version")
    exclude = ("token_hash",)


admin.site.register(models.MachineClass)
admin.site.register(models.Tree)
admin.site.register(models.MetricDef)


@admin.register(models.TrackedBranch)
class TrackedBranchAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("pk", "branch", "tree", "enabled", "head_sha", "last_polled", "last_error")
    list_filter = ("enabled",)


@admin.register(models.ChangePoint)
class ChangePointAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("pk", "branch", "metric", "machine_class", "direction", "change_pct", "commit", "first_seen")
    list_filter = ("direction", "machine_class")


@admin.register(models.Alert)
class AlertAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The outbox: what was mailed, what waits and why."""

    list_display = ("pk", "kind", "subject", "status", "attempts", "last_error", "created", "sent")
    list_filter = ("status", "kind")
    actions = ["retry"]

    @admin.action(description="Send again (back to pending, attempts reset)")
    def retry(self, request: object, queryset: object) -> None:
        queryset.update(status=models.Alert.Status.PENDING, attempts=0)  # type: ignore[attr-defined]
