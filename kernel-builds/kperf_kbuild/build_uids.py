"""One uid per running build, so that what the kernel counts per uid is per build.

RLIMIT_NPROC counts every process of a real uid, machine-wide: with every
build under one uid, one submitter's fork bomb took the process slots
another's build needed. So a build running as root leases a uid of its
own among ``KPERF_BUILD_UIDS`` uids from ``KPERF_BUILD_UID`` (64000 to
64015 by default) for as long as it runs, held by an flock on
``<LOCK_DIR>/<uid>.lock``: a killed worker's lease goes with its process.
The lowest free uid is taken, so a machine building one kernel at a time
keeps using the first uid (and hands its trees over to no other).

Every build uid has the same group, ``KPERF_BUILD_GID``: what lets a
scope's builds under different uids share its ccache
(kperf_kbuild.ccache_scope). Its object trees, outputs and scratch are
handed to the uid that builds in them (``Sandbox.own``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from kperf_kbuild.host import BuildInfraError, try_lock
from kperf_kbuild.sandbox import Sandbox

# Machine-wide (every worker and every build root of the machine draws from
# the same uids), root's alone, and gone at reboot with the builds it counted.
LOCK_DIR = Path("/run/kperf-build-uids")


@contextlib.contextmanager
def lease(sandbox: Sandbox, lock_dir: Path = LOCK_DIR) -> Iterator[Sandbox]:
    """``sandbox`` with a uid no other running build has (uids=1), held
    until the block ends. Unchanged where builds do not switch uid (an
    ordinary user's builds run as that user; the sandbox off)."""
    if not sandbox.drops_to_uid:
        yield sandbox
        return
    lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for uid in range(sandbox.uid, sandbox.uid + sandbox.uids):
        held = try_lock(lock_dir / f"{uid}.lock")
        if held is None:
            continue
        try:
            yield dataclasses.replace(sandbox, uid=uid, uids=1)
        finally:
            held.close()
        return
    last = sandbox.uid + sandbox.uids - 1
    raise BuildInfraError(
        f"all {sandbox.uids} build uids ({sandbox.uid}-{last}) are taken by running builds: "
        f"set KPERF_BUILD_UIDS to at least the number of builds this machine runs at once"
    )
