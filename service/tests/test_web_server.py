"""The web server as `kperf-up` starts it: slow or stalled clients cannot starve it."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kperf.testing.plugin import database_url_for_tests
from kperf.testing.stack import free_port
from kperf.web import command


@pytest.fixture
def web_server(transactional_db: Any, tmp_path: Path) -> Iterator[str]:
    """kperf's web server process on a free port, on the test database."""
    port = free_port()
    env = dict(os.environ, DATABASE_URL=database_url_for_tests(), KPERF_HOME=str(tmp_path / "home"))
    log = (tmp_path / "web.log").open("wb")
    proc = subprocess.Popen(command("127.0.0.1", port), env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/api/v1/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "web.log").read_text()
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


def test_stalled_clients_do_not_keep_others_waiting(web_server: str) -> None:
    port = int(web_server.rsplit(":", 1)[1])
    stalled = []
    try:
        # Clients that stop half-way: mid-headers, and mid-body of an upload.
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            stalled.append(s)
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(
                b"POST /api/v1/runner/claim HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
            )
            stalled.append(s)
        time.sleep(0.5)
        start = time.monotonic()
        for _ in range(5):
            resp = requests.get(f"{web_server}/api/v1/health", timeout=5)
            assert resp.status_code == 200 and resp.json() == {"status": "ok"}
        assert time.monotonic() - start < 5
    finally:
        for s in stalled:
            s.close()
