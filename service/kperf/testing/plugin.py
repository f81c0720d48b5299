"""pytest plugin loaded early (`-p kperf.testing.plugin` in pytest.ini).

Runs before Django's settings are imported: when the environment names no
database or broker, it starts the embedded PostgreSQL from the wheel and
points both at it, so `make test` works on a machine with no services.
CI sets DATABASE_URL and CELERY_BROKER_URL to the machine's real servers.
"""

from __future__ import annotations

import os
from pathlib import Path

_embedded = None

if not os.environ.get("DATABASE_URL"):
    from kperf.embedded import start_postgres

    cache = Path(os.environ.get("KPERF_CACHE", Path.home() / ".cache" / "kperf"))
    _embedded = start_postgres(cache / "test-pgdata")
    os.environ["DATABASE_URL"] = _embedded.database_url
    os.environ.setdefault("CELERY_BROKER_URL", _embedded.broker_url)
