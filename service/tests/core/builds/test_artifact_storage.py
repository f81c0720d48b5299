"""Artifacts and archived outputs through the artifact storage: a directory, and a real S3-compatible server.

Every test runs twice: with the default FileSystemStorage under
KPERF_ARTIFACT_ROOT and with S3Storage on moto's standalone S3 server,
started on a free loopback port.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.test import Client
from django.utils import timezone

from kperf import storage_settings
from kperf.conf import ConfigError
from kperf.core.builds import archive, artifacts
from kperf.core.models import BootRecord, Job, KernelBuild, Submission, Tree
from kperf_runner.client import ArtifactError
from kperf_runner.client import Client as RunnerClient
from kperf_testing.objectstore import ObjectStore, object_store

from tests.conftest import Api
from tests.lab_fixtures import submission_ready_for_testing
from tests.mmtests_fixtures import upload_every_job


@pytest.fixture(scope="module")
def s3() -> Iterator[ObjectStore]:
    with object_store() as store:
        yield store


@pytest.fixture(params=["local", "s3"])
def storage_kind(request: Any, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The artifact storage of the test: a directory, or a fresh bucket on the S3 server."""
    root = tmp_path / "artifacts"
    settings.KPERF_ARTIFACT_ROOT = root
    if request.param == "s3":
        store: ObjectStore = request.getfixturevalue("s3")
        for name, value in store.env(store.new_bucket()).items():
            monkeypatch.setenv(name, value)
    else:
        monkeypatch.delenv("KPERF_S3_BUCKET", raising=False)
    # Assigning STORAGES makes Django drop the storages it had opened.
    settings.STORAGES = storage_settings.storages(root)
    return str(request.param)


def stored_bytes(key: str) -> bytes:
    with artifacts.storage().open(key, "rb") as fh:
        data: bytes = fh.read()
    return data


def build_with_files(tree: Tree, tmp: Path, sha: str = "c" * 40) -> KernelBuild:
    """A build whose outputs went through the storage, as building._run stores them."""
    out = tmp / f"out-{sha[:6]}"
    out.mkdir()
    files = {"kernel": out / "bzImage", "build-log": out / "build.log", "config": out / ".config"}
    files["kernel"].write_bytes(b"\x7fkernel image " + sha.encode() * 5000)
    files["build-log"].write_text(
        "  CC      mm/page_alloc.o\n  LD      vmlinux\nKernel: arch/x86/boot/bzImage is ready\n"
    )
    files["config"].write_text("CONFIG_MMU=y\n")
    stored = artifacts.store_build_outputs(1000, 1, files)
    return KernelBuild.objects.create(
        tree=tree, sha=sha, arch="x86_64", config_digest="d" * 64, status=KernelBuild.Status.DONE, artifacts=stored
    )


@pytest.mark.django_db(transaction=True)
def test_a_runner_downloads_a_stored_kernel_over_http_and_its_sha256_matches(
    storage_kind: str, alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, live_server: Any
) -> None:
    _, api = runner_api
    with transaction.atomic():  # as workflow's callers queue jobs: under locks
        sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    build = build_with_files(sub.tree, tmp_path)
    kernel = build.artifacts["kernel"]
    assert set(kernel) == {"key", "sha256", "size"} and kernel["key"] == "builds/1000/1/kernel"
    assert hashlib.sha256(stored_bytes(kernel["key"])).hexdigest() == kernel["sha256"]
    if storage_kind == "local":
        assert (tmp_path / "artifacts" / kernel["key"]).is_file()
    else:
        assert not (tmp_path / "artifacts").exists(), "an S3 setup wrote to the local artifact directory"
    Job.objects.filter(submission=sub).update(build=build)

    client = RunnerClient(live_server.url, api.token or "", retries=1, backoff=0.1)
    job = client.claim()
    assert job is not None
    art = {a["name"]: a for a in job["artifacts"]}
    assert set(art) == {"kernel", "build-log", "config"}
    path = client.download(art["kernel"]["url"], tmp_path / "cache", art["kernel"]["sha256"], art["kernel"]["size"])
    assert path.read_bytes() == (tmp_path / "out-cccccc" / "bzImage").read_bytes()

    # The runner's check is what catches a changed object: a claim whose
    # sha256 is not the stored file's is refused by the runner, not served blindly.
    with pytest.raises(ArtifactError, match="does not match the claim"):
        client.download(art["config"]["url"], tmp_path / "cache2", "0" * 64, art["config"]["size"])


@pytest.mark.django_db
def test_the_build_log_page_reads_the_stored_log_and_says_when_the_storage_cannot_give_it(
    storage_kind: str, staff: Any, tmp_path: Path
) -> None:
    build = build_with_files(Tree.objects.create(url="https://git.example.org/linux.git"), tmp_path)
    build.log_tail = "Kernel: arch/x86/boot/bzImage is ready\n"
    build.save()
    c = Client()
    c.force_login(staff)
    resp = c.get(f"/builds/{build.pk}/log")
    assert resp.status_code == 200 and b"CC      mm/page_alloc.o" in resp.content

    # Someone changed the object after it was stored: the page does not pass it off as the log.
    key = build.artifacts["build-log"]["key"]
    artifacts.storage().save(key, ContentFile(b"tampered\n"))
    resp = c.get(f"/builds/{build.pk}/log")
    assert resp.status_code == 503
    text = resp.content.decode()
    assert "sha256" in text and key in text and "bzImage is ready" in text and "tampered" not in text


@pytest.mark.django_db
def test_a_missing_object_is_answered_503_so_the_runner_tries_again(
    storage_kind: str, alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    build = build_with_files(sub.tree, tmp_path)
    Job.objects.filter(submission=sub).update(build=build)
    job = api.post("/runner/claim").json()["job"]
    artifacts.storage().delete(build.artifacts["kernel"]["key"])
    resp = api.get(f"/runner/builds/{build.pk}/artifacts/kernel")
    assert resp.status_code == 503 and resp.json()["code"] == "unavailable"
    assert "builds/1000/1/kernel" in resp.json()["detail"] and job is not None


def age(sub: Submission, days: int, side: str | None = None) -> None:
    then = timezone.now() - timedelta(days=days)
    jobs = Job.objects.filter(submission=sub, **({"side": side} if side else {}))
    jobs.update(finished=then)
    BootRecord.objects.filter(job__in=jobs).update(created=then)


@pytest.mark.django_db
def test_old_consoles_and_raw_outputs_move_to_the_storage_and_pages_and_exports_still_show_them(
    storage_kind: str, alice: Any, alice_api: Api, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    upload_every_job(api)
    # The base side ran long ago; the head side is recent.
    age(sub, days=400, side="base")
    old_job = Job.objects.filter(submission=sub, side="base").first()
    assert old_job is not None
    Job.objects.filter(pk=old_job.pk).update(console_log="KPERF-DONE\nboot log \u00e9\u00e8 of an old job\n")
    before = alice_api.get(f"/submissions/{sub.pk}/mmtests?side=base&benchmark=spawn").json()
    assert before["boots"] > 0

    call_command("archive", "--older-than", "365")

    old_boots = BootRecord.objects.filter(job__submission=sub, job__side="base")
    assert old_boots.exists() and not old_boots.exclude(raw_output="").exists()
    assert all(set(b.raw_output_archive) == {"key", "sha256", "size"} for b in old_boots)
    assert not Job.objects.filter(submission=sub, side="base").exclude(console_log="").exists()
    # Recent ones stay in the database.
    assert not BootRecord.objects.filter(job__side="head", raw_output="").exists()
    assert not Job.objects.filter(side="head").exclude(console_log_archive={}).exists()

    after = alice_api.get(f"/submissions/{sub.pk}/mmtests?side=base&benchmark=spawn").json()
    assert after == before
    c = Client()
    c.force_login(alice)
    page = c.get(f"/jobs/{old_job.pk}/console")
    assert page.status_code == 200 and page.content.decode() == "KPERF-DONE\nboot log \u00e9\u00e8 of an old job\n"
    record = old_boots.first()
    assert record is not None
    assert stored_bytes(record.raw_output_archive["key"]).decode() == archive.raw_output(record)

    # Again: nothing left to move, nothing changes.
    moved = {b.pk: b.raw_output_archive for b in old_boots}
    assert archive.archive_older_than(365).moved == 0
    assert {b.pk: b.raw_output_archive for b in old_boots.all()} == moved


@pytest.mark.django_db
def test_an_interrupted_archive_keeps_the_text_and_the_next_run_finishes(
    storage_kind: str, alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    upload_every_job(api)
    age(sub, days=30)
    texts = dict(BootRecord.objects.values_list("pk", "raw_output"))
    real_put = artifacts.put_bytes
    calls = 0

    def dies_after_the_second_write(key: str, data: bytes) -> dict[str, Any]:
        # The process is killed after the object is written, before the row changes.
        nonlocal calls
        calls += 1
        meta = real_put(key, data)
        if calls == 2:
            raise KeyboardInterrupt
        return meta

    monkeypatch.setattr(artifacts, "put_bytes", dies_after_the_second_write)
    with pytest.raises(KeyboardInterrupt):
        archive.archive_older_than(7)
    monkeypatch.setattr(artifacts, "put_bytes", real_put)
    # The console of the first job moved; the second text was written but its row kept its text.
    assert Job.objects.exclude(console_log_archive={}).count() == 1
    assert Job.objects.filter(console_log_archive={}).exclude(console_log="").exists()

    report = archive.archive_older_than(7)
    assert not report.failed and report.moved > 0
    assert not BootRecord.objects.exclude(raw_output="").exists()
    assert {r.pk: archive.raw_output(r) for r in BootRecord.objects.all()} == texts


@pytest.mark.django_db
def test_a_text_that_changes_while_it_is_written_is_left_in_the_database(
    storage_kind: str, alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    upload_every_job(api)
    age(sub, days=30)
    real_put = artifacts.put_bytes

    def changed_meanwhile(key: str, data: bytes) -> dict[str, Any]:
        meta = real_put(key, data)
        Job.objects.filter(submission=sub).update(console_log="rewritten while it was being archived\n")
        return meta

    monkeypatch.setattr(artifacts, "put_bytes", changed_meanwhile)
    report = archive.archive_older_than(7, limit=1)
    assert report.skipped >= 1
    job = Job.objects.filter(submission=sub).order_by("pk").first()
    assert job is not None and job.console_log_archive == {}
    assert archive.console_log(job) == "rewritten while it was being archived\n"


@pytest.mark.django_db
def test_old_rows_naming_a_file_are_served_and_copied_into_the_storage(
    storage_kind: str, alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    """Builds stored before the storage existed name a local path: served as they are, and
    `archive --build-files` copies them in, after which the local file is not needed."""
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    job = api.post("/runner/claim").json()["job"]
    build = Job.objects.get(pk=job["id"]).build
    legacy = build.artifacts["kernel"]
    assert "path" in legacy
    assert api.get(f"/runner/builds/{build.pk}/artifacts/kernel").status_code == 200

    call_command("archive", "--older-than", "0", "--build-files")
    build.refresh_from_db()
    moved = build.artifacts["kernel"]
    assert moved["sha256"] == legacy["sha256"] and moved["key"] == f"builds/{build.pk}/0/kernel"
    Path(legacy["path"]).unlink()
    resp = api.get(f"/runner/builds/{build.pk}/artifacts/kernel")
    assert resp.status_code == 200
    assert hashlib.sha256(b"".join(resp.streaming_content)).hexdigest() == legacy["sha256"]
    assert sub.pk


@pytest.mark.django_db
def test_archive_says_what_to_do_when_the_storage_is_unreachable(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    upload_every_job(api)
    age(sub, days=30)
    # A bucket on a port nobody listens on.
    monkeypatch.setenv("KPERF_S3_BUCKET", "kperf")
    monkeypatch.setenv("KPERF_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("KPERF_S3_TIMEOUT", "1")
    settings.STORAGES = storage_settings.storages(tmp_path)
    with pytest.raises(CommandError, match="storage_check"):
        call_command("archive", "--older-than", "7", "--limit", "1")
    assert not BootRecord.objects.filter(raw_output="").exists()
    assert not Job.objects.exclude(console_log_archive={}).exists()


def test_storage_settings_pick_the_backend_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("KPERF_S3_BUCKET", "KPERF_S3_ENDPOINT_URL", "KPERF_S3_ACCESS_KEY_ID", "KPERF_S3_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    local = storage_settings.artifact_storage(tmp_path)
    assert local["BACKEND"].endswith("FileSystemStorage") and local["OPTIONS"]["location"] == str(tmp_path)

    monkeypatch.setenv("KPERF_S3_BUCKET", "lab-artifacts")
    monkeypatch.setenv("KPERF_S3_ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("KPERF_S3_PREFIX", "/kperf/")
    s3 = storage_settings.artifact_storage(tmp_path)
    assert s3["BACKEND"] == "storages.backends.s3.S3Storage"
    options = s3["OPTIONS"]
    assert options["bucket_name"] == "lab-artifacts" and options["endpoint_url"] == "http://minio:9000"
    assert options["location"] == "kperf" and options["client_config"].s3 == {"addressing_style": "path"}

    monkeypatch.setenv("KPERF_S3_ACCESS_KEY_ID", "only-one-half")
    with pytest.raises(ConfigError, match="KPERF_S3_SECRET_ACCESS_KEY"):
        storage_settings.artifact_storage(tmp_path)
    monkeypatch.setenv("KPERF_S3_ENDPOINT_URL", "minio:9000")
    with pytest.raises(ConfigError, match="must start with http"):
        storage_settings.artifact_storage(tmp_path)
