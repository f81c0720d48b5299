"""Run the whole kperf stack (`kperf-up`) as a subprocess, for tests.

The same launcher users start with `make up`, on its own database, broker
namespace, port and home directory, so a test sees exactly what a user does.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningStack:
    url: str
    home: Path
    creds: dict[str, Any]
    proc: subprocess.Popen[str]

    def api(
        self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = None
    ) -> requests.Response:
        headers = {"Authorization": f"Bearer {token or self.creds['api_token']}"}
        return requests.request(method, f"{self.url}/api/v1{path}", json=body, headers=headers, timeout=60)

    def log(self, name: str) -> str:
        path = self.home / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def running_stack(
    home: Path, env_overrides: dict[str, str], extra_args: list[str] | None = None, timeout: float = 180
) -> Iterator[RunningStack]:
    port = free_port()
    env = dict(os.environ)
    # Its local mailbox listens on a port of its own, so stacks (and a
    # developer's `make up`) never meet on 8025.
    env.setdefault("KPERF_MAIL_LISTEN_PORT", str(free_port()))
    env.update(env_overrides)
    env["KPERF_HOME"] = str(home)
    argv = [str(Path(sys.executable).parent / "kperf-up"), "--quiet", "--port", str(port), "--home", str(home)]
    proc = subprocess.Popen(
        argv + (extra_args or []), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    output: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            line = proc.stdout.readline()
            if line:
                output.append(line)
                if line.startswith("kperf is ready"):
                    break
            elif proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kperf-up did not become ready:\n" + "".join(output))
        creds = json.loads((home / "credentials.json").read_text())
        yield RunningStack(url=f"http://127.0.0.1:{port}", home=home, creds=creds, proc=proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
