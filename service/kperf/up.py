"""`kperf-up` (what `make up` runs): the whole service on one machine.

Starts, in order: PostgreSQL (embedded unless DATABASE_URL is set), the broker
(kombu's SQLAlchemy transport on that PostgreSQL unless CELERY_BROKER_URL is
set), migrations, the host speed probe (docs/eta.md), the web server, one Celery worker for the `builds` queue,
one for `default` and `analysis`, beat, the SMTP listener for replies to
alerts when asked (--mail-listener), and one local QEMU runner. Prints the
URL and credentials, then waits. Ctrl-C (or SIGTERM) stops the children in
reverse order and then the embedded database.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kperf import local_env
from kperf.conf import SECRET_KEY_RECIPE, secret_key_problem
from kperf.embedded import EmbeddedPostgres, broker_url_for_database, prepare_broker, start_postgres
from kperf.folders import private_dir
from kperf.web import command as web_command
from kperf_kbuild.profiles import PROFILES
from kperf_runner.backends.qemu_version import icount_smp_refusal

REPO_ROOT = Path(__file__).resolve().parent.parent.parent

# (what to look for, how to check, the Debian package that provides it)
_QEMU = {"x86_64": ("qemu-system-x86_64", "qemu-system-x86"), "arm64": ("qemu-system-aarch64", "qemu-system-arm")}
_HOST_ARCH = {"x86_64": "x86_64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def missing_tools(arch: str) -> list[tuple[str, str]]:
    """(what is missing, Debian package) for everything building and booting needs."""
    need: list[tuple[str, str]] = [
        ("git", "git"),
        ("gcc", "gcc"),
        ("make", "make"),
        ("flex", "flex"),
        ("bison", "bison"),
        ("bc", "bc"),
        ("ccache", "ccache"),
        ("cpio", "cpio"),
        # Builds run the submitted tree's code inside bubblewrap (docs/security.md).
        ("bwrap", "bubblewrap"),
        ("setpriv", "util-linux"),
        ("prlimit", "util-linux"),
    ]
    qemu, qemu_pkg = _QEMU[arch]
    need.append((qemu, qemu_pkg))
    if arch != _HOST_ARCH:
        cross = "aarch64-linux-gnu-gcc" if arch == "arm64" else "x86_64-linux-gnu-gcc"
        need.append((cross, "gcc-aarch64-linux-gnu" if arch == "arm64" else "gcc-x86-64-linux-gnu"))
    missing = [(tool, pkg) for tool, pkg in need if shutil.which(tool) is None]
    headers = [("/usr/include/libelf.h", "libelf-dev"), ("/usr/include/openssl/ssl.h", "libssl-dev")]
    missing += [(path, pkg) for path, pkg in headers if not Path(path).exists()]
    return missing


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes]
    log_path: Path
    restarts: int = 0
    started: float = 0.0
    # When a dead child is started again (monotonic), or 0 while it runs.
    restart_at: float = 0.0
    # The child's whole environment when it must not get the stack's (a build machine's holds only its token).
    env: dict[str, str] | None = None


# A child that dies is started again after a pause that doubles with each
# quick death, up to this; one that ran this long first starts from 1 s again.
RESTART_MAX_SECONDS = 60.0
HEALTHY_SECONDS = 120.0


class Stack:
    def __init__(self, home: Path, env: dict[str, str], quiet: bool) -> None:
        self.home = home
        self.env = env
        self.quiet = quiet
        self.children: list[Child] = []
        self.logs = home / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def manage(self, *args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "kperf.manage", *args], env=self.env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise SystemExit(f"kperf-up: `manage {' '.join(args)}` failed:\n{proc.stderr.strip() or proc.stdout}")
        return proc.stdout

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        child = Child(name, argv, None, self.logs / f"{name}.log", env=env)  # type: ignore[arg-type]
        self.children.append(self._spawn(child))

    def _spawn(self, child: Child) -> Child:
        name, argv, log_path = child.name, child.argv, child.log_path
        # Each child gets its own session so a Ctrl-C in the terminal reaches
        # only kperf-up, which then stops the children in a sensible order.
        proc = subprocess.Popen(
            argv, env=child.env or self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        assert proc.stdout is not None
        threading.Thread(target=self._pump, args=(name, proc.stdout, log_path), daemon=True).start()
        child.proc, child.started, child.restart_at = proc, time.monotonic(), 0.0
        return child

    def _pump(self, name: str, stream: IO[bytes], log_path: Path) -> None:
        with open(log_path, "ab") as log:
            for line in iter(stream.readline, b""):
                log.write(line)
                log.flush()
                if not self.quiet:
                    sys.stdout.write(f"[{name}] {line.decode(errors='replace')}")
                    sys.stdout.flush()

    def supervise(self) -> None:
        """Start again every child that died, with backoff, and say so (kperf-up's log and the child's)."""
        now = time.monotonic()
        for child in self.children:
            if child.proc.poll() is None:
                continue
            if not child.restart_at:
                ran = now - child.started
                if ran >= HEALTHY_SECONDS:
                    child.restarts = 0
                pause = min(RESTART_MAX_SECONDS, 2.0**child.restarts)
                child.restarts += 1
                child.restart_at = now + pause
                message = (
                    f"kperf-up: {child.name} exited with status {child.proc.returncode} after {ran:.0f} s; "
                    f"restarting it in {pause:.0f} s (restart {child.restarts}); see {child.log_path}"
                )
                print(message, file=sys.stderr, flush=True)
                with open(child.log_path, "a") as fh:
                    fh.write(message + "\n")
            elif now >= child.restart_at:
                self._spawn(child)
                print(f"kperf-up: {child.name} restarted (pid {child.proc.pid})", file=sys.stderr, flush=True)

    def stop(self) -> None:
        # SIGTERM to each child itself, not its process group: a Celery worker
        # then stops its own pool (a pool process signalled directly is
        # logged as an ERROR, three lines on every Ctrl-C), and a runner lets
        # its boot finish and hands the job back.
        for child in reversed(self.children):
            if child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.terminate()
        deadline = time.monotonic() + 20
        for child in reversed(self.children):
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
            # Whatever a child left behind in its group goes with it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.proc.pid, signal.SIGKILL)


def local_secret_key(home: Path) -> str:
    """The secret key of this home's service: made once, random, kept in HOME/secret_key (mode 0600).

    Kept rather than made anew at each start, so logins and sessions survive a restart.
    A key there that settings would refuse (empty, short, repetitive: an old
    version's, or one written by hand) is replaced, saying so.
    """
    path = home / "secret_key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text().strip()
        problem = secret_key_problem(key)
        if problem is None:
            return key
        print(
            f"kperf-up: the secret key in {path} {problem}: replaced it with a new random one "
            "(everyone signed in must sign in again)",
            file=sys.stderr,
            flush=True,
        )
        path.unlink()
        return local_secret_key(home)
    key = secrets.token_urlsafe(50)
    with os.fdopen(fd, "w") as fh:
        fh.write(key + "\n")
    return key


def wait_for_web(url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/api/v1/health", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


_BUILDER_ENV = ("PATH", "LANG", "LC_ALL", "HOME")


def start_builds(stack: Stack, celery_worker: list[str], url: str, builder_token: str) -> None:
    """The builds worker, or with KPERF_BUILDERS=remote a build machine holding only its token (docs/builders.md)."""
    if stack.env.get("KPERF_BUILDERS", "local").strip() != "remote":
        stack.start("worker-builds", [*celery_worker, "-Q", "builds", "-c", "1", "-n", "builds@%h", "-l", "INFO"])
        return
    env = {
        k: v for k, v in stack.env.items() if k in ("PATH", "LANG", "LC_ALL", "HOME") or k.startswith("KPERF_BUILD_")
    }
    env["KPERF_BUILDER_TOKEN"] = builder_token
    work = stack.home / "builder"
    ccache = stack.env.get("KPERF_CCACHE_DIR") or str(work / "ccache")
    argv = [str(Path(sys.executable).parent / "kperf-builder"), "run", "--server", url, "--work-dir", str(work)]
    stack.start("builder", [*argv, "--ccache-dir", ccache], env=env)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kperf-up", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--host", default=os.environ.get("KPERF_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("KPERF_PORT", "8000")))
    p.add_argument("--home", type=Path, default=Path(os.environ.get("KPERF_HOME", REPO_ROOT / ".kperf")))
    p.add_argument("--arch", default=os.environ.get("KPERF_RUNNER_ARCH", "x86_64"), choices=sorted(_QEMU))
    p.add_argument("--no-runner", action="store_true", help="do not start the local QEMU runners")
    p.add_argument(
        "--runners",
        type=int,
        default=int(os.environ.get("KPERF_RUNNERS", "0")) or None,
        metavar="N",
        help="local QEMU runners (default KPERF_RUNNERS, else one per core: on the instruction clock one runner's "
        "boots do not disturb another's; docs/quickstart.md)",
    )
    p.add_argument(
        "--vcpus",
        type=int,
        choices=(1, 2, 4),
        default=int(os.environ.get("KPERF_RUNNER_VCPUS", "0")) or None,
        metavar="N",
        help="vCPUs of the local runners' guests, 1, 2 or 4 (default KPERF_RUNNER_VCPUS, else as the class has it: "
        'one on the instruction clock; docs/kernels.md, "vCPUs")',
    )
    p.add_argument(
        "--profile",
        choices=PROFILES,
        default=os.environ.get("KPERF_PROFILE") or None,
        help="configuration profile the local class's kernels are built with, tiny, mm or distro (default "
        "KPERF_PROFILE, else as the class has it: tiny for a new one; docs/kernels.md). Its history restarts",
    )
    p.add_argument("--quiet", action="store_true", help="children's output only in HOME/logs/")
    p.add_argument(
        "--mail-listener",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("KPERF_MAIL_LISTEN", "").lower() in ("1", "true", "yes", "on"),
        help="also run the SMTP listener for replies to alerts, on KPERF_MAIL_LISTEN_HOST:KPERF_MAIL_LISTEN_PORT "
        "(default 127.0.0.1:8025; docs/triage.md); default from KPERF_MAIL_LISTEN",
    )
    return p


def _port_taken(host: str, port: int) -> str | None:
    """Why kperf-web could not listen on host:port, or None when it could (bound and let go at once)."""
    try:
        with socket.create_server((host, port)):
            return None
    except OSError as e:
        return e.strerror or str(e)


def _refusal(home: Path, arch: str, host: str, port: int) -> str | None:
    """What stops kperf-up before it starts anything: a weak key, a missing tool, a port in use."""
    given_key = os.environ.get("KPERF_SECRET_KEY")
    if given_key and (problem := secret_key_problem(given_key)):
        # Said once, first, rather than by every child failing to load its settings.
        return (
            f"kperf-up: KPERF_SECRET_KEY is too weak: it {problem}. Unset it and kperf-up keeps a random key "
            f"in {home / 'secret_key'}, or set a long random one: {SECRET_KEY_RECIPE}"
        )
    missing = missing_tools(arch)
    if missing:
        pkgs = " ".join(sorted({pkg for _, pkg in missing}))
        return (
            "kperf-up: missing " + ", ".join(tool for tool, _ in missing) + f"\ninstall them with:\n"
            f"  sudo apt-get install {pkgs}"
        )
    taken = _port_taken(host, port)
    if taken:
        # Started anyway, its health check would reach the other program and its
        # web server would restart in a loop; nothing of kperf would answer.
        return (
            f"kperf-up: cannot listen on {host}:{port}: {taken}. Another program (or another kperf-up) "
            f"serves there: stop it, or choose a free port with KPERF_PORT=8001 make up (or kperf-up --port 8001)"
        )
    return None


def qemu_refusal(arch: str, mclass: dict[str, Any]) -> str | None:
    """Why the local runners' QEMU cannot boot what the local class asks, or None.

    Several vCPUs on the instruction clock need QEMU 8.1 (docs/runners.md);
    Debian 12's is 7.2. Said before anything starts, rather than by every
    job failing as infrastructure after its kernels were built.
    """
    if (mclass.get("clock") or "instructions") != "instructions":
        return None
    name = mclass.get("machine_class") or f"qemu-{arch}"
    try:
        refusal = icount_smp_refusal(_QEMU[arch][0], arch, int(mclass.get("vcpus") or 0), f"machine class {name}")
    except RuntimeError as error:
        return f"kperf-up: {error}"
    if refusal is None:
        return None
    return f"kperf-up: {refusal}\nor start with --vcpus 1 (KPERF_RUNNER_VCPUS=1): one vCPU, which any QEMU boots"


def _local_class(home: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The local class as the last start left it (credentials.json), with this start's --vcpus; a
    new one is on the instruction clock with the runner's default vCPUs."""
    creds = home / "credentials.json"
    last: dict[str, Any] = json.loads(creds.read_text()) if creds.exists() else {}
    if last.get("arch", "x86_64") != args.arch:
        last = {}  # another architecture's class: this one's is new, or as the database has it
    mclass: dict[str, Any] = {key: last[key] for key in ("machine_class", "vcpus", "clock") if key in last}
    if args.vcpus:
        mclass["vcpus"] = args.vcpus
    return mclass


def local_mail(env: dict[str, str], home: Path) -> bool:
    """Mail out of the box: without KPERF_SMTP_HOST, kperf mails its own listener, which keeps every
    mail in HOME/mail and reads replies to alerts (docs/alerts.md, "Mail on a laptop")."""
    if env.get("KPERF_SMTP_HOST"):
        return False
    host = env.setdefault("KPERF_MAIL_LISTEN_HOST", "127.0.0.1")
    port = env.setdefault("KPERF_MAIL_LISTEN_PORT", "8025")
    env["KPERF_SMTP_HOST"], env["KPERF_SMTP_PORT"] = host, port
    env.setdefault("KPERF_MAIL_DOMAIN", "localhost")
    if not env.get("KPERF_MAIL_AUTHSERV_ID"):
        # Only this machine can reach the listener: a reply is the local user's.
        env.setdefault("KPERF_MAIL_ACCEPT_UNAUTHENTICATED", "1")
    env["KPERF_MAIL_LOCAL_MAILDIR"] = str(home / "mail")
    print(
        f"kperf-up: mail stays on this machine: alerts land in {home / 'mail'} (`kperf mail list`, "
        "`kperf mail reply N '#kperf expected: why'`); KPERF_SMTP_HOST sends it out instead",
        flush=True,
    )
    return True


def _environment(home: Path) -> tuple[dict[str, str], EmbeddedPostgres | None]:
    """The children's environment, with the embedded PostgreSQL (and the broker in it) when none is given."""
    env = dict(os.environ)
    env["KPERF_HOME"] = str(home)
    env.setdefault("DJANGO_SETTINGS_MODULE", "kperf.settings")
    # This stack's runners are a few, on loopback: an idle one claims every
    # second, not every 5 (a lab's default, sized for 50 runners). Waiting for
    # the next claim after the builds and after each look was most of a
    # submission's time beyond its builds and boots (bench/turnaround.py).
    env.setdefault("KPERF_RUNNER_POLL_SECONDS", "1")
    if not env.get("KPERF_SECRET_KEY"):
        env["KPERF_SECRET_KEY"] = local_secret_key(home)
    if not env.get("KPERF_ALLOW_LOCAL_TREES"):
        # This service is the local user's own: let them submit the trees on their disk.
        env["KPERF_ALLOW_LOCAL_TREES"] = "1"
        print(
            "kperf-up: local trees (paths, file:// URLs) are allowed, for you alone on this machine; "
            "KPERF_ALLOW_LOCAL_TREES=0 turns them off",
            flush=True,
        )
    if os.geteuid() == 0:
        # Celery's long warning about root is silenced (kperf.celery); this is the part that matters.
        print(
            "kperf-up: running as root: the build worker compiles the trees you submit with root's rights; "
            "run `make up` as an ordinary user where you can",
            flush=True,
        )
    pg: EmbeddedPostgres | None = None
    if not env.get("DATABASE_URL"):
        print(f"kperf-up: no DATABASE_URL, starting embedded PostgreSQL in {home / 'pgdata'}", flush=True)
        pg = start_postgres(home / "pgdata")
        env["DATABASE_URL"] = pg.database_url
    if not env.get("CELERY_BROKER_URL"):
        if pg is None:
            env["CELERY_BROKER_URL"] = broker_url_for_database(env["DATABASE_URL"])
        else:
            env["CELERY_BROKER_URL"] = pg.broker_url
        print("kperf-up: no CELERY_BROKER_URL, queueing tasks in PostgreSQL", flush=True)
    return env, pg


def _start(stack: Stack, args: argparse.Namespace) -> tuple[str, dict[str, Any], Path]:
    """Migrate, set up the local accounts, start every child; (URL, credentials, their file)."""
    stack.manage("migrate", "--noinput")
    stack.manage("collectstatic", "--noinput")
    # This host builds and boots: its speed gives a fresh lab its first ETAs (docs/eta.md, "A fresh lab").
    stack.manage("measure_host_speed")
    prepare_broker(stack.env.get("CELERY_BROKER_URL", ""))
    creds_file = stack.home / "credentials.json"
    runner_name = f"local-qemu-{args.arch}"
    stack.manage(
        "bootstrap_local", "--credentials-file", str(creds_file), "--arch", args.arch, "--runner-name", runner_name,
        "--runners", str(local_runners(args)), *(["--vcpus", str(args.vcpus)] if args.vcpus else []),
        *(["--profile", args.profile] if args.profile else []),
    )  # fmt: skip
    creds = json.loads(creds_file.read_text())
    # The class as stored, which a start without --vcpus, or add_runner, may have changed.
    if not args.no_runner and (refusal := qemu_refusal(args.arch, creds)):
        raise SystemExit(refusal)
    url = f"http://{args.host}:{args.port}"
    bindir = Path(sys.executable).parent
    celery = [str(bindir / "celery"), "-A", "kperf"]
    # Gossip, mingle and the worker heartbeat talk to other workers over
    # the broker; kperf needs none of them, so they are off. (What made a
    # Redis restart crash workers is fixed in kperf.celery.RedisChannel.)
    solo = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    # waitress: a client that stalls mid-request cannot tie up the server (kperf.web).
    stack.start("web", web_command(args.host, args.port))
    start_builds(stack, [*celery, "worker", *solo], url, creds["builder_token"])
    stack.start(
        "worker-main", [*celery, "worker", *solo, "-Q", "default,analysis", "-c", "2", "-n", "main@%h", "-l", "INFO"]
    )
    stack.start("beat", [*celery, "beat", "-l", "INFO", "-s", str(stack.home / "celerybeat-schedule")])
    if args.mail_listener:
        # Replies to alerts triage (docs/triage.md); the site's MTA forwards kperf+*@domain here.
        stack.start("mail-listener", [sys.executable, "-m", "kperf.manage", "mail_listener"])
    if not wait_for_web(url, 60):
        raise SystemExit(f"kperf-up: the web server did not answer on {url} within 60 s; see {stack.logs}/web.log")
    if not args.no_runner:
        for n, local in enumerate(creds["runners"], start=1):
            suffix = "" if n == 1 else f"-{n}"
            runner = [str(bindir / "kperf-runner"), "run", "--server", url, "--token", local["token"]]
            runner += ["--name", local["name"], "--arch", args.arch, "--machine-class", creds["machine_class"]]
            state = stack.home / f"runner{suffix}"
            stack.start(f"runner{suffix}", [*runner, "--backend", "qemu", "--state-dir", str(state)])
    return url, creds, creds_file


def local_runners(args: argparse.Namespace) -> int:
    """How many local QEMU runners: --runners, else one per core the host lets kperf use."""
    if args.runners:
        return max(1, int(args.runners))
    return max(1, len(os.sched_getaffinity(0)))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.profile and args.profile not in PROFILES:
        # argparse checks --profile's choices, never a default taken from the environment.
        print(f"kperf-up: KPERF_PROFILE={args.profile!r} is no profile: choose {', '.join(PROFILES)}", file=sys.stderr)
        return 1
    # Readable by kperf alone (kperf.folders): every submitted tree is in it.
    home = private_dir(args.home.resolve())
    refusal = _refusal(home, args.arch, args.host, args.port)
    if not refusal and not args.no_runner:
        refusal = qemu_refusal(args.arch, _local_class(home, args))
    if refusal:
        print(refusal, file=sys.stderr)
        return 1
    if not os.environ.get("KPERF_SMTP_HOST"):
        mail_host = os.environ.get("KPERF_MAIL_LISTEN_HOST", "127.0.0.1")
        mail_port = int(os.environ.get("KPERF_MAIL_LISTEN_PORT", "8025"))
        if taken := _port_taken(mail_host, mail_port):
            print(
                f"kperf-up: cannot listen for mail on {mail_host}:{mail_port}: {taken}. Stop what serves there, "
                "choose another port with KPERF_MAIL_LISTEN_PORT, or send mail out with KPERF_SMTP_HOST",
                file=sys.stderr,
            )
            return 1
    env, pg = _environment(home)
    args.mail_listener = local_mail(env, home) or args.mail_listener
    # kperf-manage typed beside this stack reads the same settings (kperf.local_env).
    local_env.write(home, env)
    stack = Stack(home, env, args.quiet)
    stopping = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        url, creds, creds_file = _start(stack, args)
        print(
            f"""
kperf is ready: {url}
  log in as      {creds["admin_user"]} / {creds["admin_password"]}
  API token      {creds["api_token"]}
  runners        {", ".join(r["name"] for r in creds["runners"])} ({creds["machine_class"]})
  credentials    {creds_file}
  logs           {stack.logs}/
  CLI            .venv/bin/kperf login --server {url}
Ctrl-C stops everything.
""",
            flush=True,
        )
        while not stopping.is_set():
            # A child that died (a broker or database restart, a crash) is
            # started again; the rest of the stack keeps serving meanwhile.
            stack.supervise()
            stopping.wait(1.0)
        print("kperf-up: stopping", flush=True)
        return 0
    finally:
        stack.stop()
        if pg is not None:
            pg.stop()


if __name__ == "__main__":
    sys.exit(main())
