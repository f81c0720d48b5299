"""Calibration, health checks and quarantine of runners (docs/calibration.md).

The drift test runs the real runner agent against the live service over
HTTP. Booting kernels is replaced by running the real compiled benchmark
binaries on this machine (as the agent's own failure tests do), and the
runner is made slower for real: its benchmark processes run in a cgroup
whose CPU quota is a few percent of one CPU.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from django.db import transaction
from django.test import Client
from django.utils import timezone

from kperf.core.lab import calibration, leases, runner_health
from kperf.core.models import ApiToken, Job, MachineClass, Runner, RunnerEvent, Tree
from kperf_runner.agent import Agent, RunnerConfig
from kperf_runner.backends import Backend, BootFailure, BootJob, BootResult, ConsoleCallback, parse_boot
from kperf_runner.client import Client as RunnerClient
from kperf_runner.toolchain import host_arch

from tests.conftest import Api, kperf_cli, qemu_runner
from tests.lab_fixtures import built, results_body, submission_ready_for_testing

CLASS = "native-x86_64"


class CpuLimit:
    """A cgroup whose processes together get `percent` of one CPU (cgroup v2 cpu.max, else v1 cpu)."""

    PERIOD_US = 20000

    def __init__(self, percent: float) -> None:
        quota = max(1000, int(self.PERIOD_US * percent / 100))
        name = f"kperf-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        v2 = Path("/sys/fs/cgroup")
        v2_controllers = v2 / "cgroup.controllers"
        if v2_controllers.exists() and "cpu" in v2_controllers.read_text().split():
            if "cpu" not in (v2 / "cgroup.subtree_control").read_text().split():
                (v2 / "cgroup.subtree_control").write_text("+cpu")
            self.path = v2 / name
            self.path.mkdir()
            (self.path / "cpu.max").write_text(f"{quota} {self.PERIOD_US}")
            # The quota caps the group; the weight makes sure it gets its quota while the host is
            # busy (a cold test run compiles kernels on both cores beside it): at the default weight
            # the group shared the CPU with every busy process and its rate followed the load,
            # 76% between two calibrations of one quota.
            (self.path / "cpu.weight").write_text("10000")
        else:
            self.path = Path("/sys/fs/cgroup/cpu") / name
            self.path.mkdir()
            (self.path / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))
            (self.path / "cpu.shares").write_text("262144")

    def join(self) -> None:
        """In the child before exec: it and every process it forks run under the quota."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def close(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:  # its last processes are still exiting
                time.sleep(0.1)


def cpu_limit_or_skip(percent: float) -> CpuLimit:
    try:
        return CpuLimit(percent)
    except OSError as e:
        pytest.skip(f"cannot make a CPU-limited cgroup here ({e}): run as root with a cgroup cpu controller")


class NativeBackend(Backend):
    """Runs the job's real benchmark binaries on this machine, in `limit`'s cgroup if set, with init's markers."""

    name = "native"
    bindir = "/kperf/bin"

    def __init__(self) -> None:
        self.limit: CpuLimit | None = None
        self.fail = ""

    def boot(self, job: BootJob, kernel: Path, on_console: ConsoleCallback | None = None) -> BootResult:
        tick = on_console or (lambda _text: None)
        console = ["KPERF-ENV cpus=2\n", "KPERF-ENV kernel_release=native\n"]
        tick("".join(console))
        if self.fail:
            raise BootFailure(self.fail, "".join(console) + f"Kernel panic - not syncing: {self.fail}\n")
        for n, argv in enumerate(job.commands):
            binary = job.binaries[Path(argv[0]).name]
            limit = self.limit
            run = subprocess.run(
                [str(binary), *argv[1:]],
                capture_output=True,
                text=True,
                check=False,
                preexec_fn=limit.join if limit else None,
            )
            text = f"KPERF-BEGIN {n}\n{run.stdout}{run.stderr}KPERF-END {n} {run.returncode}\n"
            console.append(text)
            tick(text)
        console.append("KPERF-DONE\n")
        text = "".join(console)
        record = parse_boot(text, job.commands)
        return BootResult(text, record.environment, record.commands, 0.1)


@pytest.fixture
def native_class(db: Any, tmp_path: Path) -> MachineClass:
    """A wall-clock class calibrating with spawn (quick, 2 boots) on a reference build."""
    tree = Tree.objects.create(url=str(tmp_path / "reference-tree"))
    reference = built(tree, "f" * 40, tmp_path)
    return MachineClass.objects.create(name=CLASS, arch=host_arch(), clock="wall", reference_build=reference)


def agent_for(server: str, token: str, name: str, backend: Backend, state: Path) -> Agent:
    state.mkdir(exist_ok=True)
    config = RunnerConfig(name, host_arch(), CLASS, state, poll=0.05, once=True)
    return Agent(config, RunnerClient(server, token, backoff=0.05, retries=3), backend)


def runner(name: str = "native-1") -> Runner:
    return Runner.objects.select_related("machine_class").get(name=name)


def calibrate_now(name: str) -> Job:
    """What the beat task does once a runner's calibration is due: it was, a day ago."""
    Runner.objects.filter(name=name).update(last_calibration=timezone.now() - timedelta(hours=25))
    assert calibration.queue_due() == 1
    return Job.objects.get(pinned_runner__name=name, status=Job.Status.QUEUED)


@pytest.mark.django_db(transaction=True)
def test_a_runner_made_slower_is_quarantined_claims_nothing_and_is_released_by_an_admin(
    live_server: Any, native_class: MachineClass, alice: Any, staff: Any, settings: Any, tmp_path: Path
) -> None:
    # A machine of fixed speed: the runner's benchmarks always get a quarter
    # of one CPU, which a loaded 2-core test host still gives (unthrottled,
    # its rate followed whatever else the host ran, by up to 80% between
    # calibrations). Slowed on purpose it gets a twentieth: 5x slower, -80%.
    # The floor sits between the two, so neither the noise nor the slowdown
    # is borderline.
    settings.KPERF_CALIBRATION_FLOOR_PCT = 50.0
    settings.KPERF_CALIBRATION_K = 4.0
    normal, slow = cpu_limit_or_skip(25), cpu_limit_or_skip(5)
    try:
        _drift(live_server.url, native_class, alice, staff, tmp_path, normal, slow)
    finally:
        normal.close()
        slow.close()


def _drift(
    server: str, mclass: MachineClass, alice: Any, staff: Any, tmp_path: Path, normal: CpuLimit, slow: CpuLimit
) -> None:
    _, token = Runner.register("native-1", mclass)
    backend = NativeBackend()
    backend.limit = normal
    agent = agent_for(server, token, "native-1", backend, tmp_path / "state")

    # Never calibrated: due at once. Three calibrations start the series, the fourth is judged.
    assert calibration.queue_due() == 1
    for n in range(4):
        if n:
            calibrate_now("native-1")
        assert agent.run() == 0
        r = runner()
        assert r.health == Runner.Health.GOOD, r.health_reason
        assert r.last_calibration_result == ("learning" if n < 3 else "good")
    [judged] = RunnerEvent.objects.filter(runner=r, result="good")
    assert set(judged.judgement) == {"spawn-vmas-0", "spawn-vmas-1000"}
    assert all(not j["drift"] and j["calibrations"] == 3 for j in judged.judgement.values())
    good_until = r.last_good_calibration
    assert good_until is not None

    # A developer's jobs wait in the queue; the runner is slowed, and its calibration comes first.
    with transaction.atomic():
        sub = submission_ready_for_testing(alice, mclass, tmp_path)
    queued = set(Job.objects.filter(submission=sub).values_list("pk", flat=True))
    backend.limit = slow
    cal = calibrate_now("native-1")
    assert agent.run() == 0
    cal.refresh_from_db()
    assert cal.status == Job.Status.DONE
    r = runner()
    assert r.health == Runner.Health.QUARANTINED and r.last_calibration_result == "drift"
    assert r.health_reason.startswith("calibration drift: spawn-vmas-")
    assert "% (" in r.health_reason and "against its last 4 calibrations" in r.health_reason
    assert r.health_since is not None and r.last_good_calibration == good_until
    assert set(Job.objects.filter(status=Job.Status.QUEUED).values_list("pk", flat=True)) == queued

    # Quarantined: it claims nothing, neither the developer's jobs nor a calibration.
    assert agent.run() == 0
    assert RunnerClient(server, token, retries=1, backoff=0.05).claim() is None
    assert not Job.objects.filter(status=Job.Status.LEASED).exists()
    assert calibration.queue_due() == 0

    # Everyone signed in sees why; only an admin releases.
    alice_token, staff_token = ApiToken.issue(alice)[1], ApiToken.issue(staff)[1]
    listed = {
        d["name"]: d for d in requests.get(f"{server}/api/v1/runners", headers=_bearer(alice_token), timeout=30).json()
    }
    assert listed["native-1"]["health"] == "quarantined" and listed["native-1"]["reason"] == r.health_reason
    assert listed["native-1"]["last_good_calibration"] == good_until.isoformat()
    checks = requests.get(f"{server}/api/v1/runners/native-1/checks", headers=_bearer(alice_token), timeout=30)
    kinds = [(e["kind"], e["result"]) for e in checks.json()["events"]]
    assert kinds[:2] == [("quarantine", None), ("calibration", "drift")]
    assert len(checks.json()["series"]["rows"]) == 5
    out = kperf_cli(server, Api(alice_token), tmp_path / "c.json")("runners")
    assert out.returncode == 0 and "quarantined" in out.stdout and "why: calibration drift: spawn-vmas-" in out.stdout
    release = f"{server}/api/v1/runners/native-1/release"
    refused = requests.post(release, json={"note": "mine now"}, headers=_bearer(alice_token), timeout=30)
    assert refused.status_code == 403 and runner().health == Runner.Health.QUARANTINED

    # The admin found the cause (the quota) and releases it; it calibrates at
    # once, against the series from before, and goes back to work.
    backend.limit = normal
    admin_cli = kperf_cli(server, Api(staff_token), tmp_path / "staff.json")
    ok = admin_cli("runners", "release", "native-1", "--note", "removed the CPU quota")
    assert ok.returncode == 0, ok.stderr
    assert "native-1" in ok.stdout and "good" in ok.stdout and "why:" not in ok.stdout
    assert agent.run() == 0
    r = runner()
    assert r.health == Runner.Health.GOOD and r.last_calibration_result == "good", r.health_reason
    history = admin_cli("runners", "checks", "native-1")
    assert "release by lab-admin: was quarantined for: calibration drift" in history.stdout
    assert "removed the CPU quota" in history.stdout and "calibration drift" in history.stdout
    assert agent.run() == 0
    assert Job.objects.filter(pk__in=queued, status=Job.Status.DONE, runner=r).count() == 1
    release_event = RunnerEvent.objects.get(runner=r, kind="release")
    assert release_event.by == staff and release_event.note == "removed the CPU quota"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.django_db(transaction=True)
def test_a_failing_health_check_quarantines_the_runner(
    live_server: Any, native_class: MachineClass, alice: Any, tmp_path: Path
) -> None:
    _, token = Runner.register("native-1", native_class)
    backend = NativeBackend()
    backend.fail = "the reference kernel did not come up"
    with transaction.atomic():
        sub = submission_ready_for_testing(alice, native_class, tmp_path)
    cal = calibration.queue_for(runner())
    assert agent_for(live_server.url, token, "native-1", backend, tmp_path / "state").run() == 0
    cal.refresh_from_db()
    assert cal.status == Job.Status.FAILED and cal.failure_kind == "boot"
    r = runner()
    assert r.health == Runner.Health.QUARANTINED and r.last_calibration_result == "failed"
    assert r.health_reason.startswith(f"health check failed: calibration job {cal.pk} (boot): ")
    assert "the reference kernel did not come up" in r.health_reason
    # The developer's jobs were never touched, and wait for another runner.
    assert not Job.objects.filter(submission=sub).exclude(status=Job.Status.QUEUED).exists()
    assert leases.claim(r) is None


def upload(job: dict[str, Any]) -> dict[str, Any]:
    """A runner's results for every boot of the job (a calibration has several)."""
    body = results_body(job)
    body["boots"] = [{**body["boots"][0], "boot": i} for i in range(job["boots"])]
    return body


@pytest.mark.django_db
def test_a_calibration_whose_runner_stopped_reporting_on_its_last_attempt_quarantines(
    native_class: MachineClass,
) -> None:
    r, _ = qemu_runner("native-1", native_class)
    cal = calibration.queue_for(r)
    Job.objects.filter(pk=cal.pk).update(
        status=Job.Status.LEASED,
        runner=r,
        attempt=cal.max_attempts,
        lease_expires=timezone.now() - timedelta(seconds=1),
    )
    assert leases.expire_leases() == 1
    r = runner()
    assert r.health == Runner.Health.QUARANTINED
    assert r.health_reason.startswith(f"health check failed: calibration job {cal.pk} (infra): lease expired")


@pytest.mark.django_db
def test_results_since_the_last_good_calibration_are_marked(
    native_class: MachineClass, alice: Any, alice_api: Api, staff_api: Api, tmp_path: Path
) -> None:
    r, api = qemu_runner("native-1", native_class)
    _, other_api = qemu_runner("native-2", native_class)
    with transaction.atomic():
        sub = submission_ready_for_testing(alice, native_class, tmp_path)

    def run_one(client: Api = api) -> dict[str, Any]:
        job = client.post("/runner/claim").json()["job"]
        assert job is not None
        assert client.post(f"/runner/jobs/{job['id']}/results", upload(job)).status_code == 200
        return dict(job)

    before = run_one()
    cal = calibration.queue_for(r)
    # Pinned to native-1: native-2 takes the developer's next job, never the calibration.
    taken_by_other = run_one(other_api)
    assert taken_by_other["id"] != cal.pk and Job.objects.get(pk=cal.pk).status == Job.Status.QUEUED
    assert run_one()["id"] == cal.pk  # its own calibration first
    assert runner().last_calibration_result == "learning"
    after = run_one()
    held = api.post("/runner/claim").json()["job"]  # running when the admin steps in

    resp = staff_api.post("/runners/native-1/quarantine", {"note": "fan failure"})
    assert resp.status_code == 200 and resp.json()["reason"] == "quarantined by lab-admin: fan failure"
    assert api.post(f"/runner/jobs/{held['id']}/results", upload(held)).status_code == 200
    marked = dict(Job.objects.filter(submission=sub).exclude(suspect_note="").values_list("pk", "suspect_note"))
    assert set(marked) == {after["id"], held["id"]}
    note = marked[after["id"]]
    assert note.startswith("measured on runner native-1 after its last good calibration (")
    assert note.endswith("for: quarantined by lab-admin: fan failure")
    assert RunnerEvent.objects.get(kind="quarantine").marked_jobs == 1

    # The API and the submission page say so on the jobs (the comparison, once there is one, too).
    jobs = {j["id"]: j for j in alice_api.get(f"/submissions/{sub.pk}").json()["jobs"]}
    assert jobs[after["id"]]["suspect"] == note and jobs[before["id"]]["suspect"] is None
    assert jobs[taken_by_other["id"]]["suspect"] is None
    page = Client()
    page.force_login(alice)
    html = page.get(f"/submissions/{sub.pk}").content.decode()
    assert "Suspect: measured on runner native-1" in html
    lab = page.get("/lab/").content.decode()
    assert 'data-health="quarantined"' in lab and "fan failure" in lab and "Release" not in lab


@pytest.mark.django_db
def test_only_staff_release_or_quarantine_and_the_history_keeps_who(
    native_class: MachineClass, alice: Any, alice_api: Api, staff: Any, staff_api: Api
) -> None:
    qemu_runner("native-1", native_class)
    for path in ("/runners/native-1/quarantine", "/runners/native-1/release"):
        resp = alice_api.post(path, {"note": "x"})
        assert resp.status_code == 403 and resp.json()["code"] == "forbidden"
        assert "only an admin" in resp.json()["detail"]
    assert alice_api.post("/runners/nobody/quarantine", {"note": "x"}).status_code == 403
    assert staff_api.post("/runners/nobody/quarantine", {"note": "x"}).status_code == 404
    assert runner().health == Runner.Health.GOOD and not RunnerEvent.objects.exists()

    # Pages: a signed-in user reads the lab page but may not post to it; staff may.
    page = Client()
    page.force_login(alice)
    assert page.post("/lab/runners/native-1/quarantine", {"note": "x"}).status_code == 403
    page.force_login(staff)
    assert page.post("/lab/runners/native-1/quarantine", {"note": "disk full"}).status_code == 302
    r = runner()
    assert r.health == Runner.Health.QUARANTINED and r.health_reason == "quarantined by lab-admin: disk full"
    assert staff_api.post("/runners/native-1/quarantine", {"note": "again"}).json()["changed"] is False
    lab = page.get("/lab/").content.decode()
    assert 'action="/lab/runners/native-1/release"' in lab and "csrfmiddlewaretoken" in lab
    resp = staff_api.post("/runners/native-1/release", {"note": "new disk", "relearn": True})
    assert resp.status_code == 200 and resp.json()["health"] == "good"
    # Released: the calibration it was given waits for it, and the series starts again.
    assert Job.objects.filter(pinned_runner=r, status=Job.Status.QUEUED).count() == 1
    r = runner()
    assert r.calibration_baseline_since is not None and r.health_since == r.calibration_baseline_since
    events = [(e["kind"], e["by"], e["note"]) for e in alice_api.get("/runners/native-1/checks").json()["events"]]
    assert events == [
        ("release", "lab-admin", "new disk (calibration series starts again)"),
        ("quarantine", "lab-admin", "disk full"),
    ]


def test_drift_is_judged_by_noise_and_floor() -> None:
    past = [{"m": v} for v in (100.0, 102.0, 98.0, 101.0, 99.0)]
    with_settings = {"KPERF_CALIBRATION_K": 4.0, "KPERF_CALIBRATION_FLOOR_PCT": 5.0, "KPERF_CALIBRATION_MIN_HISTORY": 3}
    from django.test import override_settings

    with override_settings(**with_settings):
        assert not calibration.judge({"m": 103.0}, past)["m"]["drift"]  # within its noise
        moved = calibration.judge({"m": 80.0}, past)["m"]
        assert moved["drift"] and moved["change_pct"] == -20.0 and moved["noise_pct"] == pytest.approx(1.4826)
        reason = calibration.drift_reason({"m": moved})
        assert reason == "calibration drift: m moved -20.0% (13x its noise) against its last 5 calibrations"
        # Tiny noise: 0.5% is many times the noise but under the floor.
        still = [{"m": v} for v in (100.0, 100.01, 99.99)]
        assert not calibration.judge({"m": 100.5}, still)["m"]["drift"]
        # Too little history: nothing judged.
        assert calibration.judge({"m": 50.0}, past[:2]) == {}


@pytest.mark.django_db
def test_set_reference_chooses_the_kernel_and_the_schedule_queues_what_is_due(
    native_class: MachineClass, tmp_path: Path, settings: Any
) -> None:
    from django.core.management import CommandError, call_command

    r, _ = qemu_runner("native-1", native_class)
    assert native_class.reference_build is not None
    newer = built(native_class.reference_build.tree, "e" * 40, tmp_path)
    call_command("set_reference", CLASS, "eeeeee", "--boots", "3", "--now")
    mclass = MachineClass.objects.get(pk=native_class.pk)
    assert mclass.reference_build == newer and mclass.calibration_boots == 3
    [job] = Job.objects.filter(pinned_runner=r)
    assert (job.build, job.boots, job.benchmark, job.grid, job.status) == (newer, 3, "spawn", "quick", "queued")
    # Already waiting: the schedule adds nothing, whatever the time.
    assert calibration.queue_due() == 0
    with pytest.raises(CommandError, match=r"no finished .* build 'abc123'"):
        call_command("set_reference", CLASS, "abc123")
    with pytest.raises(CommandError, match="no machine class 'nope'"):
        call_command("set_reference", "nope", "1")
    settings.KPERF_CALIBRATION_EVERY_HOURS = 0
    Job.objects.filter(pinned_runner=r).delete()
    assert calibration.queue_due() == 0


@pytest.mark.django_db
def test_a_new_reference_kernel_starts_a_new_series(native_class: MachineClass, tmp_path: Path) -> None:
    r, api = qemu_runner("native-1", native_class)

    def calibrate(value: float) -> str:
        calibration.queue_for(runner())
        job = api.post("/runner/claim").json()["job"]
        body = upload(job)
        for boot in body["boots"]:
            boot["samples"] = [{**s, "value": value} for s in boot["samples"]]
        assert api.post(f"/runner/jobs/{job['id']}/results", body).status_code == 200
        return runner().last_calibration_result

    assert [calibrate(v) for v in (1000.0, 1010.0, 990.0, 1005.0)] == ["learning"] * 3 + ["good"]
    # Another kernel measures 30% lower on a healthy runner: a new series, not a drift.
    assert native_class.reference_build is not None
    native_class.reference_build = built(native_class.reference_build.tree, "e" * 40, tmp_path)
    native_class.save()
    assert calibrate(700.0) == "learning" and runner().health == Runner.Health.GOOD
    # Back on the first kernel, that series goes on, and judges.
    first_job = Job.objects.filter(pinned_runner=r).order_by("id").first()
    assert first_job is not None
    native_class.reference_build = first_job.build
    native_class.save()
    assert calibrate(700.0) == "drift" and runner().health == Runner.Health.QUARANTINED


@pytest.mark.django_db
def test_a_runner_moved_to_another_class_gets_a_fresh_calibration_and_the_stale_one_is_cancelled(
    native_class: MachineClass,
) -> None:
    r, api = qemu_runner("native-1", native_class)
    stale = calibration.queue_for(r)
    other = MachineClass.objects.create(
        name="native-b", arch=host_arch(), clock="wall", reference_build=native_class.reference_build
    )
    r.machine_class = other
    r.save()
    # The old class's job can never be claimed: it does not count as waiting.
    assert calibration.open_calibration(runner()) is None
    fresh = calibrate_now("native-1")
    assert fresh.pk != stale.pk and fresh.machine_class == other
    stale.refresh_from_db()
    assert stale.status == Job.Status.CANCELLED and stale.finished is not None
    assert stale.failure_message.startswith(
        f"cancelled: runner native-1 is now in machine class native-b, this calibration was for {CLASS}"
    )
    assert api.post("/runner/claim").json()["job"]["id"] == fresh.pk
    # A runner that stops giving its class's clock: the same, and no new job it could not claim either.
    Job.objects.filter(pk=fresh.pk).update(status=Job.Status.QUEUED, runner=None)
    Runner.objects.filter(name="native-1").update(capabilities={"clocks": ["instructions"]})
    with pytest.raises(calibration.CalibrationUnavailable, match="does not give the wall clock machine class native-b"):
        calibration.queue_for(runner())
    assert Job.objects.get(pk=fresh.pk).failure_message.startswith(
        "cancelled: runner native-1 no longer gives the wall clock"
    )
    assert not Job.objects.filter(pinned_runner=r, status=Job.Status.QUEUED).exists()


@pytest.mark.django_db
def test_a_quarantined_runners_requeued_calibration_is_cancelled(native_class: MachineClass) -> None:
    r, api = qemu_runner("native-1", native_class)
    cal = calibration.queue_for(r)
    job = api.post("/runner/claim").json()["job"]
    assert job["id"] == cal.pk
    runner_health.quarantine_by_name("native-1", None, "fan failure")
    # An infrastructure failure with attempts left would requeue it: it is cancelled instead.
    resp = api.post(f"/runner/jobs/{cal.pk}/fail", {"attempt": 1, "kind": "infra", "message": "disk full"})
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    cal.refresh_from_db()
    assert cal.status == Job.Status.CANCELLED and cal.runner is None
    assert cal.failure_message.startswith("cancelled after attempt 1 failed on native-1: disk full: runner native-1")
    assert "is quarantined (quarantined by an admin: fan failure)" in cal.failure_message

    # The same when its lease runs out.
    calibration.release_by_name("native-1", None, "fixed", calibrate=False)
    second = calibration.queue_for(runner())
    assert api.post("/runner/claim").json()["job"]["id"] == second.pk
    runner_health.quarantine_by_name("native-1", None, "again")
    Job.objects.filter(pk=second.pk).update(lease_expires=timezone.now() - timedelta(seconds=1))
    assert leases.expire_leases() == 1
    second.refresh_from_db()
    assert second.status == Job.Status.CANCELLED and "lease expired" in second.failure_message
    # A good runner's calibration is requeued as any job is.
    calibration.release_by_name("native-1", None, "fixed", calibrate=False)
    third = calibration.queue_for(runner())
    assert api.post("/runner/claim").json()["job"]["id"] == third.pk
    assert api.post(f"/runner/jobs/{third.pk}/fail", {"attempt": 1, "kind": "infra"}).json()["status"] == "queued"


@pytest.mark.django_db
def test_a_runner_quarantined_after_it_authenticated_claims_nothing(
    native_class: MachineClass, alice: Any, tmp_path: Path
) -> None:
    _, api = qemu_runner("native-1", native_class)
    with transaction.atomic():
        submission_ready_for_testing(alice, native_class, tmp_path)
    authenticated = leases.runner_for_token(api.token or "")
    assert authenticated is not None
    # The quarantine commits between the request's token lookup and its claim.
    runner_health.quarantine_by_name("native-1", None, "fan failure")
    assert authenticated.health == Runner.Health.GOOD  # as the request loaded it
    assert leases.claim(authenticated) is None
    assert not Job.objects.exclude(status=Job.Status.QUEUED).exists()
    calibration.release_by_name("native-1", None, "fixed", calibrate=False)
    assert leases.claim(authenticated) is not None


@pytest.mark.django_db(transaction=True)
def test_the_schedule_and_a_release_at_once_queue_one_calibration(native_class: MachineClass) -> None:
    from django.db import connection

    qemu_runner("native-1", native_class)
    results: list[int] = []

    def beat() -> None:
        try:
            results.append(calibration.queue_due())
        finally:
            connection.close()

    # A release in progress holds the runner and has queued its calibration,
    # not yet committed: the schedule waits for it, then sees it.
    with transaction.atomic():
        calibration.queue_for(runner_health.locked("native-1"))
        waiting = threading.Thread(target=beat)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive(), "the schedule did not wait for the runner's lock"
    waiting.join(30)
    assert results == [0]
    assert Job.objects.filter(pinned_runner__name="native-1", status=Job.Status.QUEUED).count() == 1

    # Two beats at once: one queues, the other finds it.
    Job.objects.all().delete()
    start = threading.Barrier(2)

    def racing_beat() -> None:
        start.wait()
        beat()

    threads = [threading.Thread(target=racing_beat) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results[1:]) == [0, 1]
    assert Job.objects.filter(pinned_runner__name="native-1", status=Job.Status.QUEUED).count() == 1
