"""End to end on the shape docs/kernels.md calls realistic: the `mm`
configuration profile, guests with two vCPUs, all four benchmarks.

A lab opened to a mailing list runs this shape, and a submission on it
collects the most notes per metric (the page allocator's 120 metrics on two
vCPUs: rounding, boots set aside, budget spent); four of nine such
submissions once lost their verdict to a 300-character note column. So the
neutral change and one fixture are each submitted twice, all four at once as
a lab receives them, and every one of them must end with its verdict
stored: the fixture found both times, the neutral change flagged nowhere.

The slow tier: `make test-realistic` runs it (`.ci/run` does, after
`make test`); docs/development.md, "The realistic tier".
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
from e2e_fixtures import own_stack, wait_final

from kperf_testing.benches import load_bench
from kperf_testing.kbuild import FIXTURES_DIR, read_fixture
from kperf_testing.prebuild import prebuilt
from kperf_testing.stack import RunningStack

pytestmark = [pytest.mark.kernel, pytest.mark.e2e, pytest.mark.realistic]

BENCHMARKS = ["aim9", "pagealloc", "pft", "spawn"]
FIXTURE = "memcg-charge-slower"


@pytest.fixture(scope="module")
def mm_smp_stack(
    tmp_path_factory: pytest.TempPathFactory, kperf_cache: Path, kernel_tree: Path
) -> Iterator[RunningStack]:
    # The mm base and the fixture from the test cache first, for their warm trees (tests/test_e2e.py, `stack_env`).
    assert all(r.ok for r in prebuilt(kernel_tree, kperf_cache, "x86_64", "mm"))
    with own_stack(tmp_path_factory, kperf_cache, "e2e-realistic", ["--vcpus", "2"]) as running:
        yield running


def _submit(stack: RunningStack, tree: Path, branch: str) -> int:
    resp = stack.api(
        "POST",
        "/submissions",
        {"tree": str(tree), "branch": branch, "base": "base", "benchmarks": BENCHMARKS, "profile": "mm"},
    )
    assert resp.status_code == 201, resp.text
    sub_id: int = resp.json()["id"]
    return sub_id


def _stored(d: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each benchmark's verdict per metric, after checking the whole verdict was stored."""
    assert d["status"] == "done", (d["id"], d["error"])
    assert {(c["profile"], c["vcpus"], c["clock"]) for c in d["comparisons"]} == {("mm", 2, "instructions")}, d[
        "comparisons"
    ]
    by_bench = {c["benchmark"]: {m["metric"]: m["verdict"] for m in c["metrics"]} for c in d["comparisons"]}
    assert sorted(by_bench) == BENCHMARKS, sorted(by_bench)
    assert len(by_bench["pagealloc"]) >= 100, len(by_bench["pagealloc"])
    for bench, metrics in by_bench.items():
        # "error": kperf failed on the metric and stored that instead of a verdict (docs/statistics.md).
        assert metrics and "error" not in metrics.values(), (bench, metrics)
    return by_bench


def test_every_submission_on_mm_with_two_vcpus_and_four_benchmarks_stores_its_verdict(
    mm_smp_stack: RunningStack, kernel_tree: Path, tmp_path: Path
) -> None:
    stack = mm_smp_stack
    runners = stack.api("GET", "/runners").json()
    assert runners and {r["vcpus"] for r in runners} == {2}, runners
    started = time.monotonic()
    ids = {(branch, n): _submit(stack, kernel_tree, branch) for n in (1, 2) for branch in ("neutral", FIXTURE)}
    done = {key: wait_final(stack, sub_id) for key, sub_id in ids.items()}
    print(f"four mm submissions on two vCPUs finished in {time.monotonic() - started:.0f} s", flush=True)
    # Every number of every submission kept for reading after a failure (pytest keeps the last runs' tmp folders).
    record = tmp_path / "submissions.json"
    record.write_text(json.dumps({f"{branch}#{n}": d for (branch, n), d in sorted(done.items())}, indent=1))
    print(f"the four submissions as the API gave them: {record}", flush=True)
    # Every outcome printed before any is judged, so one run shows them all.
    flags: dict[tuple[str, int], list[str]] = {}
    for (branch, n), d in sorted(done.items()):
        by_bench = _stored(d)
        flags[(branch, n)] = sorted(
            f"{b}:{m} {v}" for b, ms in by_bench.items() for m, v in ms.items() if v in ("regression", "improvement")
        )
        counts = {b: sum(v == "inconclusive" for v in ms.values()) for b, ms in sorted(by_bench.items())}
        print(f"{branch} #{n} (submission {d['id']}): flagged {flags[branch, n]}; inconclusive {counts}", flush=True)
        decided = load_bench("decided").summary(f"{branch}#{n}", d)  # issue 41's goal: >= 95% for neutral
        print(f"  no-change {decided['no_change']} of {decided['metrics']} metrics", flush=True)
        _print_flagged(d)
    for (branch, n), d in sorted(done.items()):
        if branch == "neutral":
            # The same code as the base: anything flagged, either way, is a false alarm.
            assert not flags[branch, n], (d["id"], flags[branch, n])
        else:
            _found(d)


def _print_flagged(d: dict[str, Any]) -> None:
    """Each flagged metric's numbers and its comparison's method line: what a false flag on this
    shape rests on is the first thing to read when the run fails."""
    for c in d["comparisons"]:
        flagged = [m for m in c["metrics"] if m["verdict"] in ("regression", "improvement")]
        if flagged:
            print(f"  {c['benchmark']} ({c['grid']}, look {c['look']}): {c['method']}", flush=True)
        for m in flagged:
            print(
                f"    {m['metric']}: {m['verdict']} {m['change_pct']:+.3f}% [{m['ci_low_pct']:+.3f}, "
                f"{m['ci_high_pct']:+.3f}] q={m['q_value']:.2g} boots {m['base_boots']}/{m['head_boots']} "
                f"means {m['base_mean']:.6g}/{m['head_mean']:.6g}; {m['note']}",
                flush=True,
            )


def _found(d: dict[str, Any]) -> None:
    """The fixture found: every metric its patch says it `moves` a regression of the size it was made
    for, and none of its controls (`must-not-move`) flagged either way.

    Until 2026-12-07 the page allocator's rows were the controls this failed on: order-1, order-2 or
    order-4 rows read about 1% off on the fixture's kernel, and the neutral change's head read the
    same against the same shared base boots. On two vCPUs the seeded phase spreads those rows by
    0.3-2% and a change elsewhere in the kernel moves them by as much (docs/benchmarks.md, "The page
    allocator on one vCPU and on two"); the comparisons now take both parts as measured for the shape
    (docs/statistics.md, "Several vCPUs: the between-build part per metric")."""
    claims = read_fixture(FIXTURES_DIR / f"{FIXTURE}.patch")
    metrics = {m["metric"]: m for c in d["comparisons"] for m in c["metrics"]}
    moved = [name for name in metrics if any(fnmatch(name, p) for p in claims.moves)]
    assert "faults/sec-threads-1" in moved, sorted(metrics)
    for name in moved:
        m = metrics[name]
        assert m["verdict"] == "regression" and -3.5 < m["change_pct"] < -0.5, (d["id"], name, m)
    for name, m in metrics.items():
        if any(fnmatch(name, p) for p in claims.must_not_move):
            assert m["verdict"] not in ("regression", "improvement"), (d["id"], name, m)
