"""Build machines that pull builds over HTTP with a token of their own (docs/builders.md).

The protocol against the real service and PostgreSQL: claims, the lease
and attempt fence, chunked uploads checked against what the machine
declared, failures retried after a wait, and git fetches from the
service's mirror through a live server with the builder's own code.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from django.utils import timezone

from kperf.core.builds import artifacts, gitops, machines, queue
from kperf.core.models import BuildMachine, KernelBuild, Runner, Tree
from kperf.core.tasks import sweeper
from kperf_kbuild import builder
from kperf_kbuild.driver import config_digest
from kperf_kbuild.host import BuildInfraError

from tests.conftest import Api, git

pytestmark = pytest.mark.django_db


@pytest.fixture
def pulled(settings_dirs: Any) -> Any:
    settings_dirs.KPERF_BUILDERS = "remote"
    settings_dirs.KPERF_BUILD_RETRY_SECONDS = 30.0
    return settings_dirs


def machine(name: str) -> tuple[BuildMachine, Api]:
    row, token = BuildMachine.register(name)
    return row, Api(token)


def queued_build(sha: str = "a" * 40, arch: str = "x86_64", tree: Tree | None = None) -> KernelBuild:
    tree = tree or Tree.objects.get_or_create(url="https://git.example.org/linux.git")[0]
    with transaction.atomic():
        return queue.need_build(tree, sha, arch, config_digest(arch))


def put(api: Api, build: KernelBuild, name: str, data: bytes, offset: int) -> Any:
    attempt = KernelBuild.objects.get(pk=build.pk).attempt
    return api.client.put(
        f"/api/v1/builder/builds/{build.pk}/artifacts/{name}?attempt={attempt}&offset={offset}",
        data=data,
        content_type="application/octet-stream",
        HTTP_AUTHORIZATION=f"Bearer {api.token}",
    )


def mirrored(repo: Path) -> Tree:
    """A tree whose mirror the service already holds, as it does once a submission was prepared."""
    tree = Tree.objects.create(url=f"file://{repo}")
    gitops.update_mirror(tree.url, tree.mirror_path, timeout=60)
    return tree


def claimed(api: Api, arches: list[str] | None = None) -> dict[str, Any] | None:
    answer = api.post("/builder/claim", {"arches": arches or []})
    assert answer.status_code == 200, answer.content
    build: dict[str, Any] | None = answer.json()["build"]
    return build


def test_only_a_build_machines_token_is_accepted(pulled: Any, qemu_class: Any) -> None:
    _, runner_token = Runner.register("qemu-1", qemu_class)
    _, api = machine("builder-1")
    assert api.post("/builder/claim", token="kpbld_not-a-token").status_code == 401
    assert api.post("/builder/claim", token=runner_token).status_code == 401
    assert claimed(api) is None
    call_command("add_builder", "builder-1", "--disable")
    answer = api.post("/builder/claim")
    assert answer.status_code == 401 and answer.json()["code"] == "bad-token"


def test_add_builder_prints_a_token_that_claims(pulled: Any, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("add_builder", "builder-9")
    token = capsys.readouterr().out.strip()
    assert token.startswith(BuildMachine.TOKEN_PREFIX)
    assert Api(token).post("/builder/claim").status_code == 200


def test_a_queued_build_is_claimed_once_with_what_the_machine_needs(pulled: Any) -> None:
    build = queued_build()
    _, one = machine("builder-1")
    _, two = machine("builder-2")
    assert claimed(one, ["arm64"]) is None, "an arm64-only machine takes no x86_64 build"
    claim = claimed(one, ["x86_64"])
    assert claim is not None
    assert claim["id"] == build.pk and claim["attempt"] == 1 and claim["sha"] == "a" * 40
    assert claim["config_digest"] == config_digest("x86_64") and claim["scope"] == "lab"
    assert claim["git_path"] == f"/builder-git/{build.tree_id}"
    assert 0 < claim["chunk_bytes"] <= machines.CHUNK_BYTES_MAX
    assert claimed(two) is None
    build.refresh_from_db()
    assert build.status == "building" and build.worker == "builder:builder-1"
    answer = one.post("/builder/claim", {"arches": ["sparc"]})
    assert answer.status_code == 422 and "sparc" in answer.json()["detail"]


def test_progress_extends_the_lease_and_only_the_holder_may_report(pulled: Any) -> None:
    build = queued_build()
    _, one = machine("builder-1")
    _, two = machine("builder-2")
    claimed(one)
    KernelBuild.objects.filter(pk=build.pk).update(lease_expires=timezone.now() + timedelta(seconds=5))
    answer = one.post(f"/builder/builds/{build.pk}/progress", {"attempt": 1, "phase": "compile", "message": "CC mm/"})
    assert answer.status_code == 200
    build.refresh_from_db()
    assert build.phase == "compile" and build.progress == "CC mm/"
    assert build.lease_expires is not None and build.lease_expires > timezone.now() + timedelta(seconds=60)
    for api, attempt in ((two, 1), (one, 2)):
        answer = api.post(f"/builder/builds/{build.pk}/progress", {"attempt": attempt})
        assert answer.status_code == 409 and answer.json()["code"] == "not-held", answer.content


def upload(api: Api, build: KernelBuild, files: dict[str, bytes]) -> dict[str, dict[str, Any]]:
    for name, data in files.items():
        for offset in range(0, max(len(data), 1), 4):
            answer = put(api, build, name, data[offset : offset + 4], offset)
            assert answer.status_code == 200, answer.content
            assert answer.json()["size"] == min(offset + 4, len(data))
    return {name: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for name, d in files.items()}


def finish_body(declared: dict[str, Any], ok: bool = True) -> dict[str, Any]:
    return {"attempt": 1, "ok": ok, "error": "" if ok else "mm/x.c:1: error", "log_tail": "tail", "artifacts": declared}


def test_files_arrive_in_chunks_and_are_stored_as_declared(pulled: Any) -> None:
    build = queued_build()
    _, api = machine("builder-1")
    claimed(api)
    files = {"kernel": b"bzImage bytes, more than one chunk", "config": b"CONFIG_MMU=y\n", "build-log": b""}
    declared = upload(api, build, files)
    # A chunk that would leave a gap, a name that is no output's, a retried chunk (harmless).
    assert put(api, build, "kernel", b"x", 999).json()["code"] == "offset"
    assert put(api, build, ".hidden", b"x", 0).status_code == 422
    assert put(api, build, "kernel", files["kernel"][:4], 0).status_code == 200
    # The kernel was cut short by that retry: finish refuses it and says what to do.
    answer = api.post(f"/builder/builds/{build.pk}/finish", finish_body(declared))
    assert answer.status_code == 422 and "upload it again from offset 0" in answer.json()["detail"]
    build.refresh_from_db()
    assert build.status == "building"
    upload(api, build, {"kernel": files["kernel"]})
    # A module that does not compile against this release: the kernel built, without it.
    missing = "pagealloc.ko not built: pagealloc.c:40:9: error: implicit declaration of function 'alloc_pages_node'"
    answer = api.post(f"/builder/builds/{build.pk}/finish", dict(finish_body(declared), compiled=3, warnings=[missing]))
    assert answer.status_code == 200 and answer.json()["status"] == "done", answer.content
    build.refresh_from_db()
    assert build.status == "done" and build.compiled_files == 3 and build.log_tail == "tail"
    assert build.warnings == [missing]
    for name, data in files.items():
        meta = build.artifacts[name]
        assert meta["key"] == f"builds/{build.pk}/1/{name}"
        assert artifacts.read_checked(meta, name) == data
    assert not machines.staging_dir(build.pk, 1).exists()
    # Done is final: nothing more is taken for it.
    assert put(api, build, "kernel", b"late", 0).json()["code"] == "not-held"


def test_a_kernel_that_does_not_build_is_the_kernels_failure(pulled: Any) -> None:
    build = queued_build()
    _, api = machine("builder-1")
    claimed(api)
    declared = upload(api, build, {"build-log": b"mm/x.c:1: error: expected ';'\n"})
    answer = api.post(f"/builder/builds/{build.pk}/finish", finish_body(declared, ok=False))
    assert answer.json()["status"] == "failed"
    build.refresh_from_db()
    assert build.failure_kind == "kernel" and "mm/x.c" in build.error and "build-log" in build.artifacts


def test_a_machine_fault_waits_then_is_tried_again_and_after_the_last_attempt_is_infra(pulled: Any) -> None:
    pulled.KPERF_BUILD_MAX_ATTEMPTS = 2
    build = queued_build()
    _, api = machine("builder-1")
    claimed(api)
    answer = api.post(f"/builder/builds/{build.pk}/fail", {"attempt": 1, "reason": "bwrap: No permissions"})
    assert answer.json() == {"status": "queued", "attempt": 1}
    build.refresh_from_db()
    assert "bwrap: No permissions" in build.error and "builder-1" in build.error
    assert build.not_before is not None and build.not_before > timezone.now() + timedelta(seconds=20)
    assert claimed(api) is None, "claimed before its retry wait was over"
    KernelBuild.objects.filter(pk=build.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    claim = claimed(api)
    assert claim is not None and claim["attempt"] == 2
    answer = api.post(f"/builder/builds/{build.pk}/fail", {"attempt": 2, "reason": "disk gone"})
    assert answer.json() == {"status": "failed", "attempt": 2}
    build.refresh_from_db()
    assert build.failure_kind == "infra"
    # The next submission that needs the kernel queues it again: a machine fault never stands for it.
    again = queued_build()
    assert again.pk == build.pk and again.status == "queued"


def test_a_machine_that_goes_quiet_loses_the_build_to_the_next(pulled: Any) -> None:
    build = queued_build()
    _, one = machine("builder-1")
    _, two = machine("builder-2")
    claimed(one)
    declared = upload(one, build, {"kernel": b"old"})
    KernelBuild.objects.filter(pk=build.pk).update(lease_expires=timezone.now() - timedelta(seconds=1))
    done = sweeper.redrive()
    assert done["builds taken back from dead workers"] == 1
    assert done["uploads of ended builds removed"] == 1 and not machines.staging_dir(build.pk, 1).exists()
    KernelBuild.objects.filter(pk=build.pk).update(not_before=None)
    claim = claimed(two)
    assert claim is not None and claim["attempt"] == 2
    # The first machine comes back and reports: refused, whatever it sends.
    answer = one.post(f"/builder/builds/{build.pk}/finish", finish_body(declared))
    assert answer.status_code == 409 and answer.json()["code"] == "not-held"


def test_in_pull_mode_nothing_is_sent_to_the_builds_queue(
    pulled: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[tuple[Any, ...]] = []

    def send(*args: Any, **kwargs: Any) -> bool:
        sent.append(args)
        return True

    monkeypatch.setattr("kperf.core.lifecycle.dispatch.send", send)
    with django_capture_on_commit_callbacks(execute=True):
        build = queued_build()
    KernelBuild.objects.filter(pk=build.pk).update(updated=timezone.now() - timedelta(days=1))
    sweeper.redrive()
    assert [a for a in sent if a[0] == "kperf.build_kernel"] == []
    # With Celery build workers (the default), the same row is a message on the builds queue.
    pulled.KPERF_BUILDERS = "local"
    with django_capture_on_commit_callbacks(execute=True):
        queued_build(sha="b" * 40)
    assert [a[0] for a in sent] == ["kperf.build_kernel"]


@pytest.mark.django_db(transaction=True)
def test_a_build_machine_fetches_only_a_tree_it_builds_from_the_services_mirror(
    pulled: Any, small_tree: Path, live_server: Any, tmp_path: Path
) -> None:
    tree = mirrored(small_tree)
    # A commit on no branch of the mirror (as an applied patch series is), fetched by its sha.
    git(small_tree, "checkout", "-q", "--detach", "master")
    (small_tree / "README").write_text("series\n")
    git(small_tree, "commit", "-q", "-am", "series")
    dangling = git(small_tree, "rev-parse", "HEAD")
    gitops.run_git(["-C", str(tree.mirror_path), "fetch", "-q", str(small_tree), f"{dangling}:refs/kperf/series/1"])
    gitops.run_git(["-C", str(tree.mirror_path), "update-ref", "-d", "refs/kperf/series/1"])
    build = queued_build(sha=dangling, tree=tree)
    _, api = machine("builder-1")
    _, idle = machine("builder-2")
    claim = claimed(api)
    assert claim is not None
    config = builder.Config(server=live_server.url, token=api.token or "", name="b1", work_dir=tmp_path / "b1")
    mirror = builder.fetch_commit(config, claim)
    assert builder.git(["-C", str(mirror), "rev-parse", f"{dangling}^{{commit}}"]).strip() == dangling
    # Again: nothing to fetch, the commit is there.
    assert builder.fetch_commit(config, claim) == mirror

    # Another machine's token (it holds no build of the tree), no token, and a push are all refused.
    other = builder.Config(server=live_server.url, token=idle.token or "", name="b2", work_dir=tmp_path / "b2")
    with pytest.raises(BuildInfraError, match="holds no build of tree"):
        builder.fetch_commit(other, claim)
    url = f"{live_server.url}/builder-git/{tree.pk}"
    nobody = subprocess.run(["git", "ls-remote", url], capture_output=True, text=True, env={"GIT_TERMINAL_PROMPT": "0"})
    assert nobody.returncode != 0
    header = f"http.extraHeader=Authorization: Bearer {api.token}"
    push = subprocess.run(
        ["git", "-C", str(mirror), "-c", header, "push", url, f"{dangling}:refs/heads/evil"],
        capture_output=True, text=True, env={"GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert push.returncode != 0 and "may only fetch" in push.stderr
    assert gitops.run_git(["-C", str(tree.mirror_path), "for-each-ref", "refs/heads/evil"]) == ""
    build.refresh_from_db()
    assert build.status == "building"


def test_a_host_name_the_service_does_not_answer_to_is_named_in_the_error(pulled: Any) -> None:
    _, api = machine("builder-1")
    answer = api.client.post(
        "/api/v1/builder/claim", data="{}", content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api.token}", HTTP_HOST="10.9.9.9:8000",
    )  # fmt: skip
    assert answer.status_code == 400 and answer.json()["code"] == "bad-request"
    assert "'10.9.9.9:8000'" in answer.json()["detail"] and "KPERF_ALLOWED_HOSTS" in answer.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_kperf_builder_with_a_bad_token_stops_saying_so(pulled: Any, live_server: Any, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "KPERF_BUILDER_TOKEN": "kpbld_wrong"}
    argv = [builder_command(), "run", "--server", live_server.url, "--work-dir", str(tmp_path / "w"), "--once"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "401" in proc.stderr and "token was not accepted" in proc.stderr, proc.stderr
    env.pop("KPERF_BUILDER_TOKEN")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "add_builder" in proc.stderr
    # With its token it claims, finds nothing queued, and (--once) exits.
    _, api = machine("builder-1")
    proc = subprocess.run(argv, env=dict(env, KPERF_BUILDER_TOKEN=api.token or ""), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def builder_command() -> str:
    return str(Path(sys.executable).parent / "kperf-builder")


@pytest.mark.django_db(transaction=True)
def test_kperf_builder_reports_what_it_cannot_build_as_its_own_fault(
    pulled: Any, small_tree: Path, live_server: Any, tmp_path: Path
) -> None:
    tree = mirrored(small_tree)
    _, api = machine("builder-1")
    env = {"PATH": "/usr/bin:/bin", "KPERF_BUILDER_TOKEN": api.token or ""}
    argv = [builder_command(), "run", "--server", live_server.url, "--work-dir", str(tmp_path / "w"), "--once"]

    # A configuration this machine's kperf-kbuild does not make: another kperf version.
    with transaction.atomic():
        other = queue.need_build(tree, git(small_tree, "rev-parse", "master"), "x86_64", "f" * 64)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    other.refresh_from_db()
    assert other.status == "queued" and other.attempt == 1 and other.not_before is not None
    assert "install the service's kperf version here" in other.error and "builder-1" in other.error

    # A commit the service's mirror does not have.
    missing = queued_build(sha="0123456789" * 4, tree=tree)
    KernelBuild.objects.filter(pk=other.pk).update(status="failed", failure_kind="kernel")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    missing.refresh_from_db()
    assert missing.status == "queued" and missing.attempt == 1
    assert "could not be fetched from the service" in missing.error, missing.error


def test_the_lab_page_shows_each_build_machine_and_what_it_builds(pulled: Any, alice: Any) -> None:
    build = queued_build()
    _, api = machine("builder-1")
    machine("builder-2")
    api.post("/builder/claim", {"hostname": "build-host-1", "version": "1"})
    api.post(f"/builder/builds/{build.pk}/progress", {"attempt": 1, "phase": "compile", "message": "CC mm/memory.o"})
    call_command("add_builder", "builder-2", "--disable")
    page = Client()
    page.force_login(alice)
    html = page.get("/lab/").content.decode()
    one = html[html.index('id="builder-builder-1"') :].split("</tr>")[0]
    assert "build-host-1" in one and "aaaaaaaaaaaa" in one and "attempt 1: compile (CC mm/memory.o)" in one
    two = html[html.index('id="builder-builder-2"') :].split("</tr>")[0]
    assert "(disabled)" in two and "idle" in two and "never" in two
