"""Run one kernel build and store its artifacts where runners can fetch them."""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from functools import partial
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from kperf.core.models import KernelBuild
from kperf_kbuild.driver import BuildInfraError, BuildRequest, build_kernel

log = logging.getLogger("kperf.builds")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def artifact_dir(build: KernelBuild) -> Path:
    return Path(settings.KPERF_ARTIFACT_ROOT) / "builds" / str(build.pk)


def run_build(build_id: int) -> None:
    # Claim the build with a conditional update: if another worker already
    # took it, exactly zero rows change and this one walks away.
    claimed = KernelBuild.objects.filter(pk=build_id, status=KernelBuild.Status.QUEUED).update(
        status=KernelBuild.Status.BUILDING, started=timezone.now(), phase="checkout", progress="starting"
    )
    if claimed != 1:
        log.info("build %s: not queued any more, another worker has it", build_id)
        return
    build = KernelBuild.objects.select_related("tree").get(pk=build_id)
    out_dir = artifact_dir(build)
    if out_dir.exists():
        shutil.rmtree(out_dir)
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
        KernelBuild.objects.filter(pk=build_id).update(phase=phase, progress=message[:200])

    req = BuildRequest(
        repo=build.tree.mirror_path,
        sha=build.sha,
        arch=build.arch,
        work_root=Path(settings.KPERF_BUILD_ROOT),
        output_dir=out_dir,
        ccache_dir=Path(settings.KPERF_CCACHE_DIR),
        jobs=settings.KPERF_BUILD_JOBS,
    )
    log.info("build %s: %s for %s", build_id, build.sha[:12], build.arch)
    try:
        result = build_kernel(req, progress)
    except BuildInfraError as e:
        _finish(build_id, ok=False, error=f"the build could not run: {e}", log_tail="", artifacts={})
        return
    artifacts = {
        name: {"path": str(path), "sha256": sha256_file(path), "size": path.stat().st_size}
        for name, path in result.artifacts.items()
        if path.is_file()
    }
    _finish(build_id, ok=result.ok, error=result.error, log_tail=result.log_tail, artifacts=artifacts)


def _finish(build_id: int, ok: bool, error: str, log_tail: str, artifacts: dict[str, dict[str, object]]) -> None:
    from kperf.core import tasks

    with transaction.atomic():
        build = KernelBuild.objects.select_for_update().get(pk=build_id)
        build.status = KernelBuild.Status.DONE if ok else KernelBuild.Status.FAILED
        build.phase = "done" if ok else "failed"
        build.progress = ""
        build.error = "" if ok else (error or "the build failed: see the log")
        build.log_tail = log_tail
        build.artifacts = artifacts
        build.finished = timezone.now()
        build.save()
        sub_ids = list(build.submission_builds.values_list("submission_id", flat=True).distinct())
        for sub_id in sub_ids:
            transaction.on_commit(partial(tasks.advance_submission.delay, sub_id))
        for commit_id in build.branch_commits.values_list("pk", flat=True):
            transaction.on_commit(partial(tasks.advance_branch_commit.delay, commit_id))
    log.info("build %s: %s", build_id, "done" if ok else f"FAILED: {error}")
