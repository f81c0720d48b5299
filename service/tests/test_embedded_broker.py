"""The broker `make up` keeps inside PostgreSQL: its tables exist before any Celery process starts."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator

import psycopg
import pytest

from kperf.embedded import broker_url_for_database, prepare_broker


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A database of its own on the tests' server, dropped afterwards."""
    url = os.environ["DATABASE_URL"]
    if not url.startswith("postgres"):
        pytest.skip("needs a PostgreSQL server URL in DATABASE_URL")
    name = f"kperf_broker_{secrets.token_hex(4)}"
    admin = re.sub(r"/[^/]*$", "/postgres", url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield re.sub(r"/[^/]*$", f"/{name}", url)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_sqlalchemy_broker_s_tables_are_made_once_before_the_workers(empty_database: str) -> None:
    # Two Celery processes that made them at once collided on
    # CREATE SEQUENCE queue_id_sequence, and one died at start.
    def tables() -> set[str]:
        with psycopg.connect(empty_database) as conn:
            rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
        return {r[0] for r in rows}

    assert tables() == set()
    prepare_broker(broker_url_for_database(empty_database))
    assert {"kombu_queue", "kombu_message"} <= tables()
    prepare_broker(broker_url_for_database(empty_database))  # a second start finds them made
    prepare_broker("redis://127.0.0.1:6379/0")  # other brokers: nothing to do, nothing touched
