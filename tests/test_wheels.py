"""Each package's wheel carries every file its code reads beside it.

Editable installs (`make venv`) read the checkout, so a template or config left out of a
package's data shows only when the package is installed from its wheel, on a lab's machine."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Project folder -> the package folder inside it whose tracked files a wheel must hold.
PACKAGES = {"service": "kperf", "runners": "kperf_runner", "kernel-builds": "kperf_kbuild"}


def _tracked(folder: Path) -> set[str]:
    listed = subprocess.run(["git", "ls-files", "."], cwd=folder, capture_output=True, text=True, check=True)
    return {name for name in listed.stdout.split() if not name.endswith(".py") and "/tests/" not in f"/{name}"}


def _wheel(project: str, source: Path, into: Path) -> Path:
    """The project's wheel, built into `into` from a copy at `source` without the checkout's build/
    and egg-info: setuptools would take files from an earlier build's leftovers, and write its own
    into the checkout."""
    shutil.copytree(ROOT / project, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(into), "."],
        cwd=source,
        check=True,
        capture_output=True,
    )
    [wheel] = into.glob(f"{PACKAGES[project]}-*.whl")
    return wheel


@pytest.mark.parametrize("project", sorted(PACKAGES))
def test_a_wheel_holds_every_file_its_package_tracks(project: str, tmp_path: Path) -> None:
    package = PACKAGES[project]
    wheel = _wheel(project, tmp_path / "source", tmp_path)
    shipped = {name.removeprefix(f"{package}/") for name in zipfile.ZipFile(wheel).namelist()}
    needed = _tracked(ROOT / project / package)
    assert needed, f"{project}/{package} tracks no data files: the test would check nothing"
    missing = sorted(needed - shipped)
    assert not missing, f"{project}'s wheel lacks {missing}: add them to package-data in {project}/pyproject.toml"


# Run inside a venv holding only the wheels: kperf must come from there, render a page from its
# templates and send a templated mail through a real SMTP server on loopback.
_INSTALLED_CHECK = r"""
import os, sys, email, email.policy
import django
import kperf
assert kperf.__file__.startswith(sys.prefix), f"kperf came from {kperf.__file__}, not the wheel in {sys.prefix}"
from aiosmtpd.controller import Controller

received = []

class Inbox:
    async def handle_DATA(self, server, session, envelope):
        received.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
        return "250 OK"

import socket
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
controller = Controller(Inbox(), hostname="127.0.0.1", port=port)
controller.start()
os.environ["KPERF_SMTP_HOST"], os.environ["KPERF_SMTP_PORT"] = "127.0.0.1", str(port)
django.setup()
from django.core.mail import EmailMessage
from django.test import Client
from kperf.core.mail import bodies

page = Client().get("/accounts/login/")
assert page.status_code == 200 and b"kperf" in page.content, (page.status_code, page.content[:300])
body = bodies.render("address_confirmation", name="alice", email="", base_url="http://kperf.test",
                     address="list@example.org", days=7, link="http://kperf.test/addresses/confirm/t")
EmailMessage("[kperf] confirm", body, "kperf@example.org", ["list@example.org"]).send()
controller.stop()
[mail] = received
assert "press Confirm (within 7 days)" in mail.get_content(), mail.get_content()
print("installed:", kperf.__file__)
"""


def test_the_wheels_installed_alone_render_a_page_and_send_a_mail(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    for project in sorted(PACKAGES):
        _wheel(project, tmp_path / "source" / project, wheels)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index"]
        + [str(w) for w in sorted(wheels.glob("*.whl"))],
        check=True,
        capture_output=True,
    )
    # The dependencies from the test venv's site-packages, added as a plain path: the editable
    # installs' .pth finders there are not run, so kperf itself can only come from the wheel.
    [site] = venv.glob("lib/python3*/site-packages")
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "kperf-test-deps.pth").write_text("\n".join(deps) + "\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "kperf.settings",
        "KPERF_DEBUG": "1",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",  # nothing here may need the database
        "KPERF_HOME": str(tmp_path / "home"),
    }
    run = subprocess.run(
        [str(python), "-c", _INSTALLED_CHECK], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"installed: {site}" in run.stdout, run.stdout
