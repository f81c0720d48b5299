"""Shared test scenarios, moved out of test_celery_worker.py so no test module imports another."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kperf.core.models import Submission
from kperf_testing.plugin import database_url_for_tests


@pytest.fixture
def worker(tmp_path: Path, settings: Any) -> Iterator[Path]:
    home = tmp_path / "home"
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": database_url_for_tests(),
            "KPERF_HOME": str(home),
            "KPERF_CCACHE_DIR": str(tmp_path / "ccache"),
            # Infrastructure faults are retried with backoff: short here.
            "KPERF_BUILD_RETRY_SECONDS": "0.5",
        }
    )
    settings.KPERF_MIRROR_ROOT = home / "mirrors"
    log = tmp_path / "worker.log"
    celery = str(Path(sys.executable).parent / "celery")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [celery, "-A", "kperf", "worker", "-Q", "default,builds,analysis", "--pool", "solo", "-l", "INFO"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        # The broker inside PostgreSQL creates its tables when the first
        # process connects; sending while the worker creates them races, so
        # the test starts sending once the worker is ready.
        deadline = time.monotonic() + 60
        while b"ready." not in log.read_bytes() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        yield log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def wait_final(sub_id: int, log: Path, timeout: float = 600) -> Submission:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sub = Submission.objects.get(pk=sub_id)
        if sub.is_final:
            return sub
        time.sleep(0.5)
    raise AssertionError(f"submission {sub_id} still {sub.status}; worker log:\n{log.read_text()[-4000:]}")
