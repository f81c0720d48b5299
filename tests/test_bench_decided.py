"""bench/decided.py's count of what a submission decided, on documents shaped as the API gives them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kperf_testing.benches import load_bench


def _comparison(bench: str, verdicts: list[str]) -> dict[str, object]:
    return {"benchmark": bench, "metrics": [{"metric": f"m{i}", "verdict": v} for i, v in enumerate(verdicts)]}


def test_a_submission_meets_the_goal_only_with_95_percent_no_change_and_nothing_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("decided")
    decided = {
        "id": 1,
        "comparisons": [
            _comparison("pagealloc", ["no-change"] * 118 + ["inconclusive"] * 2),
            _comparison("aim9", ["no-change"] * 20),
        ],
    }
    undecided = {"id": 2, "comparisons": [_comparison("pagealloc", ["no-change"] * 100 + ["inconclusive"] * 20)]}
    flagged = {"id": 3, "comparisons": [_comparison("spawn", ["no-change"] * 99 + ["regression"])]}
    doc = tmp_path / "submissions.json"
    doc.write_text(json.dumps({"neutral#1": decided, "neutral#2": undecided, "memcg#1": flagged}))
    out = tmp_path / "decided.json"
    assert bench.main([str(doc), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "neutral#1: 138/140 no-change (98.6%), 0 flagged; meets" in printed
    assert "neutral#2: 100/120 no-change (83.3%), 0 flagged; misses" in printed
    assert "memcg#1: 99/100 no-change (99.0%), 1 flagged; misses" in printed
    rows = {r["submission"]: r for r in json.loads(out.read_text())["submissions"]}
    assert rows["neutral#1"]["per_benchmark"]["pagealloc"] == {"inconclusive": 2, "no-change": 118}
