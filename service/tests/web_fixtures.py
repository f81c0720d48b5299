"""Shared test scenarios, moved out of test_web_server.py so no test module imports another."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from kperf.web import command
from kperf_testing.plugin import database_url_for_tests
from kperf_testing.stack import free_port


@contextmanager
def running_web(
    tmp_path: Path,
    settings: dict[str, str] | None = None,
    database_url: str | None = None,
    any_answer: bool = False,
) -> Iterator[str]:
    """kperf's web server process, as kperf-up starts it, on a free port, on the test database (or
    ``database_url``), with these settings; yields its URL once its health check says 200 (with
    ``any_answer``, once it answers at all: with the database down, the health check is a 503)."""
    port = free_port()
    env = dict(os.environ, DATABASE_URL=database_url or database_url_for_tests(), KPERF_HOME=str(tmp_path / "home"))
    env.update(settings or {})
    log_path = tmp_path / f"web-{port}.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(command("127.0.0.1", port), env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status = requests.get(f"{url}/api/v1/health", timeout=2).status_code
                if any_answer or status == 200:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
