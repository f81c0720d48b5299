#!/usr/bin/env python3
"""A slow-client flood against a real `kperf-web`: does everyone else still get answers?

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kperf_slow_bench \\
        nice -n 10 .venv/bin/python bench/slow_clients.py                 # about 2 minutes on 2 cores
    .venv/bin/python bench/slow_clients.py --slow 2000 --sources 40 --window 60 \\
        --set KPERF_WEB_CONNECTION_LIMIT=500 --json out.json

Starts `kperf-web` (kperf.web.command, as `kperf-up` does) on a free loopback
port, on the database DATABASE_URL names (created and migrated if missing;
without DATABASE_URL an embedded PostgreSQL in a temporary directory), with
the KPERF_WEB_* settings of this environment plus any `--set NAME=VALUE`.
Then, all on loopback:

1. baseline: a normal client asks `/api/v1/health` (the cheapest page that
   touches the database) every `--probe-every` seconds for `--baseline`
   seconds, a new connection each time, from 127.0.0.1;
2. flood: `--slow` connections from `--sources` source addresses
   (127.0.1.1, 127.0.1.2, ...; a per-address limit sees `--slow / --sources`
   from each) each send a request line and then one header line every
   `--trickle` seconds, never finishing; a connection the server closes is
   opened again `--reopen-delay` seconds later, as an attacker would, up to
   `--max-opens` in all;
3. while the flood runs, the same normal client for `--window` seconds.

It reports, per phase, the normal requests answered 200 within `--timeout`
and their latency (p50, p95, max), and, for the flood, how many of its
connections were open (sampled every second), how many the server closed and
after how long. Everything stops by itself: the flood and the probes at the
end of the window, the server at exit. Results with the machine and date go
in docs/performance.md, "Slow clients".
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import re
import resource
import secrets
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests

from kperf.embedded import ensure_database, start_postgres
from kperf.web import command
from kperf_testing.stack import free_port

HEALTH = "/api/v1/health"


@dataclass
class Probes:
    """The normal client: one GET at a time, a fresh connection each."""

    latencies: list[float] = field(default_factory=list)  # seconds, answered 200
    failures: list[str] = field(default_factory=list)

    def run(self, url: str, seconds: float, every: float, timeout: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.monotonic()
            try:
                resp = requests.get(url + HEALTH, timeout=timeout, headers={"Connection": "close"})
                if resp.status_code == 200:
                    self.latencies.append(time.monotonic() - start)
                else:
                    self.failures.append(f"HTTP {resp.status_code}")
            except requests.RequestException as exc:
                self.failures.append(type(exc).__name__)
            time.sleep(max(0.0, every - (time.monotonic() - start)))

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        n = len(lat) + len(self.failures)

        def pct(p: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1) if lat else None

        return {
            "requests": n,
            "ok": len(lat),
            "failed": len(self.failures),
            "failures": sorted(set(self.failures)),
            "p50_ms": pct(0.50),
            "p95_ms": pct(0.95),
            "max_ms": round(lat[-1] * 1000, 1) if lat else None,
        }


@dataclass
class Conn:
    slot: int
    sock: socket.socket
    opened: float
    connected: bool = False
    lines: int = 0


class Flood:
    """`count` trickling connections in one selector loop; closed ones are opened again."""

    def __init__(
        self, port: int, count: int, sources: list[str], trickle: float, reopen_delay: float, max_opens: int
    ) -> None:
        self.port, self.count, self.sources, self.trickle, self.max_opens = port, count, sources, trickle, max_opens
        self.reopen_delay = reopen_delay
        self.sel = selectors.DefaultSelector()
        self.live: dict[int, Conn] = {}  # slot -> connection
        self.to_open: deque[tuple[float, int]] = deque((0.0, slot) for slot in range(count))  # (not before, slot)
        self.due: list[tuple[float, int, int]] = []  # (when, slot, id(conn)) of the next header line
        self.opens = 0
        self.refused = 0  # connect failed or timed out
        self.closed_by_server = 0
        self.answered = 0  # the server wrote something (an error status) before closing
        self.lifetimes: list[float] = []  # seconds from open to the server's close
        self.open_samples: list[int] = []  # connections open, every second of the window
        self.stop = threading.Event()
        self.started = self.ended = 0.0

    def established(self) -> int:
        return sum(1 for c in self.live.values() if c.connected)

    def _open(self, slot: int, now: float) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((self.sources[slot % len(self.sources)], 0))
            s.connect_ex(("127.0.0.1", self.port))
        except OSError:
            s.close()
            self.refused += 1
            self.to_open.append((now + self.reopen_delay, slot))
            return
        self.opens += 1
        conn = Conn(slot, s, now)
        self.live[slot] = conn
        self.sel.register(s, selectors.EVENT_WRITE, conn)

    def _drop(self, conn: Conn, now: float, by_server: bool) -> None:
        self.sel.unregister(conn.sock)
        conn.sock.close()
        del self.live[conn.slot]
        if by_server:
            self.closed_by_server += 1
            self.lifetimes.append(now - conn.opened)
        else:
            self.refused += 1
        self.to_open.append((now + self.reopen_delay, conn.slot))

    def _event(self, conn: Conn, mask: int, now: float) -> None:
        s = conn.sock
        if not conn.connected:
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self._drop(conn, now, by_server=False)
                return
            try:
                s.send(f"GET {HEALTH} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
            except OSError:
                self._drop(conn, now, by_server=True)
                return
            conn.connected = True
            self.sel.modify(s, selectors.EVENT_READ, conn)
            heapq.heappush(self.due, (now + self.trickle, conn.slot, id(conn)))
            return
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if data:
            self.answered += 1  # e.g. a 408 or 503; the close follows
            return
        self._drop(conn, now, by_server=True)

    def run(self) -> None:
        self.started = last_sample = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            # Open in batches so the loop keeps reading and trickling while it ramps up.
            for _ in range(min(200, len(self.to_open))):
                if self.opens >= self.max_opens or self.to_open[0][0] > now:
                    break  # slots queue in the order they were closed, so the first is the earliest due
                self._open(self.to_open.popleft()[1], now)
            for key, mask in self.sel.select(timeout=0.05):
                self._event(key.data, mask, time.monotonic())
            now = time.monotonic()
            while self.due and self.due[0][0] <= now:
                _, slot, ident = heapq.heappop(self.due)
                conn = self.live.get(slot)
                if conn is None or id(conn) != ident:
                    continue  # that connection is gone; its replacement has its own schedule
                try:
                    conn.sock.send(f"X-Trickle-{conn.lines}: {'a' * 8}\r\n".encode())
                    conn.lines += 1
                    heapq.heappush(self.due, (now + self.trickle, slot, ident))
                except OSError:
                    self._drop(conn, now, by_server=True)
            for conn in [c for c in self.live.values() if not c.connected and now - c.opened > 30]:
                self._drop(conn, now, by_server=False)  # a connect stuck in the server's full backlog
            if now - last_sample >= 1:
                self.open_samples.append(self.established())
                last_sample = now
        self.ended = time.monotonic()
        for conn in list(self.live.values()):
            self.sel.unregister(conn.sock)
            conn.sock.close()
        self.live.clear()

    def summary(self) -> dict[str, Any]:
        lt = sorted(self.lifetimes)
        window = self.open_samples[len(self.open_samples) // 4 :] or [0]  # past the ramp-up
        return {
            "slow": self.count,
            "opens": self.opens,
            "opens_per_s": round(self.opens / max(1e-9, self.ended - self.started)),
            "open_median": int(statistics.median(window)),
            "open_min": min(window),
            "open_max": max(self.open_samples or [0]),
            "closed_by_server": self.closed_by_server,
            "answered_before_close": self.answered,
            "refused_or_connect_timeout": self.refused,
            "lifetime_p50_s": round(lt[len(lt) // 2], 1) if lt else None,
            "lifetime_p95_s": round(lt[min(len(lt) - 1, int(0.95 * len(lt)))], 1) if lt else None,
        }


@dataclass
class ServerSampler:
    """The server process's open descriptors and resident memory, every second (Linux /proc)."""

    pid: int
    fds: list[int] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.fds.append(len(os.listdir(f"/proc/{self.pid}/fd")))
                status = Path(f"/proc/{self.pid}/status").read_text()
            except OSError:
                return
            kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            self.rss_mib.append(round(kib / 1024, 1))

    def summary(self) -> dict[str, Any]:
        return {
            "fds_max": max(self.fds or [0]),
            "fds_median": int(statistics.median(self.fds or [0])),
            "rss_mib_max": max(self.rss_mib or [0.0]),
        }


def web_counts(text: str) -> dict[str, int]:
    """The guard's periodic summary lines in web.log (kperf.web_guard), added up."""
    names = ["deadline", "evicted", "evicted_per_address", "refused_per_address", "refused_full"]
    totals = dict.fromkeys(names, 0)
    pattern = re.compile(
        r"(\d+) connections closed at their request deadline, (\d+) evicted at the connection limit, "
        r"(\d+) evicted and (\d+) refused at the per-address limit, (\d+) refused when full"
    )
    for m in pattern.finditer(text):
        for name, value in zip(names, m.groups()):
            totals[name] += int(value)
    return totals


def database(tmp: Path) -> tuple[str, Any]:
    """The bench's database URL, created and migrated; and the embedded server to stop, if any."""
    url = os.environ.get("DATABASE_URL", "")
    pg = None
    if url:
        parts = urlsplit(url)
        ensure_database(urlunsplit(parts._replace(path="/postgres")), parts.path.lstrip("/"))
    else:
        pg = start_postgres(tmp / "pgdata")
        url = pg.database_url
    return url, pg


def start_web(url: str, port: int, tmp: Path, settings: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    env = dict(os.environ, DATABASE_URL=url, KPERF_HOME=str(tmp / "home"), DJANGO_SETTINGS_MODULE="kperf.settings")
    env.setdefault("KPERF_SECRET_KEY", "kperf-bench-" + secrets.token_urlsafe(32))
    # The guard's summary of what it closed, often enough to cover the window.
    env.setdefault("KPERF_WEB_REPORT_SECONDS", "5")
    env.update(settings)
    subprocess.run(
        [sys.executable, "-m", "kperf.manage", "migrate", "--noinput"], env=env, check=True, stdout=subprocess.DEVNULL
    )
    log = tmp / "web.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command("127.0.0.1", port), env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}{HEALTH}", timeout=2).status_code == 200:
                return proc, log
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("kperf-web did not answer within 60 s:\n" + log.read_text(errors="replace"))
        time.sleep(0.2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--slow", type=int, default=2000, help="trickling connections held open (default 2000)")
    p.add_argument("--sources", type=int, default=40, help="loopback source addresses they come from (default 40)")
    p.add_argument("--trickle", type=float, default=20.0, help="seconds between a slow client's header lines")
    p.add_argument("--baseline", type=float, default=20.0, help="seconds of probes without the flood")
    p.add_argument("--window", type=float, default=60.0, help="seconds of probes during the flood")
    p.add_argument("--ramp", type=float, default=10.0, help="seconds the flood gets to open its connections")
    p.add_argument("--probe-every", type=float, default=0.5)
    p.add_argument("--timeout", type=float, default=10.0, help="a normal request not answered by then failed")
    p.add_argument("--reopen-delay", type=float, default=1.0, help="seconds before a closed slow connection reopens")
    p.add_argument("--max-opens", type=int, default=200000, help="connections the flood opens in all, at most")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a setting for kperf-web")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if not 1 <= args.sources <= 250:
        p.error("--sources must be 1-250 (127.0.1.1-127.0.1.250)")
    settings = dict(item.split("=", 1) for item in args.set)

    # The flood holds `--slow` sockets in this process.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.slow + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.slow + 1024), hard))

    with tempfile.TemporaryDirectory(prefix="kperf-slow-") as tmpdir:
        tmp = Path(tmpdir)
        url, pg = database(tmp)
        port = free_port()
        proc, log = start_web(url, port, tmp, settings)
        base = f"http://127.0.0.1:{port}"
        sources = [f"127.0.1.{i + 1}" for i in range(args.sources)]
        flood = Flood(port, args.slow, sources, args.trickle, args.reopen_delay, args.max_opens)
        thread = threading.Thread(target=flood.run, daemon=True)
        server = ServerSampler(proc.pid)
        threading.Thread(target=server.run, daemon=True).start()
        try:
            baseline = Probes()
            baseline.run(base, args.baseline, args.probe_every, args.timeout)
            thread.start()
            time.sleep(args.ramp)
            during = Probes()
            during.run(base, args.window, args.probe_every, args.timeout)
        finally:
            flood.stop.set()
            server.stop.set()
            thread.join(timeout=30)
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if pg is not None:
                pg.stop()
        web_log = log.read_text(errors="replace")

    result = {
        "settings": {k: v for k, v in sorted(os.environ.items()) if k.startswith("KPERF_WEB_")} | settings,
        "args": {k: v for k, v in vars(args).items() if k not in ("json", "set")},
        "baseline": baseline.summary(),
        "flood": during.summary(),
        "slow_connections": flood.summary(),
        "server": server.summary(),
        "web_log": web_counts(web_log),
        "machine": {"cores": os.cpu_count(), "arch": platform.machine(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
