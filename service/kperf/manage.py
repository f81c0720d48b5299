"""`python -m kperf.manage …`: Django's management commands for kperf."""

from __future__ import annotations

import os
import sys

from kperf import local_env


def main() -> None:
    # Beside `make up`: its database, broker and secret key (kperf.local_env).
    local_env.load(os.environ)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kperf.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
