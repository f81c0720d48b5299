"""Nothing stuck, nothing lost: a broker that goes away, a worker that dies, an analysis that raises.

The broker here is a Redis server the test starts and stops itself, the
worker a real Celery worker process, the database the real PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.utils import timezone

from kperf.celery import app as celery_app
from kperf.core import building, owners, sweeper
from kperf.core.models import KernelBuild, Submission, SubmissionBuild, Tree
from kperf.testing.plugin import database_url_for_tests
from kperf.testing.stack import free_port

from .conftest import Api
from .lab_fixtures import results_body, submission_ready_for_testing

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
    celery_app.conf.broker_url = url
    celery_app.close()
    # close() keeps the producer pool when no connection pool was made yet.
    celery_app.amqp._producer_pool = None


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


def start_worker(broker: str, tmp: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ, DATABASE_URL=database_url_for_tests(), CELERY_BROKER_URL=broker, KPERF_HOME=str(tmp / "home")
    )
    celery = str(Path(sys.executable).parent / "celery")
    with open(log, "ab") as fh:
        return subprocess.Popen(
            # The flags kperf-up and docker-compose give their workers.
            [
                celery,
                "-A",
                "kperf",
                "worker",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-Q",
                "default,builds,analysis",
                "-c",
                "1",
                "-l",
                "INFO",
            ],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
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


@pytest.mark.django_db(transaction=True)
def test_a_worker_survives_a_broker_restart_and_takes_work_after_it(
    own_redis: OwnRedis, alice_api: Api, small_tree: Path, qemu_class: Any, settings: Any, tmp_path: Path
) -> None:
    settings.KPERF_MIRROR_ROOT = tmp_path / "home" / "mirrors"
    log = tmp_path / "worker.log"
    worker = start_worker(own_redis.url, tmp_path, log)
    try:
        wait_for(lambda: b"ready." in log.read_bytes(), "the worker did not start", log, timeout=60)
        own_redis.stop()
        time.sleep(8)
        own_redis.start()
        time.sleep(3)
        assert worker.poll() is None, log.read_text(errors="replace")[-4000:]
        resp = alice_api.post("/submissions", {"tree": str(small_tree), "branch": "nope", "base": "master"})
        assert resp.status_code == 201
        sub_id = resp.json()["id"]
        wait_for(lambda: Submission.objects.get(pk=sub_id).is_final, "the worker took no work after the restart", log)
        assert worker.poll() is None
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
    claimed = building._claim(build.pk)
    assert claimed is not None and claimed.attempt == 2
    building._finish(build.pk, 1, ok=True, error="", log_tail="", artifacts={})
    build.refresh_from_db()
    assert build.status == KernelBuild.Status.BUILDING and build.attempt == 2

    # Its worker dies too, on the last attempt: an infra failure, and the
    # submission says it was the machine, not the kernel.
    KernelBuild.objects.filter(pk=build.pk).update(lease_expires=timezone.now() - timedelta(seconds=1))
    sweeper.redrive()
    build.refresh_from_db()
    assert build.status == KernelBuild.Status.FAILED and build.failure_kind == "infra"
    owners.advance(owners.SUBMISSION, building_sub.pk)
    building_sub.refresh_from_db()
    assert building_sub.status == Submission.Status.FAILED
    assert "not the kernel's fault" in building_sub.error

    # Not cached: the next owner that needs it queues it again.
    again = building.need_build(building_sub.tree, build.sha, build.arch, build.config_digest)
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
    beat = building._Heartbeat(build.pk, 1)
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
    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.ANALYSING, grid="retired-grid")
    owners.analyse(owners.SUBMISSION, sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.FAILED
    assert sub.error.startswith("the analysis failed (") and "tell an admin" in sub.error
    assert any(r.name == "kperf.owners" and r.exc_info for r in caplog.records)


@pytest.mark.django_db
def test_a_lost_analysis_is_sent_again_after_its_time_limit(
    own_redis: OwnRedis, alice: Any, qemu_class: Any, tmp_path: Path, settings: Any
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    settings.KPERF_ANALYSIS_TIME_LIMIT = 10
    settings.KPERF_REDRIVE_AFTER_SECONDS = 1
    Submission.objects.filter(pk=sub.pk).update(status=Submission.Status.ANALYSING)
    assert "submission analyses re-sent" not in sweeper.redrive()  # still within its time limit
    Submission.objects.filter(pk=sub.pk).update(updated=timezone.now() - timedelta(seconds=120))
    assert sweeper.redrive().get("submission analyses re-sent") == 1
    r = redis.Redis.from_url(own_redis.url)
    assert r.llen("analysis") == 1, r.keys()


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
