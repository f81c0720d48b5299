from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest
from django.test import Client

from kperf.core.models import ApiToken, MachineClass, Runner


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def small_tree(tmp_path: Path) -> Path:
    """A tiny git repository with `master` and a `feature` branch (not a kernel)."""
    repo = tmp_path / "tree"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    git(repo, "config", "user.email", "dev@example.org")
    git(repo, "config", "user.name", "Dev")
    (repo / "README").write_text("base\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "tag", "v1")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "README").write_text("feature\n")
    git(repo, "commit", "-q", "-am", "feature")
    git(repo, "checkout", "-q", "master")
    return repo


@pytest.fixture(autouse=True)
def grid_boots_on_every_clock(settings: Any) -> None:
    """The service tests count boots as the quick grid gives them (4 per side)
    on the instruction-clock class they use; the default cap of 2 on that
    clock (benchmarks.boots_per_side) has tests of its own in test_boots_per_side.py."""
    settings.KPERF_INSTRUCTION_CLOCK_BOOTS = 99


@pytest.fixture(autouse=True)
def quick_password_hashes(settings: Any) -> None:
    """Users are made by the hundred here; production's 1,000,000 PBKDF2
    iterations would cost 0.3 s each (kperf_testing.hashers)."""
    settings.PASSWORD_HASHERS = ["kperf_testing.hashers.QuickPBKDF2PasswordHasher"]


@pytest.fixture
def settings_dirs(settings: Any, tmp_path: Path) -> Any:
    settings.KPERF_MIRROR_ROOT = tmp_path / "mirrors"
    settings.KPERF_BUILD_ROOT = tmp_path / "builds"
    settings.KPERF_ARTIFACT_ROOT = tmp_path / "artifacts"
    return settings


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", "alice@example.org", "alice-password-1")


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    """A lab admin: sees and changes everything, imports mmtests runs, tracks the reference series."""
    return django_user_model.objects.create_user("lab-admin", "admin@example.org", is_staff=True)


class AuthHeader(TypedDict, total=False):
    """The bearer token as Django's test client takes it: a WSGI environ key among its **extra."""

    HTTP_AUTHORIZATION: str


class Api:
    """Django's test client speaking JSON with a bearer token."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.token = token

    def _headers(self, token: str | None) -> AuthHeader:
        tok = token if token is not None else self.token
        return {"HTTP_AUTHORIZATION": f"Bearer {tok}"} if tok else {}

    def post(self, path: str, body: Any = None, token: str | None = None, raw: bytes | None = None) -> Any:
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(f"/api/v1{path}", data=data, content_type="application/json", **self._headers(token))

    def get(self, path: str, token: str | None = None) -> Any:
        return self.client.get(f"/api/v1{path}", **self._headers(token))

    def patch(self, path: str, body: Any, token: str | None = None) -> Any:
        return self.client.patch(
            f"/api/v1{path}", data=json.dumps(body), content_type="application/json", **self._headers(token)
        )


@pytest.fixture
def alice_api(alice: Any) -> Api:
    _, token = ApiToken.issue(alice)
    return Api(token)


@pytest.fixture
def staff_api(staff: Any) -> Api:
    _, token = ApiToken.issue(staff)
    return Api(token)


@pytest.fixture
def qemu_class(db: Any) -> MachineClass:
    return MachineClass.objects.create(name="qemu-x86_64", arch="x86_64")


def qemu_runner(name: str, mclass: MachineClass) -> tuple[Runner, Api]:
    """A runner that has said, as a TCG QEMU runner's heartbeat does, which clocks it gives."""
    runner, token = Runner.register(name, mclass)
    runner.capabilities = {"backends": ["qemu"], "clocks": ["instructions", "wall"]}
    runner.save(update_fields=["capabilities"])
    return runner, Api(token)


@pytest.fixture
def runner_api(qemu_class: MachineClass) -> tuple[Runner, Api]:
    return qemu_runner("qemu-1", qemu_class)


@pytest.fixture
def other_runner_api(qemu_class: MachineClass) -> tuple[Runner, Api]:
    return qemu_runner("qemu-2", qemu_class)


Cli = Callable[..., "subprocess.CompletedProcess[str]"]


def kperf_cli(server_url: str, api: Api, config: Path) -> Cli:
    """Run the installed `kperf` command against a live server as the API's user."""
    env = dict(os.environ, KPERF_SERVER=server_url, KPERF_TOKEN=api.token or "", KPERF_CONFIG=str(config))
    kperf = str(Path(sys.executable).parent / "kperf")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kperf, *args], env=env, capture_output=True, text=True, timeout=60)

    return cli


# Fixtures many modules share, from the fixture modules (no test module imports another); autouse
# ones are not here: a module that wants one imports it by name. Last in this file: the fixture
# modules import this one's helpers.
from tests.browser_fixtures import chromium  # noqa: E402, F401
from tests.finding_fixtures import finished  # noqa: E402, F401
from tests.mail_fixtures import smtp  # noqa: E402, F401
from tests.reply_fixtures import listener, sink  # noqa: E402, F401
from tests.series_fixtures import mbox, series_tree  # noqa: E402, F401
from tests.worker_fixtures import worker  # noqa: E402, F401
