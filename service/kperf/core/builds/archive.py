"""Old console logs and raw benchmark outputs, moved to the artifact storage and read back.

A lab keeps years of history, and most of its database is machine text
nobody reads twice: job consoles (up to KPERF_CONSOLE_LOG_MAX_BYTES each)
and every boot's raw benchmark output. `kperf-manage archive --older-than
DAYS` moves them to the artifact storage (an object store on a multi-host
setup); pages, the API and the mmtests export read them through
`console_log` and `raw_output` below, which fetch archived text back and
check its sha256.

Moving one text is: write it under a key named by its own sha256, read it
back and check it, then, in a transaction holding the row and only if the
text is still the one written, point the row at the object and empty the
column. An interrupted run leaves at worst an object no row points to,
which the next run writes again under the same key; running it twice moves
nothing twice.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from kperf.core.builds import artifacts
from kperf.core.models import BootRecord, Job, KernelBuild

log = logging.getLogger(__name__)


def _text(row: models.Model, column: str, what: str) -> str:
    value: str = getattr(row, column)
    meta: dict[str, Any] = getattr(row, f"{column}_archive")
    if value or not meta:
        return value
    return artifacts.read_checked(meta, what).decode("utf-8")


def console_log(job: Job) -> str:
    """A job's console log, from the database or, once archived, from the artifact storage.

    Raises artifacts.ArtifactUnavailable when the storage cannot give it back.
    """
    return _text(job, "console_log", f"the console log of job {job.pk}")


def raw_output(record: BootRecord) -> str:
    """A boot's raw benchmark output, wherever it is kept (see console_log)."""
    return _text(record, "raw_output", f"the raw output of job {record.job_id} boot {record.boot}")


@dataclass
class Report:
    moved: int = 0
    bytes: int = 0
    # Changed or archived by someone else between reading and moving: left as is.
    skipped: int = 0
    failed: list[str] = field(default_factory=list)
    # Old build rows whose files were copied into the storage (--build-files).
    builds: int = 0


def _move(model: type[models.Model], pk: int, column: str, kind: str, report: Report, dry_run: bool) -> None:
    archive_column = f"{column}_archive"
    text = model._default_manager.filter(pk=pk).values_list(column, flat=True).first()
    if not text:
        report.skipped += 1
        return
    data = str(text).encode("utf-8")
    if dry_run:
        report.moved += 1
        report.bytes += len(data)
        return
    digest = hashlib.sha256(data).hexdigest()
    # Named by the content: writing it again after an interruption writes
    # the same bytes to the same key.
    key = f"archive/{kind}/{pk}/{column}-{digest[:16]}.txt"
    meta = artifacts.put_bytes(key, data)
    with transaction.atomic():
        row = model._default_manager.select_for_update().filter(pk=pk).values(column, archive_column).first()
        if row is None or row[archive_column] or hashlib.sha256(str(row[column]).encode()).hexdigest() != digest:
            # Deleted, archived meanwhile, or the text changed: the row is
            # left alone. The object stays: another run may point at the same key.
            report.skipped += 1
            return
        model._default_manager.filter(pk=pk).update(**{column: "", archive_column: meta})
    report.moved += 1
    report.bytes += len(data)


def archive_older_than(days: float, limit: int = 0, dry_run: bool = False) -> Report:
    """Move console logs of jobs finished, and raw outputs of boots recorded, more than `days` days ago."""
    cutoff = timezone.now() - timedelta(days=days)
    report = Report()
    jobs = (
        Job.objects.filter(status__in=Job.FINAL, finished__lt=cutoff, console_log_archive={})
        .exclude(console_log="")
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    boots = (
        BootRecord.objects.filter(job__status__in=Job.FINAL, created__lt=cutoff, raw_output_archive={})
        .exclude(raw_output="")
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for model, ids, column, kind in (
        (Job, jobs, "console_log", "jobs"),
        (BootRecord, boots, "raw_output", "boots"),
    ):
        for pk in list(ids[:limit] if limit else ids):
            try:
                _move(model, pk, column, kind, report, dry_run)
            except artifacts.ArtifactUnavailable as e:
                # The column keeps the text; the next run tries again.
                report.failed.append(f"{kind} {pk}: {e}")
                log.warning("archive: %s %s not moved: %s", kind, pk, e)
    return report


def copy_build_files(report: Report, dry_run: bool = False) -> None:
    """Copy the files of builds stored before the artifact storage (rows with a local "path") into it.

    Run on the host that has those files, once the storage is configured:
    afterwards every host serves them from the storage.
    """
    for build_id in (
        KernelBuild.objects.filter(status=KernelBuild.Status.DONE).order_by("pk").values_list("pk", flat=True)
    ):
        build = KernelBuild.objects.get(pk=build_id)
        old = {name: meta for name, meta in build.artifacts.items() if "path" in meta and "key" not in meta}
        if not old:
            continue
        if dry_run:
            report.builds += 1
            continue
        moved: dict[str, dict[str, Any]] = {}
        try:
            for name, meta in old.items():
                new = artifacts.put_file(artifacts.build_key(build_id, 0, name), Path(str(meta["path"])))
                if new["sha256"] != meta["sha256"]:
                    raise artifacts.ArtifactUnavailable(
                        f"{meta['path']} has sha256 {new['sha256']}, not the {meta['sha256']} recorded at build time"
                    )
                moved[name] = new
        except (artifacts.ArtifactUnavailable, OSError) as e:
            report.failed.append(f"build {build_id}: {e}")
            log.warning("archive: files of build %s not copied: %s", build_id, e)
            continue
        with transaction.atomic():
            locked = KernelBuild.objects.select_for_update().get(pk=build_id)
            if {n: m for n, m in locked.artifacts.items() if n in moved} != {n: old[n] for n in moved}:
                report.skipped += 1
                continue
            KernelBuild.objects.filter(pk=build_id).update(artifacts={**locked.artifacts, **moved})
        report.builds += 1
