"""`kperf-web`: kperf's web server (waitress serving Django's WSGI app).

waitress reads every request whole (headers and body, the body spooled to a
file past a threshold) in one asynchronous loop before a worker thread sees
it, so a client that stalls half-way through a request holds a socket, not
a thread: the others are still answered. Idle connections are closed after
KPERF_WEB_CHANNEL_TIMEOUT seconds. docs/operations.md explains the choice.
"""

from __future__ import annotations

import argparse
import os
import sys

from kperf.conf import env_int, env_str


def command(host: str, port: int) -> list[str]:
    """The command line `kperf-up` starts the web server with (tests start it the same way)."""
    return [sys.executable, "-m", "kperf.web", "--host", host, "--port", str(port)]


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

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kperf.settings")
    from django.conf import settings
    from waitress import serve

    from kperf.wsgi import application

    serve(
        application,
        host=args.host,
        port=args.port,
        threads=args.threads,
        ident="kperf",
        # A stalled client is dropped after this long without a byte either way.
        channel_timeout=env_int("KPERF_WEB_CHANNEL_TIMEOUT", 60, minimum=5),
        cleanup_interval=10,
        # Each open connection costs a socket, not a thread, so allow many;
        # poll() has no select()'s limit of 1024 descriptors.
        connection_limit=env_int("KPERF_WEB_CONNECTION_LIMIT", 1000, minimum=10),
        asyncore_use_poll=True,
        # Above Django's own limit, so an oversized body reaches Django and
        # gets kperf's JSON 413 rather than waitress's plain-text one.
        max_request_body_size=int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) * 2 + 1024 * 1024,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
