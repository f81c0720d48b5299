"""Defaults a shared service can live with: no published secret key, no local trees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kperf.up import local_secret_key

from .conftest import Api

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
    proc = load_settings(tmp_path, KPERF_SECRET_KEY="a-real-and-long-random-value-0123456789")
    assert proc.returncode == 0, proc.stderr
    # Local trees off; ten failed logins, then a quarter of an hour.
    assert proc.stdout.split() == ["False", "10", "900"]
    proc = load_settings(
        tmp_path,
        KPERF_SECRET_KEY="another-real-key-0123456789",
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
