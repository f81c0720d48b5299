"""The verdict's ETA as arithmetic on plain data: hand-computed cases, no database."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest

from kperf.core.lab.eta_model import (
    DEFAULT_BUILD_S,
    DEFAULT_JOB_S,
    Estimate,
    History,
    Prior,
    Situation,
    Typical,
    Unknown,
    Work,
    estimate,
    remaining,
    sentence,
)

CLASS = "qemu-x86_64"


def history(*job_seconds: float, builds: tuple[float, ...] = ()) -> History:
    hist = History()
    for s in job_seconds:
        hist.add_job(CLASS, "spawn", "quick", s)
    for s in builds:
        hist.add_build(s)
    return hist


def work(own: bool = False, elapsed: float | None = None, after_builds: bool = False) -> Work:
    return Work(CLASS, "spawn", "quick", own=own, elapsed_s=elapsed, after_builds=after_builds)


def known(est: Estimate | Unknown) -> Estimate:
    assert isinstance(est, Estimate), est
    return est


def test_one_runner_runs_the_jobs_ahead_then_the_submissions_own() -> None:
    # Median 60 s. A running job 10 s in ends at 50; two ahead end at 110
    # and 170; the submission's two at 230 and 290.
    s = Situation(runners={CLASS: 1}, jobs=[work(elapsed=10), work(), work(), work(own=True), work(own=True)])
    est = known(estimate(s, history(50, 60, 70)))
    assert est.seconds == pytest.approx(290)
    assert est.jobs_ahead == {CLASS: 2}
    assert est.basis == f"median of 3 recent spawn quick jobs on {CLASS}"


def test_two_runners_share_the_queue() -> None:
    # Four jobs of 60 s on two runners: two rounds, 120 s.
    s = Situation(runners={CLASS: 2}, jobs=[work(), work(), work(own=True), work(own=True)])
    assert known(estimate(s, history(60))).seconds == pytest.approx(120)


def test_the_range_comes_from_the_10th_and_90th_percentiles() -> None:
    # Of 40, 60, 80, 100, 120 (inclusive): 48, median 80, 112; two jobs in a row.
    s = Situation(runners={CLASS: 1}, jobs=[work(own=True), work(own=True)])
    est = known(estimate(s, history(40, 60, 80, 100, 120)))
    assert (est.low, est.seconds, est.high) == pytest.approx((96, 160, 224))


def test_planned_jobs_start_when_the_builds_are_done() -> None:
    # Two builds of 100 s on one worker, one 30 s in: done at 70 + 100 = 170;
    # meanwhile the runner works off the job ahead (60 s); then two of ours.
    s = Situation(
        runners={CLASS: 1},
        builds=[30.0, None],
        jobs=[work(), work(own=True, after_builds=True), work(own=True, after_builds=True)],
    )
    est = known(estimate(s, history(60, builds=(100,))))
    assert est.seconds == pytest.approx(170 + 120)
    assert "median of 1 recent build" in est.basis


def test_builds_ahead_hold_the_worker_first() -> None:
    s = Situation(runners={CLASS: 1}, builds=[None], builds_ahead=[None, None], jobs=[])
    assert known(estimate(s, history(builds=(100,)))).seconds == pytest.approx(300)
    two_workers = Situation(runners={CLASS: 1}, builds=[None], builds_ahead=[None, None], build_workers=2)
    assert known(estimate(two_workers, history(builds=(100,)))).seconds == pytest.approx(200)


def test_further_looks_widen_only_the_upper_end() -> None:
    s = Situation(runners={CLASS: 1}, jobs=[work(own=True)], more=[work(own=True)] * 4)
    est = known(estimate(s, history(60)))
    assert (est.seconds, est.high, est.more_jobs) == (60, 60 + 4 * 60, 4)
    line = sentence(est, datetime(2026, 11, 24, 14, 0, tzinfo=UTC))
    assert line == (
        "verdict expected in ~1 min (by 14:01 UTC); at least that: up to ~5 min if a look is "
        "inconclusive and kperf adds boots (4 more jobs at most)"
    )


def test_without_history_it_falls_back_to_the_class_then_the_default() -> None:
    hist = History()
    hist.add_job(CLASS, "pft", "full", 200)
    s = Situation(runners={CLASS: 1}, jobs=[work(own=True)])
    est = known(estimate(s, hist))
    assert est.seconds == 200 and est.basis == f"median of 1 recent job on {CLASS}"
    empty = known(
        estimate(Situation(runners={CLASS: 1}, builds=[None], jobs=[work(own=True, after_builds=True)]), History())
    )
    assert empty.seconds == DEFAULT_BUILD_S + DEFAULT_JOB_S
    assert "none measured yet" in empty.basis


def test_only_the_recent_durations_count() -> None:
    # 20 slow jobs long ago, then 20 fast ones: the slow ones are forgotten.
    est = known(estimate(Situation(runners={CLASS: 1}, jobs=[work(own=True)]), history(*[600] * 20, *[60] * 20)))
    assert est.seconds == 60


def test_a_running_job_has_left_what_the_recent_runs_longer_than_it_had_left() -> None:
    # Of 40, 60, 80, 100, 120 s, a job 90 s in sits at 62.5% of the interpolated
    # distribution; of what lies above, the 10th, 50th and 90th percentiles are
    # 93, 105 and 117 s: 3, 15 and 27 s to go, where the median alone (80 s)
    # said it was about to end. The submission's job (48, 80, 112 s) follows it.
    s = Situation(runners={CLASS: 1}, jobs=[work(elapsed=90), work(own=True)])
    est = known(estimate(s, history(40, 60, 80, 100, 120)))
    assert (est.low, est.seconds, est.high) == pytest.approx((3 + 48, 15 + 80, 27 + 112))


def test_a_run_shorter_than_every_recent_one_has_its_typical_length_less_what_it_ran() -> None:
    t = history(40, 60, 80, 100, 120).job(CLASS, "spawn", "quick")
    assert [remaining(t, q, 30) for q in ("low", "mid", "high")] == pytest.approx([48 - 30, 80 - 30, 112 - 30])
    assert [remaining(t, q, None) for q in ("low", "mid", "high")] == pytest.approx([48, 80, 112])


def test_a_run_longer_than_every_recent_one_has_as_long_again_to_go_at_the_median() -> None:
    # 500 s in, where the history knows 60 s: 500 s to go at the median, 1/9
    # and 9 times that at the ends of the range, then the submission's job.
    s = Situation(runners={CLASS: 1}, jobs=[work(elapsed=500), work(own=True)])
    est = known(estimate(s, history(60)))
    assert (est.low, est.seconds, est.high) == pytest.approx((500 / 9 + 60, 500 + 60, 4500 + 60))
    # Just short of the longest known run, there is next to nothing left.
    t = history(40, 60, 80, 100, 120).job(CLASS, "spawn", "quick")
    assert remaining(t, "mid", 119.9) == pytest.approx(0.05)


def test_a_running_build_slower_than_its_history_holds_the_worker_for_the_slow_builds_remainder() -> None:
    # Builds of 15, 23 and 71 s (median 23). One ahead, 30 s in, sits at
    # f = (1 + 7/48) / 2 of the interpolated distribution; the median of what
    # lies above is at f + (1 - f) / 2 = 0.786, 50.5 s: 20.5 s to go (it
    # counted as done before). Then ours (23 s) and a job of 60 s.
    s = Situation(runners={CLASS: 1}, builds=[None], builds_ahead=[30.0], jobs=[work(own=True, after_builds=True)])
    est = known(estimate(s, history(60, builds=(15, 23, 71))))
    assert est.seconds == pytest.approx(20.5 + 23 + 60)


def test_no_runner_in_service_means_no_estimate() -> None:
    est = estimate(Situation(runners={CLASS: 0}, jobs=[work(own=True)]), history(60))
    assert est == Unknown(f"no runner of class {CLASS} is in service to run its jobs")


def test_the_sentence_names_the_jobs_ahead_per_class() -> None:
    est = Estimate(seconds=725, low=600, high=725, jobs_ahead={CLASS: 3, "qemu-arm64": 0}, more_jobs=0, basis="")
    assert sentence(est, datetime(2026, 11, 24, 13, 53, tzinfo=UTC)) == (
        f"verdict expected in ~12 min (by 14:05 UTC), 3 jobs ahead on {CLASS}"
    )


def test_the_model_imports_without_django() -> None:
    probe = (
        "import sys, kperf.core.lab.eta_model;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'kombu'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_older_submission_still_building_claims_before_ours_once_its_builds_are_done() -> None:
    # One runner, jobs of 60 s; the older submission's build (100 s) is ahead.
    # Ours run while it builds (0-60, 60-120); at 120 its two jobs are
    # queued and claim first (120-240); our third runs 240-300.
    theirs = [work(after_builds=True)] * 2
    ours = [work(own=True)] * 3
    s = Situation(runners={CLASS: 1}, builds_ahead=[None], jobs=[*theirs, *ours])
    est = known(estimate(s, history(60, builds=(100,))))
    assert est.seconds == pytest.approx(300)
    # Not queued yet, but they will claim before our last: they are ahead.
    assert est.jobs_ahead == {CLASS: 2}


def test_jobs_ahead_counts_every_job_before_the_submissions_last_even_behind_a_shared_base_boot() -> None:
    # Its first job is a base boot shared from an older submission, claimed
    # early; three jobs of others come before the rest of its own.
    s = Situation(runners={CLASS: 1}, jobs=[work(own=True), work(), work(), work(), work(own=True)])
    assert known(estimate(s, history(60))).jobs_ahead == {CLASS: 3}


def test_a_class_nobody_measured_on_learns_from_the_lab_s_other_classes() -> None:
    hist = History()
    for seconds in (40.0, 50.0, 60.0):
        hist.add_job("qemu-arm64", "spawn", "quick", seconds)
    typical = hist.job(CLASS, "spawn", "quick")
    assert typical.mid == pytest.approx(50.0)
    assert typical.basis.endswith("on other machine classes")


def test_builds_take_the_time_of_their_own_kind() -> None:
    # Clean builds take 600 s here, incremental ones 40 s. A build ahead (the
    # median of all six: 317.5 s) and the submission's incremental one: 317.5 + 40.
    hist = history(60)
    for seconds in (590.0, 600.0, 610.0):
        hist.add_build(seconds, "clean")
    for seconds in (35.0, 40.0, 45.0):
        hist.add_build(seconds, "incremental")
    s = Situation(
        runners={CLASS: 1},
        builds=[None],
        build_kinds=["incremental"],
        builds_ahead=[None],
        jobs=[work(own=True, after_builds=True)],
    )
    est = known(estimate(s, hist))
    assert est.seconds == pytest.approx(317.5 + 40 + 60)
    assert "median of 3 recent incremental builds" in est.basis
    # A kind nothing was measured of yet takes every build's median; unknown kinds too.
    assert History().build("clean").mid == DEFAULT_BUILD_S
    only_clean = History()
    only_clean.add_build(500.0, "clean")
    assert only_clean.build("incremental").mid == 500.0 and only_clean.build().mid == 500.0


def test_the_hosts_prior_stands_in_only_where_nothing_was_measured() -> None:
    def t(seconds: float, what: str) -> Typical:
        return Typical(seconds / 2, seconds, seconds * 2, what, (seconds / 2, seconds, seconds * 2))

    prior = Prior(
        builds={"clean": t(300, "clean prior"), "incremental": t(20, "incremental prior")},
        jobs={(CLASS, "spawn", "quick"): t(12, "spawn prior"), (CLASS, "pft", "quick"): t(8, "pft prior")},
    )
    hist = History(prior=prior)
    assert hist.build("clean").basis == "clean prior" and hist.build("incremental").mid == 20
    # A build of unknown kind (one ahead) is taken as its expected kind, else clean.
    assert hist.build("", "incremental").mid == 20 and hist.build().mid == 300
    assert hist.job(CLASS, "spawn", "quick").mid == 12
    # A kind the prior lacks: the fixed default.
    assert hist.job("qemu-arm64", "spawn", "quick").mid == DEFAULT_JOB_S
    # One measured job of the class, of another benchmark, and one build of either kind: they win.
    hist.add_job(CLASS, "aim9", "quick", 40.0)
    hist.add_build(90.0, "incremental")
    assert hist.job(CLASS, "spawn", "quick").mid == 40.0
    assert hist.build("clean").mid == 90.0 and hist.build("", "incremental").mid == 90.0
    # The other class still has only the other classes' measures, which also win.
    assert hist.job("qemu-arm64", "spawn", "quick").mid == 40.0
