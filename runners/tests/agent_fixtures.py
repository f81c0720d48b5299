"""Shared test scenarios, moved out of test_agent_failures.py so no test module imports another."""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kperf_runner.agent import Agent, RunnerConfig
from kperf_runner.backends import (
    Backend,
    BootFailure,
    BootJob,
    BootResult,
    ConsoleCallback,
    parse_boot,
)
from kperf_runner.client import Client
from kperf_runner.toolchain import host_arch

TOKEN = "runner-token"


KERNEL = b"pretend bzImage\n" * 64


class FakeService:
    """Answers the runner protocol, or what a test scripted; records every call."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.claimed = False
        self.calls: list[tuple[float, str, dict[str, Any]]] = []
        # endpoint ("claim", "progress", "results", ...) -> answers to give first
        self.script: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.lock = threading.Lock()
        self.refused: set[int] = set()  # indexes of calls answered with an error

    def endpoint(self, path: str) -> str:
        tail = path.split("/api/v1/runner/", 1)[-1]
        return tail.rsplit("/", 1)[-1] if tail.startswith("jobs/") else tail.split("/")[0]

    def answer(self, method: str, path: str, body: dict[str, Any], auth: str) -> tuple[int, Any]:
        endpoint = self.endpoint(path)
        with self.lock:
            self.calls.append((time.monotonic(), endpoint, body))
            if auth != f"Bearer {TOKEN}":
                return 401, {"detail": "unknown runner token", "code": "bad-token"}
            scripted = self.script.get(endpoint)
            if scripted:
                status, answer = scripted.pop(0)
                if status >= 300:
                    self.refused.add(len(self.calls) - 1)
                return status, answer
            if endpoint == "heartbeat":
                return 200, {"runner": body["name"], "poll_seconds": 0.05}
            if endpoint == "claim":
                job, self.claimed = (None if self.claimed else self.job), True
                return 200, {"job": job}
            if endpoint == "builds":
                return 200, KERNEL
            if endpoint == "progress":
                return 200, {"lease_expires": "2030-01-01T00:00:00Z"}
            return 200, {"status": "done" if endpoint == "results" else "failed"}

    def delivered(self, endpoint: str) -> list[dict[str, Any]]:
        """Bodies of the calls the service accepted."""
        return [body for i, (_, name, body) in enumerate(self.calls) if name == endpoint and i not in self.refused]

    def bodies(self, endpoint: str) -> list[dict[str, Any]]:
        return [body for _, name, body in self.calls if name == endpoint]


@pytest.fixture
def service() -> Iterator[tuple[FakeService, str]]:
    fake = FakeService(_job())

    class Handler(BaseHTTPRequestHandler):
        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else {}
            status, answer = fake.answer(method, self.path, body, self.headers.get("Authorization", ""))
            data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _job(**changes: Any) -> dict[str, Any]:
    job = {
        "id": 7,
        "attempt": 1,
        "lease_seconds": 900,
        "lease_expires": "2030-01-01T00:00:00Z",
        "benchmark": "spawn",
        "grid": "quick",
        "params": {"duration": 0.05, "iterations": 2, "extra_vmas": [0, 10]},
        "boots": 2,
        "arch": host_arch(),
        "machine_class": "qemu-test",
        "kernel": {"build_id": 3, "sha": "0123abcd" * 5, "cmdline": ""},
        "artifacts": [
            {
                "name": "kernel",
                "url": "/api/v1/runner/builds/3/artifacts/kernel",
                "sha256": hashlib.sha256(KERNEL).hexdigest(),
                "size": len(KERNEL),
            }
        ],
    }
    job.update(changes)
    return job


class NativeBackend(Backend):
    """Runs the job's commands on this machine and writes init's markers.

    `fail` injects a boot failure; `status` overrides command exit codes;
    `seconds` stretches each boot while still ticking on_console.
    """

    name = "native"
    bindir = "/kperf/bin"

    def __init__(
        self,
        fail: str = "",
        status: int | None = None,
        seconds: float = 0.0,
        garble: bool = False,
    ) -> None:
        self.fail, self.status, self.seconds, self.garble = (
            fail,
            status,
            seconds,
            garble,
        )
        self.boots = 0
        self.kernels: list[Path] = []

    def boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
        self.boots += 1
        self.kernels.append(kernel)
        tick = on_console or (lambda _text: None)
        console = ["KPERF-ENV cpus=2\n", "KPERF-ENV kernel_release=native\n"]
        tick("".join(console))
        if self.fail:
            raise BootFailure(self.fail, "".join(console) + "Kernel panic - not syncing: test\n")
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            time.sleep(0.05)
            tick("")
        for n, argv in enumerate(job.commands):
            binary = job.binaries[Path(argv[0]).name]
            run = subprocess.run([str(binary), *argv[1:]], capture_output=True, text=True, check=False)
            output = run.stdout.replace("count=", "count=x") if self.garble else run.stdout
            status = run.returncode if self.status is None else self.status
            text = f"KPERF-BEGIN {n}\n{output}{run.stderr}KPERF-END {n} {status}\nKPERF-VMSTAT {n} pgfault={100 + n}\n"
            console.append(text)
            tick(text)
        console.append("KPERF-DONE\n")
        tick("KPERF-DONE\n")
        text = "".join(console)
        record = parse_boot(text, job.commands)
        return BootResult(text, record.environment, record.commands, 0.1)


def _agent(url: str, tmp_path: Path, backend: Backend, runner_state: Path, token: str = TOKEN) -> Agent:
    config = RunnerConfig("test-runner", host_arch(), "qemu-test", tmp_path / "state", once=True)
    config.state_dir.mkdir()
    # Share the compiled binaries between tests.
    (config.state_dir / "bin").symlink_to(runner_state / "bin", target_is_directory=True)
    return Agent(config, Client(url, token, backoff=0.01, retries=4), backend)
