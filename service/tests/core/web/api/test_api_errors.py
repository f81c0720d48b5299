"""What the API answers to bad input: never a 500, always JSON {detail, code} that says what to do
(kperf.core.web.api)."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from kperf.core.models import BootRecord, Job, MachineClass, Submission, TrackedBranch, Tree

from tests.conftest import Api, kperf_cli
from tests.lab_fixtures import results_body, submission_ready_for_testing

pytestmark = pytest.mark.django_db


@pytest.fixture
def sub(alice: Any, qemu_class: Any, tmp_path: Path) -> Submission:
    return submission_ready_for_testing(alice, qemu_class, tmp_path)


def claimed(api: Api) -> dict[str, Any]:
    job: dict[str, Any] = api.post("/runner/claim").json()["job"]
    return job


def error(resp: Any, status: int, code: str) -> str:
    assert resp.status_code == status, resp.content
    assert resp["Content-Type"].startswith("application/json"), resp.content
    body = resp.json()
    assert body["code"] == code, body
    detail: str = body["detail"]
    return detail


# --- NUL bytes and values the database cannot hold ----------------------------------------


def test_a_nul_in_a_login_name_is_refused_naming_the_field(alice: Any) -> None:
    resp = Api(None).post("/auth/token", {"username": "ali\x00ce", "password": "x"})
    assert "username contains a NUL character" in error(resp, 422, "invalid")


def test_a_nul_in_a_query_parameter_is_refused_naming_it(alice_api: Api, alice: Any, qemu_class: Any) -> None:
    branch = TrackedBranch.objects.create(
        tree=Tree.objects.create(url="https://example.org/t.git"), branch="b", owner=alice
    )
    for path, name in [
        ("/noise?machine_class=qemu%00", "machine_class"),
        ("/compare?machine_class=q&benchmark=spawn&base=a%00&head=b", "base"),
        (f"/branches/{branch.pk}/series?machine_class=qemu-x86_64&benchmark=sp%00awn", "benchmark"),
    ]:
        detail = error(alice_api.get(path), 400, "invalid-parameter")
        assert f"query parameter {name!r} contains a NUL byte (%00): remove it" in detail, path


def test_runner_text_with_nul_is_stored_and_identifiers_with_nul_are_refused(sub: Submission, runner_api: Any) -> None:
    _, api = runner_api
    job = claimed(api)
    # A NUL in an identifier-like field (an environment value) is refused, naming the field.
    body = results_body(job)
    body["boots"][0]["environment"]["cpu_model"] = "QEMU\x00"
    detail = error(api.post(f"/runner/jobs/{job['id']}/results", body), 422, "invalid")
    assert "boots[0].environment.cpu_model contains a NUL character" in detail
    # An iteration beyond the column's range is refused, not a database error.
    body = results_body(job)
    body["boots"][0]["samples"][0]["iteration"] = 2**63
    detail = error(api.post(f"/runner/jobs/{job['id']}/results", body), 422, "invalid")
    assert "boots[0].samples[0].iteration" in detail and "2147483647" in detail
    assert not BootRecord.objects.exists()
    # Machine text keeps everything else: the NUL becomes U+FFFD.
    body = results_body(job)
    body["boots"][0]["raw_output"] = "COUNT|1000|1|lps\x00\n"
    body["console_log"] = "Linux\x00version\n"
    resp = api.post(f"/runner/jobs/{job['id']}/results", body)
    assert resp.status_code == 200, resp.content
    assert BootRecord.objects.get().raw_output == "COUNT|1000|1|lps\ufffd\n"
    assert Job.objects.get(pk=job["id"]).console_log == "Linux\ufffdversion\n"


def test_a_progress_call_with_nul_in_the_console_still_extends_the_lease(sub: Submission, runner_api: Any) -> None:
    _, api = runner_api
    job = claimed(api)
    Job.objects.filter(pk=job["id"]).update(lease_expires=timezone.now() + timedelta(seconds=5))
    resp = api.post(
        f"/runner/jobs/{job['id']}/progress",
        {"attempt": 1, "phase": "booting", "message": "boot\x001", "console": "early \x00 console\n"},
    )
    assert resp.status_code == 200, resp.content
    j = Job.objects.get(pk=job["id"])
    assert j.lease_expires is not None and j.lease_expires > timezone.now() + timedelta(seconds=60)
    assert j.console_log == "early \ufffd console\n" and j.progress == "boot\ufffd1"
    # The failure report's message and log too.
    resp = api.post(f"/runner/jobs/{job['id']}/fail", {"attempt": 1, "kind": "boot", "message": "x\x00", "log": "\x00"})
    assert resp.status_code == 200, resp.content
    j.refresh_from_db()
    assert j.failure_message == "x\ufffd" and j.console_log == "\ufffd"


def test_an_unpaired_surrogate_is_refused_like_a_nul(alice_api: Api) -> None:
    raw = b'{"tree": "https://example.org/\\ud800", "branch": "b", "base": "v1"}'
    detail = error(alice_api.post("/submissions", raw=raw), 422, "invalid")
    assert detail.startswith("tree contains an unpaired UTF-16 surrogate")


# --- malformed, oversized, unknown, not allowed -----------------------------------------


def test_malformed_json_is_422_invalid(sub: Submission, runner_api: Any, alice_api: Api) -> None:
    _, api = runner_api
    job = claimed(api)
    detail = error(api.post(f"/runner/jobs/{job['id']}/progress", raw=b'{"attempt":'), 422, "invalid")
    assert detail.startswith("the body is not valid JSON") and "send one JSON object" in detail
    error(alice_api.post("/submissions", raw=b"\xff\xfe"), 422, "invalid")
    # A body declared as anything but JSON is refused before anything parses it as a form.
    resp = Client().post(
        "/api/v1/auth/token", data=b'{"username": "x"}', content_type="multipart/form-data", HTTP_AUTHORIZATION="x"
    )
    assert "send it with 'Content-Type: application/json'" in error(resp, 415, "unsupported-media-type")


def test_an_oversized_body_is_413_saying_the_limit(sub: Submission, runner_api: Any, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    _, api = runner_api
    job = claimed(api)
    body = results_body(job)
    body["console_log"] = "x" * 10000
    detail = error(api.post(f"/runner/jobs/{job['id']}/results", body), 413, "too-large")
    assert "limit of 4096 bytes (KPERF_MAX_UPLOAD_BYTES)" in detail and "console cut to its end" in detail
    assert not BootRecord.objects.exists()


def test_unknown_endpoints_missing_objects_and_wrong_methods_answer_json(alice_api: Api) -> None:
    assert "/api/v1/docs lists them" in error(alice_api.get("/no-such-thing"), 404, "not-found")
    assert "GET /api/v1/submissions lists" in error(alice_api.get("/submissions/999999"), 404, "not-found")
    resp = alice_api.get("/auth/token")
    assert "GET is not allowed on /api/v1/auth/token: use POST" in error(resp, 405, "method-not-allowed")
    assert resp["Allow"] == "POST"


def test_an_api_500_is_json_and_logged_with_its_traceback(
    alice_api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise RuntimeError("the registry is gone")

    monkeypatch.setattr("kperf.core.benchmarks.describe", broken)
    with caplog.at_level(logging.ERROR, logger="kperf.core.web.api"):
        resp = alice_api.get("/benchmarks")
    detail = error(resp, 500, "internal")
    incident = detail.split("logged as ")[1].split(":")[0]
    [record] = [r for r in caplog.records if r.name == "kperf.core.web.api"]
    assert incident in record.getMessage() and "GET /api/v1/benchmarks" in record.getMessage()
    assert record.exc_info is not None and "the registry is gone" in str(record.exc_info[1])


def test_a_web_page_500_is_logged_with_its_traceback(
    alice: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> list[str]:
        raise RuntimeError("no benchmarks today")

    monkeypatch.setattr("kperf.core.benchmarks.known", broken)
    browser = Client(raise_request_exception=False)
    browser.force_login(alice)
    with caplog.at_level(logging.ERROR, logger="django.request"):
        assert browser.get("/submissions/new").status_code == 500
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.exc_info is not None and "no benchmarks today" in str(record.exc_info[1])
    from django.conf import settings

    loggers = settings.LOGGING["loggers"]
    assert isinstance(loggers, dict)
    assert loggers["django.request"]["handlers"] == ["console"]


# --- tokens -------------------------------------------------------------------------------


def test_a_bad_token_on_a_post_is_401_not_a_csrf_failure(alice_api: Api, qemu_class: MachineClass) -> None:
    for token in ("kperf_not-a-real-token", "Bearer-less", "kprun_wrong-kind"):
        resp = alice_api.post("/submissions", {"tree": "x", "branch": "b", "base": "v1"}, token=token)
        assert "the token was not accepted" in error(resp, 401, "bad-token"), token
    resp = Client().post("/api/v1/submissions", data=json.dumps({}), content_type="application/json")
    assert "no token" in error(resp, 401, "bad-token")


def test_kperf_submit_with_a_bad_token_says_so(live_server: Any, alice: Any, tmp_path: Path) -> None:
    cli = kperf_cli(live_server.url, Api("kperf_revoked-or-mistyped"), tmp_path / "c.json")
    out = cli("submit", "--tree", "https://example.org/linux.git", "--branch", "b", "--base", "v6.1")
    assert out.returncode == 2
    assert "POST /submissions: 401: the token was not accepted" in out.stderr and "kperf login" in out.stderr
    assert "CSRF" not in out.stderr
