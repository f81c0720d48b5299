"""A build worker on another host: its own network address, mirror, build and artifact directories.

The worker runs in a network namespace of its own and reaches PostgreSQL,
Redis and the object store only through relays on its side of a veth
pair, and the kernel tree only through a git daemon; it shares no kperf
directory with the web process (this test). It fetches the commit into
its own mirror, builds the fixture tree's base kernel for real, and
stores the files in the object store; a runner then downloads the kernel
through the web server, with the runner's own client, and checks its sha256.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from kperf import storage_settings
from kperf.core import building, gitops
from kperf.core.models import Job, KernelBuild, Tree
from kperf.testing.netns import Namespace, NamespaceUnavailable, TcpRelay, network_namespace
from kperf.testing.objectstore import ObjectStore, object_store
from kperf.testing.plugin import database_url_for_tests
from kperf.testing.stack import free_port
from kperf_kbuild.driver import config_digest
from kperf_runner.client import Client as RunnerClient

from .conftest import git


def test_a_machine_without_the_commit_fetches_it_into_its_own_mirror(small_tree: Path, tmp_path: Path) -> None:
    sha = git(small_tree, "rev-parse", "feature")
    mirror = tmp_path / "mirrors" / "remote.git"
    gitops.ensure_commit(f"file://{small_tree}", mirror, sha, timeout=60)
    assert gitops.has_commit(mirror, sha)
    # A commit that is on no branch: fetched by its sha.
    git(small_tree, "checkout", "-q", "--detach", "master")
    (small_tree / "README").write_text("dangling\n")
    git(small_tree, "commit", "-q", "-am", "dangling")
    dangling = git(small_tree, "rev-parse", "HEAD")
    git(small_tree, "checkout", "-q", "master")
    git(small_tree, "config", "uploadpack.allowAnySHA1InWant", "true")
    gitops.ensure_commit(f"file://{small_tree}", mirror, dangling, timeout=60)
    assert gitops.has_commit(mirror, dangling)
    with pytest.raises(gitops.GitError, match="could not be fetched by sha"):
        gitops.ensure_commit(f"file://{small_tree}", mirror, "0123456789" * 4, timeout=60)


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    try:
        with network_namespace() as ns:
            yield ns
    except NamespaceUnavailable as e:
        pytest.skip(f"a network namespace cannot be made here, so no second host: {e}")


@pytest.fixture
def s3() -> Iterator[ObjectStore]:
    with object_store() as store:
        yield store


def relay(ns: Namespace, url_port: int, relays: list[TcpRelay]) -> int:
    r = TcpRelay(ns.host_ip, ("127.0.0.1", url_port))
    relays.append(r)
    return r.port


@pytest.mark.kernel
@pytest.mark.django_db(transaction=True)
def test_a_build_worker_on_another_host_builds_into_the_object_store_and_a_runner_fetches_it(
    namespace: Namespace,
    s3: ObjectStore,
    kernel_tree: Path,
    kperf_cache: Path,
    qemu_class: Any,
    runner_api: Any,
    live_server: Any,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = s3.new_bucket()
    # The web side (this process): artifacts in the bucket, its own (empty) mirror directory.
    for name, value in s3.env(bucket).items():
        monkeypatch.setenv(name, value)
    settings.KPERF_MIRROR_ROOT = tmp_path / "web-mirrors"
    settings.STORAGES = storage_settings.storages(tmp_path / "web-artifacts")

    relays: list[TcpRelay] = []
    db = dict(settings.DATABASES["default"])
    broker = os.environ["CELERY_BROKER_URL"]  # redis://127.0.0.1:6379/N (the test's)
    assert broker.startswith("redis://127.0.0.1:6379/"), "this test relays Redis: run it with a Redis broker"
    pg_port = relay(namespace, int(db.get("PORT") or 5432), relays)
    redis_port = relay(namespace, 6379, relays)
    s3_port = relay(namespace, int(s3.endpoint.rsplit(":", 1)[1]), relays)
    git_port = free_port()
    daemon = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", f"--listen={namespace.host_ip}", f"--port={git_port}",
         f"--base-path={kernel_tree.parent}", str(kernel_tree)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    remote = tmp_path / "remote-home"
    build_root = kperf_cache / "remote-build-worker"
    env = dict(os.environ)
    env.update(s3.env(bucket, endpoint=f"http://{namespace.host_ip}:{s3_port}"))
    env.update(
        {
            "DATABASE_URL": database_url_for_tests().replace(
                f"@{db['HOST']}:{db.get('PORT') or 5432}/", f"@{namespace.host_ip}:{pg_port}/"
            ),
            "CELERY_BROKER_URL": broker.replace("127.0.0.1:6379", f"{namespace.host_ip}:{redis_port}"),
            "KPERF_HOME": str(remote),
            "KPERF_CCACHE_DIR": str(kperf_cache / "ccache"),
            # The build machine's own disk, kept between test runs like its
            # ccache: its warm build tree makes every later run's build
            # incremental (nothing the web side can see).
            "KPERF_BUILD_ROOT": str(build_root),
            # The tree is the lab's own git daemon, at a private address: the
            # operator allows git:// and lists that host and port.
            "KPERF_TREE_SCHEMES": "https,git",
            "KPERF_TREE_HOSTS": f"{namespace.host_ip}:{git_port},*",
        }
    )
    assert namespace.host_ip in env["DATABASE_URL"], env["DATABASE_URL"]
    log = tmp_path / "remote-worker.log"
    celery = str(Path(sys.executable).parent / "celery")
    argv = [celery, "-A", "kperf", "worker", "-Q", "builds", "--pool", "solo", "-n", "builds@remote", "-l", "INFO"]
    with open(log, "wb") as fh:
        worker = subprocess.Popen(namespace.argv(*argv), env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while b"ready." not in log.read_bytes():
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)

        tree = Tree.objects.create(url=f"git://{namespace.host_ip}:{git_port}/{kernel_tree.name}")
        sha = git(kernel_tree, "rev-parse", "base")
        with transaction.atomic():
            build = building.need_build(tree, sha, "x86_64", config_digest("x86_64"))
        deadline = time.monotonic() + 1500
        while True:
            build.refresh_from_db()
            if build.status in (KernelBuild.Status.DONE, KernelBuild.Status.FAILED):
                break
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(2)
        assert build.status == KernelBuild.Status.DONE, f"{build.error}\n{log.read_text()[-4000:]}"
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        daemon.terminate()
        daemon.wait(timeout=30)
        for r in relays:
            r.close()

    # The worker fetched the tree into its own mirror; the web side has none.
    assert gitops.has_commit(remote / "mirrors" / tree.mirror_path.name, sha)
    assert not tree.mirror_path.exists()
    # Its files are in the bucket, not on any disk of the web side or the worker.
    kernel = build.artifacts["kernel"]
    assert kernel["key"] == f"builds/{build.pk}/{build.attempt}/kernel"
    body = s3.client().get_object(Bucket=bucket, Key=kernel["key"])["Body"].read()
    assert hashlib.sha256(body).hexdigest() == kernel["sha256"] and len(body) == kernel["size"]
    assert not (remote / "artifacts").exists() and not (tmp_path / "web-artifacts").exists()
    assert not (build_root / "outputs" / str(build.pk)).exists()

    # A runner in the lab: claims a job on the build and downloads the kernel through the web server.
    _, api = runner_api
    Job.objects.create(
        build=build, benchmark="spawn", grid="quick", params={"iterations": 1}, boots=1, machine_class=qemu_class
    )
    client = RunnerClient(live_server.url, api.token or "", retries=1, backoff=0.1)
    job = client.claim()
    assert job is not None
    art = {a["name"]: a for a in job["artifacts"]}
    path = client.download(
        art["kernel"]["url"], tmp_path / "runner-cache", art["kernel"]["sha256"], art["kernel"]["size"]
    )
    assert path.read_bytes() == body
    log_art = client.download(art["build-log"]["url"], tmp_path / "runner-cache", art["build-log"]["sha256"])
    assert b"bzImage" in log_art.read_bytes() or log_art.stat().st_size > 0
