"""Git handling: which tree URLs and refs are acceptable, local mirrors, ref resolution.

Every git call takes an argument list, never a shell string, and runs with
GIT_ALLOW_PROTOCOL so that even a URL that slipped past validation cannot use
git's `ext::` or `fd::` transports to run commands. Every fetch from a tree
checks where it would connect first (kperf.core.builds.tree_urls), pins git to the
addresses it checked and follows no redirect; when it fails, the submitter
reads one message whatever the cause, and the cause goes to the log.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from kperf.core.builds import tree_urls
from kperf.core.builds.tree_urls import TreePolicy

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


class AmbiguousSha(GitError):
    """An abbreviated sha that names more than one commit the reader may read; the message says to give more."""


class FetchError(GitError):
    """A tree could not be fetched; the message, a whole sentence naming the URL, is for the submitter."""


class TreeRefused(FetchError):
    """The tree's URL is not one this service fetches from (a tree stored before the operator's rules changed)."""


class TreeUnreachable(FetchError):
    """The fetch failed or was refused for a reason that would tell the submitter what listens where.

    A closed port, a timeout, a TLS failure, a web server that is no git
    server, a redirect and a name resolving to an internal address all read
    the same; the reason is logged (logger kperf.gitops) for the operator.
    """

    def __init__(self, url: str) -> None:
        super().__init__(
            f"could not fetch {url}: the tree is not reachable from kperf, or is not a git repository "
            "(check the URL; if `git ls-remote` reaches it from elsewhere, kperf's log tells an operator why)"
        )
        self.url = url


log = logging.getLogger(__name__)


def _kinds(policy: TreePolicy) -> str:
    """What this service accepts as a tree, for messages: "an https:// URL or a local path"."""
    urls = ", ".join(f"{s}://" for s in policy.schemes) if policy.schemes else "no"
    return f"an {urls} URL" + (" or a local path" if policy.allow_local else "")


def _scheme_refusal(url: str, scheme: str, policy: TreePolicy) -> str:
    if scheme not in tree_urls.SCHEMES:
        return f"the tree URL {url!r} uses {scheme}://, which kperf does not accept; use {_kinds(policy)}"
    why = " (ssh:// is off by default: it would connect with the server's own keys)" if scheme == "ssh" else ""
    return (
        f"the tree URL {url!r} uses {scheme}://, which this service does not accept{why}; use {_kinds(policy)} "
        f"(an operator can allow {scheme}:// with KPERF_TREE_SCHEMES)"
    )


def _host_problem(url: str, host: str) -> str:
    if host.endswith("."):
        # curl would match its pinned address on the name without the dot.
        return f"the host of the tree URL {url!r} ends with '.': give it without the trailing dot"
    if tree_urls.ip_literal(host) is None and host.replace(".", "").isalnum():
        try:
            socket.inet_aton(host)
        except OSError:
            return ""
        # 2130706433 or 0x7f.1 are 127.0.0.1 to the resolver, and would slip past a list of addresses.
        return f"the host of the tree URL {url!r} is an IPv4 address in an old form: write it as a.b.c.d"
    return ""


@dataclass(frozen=True)
class _Target:
    """Where a remote tree URL connects: scheme, host (IPv6 without brackets) and port."""

    scheme: str
    host: str
    port: int


def _target(url: str, policy: TreePolicy) -> _Target | None:
    """Check `url` against syntax and the policy without DNS; None for an accepted local tree."""
    if not url or not url.strip():
        raise GitInputError(f"the tree URL is empty: give {_kinds(policy)}")
    if "::" in url.split("/", 1)[0]:
        raise GitInputError(
            f"the tree URL {url!r} uses git's '<transport>::' syntax, which can run programs; use {_kinds(policy)}"
        )
    if url != url.strip() or any(ord(c) < 0x20 or c == "\x7f" for c in url) or " " in url:
        raise GitInputError(f"the tree URL {url!r} contains white space or control characters")
    if len(url) > MAX_URL_LENGTH:
        raise GitInputError(f"the tree URL is {len(url)} characters long; the limit is {MAX_URL_LENGTH}")
    if url.startswith("-"):
        raise GitInputError(f"the tree URL {url!r} starts with '-', which git would read as an option")
    if url.startswith("/") or url.startswith("file://"):
        if not policy.allow_local:
            raise GitInputError(
                f"{url!r} is a local tree, and local trees are off on this service (it does not read its own "
                "disk for users): push the branch to a git server and give its https:// URL "
                "(an operator can turn them on with KPERF_ALLOW_LOCAL_TREES=1)"
            )
        path = url[len("file://") :] if url.startswith("file://") else url
        if not path.startswith("/"):
            raise GitInputError(f"the local tree {url!r} is not an absolute path")
        return None
    if "://" in url:
        try:
            parts = urlsplit(url)
        except ValueError:  # an unclosed '[' of an IPv6 address
            raise GitInputError(f"the tree URL {url!r} has no valid host name") from None
        scheme = parts.scheme.lower()
        if scheme not in policy.schemes:
            raise GitInputError(_scheme_refusal(url, scheme, policy))
        if parts.netloc.count("@") > 1:
            # Python reads the host after the last '@', git and curl after the first: one host, or none.
            raise GitInputError(f"the tree URL {url!r} has more than one '@' before its host: write '@' as %40")
        hostport = parts.netloc.rsplit("@", 1)[-1]
        host = hostport[: hostport.find("]") + 1] if hostport.startswith("[") else hostport.rsplit(":", 1)[0]
        if not parts.hostname or not _HOST_RE.match(host):
            raise GitInputError(f"the tree URL {url!r} has no valid host name")
        if not parts.path or parts.path == "/":
            raise GitInputError(f"the tree URL {url!r} names no repository path")
        try:
            port = parts.port or tree_urls.DEFAULT_PORTS[scheme]
        except ValueError:
            raise GitInputError(f"the tree URL {url!r} has a malformed port") from None
        target = _Target(scheme, parts.hostname, port)
    else:
        m = _SCP_LIKE_RE.match(url)
        # scp-like syntax needs a user or a dotted host name, so that a relative
        # path such as "linux:stable" is not mistaken for a remote.
        if m is None or not (m.group("user") or "." in m.group("host")):
            raise GitInputError(
                f"{url!r} is not a git URL kperf understands: use https://host/path.git"
                + (", git://host/path" if "git" in policy.schemes else "")
                + (", ssh://user@host/path or user@host:path" if "ssh" in policy.schemes else "")
                + (" or a local path" if policy.allow_local else "")
            )
        if "ssh" not in policy.schemes:
            raise GitInputError(_scheme_refusal(url, "ssh", policy).replace("uses ssh://", "is an ssh address"))
        target = _Target("ssh", m.group("host"), tree_urls.DEFAULT_PORTS["ssh"])
    problem = _host_problem(url, target.host) or policy.host_refusal(target.host, target.port)
    if problem:
        raise GitInputError(problem)
    return target


def validate_tree_url(url: str, policy: TreePolicy) -> str:
    """Return the URL if kperf accepts it under `policy`, else raise GitInputError.

    Accepted: the schemes of the policy (https:// by default; http://,
    git://, ssh:// and scp-like user@host:path when the operator allows
    them), to hosts the policy allows, and (when the service allows it)
    absolute local paths or file:// URLs. Only what can be judged without
    DNS is checked here; a fetch checks again, with every address the host
    resolves to (kperf.core.builds.tree_urls).
    """
    _target(url, policy)
    return url


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
    args: list[str],
    cwd: Path | None = None,
    timeout: int = 1800,
    extra_env: dict[str, str] | None = None,
    input: str | None = None,
) -> str:
    env = _git_env() | (extra_env or {})
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, env=env, input=input, capture_output=True, text=True, timeout=timeout, check=False
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


@dataclass(frozen=True)
class _Route:
    """How git is to fetch a tree: the URL to give it and the environment that pins and restricts it."""

    url: str
    env: dict[str, str]


def _config_env(config: dict[str, str]) -> dict[str, str]:
    """git configuration as environment, which the transport helpers git starts (git-remote-https) inherit."""
    base = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)  # the operator's own, kept
    env = {"GIT_CONFIG_COUNT": str(base + len(config))}
    for i, (key, value) in enumerate(config.items(), start=base):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


@functools.lru_cache(maxsize=1)
def _git_version() -> tuple[int, ...]:
    out = run_git(["version"], timeout=60)
    return tuple(int(n) for n in re.findall(r"\d+", out)[:2])


def _route(url: str, policy: TreePolicy) -> _Route:
    """Check `url` and every address its host resolves to (GitInputError, tree_urls.Unreachable); pin git to them."""
    target = _target(url, policy)
    if target is None:
        return _Route(url, {"GIT_ALLOW_PROTOCOL": "file"})
    addresses = policy.addresses(target.host, target.port)
    # Redirects are not followed (nor are dumb http's alternates, which git
    # treats as redirects): each hop would need the checks above, and a
    # redirect to 127.0.0.1 is the easiest way around them. No bundle URIs
    # either: those are URLs the server names, fetched from here.
    config = {"http.followRedirects": "false", "transfer.bundleURI": "false"}
    env = {"GIT_ALLOW_PROTOCOL": target.scheme}
    if tree_urls.ip_literal(target.host) is None:
        first = addresses[0]
        if target.scheme in ("https", "http"):
            if _git_version() < (2, 37):
                raise GitError(
                    "this machine's git cannot pin a fetch to the address kperf checked (http.curloptResolve needs "
                    "git 2.37 or newer): upgrade git"
                )
            # curl connects to these addresses and no others; TLS still checks the name's certificate.
            pins = ",".join(f"[{a}]" if a.version == 6 else str(a) for a in addresses)
            config["http.curloptResolve"] = f"{target.host}:{target.port}:{pins}"
        elif target.scheme == "git":
            # git:// has no certificate to check and git resolves the name
            # itself, so the URL names the checked address; the daemon loses
            # only the host name a virtual-hosting setup would read.
            netloc = f"[{first}]:{target.port}" if first.version == 6 else f"{first}:{target.port}"
            url = urlsplit(url)._replace(netloc=netloc).geturl()
        else:
            # ssh: connect to the checked address, and check the host key under the name.
            env["GIT_SSH_COMMAND"] = (
                f"{_git_env()['GIT_SSH_COMMAND']} -o HostName={first} -o HostKeyAlias={target.host}"
            )
    return _Route(url, env | _config_env(config))


def _fetch(url: str, policy: TreePolicy | None, args: Callable[[str], list[str]], timeout: int) -> None:
    """Run the git command `args(url to give git)` that fetches from the tree at `url`, once the route is checked."""
    try:
        route = _route(url, policy if policy is not None else tree_urls.policy_from_settings())
    except GitInputError as e:
        raise TreeRefused(f"could not fetch {url}: {e}") from None
    except tree_urls.Unreachable as e:
        log.warning("not fetching %s: %s", url, e)
        raise TreeUnreachable(url) from None
    try:
        run_git(args(route.url), timeout=timeout, extra_env=route.env)
    except GitError as e:
        log.warning("fetching %s failed: %s", url, e)
        raise TreeUnreachable(url) from None


def _has_refs(repo: Path) -> bool:
    """Whether `repo` has any ref of the tree's (kperf's own under refs/kperf/ do not count)."""
    out = run_git(["-C", str(repo), "for-each-ref", "--format=%(refname)"], timeout=120)
    return any(line and not line.startswith(KPERF_REFS) for line in out.splitlines())


def _nothing_fetched(url: str) -> NoReturn:
    # Over dumb http, any web server "serves" an empty repository: its page
    # is read as a list of no refs and the clone succeeds. Telling that
    # apart from a refused connection would show what listens there, and an
    # empty tree has nothing kperf could build anyway.
    log.warning("fetching %s gave no branch or tag: an empty repository, or a web server that is no git server", url)
    raise TreeUnreachable(url)


def update_mirror(url: str, mirror: Path, timeout: int = 1800, policy: TreePolicy | None = None) -> None:
    """Create or refresh a bare mirror of `url` at `mirror` (one fetch at a time per mirror).

    `policy` is the service's (tree_urls.policy_from_settings) unless given;
    FetchError when the tree cannot be fetched.
    """
    with _locked(mirror):
        if not (mirror / "HEAD").exists():
            tmp = mirror.with_name(mirror.name + ".partial")
            if tmp.exists():
                # Left over from a clone that was interrupted: start again.
                shutil.rmtree(tmp)
            _fetch(url, policy, lambda u: ["clone", "--mirror", "--quiet", "--", u, str(tmp)], timeout)
            if not _has_refs(tmp):
                shutil.rmtree(tmp)
                _nothing_fetched(url)
            tmp.rename(mirror)
        else:
            # Everything the tree has, except kperf's own refs (applied patch
            # series, kperf.core.builds.apply_series), which --prune would delete. From
            # the URL, checked now, rather than the remote the clone recorded.
            refspecs = ["+refs/*:refs/*", f"^{KPERF_REFS}*"]
            _fetch(
                url, policy, lambda u: ["-C", str(mirror), "fetch", "--prune", "--quiet", "--", u, *refspecs], timeout
            )
            if not _has_refs(mirror):
                _nothing_fetched(url)


def has_commit(mirror: Path, sha: str) -> bool:
    if not (mirror / "HEAD").exists():
        return False
    try:
        run_git(["-C", str(mirror), "cat-file", "-e", f"{sha}^{{commit}}"], timeout=60)
    except GitError:
        return False
    return True


def ensure_commit(url: str, mirror: Path, sha: str, timeout: int = 1800, policy: TreePolicy | None = None) -> None:
    """Make sure commit `sha` of the tree at `url` is in this machine's `mirror`.

    The web host's workers resolve refs in their own mirror; a build machine
    elsewhere has a mirror of its own that may not have the commit yet, so
    it fetches the tree first, and then the commit by itself (a ref may have
    moved past it since). GitError says what failed.
    """
    if has_commit(mirror, sha):
        return
    update_mirror(url, mirror, timeout=timeout, policy=policy)
    if has_commit(mirror, sha):
        return
    with _locked(mirror):
        try:
            _fetch(url, policy, lambda u: ["-C", str(mirror), "fetch", "--quiet", "--", u, sha], timeout)
        except FetchError as e:
            raise GitError(
                f"commit {sha} is on no branch or tag of {url} and could not be fetched by sha "
                "(the server may not allow fetching a commit no ref names)"
            ) from e
    if not has_commit(mirror, sha):
        raise GitError(f"commit {sha} is not in {url}")


# What everyone may name in a tree: its published branches and tags.
PUBLISHED_REFS = ("refs/heads/", "refs/tags/")
# An abbreviated sha, as `git rev-parse --short` prints it (git needs at least 4 digits).
_ABBREV_RE = re.compile(r"^[0-9a-fA-F]{4,40}$")


@dataclass(frozen=True)
class Reader:
    """What one submitter may read in a tree's mirror besides its published branches and tags.

    A mirror is shared by every submitter of a tree URL and also holds the
    patch series kperf applied for each of them: `namespace` is the ref
    prefix of this submitter's own series (ending in '/'), which they may
    name and reach; `reaching` are single refs of theirs whose commits they
    may give by sha but not name (series applied under an older name).
    """

    namespace: str = ""
    reaching: tuple[str, ...] = ()


# Everyone, and no one's series: the tree as its server publishes it.
PUBLIC = Reader()


def resolve_ref(mirror: Path, ref: str, reader: Reader = PUBLIC) -> str:
    """The commit sha that `ref` names in the mirror for `reader`; GitError if it names none they may read.

    A name is a branch or tag (short, or as refs/heads/X, refs/tags/X), a
    ref of the reader's own namespace, or a sha of 4 to 40 hex digits of a
    commit that one of those reaches. Nothing else is handed to git's own
    name resolution, which would also read refs/X, refs/remotes/X,
    FETCH_HEAD and describe-like names ("x-g<sha>"), and so another
    submitter's series; and a sha is looked up only among readable commits,
    so whether a private one exists changes no answer.
    """
    if ref.startswith("refs/"):
        allowed = (*PUBLISHED_REFS, reader.namespace) if reader.namespace else PUBLISHED_REFS
        names = [ref] if ref.startswith(allowed) else []
    elif ref == "HEAD":
        # The tree's default branch, as the clone recorded it.
        names = [head for head in [_symbolic_head(mirror)] if head.startswith(PUBLISHED_REFS[0])]
    else:
        names = [f"{prefix}{ref}" for prefix in PUBLISHED_REFS]
    for name in names:
        sha = exact_ref(mirror, name)
        if sha:
            return sha
    if not ref.startswith("refs/") and _ABBREV_RE.match(ref):
        sha = _readable_commit(mirror, ref.lower(), reader)
        if sha:
            return sha
    raise GitError(f"{ref!r} is not a branch, tag or commit in the tree")


def _symbolic_head(mirror: Path) -> str:
    try:
        return run_git(["-C", str(mirror), "symbolic-ref", "--quiet", "HEAD"], timeout=60).strip()
    except GitError:
        return ""


def exact_ref(mirror: Path, name: str) -> str:
    """The commit the ref called exactly `name` points at (peeled), or ""."""
    try:
        # --verify: the whole name, not git's guesses from it.
        run_git(["-C", str(mirror), "show-ref", "--verify", "--quiet", "--", name], timeout=60)
        out = run_git(
            ["-C", str(mirror), "rev-parse", "--verify", "--quiet", "--end-of-options", name + "^{commit}"],
            timeout=60,
        ).strip()
    except GitError:
        return ""
    return out if SHA_RE.match(out) else ""


def _readable_commit(mirror: Path, prefix: str, reader: Reader) -> str:
    """The one commit starting with `prefix` that a published ref or the reader's own reaches; "" if none.

    Several readable ones are AmbiguousSha (give more digits); unreadable
    objects with the same prefix are not counted, so they are not told.
    """
    if len(prefix) == 40:
        candidates = [prefix]
    else:
        try:
            out = run_git(["-C", str(mirror), "rev-parse", f"--disambiguate={prefix}"], timeout=120)
        except GitError:
            return ""
        candidates = out.split()
    if not candidates:
        return ""
    types = run_git(
        ["-C", str(mirror), "cat-file", "--batch-check=%(objectname) %(objecttype)"],
        timeout=120,
        input="".join(f"{c}\n" for c in candidates),
    )
    commits = [line.split()[0] for line in types.splitlines() if line.endswith(" commit")]
    readable = _readable_tips(mirror, reader)
    found: list[str] = []
    for sha in commits:
        # Nothing printed: every commit `sha` reaches is reached by a readable ref, so it is one itself.
        if not run_git(["-C", str(mirror), "rev-list", "-n1", sha, "--not", *readable, "--"], timeout=600).strip():
            found.append(sha)
            if len(found) > 1:
                raise AmbiguousSha(f"the abbreviated sha {prefix!r} names more than one commit: give more digits")
    return found[0] if found else ""


def _readable_tips(mirror: Path, reader: Reader) -> list[str]:
    """rev-list's arguments for every ref `reader` may read from."""
    tips = ["--branches", "--tags"]
    if reader.namespace:
        tips.append(f"--glob={reader.namespace}*")
    if reader.reaching:
        out = run_git(["-C", str(mirror), "for-each-ref", "--format=%(refname)", "--", *reader.reaching], timeout=120)
        # for-each-ref matches by prefix: only the refs named, and only those that exist (rev-list refuses others).
        tips += sorted(set(out.split()) & set(reader.reaching))
    return tips


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
