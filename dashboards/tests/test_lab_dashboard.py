"""'kperf: lab' on a real database: submissions, builds, jobs, runners, a
tracked branch and undeliverable mail made by kperf's own code, then every
panel query as Grafana would send it."""

from __future__ import annotations

import socket
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import DatabaseError, transaction
from django.utils import timezone
from grafana_sql import dashboards, expand_macros, panel_result, rfc3339nano, run

from kperf.core.builds import queue
from kperf.core.lab import runner_health
from kperf.core.lifecycle import owners
from kperf.core.mail import alerts
from kperf.core.models import (
    Alert,
    Job,
    KernelBuild,
    MachineClass,
    Runner,
    RunnerEvent,
    Submission,
    TrackedBranch,
)
from kperf.core.submissions.pipeline import SUBMISSION, prepare_submission
from kperf.core.tracking import branches
from kperf_kbuild.driver import BuildRequest, BuildResult

from tests.conftest import Api, git
from tests.tracking_fixtures import finish_builds, track

pytestmark = pytest.mark.django_db


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def compiler(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Stand in for the kernel compiler under kperf's real build task (builds
    are tested for real elsewhere): the shas in the returned set fail."""
    failing: set[str] = set()

    def build_kernel(req: BuildRequest, progress: Any = None) -> BuildResult:
        req.output_dir.mkdir(parents=True, exist_ok=True)
        kernel = req.output_dir / "bzImage"
        kernel.write_bytes(b"kernel " + req.sha.encode())
        ok = req.sha not in failing
        return BuildResult(
            ok=ok,
            artifacts={"kernel": kernel} if ok else {},
            config_digest="d" * 64,
            log_tail="" if ok else "mm/memory.c:42: error: expected ';'",
            duration_s=0.1,
            error="" if ok else "mm/memory.c:42: error: expected ';'",
        )

    monkeypatch.setattr(queue, "build_kernel", build_kernel)
    return failing


def submit(api: Api, tree: Path, branch: str, base: str) -> Submission:
    resp = api.post("/submissions", {"tree": str(tree), "branch": branch, "base": base, "benchmarks": ["spawn"]})
    assert resp.status_code == 201, resp.content
    return Submission.objects.get(pk=resp.json()["id"])


@pytest.fixture
def busy_lab(
    alice_api: Api,
    runner_api: tuple[Runner, Api],
    other_runner_api: tuple[Runner, Api],
    small_tree: Path,
    qemu_class: MachineClass,
    compiler: set[str],
    settings: Any,
    settings_dirs: Any,
    tmp_path: Path,
) -> None:
    """Two machine classes, three runners (one seen, one never, one
    quarantined), submissions in four states, builds done and failed, a
    tracked branch waiting for a runner, one mail failed and one waiting."""
    _, runner_http = runner_api
    arm = MachineClass.objects.create(name="arm64-lab", arch="arm64")
    Runner.register("arm-1", arm)
    # What an admin's quarantine does (kperf.core.lab.runner_health).
    with transaction.atomic():
        runner_health.quarantine(runner_health.locked("arm-1"), "quarantined by lab-admin: fan failure")
    # A branch whose kernel does not compile.
    git(small_tree, "checkout", "-q", "-b", "broken", "master")
    (small_tree / "mm.c").write_text("int x = ;\n")
    git(small_tree, "add", "mm.c")
    git(small_tree, "commit", "-q", "-m", "broken")
    git(small_tree, "checkout", "-q", "master")
    compiler.add(git(small_tree, "rev-parse", "broken"))

    measured = submit(alice_api, small_tree, "feature", "master")
    broken = submit(alice_api, small_tree, "broken", "master")
    no_ref = submit(alice_api, small_tree, "no-such-branch", "master")
    submit(alice_api, small_tree, "feature", "v1")  # stays queued: nobody prepared it yet

    # The first failure's mail cannot be delivered and kperf gives up at once.
    prepare_submission(no_ref.pk)
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nobody listens there
    settings.KPERF_ALERT_MAX_ATTEMPTS = 1
    assert alerts.send_pending() == 0

    # Builds through kperf's build task; one fails, and so does its
    # submission, whose mail waits in the outbox.
    for sub in (measured, broken):
        prepare_submission(sub.pk)
    for build in KernelBuild.objects.filter(status=KernelBuild.Status.QUEUED):
        queue.run_build(build.pk)
    for sub in (measured, broken):
        owners.advance(SUBMISSION, sub.pk)

    # A runner says hello and takes a job; the other has never been seen.
    hello = {"version": "1.2", "hostname": "lab-1", "capabilities": {"clocks": ["instructions", "wall"]}}
    assert runner_http.post("/runner/heartbeat", hello).status_code == 200
    assert runner_http.post("/runner/claim").json()["job"] is not None

    # A tracked branch with its first commit waiting for a runner.
    data = track(alice_api, small_tree, boots=2)
    branch = TrackedBranch.objects.get(pk=data["id"])
    branches.poll_branch(branch.pk)
    finish_builds(branch, tmp_path)


def test_the_lab_dashboard_shows_queues_runners_builds_submissions_and_mail(
    busy_lab: None, qemu_class: MachineClass
) -> None:
    board = dashboards()["kperf-lab"]
    now = timezone.now()
    today = (now - timedelta(hours=1), now + timedelta(minutes=1))
    last_month = (now - timedelta(days=40), now - timedelta(days=30))

    def count(**filters: Any) -> int:
        return Job.objects.filter(**filters).count()

    got = panel_result(board, "Jobs waiting and running", {})
    assert got.columns == ["machine class", "queued", "leased"]
    assert got.rows == [
        {"machine class": "arm64-lab", "queued": 0, "leased": 0},
        {
            "machine class": "qemu-x86_64",
            "queued": count(machine_class=qemu_class, status="queued"),
            "leased": count(machine_class=qemu_class, status="leased"),
        },
    ]
    assert got.rows[1]["queued"] > 0 and got.rows[1]["leased"] == 1

    got = panel_result(board, "Queue per machine class", {})
    (arm, qemu) = got.rows
    assert arm["good runners"] == 0 and arm["oldest queued"] is None
    queued = Job.objects.filter(machine_class=qemu_class, status="queued")
    assert qemu["queued: submissions"] == queued.filter(submission__isnull=False).count() > 0
    assert qemu["queued: branches"] == queued.filter(branch_commit__isnull=False).count() == 2
    assert qemu["leased"] == 1 and qemu["good runners"] == 2
    assert qemu["oldest queued"] == min(j.created for j in queued)

    got = panel_result(board, "Runners", {})
    assert got.columns == [
        "runner",
        "machine class",
        "health",
        "reason",
        "since",
        "last calibration",
        "calibration result",
        "last good calibration",
        "last heartbeat",
        "since heartbeat",
        "leased jobs",
        "version",
        "hostname",
    ]
    rows = {r["runner"]: r for r in got.rows}
    assert [r["runner"] for r in got.rows] == ["arm-1", "qemu-1", "qemu-2"]
    assert rows["arm-1"]["health"] == "quarantined" and rows["arm-1"]["last heartbeat"] is None
    arm_runner = Runner.objects.get(name="arm-1")
    assert rows["arm-1"]["reason"] == "quarantined by lab-admin: fan failure"
    assert rows["arm-1"]["since"] == arm_runner.health_since and arm_runner.health_since is not None
    assert rows["qemu-1"]["reason"] == "" and rows["qemu-1"]["since"] is None
    assert rows["qemu-1"]["calibration result"] is None and rows["qemu-1"]["last good calibration"] is None
    seen = Runner.objects.get(name="qemu-1")
    # (now() is when the transaction began: Grafana's query is a transaction
    # of its own, the test's began before the heartbeat.)
    assert rows["qemu-1"]["last heartbeat"] == seen.last_heartbeat and abs(rows["qemu-1"]["since heartbeat"]) < 60
    assert rows["qemu-1"]["leased jobs"] == 1 and rows["qemu-1"]["version"] == "1.2"
    assert rows["qemu-1"]["hostname"] == "lab-1"
    assert rows["qemu-2"]["last heartbeat"] is None and rows["qemu-2"]["since heartbeat"] is None

    got = panel_result(board, "Kernel build durations", {}, time_range=today)
    assert got.columns == ["time", "duration", "metric"]
    timed = KernelBuild.objects.filter(started__isnull=False)
    assert sorted((r["time"], r["duration"], r["metric"]) for r in got.rows) == sorted(
        (b.finished, b.duration_s, f"{b.arch} {b.status}") for b in timed
    )
    assert {r["metric"] for r in got.rows} == {"x86_64 done", "x86_64 failed"}
    assert got.column("time") == sorted(got.column("time"))  # time series come in time order
    assert panel_result(board, "Kernel build durations", {}, time_range=last_month).rows == []

    got = panel_result(board, "Submissions per status", {}, time_range=today)
    assert got.columns == ["status", "submissions"]
    assert got.column("status") == list(Submission.Status.values)  # every status, in a submission's order
    assert dict(zip(got.column("status"), got.column("submissions"), strict=True)) == {
        s: Submission.objects.filter(status=s).count() for s in Submission.Status.values
    }
    assert Submission.objects.filter(status="failed").count() == 2
    # Long ago, only what is still unfinished counts.
    got = panel_result(board, "Submissions per status", {}, time_range=last_month)
    assert dict(zip(got.column("status"), got.column("submissions"), strict=True)) == {
        s: 0 if s in Submission.FINAL else Submission.objects.filter(status=s).count() for s in Submission.Status.values
    }

    got = panel_result(board, "Alerts waiting", {})
    assert got.rows == [{"pending": 1, "failed": 1}]
    got = panel_result(board, "Alerts outbox", {})
    assert got.columns == ["created", "kind", "status", "attempts", "subject", "recipients", "last error"]
    outbox = Alert.objects.filter(status__in=["pending", "failed"]).order_by("-created")
    assert [(r["status"], r["subject"], r["recipients"]) for r in got.rows] == [
        (a.status, a.subject, "alice@example.org") for a in outbox
    ]
    (failed,) = [r for r in got.rows if r["status"] == "failed"]
    assert failed["attempts"] == 1 and "cannot reach 127.0.0.1" in failed["last error"]

    got = panel_result(board, "Tracked branches", {})
    (row,) = got.rows
    branch = TrackedBranch.objects.get()
    assert row["id"] == branch.pk and row["tree"] == branch.tree.url and row["branch"] == "master"
    assert row["state"] == "polling" and row["commits in flight"] == 1 and row["change points"] == 0
    assert row["last polled"] == branch.last_polled and row["last error"] == ""


def test_the_reader_role_reads_the_dashboards_tables_and_nothing_else(db: Any) -> None:
    assert run("SELECT count(*) AS n FROM core_sample").rows == [{"n": 0}]
    for forbidden in (
        "SELECT * FROM auth_user",
        "SELECT * FROM core_apitoken",
        "SELECT * FROM django_session",
        "UPDATE core_runner SET health = 'good'",
        "CREATE TABLE x (i int)",
    ):
        with pytest.raises(DatabaseError):
            run(forbidden)


def test_time_macros_expand_as_grafana_writes_them() -> None:
    start = datetime.fromisoformat("2025-03-01T13:00:00+01:00")
    end = datetime.fromisoformat("2025-03-02T12:30:15.250+00:00")
    assert rfc3339nano(end) == "2025-03-02T12:30:15.25Z"
    assert expand_macros("SELECT $__time(b.finished) WHERE $__timeFilter( b.finished )", start, end) == (
        "SELECT b.finished AS \"time\" WHERE b.finished BETWEEN '2025-03-01T12:00:00Z' AND '2025-03-02T12:30:15.25Z'"
    )


def test_a_new_lab_shows_zeros_and_empty_tables(db: Any) -> None:
    board = dashboards()["kperf-lab"]
    now = timezone.now()
    results = {p["title"]: panel_result(board, p["title"], {}, (now - timedelta(days=7), now)) for p in board["panels"]}
    assert results["Alerts waiting"].rows == [{"pending": 0, "failed": 0}]
    assert set(results["Submissions per status"].column("submissions")) == {0}
    assert all(not r.rows for title, r in results.items() if title not in ("Alerts waiting", "Submissions per status"))


def test_the_calibration_panel_shows_each_runners_medians_over_time(db: Any) -> None:
    mclass = MachineClass.objects.create(name="native-x86_64", arch="x86_64")
    runner, _ = Runner.register("native-1", mclass)
    now = timezone.now()
    for hours, value in ((2, 1000.0), (1, 990.0)):
        RunnerEvent.objects.create(
            runner=runner,
            kind="calibration",
            result="good",
            summary={"spawn-vmas-0": value},
            created=now - timedelta(hours=hours),
        )
    RunnerEvent.objects.create(runner=runner, kind="quarantine", reason="by hand", created=now)
    got = panel_result(dashboards()["kperf-lab"], "Calibrations per runner", {}, (now - timedelta(days=1), now))
    assert [(r["value"], r["metric"]) for r in got.rows] == [
        (1000.0, "native-1 spawn-vmas-0"),
        (990.0, "native-1 spawn-vmas-0"),
    ]
