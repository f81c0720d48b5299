"""The agent across its own restart, against the real service (live server, PostgreSQL) and the
lab's side of the runner protocol (kperf.core.lab.leases).

It is here, not in runners/tests, because it sets up the service's rows:
the runner package and its tests never import the service, the agent
speaks to it over HTTP only.

A kexec runner comes back on its own kernel with the job in flight in its
state directory and init's transcript in pstore: it uploads without claiming
anything. Reading pstore empties it, so the result is saved in the state
directory at once: an upload the service did not get, or an agent restarted
before the upload, is sent from there. A qemu runner whose agent died
mid-boot cannot know how the boot went: it reports the attempt as `infra` at
once, and the job is queued again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone
from namespace_init import run_init_with_pmsg

from kperf.core.models import Job, MachineClass, Runner
from kperf_runner import inflight
from kperf_runner.agent import ABANDONED, DONE, FAILED, Agent, RunnerConfig
from kperf_runner.backends import BootJob, BootResult, ConsoleCallback
from kperf_runner.backends.kexec import KexecBackend, Ramoops
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark
from kperf_runner.client import Client
from kperf_runner.inflight import InFlight
from kperf_runner.toolchain import compile_static, host_arch
from kperf_testing.lab import submission_ready_for_testing
from kperf_testing.stack import free_port

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(host_arch() != "x86_64", reason="the service's fixtures build x86_64 kernels"),
]


# The runner's own compiled binaries, as runners/tests/conftest.py makes them
# (this test lives with the service's: it sets up rows in the service's database).
@pytest.fixture(scope="module")
def runner_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runner-state")


@pytest.fixture(scope="module")
def spawn_binary(runner_state: Path) -> Path:
    return compile_static("spawn.c", host_arch(), runner_state)


@pytest.fixture(scope="module")
def init_binary(runner_state: Path) -> Path:
    return compile_static("init.c", host_arch(), runner_state)


def _queued_job(tmp_path: Path, owner: Any, mclass: MachineClass) -> None:
    """One submission with built kernels and queued jobs, as the service makes them."""
    sub = submission_ready_for_testing(owner, mclass, tmp_path)
    # One boot each: the tests are about one boot across a restart.
    Job.objects.filter(submission=sub).update(boots=1)


def _agent(
    url: str,
    token: str,
    backend: Any,
    state: Path,
    runner_state: Path,
    client: Client | None = None,
    once: bool = True,
    stop: threading.Event | None = None,
) -> Agent:
    state.mkdir(exist_ok=True)
    if not (state / "bin").exists():
        # The shared binaries' directory may not exist yet: in an xdist worker
        # this can be the first test to compile anything (a dangling link
        # would fail the agent's mkdir).
        (runner_state / "bin").mkdir(parents=True, exist_ok=True)
        (state / "bin").symlink_to(runner_state / "bin", target_is_directory=True)
    config = RunnerConfig("runner-1", "x86_64", "lab-x86_64", state, poll=0.05, once=once)
    return Agent(config, client or Client(url, token, backoff=0.05, retries=2), backend, stop)


class _Outage(Client):
    """The real client; the calls `down(endpoint, payload)` picks go to a port nobody listens on."""

    def __init__(self, url: str, token: str, down: Callable[[str, dict[str, Any]], bool]) -> None:
        super().__init__(url, token, backoff=0.05, retries=2)
        self.down = down

    def post_json(self, endpoint: str, payload: dict[str, Any]) -> dict[str, Any]:
        if not self.down(endpoint, payload):
            return super().post_json(endpoint, payload)
        server, self.server = self.server, f"http://127.0.0.1:{free_port()}/"
        try:
            return super().post_json(endpoint, payload)
        finally:
            self.server = server


def _back_from_the_jump(
    live_server: Any, django_user_model: Any, tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> tuple[dict[str, Any], str, Path, Path]:
    """A kexec runner's machine back on its own kernel after boot 1 of 1: the job, token, state dir and pstore."""
    owner = django_user_model.objects.create_user("alice", "alice@example.org", "alice-password-1")
    mclass = MachineClass.objects.create(name="lab-x86_64", arch="x86_64", clock="wall")
    _, token = Runner.register("runner-1", mclass)
    _queued_job(tmp_path, owner, mclass)
    client = Client(live_server.url, token, backoff=0.05, retries=2)
    client.heartbeat({"name": "runner-1", "arch": "x86_64", "machine_class": "lab-x86_64", "capabilities": {}})
    job = client.claim()
    assert job is not None
    state = tmp_path / "state"
    boot = {"started": time.time() - 20, "boot_id": "before the jump", "timeout": 600}
    inflight.save(state, InFlight(job, 0, "kexec", boot))
    client.progress(job["id"], {"attempt": job["attempt"], "phase": "booting", "quiet_seconds": 1800})
    bench = get_benchmark("spawn")
    commands = bench.command(bench.validate(job["params"]), "/kperf/bin")
    _, transcript = run_init_with_pmsg(tmp_path, init_binary, {"spawn": spawn_binary}, commands)
    pstore = tmp_path / "pstore"
    pstore.mkdir()
    (pstore / "pmsg-ramoops-0").write_bytes(transcript)
    return job, token, state, pstore


# What a second look at pstore would find: a boot that never got anywhere.
DECOY = "KPERF-ENV kernel_release=decoy\nKernel panic - not syncing: a second look at pstore\n"


def test_a_kexec_runner_back_on_its_own_kernel_uploads_the_job_in_flight(
    live_server: Any,
    django_user_model: Any,
    tmp_path: Path,
    runner_state: Path,
    init_binary: Path,
    spawn_binary: Path,
) -> None:
    owner = django_user_model.objects.create_user("alice", "alice@example.org", "alice-password-1")
    mclass = MachineClass.objects.create(name="lab-x86_64", arch="x86_64", clock="wall")
    _, token = Runner.register("runner-1", mclass)
    _queued_job(tmp_path, owner, mclass)
    client = Client(live_server.url, token, backoff=0.05, retries=2)
    client.heartbeat({"name": "runner-1", "arch": "x86_64", "machine_class": "lab-x86_64", "capabilities": {}})
    job = client.claim()
    assert job is not None and job["clock"] == "wall"

    # What the agent left before the jump (the progress call asked for a quiet lease) ...
    state = tmp_path / "state"
    started = time.time() - 20
    inflight.save(
        state,
        InFlight(job, 0, "kexec", {"started": started, "boot_id": "before the jump", "timeout": 600}),
    )
    client.progress(job["id"], {"attempt": job["attempt"], "phase": "booting", "quiet_seconds": 1800})
    # ... and what pstore kept of the boot: the real init's transcript.
    bench = get_benchmark("spawn")
    commands = bench.command(bench.validate(job["params"]), "/kperf/bin")
    _, transcript = run_init_with_pmsg(tmp_path, init_binary, {"spawn": spawn_binary}, commands)
    pstore = tmp_path / "pstore"
    pstore.mkdir()
    (pstore / "pmsg-ramoops-0").write_bytes(transcript)
    (pstore / "console-ramoops-0").write_text("[    0.0] Linux version 6.1.0-kperf\n")

    backend = KexecBackend("x86_64", state, Ramoops(0x30000000, 0x1000000), pstore=pstore)
    agent = _agent(live_server.url, token, backend, state, runner_state)
    assert agent.run() == 0
    assert agent.jobs[DONE] == 1
    stored = Job.objects.get(pk=job["id"])
    assert stored.status == Job.Status.DONE, (stored.status, stored.progress)
    [boot] = stored.boot_records.all()
    assert boot.environment["backend"] == "kexec" and boot.environment["clock"] == "wall"
    assert boot.environment["machine_hostname"] and boot.environment["machine_kernel_release"]
    assert "Linux version 6.1.0-kperf" in stored.console_log
    # Nothing left to resume, and the other job was not claimed (--once: the resumed job was the run).
    assert inflight.load(state) is None and list(pstore.iterdir()) == []
    assert Job.objects.exclude(pk=job["id"]).exclude(status=Job.Status.QUEUED).count() == 0


class _DiesMidBoot(QemuBackend):
    """QEMU's backend in an agent that dies while the boot runs (SystemExit gets past every handler)."""

    def run_boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
        raise SystemExit("the agent's process died here")


def test_a_qemu_runner_restarted_mid_boot_reports_infra_and_the_job_is_retried(
    live_server: Any,
    django_user_model: Any,
    tmp_path: Path,
    runner_state: Path,
) -> None:
    owner = django_user_model.objects.create_user("alice", "alice@example.org", "alice-password-1")
    mclass = MachineClass.objects.create(name="lab-x86_64", arch="x86_64", clock="wall")
    _, token = Runner.register("runner-1", mclass)
    _queued_job(tmp_path, owner, mclass)
    state = tmp_path / "state"
    dying = _agent(live_server.url, token, _DiesMidBoot("x86_64", state, accel="tcg"), state, runner_state)
    with pytest.raises(SystemExit):
        dying.run()
    left = inflight.load(state)
    assert left is not None and left.boot == 0 and left.backend == "qemu"
    job_id, attempt = left.job["id"], left.job["attempt"]
    assert Job.objects.get(pk=job_id).status == Job.Status.LEASED

    # The agent starts again: before claiming anything it reports the boot it cannot pick up.
    again = _agent(live_server.url, token, QemuBackend("x86_64", state, accel="tcg"), state, runner_state)
    assert again.run() == 0
    assert again.jobs[FAILED] == 1
    stored = Job.objects.get(pk=job_id)
    # infra: queued again at once, as the next attempt, without waiting for the lease.
    assert stored.status == Job.Status.QUEUED and stored.attempt == attempt + 1, (stored.status, stored.progress)
    assert stored.failure_kind == "infra"
    assert stored.failure_message.startswith("the runner restarted during boot 1 of 1")
    assert inflight.load(state) is None


class _JumpsAway(KexecBackend):
    """The kexec backend up to the jump; the machine then goes away (SystemExit here)."""

    def load(self, kernel: Path, initrd: Path, cmdline: str) -> None:
        assert initrd.is_file() and "kperf.end=reboot" in cmdline

    def ramoops_loaded(self) -> bool:
        return True  # as on a machine set up for kexec (not this host)

    def mark_jump(self, boot: str) -> None:
        pass  # not in this host's kernel log

    def jump(self) -> None:
        raise SystemExit("the machine went into the kernel under test")


def test_before_the_jump_the_job_is_persisted_and_the_lease_covers_the_boot(
    live_server: Any,
    django_user_model: Any,
    tmp_path: Path,
    runner_state: Path,
) -> None:
    owner = django_user_model.objects.create_user("alice", "alice@example.org", "alice-password-1")
    mclass = MachineClass.objects.create(name="lab-x86_64", arch="x86_64", clock="wall")
    _, token = Runner.register("runner-1", mclass)
    _queued_job(tmp_path, owner, mclass)
    state, pstore = tmp_path / "state", tmp_path / "pstore"
    pstore.mkdir()
    backend = _JumpsAway("x86_64", state, Ramoops(0x30000000, 0x1000000), pstore=pstore, return_timeout=3000)
    agent = _agent(live_server.url, token, backend, state, runner_state)
    before = timezone.now()
    with pytest.raises(SystemExit):
        agent.run()
    left = inflight.load(state)
    assert left is not None and left.backend == "kexec" and left.boot == 0 and left.results == []
    assert left.state["machine_kernel_release"] and left.state["boot_id"] and left.state["cmdline"]
    stored = Job.objects.get(pk=left.job["id"])
    # The lease covers the boot's time limit plus the way back, on top of the plain lease.
    assert stored.status == Job.Status.LEASED and stored.lease_expires is not None
    assert stored.lease_expires > before + timedelta(seconds=settings.KPERF_LEASE_SECONDS + 3000)


def test_an_upload_the_service_did_not_get_is_kept_and_sent_again_from_the_state_directory(
    live_server: Any,
    django_user_model: Any,
    tmp_path: Path,
    runner_state: Path,
    init_binary: Path,
    spawn_binary: Path,
) -> None:
    job, token, state, pstore = _back_from_the_jump(live_server, django_user_model, tmp_path, init_binary, spawn_binary)
    stop = threading.Event()
    # What the state directory held at each try of the upload.
    kept: list[InFlight | None] = []

    def down(endpoint: str, payload: dict[str, Any]) -> bool:
        if not endpoint.endswith("/results"):
            return False
        kept.append(inflight.load(state))
        if len(kept) == 1:
            # The boot's records were taken from pstore; anything there now is not this boot's.
            (pstore / "pmsg-ramoops-0").write_text(DECOY)
            return True  # the service is down for the first try
        stop.set()  # the loop ends after this try
        return False

    backend = KexecBackend("x86_64", state, Ramoops(0x30000000, 0x1000000), pstore=pstore)
    agent = _agent(
        live_server.url, token, backend, state, runner_state, _Outage(live_server.url, token, down), False, stop
    )
    watchdog = threading.Timer(120, stop.set)  # a broken loop must not hang the test run
    watchdog.start()
    try:
        assert agent.run() == 0
    finally:
        watchdog.cancel()
    assert agent.jobs[ABANDONED] == 1 and agent.jobs[DONE] == 1, agent.jobs
    # Before the first try the result was already on disk, the boot counted as done ...
    assert len(kept) == 2 and kept[0] is not None and kept[1] is not None
    assert not kept[0].under_way and kept[0].boot == 1 and kept[0].state == {}
    [saved] = kept[0].results
    assert saved["boot"] == 0 and saved["samples"] and "KPERF-DONE" in saved["console"]
    assert kept[1].results == kept[0].results
    # ... and the second try sent it from there, not from another look at pstore.
    stored = Job.objects.get(pk=job["id"])
    assert stored.status == Job.Status.DONE and stored.attempt == job["attempt"], (stored.status, stored.progress)
    [boot] = stored.boot_records.all()
    assert boot.raw_output == saved["raw_output"] and boot.samples.count() == len(saved["samples"])
    assert "decoy" not in stored.console_log
    assert (pstore / "pmsg-ramoops-0").read_text() == DECOY
    assert inflight.load(state) is None


class _DiesAtUpload(Client):
    """The agent's process dies as it is about to upload (SystemExit gets past every handler)."""

    def results(self, job_id: int, payload: dict[str, Any]) -> dict[str, Any]:
        raise SystemExit("the agent's process died here")


def test_an_agent_restarted_between_the_return_and_the_upload_uploads_the_saved_result(
    live_server: Any,
    django_user_model: Any,
    tmp_path: Path,
    runner_state: Path,
    init_binary: Path,
    spawn_binary: Path,
) -> None:
    job, token, state, pstore = _back_from_the_jump(live_server, django_user_model, tmp_path, init_binary, spawn_binary)
    ramoops = Ramoops(0x30000000, 0x1000000)
    dying = _agent(
        live_server.url,
        token,
        KexecBackend("x86_64", state, ramoops, pstore=pstore),
        state,
        runner_state,
        _DiesAtUpload(live_server.url, token, backoff=0.05, retries=2),
    )
    with pytest.raises(SystemExit):
        dying.run()
    saved = inflight.load(state)
    assert saved is not None and not saved.under_way and saved.boot == 1 and len(saved.results) == 1
    assert list(pstore.iterdir()) == []  # read once, and gone from there
    (pstore / "pmsg-ramoops-0").write_text(DECOY)

    again = _agent(live_server.url, token, KexecBackend("x86_64", state, ramoops, pstore=pstore), state, runner_state)
    assert again.run() == 0
    assert again.jobs[DONE] == 1, again.jobs
    stored = Job.objects.get(pk=job["id"])
    assert stored.status == Job.Status.DONE, (stored.status, stored.progress)
    [boot] = stored.boot_records.all()
    assert boot.raw_output == saved.results[0]["raw_output"] and boot.samples.count() > 0
    assert (pstore / "pmsg-ramoops-0").read_text() == DECOY
    assert inflight.load(state) is None
    # --once: the saved job was the run; nothing else was claimed.
    assert Job.objects.exclude(pk=job["id"]).exclude(status=Job.Status.QUEUED).count() == 0


class _JumpsAwayWatched(_JumpsAway):
    """_JumpsAway, noting whether the watchdog was armed."""

    armed = False

    def arm_watchdog(self, boot_timeout: float) -> None:
        self.armed = True


def test_when_the_service_cannot_be_told_the_runner_goes_quiet_there_is_no_jump_and_the_attempt_is_infra(
    live_server: Any,
    django_user_model: Any,
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,  # the shared compile cache exists (the agent compiles into it)
) -> None:
    owner = django_user_model.objects.create_user("alice", "alice@example.org", "alice-password-1")
    mclass = MachineClass.objects.create(name="lab-x86_64", arch="x86_64", clock="wall")
    _, token = Runner.register("runner-1", mclass)
    _queued_job(tmp_path, owner, mclass)
    state, pstore = tmp_path / "state", tmp_path / "pstore"
    pstore.mkdir()
    backend = _JumpsAwayWatched("x86_64", state, Ramoops(0x30000000, 0x1000000), pstore=pstore)
    # The service is down for the one call that matters; every other call gets through.
    client = _Outage(live_server.url, token, lambda endpoint, payload: "quiet_seconds" in payload)
    agent = _agent(live_server.url, token, backend, state, runner_state, client)
    assert agent.run() == 0  # no SystemExit: no jump
    assert agent.jobs[FAILED] == 1, agent.jobs
    assert not backend.armed
    [stored] = Job.objects.exclude(failure_kind="")
    # infra: queued again at once, as the next attempt.
    assert stored.status == Job.Status.QUEUED and stored.attempt == 2, (stored.status, stored.progress)
    assert stored.failure_kind == "infra"
    assert stored.failure_message.startswith("the service could not be told that the runner goes quiet for ")
    assert "was not booted" in stored.failure_message
    assert inflight.load(state) is None
