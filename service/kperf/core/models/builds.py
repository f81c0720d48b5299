"""Kernel builds: one per (sha, arch, config digest, scope).

A build runs the tree's own code; its warm object tree and ccache are only
shared within its scope (kperf_kbuild.driver, "Scopes"), so a build is only
reused within its scope, or from the lab's scope, which everyone trusts."""

from __future__ import annotations

import secrets
from typing import ClassVar

from django.db import models

from kperf.core.models.accounts import hash_token
from kperf.core.models.lifecycle import final_statuses
from kperf.core.models.trees import Tree

# The config digest of a KernelBuild that kperf did not build: the kernel of
# imported mmtests runs (kperf.core.results.mmtests_import). Access rules treat such builds
# as lab-wide reference data, so the marker lives with the model.
IMPORTED_DIGEST = "imported:mmtests"


def imported_digest(profile: str) -> str:
    """The config digest of an imported kernel of `profile`: one build per
    profile, since kernels of two profiles are two series. The default
    profile's is the bare marker imports always had."""
    return IMPORTED_DIGEST if profile in ("", "tiny") else f"{IMPORTED_DIGEST}:{profile}"


class KernelBuild(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        BUILDING = "building"
        DONE = "done"
        FAILED = "failed"

    # Every status and the only ways out of it (kperf.core.lifecycle.states).
    TRANSITIONS: ClassVar[dict[str, frozenset[str]]] = {
        Status.QUEUED: frozenset({Status.BUILDING}),
        # Built, or the kernel does not build (kind kernel), or the machine
        # failed (kind infra) after its last attempt; back to queued for
        # another attempt after an infrastructure fault or a lost worker.
        Status.BUILDING: frozenset({Status.DONE, Status.FAILED, Status.QUEUED}),
        Status.DONE: frozenset(),
        # Only an infrastructure failure leaves here, when a later submission
        # or tracked commit needs the build again.
        Status.FAILED: frozenset({Status.QUEUED}),
    }
    FINAL = final_statuses(TRANSITIONS)

    tree = models.ForeignKey(Tree, on_delete=models.PROTECT, related_name="builds")
    sha = models.CharField(max_length=40)
    arch = models.CharField(max_length=16)
    config_digest = models.CharField(max_length=64)
    # The configuration profile it was built with (kperf_kbuild.profiles:
    # tiny, mm, distro); part of config_digest too. Never pooled or compared
    # across profiles (docs/kernels.md).
    profile = models.CharField(max_length=16, default="tiny")
    # What did not stop the kernel from building but is missing from it:
    # "pagealloc.ko not built: <its first error>", fragment options the
    # release does not have. Shown with the build and with a job it failed.
    warnings = models.JSONField(default=list, blank=True)
    # "lab" (operators' and staff's builds, trusted by everyone) or
    # "user-<id>" (one submitter's builds, reused only by that submitter).
    scope = models.CharField(max_length=64, default="lab")

    class FailureKind(models.TextChoices):
        # The kernel does not build: a fact about this sha and config, reused.
        KERNEL = "kernel"
        # The build machine failed (disk full, compiler killed, tool missing,
        # worker dead or over its time limit): never a kernel's result. A
        # later submission or tracked commit that needs the build queues it again.
        INFRA = "infra"

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    failure_kind = models.CharField(max_length=16, choices=FailureKind.choices, blank=True, default="")
    # Builds are leased like jobs: the worker running one extends the lease
    # from a heartbeat thread; a build whose lease ran out lost its worker and
    # is taken over (docs/operations.md, "Recovery").
    attempt = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=255, blank=True, default="")
    lease_expires = models.DateTimeField(null=True, blank=True)
    phase = models.CharField(max_length=32, blank=True, default="")
    progress = models.CharField(max_length=200, blank=True, default="")
    error = models.TextField(blank=True, default="")
    log_tail = models.TextField(blank=True, default="")
    # {"kernel": {"path": "...", "sha256": "...", "size": 123}, ...}
    artifacts = models.JSONField(default=dict, blank=True)
    # The final .config as {"CONFIG_X": "y" | "m" | "n" | value}, read once from
    # the "config" artifact when first compared (kperf.core.builds.configs);
    # None until then, or when the build has no .config.
    config_options = models.JSONField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    # When the status last changed: the sweeper re-sends a queued build whose
    # task was lost (broker down) once this is older than its deadline.
    updated = models.DateTimeField(auto_now=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    # How the build was made (kperf_kbuild.trees): the commit whose object
    # tree it started from (blank: an empty object tree, a clean build), how
    # many files kbuild compiled, and, when the incremental build failed and
    # a clean one replaced it, the incremental attempt's first error.
    reused_sha = models.CharField(max_length=40, blank=True, default="")
    compiled_files = models.PositiveIntegerField(default=0)
    incremental_error = models.TextField(blank=True, default="")
    # A queued build that failed on a build machine waits this long before a
    # build machine that pulls (kperf-builder) may claim it again: the pull
    # protocol's form of the Celery task's retry countdown.
    not_before = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["sha", "arch", "config_digest", "scope"], name="unique_build_per_sha_arch_config_scope"
            )
        ]

    def __str__(self) -> str:
        return f"{self.sha[:12]} {self.arch} ({self.status})"

    @property
    def finished_ok(self) -> bool:
        return self.status == self.Status.DONE

    @property
    def duration_s(self) -> float | None:
        if self.started and self.finished:
            return (self.finished - self.started).total_seconds()
        return None


class BuildMachine(models.Model):
    """A build machine that pulls builds over HTTP (`kperf-builder`, docs/builders.md).

    It holds only its own token: no database, broker or object-store
    credential. It fetches the commit from the service's mirror through git's
    HTTP protocol and hands its outputs back through the same API.
    """

    TOKEN_PREFIX = "kpbld_"

    name = models.CharField(max_length=64, unique=True)
    token_hash = models.CharField(max_length=64, unique=True)
    enabled = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    hostname = models.CharField(max_length=255, blank=True, default="")
    version = models.CharField(max_length=64, blank=True, default="")

    def __str__(self) -> str:
        return self.name

    @property
    def worker(self) -> str:
        """How KernelBuild.worker names a build this machine holds."""
        return f"builder:{self.name}"

    @classmethod
    def register(cls, name: str) -> tuple[BuildMachine, str]:
        """Create a build machine, or give an existing one a new token; returns the token once."""
        plain = cls.TOKEN_PREFIX + secrets.token_urlsafe(32)
        defaults = {"token_hash": hash_token(plain), "enabled": True}
        machine, _ = cls.objects.update_or_create(name=name, defaults=defaults)
        return machine, plain
