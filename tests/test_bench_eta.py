"""bench/eta.py's two ways to judge the ETA: the ETAs a real run's API showed
(`--shown`, recorded by bench/turnaround.py) and the replay's moments."""

from __future__ import annotations

from typing import Any

from kperf_testing.benches import load_bench


def test_the_shown_etas_are_held_against_when_each_verdict_came() -> None:
    bench = load_bench("eta")
    polled: dict[str, Any] = {
        "polls": {
            # The warm-up submission: left out.
            "1": {"created": 0.0, "finished": 50.0, "more_added": False, "polls": [[1.0, "building", 900, 900, 1200]]},
            "2": {
                "created": 100.0,
                "finished": 200.0,
                "more_added": True,
                "polls": [
                    [100.0, "queued", None, None, None],  # no estimate yet: not a sample
                    [110.0, "building", 80, 70, 95],  # 90 s left: 11% early, inside
                    [150.0, "testing", 50, 40, 49],  # 50 s left: exact, but the range ends at 49 (+1 s rounding)
                    [160.0, "testing", 20, 10, 30],  # 40 s left: half of it, outside
                    [200.0, "analysing", 0, 0, 0],  # the verdict's own instant: nothing left to judge
                ],
            },
        }
    }
    samples = bench.shown(polled, warmup=1)
    assert [(s.phase, s.left_s, s.error_s, s.inside) for s in samples] == [
        ("building", 90.0, -10.0, True),
        ("testing", 50.0, 0.0, True),
        ("testing", 40.0, -20.0, False),
    ]
    assert all(s.more_added for s in samples)
    table = "\n".join(bench.report(samples))
    assert "| all | 3 | 10 / 20 | 11% / 50% | -10 | 67% |" in table, table


def test_the_replay_asks_at_even_steps_or_at_the_submissions_own_events_never_before_it_was_made() -> None:
    bench = load_bench("eta")
    sub = {"id": 7, "created": 100.0, "finished": 107.0}
    rec: dict[str, Any] = {
        "builds": [
            # The base, built before the submission came and shared with it.
            {"id": 1, "submissions": [6, 7], "created": 10.0, "started": 20.0, "finished": 90.0},
            {"id": 2, "submissions": [7], "created": 100.0, "started": 101.0, "finished": 103.0},
        ],
        "jobs": [{"id": 5, "submission": 7, "created": 103.0, "started": 104.0, "finished": 106.0}],
    }
    assert bench.moments(rec, sub, 0.0) == [100.0, 101.0, 103.0, 104.0, 106.0]
    assert bench.moments(rec, sub, 2.0) == [100.0, 102.0, 104.0, 106.0]


def test_the_cold_bench_replays_a_records_first_batch_with_the_host_speed_model() -> None:
    """bench/eta_cold.py: each submission's first estimate with nothing measured, scaled by the host's speed."""
    import json
    from pathlib import Path

    from kperf.core.lab import eta_cold

    bench = load_bench("eta_cold")
    rec = json.loads((Path(__file__).resolve().parent.parent / "bench/records/eta-queue-2026-11-29.json").read_text())

    def rows(factor: float) -> list[dict[str, Any]]:
        speed = eta_cold.HostSpeed(eta_cold.REFERENCE_PROBE_S * factor, ccache_warm=True)
        out: list[dict[str, Any]] = bench.first_estimates(rec, 10, bench.prior_for(rec, speed, "tiny", ["x86_64"]))
        return out

    same, slower = rows(1.0), rows(2.0)
    assert [r["id"] for r in same] == list(range(1, 9))  # the record holds eight
    # The first submission, on the lab that had measured nothing: what the
    # service's API showed then (1678 s, docs/eta.md), from 600 s a build and 120 s a job.
    assert abs(same[0]["defaults"]["seconds"] - 1680) < 1, same[0]
    for a, b in zip(same, slower, strict=True):
        # Nothing measured: every duration is the host's, so twice the host's time is
        # twice the estimate (but for the second or so builds ahead had run already).
        assert abs(b["cold"]["seconds"] / a["cold"]["seconds"] - 2) < 0.01, (a, b)
        assert a["cold"]["seconds"] < a["defaults"]["seconds"]
    # The first submission had measured nothing either way; later ones had the first's durations.
    assert same[0]["as it was"] == same[0]["cold"] and same[1]["as it was"] != same[1]["cold"]
    assert any("within 50%" in line for line in bench.report(same))
