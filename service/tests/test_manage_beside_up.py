"""`kperf-manage` beside `make up`: the same database, broker and secret key, nothing set by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kperf import local_env, up

SHOW = (
    "from django.conf import settings; d = settings.DATABASES['default']; "
    "print(d['NAME'], d['HOST'], d['PORT'], settings.CELERY_BROKER_URL, settings.KPERF_ALLOW_LOCAL_TREES, "
    "settings.SECRET_KEY == open(settings.KPERF_HOME / 'secret_key').read().strip())"
)


def _bare_environment(home: Path) -> dict[str, str]:
    """A shell's environment: none of kperf's settings, only where make up's home is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KPERF_", "DATABASE_URL", "CELERY_"))}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env["KPERF_HOME"] = str(home)
    return env


def test_kperf_manage_reads_the_settings_kperf_up_gave_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    # kperf-up's own preparation, as main() does it, on a database given to it.
    for key in [k for k in os.environ if k.startswith("KPERF_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("DATABASE_URL", "postgres://kperf@127.0.0.1:5439/upsdb")
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    home.mkdir(mode=0o700)
    env, pg = up._environment(home)
    assert pg is None
    up.local_mail(env, home)
    local_env.write(home, env)
    assert (home / "manage.env").stat().st_mode & 0o777 == 0o600
    assert "KPERF_SECRET_KEY" not in (home / "manage.env").read_text()
    kperf_manage = str(Path(sys.executable).parent / "kperf-manage")
    bare = _bare_environment(home)
    check = subprocess.run([kperf_manage, "check"], env=bare, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr
    shown = subprocess.run(
        [kperf_manage, "shell", "-c", SHOW], env=bare, capture_output=True, text=True, timeout=120, check=True
    )
    # (Django's shell says first how many names it imported.)
    broker = env["CELERY_BROKER_URL"]
    assert shown.stdout.splitlines()[-1].split() == ["upsdb", "127.0.0.1", "5439", broker, "True", "True"]


def test_an_operator_s_database_url_wins_over_the_home_s(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    local_env.write(home, {"DATABASE_URL": "postgres://kperf@127.0.0.1:5439/upsdb", "KPERF_ALLOW_LOCAL_TREES": "1"})
    environ = {"KPERF_HOME": str(home), "DATABASE_URL": "postgres://x@db.example.org/lab"}
    local_env.load(environ)
    assert environ == {"KPERF_HOME": str(home), "DATABASE_URL": "postgres://x@db.example.org/lab"}
