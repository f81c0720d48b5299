"""The web server as `kperf-up` starts it: slow or stalled clients cannot starve it.

Floods here are small (tens of connections, a limit of 20); bench/slow_clients.py
measures 2000 and docs/performance.md has its figures.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kperf.conf import ConfigError
from kperf.web_guard import address_key, connection_budget, parse_networks

from tests.web_fixtures import running_web


@pytest.fixture
def web_server(transactional_db: Any, tmp_path: Path) -> Iterator[str]:
    with running_web(tmp_path) as url:
        yield url


def test_stalled_clients_do_not_keep_others_waiting(web_server: str) -> None:
    port = int(web_server.rsplit(":", 1)[1])
    stalled = []
    try:
        # Clients that stop half-way: mid-headers, and mid-body of an upload.
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            stalled.append(s)
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(
                b"POST /api/v1/runner/claim HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
            )
            stalled.append(s)
        time.sleep(0.5)
        start = time.monotonic()
        for _ in range(5):
            resp = requests.get(f"{web_server}/api/v1/health", timeout=5)
            assert resp.status_code == 200 and resp.json() == {"status": "ok"}
        assert time.monotonic() - start < 5
    finally:
        for s in stalled:
            s.close()


class Trickle:
    """Slow clients: each sends a request head (or a body) a few bytes at a time, never finishing."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.open: dict[socket.socket, float] = {}  # socket -> when it was opened
        self.closed: dict[socket.socket, tuple[float, bytes]] = {}  # -> (seconds it lived, what it was sent)
        self.got: dict[socket.socket, bytes] = {}

    def connect(
        self, source: str, first: bytes = b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    ) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5, source_address=(source, 0))
        s.sendall(first)
        s.setblocking(False)
        self.open[s] = time.monotonic()
        self.got[s] = b""
        return s

    def _close(self, s: socket.socket) -> None:
        self.closed[s] = (time.monotonic() - self.open.pop(s), self.got[s])
        s.close()

    def tick(self, chunk: bytes = b"X-Slow: 1\r\n") -> None:
        """Read what the server sent (noting closes), then send every open connection `chunk`."""
        for s in list(self.open):
            try:
                while data := s.recv(4096):
                    self.got[s] += data
                self._close(s)  # b"": the server closed it
                continue
            except BlockingIOError:
                pass
            except OSError:
                self._close(s)
                continue
            try:
                s.send(chunk)
            except BlockingIOError:
                pass
            except OSError:
                self._close(s)

    def run(self, seconds: float, every: float = 0.2, chunk: bytes = b"X-Slow: 1\r\n") -> None:
        end = time.monotonic() + seconds
        while self.open and time.monotonic() < end:
            self.tick(chunk)
            time.sleep(every)

    def close_all(self) -> None:
        for s in list(self.open):
            self._close(s)


def get_from(port: int, source: str) -> bytes:
    """A normal, whole GET of the health check from `source`; the raw answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as s:
        s.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = b""
        while data := s.recv(4096):
            answer += data
        return answer


def test_a_flood_of_trickling_clients_past_the_connection_limit_does_not_lock_others_out(
    transactional_db: Any, tmp_path: Path
) -> None:
    limit, head_timeout = 20, 3
    settings = {
        "KPERF_WEB_CONNECTION_LIMIT": str(limit),
        "KPERF_WEB_HEADER_TIMEOUT": str(head_timeout),
        "KPERF_WEB_PER_ADDRESS_LIMIT": "0",
    }
    with running_web(tmp_path, settings) as url:
        flood = Trickle(int(url.rsplit(":", 1)[1]))
        try:
            # Three times the limit, from six addresses, each a header line every 0.2 s: never idle.
            for i in range(3 * limit):
                flood.connect(f"127.0.3.{i % 6 + 1}")
            flood.run(0.5)
            start = time.monotonic()
            resp = requests.get(f"{url}/api/v1/health", timeout=10)
            waited = time.monotonic() - start
            assert resp.status_code == 200 and resp.json() == {"status": "ok"}
            # Answered at once: it took the place of the slowest, not a turn after the deadline.
            assert waited < head_timeout, waited
            flood.run(head_timeout + 6)
            assert not flood.open, f"{len(flood.open)} trickling connections outlived their deadline"
        finally:
            flood.close_all()
    lives = list(flood.closed.values())
    evicted = [life for life, got in lives if not got and life < head_timeout - 0.5]
    expired = [life for life, got in lives if got.startswith(b"HTTP/1.1 408 ")]
    # Past the limit each newcomer evicted the longest-waiting one; the last ones in met their deadline.
    assert len(evicted) >= 2 * limit - 1, sorted(life for life, _ in lives)
    assert len(expired) >= limit // 2, sorted(life for life, _ in lives)
    assert all(head_timeout - 0.3 <= life <= head_timeout + 4 for life in expired), expired
    assert len(evicted) + len(expired) == len(lives) == 3 * limit


def test_one_address_holds_at_most_its_share_of_connections(transactional_db: Any, tmp_path: Path) -> None:
    with running_web(tmp_path, {"KPERF_WEB_PER_ADDRESS_LIMIT": "5", "KPERF_WEB_HEADER_TIMEOUT": "60"}) as url:
        port = int(url.rsplit(":", 1)[1])
        slow = Trickle(port)
        uploads = Trickle(port)
        try:
            order = []
            for _ in range(8):
                order.append(slow.connect("127.0.4.1"))
                slow.run(0.1)
            slow.run(1.0)
            # The address keeps its 5 newest; its 3 oldest made room for them.
            assert set(slow.closed) == set(order[:3]) and set(slow.open) == set(order[3:])
            # Someone else behind that address still gets in, in place of its oldest slow connection.
            assert get_from(port, "127.0.4.1").startswith(b"HTTP/1.1 200 ")
            slow.run(1.0)
            assert order[3] in slow.closed and set(slow.open) == set(order[4:])

            # Five uploads under way hold their places (a body is not evicted); a sixth connection
            # from that address is told why it is refused; other addresses are not affected.
            head = b"POST /api/v1/runner/claim HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n{"
            for _ in range(5):
                uploads.connect("127.0.4.2", head)
            uploads.run(0.5, chunk=b" ")
            refused = get_from(port, "127.0.4.2")
            assert refused.startswith(b"HTTP/1.1 503 ") and b"too many connections" in refused, refused
            assert len(uploads.open) == 5
            assert requests.get(f"{url}/api/v1/health", timeout=10).status_code == 200
        finally:
            slow.close_all()
            uploads.close_all()


def test_a_body_slower_than_the_minimum_rate_is_cut_off_and_a_faster_one_is_not(
    transactional_db: Any, tmp_path: Path
) -> None:
    settings = {"KPERF_WEB_BODY_TIMEOUT": "2", "KPERF_WEB_BODY_MIN_RATE": "1000"}
    with running_web(tmp_path, settings) as url:
        port = int(url.rsplit(":", 1)[1])
        head = b"POST /api/v1/runner/claim HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        slow, fast = Trickle(port), Trickle(port)
        try:
            slow.connect("127.0.0.1", head + b"Content-Length: 100000\r\n\r\n")
            # 60 kB at 20 kB/s: 3 s, longer than the 2 s body timeout, but each 1000 bytes buy a second.
            fast_sock = fast.connect("127.0.0.1", head + b"Content-Length: 60000\r\nConnection: close\r\n\r\n")
            sent = 0
            end = time.monotonic() + 10
            while (slow.open or fast.open) and time.monotonic() < end:
                slow.tick(b"0" * 10)  # 50 B/s
                if sent < 60000:
                    fast.tick(b"0" * 2000)
                    sent += 2000
                else:
                    fast.tick(b"")
                time.sleep(0.1)
        finally:
            slow.close_all()
            fast.close_all()
    ((slow_life, slow_got),) = slow.closed.values()
    assert slow_got.startswith(b"HTTP/1.1 408 ") and 2 <= slow_life <= 6, (slow_life, slow_got)
    fast_life, fast_got = fast.closed[fast_sock]
    # The view's own answer (the claim needs a runner token), after the whole body arrived.
    assert fast_got.startswith(b"HTTP/1.1 401 "), fast_got[:200]
    assert fast_life >= 2.5


def test_the_open_files_limit_is_raised_to_the_hard_limit_and_bounds_the_connection_limit(tmp_path: Path) -> None:
    script = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1024), hard))\n"
        "from kperf.web import limits_from_env\n"
        "from kperf.web_guard import raise_open_files_limit\n"
        "n = raise_open_files_limit()\n"
        "print(n, resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard, limits_from_env(n).connection_limit)\n"
        "print(limits_from_env(1024).connection_limit)\n"
    )
    env = dict(os.environ, KPERF_WEB_CONNECTION_LIMIT="5000")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    first, second = out.splitlines()
    n, soft, hard, limit = (int(x) for x in first.split())
    # An unlimited hard limit (-1) stops at the kernel's default nr_open.
    assert n == soft == (hard if hard != resource.RLIM_INFINITY else 1048576)
    assert limit == min(5000, connection_budget(n))
    # A limit the descriptors cannot hold is lowered to what they can (and a warning says so).
    assert int(second) == connection_budget(1024) < 5000


def test_per_address_keys_group_ipv6_by_64_and_leave_exempt_networks_out() -> None:
    exempt = parse_networks("KPERF_WEB_PER_ADDRESS_EXEMPT", ["10.0.0.5", "fd00::/8"])
    assert address_key("192.0.2.7", exempt) == "192.0.2.7"
    assert address_key("::ffff:192.0.2.7", exempt) == "192.0.2.7"
    assert address_key("2001:db8:1:2:aaaa::1", exempt) == address_key("2001:db8:1:2:bbbb::9", exempt)
    assert address_key("2001:db8:1:3::1", exempt) != address_key("2001:db8:1:2::1", exempt)
    assert address_key("10.0.0.5", exempt) is None and address_key("fd12::1", exempt) is None
    with pytest.raises(ConfigError, match="KPERF_WEB_PER_ADDRESS_EXEMPT: 'proxy' is not an address"):
        parse_networks("KPERF_WEB_PER_ADDRESS_EXEMPT", ["proxy"])
