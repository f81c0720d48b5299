"""Run a kernel tree's build where it can reach nothing but its own files.

A kernel tree is a program written by whoever submitted it: its Makefiles,
Kconfig files and scripts run when it is built. The build therefore runs in
a bubblewrap sandbox (Debian's ``bubblewrap``, the sandbox Flatpak runs
untrusted applications in) with:

- an unprivileged user: when kperf runs as root, bwrap sets the sandbox up
  and ``setpriv`` then drops to a uid of its own (one of ``KPERF_BUILD_UIDS``
  from ``KPERF_BUILD_UID``, leased for the build: kperf_kbuild.build_uids)
  with every capability gone and no_new_privs set; as an ordinary user,
  bwrap's user namespace keeps the build at that user's rights;
- a scrubbed environment: only the variables the build needs, none of the
  worker's (no database URL, broker URL or secret key);
- no network: a network namespace of its own with only loopback;
- its own PID, IPC and UTS namespaces and /proc, so it sees no other
  process (and no other process's environment);
- a filesystem of read-only system directories (/usr, a few files of /etc,
  the Python that runs tuxmake), the checkout read-only but for new entries
  in its top directory, and writable only its object tree, its output
  directory, its scratch directories and its scope's ccache (see
  ``kperf_kbuild.driver`` for scopes);
- limits: per-process CPU time, address space and file size, processes of
  the build's own uid (rlimits, inherited across exec), and, watched from
  outside, wall time, disk written (everywhere it can write:
  kperf_kbuild.written) and log size.

``mode="off"`` runs the command directly, as before; it exists for a
developer's own laptop and is refused unless asked for by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kperf_kbuild.host import BuildInfraError

GiB = 1024**3
MiB = 1024**2

# The uid builds run as when kperf runs as root. Not 65534 ("nobody"):
# other daemons run as nobody, and a build must not share an rlimit count or
# file ownership with them. Any uid without a login and without files works.
DEFAULT_BUILD_UID = 64000
# How many uids from DEFAULT_BUILD_UID builds lease, one per running build
# (kperf_kbuild.build_uids): at least the builds one machine runs at once.
DEFAULT_BUILD_UIDS = 16
DEFAULT_BUILD_NICE = 10
_AUTOGROUP_SH = (
    "for try in 1 2 3 4 5 6 7 8 9 10; do "
    "{{ echo {nice} > /proc/self/autogroup; }} 2>/dev/null && break; sleep 0.1; done; "
    'exec "$@"'
)

# Read-only from the host: the toolchain and what the dynamic linker and
# tools read from /etc. Nothing else of /etc (no ssl keys, no service
# configuration, no shadow).
_SYSTEM_DIRS = ("/usr",)
_ETC_FILES = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
)
_TOP_LINKS = ("/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin")


# Variables a caller's environment may carry that would silently change the
# kernel build: make's jobserver plumbing when the caller itself runs under
# make (pytest from `make test`), and kbuild's own knobs.
SCRUBBED_ENV = (
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
    "MAKEOVERRIDES",
    "ARCH",
    "SRCARCH",
    "CROSS_COMPILE",
    "KBUILD_OUTPUT",
    "KCONFIG_CONFIG",
    "KCFLAGS",
    "KCPPFLAGS",
    "KAFLAGS",
    "LOCALVERSION",
    "KBUILD_BUILD_TIMESTAMP",
    "KBUILD_BUILD_USER",
    "KBUILD_BUILD_HOST",
    "KBUILD_BUILD_VERSION",
    "CCACHE_BASEDIR",
    "CCACHE_DIR",
    "CCACHE_STATSLOG",
)


@dataclass(frozen=True)
class Limits:
    """What one build may use. The rlimits are per process (CPU, memory,
    file size) or per build user (processes); wall time, disk and log size
    are watched by the driver, which stops the whole sandbox."""

    wall_seconds: float = 2.75 * 3600
    cpu_seconds: int = 2 * 3600
    memory_bytes: int = 8 * GiB
    processes: int = 4096
    file_bytes: int = 8 * GiB
    disk_bytes: int = 24 * GiB
    log_bytes: int = 64 * MiB
    # What a submitter's ccache scope may hold between builds (ccache's
    # max_size, then enforced by kperf_kbuild.ccache_scope after each build).
    ccache_scope_bytes: int = 2 * GiB


@dataclass(frozen=True)
class Sandbox:
    mode: str = "bwrap"
    # The first build uid; a running build leases its own among ``uids``
    # from here (kperf_kbuild.build_uids), and is then given with uids=1.
    uid: int = DEFAULT_BUILD_UID
    # Every build uid's group: what lets builds under different uids share
    # their scope's ccache (kperf_kbuild.ccache_scope).
    gid: int = DEFAULT_BUILD_UID
    uids: int = DEFAULT_BUILD_UIDS
    limits: Limits = field(default_factory=Limits)
    # A build is a batch job: below the web server, the analyses and the
    # database on a shared host, so that a page or a verdict does not wait
    # for a compiler (docs/operations.md, "CPU priority"). 0 to 19.
    nice: int = DEFAULT_BUILD_NICE

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Sandbox:
        """The policy from KPERF_BUILD_* variables (docs/security.md lists them)."""
        env = os.environ if environ is None else environ
        mode = env.get("KPERF_BUILD_SANDBOX", "bwrap").strip() or "bwrap"
        if mode not in ("bwrap", "off"):
            raise BuildInfraError(f"KPERF_BUILD_SANDBOX={mode!r}: use 'bwrap' (the default) or 'off'")
        defaults = Limits()

        def number(name: str, default: float) -> float:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise BuildInfraError(f"{name}={raw!r} is not a number") from None
            if value <= 0:
                raise BuildInfraError(f"{name}={raw!r} must be positive")
            return value

        limits = Limits(
            wall_seconds=number("KPERF_BUILD_WALL_SECONDS", defaults.wall_seconds),
            cpu_seconds=int(number("KPERF_BUILD_CPU_SECONDS", defaults.cpu_seconds)),
            memory_bytes=int(number("KPERF_BUILD_MAX_MEMORY_BYTES", defaults.memory_bytes)),
            processes=int(number("KPERF_BUILD_MAX_PROCESSES", defaults.processes)),
            file_bytes=int(number("KPERF_BUILD_MAX_FILE_BYTES", defaults.file_bytes)),
            disk_bytes=int(number("KPERF_BUILD_MAX_DISK_BYTES", defaults.disk_bytes)),
            log_bytes=int(number("KPERF_BUILD_MAX_LOG_BYTES", defaults.log_bytes)),
            ccache_scope_bytes=int(number("KPERF_CCACHE_SCOPE_MAX_BYTES", defaults.ccache_scope_bytes)),
        )
        uid = int(number("KPERF_BUILD_UID", DEFAULT_BUILD_UID))
        gid = int(number("KPERF_BUILD_GID", uid))
        uids = int(number("KPERF_BUILD_UIDS", DEFAULT_BUILD_UIDS))
        if uid + uids > 2**31:
            raise BuildInfraError(
                f"KPERF_BUILD_UID={uid} with KPERF_BUILD_UIDS={uids} passes the largest uid: choose a lower first uid"
            )
        return cls(mode=mode, uid=uid, gid=gid, uids=uids, limits=limits, nice=_build_nice(env))

    def with_limits(self, **changes: Any) -> Sandbox:
        return replace(self, limits=replace(self.limits, **changes))

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    @property
    def drops_to_uid(self) -> bool:
        """Whether the build runs as the build uid (only root can switch)."""
        return self.enabled and os.geteuid() == 0

    def check(self) -> None:
        """BuildInfraError naming what to install or set when the sandbox cannot run here."""
        if not self.enabled:
            return
        for tool, package in (("bwrap", "bubblewrap"), ("setpriv", "util-linux")):
            if shutil.which(tool) is None:
                raise BuildInfraError(
                    f"{tool} is missing: builds run untrusted code in a sandbox "
                    f"(apt-get install {package}; docs/security.md)"
                )
        if self.drops_to_uid and self.uid == 0:
            raise BuildInfraError("KPERF_BUILD_UID=0: builds must not run as root; choose an unused uid")

    def own(self, *paths: Path) -> None:
        """Give the writable places to whoever the build runs as: the build
        user when root switches to it; root itself with the sandbox off, so
        a cache once written by the build user does not turn read-only to
        root in tuxmake's own user namespace. An ordinary user owns them
        already."""
        if os.geteuid() != 0:
            return
        uid, gid = (self.uid, self.gid) if self.drops_to_uid else (0, 0)
        for top in paths:
            if not top.exists():
                continue
            st = top.stat()
            if st.st_uid == uid and st.st_gid == gid:
                continue
            for root, dirs, files in os.walk(top):
                for name in (*dirs, *files):
                    os.lchown(os.path.join(root, name), uid, gid)
            os.lchown(top, uid, gid)

    def command(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        readonly: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        writable_top: Sequence[Path] = (),
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, env) for subprocess: ``argv`` run in the sandbox with
        exactly ``env``, ``readonly`` and ``writable`` visible at their own
        paths, and ``writable_top`` directories in which the build may add
        entries but change none it finds. With the sandbox off: argv and
        env as given."""
        if not self.enabled:
            return list(argv), dict(env)
        binds = _filesystem(readonly, writable, writable_top)
        out = [
            "bwrap",
            "--die-with-parent",
            "--new-session",
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "kperf-build",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *binds,
            "--chdir",
            str(cwd),
            "--clearenv",
        ]
        if not self.drops_to_uid:
            # An ordinary user's bwrap needs its own user namespace; as root
            # the namespaces are made directly and setpriv drops below.
            out.insert(1, "--unshare-user")
        for name, value in env.items():
            out += ["--setenv", name, value]
        if self.drops_to_uid:
            out += self._drop_privileges()
        if self.nice > 0:
            # bwrap's --new-session starts a session, and with it a new
            # scheduler autogroup (sched_autogroup_enabled, on by default in
            # most distributions), whose weight, not the processes' nice
            # values, decides its share against the service's own processes.
            # So the build lowers its group's priority too, before it runs
            # anything; unprivileged writes are limited to one per 100 ms
            # machine-wide, hence the retries. No autogroups: nothing to do.
            out += ["/bin/sh", "-c", _AUTOGROUP_SH.format(nice=self.nice), "kperf-build"]
        out += list(argv)
        # bwrap itself runs with a minimal environment too: nothing of the
        # worker's reaches even the sandbox's setup.
        return out, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}

    def _drop_privileges(self) -> list[str]:
        """setpriv's words: the build uid, no groups, no capability, and none to be gained."""
        return [
            shutil.which("setpriv") or "/usr/bin/setpriv",
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]

    def make_runner(
        self, src: Path, env: Mapping[str, str], writable: Sequence[Path], watch: Sequence[Watched] = ()
    ) -> Callable[[list[str]], tuple[int, str]]:
        """(argv) -> (exit code, output), run in this sandbox like the
        kernel's build: kperf's benchmark modules are built with the tree's
        own Makefiles too."""

        def run(argv: list[str]) -> tuple[int, str]:
            lines: list[str] = []
            ran = self.run(
                argv, cwd=src, env=env, on_line=lines.append, readonly=[src / ".git"], writable=writable,
                writable_top=[src], watch=watch,
            )  # fmt: skip
            text = "\n".join(lines) + "\n"
            if ran.stopped:
                return 1, text + ran.stopped + "\n"
            return ran.returncode, text

        return run

    def nice_prefix(self) -> list[str]:
        """``nice`` before everything else, sandbox on or off: what the build
        starts inherits the priority (a preexec_fn is unsafe: the worker has threads)."""
        if self.nice <= 0:
            return []
        return [shutil.which("nice") or "/usr/bin/nice", "-n", str(self.nice), "--"]

    def rlimit_prefix(self) -> list[str]:
        """``prlimit`` with the per-process limits, put before bwrap so that
        everything the build starts (setpriv, tuxmake, make, gcc) inherits
        them. (prlimit rather than a preexec_fn: the worker has threads.)"""
        if not self.enabled:
            return []
        lim = self.limits
        out = [
            shutil.which("prlimit") or "/usr/bin/prlimit",
            f"--cpu={lim.cpu_seconds}",
            f"--as={lim.memory_bytes}",
            f"--fsize={lim.file_bytes}",
            "--core=0",
        ]
        if self.drops_to_uid:
            # Counted per real uid: root is exempt, the build user is not.
            out.append(f"--nproc={lim.processes}")
        return [*out, "--"]

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        on_line: Callable[[str], None],
        readonly: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        writable_top: Sequence[Path] = (),
        watch: Sequence[Watched] = (),
    ) -> Ran:
        """Run ``argv`` in the sandbox, feeding each output line to
        ``on_line``, and stop it whole when it passes a limit: wall time,
        the bytes under ``watch`` (what it wrote: a path's every byte, or
        what a callable counts), or its log size."""
        cmd, outer_env = self.command(
            argv, cwd=cwd, env=env, readonly=readonly, writable=writable, writable_top=writable_top
        )
        cmd = [*self.nice_prefix(), *self.rlimit_prefix(), *cmd]
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=outer_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                # Own process group: stopping it takes bwrap, and with it
                # (--die-with-parent, its own PID namespace) everything inside.
                start_new_session=True,
            )
        except OSError as exc:
            raise BuildInfraError(f"cannot start the build ({cmd[0]}: {exc})") from exc
        if self.nice > 0 and not self.enabled:
            # Its own session is its own autogroup (see command()); in the
            # sandbox the build lowers its inner one itself.
            lower_autogroup(proc.pid, self.nice)
        ran = Ran(returncode=0)
        lim = self.limits
        finished = threading.Event()

        def stop(reason: str) -> None:
            _stop(proc, ran, reason)

        guard = threading.Thread(
            target=_watchdog, args=(lim, watch, finished, stop), name="build-watchdog", daemon=True
        )
        guard.start()
        logged = 0
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                logged += len(raw)
                if logged > lim.log_bytes:
                    stop(
                        f"the build printed more than {lim.log_bytes / MiB:.0f} MiB of log and was "
                        f"stopped (KPERF_BUILD_MAX_LOG_BYTES)"
                    )
                    continue
                on_line(raw.decode("utf-8", "replace").rstrip("\n"))
            ran.returncode = proc.wait()
        except BaseException:
            stop("interrupted")
            proc.wait()
            raise
        finally:
            finished.set()
            guard.join()
        return ran


# What the disk limit counts: every byte under a path, or what a callable
# says the build added (kperf_kbuild.written: a shared directory's growth,
# a directory's new entries).
Watched = Path | Callable[[], int]


@dataclass
class Ran:
    returncode: int
    # Why kperf stopped the build ("" when it ended by itself).
    stopped: str = ""


def lower_autogroup(pid: int, nice: int) -> bool:
    """Give the scheduler autogroup of ``pid``'s session the nice value
    ``nice``: whether it took. False where the kernel has no autogroups; the
    process's own nice value still orders it within its group."""
    for _ in range(10):
        try:
            Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
            return True
        except BlockingIOError:
            time.sleep(0.1)  # unprivileged writers: one per 100 ms machine-wide
        except OSError:
            return False
    return False


def _build_nice(env: Mapping[str, str]) -> int:
    """KPERF_BUILD_NICE: an integer 0 (the worker's own priority) to 19 (the lowest)."""
    name = "KPERF_BUILD_NICE"
    raw = env.get(name, "").strip()
    if not raw:
        return DEFAULT_BUILD_NICE
    try:
        value = int(raw)
    except ValueError:
        raise BuildInfraError(
            f"{name}={raw!r} is not a whole number: use 0 (no change) to 19 (lowest priority)"
        ) from None
    if not 0 <= value <= 19:
        raise BuildInfraError(f"{name}={raw!r} is out of range: use 0 (no change) to 19 (lowest priority)")
    return value


def _stop(proc: subprocess.Popen[bytes], ran: Ran, reason: str) -> None:
    """Kill the whole sandbox (its process group), keeping the first reason given."""
    if not ran.stopped:
        ran.stopped = reason
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _watchdog(lim: Limits, watch: Sequence[Watched], finished: threading.Event, stop: Callable[[str], None]) -> None:
    """Until the build finishes: stop it past its wall time, or once what it wrote under ``watch`` passes its limit."""
    started = time.monotonic()
    next_disk = started
    while not finished.wait(1.0):
        now = time.monotonic()
        if now - started > lim.wall_seconds:
            stop(f"the build ran for more than {lim.wall_seconds:.0f} s and was stopped (KPERF_BUILD_WALL_SECONDS)")
            return
        if watch and now >= next_disk:
            used = sum(disk_usage(p) if isinstance(p, Path) else p() for p in watch)
            # A large tree takes a while to walk: look less often.
            next_disk = now + max(2.0, 10 * (time.monotonic() - now))
            if used > lim.disk_bytes:
                stop(
                    f"the build wrote {used / GiB:.1f} GiB, more than its limit of "
                    f"{lim.disk_bytes / GiB:.1f} GiB, and was stopped (KPERF_BUILD_MAX_DISK_BYTES)"
                )
                return


def disk_usage(path: Path) -> int:
    """Bytes allocated under ``path`` (symlinks not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def build_env(sandbox: Sandbox, tmp: Path) -> dict[str, str]:
    """The environment the tree's build runs with. In the sandbox: only
    what a kernel build needs, nothing of the worker's (its database and
    broker URLs, its secret key); without it, the worker's own minus the
    variables that would change the build."""
    if sandbox.enabled:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(tmp),
            "TMPDIR": str(tmp),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
        }
    else:
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    # English, untranslated compiler messages: error lines are parsed.
    # LOCALVERSION set (empty): the kernel's release string is made without
    # asking git whether the tree is at a tag (no "+"), so it is the same in
    # and out of the sandbox, where the repository is not visible.
    env.update(LC_ALL="C", LANG="C", LOCALVERSION="")
    return env


def python_paths() -> list[Path]:
    """What the interpreter running tuxmake needs to be visible: the
    virtualenv (sys.prefix) and the installation it was made from
    (sys.base_prefix), when they are not under /usr already."""
    paths: list[Path] = []
    for p in {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}:
        if p == Path("/usr") or Path("/usr") in p.parents:
            continue
        paths.append(p)
    return sorted(paths)


def _filesystem(readonly: Sequence[Path], writable: Sequence[Path], writable_top: Sequence[Path] = ()) -> list[str]:
    """bwrap's words for what the build sees: the system read-only, ``readonly`` and ``writable`` at their paths,
    ``writable_top`` writable with every entry it holds now read-only."""
    binds: list[str] = []
    mounts: list[tuple[str, str, str]] = []
    for top in _TOP_LINKS:
        path = Path(top)
        if path.is_symlink():
            binds += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            mounts.append(("--ro-bind", top, top))
    for d in _SYSTEM_DIRS:
        mounts.append(("--ro-bind", d, d))
    for f in _ETC_FILES:
        if os.path.lexists(f):
            mounts.append(("--ro-bind", f, f))
    for p in (*python_paths(), *readonly):
        mounts.append(("--ro-bind", str(p), str(p)))
    for p in writable:
        mounts.append(("--bind", str(p), str(p)))
    # The checkout: kconfig's merge_config.sh makes its temporary files in
    # the current directory, which tuxmake makes the checkout, so its top
    # directory stays writable; every entry already in it is mounted
    # read-only over itself, so that the build changes, renames or removes
    # none (a mount point cannot be), as root or not. What it adds there is
    # counted against its disk limit and removed after it (kperf_kbuild.written).
    ro = {str(p) for p in readonly}
    for adds_only in writable_top:
        mounts.append(("--bind", str(adds_only), str(adds_only)))
        for entry in sorted(os.listdir(adds_only)):
            path = adds_only / entry
            if str(path) not in ro and not path.is_symlink():
                mounts.append(("--ro-bind", str(path), str(path)))
    # /tmp would live in the sandbox's root tmpfs, in memory and outside
    # every limit: it is there but not writable; TMPDIR points into the
    # build's scratch directory (build_env), which the disk limit watches.
    binds += ["--perms", "0755", "--dir", "/tmp"]
    # bwrap makes missing parents of a mount point 0700 and root-owned,
    # which the build user could not cross: make them 0755 first.
    parents: set[str] = set()
    for _, _, dest in mounts:
        parents.update(str(p) for p in Path(dest).parents if str(p) != "/")
    covered = {dest for _, _, dest in mounts}
    for parent in sorted(parents - covered, key=lambda p: (p.count("/"), p)):
        if not any(parent.startswith(dest + "/") for dest in covered):
            binds += ["--perms", "0755", "--dir", parent]
    # A mount inside another mount's place must come after it.
    for kind, src, dest in sorted(mounts, key=lambda m: m[2].count("/")):
        binds += [kind, src, dest]
    return binds
