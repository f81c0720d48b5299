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
