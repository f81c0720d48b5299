"""The submission page shows what was flagged first, with its plots, and
folds a long list of metrics nothing happened to behind a count of verdicts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kperf.core.templatetags.kperf_plots import UNFLAGGED_OPEN_AT_MOST, flag_split

from tests.lab_fixtures import finish_all, results_body, submission_page, submission_ready_for_testing

pytestmark = pytest.mark.django_db


def test_flagged_metrics_come_first_with_their_plots_and_the_rest_under_a_count(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)

    def body(job: dict[str, Any], side: str) -> dict[str, Any]:
        out = results_body(job)
        if side == "head":
            # Half the forks with no extra VMAs; the 1000-VMA step untouched.
            for sample in out["boots"][0]["samples"]:
                if sample["metric"] == "spawn-vmas-0":
                    sample["value"] /= 2
        return out

    finish_all(sub, runner_api[1], body)
    page = submission_page(alice, sub)
    flagged = re.search(r'<table class="comparison flagged" data-flagged="1">(.*?)</table>', page, re.S)
    assert flagged is not None, page
    assert 'data-metric="spawn-vmas-0"' in flagged.group(1) and "verdict-regression" in flagged.group(1)
    assert "spawn-vmas-1000" not in flagged.group(1)
    # One metric not flagged: listed open (a short list), under a count of its verdict.
    rest = re.search(
        r'<details class="unflagged" open data-unflagged="1"><summary>(.*?)</summary>(.*?)</details>', page, re.S
    )
    assert rest is not None, page
    assert rest.group(1) == "1 metric not flagged: 1 no-change"
    assert 'data-metric="spawn-vmas-1000"' in rest.group(2)
    # The flagged metric's plot is open; the other's waits in the fold.
    open_plots = re.search(r'<div class="plots-flagged">(.*?)</div>', page, re.S)
    assert open_plots is not None and 'data-metric="spawn-vmas-0"' in open_plots.group(1)
    folded = re.search(r'<details class="plots-per-metric">(.*?)</details>', page, re.S)
    assert folded is not None and 'data-metric="spawn-vmas-1000"' in folded.group(1)
    assert 'data-metric="spawn-vmas-0"' not in folded.group(1)


def test_a_long_list_of_unflagged_metrics_folds_and_is_counted_by_verdict() -> None:
    many = [{"metric": f"alloc-{i}", "verdict": "no-change"} for i in range(UNFLAGGED_OPEN_AT_MOST + 2)]
    many += [{"metric": "free-0", "verdict": "inconclusive"}, {"metric": "total-0", "verdict": "improvement"}]
    parts = flag_split(many)
    assert [m["metric"] for m in parts["flagged"]] == ["total-0"]
    assert len(parts["rest"]) == UNFLAGGED_OPEN_AT_MOST + 3 and parts["fold"]
    assert parts["counts"] == f"{UNFLAGGED_OPEN_AT_MOST + 2} no-change, 1 inconclusive"
    assert not flag_split(many[:UNFLAGGED_OPEN_AT_MOST])["fold"]
