"""An S3-compatible object store for tests: moto's standalone server on a free loopback port."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kperf_testing.stack import free_port

ACCESS_KEY = "kperf-test-access"
SECRET_KEY = "kperf-test-secret"
REGION = "us-east-1"


@dataclass
class ObjectStore:
    endpoint: str

    def env(self, bucket: str, endpoint: str | None = None) -> dict[str, str]:
        """The KPERF_S3_* variables of a kperf process using `bucket` (through `endpoint` if given)."""
        return {
            "KPERF_S3_BUCKET": bucket,
            "KPERF_S3_ENDPOINT_URL": endpoint or self.endpoint,
            "KPERF_S3_ACCESS_KEY_ID": ACCESS_KEY,
            "KPERF_S3_SECRET_ACCESS_KEY": SECRET_KEY,
            "KPERF_S3_REGION": REGION,
        }

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def new_bucket(self) -> str:
        name = f"kperf-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name


@contextmanager
def object_store(host: str = "127.0.0.1") -> Iterator[ObjectStore]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    try:
        yield ObjectStore(endpoint=f"http://{host}:{port}")
    finally:
        server.stop()
