"""Check, from this host, that the artifact storage takes, gives back and deletes an object."""

from __future__ import annotations

import secrets
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kperf.core.builds import artifacts


class Command(BaseCommand):
    help = (
        "Write, read back (sha256 checked) and delete a small object in the artifact storage. "
        "Run it on every host that builds or serves artifacts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--create-bucket", action="store_true", help="create the S3 bucket first when it does not exist"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["create_bucket"]:
            self._create_bucket()
        key = f"storage-check/{secrets.token_hex(8)}"
        try:
            artifacts.put_bytes(key, b"kperf storage check\n")
            artifacts.storage().delete(key)
        except Exception as e:
            raise CommandError(f"the {artifacts.where()} does not work from this host: {e}") from e
        self.stdout.write(f"the {artifacts.where()} works from this host")

    def _create_bucket(self) -> None:
        store: Any = artifacts.storage()
        bucket = getattr(store, "bucket_name", None)
        if bucket is None:
            return  # a directory: created on first write
        client = store.connection.meta.client
        try:
            client.head_bucket(Bucket=bucket)
        except Exception:
            region = getattr(store, "region_name", None)
            # S3 wants the region spelled out everywhere but in its first one.
            where = (
                {"CreateBucketConfiguration": {"LocationConstraint": region}}
                if region not in (None, "us-east-1")
                else {}
            )
            try:
                client.create_bucket(Bucket=bucket, **where)
            except Exception as e:
                raise CommandError(f"could not create the bucket {bucket!r} at {artifacts.where()}: {e}") from e
            self.stdout.write(f"created the bucket {bucket!r}")
