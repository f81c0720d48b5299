"""A kernel tree is a stranger's program: hostile trees, built through the
real driver, tuxmake and bwrap, are contained.

Each tree here is a git repository whose top-level Makefile does one
hostile thing for every target tuxmake asks for (the config step is the
first). The worker's environment carries canary secrets; the build must
fail with a clear message for its submitter, leak nothing, and leave
nothing behind.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from kperf_kbuild.driver import BuildRequest, BuildResult, build_kernel
from kperf_kbuild.sandbox import Sandbox

CANARY = "kperf-canary-" + "s3cr3t" * 4


def hostile_tree(root: Path, recipe: str) -> tuple[Path, str]:
    """A one-commit repository whose Makefile runs ``recipe`` for any target."""
    repo = root / "tree"
    repo.mkdir()
    # "@": make must not echo the commands, or their text would pass for their output.
    body = "\n".join("\t@" + line.strip() for line in recipe.strip().splitlines())
    (repo / "Makefile").write_text(f"%::\n{body}\n")
    # What tuxmake checks before it calls a directory a kernel tree.
    (repo / "Kconfig").write_text("")
    (repo / "Kbuild").write_text("")
    (repo / "mm").mkdir()
    (repo / "mm" / "page_alloc.c").write_text("/* the allocator */\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@example.org"}
    env.update(GIT_COMMITTER_NAME="x", GIT_COMMITTER_EMAIL="x@example.org")
    for argv in (
        ["init", "-q"],
        ["add", "Makefile", "Kconfig", "Kbuild", "mm/page_alloc.c"],
        ["commit", "-q", "-m", "hostile"],
    ):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env)
    sha = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return repo, sha


def build(root: Path, recipe: str, sandbox: Sandbox | None = None) -> BuildResult:
    repo, sha = hostile_tree(root, recipe)
    req = BuildRequest(
        repo=repo,
        sha=sha,
        arch="x86_64",
        work_root=root / "work",
        output_dir=root / "out",
        ccache_dir=root / "ccache",
        jobs=1,
        sandbox=sandbox or Sandbox.from_environ().with_limits(wall_seconds=120),
    )
    return build_kernel(req)


def full_log(result: BuildResult, root: Path) -> str:
    log = root / "out" / "build.log"
    return result.log_tail + "\n" + (log.read_text(errors="replace") if log.exists() else "")


@pytest.fixture(autouse=True)
def worker_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a build worker's environment holds.
    monkeypatch.setenv("KPERF_SECRET_KEY", CANARY)
    monkeypatch.setenv("DATABASE_URL", f"postgres://kperf:{CANARY}@127.0.0.1:5432/kperf")
    monkeypatch.setenv("CELERY_BROKER_URL", f"redis://:{CANARY}@127.0.0.1:6379/0")


def sandbox_processes(marker: str) -> list[int]:
    """Processes of this test's build still running as a build uid (none may outlive a build).

    Only those whose command line holds `marker`: other builds of the same
    user may run on this machine at the same time (a bench, a second test
    run), and they are not this build's leftovers.
    """
    policy = Sandbox.from_environ()
    # Each running build has a uid of its own among these (kperf_kbuild.build_uids).
    uids = range(policy.uid, policy.uid + policy.uids)
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids and marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_makefile_that_prints_the_environment_sees_no_secret(tmp_path: Path) -> None:
    result = build(tmp_path, "env; echo ENV-PRINTED; exit 1")
    log = full_log(result, tmp_path)
    assert "ENV-PRINTED" in log and "PATH=" in log
    assert CANARY not in log
    assert "DATABASE_URL" not in log and "KPERF_SECRET_KEY" not in log
    assert not result.ok and result.error


def test_a_makefile_cannot_read_the_service_s_home_its_code_or_the_worker_s_files(tmp_path: Path) -> None:
    """The kperf home holds the admin's and the runners' credentials and every user's mirror; the
    service's code and the repository beside the build's interpreter are no business of a build either."""
    home = tmp_path / "kperf-home"
    (home / "mirrors").mkdir(parents=True)
    (home / "credentials.json").write_text(CANARY)
    repo_root = Path(__file__).resolve().parents[2]
    # `make up`'s home is the repository's .kperf; the build's interpreter is the repository's .venv, bound
    # alone (and kperf_kbuild for its config fragments), so the repository itself shows only those.
    targets = [
        home / "credentials.json",
        home / "mirrors",
        repo_root / ".kperf",
        repo_root / "service" / "kperf" / "settings.py",
        repo_root / "service",
    ]
    recipe = "\n".join(f"cat {t} || ls -a {t} || echo MISSING {t}" for t in targets) + "\necho READ-DONE; exit 1"
    result = build(tmp_path, recipe)
    log = full_log(result, tmp_path)
    assert "READ-DONE" in log
    assert CANARY not in log
    for target in targets:
        # Not there at all in the build's view: neither readable nor listable.
        assert f"MISSING {target}" in log, (target, log[-3000:])
    assert "DATABASES" not in log and "SECRET_KEY" not in log
    assert not result.ok


def test_a_makefile_that_reads_every_process_environment_sees_only_its_own(tmp_path: Path) -> None:
    recipe = """
    for f in /proc/[0-9]*/environ; do echo "== $$f"; tr '\\0' '\\n' < $$f; done; true
    echo "PIDS: $$(ls -d /proc/[0-9]* | wc -l)"
    cat /proc/1/cmdline | tr '\\0' ' '; echo
    exit 1
    """
    result = build(tmp_path, recipe)
    log = full_log(result, tmp_path)
    assert "PIDS:" in log
    assert CANARY not in log
    # Its own PID namespace: a handful of its own processes, not the host's.
    pids = int(log.split("PIDS:")[1].split()[0])
    assert pids < 20, log
    assert not result.ok


def test_a_makefile_cannot_reach_the_database_port_or_any_address(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    recipe = f"""
    (exec 3<>/dev/tcp/127.0.0.1/{port}) && echo CONNECTED-LISTENER || echo REFUSED-LISTENER
    (exec 3<>/dev/tcp/127.0.0.1/5432) && echo CONNECTED-DB || echo REFUSED-DB
    ls /run/postgresql /var/run/postgresql 2>&1 | head -3
    exit 1
    """
    try:
        result = build(tmp_path, recipe)
    finally:
        stop.set()
        thread.join()
        listener.close()
    log = full_log(result, tmp_path)
    assert "REFUSED-LISTENER" in log and "REFUSED-DB" in log
    assert "CONNECTED-" not in log
    assert accepted == []
    assert ".s.PGSQL" not in log


def test_a_makefile_cannot_write_outside_its_object_tree(tmp_path: Path) -> None:
    outside = tmp_path / "outside-canary"
    ccache_other = tmp_path / "other-cache"
    ccache_other.mkdir()
    recipe = f"""
    echo x > {outside} && echo WROTE-OUTSIDE || echo DENIED-OUTSIDE
    echo x >> $(CURDIR)/Makefile && echo WROTE-MAKEFILE || echo DENIED-MAKEFILE
    mv $(CURDIR)/Kconfig $(CURDIR)/Kconfig.old && echo WROTE-RENAME || echo DENIED-RENAME
    echo x > $(CURDIR)/mm/planted.c && echo WROTE-SUBDIR || echo DENIED-SUBDIR
    echo x > $(CURDIR)/.git && echo WROTE-GIT || echo DENIED-GIT
    echo x > {ccache_other}/planted && echo WROTE-OTHER || echo DENIED-OTHER
    echo x > /usr/planted && echo WROTE-USR || echo DENIED-USR
    ls /root /home /etc/ssh /etc/shadow 2>&1 | head -5
    exit 1
    """
    result = build(tmp_path, recipe)
    log = full_log(result, tmp_path)
    places: tuple[str, ...] = ("OUTSIDE", "OTHER", "USR")
    if os.geteuid() == 0:
        # As root the build runs as the build uid: the checkout's own files
        # are root's (the sticky top directory only lets it add its own).
        places += ("MAKEFILE", "RENAME", "SUBDIR", "GIT")
    else:
        places += ("GIT",)
    for place in places:
        assert f"DENIED-{place}" in log, log
        assert f"WROTE-{place}" not in log
    assert not outside.exists()
    assert not list(ccache_other.iterdir())
    assert not Path("/usr/planted").exists()


def test_planted_symlinks_are_never_followed_by_the_worker(tmp_path: Path) -> None:
    """Outputs the build replaced by symlinks are neither read (a secret
    copied into the submitter's artifacts) nor written through (root
    overwriting a file of its choice)."""
    secret = tmp_path / "worker-secret"
    secret.write_text(CANARY)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    recipe = f"""
    ln -sf {secret} $(O)/.config
    ln -sf {secret} $(O)/System.map
    ln -sf {victim} $(O)/kperf-unmet-options
    ln -sf {victim} {tmp_path}/out/build.log
    ln -sf {secret} {tmp_path}/out/config
    ln -sf {secret} {tmp_path}/out/bzImage
    echo made-links
    exit 1
    """
    repo, sha = hostile_tree(tmp_path, recipe)
    out = tmp_path / "out"
    out.mkdir()
    req = BuildRequest(
        repo=repo,
        sha=sha,
        arch="x86_64",
        work_root=tmp_path / "work",
        output_dir=out,
        ccache_dir=tmp_path / "ccache",
        jobs=1,
        sandbox=Sandbox.from_environ().with_limits(wall_seconds=120),
    )
    result = build_kernel(req)
    assert "made-links" in result.log_tail
    assert victim.read_text() == "untouched"
    assert CANARY not in result.log_tail and CANARY not in result.error
    # The build log is kperf's own, the planted config and image are left out.
    assert not (out / "build.log").is_symlink() and "made-links" in (out / "build.log").read_text()
    assert "config" not in result.artifacts and "kernel" not in result.artifacts
    for path in result.artifacts.values():
        assert not path.is_symlink()
        assert CANARY not in path.read_text(errors="replace")


@pytest.mark.skipif(os.geteuid() != 0, reason="the process limit is enforced per build uid, which needs root")
def test_a_fork_bomb_is_stopped_and_leaves_no_process(tmp_path: Path) -> None:
    sandbox = Sandbox.from_environ().with_limits(wall_seconds=20, processes=256)
    started = time.monotonic()
    # $0 of the bomb's shell, which every fork of it keeps in its command line.
    result = build(tmp_path, "bash -c 'b() { b | b & }; b' kperf-fork-bomb; sleep 5; exit 1", sandbox)
    assert not result.ok
    assert time.monotonic() - started < 90
    deadline = time.monotonic() + 10
    while sandbox_processes("kperf-fork-bomb") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sandbox_processes("kperf-fork-bomb") == []
    # The host still forks.
    assert subprocess.run(["true"], check=False).returncode == 0


def test_a_build_that_fills_the_disk_is_stopped_at_its_limit(tmp_path: Path) -> None:
    sandbox = Sandbox.from_environ().with_limits(wall_seconds=120, disk_bytes=64 * 1024**2)
    recipe = "i=0; while true; do i=$$((i+1)); dd if=/dev/zero of=$(O)/fill$$i bs=1M count=8 2>/dev/null; done"
    result = build(tmp_path, recipe, sandbox)
    assert not result.ok
    assert "KPERF_BUILD_MAX_DISK_BYTES" in result.error and "wrote" in result.error


def test_a_build_that_runs_forever_is_stopped_at_its_wall_limit(tmp_path: Path) -> None:
    sandbox = Sandbox.from_environ().with_limits(wall_seconds=5)
    started = time.monotonic()
    result = build(tmp_path, "sleep 3600.25", sandbox)
    assert time.monotonic() - started < 60
    assert not result.ok
    assert "ran for more than 5 s" in result.error and "KPERF_BUILD_WALL_SECONDS" in result.error
    assert sandbox_processes("3600.25") == [] or os.geteuid() != 0


def test_a_build_that_floods_its_log_is_stopped(tmp_path: Path) -> None:
    sandbox = Sandbox.from_environ().with_limits(wall_seconds=120, log_bytes=1024**2)
    result = build(tmp_path, "yes 'a line of log that never ends'", sandbox)
    assert not result.ok
    assert "KPERF_BUILD_MAX_LOG_BYTES" in result.error


@pytest.mark.parametrize("setting, expected", [(None, 10), ("15", 15), ("0", 0)])
def test_a_build_runs_below_the_service_s_cpu_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None, expected: int
) -> None:
    # The web server and the analyses keep their share of a shared host's
    # CPU while a kernel compiles (docs/operations.md, "CPU priority").
    # (The test run sets 0 for its own builds: kperf_testing.plugin.)
    if setting is None:
        monkeypatch.delenv("KPERF_BUILD_NICE", raising=False)
    else:
        monkeypatch.setenv("KPERF_BUILD_NICE", setting)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    result = build(tmp_path, 'echo "NICENESS: $$(nice)"; echo "AUTOGROUP: $$(cat /proc/self/autogroup)"; exit 1')
    log = full_log(result, tmp_path)
    assert "NICENESS:" in log, log
    assert int(log.split("NICENESS:")[1].split()[0]) == min(19, own + expected)
    if _autogroups():
        # Its session's scheduler group, which is what competes with the
        # service's processes (each in a session of its own) for the CPU.
        assert f"nice {expected}" in log.split("AUTOGROUP:")[1].splitlines()[0], log


def _autogroups() -> bool:
    flag = Path("/proc/sys/kernel/sched_autogroup_enabled")
    return flag.exists() and flag.read_text().strip() == "1"


def test_a_build_priority_out_of_range_is_refused_with_what_to_use() -> None:
    for bad in ("20", "-5", "low"):
        with pytest.raises(Exception, match=rf"KPERF_BUILD_NICE='{bad}' .*use 0 \(no change\) to 19"):
            Sandbox.from_environ({"KPERF_BUILD_NICE": bad})


def test_the_sandbox_policy_refuses_unknown_modes_and_root() -> None:
    with pytest.raises(Exception, match="KPERF_BUILD_SANDBOX='docker'"):
        Sandbox.from_environ({"KPERF_BUILD_SANDBOX": "docker"})
    if os.geteuid() == 0:
        with pytest.raises(Exception, match="must not run as root"):
            Sandbox(uid=0, gid=0).check()


def test_one_submitter_s_build_cannot_plant_objects_or_cache_entries_in_another_s(tmp_path: Path) -> None:
    """Warm trees and ccache belong to a scope: what a build leaves in its
    object tree or its cache is never seen by a build of another scope."""
    recipe = """
    test -e $(O)/planted && echo SEES-PLANTED-OBJ || echo NO-PLANT-OBJ
    test -e $$CCACHE_DIR/0/planted && echo SEES-PLANTED-CACHE || echo NO-PLANT-CACHE
    mkdir -p $$CCACHE_DIR/0; touch $(O)/planted $(O)/.config $$CCACHE_DIR/0/planted
    exit 1
    """
    repo, sha = hostile_tree(tmp_path, recipe)
    sandbox = Sandbox.from_environ().with_limits(wall_seconds=120)

    def run(scope: str) -> BuildResult:
        req = BuildRequest(
            repo=repo,
            sha=sha,
            arch="x86_64",
            work_root=tmp_path / "work",
            output_dir=tmp_path / f"out-{scope}",
            ccache_dir=tmp_path / "ccache",
            jobs=1,
            sandbox=sandbox,
            scope=scope,
        )
        return build_kernel(req)

    first = run("user-1")
    assert "NO-PLANT-OBJ" in first.log_tail and "NO-PLANT-CACHE" in first.log_tail
    # The plant took, in user-1's own tree and cache.
    assert (tmp_path / "work" / "trees" / first.tree / "obj" / "planted").exists()
    assert (tmp_path / "ccache-scopes" / "user-1" / "0" / "planted").exists()
    second = run("user-2")
    assert second.tree != first.tree and second.tree.startswith("user-2-")
    assert "NO-PLANT-OBJ" in second.log_tail and "NO-PLANT-CACHE" in second.log_tail
    # The lab's cache is the plain ccache directory, untouched by either.
    assert not (tmp_path / "ccache" / "0" / "planted").exists()


def test_a_scope_that_could_climb_out_of_its_directory_is_refused(tmp_path: Path) -> None:
    req = BuildRequest(
        repo=tmp_path, sha="a" * 40, arch="x86_64", work_root=tmp_path, output_dir=tmp_path, scope="../lab"
    )
    with pytest.raises(ValueError, match="scope must match"):
        build_kernel(req)
