"""A test that skips for a missing host feature fails instead, unless the reason is one listed here.

`.ci/run` installs every package a test needs, so on CI a skip means the
install went wrong or a test's probe did, and a green run would hide a part
of the suite that never ran. The reasons below cannot be mended by an
install on the machines kperf is tested on; docs/development.md ("Skips")
lists them with why. On a machine where something cannot be installed (no
root, another distribution), KPERF_TEST_ALLOW_SKIPS=1 lets every skip be a
skip again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any

import pytest

ENV = "KPERF_TEST_ALLOW_SKIPS"

# Each a pattern of a skip's reason, and why it may skip (docs/development.md, "Skips").
ALLOWED: dict[str, str] = {
    r"no KVM here": "KVM needs virtualisation extensions the CPU may not expose; TCG runs every other test",
    r"KPERF_TEST_MMTESTS": "mmtests' own extractors come from its git tree, which the test machine cannot fetch",
    r"no python3\.9": "the runner's oldest Python; Debian 12 ships 3.11 only",
    r"the service's fixtures build x86_64 kernels": "the host is another architecture",
    r"this kernel has no /proc/vmstat": "a host kernel built without it",
}


def allowed(reason: str) -> bool:
    """Whether a skip with this reason may stay a skip."""
    return any(re.search(pattern, reason) for pattern in ALLOWED)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail") or os.environ.get(ENV) == "1":
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    if allowed(reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid} skipped: {reason}\n"
        "A host feature a test needs is missing: .ci/run installs it (install it, or see docs/development.md, "
        f'"Skips"); {ENV}=1 lets it skip on a machine where it cannot be installed.'
    )
