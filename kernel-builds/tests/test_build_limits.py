"""No submitter can fill the disk or starve another's build.

Hostile trees (a top-level Makefile that does one thing for every target
tuxmake asks for) built through the real driver, tuxmake and bwrap, as in
test_build_sandbox: what a build writes anywhere it can write counts
against its disk limit and does not outlive it beyond its scope's bound,
and two builds at once each have their own process limit.
"""

from __future__ import annotations

import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from kperf_kbuild import build_uids, ccache_scope
from kperf_kbuild.driver import BuildRequest, BuildResult, build_kernel
from kperf_kbuild.host import BuildInfraError
from kperf_kbuild.sandbox import MiB, Sandbox

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="builds switch uids only when kperf runs as root")


def tree(root: Path, recipe: str, files: dict[str, str] | None = None) -> tuple[Path, str]:
    """A one-commit repository whose Makefile runs ``recipe`` for any target, with ``files`` beside it."""
    repo = root / "tree"
    repo.mkdir(parents=True)
    body = "\n".join("\t@" + line.strip() for line in recipe.strip().splitlines())
    contents = {"Makefile": f"%::\n{body}\n", "Kconfig": "", "Kbuild": "", "mm/page_alloc.c": "int alloc;\n"}
    contents.update(files or {})
    for name, text in contents.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@example.org"}
    env.update(GIT_COMMITTER_NAME="x", GIT_COMMITTER_EMAIL="x@example.org")
    for argv in (["init", "-q"], ["add", *contents], ["commit", "-q", "-m", "hostile"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env)
    sha = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return repo, sha


def build(
    root: Path, repo: Path, sha: str, sandbox: Sandbox, *, scope: str = "user-1", out: str = "out"
) -> BuildResult:
    req = BuildRequest(
        repo=repo,
        sha=sha,
        arch="x86_64",
        work_root=root / "work",
        output_dir=root / out,
        ccache_dir=root / "ccache",
        jobs=1,
        sandbox=sandbox,
        scope=scope,
    )
    return build_kernel(req)


def scope_dir(root: Path, scope: str = "user-1") -> Path:
    return root / "ccache-scopes" / scope


def the_checkout(root: Path, result: BuildResult) -> Path:
    return root / "work" / "trees" / result.tree / "src"


# Eight-MiB pieces up to 320 MiB, then waiting: a build the disk limit
# does not see runs into its wall limit instead (30 s here).
FILL = "for i in $$(seq 40); do dd if=/dev/zero of={place}/fill$$i bs=1M count=8 2>/dev/null; done; sleep 60"


@pytest.mark.parametrize(
    "place",
    [
        pytest.param("$$CCACHE_DIR", id="ccache-scope-top"),
        pytest.param("$$CCACHE_DIR/0", id="ccache-level-directory"),
        pytest.param("$(CURDIR)", id="checkout-top"),
    ],
)
def test_what_a_build_writes_in_its_ccache_scope_or_its_checkout_counts_against_its_disk_limit(
    tmp_path: Path, place: str
) -> None:
    recipe = f"mkdir -p {place}\n" + FILL.format(place=place)
    repo, sha = tree(tmp_path, recipe)
    sandbox = Sandbox.from_environ().with_limits(wall_seconds=30, disk_bytes=64 * MiB)
    started = time.monotonic()
    result = build(tmp_path, repo, sha, sandbox)
    assert not result.ok
    assert "KPERF_BUILD_MAX_DISK_BYTES" in result.error, result.error
    assert time.monotonic() - started < 30
    # And none of it stays: removed from the checkout, bounded in the scope.
    assert not list(the_checkout(tmp_path, result).glob("fill*"))
    assert ccache_scope.usage(scope_dir(tmp_path)) <= sandbox.limits.ccache_scope_bytes


def test_a_stray_file_left_in_the_ccache_scope_is_gone_and_the_scope_is_back_under_its_bound(
    tmp_path: Path,
) -> None:
    """The finding: a 2 GiB file written into the ccache scope was still
    there builds and a restart later. Here a few files, small and one of
    them sparse, with a scope bound of 4 MiB."""
    recipe = """
    dd if=/dev/zero of=$$CCACHE_DIR/stray bs=1M count=16 2>/dev/null
    truncate -s 2G $$CCACHE_DIR/sparse
    mkdir -p $$CCACHE_DIR/0/a $$CCACHE_DIR/elsewhere && ln -sf /etc/passwd $$CCACHE_DIR/0/a/link
    dd if=/dev/zero of=$$CCACHE_DIR/elsewhere/big bs=1M count=8 2>/dev/null
    dd if=/dev/zero of=$$CCACHE_DIR/0/a/big bs=1M count=16 2>/dev/null
    dd if=/dev/zero of=$(CURDIR)/left-behind bs=1M count=4 2>/dev/null
    touch -d '2 hours ago' $$CCACHE_DIR/0/a/big
    ccache gcc -c $(CURDIR)/mm/page_alloc.c -o $(O)/page_alloc.o && echo COMPILED-THROUGH-CCACHE
    exit 1
    """
    repo, sha = tree(tmp_path, recipe)
    bound = 4 * MiB
    sandbox = Sandbox.from_environ().with_limits(wall_seconds=120, ccache_scope_bytes=bound)
    result = build(tmp_path, repo, sha, sandbox)
    assert "COMPILED-THROUGH-CCACHE" in result.log_tail, result.log_tail
    scope = scope_dir(tmp_path)
    for stray in ("stray", "sparse", "elsewhere", "0/a/link", "0/a/big"):
        assert not os.path.lexists(scope / stray), stray
    assert ccache_scope.usage(scope) <= bound
    # What ccache itself stored stays: the scope is still a cache.
    assert [p for p in scope.rglob("*") if p.name.endswith(("R", "M")) and p.is_file()]
    assert not (the_checkout(tmp_path, result) / "left-behind").exists()


def test_the_checkout_s_own_files_are_read_only_to_its_build_as_root_or_not(tmp_path: Path) -> None:
    recipe = """
    echo x >> $(CURDIR)/Makefile && echo WROTE-MAKEFILE || echo DENIED-MAKEFILE
    echo x > $(CURDIR)/mm/planted.c && echo WROTE-SUBDIR || echo DENIED-SUBDIR
    rm -f $(CURDIR)/Kconfig; test -e $(CURDIR)/Kconfig && echo KEPT-KCONFIG || echo REMOVED-KCONFIG
    echo x > $(CURDIR)/.tmp.config.merge && echo ADDED-TOP || echo DENIED-TOP
    exit 1
    """
    repo, sha = tree(tmp_path, recipe)
    result = build(tmp_path, repo, sha, Sandbox.from_environ().with_limits(wall_seconds=120))
    log = result.log_tail
    for expected in ("DENIED-MAKEFILE", "DENIED-SUBDIR", "KEPT-KCONFIG", "ADDED-TOP"):
        assert expected in log, log
    checkout = the_checkout(tmp_path, result)
    assert (checkout / "Kconfig").exists() and not (checkout / "mm" / "planted.c").exists()
    assert not (checkout / ".tmp.config.merge").exists()


BOMB = """
import os, sys, time
out = sys.argv[1]
children = []
while len(children) < 100000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(90)
        os._exit(0)
    children.append(pid)
print(f"BOMB-STOPPED-AT {len(children)}", flush=True)
open(f"{out}/full", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(f"{out}/release") and time.monotonic() < deadline:
    time.sleep(0.1)
for pid in children:
    os.kill(pid, 9)
"""

FORKS = """
import os, time
made = 0
try:
    for _ in range(16):
        if os.fork() == 0:
            time.sleep(0.5)
            os._exit(0)
        made += 1
    print(f"FORKED {made}", flush=True)
except OSError as exc:
    print(f"FORK-FAILED after {made}: {exc}", flush=True)
"""


@as_root
def test_one_build_s_fork_bomb_leaves_a_concurrent_build_its_own_processes(tmp_path: Path) -> None:
    """The finding: every build ran as one uid, so they shared one
    RLIMIT_NPROC. Build A forks until its limit stops it and holds every
    process; build B, at the same time, still forks."""
    sandbox = Sandbox.from_environ().with_limits(wall_seconds=90, processes=64)
    out_a = tmp_path / "a" / "out"
    repo_a, sha_a = tree(tmp_path / "a", f"python3 $(CURDIR)/bomb.py {out_a}; exit 1", {"bomb.py": BOMB})
    repo_b, sha_b = tree(tmp_path / "b", "python3 $(CURDIR)/forks.py; exit 1", {"forks.py": FORKS})
    results: dict[str, BuildResult | BaseException] = {}

    def run(name: str, repo: Path, sha: str) -> None:
        try:
            results[name] = build(tmp_path / name, repo, sha, sandbox)
        except BaseException as exc:  # reported by the asserts below, with the other build's
            results[name] = exc

    bomb = threading.Thread(target=run, args=("a", repo_a, sha_a))
    bomb.start()
    try:
        deadline = time.monotonic() + 60
        while not (out_a / "full").exists() and time.monotonic() < deadline and bomb.is_alive():
            time.sleep(0.1)
        assert (out_a / "full").exists(), results.get("a")
        run("b", repo_b, sha_b)
    finally:
        out_a.mkdir(parents=True, exist_ok=True)
        (out_a / "release").touch()
        bomb.join()
    a, b = results["a"], results["b"]
    assert isinstance(a, BuildResult) and isinstance(b, BuildResult), results
    assert "BOMB-STOPPED-AT" in a.log_tail, a.log_tail
    assert int(a.log_tail.split("BOMB-STOPPED-AT")[1].split()[0]) < 64
    assert "FORKED 16" in b.log_tail, b.log_tail


@as_root
def test_a_scope_s_ccache_written_under_one_build_uid_is_read_and_extended_under_another(tmp_path: Path) -> None:
    """Each build has its own uid, the scope's ccache stays one cache: the
    second build, under another uid, hits the first one's entry and stores
    its own in directories the first one made. (tuxmake runs make in a user
    namespace of its own, as its root: the build's uid is what that root
    is mapped to.)"""
    recipe = """
    echo "int u$$(awk '{print $$2}' /proc/self/uid_map);" > $(O)/mine.c
    ccache gcc -c $(CURDIR)/mm/page_alloc.c -o $(O)/page_alloc.o
    ccache gcc -c $(O)/mine.c -o $(O)/mine.o
    echo "BUILD-UID $$(awk '{print $$2}' /proc/self/uid_map)"
    exit 1
    """
    repo, sha = tree(tmp_path, recipe)
    sandbox = Sandbox.from_environ().with_limits(wall_seconds=120)
    first = build(tmp_path, repo, sha, sandbox)
    # The first uid held, as by a build still running: the next build gets another.
    with build_uids.lease(sandbox) as held:
        second = build(tmp_path, repo, sha, sandbox, out="out-2")
    uid_1 = int(first.log_tail.split("BUILD-UID")[1].split()[0])
    uid_2 = int(second.log_tail.split("BUILD-UID")[1].split()[0])
    assert uid_2 != uid_1 and uid_2 != held.uid
    # Every compilation of the second build (tuxmake's own probe of the
    # compiler among them) hit the first one's entries, but its own file.
    hits = second.ccache_stats.get("direct_cache_hit", 0) + second.ccache_stats.get("preprocessed_cache_hit", 0)
    assert second.ccache_stats.get("cache_miss") == 1, second.ccache_stats
    assert hits >= 2 and hits + 1 == sum(first.ccache_stats.get(k, 0) for k in ("cache_miss", "direct_cache_hit"))
    scope = scope_dir(tmp_path)
    stored = [p for p in scope.rglob("*R") if p.is_file() and p.stat().st_uid == uid_2]
    assert stored, "the second build stored no result of its own"
    for path in [scope, *(p for p in scope.rglob("*") if p.is_dir())]:
        mode = path.stat()
        assert mode.st_gid == sandbox.gid and stat.S_IMODE(mode.st_mode) == 0o2770, path


@as_root
def test_builds_take_the_lowest_free_uid_and_say_so_when_none_is_left(tmp_path: Path) -> None:
    sandbox = Sandbox.from_environ({"KPERF_BUILD_UID": "64100", "KPERF_BUILD_UIDS": "2"})
    with build_uids.lease(sandbox, tmp_path) as first, build_uids.lease(sandbox, tmp_path) as second:
        assert (first.uid, second.uid) == (64100, 64101)
        assert first.gid == second.gid == 64100
        with (
            pytest.raises(BuildInfraError, match=r"all 2 build uids \(64100-64101\) .* set KPERF_BUILD_UIDS"),
            build_uids.lease(sandbox, tmp_path),
        ):
            pass
    with build_uids.lease(sandbox, tmp_path) as again:
        assert again.uid == 64100


def test_the_ccache_scope_bound_is_read_with_the_other_limits() -> None:
    assert Sandbox.from_environ({}).limits.ccache_scope_bytes == 2 * 1024**3
    got = Sandbox.from_environ({"KPERF_CCACHE_SCOPE_MAX_BYTES": "1048576"}).limits.ccache_scope_bytes
    assert got == 1024**2
    assert ccache_scope.max_size_value(got) == "1024Ki"
    with pytest.raises(BuildInfraError, match="KPERF_CCACHE_SCOPE_MAX_BYTES='lots' is not a number"):
        Sandbox.from_environ({"KPERF_CCACHE_SCOPE_MAX_BYTES": "lots"})
