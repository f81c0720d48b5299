"""`make up` (kperf-up) on embedded defaults: starts, serves, stops cleanly."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import requests

from kperf_testing.stack import running_stack


def cmdlines(procs: list[psutil.Process]) -> list[str]:
    """Command lines of the processes still there (short-lived helpers such as
    a compiler probe may exit between listing and reading)."""
    out = []
    for p in procs:
        try:
            out.append(" ".join(p.cmdline()))
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return out


def alive(p: psutil.Process) -> bool:
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def test_kperf_up_names_missing_tools_with_the_apt_command(tmp_path: Path) -> None:
    kperf_up = str(Path(sys.executable).parent / "kperf-up")
    env = dict(os.environ, PATH=str(tmp_path))  # nothing on PATH: every tool is missing
    proc = subprocess.run(
        [sys.executable, kperf_up, "--home", str(tmp_path / "home")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "missing" in proc.stderr and "qemu-system-x86_64" in proc.stderr
    assert "apt-get install" in proc.stderr and "qemu-system-x86" in proc.stderr and "flex" in proc.stderr


def test_kperf_up_refuses_a_port_another_program_serves_and_says_how_to_choose_another(tmp_path: Path) -> None:
    kperf_up = str(Path(sys.executable).parent / "kperf-up")
    with socket.create_server(("127.0.0.1", 0)) as other:
        port = other.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, kperf_up, "--home", str(tmp_path / "home"), "--port", str(port), "--no-runner"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "KPERF_PORT=" in proc.stderr, proc.stderr
    assert "kperf is ready" not in proc.stdout
    # Nothing was started: no database, no key.
    assert not (tmp_path / "home" / "pgdata").exists()


def test_kperf_up_refuses_a_mail_port_another_program_serves(tmp_path: Path) -> None:
    kperf_up = str(Path(sys.executable).parent / "kperf-up")
    with socket.create_server(("127.0.0.1", 0)) as web, socket.create_server(("127.0.0.1", 0)) as other:
        free, port = web.getsockname()[1], other.getsockname()[1]
        web.close()  # the web port is free; only the mail port is taken
        env = {k: v for k, v in os.environ.items() if k != "KPERF_SMTP_HOST"}
        env["KPERF_MAIL_LISTEN_PORT"] = str(port)
        proc = subprocess.run(
            [sys.executable, kperf_up, "--home", str(tmp_path / "home"), "--port", str(free), "--no-runner"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"cannot listen for mail on 127.0.0.1:{port}" in proc.stderr, proc.stderr
    assert "KPERF_MAIL_LISTEN_PORT" in proc.stderr and "KPERF_SMTP_HOST" in proc.stderr
    assert "kperf is ready" not in proc.stdout
    assert not (tmp_path / "home" / "pgdata").exists()


def test_kperf_up_refuses_two_vcpus_on_debian_12_s_qemu_with_the_commands_that_give_a_newer_one(
    tmp_path: Path,
) -> None:
    """Debian 12's QEMU 7.2 hangs a guest with several vCPUs on the instruction clock: said at once,
    with the backports source a stock Debian 12 lacks, not after the first submission's builds."""
    kperf_up = str(Path(sys.executable).parent / "kperf-up")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    qemu = bindir / "qemu-system-x86_64"
    qemu.write_text("#!/bin/sh\nprintf '%s\\n' 'QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)'\n")
    qemu.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    env.pop("KPERF_RUNNER_VCPUS", None)
    home = tmp_path / "home"
    with socket.create_server(("127.0.0.1", 0)) as free:
        port = free.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, kperf_up, "--home", str(home), "--port", str(port), "--vcpus", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith(
        "kperf-up: machine class qemu-x86_64 wants 2 vCPUs on the instruction clock, which needs QEMU 8.1 or later"
    ), proc.stderr
    assert f"{qemu} is 'QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)'" in proc.stderr
    assert proc.stderr.splitlines()[1:] == [
        "  echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/backports.list",
        "  apt-get update",
        "  apt-get install -t bookworm-backports qemu-system-x86",
        "or start with --vcpus 1 (KPERF_RUNNER_VCPUS=1): one vCPU, which any QEMU boots",
    ], proc.stderr
    # Nothing was started: no database, no logs, no key, no banner.
    assert "kperf is ready" not in proc.stdout
    assert not (home / "pgdata").exists() and not (home / "logs").exists()
    assert not (home / "secret_key").exists()


def test_kperf_up_runs_everything_on_embedded_defaults_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    # No DATABASE_URL, no broker: the embedded PostgreSQL and a broker inside it; no
    # secret key and no word on local trees, as on a user's machine.
    env = {"DATABASE_URL": "", "CELERY_BROKER_URL": "", "KPERF_SECRET_KEY": "", "KPERF_ALLOW_LOCAL_TREES": ""}
    with running_stack(tmp_path / "home", env) as stack:
        assert requests.get(f"{stack.url}/api/v1/health", timeout=10).json() == {"status": "ok"}
        # kperf-up made a secret key, kept where only its user reads it.
        assert (stack.home / "secret_key").stat().st_mode & 0o777 == 0o600
        # Clients stalled half-way through a request do not keep others waiting.
        port = int(stack.url.rsplit(":", 1)[1])
        stalled = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(10)]
        for s in stalled:
            s.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert requests.get(f"{stack.url}/api/v1/health", timeout=5).status_code == 200
        for s in stalled:
            s.close()
        # The web pages need a login, and the printed admin login works.
        page = requests.get(f"{stack.url}/", timeout=10, allow_redirects=False)
        assert page.status_code == 302 and "/accounts/login/" in page.headers["Location"]
        token = requests.post(
            f"{stack.url}/api/v1/auth/token",
            json={"username": stack.creds["admin_user"], "password": stack.creds["admin_password"]},
            timeout=10,
        )
        assert token.status_code == 201
        # `kperf login` with that password saves a token the other commands use.
        kperf = str(Path(sys.executable).parent / "kperf")
        cli_env = dict(os.environ, KPERF_CONFIG=str(tmp_path / "cli.json"))
        cli_env.pop("KPERF_TOKEN", None)
        cli_env.pop("KPERF_SERVER", None)
        login = subprocess.run(
            [kperf, "login", "--server", stack.url, "--user", stack.creds["admin_user"], "--password-stdin"],
            input=stack.creds["admin_password"] + "\n",
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert login.returncode == 0, login.stderr
        assert (tmp_path / "cli.json").stat().st_mode & 0o077 == 0
        listed = subprocess.run([kperf, "list"], env=cli_env, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        bad = subprocess.run(
            [kperf, "submit", "--tree", "ext::sh", "--branch", "x", "--base", "y"],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 2 and "transport" in bad.stderr
        # One local QEMU runner per core, each up and said hello: on the
        # instruction clock one runner's boots do not disturb another's.
        cores = len(os.sched_getaffinity(0))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runners = stack.api("GET", "/runners").json()
            if len(runners) == cores and all(r["last_heartbeat"] for r in runners):
                break
            time.sleep(1)
        local = ["local-qemu-x86_64", *(f"local-qemu-x86_64-{n}" for n in range(2, cores + 1))]
        assert [r["name"] for r in runners] == local, stack.log("runner")
        assert all(r["last_heartbeat"] for r in runners), stack.log("runner")
        assert {r["machine_class"] for r in runners} == {"qemu-x86_64"}
        assert {r["name"] for r in stack.creds["runners"]} == set(local)
        children = psutil.Process(stack.proc.pid).children(recursive=True)
        names = " ".join(cmdlines(children))
        # The local mailbox: mail goes to kperf's own listener, kept under HOME/mail.
        for part in ("-m kperf.web", "-Q builds", "-Q default,analysis", "beat", "kperf-runner", "mail_listener"):
            assert part in names, part
        pgdata = str(stack.home / "pgdata")
        assert any(pgdata in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))
        # A child that dies is started again, the rest keep serving, and the
        # log says so (a broker restart used to take the whole stack down).
        worker = next(
            c for c in children if "-Q default,analysis" in " ".join(c.cmdline()) and c.ppid() == stack.proc.pid
        )
        worker.kill()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            again = [
                c
                for c in psutil.Process(stack.proc.pid).children()
                if c.pid != worker.pid and alive(c) and any("-Q default,analysis" in line for line in cmdlines([c]))
            ]
            if again:
                break
            assert requests.get(f"{stack.url}/api/v1/health", timeout=10).status_code == 200
            time.sleep(0.5)
        assert again, stack.log("worker-main")
        assert "worker-main exited with status" in stack.log("worker-main")
        assert stack.proc.poll() is None
        children = psutil.Process(stack.proc.pid).children(recursive=True)
    assert stack.proc.returncode == 0
    time.sleep(1)
    assert not [c for c in children if alive(c)]
    # The builds worker (up all along; the main one was just restarted) stopped
    # its own pool: no pool process was signalled behind its back and logged
    # as an ERROR (what Ctrl-C printed, once per pool process).
    builds_log = stack.log("worker-builds")
    assert "Warm shutdown" in builds_log and "ERROR" not in builds_log.split("Warm shutdown")[-1], builds_log
    # The embedded PostgreSQL stopped too.
    assert not any(pgdata in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))


def test_kperf_up_with_remote_builders_runs_a_build_machine_that_holds_only_its_token(tmp_path: Path) -> None:
    env = {"DATABASE_URL": "", "CELERY_BROKER_URL": "", "KPERF_SECRET_KEY": "", "KPERF_BUILDERS": "remote"}
    with running_stack(tmp_path / "home", env, ["--no-runner"]) as stack:
        deadline = time.monotonic() + 60
        while True:
            children = psutil.Process(stack.proc.pid).children(recursive=True)
            builders = [c for c in children if any("kperf-builder run" in line for line in cmdlines([c]))]
            if builders or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert builders, stack.log("builder")
        assert not any("-Q builds" in line for line in cmdlines(children)), "the builds worker runs as well"
        environ = builders[0].environ()
        assert environ["KPERF_BUILDER_TOKEN"] == stack.creds["builder_token"]
        for secret in ("DATABASE_URL", "CELERY_BROKER_URL", "KPERF_SECRET_KEY"):
            assert secret not in environ, secret
        # It claims with its token and finds nothing to build: still running, no error.
        time.sleep(8)
        assert alive(builders[0]), stack.log("builder")
        assert "kperf-builder:" not in stack.log("builder") and "Traceback" not in stack.log("builder")
