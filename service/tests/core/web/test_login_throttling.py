"""Failed logins are throttled per user name and per client address (django-axes,
kperf.core.web.throttle)."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def token(username: str, password: str, address: str = "127.0.0.1") -> Any:
    body = json.dumps({"username": username, "password": password})
    return Client().post("/api/v1/auth/token", data=body, content_type="application/json", REMOTE_ADDR=address)


def test_fifty_wrong_passwords_lock_the_user_name_out_of_the_api(alice: Any, settings: Any) -> None:
    assert settings.AXES_FAILURE_LIMIT == 10
    answers = [token("alice", f"guess-{i}", f"10.0.0.{i}").status_code for i in range(50)]
    # Nine plain refusals; the tenth failure locks, from any address.
    assert answers[:9] == [401] * 9 and set(answers[9:]) == {429}
    resp = token("alice", "alice-password-1", "10.9.9.9")
    assert resp.status_code == 429
    body = resp.json()
    assert body["code"] == "throttled" and body["retry_after"] == 15 * 60
    assert "too many failed logins" in body["detail"] and "15 minutes" in body["detail"]
    assert resp["Retry-After"] == "900"


def test_many_user_names_from_one_address_lock_the_address(alice: Any, django_user_model: Any) -> None:
    django_user_model.objects.create_user("bob", "bob@example.org", "bob-password-1")
    for i in range(10):
        token(f"nobody-{i}", "x", "192.0.2.7")
    assert token("bob", "bob-password-1", "192.0.2.7").status_code == 429
    # bob himself did nothing wrong: from elsewhere he gets in.
    assert token("bob", "bob-password-1", "192.0.2.8").status_code == 201


def test_the_lock_lifts_after_the_cool_off(alice: Any, settings: Any) -> None:
    # Long enough that ten refused logins and the check after them fit in it on a busy machine.
    settings.AXES_COOLOFF_TIME = timedelta(seconds=5)
    for i in range(10):
        token("alice", f"guess-{i}")
    assert token("alice", "alice-password-1").status_code == 429
    time.sleep(5.5)
    assert token("alice", "alice-password-1").status_code == 201


def test_the_login_form_says_why_it_refuses(alice: Any) -> None:
    browser = Client()
    for i in range(9):
        resp = browser.post("/accounts/login/", {"username": "alice", "password": f"guess-{i}"})
        assert resp.status_code == 200 and "Please enter a correct username and password" in resp.content.decode()
    resp = browser.post("/accounts/login/", {"username": "alice", "password": "guess-9"})
    assert resp.status_code == 429
    resp = browser.post("/accounts/login/", {"username": "alice", "password": "alice-password-1"})
    page = resp.content.decode()
    assert resp.status_code == 429 and 'id="locked-out"' in page
    assert "too many failed logins for this user name or from this address" in page
    assert 'name="username"' in page  # the form is still there for later
    assert "_auth_user_id" not in browser.session


LONG_NAME = "a" * 300  # longer than django-axes' username column (255)


def test_an_over_long_user_name_is_refused_by_the_api_like_any_wrong_one(alice: Any) -> None:
    resp = token(LONG_NAME, "x", "192.0.2.20")
    assert resp.status_code == 401 and resp.json()["code"] == "bad-credentials"


def test_an_over_long_user_name_is_refused_by_the_login_forms(alice: Any) -> None:
    for path in ("/accounts/login/", "/admin/login/"):
        resp = Client().post(path, {"username": LONG_NAME, "password": "x"}, REMOTE_ADDR="192.0.2.21")
        page = resp.content.decode()
        assert resp.status_code == 200, (path, resp.status_code)
        assert 'name="username"' in page and "_auth_user_id" not in resp.client.session


def test_over_long_user_names_are_counted_by_the_throttle(alice: Any) -> None:
    # Each try is a failure like any other: the tenth from one address locks it.
    answers = [token(LONG_NAME + str(i), "x", "192.0.2.22").status_code for i in range(11)]
    assert answers[:9] == [401] * 9 and answers[10] == 429
    assert token("alice", "alice-password-1", "192.0.2.22").status_code == 429
    # Names that share their first 255 characters are one name to the throttle.
    for i in range(10):
        token(LONG_NAME + str(i), "x", f"198.51.100.{i}")
    assert token(LONG_NAME + "other", "x", "198.51.100.200").status_code == 429
