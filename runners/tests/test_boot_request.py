"""What a claim asks of the boot (kernel command line words, THP mode) reaches the backend."""

from __future__ import annotations

from pathlib import Path

from test_agent_failures import FakeService, NativeBackend, _agent, _job, service

from kperf_runner.backends import BootJob, BootResult, ConsoleCallback

__all__ = ["service"]


class RecordingBackend(NativeBackend):
    def __init__(self) -> None:
        super().__init__()
        self.jobs: list[BootJob] = []

    def boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
        self.jobs.append(job)
        return super().boot(job, kernel, on_console)


def test_each_boot_gets_the_claims_command_line_and_thp_mode(
    service: tuple[FakeService, str], tmp_path: Path, runner_state: Path, spawn_binary: Path
) -> None:
    fake, url = service
    fake.job = _job(kernel={"build_id": 3, "sha": "0123abcd" * 5, "cmdline": "mitigations=off nosmt", "thp": "never"})
    backend = RecordingBackend()
    assert _agent(url, tmp_path, backend, runner_state).run() == 0
    assert [(j.cmdline, j.thp) for j in backend.jobs] == [("mitigations=off nosmt", "never")] * 2
    assert fake.bodies("results") and not fake.bodies("fail")


def test_a_claim_from_a_service_without_thp_modes_keeps_the_kernels_default(
    service: tuple[FakeService, str], tmp_path: Path, runner_state: Path, spawn_binary: Path
) -> None:
    _, url = service
    backend = RecordingBackend()
    assert _agent(url, tmp_path, backend, runner_state).run() == 0
    assert {(j.cmdline, j.thp) for j in backend.jobs} == {("", "")}
