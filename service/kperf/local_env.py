"""What `kperf-manage` needs to reach the service `make up` runs, kept in its home.

kperf-up gives its children an environment of its own making: the embedded
PostgreSQL's URL, the broker in it, local mail, local trees. A management
command typed beside it (`kperf-manage add_runner ...`) would otherwise load
the settings without them and stop at the first one missing. kperf-up writes
them to HOME/manage.env (mode 0600, in a home only its user reads);
kperf-manage reads that file when DATABASE_URL is unset, and the secret key
from HOME/secret_key, so both processes see the same service.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, MutableMapping
from pathlib import Path

ENV_FILE = "manage.env"
# The secret stays in HOME/secret_key alone; the file holds where things are, not keys.
_NEVER_WRITTEN = ("KPERF_SECRET_KEY",)
_WRITTEN_PREFIXES = ("KPERF_", "DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")


def default_home() -> Path:
    """KPERF_HOME, else the repository's .kperf, as kperf-up and the settings choose it."""
    given = os.environ.get("KPERF_HOME")
    return Path(given) if given else Path(__file__).resolve().parent.parent.parent / ".kperf"


def write(home: Path, env: Mapping[str, str]) -> Path:
    """Keep the settings kperf-up's children get in HOME/manage.env."""
    lines = [
        f"{key}={shlex.quote(value)}"
        for key, value in sorted(env.items())
        if key.startswith(_WRITTEN_PREFIXES) and key not in _NEVER_WRITTEN
    ]
    path = home / ENV_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("# Written by kperf-up at each start: what kperf-manage reads beside it.\n")
        fh.write("".join(line + "\n" for line in lines))
    return path


def load(environ: MutableMapping[str, str]) -> None:
    """Fill in what kperf-up gave its children, when this process was given no database.

    A variable already set wins: an operator's DATABASE_URL means another
    service, and then nothing is read from the home at all.
    """
    if environ.get("DATABASE_URL"):
        return
    home = default_home() if "KPERF_HOME" not in environ else Path(environ["KPERF_HOME"])
    path = home / ENV_FILE
    if path.is_file():
        for line in path.read_text().splitlines():
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, value = line.split("=", 1)
            words = shlex.split(value)
            environ.setdefault(key, words[0] if words else "")
    key_file = home / "secret_key"
    if not environ.get("KPERF_SECRET_KEY") and key_file.is_file():
        environ["KPERF_SECRET_KEY"] = key_file.read_text().strip()
