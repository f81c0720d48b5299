"""Tests of the git side of building: commit checks, infra errors and the
test-tree machinery, on tiny repositories and tarballs (real git, no kernel)."""

from __future__ import annotations

import io
import multiprocessing
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from kperf_kbuild.driver import BuildInfraError, BuildRequest, build_kernel
from kperf_testing.kbuild import BASE_BRANCH, ensure_test_tree, read_fixture


def git(repo: Path, *args: str, **env: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    ).stdout.strip()


def make_repo(path: Path) -> str:
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "Makefile").write_text("all:\n")
    git(path, "add", "-A")
    git(
        path,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "commit",
        "-q",
        "-m",
        "one",
    )
    return git(path, "rev-parse", "HEAD")


def request(repo: Path, sha: str, tmp_path: Path, arch: str = "x86_64") -> BuildRequest:
    return BuildRequest(
        repo=repo,
        sha=sha,
        arch=arch,
        work_root=tmp_path / "work",
        output_dir=tmp_path / "out",
        ccache_dir=tmp_path / "ccache",
    )


def test_sha_not_in_repo_is_an_infra_error(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    missing = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(BuildInfraError) as info:
        build_kernel(request(repo, missing, tmp_path))
    message = str(info.value)
    assert missing in message and str(repo) in message
    assert "fetch" in message  # says what to do
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())


def test_missing_repo_is_an_infra_error(tmp_path: Path) -> None:
    with pytest.raises(BuildInfraError, match="does not exist"):
        build_kernel(request(tmp_path / "nowhere", "a" * 40, tmp_path))
    (tmp_path / "plain").mkdir()
    with pytest.raises(BuildInfraError, match="not a usable git repository"):
        build_kernel(request(tmp_path / "plain", "a" * 40, tmp_path))


def test_bad_requests_are_caller_errors(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    sha = make_repo(repo)
    with pytest.raises(ValueError, match="40-hex"):
        build_kernel(request(repo, sha[:12], tmp_path))
    with pytest.raises(ValueError, match="unsupported arch"):
        build_kernel(request(repo, sha, tmp_path, arch="mips"))


def test_missing_fragment_is_an_infra_error(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    sha = make_repo(repo)
    req = BuildRequest(
        repo=repo,
        sha=sha,
        arch="x86_64",
        work_root=tmp_path / "w",
        output_dir=tmp_path / "o",
        fragments=(tmp_path / "nope.config",),
    )
    with pytest.raises(BuildInfraError, match=r"nope\.config"):
        build_kernel(req)


def test_missing_tarball_names_the_package(tmp_path: Path) -> None:
    with pytest.raises(BuildInfraError, match=r"apt-get install linux-source-6\.1"):
        ensure_test_tree(tmp_path / "cache", tarball=tmp_path / "missing.tar.xz")


# --- ensure_test_tree on a small synthetic "kernel" ----------------------------

FIXTURE = """\
# kperf-fixture: slower
# moves: spawn-*
# must-not-move: pft-*
# why: a test fixture
diff --git a/mm/a.c b/mm/a.c
index {old}..{new} 100644
--- a/mm/a.c
+++ b/mm/a.c
@@ -1 +1,2 @@
 int a;
+int b;
"""


def make_tarball(path: Path) -> None:
    """A tar.xz shaped like linux-source: one top directory, an executable,
    a symlink and a hard link."""

    def add(tf: tarfile.TarFile, name: str, data: bytes = b"", **kw: object) -> None:
        info = tarfile.TarInfo(f"linux-source-6.1/{name}")
        info.size = len(data)
        info.mode = 0o644
        for key, value in kw.items():
            setattr(info, key, value)
        tf.addfile(info, io.BytesIO(data) if data else None)

    with tarfile.open(path, "w:xz") as tf:
        add(tf, "", type=tarfile.DIRTYPE, mode=0o755)
        add(tf, "Makefile", b"VERSION = 6\n")
        add(tf, "mm/a.c", b"int a;\n")
        add(tf, "scripts/run.sh", b"#!/bin/sh\n", mode=0o755)
        add(tf, "scripts/link", type=tarfile.SYMTYPE, linkname="run.sh")
        add(tf, "scripts/hard", type=tarfile.LNKTYPE, linkname="linux-source-6.1/Makefile")
        add(tf, "dir with space/file", b"x\n")
        # Ignored by a kernel .gitignore, still part of the tree.
        add(tf, ".gitignore", b"*.o\n")
        add(tf, "lib/blob.o", b"\x7fELF\n")


def write_fixture(fixtures: Path, extra: str = "int b;") -> None:
    old = subprocess.run(
        ["git", "hash-object", "--stdin"], input="int a;\n", capture_output=True, text=True
    ).stdout.strip()
    new = subprocess.run(
        ["git", "hash-object", "--stdin"],
        input=f"int a;\n{extra}\n",
        capture_output=True,
        text=True,
    ).stdout.strip()
    text = FIXTURE.format(old=old[:9], new=new[:9]).replace("+int b;", f"+{extra}")
    (fixtures / "slower.patch").write_text(text)


def test_ensure_test_tree_makes_base_and_fixture_branches(tmp_path: Path) -> None:
    tarball = tmp_path / "linux.tar.xz"
    make_tarball(tarball)
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    write_fixture(fixtures)

    tree = ensure_test_tree(tmp_path / "cache", tarball=tarball, fixtures_dir=fixtures)
    assert tree == (tmp_path / "cache" / "linux-test.git").resolve()
    assert git(tree, "rev-parse", "--is-bare-repository") == "true"
    base = git(tree, "rev-parse", f"refs/heads/{BASE_BRANCH}")
    assert git(tree, "rev-parse", f"refs/tags/{BASE_BRANCH}^{{commit}}") == base
    assert git(tree, "rev-list", "--count", base) == "1"
    listing = git(tree, "ls-tree", "-r", "--full-tree", base)
    modes = {line.split("\t")[1]: line.split()[0] for line in listing.splitlines()}
    assert modes["scripts/run.sh"] == "100755"
    assert modes["scripts/link"] == "120000"
    assert modes["Makefile"] == "100644"
    assert {"lib/blob.o", "dir with space/file", "scripts/hard"} <= set(modes)
    assert git(tree, "cat-file", "-p", f"{base}:scripts/link") == "run.sh"
    assert git(tree, "cat-file", "-p", f"{base}:scripts/hard") == "VERSION = 6"

    # Same tree as untarring and `git add -A --force` (what a human would do).
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    subprocess.run(["tar", "-xJf", str(tarball), "-C", str(unpacked)], check=True)
    work = unpacked / "linux-source-6.1"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    git(work, "add", "-A", "--force")
    assert git(work, "write-tree") == git(tree, "rev-parse", f"{base}^{{tree}}")

    slower = git(tree, "rev-parse", "refs/heads/slower")
    assert git(tree, "rev-parse", f"{slower}^") == base
    assert git(tree, "log", "-1", "--format=%s", slower) == "kperf fixture: slower"
    assert git(tree, "show", f"{slower}:mm/a.c") == "int a;\nint b;"

    # Reproducible: another cache gives the same shas.
    again = ensure_test_tree(tmp_path / "cache2", tarball=tarball, fixtures_dir=fixtures)
    assert git(again, "rev-parse", "refs/heads/slower") == slower

    # A changed patch refreshes its branch; a removed one loses its branch.
    write_fixture(fixtures, extra="int c;")
    ensure_test_tree(tmp_path / "cache", tarball=tarball, fixtures_dir=fixtures)
    changed = git(tree, "rev-parse", "refs/heads/slower")
    assert changed != slower
    assert git(tree, "show", f"{changed}:mm/a.c") == "int a;\nint c;"
    assert git(tree, "rev-parse", f"refs/heads/{BASE_BRANCH}") == base
    (fixtures / "slower.patch").unlink()
    ensure_test_tree(tmp_path / "cache", tarball=tarball, fixtures_dir=fixtures)
    assert git(tree, "for-each-ref", "--format=%(refname)", "refs/heads/") == f"refs/heads/{BASE_BRANCH}"

    # The tree stays usable when the package is removed later.
    gone = tmp_path / "gone.tar.xz"
    assert ensure_test_tree(tmp_path / "cache", tarball=gone, fixtures_dir=fixtures) == tree


def test_fixture_that_does_not_apply_is_reported(tmp_path: Path) -> None:
    tarball = tmp_path / "linux.tar.xz"
    make_tarball(tarball)
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    write_fixture(fixtures)
    patch = fixtures / "slower.patch"
    patch.write_text(patch.read_text().replace(" int a;", " int zzz;"))
    assert read_fixture(patch).name == "slower"
    with pytest.raises(ValueError, match="does not apply"):
        ensure_test_tree(tmp_path / "cache", tarball=tarball, fixtures_dir=fixtures)


def _ensure(args: tuple[Path, Path, Path]) -> str:
    cache, tarball, fixtures = args
    tree = ensure_test_tree(cache, tarball=tarball, fixtures_dir=fixtures)
    return git(tree, "rev-parse", "refs/heads/slower")


def test_ensure_test_tree_concurrent_callers(tmp_path: Path) -> None:
    tarball = tmp_path / "linux.tar.xz"
    make_tarball(tarball)
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    write_fixture(fixtures)
    args = (tmp_path / "cache", tarball, fixtures)
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        shas = pool.map(_ensure, [args] * 3)
    assert len(set(shas)) == 1
