"""Several vCPUs: the job's count on QEMU's command line, and on the instruction
clock boots with 2 vCPUs that repeat one another (on x86_64 to the last digit)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import FakeService, _agent, _job
from boot_fixtures import RecordingBackend

from kperf_runner.agent import DONE, FAILED
from kperf_runner.backends import BootJob, BootResult
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.cli import build_parser
from kperf_runner.toolchain import compile_all

PFT = get_benchmark("pft")
QUIET = (
    "panic=-1 quiet loglevel=3 nokaslr norandmaps randomize_kstack_offset=off "
    "page_alloc.shuffle=0 random.trust_cpu=off random.trust_bootloader=off"
)
CONSOLE = {"x86_64": "ttyS0", "arm64": "ttyAMA0"}


def _fake_qemu(directory: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> Path:
    """qemu-system-* scripts first on PATH that only print `version`; each run is logged in `calls`."""
    directory.mkdir()
    for name in ("qemu-system-x86_64", "qemu-system-aarch64"):
        script = directory / name
        script.write_text(
            f'#!/bin/sh\necho "$*" >> {directory}/calls\n'
            f"printf '%s\\n' '{version}' 'Copyright (c) 2003-2025 Fabrice Bellard and the QEMU Project developers'\n"
        )
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    return directory


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
@pytest.mark.parametrize("clock", ["wall", "instructions"])
@pytest.mark.parametrize("vcpus", [0, 1, 2, 4])
def test_the_jobs_vcpus_are_qemus_smp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str, clock: str, vcpus: int
) -> None:
    fake = _fake_qemu(tmp_path / "bin", monkeypatch, "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2)")
    backend = QemuBackend(arch, tmp_path / "state", accel="tcg", smp=2)
    argv = backend.command_line(Path("/k"), Path("/i.gz"), "rdinit=/x", clock=clock, vcpus=vcpus)
    # 0: the runner's default, one vCPU on the instruction clock and its -smp on the wall clock.
    smp = vcpus or (1 if clock == "instructions" else 2)
    arm = ["-M", "virt,dtb-randomness=off", "-accel", "tcg", "-cpu", "cortex-a57"]
    machine = ["-accel", "tcg"] if arch == "x86_64" else arm
    # The instruction clock: a guest RTC that starts at one date and keeps the guest's time.
    icount = ["-icount", "shift=0,sleep=off", "-rtc", "clock=vm,base=2020-01-01T00:00:00"]
    # x86 with several vCPUs keeps the TSC as its clock, as with one.
    words = "tsc=reliable " if (arch, clock) == ("x86_64", "instructions") and smp > 1 else ""
    assert argv[1:] == [
        *(icount if clock == "instructions" else []), *machine, "-m", "512", "-smp", str(smp),
        "-nographic", "-no-reboot", "-kernel", "/k", "-initrd", "/i.gz",
        "-append", f"console={CONSOLE[arch]} {QUIET} {words}rdinit=/x",
    ]  # fmt: skip
    # QEMU's version is asked only for several vCPUs on the instruction clock.
    asked = (fake / "calls").read_text().splitlines() if (fake / "calls").exists() else []
    assert asked == (["--version"] if clock == "instructions" and smp > 1 else [])


def test_the_runners_default_vcpus_come_from_qemu_smp(tmp_path: Path) -> None:
    parser = build_parser()
    assert parser.parse_args(["run"]).qemu_smp == 2
    assert parser.parse_args(["run", "--qemu-smp", "4"]).qemu_smp == 4
    assert parser.parse_args(["run", "--smp", "3"]).qemu_smp == 3
    with pytest.raises(ValueError, match="at least one vCPU, not 0"):
        QemuBackend("x86_64", tmp_path, accel="tcg", smp=0)


OLD_QEMU = "QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)"


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_an_older_qemu_refuses_several_vcpus_on_the_instruction_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner_state: Path, arch: str
) -> None:
    fake = _fake_qemu(tmp_path / "bin", monkeypatch, OLD_QEMU)
    backend = QemuBackend(arch, tmp_path / "state", accel="tcg")
    package = {"x86_64": "qemu-system-x86", "arm64": "qemu-system-arm"}[arch]
    for _ in range(2):
        with pytest.raises(RuntimeError) as refused:
            backend.command_line(Path("/k"), Path("/i.gz"), clock="instructions", vcpus=2)
        message = str(refused.value)
        assert f"'{OLD_QEMU}'" in message and "QEMU >= 8.1" in message, message
        # The commands that work on a stock Debian 12, which has no backports source.
        assert message.endswith(
            "\n  echo 'deb http://deb.debian.org/debian bookworm-backports main' > "
            "/etc/apt/sources.list.d/backports.list"
            f"\n  apt-get update\n  apt-get install -t bookworm-backports {package}"
        ), message
    # Asked once while the binary stays the same (tests/test_qemu_version.py: an upgrade is seen).
    assert (fake / "calls").read_text().splitlines() == ["--version"]
    # One vCPU on the instruction clock, and any count on the wall clock, are what QEMU 7.2 runs well.
    for clock, vcpus in (("instructions", 1), ("wall", 4)):
        argv = backend.command_line(Path("/k"), Path("/i.gz"), clock=clock, vcpus=vcpus)
        assert argv[argv.index("-smp") + 1] == str(vcpus)


def test_a_boot_with_an_older_qemu_is_the_runners_fault_not_the_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner_state: Path
) -> None:
    kernel = tmp_path / "bzImage"
    kernel.write_bytes(b"never booted")
    fake = _fake_qemu(tmp_path / "bin", monkeypatch, OLD_QEMU)
    job = BootJob([["/kperf/bin/pft", "-m", "1", "-n", "2"]], {}, clock="instructions", vcpus=2)
    # A RuntimeError (the agent reports it as infra and the job is retried), not a BootFailure.
    with pytest.raises(RuntimeError, match=r"needs QEMU 8\.1 or later"):
        QemuBackend("x86_64", runner_state, accel="tcg").boot(job, kernel)
    assert (fake / "calls").read_text().splitlines() == ["--version"]  # QEMU never started


@pytest.mark.parametrize(
    ("key", "sent", "count"),
    [
        ("vcpus", {"vcpus": 4}, 4),
        ("vcpus", {"vcpus": 0}, 0),
        ("vcpus", {}, 0),
        ("vcpus", {"vcpus": None}, 0),
        ("numa_nodes", {"numa_nodes": 2}, 2),
        ("numa_nodes", {}, 0),
        ("numa_nodes", {"numa_nodes": None}, 0),
    ],
)
def test_the_agent_hands_the_jobs_shape_to_the_backend(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
    key: str,
    sent: dict[str, Any],
    count: int,
) -> None:
    fake, url = service
    fake.job = _job(**sent)
    backend = RecordingBackend()
    agent = _agent(url, tmp_path, backend, runner_state)
    assert agent.run() == 0 and agent.jobs[DONE] == 1
    assert [getattr(job, key) for job in backend.jobs] == [count, count]


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_numa_nodes_split_the_guest_s_memory_and_vcpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str
) -> None:
    _fake_qemu(tmp_path / "bin", monkeypatch, "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2)")
    backend = QemuBackend(arch, tmp_path / "state", accel="tcg")
    argv = backend.command_line(Path("/k"), Path("/i.gz"), clock="instructions", vcpus=4, numa_nodes=2)
    at = argv.index("-smp")
    assert argv[at : at + 10] == [
        "-smp", "4",
        "-object", "memory-backend-ram,id=kperf-mem0,size=256M", "-numa", "node,nodeid=0,cpus=0-1,memdev=kperf-mem0",
        "-object", "memory-backend-ram,id=kperf-mem1,size=256M", "-numa", "node,nodeid=1,cpus=2-3,memdev=kperf-mem1",
    ]  # fmt: skip
    # Fewer vCPUs than nodes: the second node has memory only, as a CXL or memory-only node.
    argv = backend.command_line(Path("/k"), Path("/i.gz"), clock="instructions", vcpus=1, numa_nodes=2)
    assert [a for a in argv if a.startswith("node,")] == [
        "node,nodeid=0,cpus=0-0,memdev=kperf-mem0",
        "node,nodeid=1,memdev=kperf-mem1",
    ]
    # None asked: no -numa at all, the kernel's one node.
    assert "-numa" not in backend.command_line(Path("/k"), Path("/i.gz"), clock="instructions", vcpus=2)
    # A shape the runner's guests cannot take is the runner's fault, said before QEMU starts.
    with pytest.raises(RuntimeError, match="cannot be split into that many equal nodes"):
        backend.command_line(Path("/k"), Path("/i.gz"), clock="instructions", numa_nodes=16)


@pytest.mark.parametrize("value", [-1, "2", 1.5, True])
def test_a_job_with_a_bad_vcpu_count_fails_as_infra(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
    value: Any,
) -> None:
    fake, url = service
    fake.job = _job(vcpus=value)
    backend = RecordingBackend()
    agent = _agent(url, tmp_path, backend, runner_state)
    assert agent.run() == 0 and agent.jobs[FAILED] == 1
    [failure] = fake.bodies("fail")
    assert failure["kind"] == "infra" and f"the job asks for {value!r} vCPUs" in failure["message"]
    assert backend.boots == 0


# -- real boots: 2 vCPUs on the instruction clock, twice ----------------------

SCALING = resolve_params("pft", "scaling", {"clients": [1, 2], "iterations": 2})


def _two_boots(arch: str, kernel: Path, runner_state: Path) -> list[BootResult]:
    commands = PFT.command(SCALING, QemuBackend.bindir)
    job = BootJob(commands, compile_all(PFT.sources(), arch, runner_state), timeout=600, clock="instructions", vcpus=2)
    backend = QemuBackend(arch, runner_state, accel="tcg")
    return [backend.boot(job, kernel) for _ in range(2)]


def _samples(boots: list[BootResult]) -> list[list[tuple[str, int, float]]]:
    """Each boot's pft samples, after checking that the guest and pft saw two CPUs."""
    samples = []
    for result in boots:
        assert result.details["vcpus"] == 2 and result.details["clock"] == "instructions"
        assert result.environment["cpus"] == 2
        # pft itself saw two CPUs, so its 2-thread run ran rather than being skipped.
        assert re.findall(r"pft-info: .* cpus=(\d+)", result.raw_output) == ["2", "2"], result.raw_output
        assert "pft-skip" not in result.raw_output
        samples.append([(s.metric, s.iteration, s.value) for s in PFT.parse(result.raw_output, SCALING)])
    assert len(samples[0]) == 2 * 2 * 2  # two client counts, two metrics, two iterations
    return samples


@pytest.fixture(scope="module")
def arm64_image(kernel_tree: Path, kperf_cache: Path) -> Path:
    """The base branch built for arm64 (cached like the x86_64 fixture kernel)."""
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs gcc-aarch64-linux-gnu to build the arm64 kernel")
    from kperf_testing.kbuild import build_fixture_kernel

    build = build_fixture_kernel(kernel_tree, "base", "arm64", kperf_cache)
    if not build.ok:
        pytest.fail(f"the arm64 fixture kernel did not build: {build.error}")
    path = build.artifacts["kernel"]
    assert isinstance(path, Path)
    return path


def _needs(binary: str) -> None:
    if shutil.which(binary) is None:
        pytest.skip(f"needs {binary}")


@pytest.mark.kernel
def test_two_boots_with_two_vcpus_on_the_instruction_clock_repeat_on_x86_64(runner_state: Path, kernel: Path) -> None:
    _needs("qemu-system-x86_64")
    boots = _two_boots("x86_64", kernel, runner_state)
    first, second = _samples(boots)
    # The same numbers to the last digit, and the same output around them.
    assert first == second
    assert boots[0].raw_output == boots[1].raw_output


@pytest.mark.kernel
def test_two_boots_with_two_vcpus_on_the_instruction_clock_repeat_on_arm64(
    runner_state: Path, arm64_image: Path
) -> None:
    _needs("qemu-system-aarch64")
    boots = _two_boots("arm64", arm64_image, runner_state)
    first, second = _samples(boots)
    # To the last digit, as on x86_64, now that the virt board puts no fresh
    # random seeds into each boot's device tree (dtb-randomness=off;
    # docs/runners.md). With them two boots parted by 0.05-0.14%.
    assert first == second
    assert boots[0].raw_output == boots[1].raw_output
