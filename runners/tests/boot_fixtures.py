"""Shared test scenarios, moved out of test_boot_request.py so no test module imports another."""

from __future__ import annotations

from pathlib import Path

from agent_fixtures import NativeBackend

from kperf_runner.backends import BootJob, BootResult, ConsoleCallback


class RecordingBackend(NativeBackend):
    def __init__(self) -> None:
        super().__init__()
        self.jobs: list[BootJob] = []

    def boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
        self.jobs.append(job)
        return super().boot(job, kernel, on_console)
