"""A job's build artifacts: the kernel, and what its benchmark runs beside it.

Downloaded into the state directory's cache by sha256, so a job resumed
after the machine came back (or a later job of the same build) does not
fetch them again.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from .backends import BenchmarkFailure
from .benchmarks import Benchmark
from .client import Client
from .reporting import Progress

log = logging.getLogger(__name__)


def download_kernel(client: Client, cache: Path, job: dict[str, Any], label: str, progress: Progress) -> Path:
    artifacts = {artifact["name"]: artifact for artifact in job.get("artifacts", [])}
    if "kernel" not in artifacts:
        raise RuntimeError(f"the job lists no kernel artifact (has: {sorted(artifacts)})")
    return download(client, cache, artifacts["kernel"], label, progress)


def download_bench_artifacts(
    client: Client, cache: Path, job: dict[str, Any], label: str, bench: Benchmark, progress: Progress
) -> dict[str, Path]:
    """The build artifacts the benchmark runs (e.g. pagealloc.ko), by name.

    A build without one is a fact about the kernel under test (a kernel
    without CONFIG_MODULES, a module that does not compile against it),
    so the job fails as a benchmark failure, not as the runner's fault.
    """
    artifacts = {artifact["name"]: artifact for artifact in job.get("artifacts", [])}
    out: dict[str, Path] = {}
    for name in bench.artifacts():
        if name not in artifacts:
            raise BenchmarkFailure(
                f"{bench.name} needs the build artifact {name}, which build "
                f"{(job.get('kernel') or {}).get('build_id')} does not have (has: "
                f"{', '.join(sorted(artifacts))}): the kernel was built without "
                "CONFIG_MODULES or the module did not compile against it; the build's "
                "warnings say which"
            )
        out[name] = download(client, cache, artifacts[name], label, progress)
    return out


def download(client: Client, cache: Path, artifact: dict[str, Any], label: str, progress: Progress) -> Path:
    start = time.monotonic()
    path = client.download(
        artifact["url"],
        cache,
        artifact["sha256"],
        artifact.get("size"),
        # Each chunk is a chance to keep the lease alive during a long download.
        on_chunk=lambda _received: progress.console(""),
    )
    log.info(
        "%s: %s %s (%d bytes) ready in %.1f s",
        label,
        artifact.get("name", "artifact"),
        artifact["sha256"][:12],
        path.stat().st_size,
        time.monotonic() - start,
    )
    return path
