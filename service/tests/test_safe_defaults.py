"""Defaults a shared service can live with: no published secret key, no local trees."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management.utils import get_random_secret_key

from kperf import up
from kperf.conf import secret_key_problem
from kperf.embedded import broker_url_for_database
from kperf.up import local_secret_key
from kperf.up import main as kperf_up
from kperf_testing.plugin import database_url_for_tests

from tests.conftest import Api

SHOW = (
    "import django; django.setup(); from django.conf import settings as s; "
    "print(s.KPERF_ALLOW_LOCAL_TREES, s.AXES_FAILURE_LIMIT, int(s.AXES_COOLOFF_TIME.total_seconds()))"
)


def load_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KPERF_")}
    base.update(DJANGO_SETTINGS_MODULE="kperf.settings", KPERF_HOME=str(tmp_path / "home"), **env)
    return subprocess.run([sys.executable, "-c", SHOW], env=base, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("key", [None, "", "change-me", "kperf-development-key-change-me-in-production"])
def test_production_refuses_to_start_without_a_real_secret_key(tmp_path: Path, key: str | None) -> None:
    proc = load_settings(tmp_path, **({} if key is None else {"KPERF_SECRET_KEY": key}))
    assert proc.returncode != 0
    assert "ImproperlyConfigured: KPERF_SECRET_KEY is unset or a published default" in proc.stderr
    assert "secrets.token_urlsafe" in proc.stderr and "KPERF_DEBUG=1" in proc.stderr


def test_debug_mode_or_a_real_key_starts_with_safe_defaults(tmp_path: Path) -> None:
    assert load_settings(tmp_path, KPERF_DEBUG="1").returncode == 0
    proc = load_settings(tmp_path, KPERF_SECRET_KEY=secrets.token_urlsafe(50))
    assert proc.returncode == 0, proc.stderr
    # Local trees off; ten failed logins, then a quarter of an hour.
    assert proc.stdout.split() == ["False", "10", "900"]
    proc = load_settings(
        tmp_path,
        KPERF_SECRET_KEY=secrets.token_hex(32),
        KPERF_LOGIN_FAILURE_LIMIT="3",
        KPERF_LOGIN_COOLOFF_MINUTES="5",
    )
    assert proc.stdout.split() == ["False", "3", "300"], proc.stderr


@pytest.mark.django_db
def test_local_trees_are_refused_by_default(alice_api: Api, qemu_class: Any, settings: Any) -> None:
    settings.KPERF_ALLOW_LOCAL_TREES = False  # the default outside kperf-up and the tests
    for tree in ("/etc", "file:///etc"):
        resp = alice_api.post("/submissions", {"tree": tree, "branch": "b", "base": "v1"})
        assert resp.status_code == 400, resp.content
        detail = resp.json()["detail"]
        assert f"{tree!r} is a local tree, and local trees are off on this service" in detail
        assert "push the branch to a git server" in detail and "KPERF_ALLOW_LOCAL_TREES=1" in detail


def test_kperf_up_keeps_one_random_key_readable_only_by_its_user(tmp_path: Path) -> None:
    key = local_secret_key(tmp_path)
    assert len(key) >= 50 and local_secret_key(tmp_path) == key
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    other = tmp_path / "other"
    other.mkdir()
    assert local_secret_key(other) != key


WEAK_KEYS = {
    "one character": "x",
    "short but random": secrets.token_urlsafe(36)[:49],
    "long, one character": "a" * 64,
    "long, four characters": "abcd" * 16,
    "Django's development mark": "django-insecure-" + secrets.token_urlsafe(40),
    "fifty characters, five letters repeated": "abcde" * 10,
    "eight letters repeated": "abcdefgh" * 7,
    "a random piece repeated": secrets.token_urlsafe(8) * 6,
}


@pytest.mark.parametrize("key", WEAK_KEYS.values(), ids=WEAK_KEYS.keys())
@pytest.mark.parametrize("debug", ["0", "1"])
def test_a_weak_secret_key_is_refused_saying_how_to_make_one(tmp_path: Path, key: str, debug: str) -> None:
    proc = load_settings(tmp_path, KPERF_SECRET_KEY=key, KPERF_DEBUG=debug)
    assert proc.returncode != 0
    assert "ImproperlyConfigured: KPERF_SECRET_KEY is too weak: it " in proc.stderr, proc.stderr
    assert "python3 -c 'import secrets; print(secrets.token_urlsafe(50))'" in proc.stderr
    # The message says what is wrong without repeating the key into a log.
    assert len(key) < 8 or key not in proc.stderr


def test_the_keys_kperf_makes_pass_the_check() -> None:
    # The tests' own (kperf_testing.plugin), shared with every server they start.
    assert secret_key_problem(os.environ["KPERF_SECRET_KEY"]) is None
    assert secret_key_problem(secrets.token_urlsafe(50)) is None


def test_a_key_is_judged_by_its_randomness_not_its_length() -> None:
    problem = secret_key_problem("abcde" * 10)
    assert problem is not None and problem.startswith("holds about 16 bits of randomness")
    assert "it needs at least 128" in problem
    assert secret_key_problem(secrets.token_urlsafe(12) * 5) is not None
    # Every kind of random key a lab would make passes, every time.
    makers: list[Callable[[], str]] = [
        lambda: secrets.token_urlsafe(50),
        lambda: secrets.token_hex(32),
        get_random_secret_key,
        lambda: "kperf-tests-" + secrets.token_urlsafe(32),
    ]
    assert [secret_key_problem(make()) for make in makers for _ in range(300)] == [None] * 1200


def test_kperf_up_replaces_a_weak_key_it_finds_in_its_home(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "secret_key").write_text("kperf\n")
    key = local_secret_key(tmp_path)
    assert secret_key_problem(key) is None and (tmp_path / "secret_key").read_text() == key + "\n"
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    err = capsys.readouterr().err
    assert f"the secret key in {tmp_path / 'secret_key'} is 5 characters long; it needs at least 50" in err
    assert "replaced it with a new random one" in err
    # A strong one is kept, silently.
    assert local_secret_key(tmp_path) == key and capsys.readouterr().err == ""


def test_kperf_up_refuses_a_weak_key_from_the_environment_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KPERF_SECRET_KEY", "x")
    assert kperf_up(["--home", str(tmp_path / "home"), "--no-runner"]) == 1
    err = capsys.readouterr().err
    assert "kperf-up: KPERF_SECRET_KEY is too weak: it is 1 characters long; it needs at least 50" in err
    assert f"keeps a random key in {tmp_path / 'home' / 'secret_key'}" in err and "token_urlsafe(50)" in err
    assert not (tmp_path / "home" / "secret_key").exists()
    # Its home was made first, and for kperf alone (kperf.folders).
    assert (tmp_path / "home").stat().st_mode & 0o777 == 0o700


def test_kperf_up_s_runners_claim_every_second_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its few loopback runners claim every second; an operator's setting stands."""
    monkeypatch.setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:1/0")
    monkeypatch.delenv("KPERF_RUNNER_POLL_SECONDS", raising=False)
    env, pg = up._environment(tmp_path)
    assert pg is None and env["KPERF_RUNNER_POLL_SECONDS"] == "1"
    monkeypatch.setenv("KPERF_RUNNER_POLL_SECONDS", "5")
    assert up._environment(tmp_path)[0]["KPERF_RUNNER_POLL_SECONDS"] == "5"


BROKER_OPTIONS = (
    "import django; django.setup(); from kperf.celery import app; "
    "print(app.connection_for_read().transport.polling_interval)"
)
# A worker's first step on the broker: a channel, which for the database
# broker is an SQLAlchemy engine made with the transport options.
BROKER_CHANNEL = (
    "import django; django.setup(); from kperf.celery import app; "
    "c = app.connection_for_read(); c.default_channel.session; print('open')"
)


@pytest.mark.django_db
def test_workers_on_the_database_broker_look_for_tasks_ten_times_a_second(tmp_path: Path) -> None:
    """kombu's SQLAlchemy transport polls; its own 1 s put half a second on every hop of a submission."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("KPERF_")}
    base.update(DJANGO_SETTINGS_MODULE="kperf.settings", KPERF_HOME=str(tmp_path / "home"), KPERF_DEBUG="1")

    def interval(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", BROKER_OPTIONS], env={**base, **env}, capture_output=True, text=True, timeout=60
        )

    sqla = "sqla+postgresql+psycopg://postgres@127.0.0.1:5432/kperf"
    assert interval(CELERY_BROKER_URL=sqla).stdout.split() == ["0.1"]
    assert interval(CELERY_BROKER_URL=sqla, KPERF_BROKER_POLL_SECONDS="0.5").stdout.split() == ["0.5"]
    # Redis pushes (BRPOP): its transport never polls.
    assert interval(CELERY_BROKER_URL="redis://127.0.0.1:6379/0").stdout.split() == ["None"]
    # And a real worker's channel opens with it (the engine takes no polling argument).
    real = broker_url_for_database(database_url_for_tests())
    opened = subprocess.run(
        [sys.executable, "-c", BROKER_CHANNEL],
        env={**base, "CELERY_BROKER_URL": real},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert opened.stdout.split() == ["open"], opened.stderr
    refused = interval(CELERY_BROKER_URL=sqla, KPERF_BROKER_POLL_SECONDS="0")
    assert refused.returncode != 0
    assert "KPERF_BROKER_POLL_SECONDS=0.0 is outside 0.01 to 10 seconds" in refused.stderr, refused.stderr


def group_or_other_bits(root: Path) -> dict[str, str]:
    """Every folder under `root` (and itself) that another account could read or enter, with its mode."""
    found = {}
    for path in [root, *root.rglob("*")]:
        if path.is_dir() and not path.is_symlink() and path.stat().st_mode & 0o077:
            found[str(path.relative_to(root))] = oct(path.stat().st_mode & 0o777)
    return found


def test_a_fresh_home_s_folders_are_kperf_s_alone(tmp_path: Path) -> None:
    # The umask of a usual login (022): every folder made with it is world-readable unless kperf says otherwise.
    old = os.umask(0o022)
    try:
        proc = load_settings(tmp_path, KPERF_DEBUG="1")
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    home = tmp_path / "home"
    assert {p.name for p in home.iterdir()} >= {"mirrors", "builds", "artifacts", "static"}
    assert group_or_other_bits(home) == {}


def test_a_home_left_readable_by_an_older_kperf_is_closed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "mirrors").mkdir(parents=True)
    home.chmod(0o755)
    (home / "mirrors").chmod(0o755)
    assert load_settings(tmp_path, KPERF_DEBUG="1").returncode == 0
    assert group_or_other_bits(home) == {}
