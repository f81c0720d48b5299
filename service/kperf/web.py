"""`kperf-web`: kperf's web server (waitress serving Django's WSGI app).

waitress reads every request whole (headers and body, the body spooled to a
file past a threshold) in one asynchronous loop before a worker thread sees
it, so a client that stalls half-way through a request holds a socket, not
a thread: the others are still answered. kperf.web_guard bounds what slow
clients can hold even so: a deadline for each request's head and body, one
address's share of the connections, and eviction of the slowest at the
connection limit; the open files limit is raised to match at start.
docs/operations.md explains the choice and the settings.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from kperf.conf import env_int, env_list, env_str
from kperf.web_guard import (
    DEFAULT_CONNECTION_LIMIT,
    Guard,
    GuardedServer,
    Limits,
    connection_budget,
    parse_networks,
    raise_open_files_limit,
)

log = logging.getLogger(__name__)


def command(host: str, port: int) -> list[str]:
    """The command line `kperf-up` starts the web server with (tests start it the same way)."""
    return [sys.executable, "-m", "kperf.web", "--host", host, "--port", str(port)]


def limits_from_env(open_files: int) -> Limits:
    """The KPERF_WEB_* limits (docs/operations.md), the connection limit within what `open_files` allows."""
    budget = connection_budget(open_files)
    limit = env_int("KPERF_WEB_CONNECTION_LIMIT", min(DEFAULT_CONNECTION_LIMIT, budget), minimum=10)
    if limit > budget:
        # Past the descriptors it would fail in accept() instead, and spin on it.
        log.warning(
            "KPERF_WEB_CONNECTION_LIMIT=%d needs more than the %d open files this process may have: using %d "
            "(raise the hard limit, e.g. `ulimit -Hn` or LimitNOFILE= or docker's --ulimit nofile=)",
            limit,
            open_files,
            budget,
        )
        limit = budget
    return Limits(
        connection_limit=limit,
        header_timeout=env_int("KPERF_WEB_HEADER_TIMEOUT", 20, minimum=1),
        body_timeout=env_int("KPERF_WEB_BODY_TIMEOUT", 20, minimum=1),
        body_min_rate=env_int("KPERF_WEB_BODY_MIN_RATE", 500, minimum=0),
        per_address_limit=env_int("KPERF_WEB_PER_ADDRESS_LIMIT", 100, minimum=0),
        exempt=parse_networks("KPERF_WEB_PER_ADDRESS_EXEMPT", env_list("KPERF_WEB_PER_ADDRESS_EXEMPT", [])),
        report_interval=env_int("KPERF_WEB_REPORT_SECONDS", 60, minimum=1),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kperf-web", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--host", default=env_str("KPERF_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=env_int("KPERF_PORT", 8000, minimum=1))
    p.add_argument(
        "--threads",
        type=int,
        default=env_int("KPERF_WEB_THREADS", 8, minimum=1),
        help="requests handled at once (each may hold a database connection)",
    )
    args = p.parse_args(argv)
    # Before anything opens files: every connection is a descriptor, and a
    # soft limit of 1024 (a common default, systemd's among them) is a flood's target.
    open_files = raise_open_files_limit()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kperf.settings")
    from django.conf import settings
    from waitress.adjustments import Adjustments
    from waitress.server import MultiSocketServer
    from waitress.task import ThreadedTaskDispatcher

    from kperf.web_errors import answer_api_errors_in_json
    from kperf.wsgi import application  # sets up Django, and with it the logging

    limits = limits_from_env(open_files)
    adj = Adjustments(
        host=args.host,
        port=args.port,
        threads=args.threads,
        ident="kperf",
        # A kept-alive connection silent this long is dropped; a request
        # being received has the guard's deadlines instead.
        channel_timeout=env_int("KPERF_WEB_CHANNEL_TIMEOUT", 60, minimum=5),
        cleanup_interval=10,
        # The guard enforces the limit (evicting the slowest); waitress's copy is for its own logs.
        connection_limit=limits.connection_limit,
        # poll() has no select()'s limit of 1024 descriptors.
        asyncore_use_poll=True,
        # Above Django's own limit, so a body somewhat over it reaches Django
        # and gets kperf's 413 naming the limit; a body over this one is
        # refused by waitress unread (in JSON under /api/, kperf.web_errors).
        max_request_body_size=int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) * 2 + 1024 * 1024,
    )
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    guard = Guard(limits)
    sockets: dict[int, object] = {}
    # One listening socket per address the host resolves to, sharing one loop and one guard.
    servers = [
        GuardedServer(application, guard, map=sockets, dispatcher=dispatcher, adj=adj, sockinfo=info)
        for info in adj.listen
    ]
    for server in servers:
        # What waitress refuses itself (a request it cannot parse) is answered in JSON under /api/.
        answer_api_errors_in_json(server)
    listen = [(s.effective_host, s.effective_port) for s in servers]
    log.info(
        "serving on %s with %d threads; at most %d connections (open files %d), %s per address; "
        "request head within %d s, body within %d s + 1 s per %d bytes",
        ", ".join(f"http://{h}:{p}" for h, p in listen),
        adj.threads,
        limits.connection_limit,
        open_files,
        limits.per_address_limit or "no limit",
        limits.header_timeout,
        limits.body_timeout,
        limits.body_min_rate,
    )
    if len(servers) == 1:
        servers[0].run()
    else:
        MultiSocketServer(sockets, adj, listen, dispatcher, servers[-1].log_info).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
