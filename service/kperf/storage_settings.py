"""Where kperf keeps artifacts: Django's STORAGES, from environment variables.

Kernels, configs, build logs and module files of every build, and the
console logs and raw benchmark outputs moved out of the database by
`kperf-manage archive`, are kept in the storage named "artifacts". By
default it is a directory (KPERF_ARTIFACT_ROOT); with KPERF_S3_BUCKET set
it is a bucket of an S3-compatible object store (AWS S3, MinIO, Ceph RGW),
so web, workers and build machines on different hosts share it without a
shared filesystem (docs/operations.md, "Storage").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kperf.conf import ConfigError, env_bool, env_int, env_str

ARTIFACTS = "artifacts"

# A download from the object store is spooled in memory up to this size and
# on disk beyond it, so serving a large kernel does not hold it all in memory.
_SPOOL_BYTES = 8 * 1024 * 1024


def artifact_storage(artifact_root: Path) -> dict[str, Any]:
    """The STORAGES entry for artifacts, from KPERF_S3_* (unset: the local directory)."""
    bucket = env_str("KPERF_S3_BUCKET", "").strip()
    if not bucket:
        return {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            # Keys are chosen by kperf and written once; overwriting is what
            # makes an interrupted store or archive safe to run again.
            "OPTIONS": {"location": str(artifact_root), "allow_overwrite": True},
        }
    endpoint = env_str("KPERF_S3_ENDPOINT_URL", "").strip()
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"KPERF_S3_ENDPOINT_URL={endpoint!r} must start with http:// or https://")
    access_key = env_str("KPERF_S3_ACCESS_KEY_ID", "")
    secret_key = env_str("KPERF_S3_SECRET_ACCESS_KEY", "")
    if bool(access_key) != bool(secret_key):
        raise ConfigError(
            "set both KPERF_S3_ACCESS_KEY_ID and KPERF_S3_SECRET_ACCESS_KEY, or neither "
            "(then boto3 finds credentials itself: AWS_* variables, ~/.aws, an instance role)"
        )
    # Path-style addressing (http://host/bucket/key) needs no DNS name per
    # bucket, which MinIO and other self-hosted stores usually lack.
    style = env_str("KPERF_S3_ADDRESSING_STYLE", "path" if endpoint else "virtual").strip()
    if style not in ("path", "virtual", "auto"):
        raise ConfigError(f"KPERF_S3_ADDRESSING_STYLE={style!r} must be path, virtual or auto")
    options: dict[str, Any] = {
        "bucket_name": bucket,
        "endpoint_url": endpoint or None,
        "region_name": env_str("KPERF_S3_REGION", "us-east-1").strip() or None,
        "location": env_str("KPERF_S3_PREFIX", "").strip().strip("/"),
        "addressing_style": style,
        "file_overwrite": True,
        "default_acl": None,
        "max_memory_size": _SPOOL_BYTES,
        "verify": None if env_bool("KPERF_S3_VERIFY_TLS", True) else False,
    }
    if access_key:
        options["access_key"] = access_key
        options["secret_key"] = secret_key
    timeout = env_int("KPERF_S3_TIMEOUT", 60, minimum=1)
    options["client_config"] = _client_config(timeout, style)
    return {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": options}


def _client_config(timeout: int, style: str) -> Any:
    # Imported here: a service that keeps artifacts on disk need not load boto.
    from botocore.config import Config

    # With a client config of its own, S3Storage ignores its addressing_style
    # option: the style goes in here.
    return Config(
        connect_timeout=timeout,
        read_timeout=timeout,
        retries={"max_attempts": 5, "mode": "standard"},
        s3={"addressing_style": style},
    )


def storages(artifact_root: Path) -> dict[str, Any]:
    """settings.STORAGES: Django's two defaults and kperf's artifacts."""
    return {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        ARTIFACTS: artifact_storage(artifact_root),
    }
