"""A sweep is shown as a sweep: its points in order, one small table on the
page and one block in the mail (kperf.core.results.sweeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kperf.core.mail import alerts
from kperf.core.models import MachineClass
from kperf.core.results import sweeps

pytestmark = pytest.mark.django_db

SEED_POINTS = [0, 100, 200, 400, 800, 1600, 3200, 6400]


def test_points_are_in_the_order_of_their_number_not_of_their_name() -> None:
    rows = [(f"spawn-vmas-{x}", -x / 1000 if x else 0.0, "no_change") for x in sorted(SEED_POINTS, key=str)]
    rows += [("faults/sec-threads-2", 1.0, "regression"), ("faults/sec-threads-1", 0.5, "no_change")]
    rows += [("page_test", 0.1, "no_change")]
    found = sweeps.sweeps(rows)
    assert [s["name"] for s in found] == ["faults/sec-threads-N", "spawn-vmas-N"]
    assert [p["x"] for p in found[1]["points"]] == SEED_POINTS
    lines = sweeps.mail_lines(found[1], width=40)
    assert lines[0] == "  spawn-vmas-N:"
    assert all(len(line) <= 40 for line in lines)
    # A point is never split from its value across lines.
    cells = [cell for line in lines[1:] for cell in line.split("  ") if cell.strip()]
    assert cells[0].strip() == "0: +0.00%" and cells[-1].strip() == "6400: -6.40%"
    assert sweeps.mail_lines(found[0])[1] == "    1: +0.50%  2: +1.00%*"


def test_the_mail_and_the_page_show_the_fork_sweep_in_order(
    alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path, client: Client
) -> None:
    from tests.mail_fixtures import finished_submission

    sub = finished_submission(alice, qemu_class, runner_api[1], tmp_path, head_level=500.0)
    _, body = alerts.submission_mail(sub)
    block = body.split("spawn on qemu-x86_64, change by point (* flagged):\n", 1)[1]
    assert block.startswith("  spawn-vmas-N:\n    0: -49.95%*  1000: -49.95%*")
    client.force_login(alice)
    page = client.get(f"/submissions/{sub.pk}").content.decode()
    assert 'data-sweep="spawn-vmas-N"' in page
    assert page.index('<th class="num">0</th>') < page.index('<th class="num">1000</th>')
