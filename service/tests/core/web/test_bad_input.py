"""Bad input sent to the real web server (`kperf-web`, waitress and Django) over loopback
(kperf.core.web.request_guard, kperf.web_errors).

Never a 500: a NUL byte anywhere (a cookie, a header, a form, a query) is a
400 saying where; a plot's id that is not a plain number is a 404; under
/api/ every error is JSON {detail, code}, including the ones waitress
answers before Django sees the request; with the database unreachable, the
pages answer a plain 503 page and the API a JSON 503.
"""

from __future__ import annotations

import json
import re
import socket
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User

from kperf.core.models import ApiToken, MachineClass, Triage
from kperf_testing.plugin import database_url_for_tests
from kperf_testing.stack import free_port

from tests.triage_fixtures import regressed_branch, regressed_submission
from tests.web_fixtures import running_web

# A session id of a valid length with a NUL in it: cookies are unquoted by
# Django, so "\000" arrives in the session lookup as U+0000.
NUL_SESSION_COOKIE = 'sessionid="abcdefgh\\000ijklmnopqrstuvwx"'
PASSWORD = "a-long-enough-password-1"


def kperf_web(tmp_path: Path, database_url: str, **env: str) -> AbstractContextManager[str]:
    """`kperf-web` on ``database_url``; its URL once it answers at all."""
    return running_web(tmp_path, env, database_url=database_url, any_answer=True)


def raw(url: str, request: bytes, *more: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send bytes no HTTP client library would, and read the answer: status, headers (lower-case), body.

    Each of `more` is sent after a pause, so that the server has read what came before.
    """
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(request)
        for part in more:
            time.sleep(0.5)
            s.sendall(part)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        body = dechunk(body)
    return int(lines[0].split()[1]), headers, body


def dechunk(body: bytes) -> bytes:
    out = b""
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out, body = out + body[:size], body[size + 2 :]


def api_error(status: int, headers: dict[str, str], body: bytes, expected: int, code: str) -> str:
    assert status == expected, body
    assert headers["content-type"].startswith("application/json"), (headers, body)
    answer = json.loads(body)
    assert answer["code"] == code and set(answer) == {"detail", "code"}, answer
    detail: str = answer["detail"]
    return detail


def get(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def signed_in(url: str, user: str) -> requests.Session:
    browser = requests.Session()
    browser.get(f"{url}/accounts/login/", timeout=20)
    form = {"username": user, "password": PASSWORD, "csrfmiddlewaretoken": browser.cookies["csrftoken"]}
    resp = browser.post(f"{url}/accounts/login/", data=form, timeout=20, allow_redirects=False)
    assert resp.status_code == 302, resp.text
    return browser


@pytest.fixture
def people(transactional_db: Any, django_user_model: Any) -> tuple[User, User]:
    """alice and a lab admin, committed so the server process sees them."""
    alice = django_user_model.objects.create_user("alice", "alice@example.org", PASSWORD)
    admin = django_user_model.objects.create_user("lab-admin", "admin@example.org", PASSWORD, is_staff=True)
    return alice, admin


def test_a_nul_byte_anywhere_is_a_400_saying_where_never_a_500(people: tuple[User, User], tmp_path: Path) -> None:
    alice, _ = people
    row = Triage.objects.get(
        submission=regressed_submission(alice, MachineClass.objects.create(name="q", arch="x86_64"))
    )
    with kperf_web(tmp_path, database_url_for_tests()) as url:
        # A session cookie holding a NUL, signed in or not, on a page, the login page and the API.
        for path in ("/", "/accounts/login/", "/api/v1/submissions", "/admin/"):
            status, headers, body = raw(url, get(path, f"Cookie: {NUL_SESSION_COOKIE}"))
            assert status == 400, (path, body)
            assert b"cookie 'sessionid' contains a NUL byte" in body and b"delete this site's cookies" in body
            assert headers["content-type"].startswith("application/json" if "/api/" in path else "text/plain")

        browser = signed_in(url, "alice")
        # A triage note from the page's form: nothing changes.
        csrf = browser.cookies["csrftoken"]
        form = {"state": "expected", "note": "a trade\x00-off", "csrfmiddlewaretoken": csrf}
        resp = browser.post(f"{url}/triage/{row.pk}", data=form, timeout=20, allow_redirects=False)
        assert resp.status_code == 400 and "form field 'note' contains a NUL byte (%00): remove it" in resp.text
        row.refresh_from_db()
        assert row.state == "new"
        # A query parameter of a page.
        resp = browser.get(f"{url}/?owner=ali%00ce", timeout=20)
        assert resp.status_code == 400 and "query parameter 'owner' contains a NUL byte" in resp.text
        # A raw NUL in a header is refused by waitress itself, in JSON under /api/.
        status, headers, body = raw(url, get("/api/v1/health", "X-Trace: a\x00b"))
        assert "Invalid header" in api_error(status, headers, body, 400, "bad-request")
        status, _, _ = raw(url, get("/", "User-Agent: a\x00b"))
        assert status == 400


def test_a_plot_class_that_is_not_a_plain_number_is_a_404(people: tuple[User, User], tmp_path: Path) -> None:
    alice, _ = people
    mclass = MachineClass.objects.create(name="qemu-x86_64", arch="x86_64")
    branch = regressed_branch(alice, mclass).branch
    series = f"/branches/{branch.pk}/plots/series.svg?benchmark=spawn&clock=instructions&metric=spawn-vmas-0&class="
    with kperf_web(tmp_path, database_url_for_tests()) as url:
        browser = signed_in(url, "alice")
        resp = browser.get(f"{url}{series}{mclass.pk}", timeout=20)
        assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("image/svg+xml")
        # A superscript two and an Arabic-Indic one pass str.isdigit(), and int()
        # refuses the first; 5000 digits are over int()'s limit for text;
        # 10**30 is over PostgreSQL's bigint.
        for bad in ("%C2%B2", "%D9%A1", "9" * 5000, "1" + "0" * 30, "-1", "1e3"):
            resp = browser.get(f"{url}{series}{bad}", timeout=20)
            assert resp.status_code == 404, (bad[:20], resp.status_code)


def test_every_api_error_is_json_even_before_django_sees_the_request(people: tuple[User, User], tmp_path: Path) -> None:
    _, token = ApiToken.issue(people[0])
    auth = f"Authorization: Bearer {token}"
    post = (
        "POST /api/v1/auth/token HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
    )
    with kperf_web(tmp_path, database_url_for_tests(), KPERF_MAX_UPLOAD_BYTES="4096") as url:
        # 413 from waitress: a 40 MiB body, refused from its Content-Length before a byte of it is read.
        status, headers, body = raw(url, f"{post}Content-Length: {40 * 1024 * 1024}\r\n\r\n".encode())
        detail = api_error(status, headers, body, 413, "too-large")
        assert "(41943040 bytes) is over this service's limit of 4096 bytes (KPERF_MAX_UPLOAD_BYTES)" in detail
        # 413 from Django: over its limit, under waitress's.
        big = json.dumps({"username": "x" * 5000, "password": "y"}).encode()
        status, headers, body = raw(url, f"{post}Content-Length: {len(big)}\r\n\r\n".encode() + big)
        assert "limit of 4096 bytes" in api_error(status, headers, body, 413, "too-large")
        # 400 from waitress: a negative length, a broken chunk, bytes that are not a URI.
        status, headers, body = raw(url, f"{post}Content-Length: -5\r\n\r\n".encode())
        assert "Content-Length is invalid" in api_error(status, headers, body, 400, "bad-request")
        status, headers, body = raw(url, f"{post}Transfer-Encoding: chunked\r\n\r\nzz\r\n".encode())
        assert "Invalid chunk size" in api_error(status, headers, body, 400, "bad-request")
        status, headers, body = raw(url, b"GET /api/v1/\xff HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        api_error(status, headers, body, 400, "bad-request")
        # 431 from waitress: headers over its limit.
        # The last bytes, the end of the head among them, come in one piece: waitress
        # then has read everything when it answers, and closes without a reset
        # (which would discard its answer).
        big_head = get("/api/v1/health", "X-Big: " + "a" * 262_144)
        status, headers, body = raw(url, big_head[:-300], big_head[-300:])
        assert "send fewer or shorter headers" in api_error(status, headers, body, 431, "headers-too-large")
        # 400 from Django: a query it will not read.
        fields = "&".join(f"f{i}=1" for i in range(1200))
        status, headers, body = raw(url, get(f"/api/v1/submissions?{fields}", auth))
        assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in api_error(status, headers, body, 400, "bad-request")
        # 400 from Django: a Host it does not serve.
        status, headers, body = raw(
            url, b"GET /api/v1/health HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
        )
        api_error(status, headers, body, 400, "bad-request")
        # 404, 405 and 415 from Django and django-ninja.
        api_error(*raw(url, get("/api/v1/no-such-thing", auth)), 404, "not-found")
        api_error(*raw(url, get("/api/v1/auth/token", auth)), 405, "method-not-allowed")
        form = (
            f"{post}".replace("application/json", "application/x-www-form-urlencoded") + "Content-Length: 3\r\n\r\nx=1"
        )
        api_error(*raw(url, form.encode()), 415, "unsupported-media-type")
        # The pages keep waitress's plain text, but never a 500.
        status, headers, _ = raw(url, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n")
        assert status == 400 and headers["content-type"].startswith("text/plain")


def test_pages_answer_a_plain_503_while_the_database_is_unreachable(tmp_path: Path) -> None:
    # A database URL on a loopback port where nothing listens: the test
    # database, and every other test, are untouched.
    nowhere = f"postgres://postgres@127.0.0.1:{free_port()}/kperf"
    session = "Cookie: sessionid=abcdefghijklmnopqrstuvwxyz012345"
    with kperf_web(tmp_path, nowhere) as url:
        for path in ("/", "/lab/", "/branches/", "/admin/", "/branches/1/plots/series.svg?class=1"):
            status, headers, body = raw(url, get(path, session))
            assert status == 503, (path, body[:200])
            assert headers["content-type"].startswith("text/html") and headers["retry-after"] == "15"
            assert b"kperf's database is unreachable; try again in a minute" in body
            # The page is rendered without the request: no session, no CSRF token, no user.
            assert b"csrfmiddlewaretoken" not in body and not re.search(rb"log out|sign out", body)
        # Signing in needs the database too.
        browser = requests.Session()
        assert browser.get(f"{url}/accounts/login/", timeout=20).status_code == 200
        form = {"username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": browser.cookies["csrftoken"]}
        resp = browser.post(f"{url}/accounts/login/", data=form, timeout=20)
        assert resp.status_code == 503 and "kperf's database is unreachable" in resp.text
        # The API says the same in JSON.
        status, headers, body = raw(url, get("/api/v1/submissions", "Authorization: Bearer kperf_x"))
        assert "nothing was stored: retry in 15 s" in api_error(status, headers, body, 503, "unavailable")
