"""The order in which runners claim queued jobs, as plain data.

kperf.core.lab.leases.claim orders its SELECT the same way; kperf.core.lab.waiting
(which jobs are ahead) and kperf.core.lab.eta_model (how long until they have
run) sort by this key, the latter without Django so that bench/eta.py can
replay recorded queues with it.
"""

from __future__ import annotations

from typing import Any

_INF = float("inf")


def claim_key(pinned: int | None, sub: int | None, commit: int | None, seq: int, pk: int) -> tuple[Any, ...]:
    # leases.claim's ORDER BY: pinned jobs first, then submissions oldest
    # first, tracked-branch commits last (NULLs sort last), then seq, id.
    return (
        pinned is None,
        pinned or 0,
        _INF if sub is None else sub,
        _INF if commit is None else commit,
        seq,
        pk,
    )
