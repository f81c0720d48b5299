"""Tree URLs cannot make kperf connect inside its own network (server-side request forgery).

Address literals are judged when a submission arrives; host names when the
tree is fetched, on every address they resolve to, with git pinned to those
addresses; git follows no redirect; and every way a fetch can fail reads the
same to the submitter. The fetches here are real git against real HTTP
servers on loopback, which each test's operator lists in KPERF_TREE_HOSTS,
or not.
"""

from __future__ import annotations

import contextlib
import http.server
import ipaddress
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from kperf.conf import ConfigError
from kperf.core.builds import gitops
from kperf.core.builds.gitops import GitInputError, TreeRefused, TreeUnreachable, validate_tree_url
from kperf.core.builds.tree_urls import SCHEMES, IPAddress, TreePolicy, Unreachable, parse_hosts, parse_schemes
from kperf.core.models import Submission
from kperf.core.submissions.pipeline import prepare_submission

from tests.conftest import Api, git

DEFAULT = TreePolicy.build()


def said(url: str) -> str:
    """What the submitter reads whenever a fetch of `url` fails."""
    return str(TreeUnreachable(url))


class Server(http.server.ThreadingHTTPServer):
    """An HTTP server on loopback that remembers the paths it was asked for."""

    requests: list[str]
    location: str = ""

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class Quiet(http.server.SimpleHTTPRequestHandler):
    """Serves a directory: a bare repository in it is a git tree over dumb http."""

    server: Server

    def send_head(self) -> Any:
        self.server.requests.append(self.path)
        return super().send_head()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Redirect(Quiet):
    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        self.send_response(301)
        self.send_header("Location", self.server.location + self.path)
        self.end_headers()


class Page(Quiet):
    """A web server that is no git server: a page for every path."""

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        body = b"<html><body>intranet</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def serving(handler: Any, host: str = "127.0.0.1") -> Iterator[Server]:
    server = Server((host, 0), handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def served(small_tree: Path, tmp_path: Path) -> Path:
    """A directory holding linux.git, a bare copy of the small tree ready for dumb http."""
    root = tmp_path / "served"
    root.mkdir()
    git(tmp_path, "clone", "-q", "--bare", str(small_tree), str(root / "linux.git"))
    git(root / "linux.git", "update-server-info")
    return root


def repo_handler(root: Path) -> Any:
    return partial(Quiet, directory=str(root))


def plain_git_ls_remote(url: str) -> subprocess.CompletedProcess[str]:
    """git as it behaves without kperf's checks: what a fetch would do unprotected."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        ["git", "ls-remote", url], env=env | {"GIT_TERMINAL_PROMPT": "0"}, capture_output=True, text=True, timeout=60
    )


# --- What is judged when a submission arrives (no DNS) -----------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://127.0.0.1:55432/x.git", "loopback"),
        ("https://127.8.9.10/x.git", "loopback"),
        ("https://10.1.2.3/x.git", "private"),
        ("https://172.16.0.1/x.git", "private"),
        ("https://192.168.1.1/x.git", "private"),
        ("https://100.64.0.1/x.git", "shared address space, carrier-grade NAT"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("https://0.0.0.0/x.git", "unspecified"),
        ("https://224.0.0.1/x.git", "multicast"),
        ("https://240.0.0.1/x.git", "reserved"),
        ("https://255.255.255.255/x.git", "reserved"),
        ("https://[::1]/x.git", "loopback"),
        ("https://[::1]:8080/x.git", "loopback"),
        ("https://[::]/x.git", "unspecified"),
        ("https://[fe80::1]/x.git", "link-local"),
        ("https://[fd12:3456::1]/x.git", "unique local"),
        ("https://[fec0::1]/x.git", "site-local"),
        ("https://[ff02::1]/x.git", "multicast"),
        ("https://[::ffff:127.0.0.1]/x.git", "loopback, as an IPv4 address inside IPv6"),
        ("https://[::ffff:192.168.0.1]/x.git", "private, as an IPv4 address inside IPv6"),
        # NAT64 of 169.254.169.254, 6to4 of 10.0.0.1.
        ("https://[64:ff9b::a9fe:a9fe]/x.git", "link-local, as an IPv4 address inside IPv6"),
        ("https://[2002:a00:1::1]/x.git", "private, as an IPv4 address inside IPv6"),
        ("https://[64:ff9b:1::1]/x.git", "local-use NAT64"),
        ("https://[::127.0.0.1]/x.git", "reserved"),
        ("https://[2001:db8::1]/x.git", "reserved for documentation"),
    ],
)
def test_internal_addresses_are_refused_when_submitted(url: str, says: str) -> None:
    with pytest.raises(GitInputError) as exc:
        validate_tree_url(url, DEFAULT)
    message = str(exc.value)
    assert f"is an internal address ({says}" in message
    assert "kperf fetches only from public ones" in message and "KPERF_TREE_HOSTS" in message


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "127.1", "0177.0.0.1"])
def test_ipv4_addresses_in_old_forms_are_refused(host: str) -> None:
    # The resolver reads each of these as 127.0.0.1.
    assert socket.inet_aton(host) == socket.inet_aton("127.0.0.1")
    with pytest.raises(GitInputError, match=r"an IPv4 address in an old form: write it as a\.b\.c\.d"):
        validate_tree_url(f"https://{host}/x.git", DEFAULT)


@pytest.mark.parametrize(
    "url",
    [
        "https://8.8.8.8/x.git",
        "https://[2606:4700:4700::1111]/x.git",
        "https://[::ffff:8.8.8.8]/x.git",
        "https://git.kernel.org/pub/scm/linux/kernel/git/akpm/mm.git",
        # A name is judged when fetched, by what it resolves to then.
        "https://localhost/x.git",
    ],
)
def test_public_addresses_and_names_pass_when_submitted(url: str) -> None:
    assert validate_tree_url(url, DEFAULT) == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ssh://localhost/x.git", "uses ssh://, which this service does not accept (ssh:// is off by default"),
        ("ssh://git@example.org:2222/linux.git", "server's own keys"),
        ("git@example.org:linux.git", "is an ssh address, which this service does not accept"),
        ("git://git.kernel.org/pub/scm/linux.git", "uses git://, which this service does not accept"),
        ("http://example.org/linux.git", "uses http://, which this service does not accept"),
    ],
)
def test_only_https_is_accepted_unless_the_operator_adds_schemes(url: str, says: str) -> None:
    with pytest.raises(GitInputError) as exc:
        validate_tree_url(url, DEFAULT)
    assert says in str(exc.value) and "KPERF_TREE_SCHEMES" in str(exc.value)
    assert "use an https:// URL" in str(exc.value)
    assert validate_tree_url(url, TreePolicy.build(schemes=SCHEMES)) == url


def test_an_operator_can_allow_a_labs_internal_git_server() -> None:
    lab = TreePolicy.build(hosts=["git.lab.internal", "10.0.0.5", "[fd00::5]:8443", "*.lab.example", "*"])
    for url in (
        "https://git.lab.internal/linux.git",
        "https://10.0.0.5/linux.git",
        "https://[fd00::5]:8443/linux.git",
        "https://[FD00:0::5]:8443/linux.git",
        "https://git.lab.example/linux.git",
        "https://git.kernel.org/linux.git",
    ):
        assert validate_tree_url(url, lab) == url
    # Another port of a host listed with one, another address, the domain a wildcard stands under.
    for url in ("https://[fd00::5]/linux.git", "https://10.0.0.6/linux.git", "https://[::1]/x.git"):
        with pytest.raises(GitInputError, match="internal address"):
            validate_tree_url(url, lab)
    assert lab.listed("a.b.lab.example", 443) and not lab.listed("lab.example", 443)

    only = TreePolicy.build(hosts=["git.example.org"])
    assert validate_tree_url("https://GIT.example.org/x.git", only)
    with pytest.raises(GitInputError, match="not one this service fetches trees from: ask an operator to add it"):
        validate_tree_url("https://github.com/torvalds/linux.git", only)


def test_the_settings_say_what_is_wrong_with_a_list(tmp_path: Path) -> None:
    assert parse_schemes("KPERF_TREE_SCHEMES", ["HTTPS", "git://", " "]) == ["https", "git"]
    with pytest.raises(ConfigError, match=r"KPERF_TREE_SCHEMES names 'ftp'.*choose from https, http, git, ssh"):
        parse_schemes("KPERF_TREE_SCHEMES", ["https", "ftp"])
    rules, anything = parse_hosts("KPERF_TREE_HOSTS", ["git.lab:8080", "[::1]:9418", "fd00::5", "*"])
    assert anything and [(r.host, r.port) for r in rules] == [("git.lab", 8080), ("::1", 9418), ("fd00::5", None)]
    for entry, says in [
        ("https://git.lab/linux.git", "is a URL; list the host alone"),
        ("git.lab:99999", "not a number from 1 to 65535"),
        ("[fd00::5]8443", "is not a host, host:port"),
        ("git lab", "is not a host, host:port"),
        ("*", ""),
    ]:
        if not says:
            continue
        with pytest.raises(ConfigError, match=says):
            parse_hosts("KPERF_TREE_HOSTS", [entry])

    # The settings parse both at start: a typo stops the service, naming the variable.
    show = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.KPERF_TREE_SCHEMES, s.KPERF_TREE_HOSTS)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KPERF_")}
    env.update(DJANGO_SETTINGS_MODULE="kperf.settings", KPERF_HOME=str(tmp_path / "home"), KPERF_DEBUG="1")
    run = partial(subprocess.run, [sys.executable, "-c", show], capture_output=True, text=True, timeout=60)
    ok = run(env=env)
    assert ok.returncode == 0 and ok.stdout.strip() == "['https'] ['*']", ok.stderr
    bad = run(env=env | {"KPERF_TREE_HOSTS": "git.lab,https://git.lab/x.git"})
    assert bad.returncode != 0 and "KPERF_TREE_HOSTS: 'https://git.lab/x.git' is a URL" in bad.stderr


# --- What is judged when a tree is fetched (real git, servers on loopback) -------------------


def test_an_allowed_host_is_fetched_through_the_real_git_path(served: Path, small_tree: Path, tmp_path: Path) -> None:
    with serving(repo_handler(served)) as server:
        url = f"http://127.0.0.1:{server.port}/linux.git"
        # Loopback is internal: only the operator's list lets kperf fetch from it.
        with pytest.raises(GitInputError, match="loopback"):
            validate_tree_url(url, TreePolicy.build(schemes=["http"]))
        lab = TreePolicy.build(schemes=["http"], hosts=[f"127.0.0.1:{server.port}"])
        mirror = tmp_path / "mirrors" / "linux"
        gitops.update_mirror(url, mirror, timeout=60, policy=lab)
        assert gitops.resolve_ref(mirror, "feature") == git(small_tree, "rev-parse", "feature")

        # The branch moves; the next fetch into the existing mirror brings the commit.
        git(small_tree, "checkout", "-q", "feature")
        (small_tree / "README").write_text("moved\n")
        git(small_tree, "commit", "-q", "-am", "moved")
        moved = git(small_tree, "rev-parse", "HEAD")
        git(small_tree, "push", "-q", str(served / "linux.git"), "feature")
        git(served / "linux.git", "update-server-info")
        gitops.ensure_commit(url, mirror, moved, timeout=60, policy=lab)
        assert gitops.has_commit(mirror, moved)
        assert any(p.startswith("/linux.git/info/refs") for p in server.requests)


def test_a_name_that_resolves_to_loopback_is_refused_and_not_connected_to(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kperf.core.builds.gitops")
    with serving(Page) as server:
        url = f"http://localhost:{server.port}/linux.git"
        anywhere_public = TreePolicy.build(schemes=["http"])
        with pytest.raises(TreeUnreachable) as exc:
            gitops.update_mirror(url, tmp_path / "m", timeout=30, policy=anywhere_public)
        assert str(exc.value) == said(url)
        assert server.requests == []
    assert "localhost resolves to internal addresses" in caplog.text and "127.0.0.1 (loopback)" in caplog.text
    assert not (tmp_path / "m").exists()


def test_every_address_a_name_resolves_to_is_checked() -> None:
    def dns(host: str, port: int) -> list[IPAddress]:
        # One public answer and one inside: git could pick either.
        return [ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("fd00::7")]

    # Judged on the policy alone: were the check broken, a fetch would go to 8.8.8.8.
    with pytest.raises(Unreachable) as exc:
        TreePolicy.build(resolve=dns).addresses("git.example.org", 443)
    assert "fd00::7 (unique local)" in str(exc.value) and "8.8.8.8" not in str(exc.value)
    listed = TreePolicy.build(hosts=["git.example.org", "*"], resolve=dns)
    assert listed.addresses("git.example.org", 443) == dns("", 0)


def test_git_connects_to_the_address_that_was_checked_not_to_a_later_answer(served: Path, tmp_path: Path) -> None:
    """DNS rebinding: kperf checks one answer, git's own lookup would get another."""
    with serving(repo_handler(served), host="127.0.0.2") as server:
        url = f"http://localhost:{server.port}/linux.git"
        # The system says localhost is 127.0.0.1 (or ::1), where nothing listens on this port.
        assert plain_git_ls_remote(url).returncode != 0 and server.requests == []

        def dns(host: str, port: int) -> list[IPAddress]:
            assert host == "localhost"
            return [ipaddress.ip_address("127.0.0.2")]

        policy = TreePolicy.build(schemes=["http"], hosts=[f"localhost:{server.port}"], resolve=dns)
        gitops.update_mirror(url, tmp_path / "m", timeout=60, policy=policy)
        assert gitops.has_commit(tmp_path / "m", git(served / "linux.git", "rev-parse", "master"))
        assert server.requests


def test_a_redirect_from_an_allowed_server_to_another_loopback_port_is_not_followed(
    served: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kperf.core.builds.gitops")
    with serving(repo_handler(served)) as inside, serving(Redirect) as allowed:
        allowed.location = f"http://127.0.0.1:{inside.port}"
        url = f"http://127.0.0.1:{allowed.port}/linux.git"
        policy = TreePolicy.build(schemes=["http"], hosts=[f"127.0.0.1:{allowed.port}"])
        with pytest.raises(TreeUnreachable) as exc:
            gitops.update_mirror(url, tmp_path / "m", timeout=60, policy=policy)
        assert str(exc.value) == said(url)
        assert allowed.requests and inside.requests == []
        assert "301" in caplog.text
        # Unprotected, git follows the redirect and reads the repository inside.
        assert plain_git_ls_remote(url).returncode == 0 and inside.requests


def test_a_closed_port_a_web_page_a_tls_failure_and_a_timeout_read_the_same(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kperf.core.builds.gitops")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    # Accepts connections (the kernel completes them) and never answers.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        with serving(Page) as web:
            ports = [closed, web.port, silent.getsockname()[1]]
            policy = TreePolicy.build(schemes=["https", "http"], hosts=[f"127.0.0.1:{p}" for p in ports])
            cases = {
                "closed": (f"http://127.0.0.1:{closed}/linux.git", 60),
                "web page": (f"http://127.0.0.1:{web.port}/linux.git", 60),
                "tls": (f"https://127.0.0.1:{web.port}/linux.git", 60),
                "timeout": (f"http://127.0.0.1:{ports[2]}/linux.git", 3),
            }
            seen: dict[str, str] = {}
            for name, (url, timeout) in cases.items():
                with pytest.raises(TreeUnreachable) as exc:
                    gitops.update_mirror(url, tmp_path / name, timeout=timeout, policy=policy)
                seen[name] = str(exc.value).replace(url, "<url>")
            assert web.requests, "git reached the web server"
    finally:
        silent.close()
    assert set(seen.values()) == {said("<url>")}, seen
    # The reasons, all different, are in the server's log only.
    reasons = {
        name: [r.getMessage() for r in caplog.records if url in r.getMessage()] for name, (url, _) in cases.items()
    }
    assert all(len(found) == 1 for found in reasons.values()), reasons
    assert len({found[0].split(": ", 1)[1] for found in reasons.values()}) == 4, reasons
    assert "did not finish within 3 s" in reasons["timeout"][0]


def test_a_stored_tree_the_rules_no_longer_allow_is_refused_when_fetched(tmp_path: Path) -> None:
    # Trees a submission stored before these rules, as the probe's.
    for url, says in [("ssh://localhost/x.git", "ssh://"), ("https://127.0.0.1:55432/x.git", "loopback")]:
        with pytest.raises(TreeRefused) as exc:
            gitops.update_mirror(url, tmp_path / "m", timeout=30, policy=DEFAULT)
        assert str(exc.value).startswith(f"could not fetch {url}: ") and says in str(exc.value)
    with pytest.raises(TreeRefused, match="local trees are off"):
        gitops.update_mirror(str(tmp_path), tmp_path / "m", timeout=30, policy=DEFAULT)


# --- Through the service ---------------------------------------------------------------------


@pytest.mark.django_db
def test_the_probes_urls_are_refused_when_submitted(alice_api: Api, qemu_class: Any) -> None:
    for tree, says in [("ssh://localhost/x.git", "ssh://"), ("https://127.0.0.1:55432/x.git", "loopback")]:
        resp = alice_api.post("/submissions", {"tree": tree, "branch": "b", "base": "v1"})
        assert resp.status_code == 400, resp.content
        assert resp.json()["field"] == "tree" and says in resp.json()["detail"]


@pytest.mark.django_db
def test_a_submission_whose_host_resolves_inside_fails_with_the_same_message(
    alice_api: Api, qemu_class: Any, settings_dirs: Any
) -> None:
    # http://, so that a connection would show as a request.
    settings_dirs.KPERF_TREE_SCHEMES = ["https", "http"]
    with serving(Page) as server:
        url = f"http://localhost:{server.port}/linux.git"
        resp = alice_api.post("/submissions", {"tree": url, "branch": "b", "base": "v1"})
        assert resp.status_code == 201, resp.content
        prepare_submission(resp.json()["id"])
        sub = Submission.objects.get(pk=resp.json()["id"])
        assert sub.status == Submission.Status.FAILED and sub.error == said(url)
        assert server.requests == []
