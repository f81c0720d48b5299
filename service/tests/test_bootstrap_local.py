"""`make up`'s local accounts and class: the vCPUs and profile its guests boot with, and the tokens its runners keep."""

from __future__ import annotations

import io
import json
import os
import socket
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from kperf import up
from kperf.core.models import HostSpeed, MachineClass, Runner
from kperf.core.models.accounts import hash_token

pytestmark = pytest.mark.django_db


def test_make_up_sets_the_local_class_s_vcpus_only_when_asked(tmp_path: Path) -> None:
    creds = tmp_path / "credentials.json"

    def bootstrap(*extra: str) -> dict[str, object]:
        call_command("bootstrap_local", "--credentials-file", str(creds), "--runners", "2", *extra)
        loaded: dict[str, object] = json.loads(creds.read_text())
        return loaded

    first = bootstrap("--vcpus", "2")
    mclass = MachineClass.objects.get(name=first["machine_class"])
    assert mclass.vcpus == 2
    assert set(Runner.objects.filter(machine_class=mclass).values_list("name", flat=True)) == {
        "local-qemu",
        "local-qemu-2",
    }
    # Started again without the option: the class keeps what it was given.
    bootstrap()
    assert MachineClass.objects.get(pk=mclass.pk).vcpus == 2
    bootstrap("--vcpus", "0")
    assert MachineClass.objects.get(pk=mclass.pk).vcpus == 0


class _Started(Exception):
    """Raised where kperf-up would start its first child: what comes before is what is tested."""


class _InProcessStack(up.Stack):
    """kperf-up's stack running its management commands in this process, on the test database."""

    def manage(self, *args: str) -> str:
        if args[0] not in ("migrate", "collectstatic"):  # the test database is migrated already
            call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
        return ""

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        raise _Started(name)


def _up_until_first_child(tmp_path: Path, *argv: str) -> None:
    stack = _InProcessStack(tmp_path, {"CELERY_BROKER_URL": ""}, quiet=True)
    with pytest.raises(_Started):
        up._start(stack, up._parser().parse_args([*argv, "--home", str(tmp_path), "--runners", "1"]))


def test_make_up_sets_the_local_class_s_profile_from_the_option_or_kperf_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KPERF_PROFILE", raising=False)
    # --no-runner: whatever QEMU this host has (2 vCPUs on the instruction clock need 8.1; below).
    _up_until_first_child(tmp_path, "--profile", "mm", "--vcpus", "2", "--no-runner")
    mclass = MachineClass.objects.get(name="qemu-x86_64")
    assert (mclass.profile, mclass.vcpus) == ("mm", 2)
    # Started again without it: the class keeps its profile.
    _up_until_first_child(tmp_path, "--no-runner")
    assert MachineClass.objects.get(pk=mclass.pk).profile == "mm"
    monkeypatch.setenv("KPERF_PROFILE", "distro")
    _up_until_first_child(tmp_path, "--no-runner")
    assert MachineClass.objects.get(pk=mclass.pk).profile == "distro"


def test_kperf_up_measures_the_hosts_speed_before_it_starts_anything(tmp_path: Path) -> None:
    # A fresh lab's first ETAs rest on it (docs/eta.md, "A fresh lab"); each start measures again.
    _up_until_first_child(tmp_path)
    _up_until_first_child(tmp_path)
    assert [row.probe_seconds > 0 for row in HostSpeed.objects.all()] == [True, True]


def test_kperf_up_refuses_an_unknown_profile_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        up._parser().parse_args(["--profile", "huge"])
    assert "invalid choice: 'huge' (choose from 'tiny', 'mm', 'distro')" in capsys.readouterr().err


def test_changing_the_class_with_add_runner_keeps_a_running_runner_s_token(tmp_path: Path) -> None:
    creds = tmp_path / "credentials.json"
    call_command("bootstrap_local", "--credentials-file", str(creds), stdout=io.StringIO())
    local = json.loads(creds.read_text())
    runner = Runner.objects.get(name=local["runner_name"])
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "add_runner", runner.name, "--machine-class", local["machine_class"], "--arch", "x86_64",
        "--profile", "mm", "--vcpus", "2", stdout=out, stderr=err,
    )  # fmt: skip
    # The class changed; the runner's token (the one its process holds) still works.
    assert Runner.objects.get(pk=runner.pk).token_hash == hash_token(local["runner_token"])
    assert MachineClass.objects.get(pk=runner.machine_class_id).profile == "mm"
    assert out.getvalue() == ""
    assert "keeps its token (--rotate-token gives it a new one" in err.getvalue()
    # Asked for, the token is rotated and printed once.
    out = io.StringIO()
    call_command(
        "add_runner", runner.name, "--machine-class", local["machine_class"], "--arch", "x86_64", "--rotate-token",
        stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    token = out.getvalue().strip()
    assert token and token != local["runner_token"]
    assert Runner.objects.get(pk=runner.pk).token_hash == hash_token(token)


def test_kperf_up_refuses_an_unknown_kperf_profile_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KPERF_PROFILE", "huge")
    assert up.main(["--home", str(tmp_path / "home")]) == 1
    assert "kperf-up: KPERF_PROFILE='huge' is no profile: choose tiny, mm, distro" in capsys.readouterr().err
    assert not (tmp_path / "home").exists()


def test_the_local_admin_has_an_address_a_reply_is_believed_from_even_in_an_older_home(tmp_path: Path) -> None:
    # What an older make up made: replies from it were refused as "not a plain address".
    User.objects.create_superuser("admin", "admin@localhost", "old-password-1")
    call_command("bootstrap_local", "--credentials-file", str(tmp_path / "credentials.json"), stdout=io.StringIO())
    assert User.objects.get(username="admin").email == "admin@kperf.localhost"
    # An address the operator chose stays.
    User.objects.filter(username="admin").update(email="me@example.org")
    call_command("bootstrap_local", "--credentials-file", str(tmp_path / "credentials.json"), stdout=io.StringIO())
    assert User.objects.get(username="admin").email == "me@example.org"


OLD_QEMU = "QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)"


@pytest.fixture
def old_qemu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Debian 12's QEMU first on PATH, and no KPERF_RUNNER_VCPUS: the class's own vCPUs count."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    qemu = bindir / "qemu-system-x86_64"
    qemu.write_text(f"#!/bin/sh\nprintf '%s\\n' '{OLD_QEMU}'\n")
    qemu.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("KPERF_RUNNER_VCPUS", raising=False)
    return qemu


def test_kperf_up_refuses_a_class_that_kept_two_vcpus_before_its_first_child(tmp_path: Path, old_qemu: Path) -> None:
    # Given --vcpus 2 at an earlier start, and started again without it: the class keeps 2.
    MachineClass.objects.create(name="qemu-x86_64", arch="x86_64", vcpus=2)
    stack = _InProcessStack(tmp_path, {"CELERY_BROKER_URL": ""}, quiet=True)
    with pytest.raises(SystemExit) as refused:
        up._start(stack, up._parser().parse_args(["--home", str(tmp_path), "--runners", "1"]))
    message = str(refused.value)
    assert message.startswith("kperf-up: machine class qemu-x86_64 wants 2 vCPUs on the instruction clock"), message
    assert "apt-get install -t bookworm-backports qemu-system-x86" in message
    # What the next start checks before starting anything.
    creds = json.loads((tmp_path / "credentials.json").read_text())
    assert (creds["vcpus"], creds["clock"]) == (2, "instructions")
    # On the wall clock QEMU 7.2 boots several vCPUs: the stack starts.
    MachineClass.objects.filter(name="qemu-x86_64").update(clock="wall")
    _up_until_first_child(tmp_path)
    # One vCPU asked for: the stack starts, and the class keeps it.
    MachineClass.objects.filter(name="qemu-x86_64").update(clock="instructions")
    _up_until_first_child(tmp_path, "--vcpus", "1")
    assert MachineClass.objects.get(name="qemu-x86_64").vcpus == 1


def test_kperf_up_refuses_before_starting_anything_when_the_last_start_left_two_vcpus(
    tmp_path: Path, old_qemu: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    last = {"machine_class": "qemu-x86_64", "arch": "x86_64", "vcpus": 2, "clock": "instructions"}
    (home / "credentials.json").write_text(json.dumps(last))
    with socket.create_server(("127.0.0.1", 0)) as free:
        port = free.getsockname()[1]
    assert up.main(["--home", str(home), "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kperf-up: machine class qemu-x86_64 wants 2 vCPUs"), err
    assert f"{old_qemu} is '{OLD_QEMU}'" in err
    assert not (home / "pgdata").exists() and not (home / "logs").exists()
    # The x86_64 class's vCPUs are not the arm64 class's (checked once the database says what it has).
    assert up._local_class(home, up._parser().parse_args(["--arch", "arm64"])) == {}
    # With --no-runner no local guest boots and QEMU is not asked (this start stops at the web
    # port, taken here so that the test starts nothing).
    with socket.create_server(("127.0.0.1", port)):
        assert up.main(["--home", str(home), "--port", str(port), "--no-runner"]) == 1
    assert "cannot listen on" in capsys.readouterr().err
