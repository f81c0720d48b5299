"""`kperf compare` and `kperf changepoints` on JSON files, run as a user would, with no server (kperf.cli.main)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

KPERF = Path(sys.executable).with_name("kperf")

DOC = {
    "metrics": {
        "faults/sec-4": {
            "higher_is_better": True,
            "base": [[101.2, 99.8, 100.4], [98.7, 99.9, 100.1], [100.3, 100.0, 99.6]],
            "head": [[93.1, 94.0, 92.8], [95.2, 94.4, 93.9], [93.8, 94.1, 94.5]],
        },
        "alloc-odr0-1": {"higher_is_better": False, "base": [425, 426, 424], "head": [[425, 426], [424, 425]]},
    }
}


def kperf(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KPERF), *args], input=stdin, capture_output=True, text=True, timeout=120, check=False)


def test_compare_json_round_trips_through_a_file(tmp_path: Path) -> None:
    path = tmp_path / "cmp.json"
    path.write_text(json.dumps(DOC))
    proc = kperf("compare", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["metrics"]
    assert set(out) == set(DOC["metrics"])
    m = out["faults/sec-4"]
    assert m["verdict"] == "regression" and m["change_pct"] < -5
    assert m["ci_low_pct"] < m["change_pct"] < m["ci_high_pct"]
    assert 0 < m["p_value"] <= m["q_value"] < 0.05
    assert m["base_boots"] == 3 and m["head_samples"] == 9
    assert [r["row"] for r in m["summary"]][:2] == ["Min", "Hmean"]
    # a flat list is one boot: not enough to decide
    assert out["alloc-odr0-1"]["verdict"] == "inconclusive" and out["alloc-odr0-1"]["base_boots"] == 1


def test_compare_reads_standard_input_and_prints_the_table_without_json() -> None:
    proc = kperf("compare", "-", stdin=json.dumps(DOC))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("Hmean     faults/sec-4") and line.endswith("%*") for line in lines)
    assert all(len(line) <= 80 for line in lines)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("not json", "not JSON"),
        (json.dumps({"metric": {}}), '{"metrics"'),
        (json.dumps({"metrics": {"m": {"base": [1], "head": [2]}}}), "higher_is_better"),
        (json.dumps({"metrics": {"m": {"higher_is_better": True, "base": [[1], 2], "head": [2]}}}), "base[1]"),
    ],
)
def test_bad_input_says_what_is_wrong(doc: str, message: str) -> None:
    proc = kperf("compare", "--json", "-", stdin=doc)
    assert proc.returncode == 2 and message in proc.stderr


def series_doc(values: list[float]) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    points = [
        {"commit": f"c{i:03d}", "samples": [[float(v * (1 + rng.normal(0, 0.002))) for _ in range(3)]]}
        for i, v in enumerate(values)
    ]
    return {"metrics": {"page_test": {"higher_is_better": True, "points": points}}}


def test_changepoints_json_finds_the_commit_that_slowed_things_down(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    values = list(100 * (1 + rng.normal(0, 0.01, 120)))
    values[70:] = [v * 0.95 for v in values[70:]]
    path = tmp_path / "series.json"
    path.write_text(json.dumps(series_doc(values)))
    proc = kperf("changepoints", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    cps = json.loads(proc.stdout)["metrics"]["page_test"]["change_points"]
    assert len(cps) == 1
    cp = cps[0]
    assert cp["index"] == 70 and cp["commit"] == "c070" and cp["direction"] == "regression"
    assert cp["change_pct"] == pytest.approx(-5, abs=1.0) and cp["p_value"] < 1e-3


def test_changepoints_on_a_flat_series_prints_none() -> None:
    rng = np.random.default_rng(2)
    proc = kperf("changepoints", "-", stdin=json.dumps(series_doc(list(100 * (1 + rng.normal(0, 0.01, 80))))))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "page_test: 0 change points"


def test_changepoints_json_takes_a_drift_rate_and_says_which_window_it_used(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    # a level wandering 0.1 noise-sds per commit, and a 6% drop at commit 150
    level = np.cumsum(rng.normal(0, 0.001, 200))
    values = list(100 * np.exp(level + rng.normal(0, 0.01, 200)))
    values[150:] = [v * 0.94 for v in values[150:]]
    doc = series_doc(values)
    doc["metrics"]["page_test"]["drift"] = 0.01
    path = tmp_path / "series.json"
    path.write_text(json.dumps(doc))
    proc = kperf("changepoints", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["metrics"]["page_test"]
    assert out["drift"] == 0.01 and out["window"] == 35
    assert 150 in [cp["index"] for cp in out["change_points"]]

    flat = json.loads(kperf("changepoints", "--json", "-", stdin=json.dumps(series_doc(values[:100]))).stdout)
    assert flat["metrics"]["page_test"]["drift"] == 0.0 and flat["metrics"]["page_test"]["window"] == 512

    doc["metrics"]["page_test"]["drift"] = -1
    proc = kperf("changepoints", "--json", "-", stdin=json.dumps(doc))
    assert proc.returncode == 2 and "'drift' must be >= 0" in proc.stderr
    proc = kperf("changepoints", "--json", "-", stdin=json.dumps({**series_doc(values), "threshold": 0}))
    assert proc.returncode == 2 and "threshold must be a positive number" in proc.stderr
