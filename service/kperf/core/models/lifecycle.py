"""Statuses and the only ways out of them, declared once on each model that has a life.

Each such model names its legal changes in `TRANSITIONS` (status -> the
statuses it may move to); `final_statuses(TRANSITIONS)` is what it calls final: the
statuses with no way out. kperf.core.lifecycle.states makes every change through
this table, and the sweeper re-drives any row that stays too long in a
status that is not final.
"""

from __future__ import annotations

from collections.abc import Mapping


def final_statuses(transitions: Mapping[str, frozenset[str]]) -> tuple[str, ...]:
    """The statuses of `transitions` with no way out, in declaration order."""
    return tuple(status for status, targets in transitions.items() if not targets)
