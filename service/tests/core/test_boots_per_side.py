"""Boots per side by clock: the instruction clock's boots repeat one another, so
a first look there takes at most KPERF_INSTRUCTION_CLOCK_BOOTS (docs/statistics.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core import benchmarks
from kperf.core.models import Job, MachineClass
from kperf_testing.lab import submission_ready_for_testing


def test_the_instruction_clock_is_capped_and_the_wall_clock_keeps_the_grid(settings: Any) -> None:
    settings.KPERF_INSTRUCTION_CLOCK_BOOTS = 2
    assert benchmarks.boots_per_side(4, "instructions") == 2
    assert benchmarks.boots_per_side(1, "instructions") == 1  # never more than the grid asks
    assert benchmarks.boots_per_side(4, "wall") == 4
    assert benchmarks.boots_per_side(5, "wall") == 5


@pytest.mark.django_db
def test_a_submission_queues_two_boots_per_side_on_the_instruction_clock_and_looks_at_two_then_four(
    settings: Any, alice: Any, tmp_path: Path
) -> None:
    settings.KPERF_INSTRUCTION_CLOCK_BOOTS = 2
    icount = MachineClass.objects.create(name="qemu-icount", arch="x86_64", clock="instructions")
    wall = MachineClass.objects.create(name="qemu-wall", arch="x86_64", clock="wall")
    sub = submission_ready_for_testing(alice, icount, tmp_path)
    for mclass, per_side in ((icount, 2), (wall, 4)):
        for side in ("base", "head"):
            assert Job.objects.filter(submission=sub, machine_class=mclass, side=side).count() == per_side
    assert benchmarks.look_plan("spawn", "quick", "instructions").looks == (2, 4)
    assert benchmarks.look_plan("spawn", "quick", "wall").looks == (4, 8)
