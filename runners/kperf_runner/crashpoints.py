"""The steps of a bare-metal boot's bookkeeping where a power cut is tested.

Between reading a boot's outcome out of pstore and the service having it,
the agent goes through steps that each leave a different state behind: the
records read but nothing saved, the outcome saved but pstore not yet
cleared, pstore cleared but the service not yet told. A power cut after any
of them must lose nothing (docs/runners-bare-metal.md, "Power cuts"). The
agent names each step as it passes it (`Crashpoints.reached`), so that tests
can stop it exactly there:

- unit tests give the agent an action that raises at the step (the
  process "dies"), then start a new agent on the same state directory;
- the VM test (tests/test_kexec_runner.py) puts the step's name in
  KPERF_RUNNER_HOLD_AT in the runner's environment file: the agent then
  stops at that step and waits, once per state directory, and the test
  resets the machine under it.

Without KPERF_RUNNER_HOLD_AT (a lab machine) a step costs one lookup.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from . import inflight

log = logging.getLogger(__name__)

ENV = "KPERF_RUNNER_HOLD_AT"

# The boot's outcome (a result or a failure) is in memory only: pstore still has it.
BOOT_READ = "boot-read"
# The outcome is in the state directory (fsynced); pstore still has the records too.
OUTCOME_SAVED = "outcome-saved"
# pstore is cleared; the service has not been told yet.
PSTORE_CLEARED = "pstore-cleared"
POINTS = (BOOT_READ, OUTCOME_SAVED, PSTORE_CLEARED)


class Crashpoints:
    """Where the agent says which step it has passed; by default, a hold for the VM test."""

    def __init__(self, state_dir: Path, action: Callable[[str], None] | None = None) -> None:
        self.state_dir = state_dir
        self.action = action
        self.passed: list[str] = []

    def reached(self, name: str) -> None:
        if name not in POINTS:
            raise ValueError(f"unknown crash point {name!r}")
        self.passed.append(name)
        if self.action is not None:
            self.action(name)
            return
        if name in os.environ.get(ENV, "").split(","):
            self._hold(name)

    def _hold(self, name: str) -> None:
        # Once per state directory: the machine that comes back must go on.
        # Written durably before the hold, or the reset could undo it and
        # the agent would hold here again at every boot.
        marker = self.state_dir / f"held-at-{name}"
        if marker.exists():
            return
        inflight.write_durably(marker, name.encode())
        log.warning("holding at %s (%s): waiting for the machine to be reset", name, ENV)
        while True:
            time.sleep(60)
