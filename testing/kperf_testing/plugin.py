"""pytest plugin loaded early (`-p kperf_testing.plugin` in pytest.ini).

It runs before Django's settings are imported, and decides which database
and broker the tests use:

- DATABASE_URL unset: start the embedded PostgreSQL from the wheel (so `make
  test` works on a machine with no services). CI sets it to the machine's
  real server.
- The broker is isolated from anything else on the machine (a `make up`
  running next to the tests must not eat their tasks): a Redis broker moves
  to database KPERF_TEST_REDIS_DB (default 15), which is flushed; any other
  or no broker becomes kombu's SQLAlchemy transport inside the test database
  that pytest-django creates, which dies with it.
- Under pytest-xdist (`make test` runs two workers, docs/development.md) each
  worker has its own test database (pytest-django's `_gwN` suffix) and its own
  pair of Redis databases: gwN takes KPERF_TEST_REDIS_DB - 2N for its tests and
  the one below it for the stacks its end-to-end tests start. The controller
  process starts the embedded server once; the workers inherit its URL.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import dj_database_url

# Settings refuse to start without a secret key (docs/operations.md); the
# tests, and the servers and workers they start, share this one.
os.environ.setdefault("KPERF_SECRET_KEY", "kperf-tests-" + secrets.token_urlsafe(32))
# Many tests submit small local git trees; a shared service keeps these off,
# and test_local_trees_are_refused_by_default checks that default.
os.environ.setdefault("KPERF_ALLOW_LOCAL_TREES", "1")
# A deployment builds and boots below the service's priority (docs/operations.md,
# "CPU priority"). In a test run the kernel builds and boots are the critical
# path, and with two lanes the other lane's tests would take the CPU from them,
# so here they keep the tests' priority; the tests of the priority set it.
os.environ.setdefault("KPERF_BUILD_NICE", "0")
os.environ.setdefault("KPERF_RUNNER_NICE", "0")
# The first submission of an unmeasured machine shape gets extra base boots to measure its boot
# spread (docs/statistics.md); the tests count their boots without them, and
# service/tests/core/submissions/test_shape_spread.py turns them on where it measures them.
os.environ.setdefault("KPERF_SHAPE_SPREAD_BOOTS", "0")

_embedded = None

if not os.environ.get("DATABASE_URL"):
    from kperf.embedded import start_postgres

    _cache = Path(os.environ.get("KPERF_CACHE", Path.home() / ".cache" / "kperf"))
    _embedded = start_postgres(_cache / "test-pgdata")
    os.environ["DATABASE_URL"] = _embedded.database_url


def xdist_worker() -> str:
    """This process's pytest-xdist worker id (gw0, gw1, ...), or "" outside one."""
    return os.environ.get("PYTEST_XDIST_WORKER", "")


def _worker_index() -> int:
    worker = xdist_worker()
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else 0


def database_url_for_tests() -> str:
    """The URL of the database pytest-django creates (test_<name>, with
    pytest-django's _gwN suffix in an xdist worker)."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    name = dj_database_url.parse(os.environ["DATABASE_URL"])["NAME"]
    suffix = f"_{xdist_worker()}" if xdist_worker() else ""
    return urlunsplit(parts._replace(path=f"/test_{name}{suffix}"))


def redis_test_db() -> int:
    """The Redis database this process's tests use as their broker."""
    db = int(os.environ.get("KPERF_TEST_REDIS_DB", "15")) - 2 * _worker_index()
    if db < 1:
        raise RuntimeError(
            f"KPERF_TEST_REDIS_DB={os.environ.get('KPERF_TEST_REDIS_DB', '15')} leaves no Redis database "
            f"for xdist worker {xdist_worker()}: each worker takes two; raise it or run fewer workers"
        )
    return db


def redis_stack_db() -> int:
    """The Redis database the kperf stacks this process's tests start use
    (tests/test_e2e.py), apart from the tests' own broker."""
    return redis_test_db() - 1


def sqla_broker_for(database_url: str) -> str:
    from kperf.embedded import broker_url_for_database

    parsed = dj_database_url.parse(database_url)
    host = str(parsed.get("HOST", ""))
    if host.startswith("/"):
        # Unix socket (the embedded server): SQLAlchemy wants it as ?host=.
        return f"sqla+postgresql+psycopg://{parsed['USER']}@/{parsed['NAME']}?host={host}"
    return broker_url_for_database(database_url)


def redis_test_url(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


_broker = os.environ.get("CELERY_BROKER_URL", "")
if _broker.startswith("redis://"):
    _broker = redis_test_url(_broker, redis_test_db())
    import redis

    redis.Redis.from_url(_broker).flushdb()
else:
    _broker = sqla_broker_for(database_url_for_tests())
os.environ["CELERY_BROKER_URL"] = _broker
os.environ["KPERF_ORIGINAL_DATABASE_URL"] = os.environ["DATABASE_URL"]
