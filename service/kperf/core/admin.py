from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from kperf.core import models
from kperf.core.lab import calibration, runner_health


@admin.register(models.Submission)
class SubmissionAdmin(admin.ModelAdmin[models.Submission]):
    list_display = ("pk", "head_ref", "base_ref", "status", "owner", "created")
    list_filter = ("status",)


@admin.register(models.KernelBuild)
class KernelBuildAdmin(admin.ModelAdmin[models.KernelBuild]):
    list_display = ("pk", "sha", "arch", "status", "phase", "created")
    list_filter = ("status", "arch")


@admin.register(models.Job)
class JobAdmin(admin.ModelAdmin[models.Job]):
    list_display = ("pk", "submission", "side", "benchmark", "machine_class", "status", "attempt", "runner")
    list_filter = ("status", "machine_class")


@admin.register(models.StatusChange)
class StatusChangeAdmin(admin.ModelAdmin[models.StatusChange]):
    # History: read, never written here.
    list_display = ("at", "kind", "object_id", "source", "target", "actor", "why")
    list_filter = ("kind", "target")
    search_fields = ("=object_id", "actor", "why")

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(models.BuildMachine)
class BuildMachineAdmin(admin.ModelAdmin[models.BuildMachine]):
    # Tokens are made by `kperf-manage add_builder` and shown once; the hash is no use to read.
    list_display = ("name", "enabled", "hostname", "version", "last_seen", "created")
    exclude = ("token_hash",)
    readonly_fields = ("hostname", "version", "last_seen", "created")


@admin.register(models.Runner)
class RunnerAdmin(admin.ModelAdmin[models.Runner]):
    list_display = (
        "name",
        "machine_class",
        "health",
        "health_reason",
        "health_since",
        "last_calibration_result",
        "last_good_calibration",
        "last_heartbeat",
        "version",
    )
    list_filter = ("health", "machine_class")
    exclude = ("token_hash",)
    # Health changes only through the actions: they keep the history and mark jobs (kperf.core.lab.runner_health).
    readonly_fields = (
        "health",
        "health_reason",
        "health_since",
        "last_calibration",
        "last_calibration_result",
        "last_good_calibration",
        "calibration_baseline_since",
        "identity_changed",
    )
    actions = ["release", "quarantine"]

    @admin.action(description="Release (back to work; a calibration is queued)")
    def release(self, request: Any, queryset: Any) -> None:
        for runner in queryset:
            calibration.release_by_name(runner.name, request.user, "released in the admin")

    @admin.action(description="Quarantine (claims nothing until released)")
    def quarantine(self, request: Any, queryset: Any) -> None:
        for runner in queryset:
            runner_health.quarantine_by_name(runner.name, request.user, "quarantined in the admin")


@admin.register(models.RunnerEvent)
class RunnerEventAdmin(admin.ModelAdmin[models.RunnerEvent]):
    """A runner's history: calibrations, quarantines, releases; written by kperf, read here."""

    list_display = ("created", "runner", "kind", "result", "reason", "by", "note")
    list_filter = ("kind", "result", "runner")

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(models.MachineClass)
class MachineClassAdmin(admin.ModelAdmin[models.MachineClass]):
    list_display = ("name", "arch", "clock", "reference_build", "calibration_benchmark", "calibration_grid")
    raw_id_fields = ("reference_build",)


@admin.register(models.ShapeBootSpread)
class ShapeBootSpreadAdmin(admin.ModelAdmin[models.ShapeBootSpread]):
    """Each machine shape's boot spread as the lab measured it (docs/statistics.md, "Each shape's own boot spread")."""

    list_display = (
        "metric", "machine_class", "profile", "vcpus", "numa_nodes", "benchmark", "grid", "sd", "dof", "boots",
        "kernels", "measured",
    )  # fmt: skip
    list_filter = ("machine_class", "benchmark", "grid", "profile", "vcpus", "numa_nodes")


admin.site.register(models.Tree)
admin.site.register(models.MetricDef)


@admin.register(models.HostSpeed)
class HostSpeedAdmin(admin.ModelAdmin[models.HostSpeed]):
    # What the fresh lab's first ETAs rest on (docs/eta.md, "A fresh lab"): the newest counts.
    list_display = ("hostname", "probe_seconds", "python", "ccache_bytes", "measured")
    ordering = ("-measured",)


@admin.register(models.TrackedBranch)
class TrackedBranchAdmin(admin.ModelAdmin[models.TrackedBranch]):
    list_display = ("pk", "branch", "tree", "enabled", "head_sha", "last_polled", "last_error")
    list_filter = ("enabled",)


@admin.register(models.ChangePoint)
class ChangePointAdmin(admin.ModelAdmin[models.ChangePoint]):
    list_display = ("pk", "branch", "metric", "machine_class", "direction", "change_pct", "commit", "first_seen")
    list_filter = ("direction", "machine_class")


@admin.register(models.Alert)
class AlertAdmin(admin.ModelAdmin[models.Alert]):
    """The outbox: what was mailed, what waits and why."""

    list_display = ("pk", "kind", "subject", "status", "attempts", "last_error", "created", "sent")
    list_filter = ("status", "kind")
    actions = ["retry"]

    @admin.action(description="Send again (back to pending, attempts reset)")
    def retry(self, request: HttpRequest, queryset: QuerySet[models.Alert]) -> None:
        queryset.update(status=models.Alert.Status.PENDING, attempts=0)


@admin.register(models.InboundMail)
class InboundMailAdmin(admin.ModelAdmin[models.InboundMail]):
    # What became of each reply to an alert (docs/triage.md, "By mail"): read-only, kperf writes it.
    list_display = ("received", "from_address", "outcome", "reason", "subject", "size")
    list_filter = ("outcome", "reason")
    search_fields = ("from_address", "message_id", "subject")
    readonly_fields = [f.name for f in models.InboundMail._meta.fields]

    def has_add_permission(self, request: Any) -> bool:
        return False


@admin.register(models.PatchSeries)
class PatchSeriesAdmin(admin.ModelAdmin[models.PatchSeries]):
    # A submitted series as kperf read it (docs/submitting.md, "Patch series"): read-only, the mbox decides.
    list_display = ("submission", "subject", "author", "patch_count", "has_cover", "failed_patch", "apply_attempts")
    search_fields = ("subject", "author", "message_id")
    readonly_fields = [f.name for f in models.PatchSeries._meta.fields]

    def has_add_permission(self, request: Any) -> bool:
        return False


@admin.register(models.UnreadableMail)
class UnreadableMailAdmin(admin.ModelAdmin[models.UnreadableMail]):
    # Mail the IMAP poll failed to read, with its count (given up after 3; docs/triage.md).
    list_display = ("key", "attempts", "error", "first", "last")
    readonly_fields = [f.name for f in models.UnreadableMail._meta.fields]

    def has_add_permission(self, request: Any) -> bool:
        return False


@admin.register(models.RecipientAddress)
class RecipientAddressAdmin(admin.ModelAdmin[models.RecipientAddress]):
    # Addresses users asked to have results mailed to (docs/submitting.md): deleting one withdraws it.
    list_display = ("address", "user", "requested", "expires", "confirmed")
    list_filter = (("confirmed", admin.EmptyFieldListFilter),)
    search_fields = ("address", "user__username")
    readonly_fields = [f.name for f in models.RecipientAddress._meta.fields]

    def has_add_permission(self, request: Any) -> bool:
        return False
