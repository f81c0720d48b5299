"""The finding first, everywhere (issue 41): the mail, `kperf status` and the
page open with the verdict and each flagged metric with its change and
interval, count what was not flagged per benchmark, fit their widths, and
list a sweep's points in the order of their number (spawn-vmas-100, 200, 1600)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kperf.core.mail import alerts
from kperf.core.models import Submission
from kperf.core.results.sweeps import metric_order

from tests.conftest import Api, kperf_cli
from tests.finding_fixtures import REGRESSED
from tests.lab_fixtures import submission_page

pytestmark = pytest.mark.django_db

SPAWN = [f"spawn-vmas-{x}" for x in (0, 100, 200, 400, 800, 1600, 3200, 6400)]


def test_metric_names_sort_by_their_numbers() -> None:
    names = ["spawn-vmas-1600", "spawn-vmas-200", "alloc-odr0-16", "spawn-vmas-100", "alloc-odr0-2", "alloc-odr1-1"]
    assert sorted(names, key=metric_order) == [
        "alloc-odr0-2",
        "alloc-odr0-16",
        "alloc-odr1-1",
        "spawn-vmas-100",
        "spawn-vmas-200",
        "spawn-vmas-1600",
    ]


def test_the_mail_opens_with_the_finding_and_counts_the_rest(finished: Submission) -> None:
    _, text = alerts.submission_mail(finished)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    assert lines[0] == "Verdict: 1 regression"
    # The regression with its change and interval on the first screen.
    top = "\n".join(lines[:6])
    assert re.search(rf"  {REGRESSED} \(spawn, qemu-x86_64\): -49\.\d+% \[-\d", top), top
    assert "  spawn on qemu-x86_64: 7 no-change" in text
    assert re.search(r"  pagealloc on qemu-x86_64: \d{3} no-change", text), text
    # The metrics not flagged are counted, not listed.
    assert "alloc-odr2-64" not in text
    # The spawn sweep (it has the flagged point) in numeric order.
    sweep = text[text.index("  spawn-vmas-N:") :]
    assert sweep.index(" 100: ") < sweep.index(" 200: ") < sweep.index(" 1600: ")
    assert len(lines) <= 60, text


def test_kperf_status_fits_one_screen_and_all_lists_in_numeric_order(
    finished: Submission, live_server: Any, alice_api: Api, tmp_path: Path
) -> None:
    cli = kperf_cli(live_server.url, alice_api, tmp_path / "c.json")
    out = cli("status", str(finished.pk))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) <= 40, out.stdout
    assert max(len(line) for line in lines) <= 100, out.stdout
    assert lines[1] == "verdict: 1 regression"
    assert re.match(rf"  regression +{REGRESSED} \(spawn on qemu-x86_64\): -49\.\d+% \[-\d", lines[3]), lines
    assert "  spawn on qemu-x86_64: 7 no-change" in lines
    assert "spawn-vmas-200" not in out.stdout

    every = cli("status", str(finished.pk), "--all")
    assert every.returncode == 0, every.stderr
    rows = [line.split()[0] for line in every.stdout.splitlines() if line.startswith("  spawn-vmas-")]
    assert rows == SPAWN, rows
    wide = [line for line in every.stdout.splitlines() if len(line) > 100]
    assert not wide, wide[:3]


def test_the_page_shows_the_regression_above_the_rerun_notes(alice: Any, finished: Submission) -> None:
    html = submission_page(alice, finished)
    summary = html.index('id="finding"')
    assert html.index(REGRESSED, summary) < html.index('class="rerun"')
    rows = re.findall(r'<tr class="verdict-[^"]*" data-metric="(spawn-vmas-\d+)"', html)
    assert [r for r in rows if r != REGRESSED] == [m for m in SPAWN if m != REGRESSED]
