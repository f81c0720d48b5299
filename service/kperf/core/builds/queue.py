"""Run one kernel build and store its artifacts where runners can fetch them.

A build is leased like a job. The worker that claims it extends the lease
from a heartbeat thread while the compiler runs; a worker that dies (killed,
out of memory, its machine gone) stops extending it, and once the lease has
run out the build is taken over by the next worker the sweeper or a
redelivered task sends. Faults of the build machine (driver's
BuildInfraError, a dead worker, the task's time limit) are tried again with
backoff up to KPERF_BUILD_MAX_ATTEMPTS and, after the last, stored as an
`infra` failure that the next submission needing the build queues again;
only a kernel that does not build is a lasting result.
"""

from __future__ import annotations

import logging
import shutil
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from kperf.core.builds import apply_series, gitops
from kperf.core.builds import artifacts as artifact_store
from kperf.core.lifecycle import dispatch, states
from kperf.core.lifecycle.task_names import Task
from kperf.core.models import KernelBuild, Tree
from kperf_kbuild.driver import DEFAULT_PROFILE, BuildInfraError, BuildRequest, build_kernel
from kperf_kbuild.sandbox import Sandbox

log = logging.getLogger(__name__)

_B = KernelBuild.Status


def output_dir(build: KernelBuild) -> Path:
    """Where the driver leaves a build's files on this machine until they are in the artifact storage."""
    return Path(settings.KPERF_BUILD_ROOT) / "outputs" / str(build.pk)


LAB_SCOPE = "lab"


def scope_for(user: AbstractBaseUser | None) -> str:
    """Whose warm trees and ccache a build for ``user`` may use and write:
    the lab's for staff (they vouch for what they submit), one of their own
    for everyone else (kperf_kbuild.driver, "Scopes"; docs/security.md)."""
    if user is None or getattr(user, "is_staff", False):
        return LAB_SCOPE
    return f"user-{user.pk}"


def pulled() -> bool:
    """Whether build machines pull builds over HTTP (KPERF_BUILDERS=remote,
    kperf.core.builds.machines) instead of Celery workers on the builds queue."""
    return bool(settings.KPERF_BUILDERS == "remote")


def nudge(build_id: int, countdown: float | None = None) -> None:
    """Tell the builds queue once the caller commits; nothing when build
    machines pull: they find the queued row (and its not_before) themselves."""
    if not pulled():
        dispatch.after_commit(Task.BUILD_KERNEL, build_id, countdown=countdown)


def need_build(
    tree: Tree, sha: str, arch: str, digest: str, scope: str = LAB_SCOPE, profile: str = DEFAULT_PROFILE
) -> KernelBuild:
    """The build of (sha, arch, config) an owner needs, queued when it must run (caller is in a transaction).

    A kernel that did not build is a fact about that sha and config and is
    reused as is; a build that failed because of the build machine is queued
    again, so a machine fault never stands for the kernel. Outside the lab's
    scope, the lab's build of the same kernel is used when there is one:
    everyone trusts what the lab built; nobody else's scope is trusted.
    """
    if scope != LAB_SCOPE:
        lab = (
            KernelBuild.objects.filter(sha=sha, arch=arch, config_digest=digest, scope=LAB_SCOPE)
            .exclude(status=_B.FAILED, failure_kind=KernelBuild.FailureKind.INFRA)
            .first()
        )
        if lab is not None:
            return lab
    build, created = KernelBuild.objects.get_or_create(
        sha=sha, arch=arch, config_digest=digest, scope=scope, defaults={"tree": tree, "profile": profile}
    )
    if created:
        nudge(build.pk)
    elif build.status == _B.FAILED and build.failure_kind == KernelBuild.FailureKind.INFRA:
        if states.move_where(KernelBuild.objects.filter(pk=build.pk, failure_kind="infra"), _B.QUEUED, attempt=0):
            log.info("build %s: failed on the build machine before, queued again", build.pk)
            nudge(build.pk)
        build.refresh_from_db()
    return build


def worker_name() -> str:
    return f"{socket.gethostname()}:{threading.get_native_id()}"


def lease() -> timedelta:
    return timedelta(seconds=settings.KPERF_BUILD_LEASE_SECONDS)


class _Heartbeat(threading.Thread):
    """Extends a build's lease while the build runs; notices when it was taken over."""

    def __init__(self, build_id: int, attempt: int) -> None:
        super().__init__(name=f"build-{build_id}-heartbeat", daemon=True)
        self.build_id, self.attempt = build_id, attempt
        self.stopped = threading.Event()
        self.lost = False

    def run(self) -> None:
        every = max(1.0, settings.KPERF_BUILD_LEASE_SECONDS / 4)
        try:
            while not self.stopped.wait(every):
                try:
                    kept = KernelBuild.objects.filter(
                        pk=self.build_id, status=_B.BUILDING, attempt=self.attempt
                    ).update(lease_expires=timezone.now() + lease())
                except Exception:  # the database may be restarting: try again next beat
                    log.warning("build %s: could not extend the lease", self.build_id, exc_info=True)
                    close_old_connections()
                    continue
                if not kept:
                    self.lost = True
                    log.warning("build %s: the lease was lost (taken over or expired)", self.build_id)
                    return
        finally:
            connection.close()


def expire_builds() -> int:
    """Builds whose worker stopped extending the lease: tried again, or failed as infra after the last attempt."""
    now = timezone.now()
    changed = 0
    stale = list(
        KernelBuild.objects.filter(status=_B.BUILDING, lease_expires__lt=now).values_list("pk", "worker", "attempt")
    )
    for build_id, worker, attempt in stale:
        reason = f"the worker {worker or '?'} stopped reporting on attempt {attempt} (killed, or its machine went away)"
        if retry_or_fail(build_id, attempt, reason, only_expired=True):
            changed += 1
    return changed


def retry_or_fail(build_id: int, attempt: int, reason: str, only_expired: bool = False) -> bool:
    """After an infrastructure fault on `attempt`: queue the build again with
    backoff, or after the last attempt fail it as `infra`. False if the build
    moved on meanwhile (another worker has it)."""
    with transaction.atomic():
        build = KernelBuild.objects.select_for_update().filter(pk=build_id).first()
        if build is None or build.status != _B.BUILDING or build.attempt != attempt:
            return False
        if only_expired and (build.lease_expires is None or build.lease_expires >= timezone.now()):
            return False
        if attempt < settings.KPERF_BUILD_MAX_ATTEMPTS:
            delay = min(settings.KPERF_BUILD_RETRY_MAX_SECONDS, settings.KPERF_BUILD_RETRY_SECONDS * 2 ** (attempt - 1))
            states.move(
                build,
                _B.QUEUED,
                phase="queued",
                progress=f"attempt {attempt} failed, retrying in {delay:.0f} s",
                error=reason,
                lease_expires=None,
                worker="",
                not_before=timezone.now() + timedelta(seconds=delay),
            )
            nudge(build_id, countdown=delay)
            log.warning("build %s: attempt %s failed (%s); again in %.0f s", build_id, attempt, reason, delay)
        else:
            _store_failure(build, KernelBuild.FailureKind.INFRA, reason, log_tail=build.log_tail)
            log.error("build %s: failed on its last attempt %s: %s", build_id, attempt, reason)
    return True


def _claim(build_id: int) -> KernelBuild | None:
    """Take a queued build (conditional update: if another worker has it, nothing changes)."""
    with transaction.atomic():
        build = KernelBuild.objects.select_for_update(skip_locked=True).filter(pk=build_id).first()
        if build is None or build.status != _B.QUEUED:
            return None
        take(build, worker_name())
    return build


def take(build: KernelBuild, worker: str) -> None:
    """Move a queued build, locked by the caller's transaction, to building under `worker`'s lease."""
    now = timezone.now()
    states.move(
        build,
        _B.BUILDING,
        attempt=build.attempt + 1,
        worker=worker,
        not_before=None,
        lease_expires=now + lease(),
        started=now,
        finished=None,
        phase="checkout",
        progress="starting",
        error="",
        failure_kind="",
    )


def run_build(build_id: int) -> None:
    # A redelivered task for a build whose worker died finds it building
    # with a lapsed lease: hand it back to the queue first, then claim it.
    if KernelBuild.objects.filter(pk=build_id, status=_B.BUILDING, lease_expires__lt=timezone.now()).exists():
        expire_builds()
    claimed = _claim(build_id)
    if claimed is None:
        log.info("build %s: not queued (done, failed, or another worker has it)", build_id)
        return
    build = KernelBuild.objects.select_related("tree").get(pk=build_id)
    attempt = build.attempt
    heartbeat = _Heartbeat(build_id, attempt)
    heartbeat.start()
    try:
        _run(build, attempt, heartbeat)
    except (SoftTimeLimitExceeded, BuildInfraError, artifact_store.ArtifactUnavailable) as e:
        if isinstance(e, SoftTimeLimitExceeded):
            why = f"the build took longer than its time limit ({settings.KPERF_BUILD_TIME_LIMIT} s)"
        elif isinstance(e, artifact_store.ArtifactUnavailable):
            why = f"the build's files could not be stored: {e}"
        else:
            why = f"the build could not run: {e}"
        retry_or_fail(build_id, attempt, why)
    finally:
        heartbeat.stopped.set()


def _ensure_commit(build: KernelBuild) -> None:
    """Fetch the tree into this machine's mirror when the commit is not there (BuildInfraError if it cannot be had)."""
    try:
        # An applied patch series is in no tree: made again from its mbox.
        if not gitops.has_commit(build.tree.mirror_path, build.sha) and apply_series.restore(build):
            return
        gitops.ensure_commit(build.tree.url, build.tree.mirror_path, build.sha, timeout=settings.KPERF_GIT_TIMEOUT)
    except gitops.GitError as e:
        raise BuildInfraError(
            f"commit {build.sha} is not in this build machine's mirror and could not be fetched from "
            f"{build.tree.url}: {e}; the tree must be reachable from every build machine"
        ) from e


def _run(build: KernelBuild, attempt: int, heartbeat: _Heartbeat) -> None:
    build_id = build.pk
    out_dir = output_dir(build)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    # A build machine of its own has its own mirror, which may not have the commit yet.
    _ensure_commit(build)
    last_update = 0.0

    def progress(phase: str, message: str) -> None:
        nonlocal last_update
        now = time.monotonic()
        # Builds print thousands of lines; one database write every two
        # seconds is enough for a progress display.
        if now - last_update < 2.0 and phase == build.phase:
            return
        last_update = now
        build.phase = phase
        KernelBuild.objects.filter(pk=build_id, attempt=attempt).update(phase=phase, progress=message[:200])

    req = BuildRequest(
        repo=build.tree.mirror_path,
        sha=build.sha,
        arch=build.arch,
        work_root=Path(settings.KPERF_BUILD_ROOT),
        output_dir=out_dir,
        ccache_dir=Path(settings.KPERF_CCACHE_DIR),
        jobs=settings.KPERF_BUILD_JOBS,
        trees_budget_bytes=settings.KPERF_BUILD_TREES_BUDGET_BYTES,
        scope=build.scope,
        profile=build.profile,
        # The sandbox's own wall limit stops a build that never ends as the
        # tree's failure, before the task's time limit calls it the machine's.
        sandbox=_sandbox(),
    )
    log.info("build %s: %s for %s (attempt %s)", build_id, build.sha[:12], build.arch, attempt)
    result = build_kernel(req, progress)
    # How it was made (incremental from which commit's objects, how much it
    # recompiled), fenced by the attempt like the progress updates.
    KernelBuild.objects.filter(pk=build_id, attempt=attempt).update(
        reused_sha=result.reused_sha,
        compiled_files=result.compiled,
        incremental_error=result.incremental_error,
        warnings=[w[:1000] for w in result.warnings[:20]],
    )
    # Stored (and read back, sha256 checked) before the build is done, so
    # a runner on any host finds every file the row lists.
    artifacts = artifact_store.store_build_outputs(build_id, attempt, result.artifacts)
    shutil.rmtree(out_dir, ignore_errors=True)
    finish(build_id, attempt, ok=result.ok, error=result.error, log_tail=result.log_tail, artifacts=artifacts)


def _sandbox() -> Sandbox:
    sandbox = Sandbox.from_environ()
    return sandbox.with_limits(wall_seconds=min(sandbox.limits.wall_seconds, settings.KPERF_BUILD_TIME_LIMIT * 0.9))


def finish(
    build_id: int, attempt: int, ok: bool, error: str, log_tail: str, artifacts: dict[str, dict[str, object]]
) -> None:
    with transaction.atomic():
        build = KernelBuild.objects.select_for_update().get(pk=build_id)
        if build.status != _B.BUILDING or build.attempt != attempt:
            # Taken over after this worker's lease lapsed: the newer attempt's result counts.
            log.warning("build %s: attempt %s finished after losing its lease; result dropped", build_id, attempt)
            return
        if ok:
            states.move(
                build,
                _B.DONE,
                phase="done",
                progress="",
                error="",
                log_tail=log_tail,
                artifacts=artifacts,
                finished=timezone.now(),
                lease_expires=None,
            )
            _advance_owners(build)
        else:
            _store_failure(
                build, KernelBuild.FailureKind.KERNEL, error or "the build failed: see the log", log_tail, artifacts
            )
    log.info("build %s: %s", build_id, "done" if ok else f"FAILED: {error}")


def _store_failure(
    build: KernelBuild, kind: str, error: str, log_tail: str, artifacts: dict[str, dict[str, object]] | None = None
) -> None:
    states.move(
        build,
        _B.FAILED,
        failure_kind=kind,
        phase="failed",
        progress="",
        error=error,
        log_tail=log_tail,
        artifacts=artifacts if artifacts is not None else build.artifacts,
        finished=timezone.now(),
        lease_expires=None,
    )
    _advance_owners(build)


def _advance_owners(build: KernelBuild) -> None:
    """Let every submission and tracked commit waiting for this build move on, once the caller commits."""
    for sub_id in build.submission_builds.values_list("submission_id", flat=True).distinct():
        dispatch.after_commit(Task.ADVANCE_SUBMISSION, sub_id)
    for commit_id in build.branch_commits.values_list("pk", flat=True):
        dispatch.after_commit(Task.ADVANCE_BRANCH_COMMIT, commit_id)
