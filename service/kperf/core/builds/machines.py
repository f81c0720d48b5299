"""Build machines that pull builds over HTTP (`kperf-builder`, docs/builders.md).

A kernel tree is a program written by a stranger, and the machine that
builds it is the one most exposed to it. Such a machine holds only its own
token: no database, broker or object-store credential. It claims a queued
build here (the same lease and attempt fence as the Celery workers of
kperf.core.builds.queue), fetches the commit from the service's mirror through
git's HTTP protocol (kperf.core.web.git_http), and hands its files back in
chunks that the web server stages on its own disk; `finish` checks each
staged file against the size and sha256 the machine declared, stores it in
the artifact storage (read back and checked there), and only then records
the build as done. A machine that goes quiet loses its lease and the build
is tried again by the sweeper's `queue.expire_builds`, as for a worker.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from typing_extensions import TypedDict

from kperf.core.builds import artifacts, queue
from kperf.core.lab.uploads import ProtocolError
from kperf.core.models import BuildMachine, KernelBuild
from kperf.core.models.accounts import hash_token

log = logging.getLogger(__name__)

_B = KernelBuild.Status

# What a build's outputs are called (kperf_kbuild.driver: config, kernel,
# system-map, modules, build-log, <module>.ko): nothing that could name a
# path outside the build's own staging directory.
ARTIFACT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ARCHES = ("x86_64", "arm64")
# One upload request: well under the request-body limit (KPERF_MAX_UPLOAD_BYTES).
CHUNK_BYTES_MAX = 8 * 1024 * 1024


def machine_for_token(token: str) -> BuildMachine | None:
    if not token.startswith(BuildMachine.TOKEN_PREFIX):
        return None
    machine = BuildMachine.objects.filter(token_hash=hash_token(token), enabled=True).first()
    if machine is not None:
        BuildMachine.objects.filter(pk=machine.pk).update(last_seen=timezone.now())
    return machine


def chunk_bytes() -> int:
    return min(CHUNK_BYTES_MAX, int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) // 2)


def staging_dir(build_id: int, attempt: int) -> Path:
    return Path(settings.KPERF_BUILD_ROOT) / "uploads" / str(build_id) / str(attempt)


def claim(machine: BuildMachine, arches: list[str], hostname: str = "", version: str = "") -> KernelBuild | None:
    """The oldest queued build of one of `arches` whose retry wait is over, now leased to `machine`."""
    unknown = sorted(set(arches) - set(ARCHES))
    if unknown:
        raise ProtocolError(422, "invalid", f"arches {unknown} are not built by kperf: use {list(ARCHES)}")
    BuildMachine.objects.filter(pk=machine.pk).update(hostname=hostname[:255], version=version[:64])
    now = timezone.now()
    with transaction.atomic():
        build = (
            KernelBuild.objects.select_for_update(skip_locked=True)
            .filter(status=_B.QUEUED, arch__in=arches or ARCHES)
            .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
            .order_by("created", "pk")
            .first()
        )
        if build is None:
            return None
        queue.take(build, machine.worker)
    # A machine that died before finishing an earlier attempt left its chunks.
    shutil.rmtree(staging_dir(build.pk, 0).parent, ignore_errors=True)
    log.info("build %s: claimed by build machine %s (attempt %s)", build.pk, machine.name, build.attempt)
    return build


class BuildClaim(TypedDict):
    """A claimed build (docs/builders.md); git_path: fetch the commit from here with git, sending the same token."""

    id: int
    attempt: int
    sha: str
    arch: str
    config_digest: str
    # The configuration profile (kperf_kbuild.profiles); part of config_digest.
    profile: str
    scope: str
    tree: int
    git_path: str
    lease_seconds: int
    wall_seconds: int
    chunk_bytes: int


def claim_payload(build: KernelBuild) -> BuildClaim:
    """What a build machine needs to run the build (docs/builders.md, "claim")."""
    return {
        "id": build.pk,
        "attempt": build.attempt,
        "sha": build.sha,
        "arch": build.arch,
        "config_digest": build.config_digest,
        "profile": build.profile,
        "scope": build.scope,
        "tree": build.tree_id,
        "git_path": f"/builder-git/{build.tree_id}",
        "lease_seconds": settings.KPERF_BUILD_LEASE_SECONDS,
        # The sandbox's own wall limit stops a build that never ends as the
        # tree's failure, before its lease runs out for the machine's fault.
        "wall_seconds": int(settings.KPERF_BUILD_TIME_LIMIT * 0.9),
        "chunk_bytes": chunk_bytes(),
    }


def held(machine: BuildMachine, build_id: int, attempt: int) -> KernelBuild:
    """The build `machine` holds at `attempt`; 409 not-held once it was taken over or ended."""
    build = KernelBuild.objects.filter(pk=build_id).first()
    if build is None:
        raise ProtocolError(404, "not-found", f"there is no build {build_id}")
    if build.status != _B.BUILDING or build.attempt != attempt or build.worker != machine.worker:
        raise ProtocolError(
            409,
            "not-held",
            f"build {build_id} attempt {attempt} is not held by build machine {machine.name} "
            f"(it is {build.status}, attempt {build.attempt}): drop it and claim again",
        )
    return build


def progress(machine: BuildMachine, build_id: int, attempt: int, phase: str, message: str) -> KernelBuild:
    """Extend the lease and show the build's phase; 409 not-held when it is no longer this machine's."""
    held(machine, build_id, attempt)
    fields: dict[str, Any] = {"lease_expires": timezone.now() + queue.lease()}
    if phase:
        fields.update(phase=phase[:32], progress=message[:200])
    kept = KernelBuild.objects.filter(pk=build_id, status=_B.BUILDING, attempt=attempt, worker=machine.worker).update(
        **fields
    )
    if not kept:
        return held(machine, build_id, attempt)  # raises: it moved on meanwhile
    return KernelBuild.objects.get(pk=build_id)


def stage_chunk(machine: BuildMachine, build_id: int, attempt: int, name: str, offset: int, data: bytes) -> int:
    """Write `data` at `offset` of the staged file `name`; the file's size after it.

    Chunks go in order: `offset` must be at most the size already staged
    (a repeated chunk overwrites itself), so a retried request is harmless
    and a gap is refused.
    """
    held(machine, build_id, attempt)
    if not ARTIFACT_NAME.fullmatch(name):
        raise ProtocolError(422, "invalid", f"artifact name {name[:80]!r} must match {ARTIFACT_NAME.pattern}")
    if len(data) > chunk_bytes():
        raise ProtocolError(413, "too-large", f"a chunk is at most {chunk_bytes()} bytes; this one is {len(data)}")
    folder = staging_dir(build_id, attempt)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    size = path.stat().st_size if path.exists() else 0
    if offset < 0 or offset > size:
        raise ProtocolError(
            409, "offset", f"{name}: {size} bytes are staged, so the next chunk starts at {size}, not {offset}"
        )
    others = sum(p.stat().st_size for p in folder.iterdir() if p.name != name)
    if others + offset + len(data) > settings.KPERF_BUILDER_MAX_UPLOAD_BYTES:
        raise ProtocolError(
            413,
            "too-large",
            f"build {build_id}'s files would be over KPERF_BUILDER_MAX_UPLOAD_BYTES "
            f"({settings.KPERF_BUILDER_MAX_UPLOAD_BYTES} bytes)",
        )
    with open(path, "r+b" if path.exists() else "wb") as fh:
        fh.seek(offset)
        fh.write(data)
        fh.truncate()
    return offset + len(data)


def finish(machine: BuildMachine, build_id: int, attempt: int, result: dict[str, Any]) -> KernelBuild:
    """Store the staged files (each as declared) and record the build's outcome."""
    held(machine, build_id, attempt)
    folder = staging_dir(build_id, attempt)
    files: dict[str, Path] = {}
    for name, declared in result["artifacts"].items():
        path = folder / name
        if not ARTIFACT_NAME.fullmatch(name) or not path.is_file():
            raise ProtocolError(422, "invalid", f"artifact {name[:80]!r} was declared but never uploaded")
        size, sha = path.stat().st_size, artifacts.sha256_file(path)
        if size != declared["size"] or sha != declared["sha256"]:
            raise ProtocolError(
                422,
                "invalid",
                f"artifact {name!r} arrived as {size} bytes with sha256 {sha}, but {declared['size']} bytes "
                f"with sha256 {declared['sha256']} were declared: upload it again from offset 0",
            )
        files[name] = path
    # In the storage (read back, sha256 checked) before the row names it;
    # a storage fault answers 503 and the machine tries the call again.
    try:
        stored = artifacts.store_build_outputs(build_id, attempt, files)
    except artifacts.ArtifactUnavailable as e:
        log.warning("build %s: %s", build_id, e)
        raise ProtocolError(503, "unavailable", f"{e}; try again later") from None
    KernelBuild.objects.filter(pk=build_id, attempt=attempt).update(
        reused_sha=result["reused_sha"],
        compiled_files=result["compiled"],
        incremental_error=result["incremental_error"],
        warnings=[w[:1000] for w in result["warnings"][:20]],
    )
    queue.finish(
        build_id,
        attempt,
        ok=result["ok"],
        error=result["error"],
        log_tail=result["log_tail"],
        artifacts=stored,
    )
    shutil.rmtree(folder.parent, ignore_errors=True)
    return KernelBuild.objects.get(pk=build_id)


def fail(machine: BuildMachine, build_id: int, attempt: int, reason: str) -> KernelBuild:
    """The build machine could not run the build (not the kernel's fault): tried again, or failed as infra."""
    held(machine, build_id, attempt)
    why = f"build machine {machine.name}: {reason[:2000] or 'no reason given'}"
    queue.retry_or_fail(build_id, attempt, why)
    shutil.rmtree(staging_dir(build_id, attempt).parent, ignore_errors=True)
    return KernelBuild.objects.get(pk=build_id)


def may_fetch(machine: BuildMachine, tree_id: int) -> bool:
    """A build machine reads a tree's mirror only while it holds a build of that tree."""
    return KernelBuild.objects.filter(tree_id=tree_id, status=_B.BUILDING, worker=machine.worker).exists()


def sweep_uploads() -> int:
    """Remove staged files of builds no machine holds any more (done, failed, requeued); how many builds."""
    root = Path(settings.KPERF_BUILD_ROOT) / "uploads"
    try:
        entries = [p for p in root.iterdir() if p.is_dir() and p.name.isdigit()]
    except OSError:
        return 0
    live = set(
        KernelBuild.objects.filter(pk__in=[int(p.name) for p in entries], status=_B.BUILDING).values_list(
            "pk", flat=True
        )
    )
    removed = 0
    for path in entries:
        if int(path.name) not in live:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed
