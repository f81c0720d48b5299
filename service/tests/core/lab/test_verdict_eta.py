"""When the verdict will come: jobs ahead and an ETA from measured durations, in the API, the page and the CLI
(kperf.core.lab.eta)."""

from __future__ import annotations

import http.server
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from kperf.cli import progress as cli_progress
from kperf.cli.client import Client as CliClient
from kperf.cli.client import CliError
from kperf.cli.status import render_status
from kperf.core import benchmarks
from kperf.core.models import Job, KernelBuild, MachineClass, Runner, Submission, SubmissionBuild, Tree
from kperf.core.submissions.pipeline import schedule_jobs

from tests.conftest import Api, kperf_cli
from tests.lab_fixtures import built, submission_ready_for_testing
from tests.lab_fixtures import submission_page as page

CLASS = "qemu-x86_64"
# Boots per side of the spawn quick grid: each side of a submission is this many one-boot jobs.
K = benchmarks.grid_for("spawn", "quick")[0]


def boots_per_side(mclass: MachineClass) -> int:
    """The spawn quick grid's first look on the class: each side of a submission is this many one-boot jobs."""
    return benchmarks.boots_per_side(benchmarks.grid_for("spawn", "quick")[0], mclass.clock)


def alive(runner: Runner) -> None:
    runner.last_heartbeat = timezone.now()
    runner.save(update_fields=["last_heartbeat"])


def measured(sub: Submission, seconds: list[float]) -> None:
    """Finished spawn quick jobs of the past (no owner, as imported ones), one per duration."""
    build = sub.submission_builds.first().build  # type: ignore[union-attr]
    end = timezone.now() - timedelta(hours=1)
    for s in seconds:
        Job.objects.create(
            build=build,
            benchmark="spawn",
            grid="quick",
            machine_class=MachineClass.objects.get(name=CLASS),
            status=Job.Status.DONE,
            started=end - timedelta(seconds=s),
            finished=end,
        )


def behind(first: Submission) -> Submission:
    """Another submission of the same kernels, queued after `first`: every boot its own."""
    second = Submission.objects.create(
        owner=first.owner,
        tree=first.tree,
        head_ref="feature-2",
        base_ref="master",
        benchmarks=["spawn"],
        arches=["x86_64"],
        status=Submission.Status.TESTING,
    )
    links = [
        SubmissionBuild.objects.create(submission=second, build=sb.build, side=sb.side)
        for sb in first.submission_builds.all()
    ]
    schedule_jobs(second, links)
    return second


@pytest.mark.django_db
def test_a_submission_behind_another_counts_its_jobs_and_expects_its_verdict_after_them(
    settings: Any, alice: Any, alice_api: Api, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    K = boots_per_side(qemu_class)
    settings.KPERF_BASE_SHARE_WINDOW_SECONDS = 0
    runner, _ = runner_api
    alive(runner)
    first = submission_ready_for_testing(alice, qemu_class, tmp_path)
    measured(first, [50, 60, 70])
    second = behind(first)

    d = alice_api.get(f"/submissions/{second.pk}").json()
    # K boots per side each: 2K jobs of the first, then its own 2K, one runner, 60 s each.
    assert d["jobs_ahead"] == {CLASS: 2 * K}
    assert d["eta"]["seconds"] == 4 * K * 60
    # 10th and 90th percentiles 52 and 68 s; a second look may add K boots per
    # side (KPERF_BOOT_BUDGET_FACTOR 2).
    assert (d["eta"]["low"], d["eta"]["high"]) == (4 * K * 52, 4 * K * 68 + 2 * K * 68)
    assert d["eta"]["more_jobs"] == 2 * K
    assert d["eta"]["basis"] == f"median of 3 recent spawn quick jobs on {CLASS}"
    assert d["eta"]["line"].startswith(f"verdict expected in ~{4 * K} min (by ")
    assert d["eta"]["line"].endswith(f"), {2 * K} jobs ahead on {CLASS}")
    assert d["eta_reason"] is None
    # Wrapped to 100 columns, in the same words.
    assert d["eta"]["line"] in " ".join(render_status(d).split())
    assert f"Verdict expected in ~{4 * K} min (by " in page(alice, second)

    # The first one has nothing ahead; a second runner halves the wait of the second.
    assert alice_api.get(f"/submissions/{first.pk}").json()["jobs_ahead"] == {CLASS: 0}
    other, _ = Runner.register("qemu-2", qemu_class)
    alive(other)
    assert alice_api.get(f"/submissions/{second.pk}").json()["eta"]["seconds"] == 2 * K * 60


@pytest.mark.django_db
def test_a_building_submission_waits_for_its_builds_then_its_planned_jobs(
    alice: Any, alice_api: Api, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    K = boots_per_side(qemu_class)
    runner, _ = runner_api
    alive(runner)
    done = submission_ready_for_testing(alice, qemu_class, tmp_path)
    measured(done, [60])
    Job.objects.filter(submission=done).update(status=Job.Status.DONE)
    now = timezone.now()
    KernelBuild.objects.filter(pk__in=done.submission_builds.values("build")).update(
        started=now - timedelta(seconds=300), finished=now - timedelta(seconds=200)
    )
    tree = Tree.objects.create(url=str(tmp_path / "tree-2"))
    sub = Submission.objects.create(
        owner=alice,
        tree=tree,
        head_ref="f",
        base_ref="v6.1",
        benchmarks=["spawn"],
        arches=["x86_64"],
        base_sha="1" * 40,
        head_sha="2" * 40,
        status=Submission.Status.BUILDING,
    )
    SubmissionBuild.objects.create(submission=sub, build=built(tree, "1" * 40, tmp_path), side="base")
    head = KernelBuild.objects.create(tree=tree, sha="2" * 40, arch="x86_64", config_digest="d" * 64)
    SubmissionBuild.objects.create(submission=sub, build=head, side="head")

    d = alice_api.get(f"/submissions/{sub.pk}").json()
    # The base is built; the head takes 100 s, then 2K planned jobs of 60 s.
    assert d["eta"]["seconds"] == 100 + 2 * K * 60
    assert "median of 2 recent builds" in d["eta"]["basis"]


@pytest.mark.django_db
def test_without_a_runner_in_service_there_is_no_estimate_and_it_says_why(
    alice: Any, alice_api: Api, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    d = alice_api.get(f"/submissions/{sub.pk}").json()
    assert d["eta"] is None
    assert d["eta_reason"] == f"no runner of class {CLASS} is in service to run its jobs"
    assert f"no estimate of the verdict's time: {d['eta_reason']}" in render_status(d)
    shown = page(alice, sub)
    assert "No estimate of the verdict's time: no runner of class" in shown

    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.DONE, finished=timezone.now())
    d = alice_api.get(f"/submissions/{sub.pk}").json()
    assert (d["eta"], d["eta_reason"], d["jobs_ahead"]) == (None, "the submission is done", {})
    assert "verdict expected" not in render_status(d) and 'id="eta"' not in page(alice, sub)


def test_kperf_status_prints_the_eta_line(
    live_server: Any, alice: Any, alice_api: Api, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    K = boots_per_side(qemu_class)
    runner, _ = runner_api
    alive(runner)
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    measured(sub, [120])
    out = kperf_cli(live_server.url, alice_api, tmp_path / "config.json")("status", str(sub.pk))
    assert out.returncode == 0, out.stderr
    # 2K jobs of 120 s on one runner, none ahead.
    assert f"  verdict expected in ~{4 * K} min (by " in out.stdout


class Lines:
    """A running `kperf` whose output lines are read as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + 30
        while not any(text in line for line in self.lines):
            assert time.monotonic() < deadline and self.proc.poll() is None, self.lines
            time.sleep(0.05)


def submit_and_wait(live_server: Any, api: Api, tree: Path, tmp_path: Path) -> tuple[Lines, Submission]:
    env = dict(
        os.environ,
        KPERF_SERVER=live_server.url,
        KPERF_TOKEN=api.token or "",
        KPERF_CONFIG=str(tmp_path / "config.json"),
        KPERF_POLL_INTERVAL="0.1",
    )
    kperf = str(Path(sys.executable).parent / "kperf")
    args = ["submit", "--tree", str(tree), "--branch", "feature", "--base", "master", "--bench", "spawn", "--wait"]
    proc = subprocess.Popen([kperf, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = Lines(proc)
    out.wait_for("submission ")
    sub = Submission.objects.get(pk=int(out.lines[0].split()[1].rstrip(":")))
    out.wait_for(f"#{sub.pk} queued")
    return out, sub


def test_kperf_submit_wait_prints_one_line_per_change_and_exits_0_without_regression(
    live_server: Any,
    alice: Any,
    alice_api: Api,
    qemu_class: MachineClass,
    runner_api: Any,
    small_tree: Path,
    settings_dirs: Any,
    tmp_path: Path,
) -> None:
    K = boots_per_side(qemu_class)
    settings_dirs.KPERF_ALLOW_LOCAL_TREES = True
    runner, _ = runner_api
    alive(runner)
    out, sub = submit_and_wait(live_server, alice_api, small_tree, tmp_path)
    links = [
        SubmissionBuild.objects.create(submission=sub, build=built(sub.tree, sha, tmp_path), side=side)
        for side, sha in (("base", "a" * 40), ("head", "b" * 40))
    ]
    schedule_jobs(sub, links)
    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.TESTING)
    out.wait_for(f"#{sub.pk} testing · boots base 0/{K}, head 0/{K} · verdict expected in ")
    first = Job.objects.filter(submission=sub).order_by("seq").first()
    Job.objects.filter(pk=first.pk).update(status=Job.Status.DONE)  # type: ignore[union-attr]
    out.wait_for(f"#{sub.pk} testing · boots base 1/{K}, head 0/{K} · verdict expected in ")
    Job.objects.filter(submission=sub).update(status=Job.Status.DONE)
    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.DONE, finished=timezone.now())
    assert out.proc.wait(timeout=30) == 0
    out.reader.join(timeout=5)
    progress = [line for line in out.lines if line.startswith(f"#{sub.pk} ") and " · " in line]
    # One line per change, not one per poll.
    assert len(progress) == len(set(progress)) >= 4
    assert progress[-1] == f"#{sub.pk} done · boots base {K}/{K}, head {K}/{K} · verdict: no regression"
    assert "verdict: no regression" in out.lines  # then the whole status, as `kperf status` prints it


def test_kperf_submit_wait_exits_2_when_the_submission_fails(
    live_server: Any,
    alice: Any,
    alice_api: Api,
    qemu_class: MachineClass,
    small_tree: Path,
    settings_dirs: Any,
    tmp_path: Path,
) -> None:
    settings_dirs.KPERF_ALLOW_LOCAL_TREES = True
    out, sub = submit_and_wait(live_server, alice_api, small_tree, tmp_path)
    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.FAILED, error="the head does not build")
    assert out.proc.wait(timeout=30) == 2
    out.reader.join(timeout=5)
    assert f"#{sub.pk} failed · verdict: failed" in out.lines
    assert "error: the head does not build" in out.lines


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Answers:
    """A server that answers GET /submissions/7 with each of `answers` in turn."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)

    def call(self, method: str, path: str) -> dict[str, Any]:
        assert (method, path) == ("GET", "/submissions/7")
        return self.answers.pop(0)


def answer(status: str, done: int, verdicts: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "id": 7,
        "status": status,
        # As the service says it (Submission.FINAL): the CLI waits for this.
        "final": status in ("done", "failed"),
        "branch": "f",
        "head_sha": "b" * 40,
        "base": "v6.1",
        "base_sha": "a" * 40,
        "tree": "t",
        "benchmarks": ["spawn"],
        "grid": "quick",
        "arches": ["x86_64"],
        "verdict": "1 regression" if "regression" in verdicts else None,
        "progress": {s: {"boots_done": done, "boots_total": 2, "boots_shared": 0} for s in ("base", "head")},
        "jobs": [{"id": 1, "side": "head", "status": "leased", "runner": "qemu-1", "phase": "booting", "progress": ""}]
        if status == "testing"
        else [],
        "eta": {"line": "verdict expected in ~2 min (by 14:05 UTC)"} if status == "testing" else None,
        "comparisons": [
            {
                "benchmark": "spawn",
                "machine_class": CLASS,
                "method": "m",
                "alpha": 0.05,
                "metrics": [
                    {
                        "metric": "m",
                        "verdict": v,
                        "base_mean": 1.0,
                        "head_mean": 1.0,
                        "change_pct": 0.0,
                        "ci_low_pct": None,
                        "q_value": None,
                    }
                    for v in verdicts
                ],
            }
        ]
        if verdicts
        else [],
    }


def test_on_a_terminal_the_progress_bar_is_redrawn_in_place_and_a_regression_exits_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = Terminal()
    code = cli_progress.follow(
        Answers(answer("testing", 1), answer("done", 2, ("regression", "no change"))),  # type: ignore[arg-type]
        7,
        as_json=False,
        out=out,
        interval=0,
    )
    assert code == 1
    text = out.getvalue()
    assert text.startswith(
        "\r[##########..........] #7 testing (head booting) · boots base 1/2, head 1/2 · "
        "verdict expected in ~2 min (by 14:05 UTC)"
    )
    assert "\r[####################] #7 done · boots base 2/2, head 2/2 · verdict: 1 regression" in text
    # One line on the terminal until the end, then the whole status below it.
    assert text.count("\n") > 1 and "\n" not in text.split("\r")[1]
    assert "\nverdict: 1 regression\n" in text
    # A narrow terminal gets the line cut to its width, never wrapped onto a second line.
    monkeypatch.setenv("COLUMNS", "40")
    narrow = Terminal()
    cli_progress.follow(Answers(answer("testing", 1), answer("failed", 1)), 7, False, narrow, 0)  # type: ignore[arg-type]
    assert narrow.getvalue().split("\r")[1] == "[##########..........] #7 testing (head"


def test_kperf_submit_wait_json_prints_the_json_alone_on_stdout_and_the_progress_on_stderr(
    live_server: Any,
    alice: Any,
    alice_api: Api,
    qemu_class: MachineClass,
    small_tree: Path,
    settings_dirs: Any,
    tmp_path: Path,
) -> None:
    settings_dirs.KPERF_ALLOW_LOCAL_TREES = True
    env = dict(
        os.environ,
        KPERF_SERVER=live_server.url,
        KPERF_TOKEN=alice_api.token or "",
        KPERF_CONFIG=str(tmp_path / "config.json"),
        KPERF_POLL_INTERVAL="0.1",
    )
    kperf = str(Path(sys.executable).parent / "kperf")
    args = ["submit", "--tree", str(small_tree), "--branch", "feature", "--base", "master", "--wait", "--json"]
    # Into a pipe, as `kperf submit --wait --json | jq` runs it.
    proc = subprocess.Popen([kperf, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not Submission.objects.exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    sub = Submission.objects.get()
    time.sleep(0.3)  # a few polls while it is queued
    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.FAILED, error="the head does not build")
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 2, stderr
    d = json.loads(stdout)
    assert d["id"] == sub.pk and d["status"] == "failed"
    assert f"submission {sub.pk}: " in stderr and f"#{sub.pk} queued" in stderr
    assert f"#{sub.pk} failed · verdict: failed" in stderr


class FlakyServer:
    """A real HTTP server answering GET /api/v1/submissions/7 with each of `answers` in turn:
    a status code (502), "drop" (the connection closed without an answer), or a JSON body."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                assert self.path == "/api/v1/submissions/7"
                owner.asked += 1
                a = owner.answers.pop(0) if len(owner.answers) > 1 else owner.answers[0]
                if a == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                body = json.dumps(a if isinstance(a, dict) else {"detail": "bad gateway"}).encode()
                self.send_response(200 if isinstance(a, dict) else int(a))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_wait_asks_again_through_a_restart_and_a_proxys_502(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli_progress, "RETRY_PAUSE_S", (0.01, 0.05))
    server = FlakyServer(answer("testing", 1), 502, "drop", 503, 504, answer("done", 2, ("no change",)))
    out, progress = io.StringIO(), io.StringIO()
    try:
        code = cli_progress.follow(CliClient(server.url, "t"), 7, True, out, 0, progress=progress, retry_for=30)
    finally:
        server.close()
    assert code == 0 and json.loads(out.getvalue())["status"] == "done"
    assert server.asked == 6
    err = capsys.readouterr().err
    assert "502" in err and "asking again in" in err and "cannot reach" in err


def test_wait_gives_up_after_its_bound_with_its_own_exit_status_and_says_the_submission_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli_progress, "RETRY_PAUSE_S", (0.05, 0.1))
    server = FlakyServer(answer("testing", 1), 503)
    try:
        code = cli_progress.follow(CliClient(server.url, "t"), 7, False, io.StringIO(), 0, retry_for=0.5)
    finally:
        server.close()
    assert code == cli_progress.STOPPED_WAITING == 3
    assert server.asked > 3  # asked again until the bound, then stopped
    err = capsys.readouterr().err
    assert "stopped waiting for submission 7" in err and "the submission goes on: `kperf status 7`" in err
    # A refusal is no outage: it ends the wait at once, as any error (exit 2).
    server = FlakyServer(404)
    try:
        with pytest.raises(CliError, match="404"):
            cli_progress.follow(CliClient(server.url, "t"), 7, False, io.StringIO(), 0, retry_for=30)
    finally:
        server.close()
