"""The kernel under test in kperf's own tests.

A git repository made from Debian's linux-source-6.1 tarball: branch (and
tag) ``base`` holds the tree as one commit; each fixture patch in
``kernel-builds/fixtures/`` becomes a branch of the same name with the patch
applied on ``base`` as one commit. Fixture kernels are built once per
(sha, arch, config digest) and reused by every later test run.

Everything lives in a cache directory (KPERF_CACHE, ~/.cache/kperf)::

    linux-test.git/       the bare repository (+ kperf-test-tree.json state)
    fixture-builds/<key>/ artifacts and kperf-build.json of a fixture kernel
    ccache/               the compiler cache every fixture build shares
    stack-mirrors/        the mirror of linux-test.git that the test stacks'
                          services keep (their KPERF_MIRROR_ROOT)
    work/trees/           warm build trees (kperf_kbuild.trees): each fixture
                          branch builds incrementally from the nearest one

Fixture kernels are built from the stacks' mirror, in the work root the
stacks build in (their KPERF_BUILD_ROOT: `stack_build_root`), so a test
stack's service finds the lab's warm trees as a lab's builder that built
them before would: its base build recompiles nothing and its heads build
incrementally. A warm tree serves one repository path, so a build from
linux-test.git itself could not be reused by a stack (kperf_kbuild.trees).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from kperf.core.builds import gitops
from kperf.core.builds.tree_urls import TreePolicy
from kperf_kbuild.driver import (
    DEFAULT_PROFILE,
    BuildInfraError,
    BuildRequest,
    BuildResult,
    build_kernel,
    config_digest,
    file_lock,
)

log = logging.getLogger(__name__)

TARBALL = Path("/usr/src/linux-source-6.1.tar.xz")
TARBALL_PACKAGE = "linux-source-6.1"
FIXTURES_DIR = Path(__file__).resolve().parents[2] / "kernel-builds" / "fixtures"
TREE_NAME = "linux-test.git"
STACK_MIRRORS = "stack-mirrors"
BASE_BRANCH = "base"
STATE_FILE = "kperf-test-tree.json"
MANIFEST = "kperf-build.json"

# Bump when the way the repository is made changes, to force a rebuild.
_TREE_FORMAT = 1

# Fixed identity and date: the same tarball and patches give the same shas on
# every machine, so a sha seen in one test run's logs means the same tree in
# every other run.
_IDENTITY = "kperf fixtures <fixtures@kperf.invalid>"
_DATE = "1700000000 +0000"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "kperf fixtures",
    "GIT_AUTHOR_EMAIL": "fixtures@kperf.invalid",
    "GIT_AUTHOR_DATE": f"@{_DATE}",
    "GIT_COMMITTER_NAME": "kperf fixtures",
    "GIT_COMMITTER_EMAIL": "fixtures@kperf.invalid",
    "GIT_COMMITTER_DATE": f"@{_DATE}",
}

_HEADER = re.compile(r"#\s*([\w-]+):\s?(.*)")


@dataclass(frozen=True)
class Fixture:
    """A fixture patch and what it claims: metric name patterns (fnmatch
    style, e.g. ``spawn-*``) it must move and must not move."""

    name: str
    path: Path
    moves: tuple[str, ...]
    must_not_move: tuple[str, ...]
    why: str
    patch: str  # the diff alone, header stripped


def read_fixture(path: Path) -> Fixture:
    """Parse a fixture patch: leading ``# key: value`` lines, then the diff.

    The header is stripped here before the diff goes to ``git apply`` (which
    would also skip it as leading prose, like an email body, but relying on
    that would break on a "why" line that starts like a diff line).
    """
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    fields: dict[str, str] = {}
    body_start = 0
    for i, line in enumerate(lines):
        match = _HEADER.fullmatch(line.rstrip("\n"))
        if not match:
            body_start = i
            break
        key, value = match.group(1), match.group(2).strip()
        # A key may span several lines (long "why"s); they join with spaces.
        fields[key] = f"{fields[key]} {value}".strip() if key in fields else value
    else:
        body_start = len(lines)
    name = fields.get("kperf-fixture", "")
    if name != path.stem:
        raise ValueError(f"{path}: header must start with '# kperf-fixture: {path.stem}'")
    patch = "".join(lines[body_start:]).lstrip("\n")
    if not patch.startswith("diff --git "):
        raise ValueError(f"{path}: the header must be followed by a `git diff`")
    return Fixture(
        name=name,
        path=path,
        moves=_patterns(fields.get("moves", "")),
        must_not_move=_patterns(fields.get("must-not-move", "")),
        why=fields.get("why", ""),
        patch=patch,
    )


def list_fixtures(fixtures_dir: Path = FIXTURES_DIR) -> list[Fixture]:
    return [read_fixture(p) for p in sorted(fixtures_dir.glob("*.patch"))]


def fixtures_digest(fixtures_dir: Path = FIXTURES_DIR) -> str:
    h = hashlib.sha256(f"kperf-fixtures-v{_TREE_FORMAT}".encode())
    for path in sorted(fixtures_dir.glob("*.patch")):
        data = path.read_bytes()
        h.update(b"%d:%s%d:" % (len(path.name), path.name.encode(), len(data)))
        h.update(data)
    return h.hexdigest()


def ensure_test_tree(
    cache_dir: Path,
    *,
    tarball: Path = TARBALL,
    fixtures_dir: Path = FIXTURES_DIR,
) -> Path:
    """Return ``cache_dir/linux-test.git``, creating it (once) from the
    tarball and (re)making the fixture branches when the patches changed.

    Safe to call from several processes at once: they serialise on a lock
    file and all but the first find the work done.
    """
    cache_dir = Path(cache_dir).resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)
    tree = kernel_tree_path(cache_dir)
    with file_lock(cache_dir / "linux-test.lock"):
        state = _read_state(tree)
        identity = _tarball_identity(tarball) if tarball.is_file() else None
        usable = state.get("format") == _TREE_FORMAT
        # A tree made earlier stays usable if the package was removed since;
        # a new tarball (Debian point release) means a new base.
        if not usable or (identity is not None and state.get("tarball") != identity):
            if identity is None:
                raise BuildInfraError(
                    f"{tarball} is missing: the test kernel tree is made from it. "
                    f"Install it with `apt-get install {TARBALL_PACKAGE}`"
                )
            log.info("creating %s from %s", tree, tarball)
            _create_base(tree, tarball, cache_dir)
            state = {"format": _TREE_FORMAT, "tarball": identity, "branches": []}
            _write_state(tree, state)
        digest = fixtures_digest(fixtures_dir)
        if state.get("fixtures") != digest:
            log.info("refreshing fixture branches in %s", tree)
            old = [str(b) for b in state.get("branches", [])]
            state["branches"] = _make_fixture_branches(tree, list_fixtures(fixtures_dir), old)
            state["fixtures"] = digest
            _write_state(tree, state)
    return tree


def build_fixture_kernel(
    tree: Path, branch: str, arch: str, cache_dir: Path, profile: str = DEFAULT_PROFILE
) -> BuildResult:
    """Build ``branch`` of the test tree for ``arch`` with the arch fragment
    and `profile`, or return the earlier successful build of the same key."""
    cache_dir = Path(cache_dir).resolve()
    sha = _git(tree, "rev-parse", "--verify", "--end-of-options", f"refs/heads/{branch}^{{commit}}")
    sha = sha.strip()
    digest = config_digest(arch, profile=profile)
    key = f"{arch}-{sha[:12]}-{digest[:12]}"
    builds = cache_dir / "fixture-builds"
    builds.mkdir(parents=True, exist_ok=True)
    out = builds / key
    with file_lock(builds / f"{key}.lock"):
        cached = _load_manifest(out / MANIFEST)
        if cached is not None:
            return cached
        log.info("building %s (%s) for %s into %s", branch, sha[:12], arch, out)
        result = build_kernel(
            BuildRequest(
                repo=sync_stack_mirror(tree, cache_dir, sha),
                sha=sha,
                arch=arch,
                work_root=stack_build_root(cache_dir),
                output_dir=out,
                ccache_dir=cache_dir / "ccache",
                profile=profile,
            ),
            progress=lambda phase, message: log.info("%s %s: %s", key, phase, message),
        )
        if result.ok:
            _save_manifest(out / MANIFEST, result, sha=sha, arch=arch, branch=branch)
        return result


def kernel_tree_path(cache_dir: Path) -> Path:
    """Where ensure_test_tree keeps the test tree (made or not)."""
    return Path(cache_dir).resolve() / TREE_NAME


def stack_mirror(tree: Path, cache_dir: Path) -> Path:
    """Where a test stack's service (KPERF_MIRROR_ROOT = cache/stack-mirrors)
    keeps its mirror of `tree` submitted by path: the name
    kperf.core.models.trees.Tree.mirror_path gives that URL."""
    digest = hashlib.sha256(str(tree).encode()).hexdigest()[:16]
    return Path(cache_dir).resolve() / STACK_MIRRORS / f"{digest}.git"


def stack_build_root(cache_dir: Path) -> Path:
    """The work root of the fixture builds and of the test stacks' builds
    (their KPERF_BUILD_ROOT). One per pytest-xdist worker beyond the first:
    a service writes its outputs under ``outputs/<build id>``, and two
    stacks' databases running at once both have a build 1."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    name = "work" if worker in ("", "gw0") else f"work-{worker}"
    return Path(cache_dir).resolve() / name


def sync_stack_mirror(tree: Path, cache_dir: Path, sha: str) -> Path:
    """The stacks' mirror of `tree`, made or fetched until it has `sha`, by
    the service's own mirror code (its lock, its refspec), so that the
    service's later fetches go on from it as from a mirror of its own."""
    mirror = stack_mirror(tree, cache_dir)
    mirror.parent.mkdir(parents=True, exist_ok=True)
    gitops.ensure_commit(str(tree), mirror, sha, policy=TreePolicy(allow_local=True))
    return mirror


# --- the repository --------------------------------------------------------


def _create_base(tree: Path, tarball: Path, cache_dir: Path) -> None:
    """Import the tarball as one commit on ``base`` (and tag ``base``).

    Instead of untarring 1.5 GB and `git add`ing 78k files (~13 s + ~35 s
    here, 78k loose objects), the tar stream goes straight into
    `git fast-import`, which writes one pack (~20 s, xz and git each on a
    core). The tree is identical: same paths, modes, symlinks, contents.
    """
    for stale in cache_dir.glob(f"{TREE_NAME}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a killed earlier attempt; we hold the lock
    tmp = cache_dir / f"{TREE_NAME}.tmp-{os.getpid()}"
    _git(tmp.parent, "init", "--quiet", "--bare", str(tmp))
    # No automatic gc: it would repack the 300 MB pack during some test.
    _git(tmp, "config", "gc.auto", "0")
    _git(tmp, "symbolic-ref", "HEAD", f"refs/heads/{BASE_BRANCH}")

    xz = subprocess.Popen(
        ["xz", "--decompress", "--stdout", str(tarball)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    fast_import = subprocess.Popen(
        # Fast zlib, and no delta search (--depth=0): the pack is written
        # once and read by checkouts; a smaller pack is not worth the CPU.
        ["git", "-c", "pack.compression=1", "-C", str(tmp), "fast-import", "--quiet", "--depth=0", "--done"],
        stdin=subprocess.PIPE,
        env={**os.environ, "LC_ALL": "C"},
    )
    assert xz.stdout is not None and fast_import.stdin is not None
    try:
        with xz.stdout, fast_import.stdin:
            _stream_tarball(xz.stdout, fast_import.stdin, tarball)
    except BrokenPipeError:
        pass  # fast-import died; its exit status below says why
    finally:
        xz_rc = xz.wait()
        fi_rc = fast_import.wait()
    if xz_rc != 0 or fi_rc != 0:
        raise BuildInfraError(
            f"importing {tarball} failed (xz exit {xz_rc}, git fast-import exit {fi_rc}); "
            f"check free space in {cache_dir} and reinstall {TARBALL_PACKAGE}"
        )
    if tree.exists():
        shutil.rmtree(tree)
    tmp.rename(tree)


def _stream_tarball(source: IO[bytes], sink: IO[bytes], tarball: Path) -> None:
    marks: dict[str, tuple[str, int]] = {}  # path -> (mode, mark), also for hard links
    next_mark = 1
    with tarfile.open(fileobj=source, mode="r|") as tf:
        for member in tf:
            # Strip the top directory (linux-source-6.1/).
            _, _, path = member.name.partition("/")
            if not path or member.isdir():
                continue
            if member.isfile():
                extracted = tf.extractfile(member)
                assert extracted is not None
                data = extracted.read()
                mode = "100755" if member.mode & 0o111 else "100644"
            elif member.issym():
                data = member.linkname.encode("utf-8", "surrogateescape")
                mode = "120000"
            elif member.islnk():
                _, _, target = member.linkname.partition("/")
                marks[path] = marks[target]
                continue
            else:
                raise BuildInfraError(f"{tarball}: unexpected member {member.name!r}")
            sink.write(b"blob\nmark :%d\ndata %d\n" % (next_mark, len(data)))
            sink.write(data)
            sink.write(b"\n")
            marks[path] = (mode, next_mark)
            next_mark += 1
    message = f"Linux 6.1 from Debian's {tarball.name}\n".encode()
    sink.write(f"commit refs/heads/{BASE_BRANCH}\n".encode())
    sink.write(f"author {_IDENTITY} {_DATE}\ncommitter {_IDENTITY} {_DATE}\n".encode())
    sink.write(b"data %d\n%s" % (len(message), message))
    for path, (mode, mark) in marks.items():
        sink.write(f"M {mode} :{mark} {_fast_import_path(path)}\n".encode("utf-8", "surrogateescape"))
    sink.write(f"\nreset refs/tags/{BASE_BRANCH}\nfrom refs/heads/{BASE_BRANCH}\n\ndone\n".encode())


def _fast_import_path(path: str) -> str:
    # fast-import takes a path verbatim unless it starts with a quote or holds
    # a newline; then it must be C-quoted.
    if path.startswith('"') or "\n" in path:
        escaped = path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    return path


def _make_fixture_branches(tree: Path, fixtures: list[Fixture], old: list[str]) -> list[str]:
    """One commit per fixture on top of base, made in a private index: no
    checkout of 78k files needed."""
    for name in old:
        if name != BASE_BRANCH:
            _git(tree, "update-ref", "-d", f"refs/heads/{name}")
    index = tree / "kperf-fixture.index"
    env = {**_GIT_ENV, "GIT_INDEX_FILE": str(index)}
    made: list[str] = []
    try:
        for fixture in fixtures:
            if fixture.name == BASE_BRANCH:
                raise ValueError(f"{fixture.path}: '{BASE_BRANCH}' is reserved")
            _git(tree, "check-ref-format", "--branch", fixture.name)
            _git(tree, "read-tree", f"refs/heads/{BASE_BRANCH}", env=env)
            try:
                _git(tree, "apply", "--cached", "-", env=env, stdin=fixture.patch)
            except BuildInfraError as exc:
                raise ValueError(
                    f"fixture {fixture.path} does not apply to {BASE_BRANCH}: {exc}. "
                    "Regenerate it with `git diff` in a checkout of the test tree "
                    "(kernel-builds/README.md)"
                ) from exc
            tree_id = _git(tree, "write-tree", env=env).strip()
            message = _commit_message(fixture)
            commit = _git(tree, "commit-tree", tree_id, "-p", f"refs/heads/{BASE_BRANCH}", env=env, stdin=message)
            _git(tree, "update-ref", f"refs/heads/{fixture.name}", commit.strip())
            made.append(fixture.name)
    finally:
        index.unlink(missing_ok=True)
    return made


def _commit_message(fixture: Fixture) -> str:
    return (
        f"kperf fixture: {fixture.name}\n\n{fixture.why}\n\n"
        f"Moves: {', '.join(fixture.moves) or '(nothing)'}\n"
        f"Must not move: {', '.join(fixture.must_not_move) or '(nothing listed)'}\n"
    )


# --- fixture build manifests ----------------------------------------------


def _save_manifest(path: Path, result: BuildResult, *, sha: str, arch: str, branch: str) -> None:
    data: dict[str, Any] = asdict(result)
    # Relative names: the cache folder may be moved or mounted elsewhere.
    data["artifacts"] = {k: p.name for k, p in result.artifacts.items()}
    data.update(sha=sha, arch=arch, branch=branch)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def _load_manifest(path: Path) -> BuildResult | None:
    try:
        data = json.loads(path.read_text())
        artifacts = {k: path.parent / str(v) for k, v in data["artifacts"].items()}
        result = BuildResult(
            ok=bool(data["ok"]),
            artifacts=artifacts,
            config_digest=str(data["config_digest"]),
            log_tail=str(data["log_tail"]),
            duration_s=float(data["duration_s"]),
            error=str(data["error"]),
            ccache_stats={str(k): int(v) for k, v in data.get("ccache_stats", {}).items()},
            warnings=[str(w) for w in data.get("warnings", [])],
            reused_sha=str(data.get("reused_sha", "")),
            tree=str(data.get("tree", "")),
            compiled=int(data.get("compiled", 0)),
            incremental_error=str(data.get("incremental_error", "")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not result.ok or not all(p.is_file() for p in artifacts.values()):
        return None
    return result


# --- helpers ----------------------------------------------------------------


def _patterns(value: str) -> tuple[str, ...]:
    return tuple(p for p in re.split(r"[,\s]+", value) if p)


def _tarball_identity(tarball: Path) -> dict[str, int]:
    # Size and mtime change when Debian ships a new point release; hashing
    # 138 MB on every test session would cost seconds for nothing.
    st = tarball.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _read_state(tree: Path) -> dict[str, Any]:
    try:
        data = json.loads((tree / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(tree: Path, state: dict[str, Any]) -> None:
    tmp = tree / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tmp.replace(tree / STATE_FILE)


def _git(repo: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env={**os.environ, "LC_ALL": "C", **(env or {})},
        check=False,
    )
    if proc.returncode != 0:
        raise BuildInfraError(f"git {' '.join(args)} in {repo} failed: {proc.stderr.strip()}")
    return proc.stdout
