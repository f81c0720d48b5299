"""Nothing stuck, nothing lost: a broker that goes away, a worker that dies, an analysis that raises.

The broker here is a Redis server the test starts and stops itself, the
worker a real Celery worker process, the database the real PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from django.db import connection
from django.utils import timezone

from kperf.celery import app as celery_app
from kperf.core.builds import queue
from kperf.core.lifecycle import dispatch, owners
from kperf.core.lifecycle.task_names import Task
from kperf.core.models import Job, KernelBuild, Submission, SubmissionBuild, Tree
from kperf.core.submissions import pipeline
from kperf.core.tasks import sweeper
from kperf_testing.plugin import database_url_for_tests
from kperf_testing.stack import free_port

from tests.conftest import Api
from tests.lab_fixtures import results_body, submission_ready_for_testing

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (apt: redis-server)")


class OwnRedis:
    """A Redis server on a free loopback port, to stop and start at will."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.dir = tmp
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


def point_app_at(url: str) -> None:
    """Send this process's tasks to `url`, dropping the pools made for the old broker."""
    celery_app.conf["broker_url"] = url
    celery_app.close()
    # close() keeps the producer pool when no connection pool was made yet.
    celery_app.amqp._producer_pool = None  # type: ignore[attr-defined]  # private, not in celery-types


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    # Function scope: pytest-django runs transactional tests after the
    # others, so a module-wide broker would outlive this module and catch
    # other modules' tasks.
    server = OwnRedis(tmp_path)
    server.start()
    patch = pytest.MonkeyPatch()
    previous = celery_app.conf.broker_url
    # Celery reads CELERY_BROKER_URL from the environment before its settings.
    patch.setenv("CELERY_BROKER_URL", server.url)
    point_app_at(server.url)
    try:
        yield server
    finally:
        server.stop()
        patch.undo()
        point_app_at(previous)


def start_worker(
    broker: str,
    tmp: Path,
    log: Path,
    *,
    queues: str = "default,builds,analysis",
    concurrency: int = 1,
    include: Path | None = None,
) -> subprocess.Popen[bytes]:
    """A worker with the flags kperf-up and docker-compose give theirs, in a
    process group of its own (os.killpg kills it with its pool); `include`,
    a module file of extra tasks."""
    env = dict(
        os.environ, DATABASE_URL=database_url_for_tests(), CELERY_BROKER_URL=broker, KPERF_HOME=str(tmp / "home")
    )
    extra = []
    if include is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(include.parent), env.get("PYTHONPATH")]))
        extra = ["-I", include.stem]
    celery = str(Path(sys.executable).parent / "celery")
    flags = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [celery, "-A", "kperf", "worker", *flags, "-Q", queues, "-c", str(concurrency), "-l", "INFO", *extra],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for(check: Any, what: str, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what}; worker log:\n{log.read_text(errors='replace')[-4000:]}")


@pytest.mark.django_db(transaction=True)
def test_work_sent_while_the_broker_is_down_is_stored_answered_and_redriven(
    own_redis: OwnRedis, alice_api: Api, small_tree: Path, qemu_class: Any, settings: Any, tmp_path: Path
) -> None:
    settings.KPERF_MIRROR_ROOT = tmp_path / "home" / "mirrors"
    own_redis.stop()
    resp = alice_api.post("/submissions", {"tree": str(small_tree), "branch": "nope", "base": "master"})
    # Stored, so answered as stored: the message is the sweeper's to re-send.
    assert resp.status_code == 201, resp.content
    sub = Submission.objects.get(pk=resp.json()["id"])
    assert sub.status == Submission.Status.QUEUED

    own_redis.start()
    log = tmp_path / "worker.log"
    worker = start_worker(own_redis.url, tmp_path, log)
    try:
        wait_for(lambda: b"ready." in log.read_bytes(), "the worker did not start", log, timeout=60)
        settings.KPERF_REDRIVE_AFTER_SECONDS = 0
        time.sleep(0.01)
        done = sweeper.redrive()
        assert done.get("submissions re-prepared") == 1, done
        wait_for(lambda: Submission.objects.get(pk=sub.pk).is_final, "the re-driven submission never finished", log)
        sub.refresh_from_db()
        assert sub.status == Submission.Status.FAILED and "'nope' is not a branch" in sub.error
    finally:
        worker.terminate()
        worker.wait(timeout=30)


@pytest.mark.django_db(transaction=True)
def test_a_result_upload_while_the_broker_is_down_is_recorded_and_its_submission_moves_on(
    own_redis: OwnRedis, alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, settings: Any
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    _, api = runner_api
    jobs = []
    while (resp := api.post("/runner/claim").json())["job"] is not None:
        jobs.append(resp["job"])
    own_redis.stop()
    for job in jobs:
        resp = api.post(f"/runner/jobs/{job['id']}/results", results_body(job))
        # Stored: a 500 here made the runner retry into a 409 `duplicate`.
        assert resp.status_code == 200, resp.content
    sub.refresh_from_db()
    assert sub.status == Submission.Status.TESTING  # the advance message was lost with the broker
    own_redis.start()
    settings.KPERF_REDRIVE_AFTER_SECONDS = 0
    time.sleep(0.01)
    done = sweeper.redrive()
    sub.refresh_from_db()
    assert sub.status == Submission.Status.ANALYSING, done
    # ... and the analysis it needs was queued on the broker that is back.
    assert redis.Redis.from_url(own_redis.url).llen("analysis") == 1


# A task that stays in flight as long as the test wants, saying when it starts and ends.
HOLD_TASK = """
import time
from pathlib import Path

from celery import shared_task


@shared_task(name="kperf_test.hold")
def hold(marker: str, seconds: float) -> None:
    Path(marker).write_text("started")
    time.sleep(seconds)
    Path(marker).write_text("finished")
"""


@pytest.mark.django_db(transaction=True)
def test_a_worker_survives_three_broker_restarts_with_a_task_in_flight_and_takes_work_after_them(
    own_redis: OwnRedis, alice_api: Api, small_tree: Path, qemu_class: Any, settings: Any, tmp_path: Path
) -> None:
    """kperf-up's worker for `default` and `analysis`: two processes, one busy.

    Its message is unacknowledged (acks_late) while the worker waits on Redis
    for the other process's next one: with kombu's own transport the
    reconnection then died with "'NoneType' object has no attribute
    'hostname'" (kperf.celery.RedisChannel says why) on every restart."""
    settings.KPERF_MIRROR_ROOT = tmp_path / "home" / "mirrors"
    probe = tmp_path / "kperf_hold_task.py"
    probe.write_text(HOLD_TASK)
    log = tmp_path / "worker.log"
    worker = start_worker(own_redis.url, tmp_path, log, queues="default,analysis", concurrency=2, include=probe)
    pid = worker.pid
    try:
        wait_for(lambda: b"ready." in log.read_bytes(), "the worker did not start", log, timeout=60)
        for restart in range(3):
            marker = tmp_path / f"hold-{restart}"
            point_app_at(own_redis.url)  # this process's connections went with the last server
            celery_app.send_task("kperf_test.hold", args=[str(marker), 4.0], queue="default")
            wait_for(marker.exists, f"the task before restart {restart} did not start", log)
            connected = log.read_bytes().count(b"Connected to")
            own_redis.stop()
            time.sleep(1)
            own_redis.start()
            wait_for(
                lambda m=marker, c=connected: (
                    m.read_text() == "finished" and log.read_bytes().count(b"Connected to") > c
                ),
                f"the worker did not come back after restart {restart}",
                log,
                timeout=60,
            )
            assert worker.poll() is None, log.read_text(errors="replace")[-4000:]
        point_app_at(own_redis.url)
        resp = alice_api.post("/submissions", {"tree": str(small_tree), "branch": "nope", "base": "master"})
        assert resp.status_code == 201
        sub_id = resp.json()["id"]
        wait_for(lambda: Submission.objects.get(pk=sub_id).is_final, "the worker took no work after the restarts", log)
        assert worker.poll() is None and worker.pid == pid
        assert b"Unrecoverable error" not in log.read_bytes()
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def _building(sub: Submission, attempt: int, expired: bool) -> KernelBuild:
    build = KernelBuild.objects.create(
        tree=sub.tree,
        sha="e" * 40,
        arch="x86_64",
        config_digest="d" * 64,
        status=KernelBuild.Status.BUILDING,
        attempt=attempt,
        worker="builder:1234",
        lease_expires=timezone.now() + timedelta(seconds=-5 if expired else 120),
    )
    SubmissionBuild.objects.create(submission=sub, build=build, side="head")
    return build


@pytest.fixture
def building_sub(alice: Any, qemu_class: Any, tmp_path: Path) -> Submission:
    tree = Tree.objects.create(url=str(tmp_path / "tree"))
    return Submission.objects.create(
        owner=alice, tree=tree, head_ref="f", base_ref="m", head_sha="e" * 40, base_sha="e" * 40,
        arches=["x86_64"], status=Submission.Status.BUILDING,
    )  # fmt: skip


@pytest.mark.django_db
def test_a_build_whose_worker_died_is_taken_over_then_failed_as_infra_after_the_last_attempt(
    building_sub: Submission, settings: Any
) -> None:
    settings.KPERF_BUILD_MAX_ATTEMPTS = 2
    build = _building(building_sub, attempt=1, expired=True)
    done = sweeper.redrive()
    build.refresh_from_db()
    assert done.get("builds taken back from dead workers") == 1
    assert build.status == KernelBuild.Status.QUEUED and "builder:1234 stopped reporting" in build.error

    # The next worker takes it (attempt 2); the first one, had it come back,
    # could not store its result over the newer attempt's.
    claimed = queue._claim(build.pk)
    assert claimed is not None and claimed.attempt == 2
    queue.finish(build.pk, 1, ok=True, error="", log_tail="", artifacts={})
    build.refresh_from_db()
    assert build.status == KernelBuild.Status.BUILDING and build.attempt == 2

    # Its worker dies too, on the last attempt: an infra failure, and the
    # submission says it was the machine, not the kernel.
    KernelBuild.objects.filter(pk=build.pk).update(lease_expires=timezone.now() - timedelta(seconds=1))
    sweeper.redrive()
    build.refresh_from_db()
    assert build.status == KernelBuild.Status.FAILED and build.failure_kind == "infra"
    owners.advance(pipeline.SUBMISSION, building_sub.pk)
    building_sub.refresh_from_db()
    assert building_sub.status == Submission.Status.FAILED
    assert "not the kernel's fault" in building_sub.error

    # Not cached: the next owner that needs it queues it again.
    again = queue.need_build(building_sub.tree, build.sha, build.arch, build.config_digest)
    assert again.pk == build.pk and again.status == KernelBuild.Status.QUEUED and again.attempt == 0


@pytest.mark.django_db
def test_a_live_build_is_left_alone(building_sub: Submission) -> None:
    build = _building(building_sub, attempt=1, expired=False)
    assert sweeper.redrive().get("builds taken back from dead workers") is None
    build.refresh_from_db()
    assert build.status == KernelBuild.Status.BUILDING and build.attempt == 1


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_extends_a_running_builds_lease(building_sub: Submission, settings: Any) -> None:
    settings.KPERF_BUILD_LEASE_SECONDS = 4
    build = _building(building_sub, attempt=1, expired=False)
    KernelBuild.objects.filter(pk=build.pk).update(lease_expires=timezone.now() + timedelta(seconds=2))
    before = KernelBuild.objects.get(pk=build.pk).lease_expires
    beat = queue._Heartbeat(build.pk, 1)
    beat.start()
    time.sleep(2.5)
    beat.stopped.set()
    beat.join(timeout=5)
    after = KernelBuild.objects.get(pk=build.pk).lease_expires
    assert before is not None and after is not None and after > before and not beat.lost


@pytest.mark.django_db
def test_an_analysis_that_raises_fails_its_submission_with_a_message(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, caplog: Any
) -> None:
    """A grid this version no longer knows (renamed since the jobs ran): the analysis raises."""
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    _, api = runner_api
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job)).status_code == 200
    Job.objects.filter(submission=sub).update(grid="retired-grid")
    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.ANALYSING, grids=["retired-grid"])
    owners.analyse(pipeline.SUBMISSION, sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.FAILED
    assert sub.error.startswith("the analysis failed (") and "tell an admin" in sub.error
    assert any(r.name == "kperf.core.lifecycle.owners" and r.exc_info for r in caplog.records)


@pytest.mark.django_db
def test_an_analysis_nobody_runs_is_sent_again_once_it_has_not_moved_for_its_deadline(
    own_redis: OwnRedis, alice: Any, qemu_class: Any, tmp_path: Path, settings: Any
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    settings.KPERF_ANALYSIS_LOST_AFTER_SECONDS = 30
    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.ANALYSING)
    assert "submission analyses re-sent" not in sweeper.redrive()  # its message may still be on its way
    Submission.objects.filter(pk=sub.pk).update(updated=timezone.now() - timedelta(seconds=31))
    assert sweeper.redrive().get("submission analyses re-sent") == 1
    r = redis.Redis.from_url(own_redis.url)
    assert r.llen("analysis") == 1, r.keys()
    assert "submission analyses re-sent" not in sweeper.redrive()  # once per deadline


def default_resend_bound(tmp: Path) -> float:
    """sweeper.lost_analysis_resent_within() with every KPERF_ setting at its default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KPERF_")}
    env.update(KPERF_DEBUG="1", KPERF_HOME=str(tmp / "defaults"), DJANGO_SETTINGS_MODULE="kperf.settings")
    code = (
        "import django; django.setup(); "
        "from kperf.core.tasks import sweeper; print(sweeper.lost_analysis_resent_within())"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


@pytest.mark.django_db(transaction=True)
def test_an_analysis_whose_worker_is_killed_is_sent_again_and_done_within_two_minutes(
    own_redis: OwnRedis, alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, settings: Any
) -> None:
    """The worker dies by SIGKILL mid-analysis. With the defaults the sweeper
    sends the analysis again within `default_resend_bound`; here a shorter
    deadline (1 s) and one sweep called by hand show it, then a new worker
    finishes the analysis. A slow analysis is not sent again."""
    bound = default_resend_bound(tmp_path)
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    _, api = runner_api
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job)).status_code == 200
    owners.advance(pipeline.SUBMISSION, sub.pk)
    assert Submission.objects.get(pk=sub.pk).status == Submission.Status.ANALYSING
    # Only the analysis in flight (the uploads' messages were done in-process just now).
    redis.Redis.from_url(own_redis.url).flushdb()
    assert dispatch.send(Task.ANALYSE_SUBMISSION, sub.pk)
    settings.KPERF_ANALYSIS_LOST_AFTER_SECONDS = 1
    log = tmp_path / "worker-killed.log"
    # The test holds the submission's row: the worker's analysis, its lock
    # taken, waits there, mid-analysis, as long as the test wants.
    holder = psycopg.connect(database_url_for_tests())
    try:
        holder.execute(f"SELECT id FROM {Submission._meta.db_table} WHERE id = %s FOR UPDATE", [sub.pk])
        worker = start_worker(own_redis.url, tmp_path, log)
        try:
            wait_for(lambda: owners.analysis_running(pipeline.SUBMISSION, sub.pk), "the analysis did not start", log)
            time.sleep(1.5)
            # Slow, not lost: the sweeper leaves it alone, and a second
            # delivery returns at once rather than wait to analyse it again
            # (lock_timeout: whatever went for the row would fail, not hang).
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = '5s'")
                try:
                    assert "submission analyses re-sent" not in sweeper.redrive()
                    owners.analyse(pipeline.SUBMISSION, sub.pk)
                finally:
                    cursor.execute("RESET lock_timeout")
            assert Submission.objects.get(pk=sub.pk).status == Submission.Status.ANALYSING
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
    finally:
        # The dead worker's session gets the row, cannot answer, and ends.
        holder.rollback()
        holder.close()
    wait_for(lambda: not owners.analysis_running(pipeline.SUBMISSION, sub.pk), "the dead worker's lock stayed", log)
    done = sweeper.redrive()
    assert done.get("submission analyses re-sent") == 1, done
    resent = time.monotonic()
    log = tmp_path / "worker-new.log"
    worker = start_worker(own_redis.url, tmp_path, log)
    try:
        wait_for(lambda: Submission.objects.get(pk=sub.pk).is_final, "the analysis sent again did not finish", log)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    took = time.monotonic() - resent  # a worker starting, then the analysis
    assert Submission.objects.get(pk=sub.pk).status == Submission.Status.DONE
    assert bound + took < 120, f"sent again within {bound} s of the kill, then {took:.0f} s to finish"


@pytest.mark.django_db(transaction=True)
def test_a_request_while_the_database_is_away_gets_503_with_retry_after(runner_api: Any) -> None:
    """Not a 500 'internal error' incident: the client is told to try again."""
    from django.db import connection

    _, api = runner_api
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))  # nothing listens there
    try:
        resp = api.post("/runner/claim")
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert resp.status_code == 503, resp.content
    assert resp.json()["code"] == "unavailable" and "nothing was stored" in resp.json()["detail"]
    assert int(resp["Retry-After"]) > 0
