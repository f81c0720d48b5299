"""bench/test_timeline.py: a real pytest run recorded by the timeline plugin
beside /proc/stat, and the per-module table read from a record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kperf_testing.benches import load_bench

TESTS = """
import time

def test_burns_a_core():
    t = time.monotonic()
    while time.monotonic() - t < 0.6:
        pass

def test_sleeps():
    time.sleep(0.6)

def test_fails():
    assert False, "on purpose"
"""


def test_a_run_records_every_test_with_its_outcome_and_the_cpu_beside_it(tmp_path: Path) -> None:
    bench = load_bench("test_timeline")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_three.py").write_text(TESTS)
    record = tmp_path / "record.json"
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "kernels-prepare.log").write_text(
        "2026-12-01 23:37:53,632 building base (824b32c3a303) for x86_64\n"
        "base x86_64 tiny: ready after 308 s\n"
        "broken x86_64 tiny: failed: make: *** [Makefile] Error 2 after 12 s\n"
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "kperf_testing.timeline"]
    command += ["-c", str(tmp_path / "pytest.ini"), str(tmp_path / "test_three.py")]
    done = subprocess.run(
        [sys.executable, str(bench.__file__), "run", "--interval", "0.1", "--record", str(record), "--", *command],
        capture_output=True,
        text=True,
        env={**os.environ, "KPERF_CACHE": str(cache)},
        timeout=120,
    )
    # The command's exit status is the bench's: one test failed.
    assert done.returncode == 1, done.stdout + done.stderr
    rec: dict[str, Any] = json.loads(record.read_text())
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"] for t in rec["tests"]}
    assert outcomes == {"test_burns_a_core": "passed", "test_sleeps": "passed", "test_fails": "failed"}
    for t in rec["tests"]:
        if t["nodeid"].endswith(("burns_a_core", "sleeps")):
            assert t["end"] - t["start"] >= 0.6
        assert rec["start"] <= t["start"] <= t["end"] <= rec["start"] + rec["wall_s"]
    assert rec["cpu"] and all(0.0 <= busy <= 1.0 for _t, busy, _steal in rec["cpu"])
    assert rec["prebuild"] == [
        {"kernel": "base x86_64 tiny", "state": "ready", "seconds": 308},
        {"kernel": "broken x86_64 tiny", "state": "failed: make: *** [Makefile] Error 2", "seconds": 12},
    ]
    [row] = [line for line in done.stdout.splitlines() if line.startswith("| ") and "test_three.py" in line]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:5] == ["3", "1"], row  # three tests, one failed
    assert float(cells[2]) >= 1.2, row  # two tests of 0.6 s each, one after the other
    assert "base x86_64 tiny: ready after 308 s" in done.stdout


def test_a_module_with_one_core_idle_shows_half_the_cores_busy_and_its_idle_core_seconds() -> None:
    bench = load_bench("test_timeline")
    t0 = 1000.0
    rec: dict[str, Any] = {
        "date": "2026-12-02 00:00 UTC",
        "machine": {"cpus": 2, "cpu": "test CPU", "arch": "x86_64"},
        "command": ["make", "test"],
        "rc": 0,
        "start": t0,
        "wall_s": 40.0,
        "interval_s": 10.0,
        # Both cores busy for the first 20 s, one for the last 20.
        "cpu": [[t0 + 10, 1.0, 0.0], [t0 + 20, 1.0, 0.0], [t0 + 30, 0.5, 0.0], [t0 + 40, 0.5, 0.0]],
        "tests": [
            {"nodeid": "a/test_x.py::t1", "worker": "", "start": t0, "end": t0 + 20, "outcome": "passed"},
            {"nodeid": "b/test_y.py::t1", "worker": "", "start": t0 + 20, "end": t0 + 30, "outcome": "failed"},
            {"nodeid": "b/test_y.py::t2", "worker": "", "start": t0 + 30, "end": t0 + 40, "outcome": "passed"},
        ],
        "prebuild": [],
    }
    x, y = bench.spans(rec)
    assert (x.name, x.wall, x.tests, x.failed, x.busy, x.idle_core_s) == ("a/test_x.py", 20.0, 1, 0, 1.0, 0.0)
    assert (y.name, y.start, y.wall, y.tests, y.failed, y.busy, y.idle_core_s) == (
        "b/test_y.py",
        20.0,
        20.0,
        2,
        1,
        0.5,
        20.0,
    )
    table = bench.report(rec)
    assert table[0].endswith("0.7 min, 3 tests, cores 75% busy, 0.3 core-minutes idle"), table[0]
    assert "| b/test_y.py | 0.3 | 20.0 | 2 | 1 | 50% | 20 |" in table
    # --top 1 keeps the longest (a tie here: the first that ran).
    assert [line for line in bench.report(rec, top=1) if line.startswith("| a/")] != []


def test_under_two_xdist_workers_each_test_has_one_start_and_one_end_from_the_worker_that_ran_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_three.py").write_text(TESTS)
    timeline = tmp_path / "timeline.jsonl"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "kperf_testing.timeline"]
    subprocess.run(
        [*command, "-c", str(tmp_path / "pytest.ini"), "-n", "2", str(tmp_path / "test_three.py")],
        env={**os.environ, "KPERF_TEST_TIMELINE": str(timeline)},
        capture_output=True,
        timeout=120,
    )
    events = [json.loads(line) for line in timeline.read_text().splitlines()]
    # The controller replays the workers' reports and writes nothing.
    assert sorted((e["nodeid"].split("::")[1], e["event"]) for e in events) == sorted(
        (name, kind) for name in ("test_burns_a_core", "test_sleeps", "test_fails") for kind in ("start", "end")
    )
    assert {e["worker"] for e in events} <= {"gw0", "gw1"}
    bench = load_bench("test_timeline")
    assert {t["nodeid"].split("::")[1]: t["outcome"] for t in bench.read_timeline(timeline)} == {
        "test_burns_a_core": "passed",
        "test_sleeps": "passed",
        "test_fails": "failed",
    }
