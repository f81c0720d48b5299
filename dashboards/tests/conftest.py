"""The dashboard tests use the service's own test fixtures (a real database,
a small git repository, a registered runner) and its tracked-branch
scenarios, so their data is made by kperf's code, not written by hand."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# service/tests is the package `tests` with `service` on the path (as pytest
# imports it when it collects that folder).
if str(ROOT / "service") not in sys.path:
    sys.path.insert(0, str(ROOT / "service"))

from tests.conftest import (  # noqa: E402
    alice,
    alice_api,
    other_runner_api,
    qemu_class,
    runner_api,
    settings_dirs,
    small_tree,
)

__all__ = ["alice", "alice_api", "other_runner_api", "qemu_class", "runner_api", "settings_dirs", "small_tree"]
