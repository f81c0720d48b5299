"""The web server's defence against slow and greedy clients (used by `kperf-web`).

waitress reads requests in one asynchronous loop, so a slow client costs a
socket, not a thread; but its own idle timeout only closes connections that
send nothing, and at its connection limit it simply stops accepting. A
client that sends one header line every 20 s is never idle, so 1000 of them
held every slot and nobody else was answered. This module adds, as a
waitress server and channel subclass:

- deadlines per request: the request line and headers must arrive within
  `header_timeout` seconds (counted from the accept for a connection's first
  request, from its first byte for the next ones), and the body within
  `body_timeout` seconds plus one second per `body_min_rate` bytes received;
  a connection past its deadline is answered 408 and closed;
- eviction at the connection limit: a new connection replaces the open one
  that has waited longest without delivering a whole request head (a slow
  client, or an idle keep-alive), so the newcomer is served at once rather
  than queued behind the flood; only when every connection is being served
  or is sending a body does the server stop accepting;
- a per-address limit: one address (an IPv6 /64) holds at most
  `per_address_limit` connections; its next one replaces its own oldest
  waiting one, or is answered 503 when none waits. Addresses in `exempt`
  (a reverse proxy) are not counted.

Everything here runs in waitress's loop thread (accept, read, the periodic
sweep), except the worker threads' service() calls, which only empty a
channel's `requests` and hand it back through `Guard.idle`: a channel is
closed here only when it has no request being served, so no worker thread is
using it. Nothing is added to what the loop does per connection per turn
(that walk over every connection is waitress's own, and its cost sets how
many connections one process can hold; docs/performance.md).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import resource
import socket
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer

from kperf.conf import ConfigError

log = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Connections accepted per wake-up of the loop: the flood's reconnects queue in
# the listen backlog ahead of a normal client, so drain it faster than one a turn.
ACCEPT_BATCH = 64
# Each connection costs a descriptor, and up to two more while a large body or
# answer is spooled to a temporary file; the rest covers the listening socket,
# the loop's wake-up pipe, database connections, logs and imports.
RESERVED_FDS = 256
DEFAULT_CONNECTION_LIMIT = 10000
# Fixed answers written straight to the socket: the connection has no answer
# in progress (its request never arrived whole), so nothing can interleave.
TIMEOUT_408 = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
BUSY_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 10\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 39\r\n\r\ntoo many connections from your address\n"
)


@dataclass(frozen=True)
class Limits:
    connection_limit: int
    header_timeout: float  # seconds for the request line and headers
    body_timeout: float  # seconds for the body, before the rate's allowance
    body_min_rate: int  # bytes/s: each this many body bytes received add a second; 0: none
    per_address_limit: int  # 0: no limit
    exempt: tuple[Network, ...] = ()
    sweep_interval: float = 1.0  # how often deadlines are checked
    report_interval: float = 60.0  # how often what was closed is logged (once, summed)


def raise_open_files_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard one; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An unlimited hard limit still stops at the kernel's nr_open (1048576 by default).
    target = hard if hard != resource.RLIM_INFINITY else 1048576
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            log.warning("could not raise the open files limit from %d to %d", soft, target)
    return int(soft) if soft != resource.RLIM_INFINITY else 1048576


def connection_budget(open_files: int) -> int:
    """The most connections `open_files` descriptors can hold with room for spooling and the rest."""
    return max(10, (open_files - RESERVED_FDS) // 2)


def parse_networks(name: str, items: list[str]) -> tuple[Network, ...]:
    nets = []
    for item in items:
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(f"{name}: {item!r} is not an address or network (e.g. 10.0.0.5 or 10.0.0.0/24)") from None
    return tuple(nets)


def address_key(host: str, exempt: tuple[Network, ...]) -> str | None:
    """What the per-address limit counts a peer as: its IPv4 address, its IPv6 /64; None if exempt."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None  # not an IP peer (a Unix socket): nothing to count
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # a dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d
    if any(ip in net for net in exempt):
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        # One IPv6 host usually owns a whole /64; per address it could open a limit per address.
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _send_and_close(sock: socket.socket, answer: bytes) -> None:
    """Best effort: the peer may already be gone, and nothing may block the loop."""
    try:
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            # Read what has arrived, so the close sends FIN after the answer rather than RST.
            sock.recv(65536)
        sock.send(answer)
    except OSError:
        pass
    sock.close()


class Guard:
    """The open connections of one server process, their deadlines, and who to evict first."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.channels: dict[GuardedChannel, None] = {}
        # Connections with no whole request head yet and nothing being served,
        # oldest first: the eviction order, overall and per address.
        self.waiting: OrderedDict[GuardedChannel, None] = OrderedDict()
        self.waiting_by_key: dict[str, OrderedDict[GuardedChannel, None]] = {}
        self.per_key: Counter[str] = Counter()
        self.in_overflow = False
        self.next_sweep = 0.0
        self.next_report = time.monotonic() + limits.report_interval
        self.counts: Counter[str] = Counter()
        # Channels a worker finished serving; deque.append is safe from any thread.
        self.idle: deque[GuardedChannel] = deque()

    def take_idle(self) -> None:
        """Queue the connections that waited to be served and now wait for their next request."""
        while self.idle:
            ch = self.idle.popleft()
            if ch in self.channels and not ch.waiting and ch.evictable():
                self.wait(ch)

    def opened(self, ch: GuardedChannel) -> None:
        self.channels[ch] = None
        if ch.key is not None:
            self.per_key[ch.key] += 1
        self.wait(ch)

    def closed(self, ch: GuardedChannel) -> None:
        if ch in self.channels:  # a channel whose setup failed was never registered
            del self.channels[ch]
            self.busy(ch)
            if ch.key is not None:
                self.per_key[ch.key] -= 1
                if self.per_key[ch.key] <= 0:
                    del self.per_key[ch.key]

    def wait(self, ch: GuardedChannel) -> None:
        ch.waiting = True
        self.waiting[ch] = None
        if ch.key is not None:
            self.waiting_by_key.setdefault(ch.key, OrderedDict())[ch] = None

    def busy(self, ch: GuardedChannel) -> None:
        ch.waiting = False
        self.waiting.pop(ch, None)
        if ch.key is not None:
            queue = self.waiting_by_key.get(ch.key)
            if queue is not None:
                queue.pop(ch, None)
                if not queue:
                    del self.waiting_by_key[ch.key]

    def _oldest_evictable(self, key: str | None) -> GuardedChannel | None:
        while True:
            queue = self.waiting if key is None else self.waiting_by_key.get(key)
            if not queue:
                return None
            ch = next(iter(queue))
            if ch.evictable():
                return ch
            self.busy(ch)  # became busy since it was queued; it queues again when idle

    def evict(self, key: str | None) -> bool:
        """Close the connection that has waited longest (of `key`'s, or of all); False if none waits."""
        ch = self._oldest_evictable(key)
        if ch is None:
            return False
        self.counts["evicted" if key is None else "evicted_per_address"] += 1
        ch.handle_close()
        return True

    def may_accept(self) -> bool:
        full = len(self.channels) >= self.limits.connection_limit
        if full and self._oldest_evictable(None) is None:
            if not self.in_overflow:
                self.in_overflow = True
                log.warning(
                    "%d connections open (KPERF_WEB_CONNECTION_LIMIT) and every one is being served or "
                    "sending a body: new connections wait in the listen backlog",
                    len(self.channels),
                )
            return False
        if self.in_overflow:
            self.in_overflow = False
            log.info("accepting connections again (%d open)", len(self.channels))
        return True

    def admit(self, conn: socket.socket, key: str | None) -> bool:
        """Make room for a new connection from `key`; False (and it is answered and closed) if none."""
        per_address = self.limits.per_address_limit
        if key is not None and per_address and self.per_key[key] >= per_address and not self.evict(key):
            self.counts["refused_per_address"] += 1
            _send_and_close(conn, BUSY_503)
            return False
        if len(self.channels) >= self.limits.connection_limit and not self.evict(None):
            self.counts["refused_full"] += 1
            _send_and_close(conn, BUSY_503)
            return False
        return True

    def sweep(self, now: float) -> None:
        if now < self.next_sweep:
            return
        self.next_sweep = now + self.limits.sweep_interval
        for ch in list(self.channels):
            deadline = ch.deadline()
            if deadline is not None and now > deadline:
                self.counts["deadline"] += 1
                ch.expire()
        if now >= self.next_report:
            self.next_report = now + self.limits.report_interval
            if self.counts:
                log.warning(
                    "last %d s: %d connections closed at their request deadline, %d evicted at the connection "
                    "limit, %d evicted and %d refused at the per-address limit, %d refused when full; %d open",
                    self.limits.report_interval,
                    self.counts["deadline"],
                    self.counts["evicted"],
                    self.counts["evicted_per_address"],
                    self.counts["refused_per_address"],
                    self.counts["refused_full"],
                    len(self.channels),
                )
                self.counts.clear()


class GuardedChannel(HTTPChannel):  # type: ignore[misc]  # waitress has no type hints
    # Class defaults: wasyncore.dispatcher forwards unknown attributes to the socket.
    key: str | None = None
    waiting = False
    accepted = 0.0
    first = True  # nothing received yet: the first request's deadline counts from the accept
    timed: Any = None  # the request object the times below belong to
    request_start = 0.0
    body_start: float | None = None

    def __init__(self, server: GuardedServer, sock: socket.socket, addr: Any, adj: Any, map: Any = None) -> None:
        super().__init__(server, sock, addr, adj, map=map)
        self.accepted = time.monotonic()
        self.key = address_key(str(addr[0]), server.guard.limits.exempt) if isinstance(addr, tuple) else None
        server.guard.opened(self)

    def evictable(self) -> bool:
        """Nothing being served or sent, no whole request head: a slow client or an idle keep-alive."""
        req = self.request
        return not (
            self.requests
            or self.total_outbufs_len
            or self.will_close
            or self.close_when_flushed
            or (req is not None and req.headers_finished)
        )

    def deadline(self) -> float | None:
        """When the request being received must be complete (monotonic); None when no deadline runs."""
        if self.requests or self.total_outbufs_len or self.will_close or self.close_when_flushed:
            return None  # being served or closing
        limits: Limits = self.server.guard.limits
        req = self.request
        if req is None:
            # A kept-alive connection between requests is waitress's channel_timeout's business.
            return self.accepted + limits.header_timeout if self.first else None
        if not req.headers_finished:
            return self.request_start + limits.header_timeout
        start = self.body_start if self.body_start is not None else self.request_start
        allowance = req.body_bytes_received / limits.body_min_rate if limits.body_min_rate else 0.0
        return start + limits.body_timeout + allowance

    def expire(self) -> None:
        # Everything that arrived has been read, so the close sends the 408 and a FIN.
        with contextlib.suppress(OSError):
            self.socket.send(TIMEOUT_408)
        self.handle_close()

    def received(self, data: bytes) -> bool:
        now = time.monotonic()
        result = bool(super().received(data))
        req = self.request
        if req is not None and req is not self.timed:
            # These bytes began a request: a connection's first is timed from its accept.
            self.timed = req
            self.request_start = self.accepted if self.first else now
            self.body_start = None
        if req is not None and req.headers_finished and self.body_start is None:
            self.body_start = now
        self.first = False
        if self.waiting and not self.evictable():
            self.server.guard.busy(self)
        return result

    def service(self) -> None:
        try:
            super().service()
        finally:
            # A worker thread runs this: the loop thread decides whether the
            # connection now waits for a request again (Guard.take_idle).
            self.server.guard.idle.append(self)

    def del_channel(self, map: Any = None) -> None:
        super().del_channel(map)
        self.server.guard.closed(self)


class GuardedServer(TcpWSGIServer):  # type: ignore[misc]  # waitress has no type hints
    channel_class = GuardedChannel
    next_channel_cleanup = 0.0

    def __init__(self, application: Any, guard: Guard, **kw: Any) -> None:
        self.guard = guard
        super().__init__(application, **kw)

    def readable(self) -> bool:
        # waitress's readable() runs its idle-connection maintenance, then stops
        # accepting at the limit; here the limit is the guard's, which evicts.
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        self.guard.take_idle()
        self.guard.sweep(time.monotonic())
        return bool(self.accepting) and self.guard.may_accept()

    def handle_accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            if not self.guard.may_accept():
                return  # full of busy connections: the rest wait in the backlog
            try:
                v = self.accept()
                if v is None:
                    return  # the backlog is empty
                conn, addr = v
                self.set_socket_options(conn)
            except OSError:
                # As waitress: a peer gone before its accept, or out of descriptors.
                if self.adj.log_socket_errors:
                    self.logger.warning("server accept() threw an exception", exc_info=True)
                return
            addr = self.fix_addr(addr)
            key = address_key(str(addr[0]), self.guard.limits.exempt) if isinstance(addr, tuple) else None
            if self.guard.admit(conn, key):
                self.channel_class(self, conn, addr, self.adj, map=self._map)
