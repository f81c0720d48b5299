"""Files kperf keeps outside the database, in the storage named "artifacts".

Every object is described by {"key", "sha256", "size"}: a build's kernel,
config, log and modules (KernelBuild.artifacts), an archived console log or
raw output (kperf.core.builds.archive). Whatever is written is read back and its
sha256 checked before a row points at it, and whatever is read for a page
is checked again; runners check their downloads themselves. The storage is
a directory or an S3-compatible bucket (kperf.storage_settings), so a build
machine stores into it and the web server serves from it without sharing a
filesystem.

Rows written before the storage existed name a local file ({"path", ...});
they are still read, and `kperf-manage archive --build-files` copies them in.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages

from kperf.storage_settings import ARTIFACTS

_CHUNK = 1 << 20

log = logging.getLogger(__name__)


class ArtifactUnavailable(Exception):
    """The storage could not take or give back an object; the message says which and what to check."""


def storage() -> Storage:
    return storages[ARTIFACTS]


def where() -> str:
    """The storage in words, for messages an operator acts on."""
    options = settings.STORAGES[ARTIFACTS].get("OPTIONS", {})
    if "bucket_name" in options:
        endpoint = options.get("endpoint_url") or "AWS S3"
        return f"bucket {options['bucket_name']!r} at {endpoint} (KPERF_S3_*)"
    return f"directory {options.get('location', settings.KPERF_ARTIFACT_ROOT)} (KPERF_ARTIFACT_ROOT)"


def build_key(build_id: int, attempt: int, name: str) -> str:
    # The attempt is in the key: a worker that lost its lease and finishes
    # late must not overwrite what the attempt that counts stored.
    return f"builds/{build_id}/{attempt}/{name}"


def _chunks(fh: IO[bytes]) -> Iterator[bytes]:
    return iter(lambda: fh.read(_CHUNK), b"")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in _chunks(fh):
            h.update(chunk)
    return h.hexdigest()


def _save(key: str, content: File[Any], sha256: str, size: int) -> dict[str, Any]:
    try:
        stored = storage().save(key, content)
    except Exception as e:
        raise ArtifactUnavailable(f"could not store {key} in the {where()}: {e}") from e
    if stored != key:
        raise ArtifactUnavailable(f"the {where()} stored {key} as {stored}: it must allow overwriting")
    meta = {"key": key, "sha256": sha256, "size": size}
    _check(meta, f"{key} just stored")
    return meta


def put_file(key: str, path: Path) -> dict[str, Any]:
    """Store a local file under key; its {"key", "sha256", "size"} once read back and checked."""
    sha256, size = sha256_file(path), path.stat().st_size
    with open(path, "rb") as fh:
        return _save(key, File(fh, name=path.name), sha256, size)


def put_bytes(key: str, data: bytes) -> dict[str, Any]:
    return _save(key, ContentFile(data, name=key.rsplit("/", 1)[-1]), hashlib.sha256(data).hexdigest(), len(data))


def discard(meta: Mapping[str, Any]) -> None:
    """Remove an object no row names (its row was never created); a failure is logged, not raised."""
    try:
        storage().delete(str(meta["key"]))
    except Exception as e:
        log.warning("could not remove %s from the %s, which no row names: %s", meta.get("key"), where(), e)


def open_artifact(meta: Mapping[str, Any], what: str) -> IO[bytes]:
    """The object a row describes, open for reading (a key in the storage, or an old row's local path)."""
    try:
        if "key" in meta:
            return storage().open(str(meta["key"]), "rb")
        return open(Path(str(meta["path"])), "rb")
    except Exception as e:
        raise ArtifactUnavailable(f"{what} is kept as {_place(meta)}, which cannot be read: {e}") from e


def _place(meta: Mapping[str, Any]) -> str:
    return f"{meta['key']} in the {where()}" if "key" in meta else f"the file {meta.get('path')}"


def _check(meta: Mapping[str, Any], what: str, keep: bool = False) -> bytes:
    """Read the object through, hashing it (kept in memory only when asked: kernels and modules are big)."""
    h, size, kept = hashlib.sha256(), 0, bytearray()
    with open_artifact(meta, what) as fh:
        try:
            for chunk in _chunks(fh):
                h.update(chunk)
                size += len(chunk)
                if keep:
                    kept += chunk
        except Exception as e:
            raise ArtifactUnavailable(f"{what}: reading {_place(meta)} failed: {e}") from e
    if h.hexdigest() != meta["sha256"] or size != int(meta["size"]):
        raise ArtifactUnavailable(
            f"{what}: the copy kept as {_place(meta)} has sha256 {h.hexdigest()} and {size} bytes, but "
            f"{meta['sha256']} and {meta['size']} bytes were stored; it was changed or cut after it was written"
        )
    return bytes(kept)


def read_checked(meta: Mapping[str, Any], what: str) -> bytes:
    """The whole object, once its sha256 and size match what was stored (for text shown on pages)."""
    return _check(meta, what, keep=True)


def store_build_outputs(build_id: int, attempt: int, files: Mapping[str, Path]) -> dict[str, dict[str, Any]]:
    """Store a build's output files; KernelBuild.artifacts for them."""
    return {name: put_file(build_key(build_id, attempt, name), path) for name, path in files.items() if path.is_file()}
