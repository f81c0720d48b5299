"""The agent under injected failures.

A small stdlib HTTP server plays the service only to inject failures (409s,
500s, 401, bad artifacts); the happy path against the real service is tested
with the service. Boots are replaced by running the benchmark natively and
writing init's console markers around its output, so the samples are real.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import KERNEL, TOKEN, FakeService, NativeBackend, _agent, _job

from kperf_runner.agent import ABANDONED, DONE, DROPPED, FAILED
from kperf_runner.backends import (
    Backend,
    BenchmarkFailure,
    BootJob,
    BootResult,
    ConsoleCallback,
    parse_boot,
)


def test_a_job_is_uploaded_in_the_protocol_shape(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    assert _agent(url, tmp_path, NativeBackend(), runner_state).run() == 0
    [results] = fake.bodies("results")
    assert results["attempt"] == 1
    assert [boot["boot"] for boot in results["boots"]] == [0, 1]
    boot = results["boots"][0]
    assert boot["environment"]["cpus"] == 2 and boot["environment"]["cpufreq_governor"] is None
    assert "COUNT|" in boot["raw_output"] and boot["counters"] == {"vmstat": {"pgfault": 201}}
    assert {(s["metric"], s["iteration"]) for s in boot["samples"]} == {
        (f"spawn-vmas-{v}", i) for v in (0, 10) for i in (0, 1)
    }
    assert results["metrics"] == {
        "spawn-vmas-0": {"unit": "forks/s", "higher_is_better": True},
        "spawn-vmas-10": {"unit": "forks/s", "higher_is_better": True},
    }
    assert "--- kperf: console of boot 2 ---" in results["console_log"]
    phases = [(p["phase"], p["boot"], p["boots"]) for p in fake.bodies("progress")]
    assert phases[0] == ("preparing", 1, 2)
    assert ("booting", 2, 2) in phases and ("running", 2, 2) in phases
    assert phases[-1] == ("uploading", 2, 2)
    # Every console byte reaches the service exactly once across progress calls.
    streamed = "".join(p["console"] for p in fake.bodies("progress"))
    assert streamed.count("KPERF-DONE") == 2 and streamed.count("KPERF-BEGIN 1") == 2
    assert fake.bodies("heartbeat")[0]["capabilities"] == {
        "backends": ["native"],
        "benchmarks": ["aim9", "pagealloc", "pft", "spawn"],
        "clocks": ["wall"],
    }
    assert not fake.bodies("fail")


def test_not_held_mid_job_drops_the_job(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    fake.script["progress"] = [
        (200, {"lease_expires": "x"}),
        (200, {"lease_expires": "x"}),
        (
            409,
            {"detail": "job 7 attempt 1 is leased to qemu-2 now", "code": "not-held"},
        ),
    ]
    agent = _agent(url, tmp_path, NativeBackend(), runner_state)
    assert agent.run_job(fake.job) == DROPPED
    assert not fake.bodies("results") and not fake.bodies("fail")


def test_a_duplicate_upload_counts_as_done(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    fake.script["results"] = [(409, {"detail": "already recorded", "code": "duplicate"})]
    agent = _agent(url, tmp_path, NativeBackend(), runner_state)
    assert agent.run_job(fake.job) == DONE
    assert len(fake.bodies("results")) == 1 and not fake.bodies("fail")


def test_server_errors_are_retried_until_they_pass(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    fake.script["claim"] = [(500, {"detail": "boom"})]
    fake.script["progress"] = [(502, {}), (503, {})]
    fake.script["results"] = [(500, {"detail": "database restarting"})]
    agent = _agent(url, tmp_path, NativeBackend(), runner_state)
    assert agent.run() == 0
    assert agent.jobs[DONE] == 1
    assert len(fake.bodies("claim")) == 2
    assert len(fake.bodies("results")) == 2  # the 500, then the stored upload


def test_an_unreachable_service_abandons_the_job_without_losing_the_runner(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    fake.script["results"] = [(503, {})] * 10
    agent = _agent(url, tmp_path, NativeBackend(), runner_state)
    assert agent.run_job(fake.job) == ABANDONED
    assert len(fake.bodies("results")) == 4  # every retry, then it gives up


def test_a_service_outage_during_a_boot_does_not_stop_it(
    service: tuple[FakeService, str], tmp_path: Path, runner_state: Path, spawn_binary: Path
) -> None:
    fake, url = service
    # The first calls go through, then every retry of one call fails.
    through: list[tuple[int, dict[str, Any]]] = [(200, {})] * 3
    fake.script["progress"] = through + [(503, {})] * 4
    agent = _agent(url, tmp_path, NativeBackend(), runner_state)
    assert agent.run_job(fake.job) == DONE
    streamed = "".join(p["console"] for p in fake.delivered("progress"))
    # Nothing lost, nothing twice: the refused call's console went with the next one.
    assert streamed.count("KPERF-DONE") == 2 and streamed.count("KPERF-BEGIN 1") == 2


def test_a_bad_token_stops_the_runner(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, url = service
    with caplog.at_level(logging.ERROR):
        assert _agent(url, tmp_path, NativeBackend(), runner_state, token="wrong").run() == 2
    assert "refused this runner's token (unknown runner token)" in caplog.text


def test_a_boot_failure_fails_the_job_as_boot_with_the_console(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    agent = _agent(url, tmp_path, NativeBackend(fail="kernel panic: test"), runner_state)
    assert agent.run_job(fake.job) == FAILED
    [fail] = fake.bodies("fail")
    assert (fail["attempt"], fail["kind"], fail["message"]) == (
        1,
        "boot",
        "kernel panic: test",
    )
    assert "Kernel panic - not syncing" in fail["log"]


def test_a_failing_command_fails_the_job_as_benchmark(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    assert _agent(url, tmp_path, NativeBackend(status=1), runner_state).run_job(fake.job) == FAILED
    [fail] = fake.bodies("fail")
    assert fail["kind"] == "benchmark"
    assert "exited with status 1" in fail["message"]


def test_unparseable_output_fails_the_job_as_benchmark(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    agent = _agent(url, tmp_path, NativeBackend(garble=True), runner_state)
    assert agent.run_job(fake.job) == FAILED
    [fail] = fake.bodies("fail")
    assert fail["kind"] == "benchmark"
    assert fail["message"].startswith("boot 1 of 2: spawn: malformed result")
    assert "KPERF-BEGIN 0" in fail["log"]


def test_a_kernel_that_does_not_match_its_sha256_is_an_infra_failure(
    service: tuple[FakeService, str], tmp_path: Path, runner_state: Path
) -> None:
    fake, url = service
    fake.job["artifacts"][0]["sha256"] = "0" * 64
    backend = NativeBackend()
    assert _agent(url, tmp_path, backend, runner_state).run_job(fake.job) == FAILED
    [fail] = fake.bodies("fail")
    assert fail["kind"] == "infra"
    assert "does not match the claim's 0000" in fail["message"]
    assert backend.boots == 0


def test_kernels_are_cached_by_sha256(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    backend = NativeBackend()
    agent = _agent(url, tmp_path, backend, runner_state)
    assert agent.run_job(fake.job) == DONE
    assert agent.run_job({**fake.job, "id": 8}) == DONE
    assert len(fake.bodies("builds")) == 1
    assert backend.kernels[0].read_bytes() == KERNEL
    assert backend.kernels[0].name == hashlib.sha256(KERNEL).hexdigest()


def test_a_stop_request_between_boots_hands_the_job_back(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    agent = _agent(url, tmp_path, NativeBackend(), runner_state)

    class StopAfterFirstBoot(NativeBackend):
        def boot(self, *args: Any, **kwargs: Any) -> BootResult:
            result = super().boot(*args, **kwargs)
            agent.stop.set()
            return result

    agent.backend = StopAfterFirstBoot()
    assert agent.run_job(fake.job) == FAILED
    [fail] = fake.bodies("fail")
    assert fail["kind"] == "infra"
    assert "stopped after boot 1 of 2" in fail["message"]


def test_progress_keeps_the_lease_alive_during_a_quiet_boot(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
) -> None:
    fake, url = service
    fake.job.update(lease_seconds=4, boots=1)
    agent = _agent(url, tmp_path, NativeBackend(seconds=3.5), runner_state)
    assert agent.run_job(fake.job) == DONE
    times = [at for at, name, _ in fake.calls if name in ("progress", "results")]
    gaps = [b - a for a, b in pairwise(times)]
    assert max(gaps) <= 4 / 3, gaps


def test_console_increments_are_batched(service: tuple[FakeService, str], tmp_path: Path, runner_state: Path) -> None:
    """At most one console-carrying call every ~3 s, however chatty the boot."""
    fake, url = service

    class Chatty(NativeBackend):
        def boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
            assert on_console is not None
            for i in range(40):
                on_console(f"line {i}\n")
                time.sleep(0.1)
            raise BenchmarkFailure("stop here", "")

    fake.job.update(boots=1)
    _agent(url, tmp_path, Chatty(), runner_state).run_job(fake.job)
    carrying = [at for at, name, body in fake.calls if name == "progress" and body["console"]]
    assert 1 <= len(carrying) <= 3
    assert all(b - a >= 2.9 for a, b in pairwise(carrying))
    streamed = "".join(body["console"] for body in fake.bodies("progress"))
    assert streamed.count("line ") < 40  # the tail after the last batch goes with fail


def test_run_once_with_nothing_queued_heartbeats_and_exits(service: tuple[FakeService, str], tmp_path: Path) -> None:
    fake, url = service
    fake.claimed = True  # nothing left to hand out
    run = subprocess.run(
        [
            *(sys.executable, "-m", "kperf_runner.cli", "run", "--server", url, "--once"),
            *("--name", "cli-runner", "--arch", "x86_64", "--state-dir", str(tmp_path)),
            *("--qemu-accel", "tcg"),
        ],
        env={**os.environ, "KPERF_RUNNER_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "no job queued for qemu-x86_64" in run.stderr
    [heartbeat] = fake.bodies("heartbeat")
    assert heartbeat["name"] == "cli-runner"
    assert heartbeat["machine_class"] == "qemu-x86_64"


def test_run_without_a_server_says_what_is_missing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KPERF_")}
    run = subprocess.run(
        [sys.executable, "-m", "kperf_runner.cli", "run", "--token", "t", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode != 0
    assert "--server (or KPERF_SERVER) is required" in run.stderr


# -- benchmarks that need a build artifact (pagealloc.ko) ------------------------

PAGEALLOC_RAW = (Path(__file__).parent / "data" / "pagealloc-quick-qemu-x86_64.txt").read_text()
MODULE = b"pretend pagealloc.ko\n" * 16


class RecordingBackend(Backend):
    """Records what a boot was given and answers with captured pagealloc output."""

    name = "recording"
    bindir = "/kperf/bin"

    def __init__(self) -> None:
        self.jobs: list[BootJob] = []

    def boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
        self.jobs.append(job)
        console = f"KPERF-ENV cpus=2\nKPERF-BEGIN 0\n{PAGEALLOC_RAW}KPERF-END 0 0\nKPERF-DONE\n"
        record = parse_boot(console, job.commands)
        return BootResult(console, record.environment, record.commands, 0.1)


def _pagealloc_job(with_module: bool) -> dict[str, Any]:
    job = _job(
        benchmark="pagealloc",
        params={"orders": [0, 1, 2, 3, 4], "batch_limit_kb": 4096, "outer": 3, "inner": 100},
        boots=1,
    )
    if with_module:
        job["artifacts"].append(
            {
                "name": "pagealloc.ko",
                "url": "/api/v1/runner/builds/3/artifacts/pagealloc.ko",
                "sha256": hashlib.sha256(KERNEL).hexdigest(),  # the fake serves KERNEL for every artifact
                "size": len(KERNEL),
            }
        )
    return job


def test_the_module_artifact_is_downloaded_and_put_next_to_the_binaries(
    service: tuple[FakeService, str], tmp_path: Path, runner_state: Path, spawn_binary: Path
) -> None:
    fake, url = service
    fake.job = _pagealloc_job(with_module=True)
    backend = RecordingBackend()
    assert _agent(url, tmp_path, backend, runner_state).run() == 0
    [job] = backend.jobs
    assert job.binaries["pagealloc.ko"].read_bytes() == KERNEL
    assert {"kmodload", "pagealloc.ko"} <= set(job.binaries)
    assert job.commands[0][:7] == [
        "/kperf/bin/kmodload",
        "-c",
        "0",
        "-s",
        "-o",
        "/proc/kperf_pagealloc",
        "/kperf/bin/pagealloc.ko",
    ]
    [results] = fake.bodies("results")
    boot = results["boots"][0]
    # Which cycle counter the module read is part of the environment.
    assert boot["environment"]["cycle_clock"] == "tsc"
    # Three kinds of 3 rounds per order and batch, but order 0 (run first) keeps
    # 1: the first two rounds of each batch size are warm-up, as in mmtests.
    assert len(boot["samples"]) == 3 * (10 * 1 + (9 + 8 + 7 + 6) * 3)
    assert results["metrics"]["alloc-odr0-1"] == {"unit": "cycles", "higher_is_better": False}
    # The fake serves the same bytes for both, and artifacts are cached by
    # sha256: one download serves the kernel and the module.
    assert [name for _, name, _ in fake.calls].count("builds") == 1


def test_a_build_without_the_module_fails_the_job_as_benchmark(
    service: tuple[FakeService, str], tmp_path: Path, runner_state: Path
) -> None:
    fake, url = service
    fake.job = _pagealloc_job(with_module=False)
    backend = RecordingBackend()
    assert _agent(url, tmp_path, backend, runner_state).run() == 0
    assert backend.jobs == []
    [fail] = fake.bodies("fail")
    assert fail["kind"] == "benchmark"
    assert "needs the build artifact pagealloc.ko" in fail["message"]
    assert "CONFIG_MODULES" in fail["message"]
