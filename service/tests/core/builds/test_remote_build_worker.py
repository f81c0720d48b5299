"""A build machine on another host, holding nothing but its own token (docs/builders.md).

`kperf-builder` runs in a network namespace of its own whose one way out
is a relay to the web server: PostgreSQL, Redis, the object store and the
tree's host are not reachable from it, and its environment holds no
secret of the service. It claims the build over HTTP, fetches the commit
from the service's mirror with git, builds the fixture tree's base kernel
for real in the sandbox, and sends the files back; the service stores them
in the object store. A runner then downloads the kernel through the web
server, with the runner's own client, and checks its sha256.
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
from kperf.core.builds import gitops, queue
from kperf.core.models import BuildMachine, Job, KernelBuild, Tree
from kperf_kbuild.driver import config_digest
from kperf_runner.client import Client as RunnerClient
from kperf_testing.netns import Namespace, NamespaceUnavailable, TcpRelay, network_namespace
from kperf_testing.objectstore import ObjectStore, object_store

from tests.conftest import git


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


@pytest.mark.kernel
@pytest.mark.django_db(transaction=True)
def test_a_build_machine_with_only_its_token_builds_into_the_object_store_and_a_runner_fetches_it(
    namespace: Namespace,
    s3: ObjectStore,
    kernel_tree: Path,
    kperf_cache: Path,
    x86_64_kernel: Any,  # in the test cache first: this build hits its ccache (conftest.py: made first)
    qemu_class: Any,
    runner_api: Any,
    live_server: Any,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = s3.new_bucket()
    # The web side (this process): artifacts in the bucket, the tree in its mirror.
    for name, value in s3.env(bucket).items():
        monkeypatch.setenv(name, value)
    settings.KPERF_MIRROR_ROOT = tmp_path / "web-mirrors"
    settings.KPERF_BUILD_ROOT = tmp_path / "web-builds"
    settings.STORAGES = storage_settings.storages(tmp_path / "web-artifacts")
    settings.KPERF_BUILDERS = "remote"
    settings.KPERF_BUILDER_POLL_SECONDS = 1
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, namespace.host_ip]
    tree = Tree.objects.create(url=f"file://{kernel_tree}")
    gitops.update_mirror(tree.url, tree.mirror_path, timeout=1800)
    sha = git(kernel_tree, "rev-parse", "base")

    _, token = BuildMachine.register("builder-remote")
    web = TcpRelay(namespace.host_ip, ("127.0.0.1", int(live_server.url.rsplit(":", 1)[1])))
    work = kperf_cache / "remote-builder"  # its own disk, kept between runs like its ccache
    # What a build machine's environment holds: the token, and nothing of the service's.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8", "KPERF_BUILDER_TOKEN": token}
    # The test run's own priority for its builds (kperf_testing.plugin): this
    # one is on the kernel tests' critical path.
    env["KPERF_BUILD_NICE"] = os.environ.get("KPERF_BUILD_NICE", "0")
    argv = [
        str(Path(sys.executable).parent / "kperf-builder"), "run", "--server", f"http://{namespace.host_ip}:{web.port}",
        "--work-dir", str(work), "--ccache-dir", str(kperf_cache / "ccache"), "--arch", "x86_64",
    ]  # fmt: skip
    log = tmp_path / "builder.log"
    with open(log, "wb") as fh:
        machine = subprocess.Popen(namespace.argv(*argv), env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        # From inside the namespace, the database and the broker are out of reach.
        for port in (int(settings.DATABASES["default"].get("PORT") or 5432), 6379):
            probe = subprocess.run(
                namespace.argv(sys.executable, "-c", PROBE, namespace.host_ip, str(port)),
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert probe.stdout.strip() == "unreachable", (port, probe.stdout, probe.stderr)
        with transaction.atomic():
            build = queue.need_build(tree, sha, "x86_64", config_digest("x86_64"))
        deadline = time.monotonic() + 1500
        while True:
            build.refresh_from_db()
            if build.status in (KernelBuild.Status.DONE, KernelBuild.Status.FAILED):
                break
            assert machine.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(2)
        assert build.status == KernelBuild.Status.DONE, f"{build.error}\n{log.read_text()[-4000:]}"
        assert build.worker == "builder:builder-remote" and build.attempt == 1
    finally:
        machine.terminate()
        machine.wait(timeout=60)
        web.close()

    # It fetched the commit into its own mirror from the service's.
    assert gitops.has_commit(work / "mirrors" / f"tree-{tree.pk}.git", sha)
    # Its files are in the bucket, checked; nothing is left staged on the web side or on the machine.
    kernel = build.artifacts["kernel"]
    assert kernel["key"] == f"builds/{build.pk}/{build.attempt}/kernel"
    body = s3.client().get_object(Bucket=bucket, Key=kernel["key"])["Body"].read()
    assert hashlib.sha256(body).hexdigest() == kernel["sha256"] and len(body) == kernel["size"]
    assert not (tmp_path / "web-artifacts").exists()
    assert not (tmp_path / "web-builds" / "uploads" / str(build.pk)).exists()
    assert not (work / "outputs" / str(build.pk)).exists()

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
    assert log_art.stat().st_size > 0


# Connects to host:port, printing whether anything answered (run inside the namespace).
PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("reachable")
except OSError:
    print("unreachable")
"""
