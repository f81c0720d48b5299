"""Git handling: which tree URLs and refs are acceptable, local mirrors, ref resolution.

Every git call takes an argument list, never a shell string, and runs with
GIT_ALLOW_PROTOCOL so that even a URL that slipped past validation cannot use
git's `ext::` or `fd::` transports to run commands.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_SCP_LIKE_RE = re.compile(r"^(?P<user>[A-Za-z0-9._-]+@)?(?P<host>[A-Za-z0-9.-]+):(?P<path>[^/][^\s]*|/[^\s]*)$")
_HOST_RE = re.compile(r"^[A-Za-z0-9.-]+$|^\[[0-9A-Fa-f:.]+\]$")
MAX_URL_LENGTH = 1000
MAX_REF_LENGTH = 255
# Refs kperf writes into a mirror itself; a fetch from the tree leaves them alone.
KPERF_REFS = "refs/kperf/"


class GitInputError(ValueError):
    """The user gave a URL or ref kperf will not use; the message says why and what to do."""


class GitError(RuntimeError):
    """git itself failed (network, missing ref, corrupt mirror)."""


def validate_tree_url(url: str, allow_local: bool) -> str:
    """Return the URL if kperf accepts it, else raise GitInputError.

    Accepted: https://, git://, ssh://, scp-like user@host:path, and (when the
    service allows it) absolute local paths or file:// URLs.
    """
    if not url or not url.strip():
        raise GitInputError("the tree URL is empty: give an https://, git://, ssh:// URL or a local path")
    if "::" in url.split("/", 1)[0]:
        raise GitInputError(
            f"the tree URL {url!r} uses git's '<transport>::' syntax, which can run programs; "
            "use an https://, git:// or ssh:// URL"
        )
    if url != url.strip() or any(ord(c) < 0x20 or c == "\x7f" for c in url) or " " in url:
        raise GitInputError(f"the tree URL {url!r} contains white space or control characters")
    if len(url) > MAX_URL_LENGTH:
        raise GitInputError(f"the tree URL is {len(url)} characters long; the limit is {MAX_URL_LENGTH}")
    if url.startswith("-"):
        raise GitInputError(f"the tree URL {url!r} starts with '-', which git would read as an option")
    local_hint = " or a local path" if allow_local else ""
    if url.startswith("/") or url.startswith("file://"):
        if not allow_local:
            raise GitInputError(
                f"{url!r} is a local tree, and local trees are off on this service (it does not read its own "
                "disk for users): push the branch to a git server and give its https:// or git:// URL "
                "(an operator can turn them on with KPERF_ALLOW_LOCAL_TREES=1)"
            )
        path = url[len("file://") :] if url.startswith("file://") else url
        if not path.startswith("/"):
            raise GitInputError(f"the local tree {url!r} is not an absolute path")
        return url
    if "://" in url:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("https", "git", "ssh"):
            raise GitInputError(
                f"the tree URL {url!r} uses {scheme}://, which kperf does not accept; "
                f"use https://, git://, ssh://{local_hint}"
            )
        host = parts.hostname or ""
        if not host or not _HOST_RE.match(parts.netloc.rsplit("@", 1)[-1].rsplit(":", 1)[0] or "x"):
            raise GitInputError(f"the tree URL {url!r} has no valid host name")
        if not parts.path or parts.path == "/":
            raise GitInputError(f"the tree URL {url!r} names no repository path")
        try:
            parts.port  # noqa: B018 - raises ValueError for a malformed port
        except ValueError:
            raise GitInputError(f"the tree URL {url!r} has a malformed port") from None
        return url
    m = _SCP_LIKE_RE.match(url)
    # scp-like syntax needs a user or a dotted host name, so that a relative
    # path such as "linux:stable" is not mistaken for a remote.
    if m is not None and (m.group("user") or "." in m.group("host")):
        return url
    raise GitInputError(
        f"{url!r} is not a git URL kperf understands: use https://host/path.git, git://host/path, "
        f"ssh://user@host/path or user@host:path{local_hint}"
    )


def validate_ref(ref: str, what: str = "ref") -> str:
    """Check a branch, tag or sha the way `git check-ref-format --branch` would.

    kperf also refuses a leading '-' so a ref can never be read as an option.
    """
    if not ref:
        raise GitInputError(f"the {what} is empty: give a branch, tag or commit sha")
    problems: list[str] = []
    if len(ref) > MAX_REF_LENGTH:
        problems.append(f"is longer than {MAX_REF_LENGTH} characters")
    if ref.startswith("-"):
        problems.append("starts with '-'")
    if ".." in ref:
        problems.append("contains '..'")
    if "@{" in ref:
        problems.append("contains '@{'")
    if ref == "@":
        problems.append("is '@'")
    bad = sorted({c for c in ref if ord(c) < 0x20 or c == "\x7f" or c in " ~^:?*[\\"})
    if bad:
        problems.append("contains " + ", ".join(repr(c) for c in bad))
    if ref.startswith("/") or ref.endswith("/") or "//" in ref:
        problems.append("has an empty path component ('/' at either end or '//')")
    if ref.endswith("."):
        problems.append("ends with '.'")
    for component in ref.split("/"):
        if component.startswith("."):
            problems.append(f"has a component starting with '.' ({component!r})")
        if component.endswith(".lock"):
            problems.append(f"has a component ending in '.lock' ({component!r})")
    if problems:
        raise GitInputError(f"the {what} {ref!r} is not a valid git ref name: it " + "; it ".join(problems))
    return ref


def git_env() -> dict[str, str]:
    """The environment every git call of kperf's runs with."""
    return _git_env()


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ALLOW_PROTOCOL": "https:git:ssh:file",
            "GIT_SSH_COMMAND": env.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes"),
            "LC_ALL": "C",
        }
    )
    return env


def run_git(
    args: list[str], cwd: Path | None = None, timeout: int = 1800, extra_env: dict[str, str] | None = None
) -> str:
    env = _git_env() | (extra_env or {})
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise GitError("git is not installed on this server: apt-get install git") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} did not finish within {timeout} s") from None
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise GitError(f"git {args[0]} failed: " + (" ".join(err[-3:]) if err else f"exit {proc.returncode}"))
    return proc.stdout


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def update_mirror(url: str, mirror: Path, timeout: int = 1800) -> None:
    """Create or refresh a bare mirror of `url` at `mirror` (one fetch at a time per mirror)."""
    with _locked(mirror):
        if not (mirror / "HEAD").exists():
            tmp = mirror.with_name(mirror.name + ".partial")
            if tmp.exists():
                # Left over from a clone that was interrupted: start again.
                shutil.rmtree(tmp)
            run_git(["clone", "--mirror", "--quiet", "--", url, str(tmp)], timeout=timeout)
            tmp.rename(mirror)
        else:
            # Everything the tree has, except kperf's own refs (applied patch
            # series, kperf.core.series_git), which --prune would delete.
            refspecs = ["+refs/*:refs/*", f"^{KPERF_REFS}*"]
            run_git(["-C", str(mirror), "fetch", "--prune", "--quiet", "origin", *refspecs], timeout=timeout)


def has_commit(mirror: Path, sha: str) -> bool:
    if not (mirror / "HEAD").exists():
        return False
    try:
        run_git(["-C", str(mirror), "cat-file", "-e", f"{sha}^{{commit}}"], timeout=60)
    except GitError:
        return False
    return True


def ensure_commit(url: str, mirror: Path, sha: str, timeout: int = 1800) -> None:
    """Make sure commit `sha` of the tree at `url` is in this machine's `mirror`.

    The web host's workers resolve refs in their own mirror; a build machine
    elsewhere has a mirror of its own that may not have the commit yet, so
    it fetches the tree first, and then the commit by itself (a ref may have
    moved past it since). GitError says what failed.
    """
    if has_commit(mirror, sha):
        return
    update_mirror(url, mirror, timeout=timeout)
    if has_commit(mirror, sha):
        return
    with _locked(mirror):
        try:
            run_git(["-C", str(mirror), "fetch", "--quiet", "origin", sha], timeout=timeout)
        except GitError as e:
            raise GitError(f"commit {sha} is on no branch or tag of {url} and could not be fetched by sha: {e}") from e
    if not has_commit(mirror, sha):
        raise GitError(f"commit {sha} is not in {url}")


def resolve_ref(mirror: Path, ref: str) -> str:
    """The commit sha a branch, tag or sha names in the mirror; GitError if it names none."""
    for candidate in (f"refs/heads/{ref}", f"refs/tags/{ref}", ref):
        try:
            out = run_git(
                ["-C", str(mirror), "rev-parse", "--verify", "--quiet", "--end-of-options", candidate + "^{commit}"],
                timeout=60,
            ).strip()
        except GitError:
            continue
        if SHA_RE.match(out):
            return out
    raise GitError(f"{ref!r} is not a branch, tag or commit in the tree")


def commit_subject(mirror: Path, sha: str) -> str:
    return run_git(["-C", str(mirror), "log", "-1", "--format=%s", sha, "--"], timeout=60).strip()


def is_ancestor(mirror: Path, older: str, newer: str) -> bool:
    """True when `older` is reachable from `newer` (both shas in the mirror)."""
    try:
        run_git(["-C", str(mirror), "merge-base", "--is-ancestor", older, newer], timeout=120)
    except GitError:
        return False
    return True


def first_parent_commits(mirror: Path, newest: str, since: str = "", limit: int = 0) -> list[tuple[str, str]]:
    """(sha, subject) of the first-parent history of `newest`, oldest first.

    With `since`, only commits after it (`since..newest`); with `limit`, only
    the newest `limit` of them. First-parent, because a branch's history is
    the sequence of states it was in: a merged topic branch arrives as one
    step, as a bisection over the mainline would see it.
    """
    args = ["-C", str(mirror), "log", "--first-parent", "--format=%H %s"]
    if limit:
        args.append(f"-n{limit}")
    args += [f"{since}..{newest}" if since else newest, "--"]
    out = run_git(args, timeout=600)
    rows = [line.split(" ", 1) for line in out.splitlines() if line]
    return [(r[0], r[1] if len(r) > 1 else "") for r in reversed(rows)]


def count_first_parent(mirror: Path, sha: str) -> int:
    """How many commits the first-parent history of `sha` has, itself included."""
    return int(run_git(["-C", str(mirror), "rev-list", "--first-parent", "--count", sha, "--"], timeout=600).strip())
