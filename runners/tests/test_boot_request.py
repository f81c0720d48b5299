"""What a claim asks of the boot (kernel command line words, THP mode) reaches the backend."""

from __future__ import annotations

from pathlib import Path

from agent_fixtures import FakeService, _agent, _job
from boot_fixtures import RecordingBackend

from kperf_runner.backends import BootJob, with_phase_seed


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


class InstructionClockBackend(RecordingBackend):
    """Records what it is asked to boot on the instruction clock (it runs natively, as its parent)."""

    def clocks(self) -> tuple[str, ...]:
        return ("wall", "instructions")


def test_each_instruction_clock_boot_gets_a_phase_seed_of_its_own(
    service: tuple[FakeService, str], tmp_path: Path, runner_state: Path, spawn_binary: Path
) -> None:
    # Boots that repeat exactly need a phase each (docs/statistics.md, "A phase per boot").
    fake, url = service
    fake.job = _job(clock="instructions", boots=3, kernel={"build_id": 3, "sha": "0123abcd" * 5, "cmdline": "nosmt"})
    backend = InstructionClockBackend()
    assert _agent(url, tmp_path, backend, runner_state).run() == 0
    seeds = []
    for job in backend.jobs:
        first, rest = job.cmdline.split(" ", 1)
        assert first.startswith("kperf.phase_seed=") and rest == "nosmt", job.cmdline
        seeds.append(int(first.partition("=")[2]))
    assert len(seeds) == 3 and len(set(seeds)) == 3 and all(0 <= s < 2**32 for s in seeds)
    assert fake.bodies("results") and not fake.bodies("fail")


def test_a_phase_the_claim_names_is_kept_and_the_wall_clock_gets_none() -> None:
    named = BootJob([], {}, cmdline="kperf.phase_seed=9 quiet", clock="instructions")
    assert with_phase_seed(named, 5) is named
    wall = BootJob([], {}, cmdline="quiet", clock="wall")
    assert with_phase_seed(wall, 5) is wall
    assert with_phase_seed(BootJob([], {}, clock="instructions"), 5).cmdline == "kperf.phase_seed=5"
