"""History kept as summaries gives what the full-history code computes, and costs only new data."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from kperf.core.models import (
    BootRecord,
    CommitSummary,
    Job,
    NoisePool,
    Runner,
    RunSummary,
    Sample,
    SeriesCatchUp,
    SeriesPool,
    SeriesState,
)
from kperf.core.results import drift_pools, summaries
from kperf.core.submissions import analysis
from kperf.core.tracking import branches
from kperf.core.web.api import history as history_api
from kperf.stats import history as sh
from kperf.stats.abtest import boot_mean
from kperf.stats.changepoints import OnlineDetector, detect, estimate_drift
from kperf.stats.noise import (
    RunPool,
    components_from_pool,
    components_from_runs,
    outlier_floor,
    run_stats,
    run_stats_batch,
    variance_components,
)
from kperf_testing import reference_history

from tests.conftest import Api
from tests.drift_fixtures import STEADY, WANDERS, branch_with_series
from tests.noise_fixtures import branch_of_builds

pytestmark = pytest.mark.django_db


def test_drift_sums_give_what_estimate_drift_gives() -> None:
    rng = np.random.default_rng(1)
    segments = [np.cumsum(rng.normal(0, 0.1, n)) + rng.normal(0, 1, n) for n in (30, 200, 10, 80)]
    full = estimate_drift(segments)
    pooled = sh.drift_stats(segments[:2]) + sh.drift_stats(segments[2:])
    assert sh.drift_from_stats(pooled).rate == full.rate > 0
    assert sh.drift_from_stats(pooled).lr == pytest.approx(full.lr, rel=1e-9)
    assert sh.drift_from_stats(pooled).commits == full.commits


def test_noise_runs_kept_as_summaries_give_the_same_model() -> None:
    rng = np.random.default_rng(2)
    runs = [[list(100 + rng.normal(0, 1, 5) + rng.normal(0, 3)) for _ in range(4)] for _ in range(12)]
    full = variance_components(runs)
    kept = components_from_runs([s for r in runs if (s := run_stats(r)) is not None])
    assert kept == full


def test_a_kept_detector_continued_by_one_commit_equals_a_replay() -> None:
    rng = np.random.default_rng(3)
    values = list(rng.normal(0, 1, 300)) + list(rng.normal(6, 1, 60))
    det = OnlineDetector()
    for v in values[:-1]:
        det.append(v)
    again, fed, log_scale = sh.detector_from_bytes(sh.detector_to_bytes(det, list(range(359)), True))
    again.append(values[-1])
    assert fed == list(range(359)) and log_scale
    assert [(c.index, c.statistic) for c in again.change_points()] == [(c.index, c.statistic) for c in detect(values)]


def test_learned_drift_and_build_noise_from_summaries_equal_the_full_history(
    alice: Any, qemu_class: Any, tmp_path: Path
) -> None:
    wandering, _ = branch_with_series(alice, qemu_class, tmp_path, "wandering", 200, walk=0.1)
    branch_with_series(alice, qemu_class, tmp_path, "stepping", 150, walk=0.0, step_at=80, step=8.0)
    # One branch analysed (so it has change points that cut its history), one never.
    branches.analyse_series(wandering, qemu_class.pk, "spawn", qemu_class.clock)
    full = reference_history.learned_drift(qemu_class.pk, "spawn", qemu_class.clock)
    kept = drift_pools.learned_drift(qemu_class.pk, "spawn", qemu_class.clock)
    assert set(kept) == set(full) == {WANDERS, STEADY}
    for metric in full:
        assert kept[metric].rate == full[metric].rate
        assert kept[metric].commits == full[metric].commits
        assert kept[metric].lr == pytest.approx(full[metric].lr, rel=1e-9, abs=1e-9)
    full_builds = reference_history.learned_build_noise(qemu_class.pk, "spawn", qemu_class.clock)
    kept_builds = drift_pools.learned_build_noise(qemu_class.pk, "spawn", qemu_class.clock)
    for metric in full_builds:
        assert kept_builds[metric].sd == pytest.approx(full_builds[metric].sd, rel=1e-9, abs=1e-12)
        assert kept_builds[metric].builds == full_builds[metric].builds


def test_between_build_noise_from_summaries_equals_the_full_history(
    alice: Any, qemu_class: Any, tmp_path: Path
) -> None:
    branch_of_builds(alice, qemu_class, tmp_path, n=16, boots=2)
    full = reference_history.learned_build_noise(qemu_class.pk, "spawn", qemu_class.clock)
    kept = drift_pools.learned_build_noise(qemu_class.pk, "spawn", qemu_class.clock)
    assert full and set(kept) == set(full)
    for metric, estimate in full.items():
        assert estimate.sd > 0
        assert kept[metric].sd == pytest.approx(estimate.sd, rel=1e-9)
        assert kept[metric].dof == pytest.approx(estimate.dof, rel=1e-9)
        assert kept[metric].p_value == pytest.approx(estimate.p_value, rel=1e-6, abs=1e-12)


def test_the_noise_report_from_summaries_equals_the_full_history(
    alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    branch_of_builds(alice, qemu_class, tmp_path, n=12, boots=3)
    report = {m["metric"]: m for m in alice_api.get("/noise?machine_class=qemu-x86_64").json()["metrics"]}
    jobs = Job.objects.filter(status=Job.Status.DONE, machine_class=qemu_class, clock=qemu_class.clock)
    for metric, runs in analysis.history_runs(jobs).items():
        model = variance_components(runs)
        assert report[metric]["between_boot_sd"] == pytest.approx(model.between_sd, rel=1e-9, abs=1e-15)
        assert report[metric]["within_boot_sd"] == pytest.approx(model.within_sd, rel=1e-9, abs=1e-15)
        assert report[metric]["kernels"] == len(runs)


def _one_more_boot(job: Job, value: float) -> Job:
    """A finished job of the same kernel and commit as `job`, with one boot."""
    new = Job.objects.create(
        build=job.build,
        branch_commit=job.branch_commit,
        benchmark=job.benchmark,
        grid=job.grid,
        params=job.params,
        machine_class=job.machine_class,
        clock=job.clock,
        status=Job.Status.DONE,
        seq=job.seq + 1000,
    )
    record = BootRecord.objects.create(job=new, attempt=1, boot=0)
    Sample.objects.bulk_create([Sample(boot_record=record, metric=WANDERS, iteration=i, value=value) for i in range(3)])
    return new


def _queries_to_store_one_job(alice: Any, qemu_class: Any, tmp_path: Path, commits: int) -> tuple[int, list[str]]:
    _, measured = branch_with_series(alice, qemu_class, tmp_path, f"b{commits}", commits, walk=0.0)
    summaries.summarise(Job.objects.all())
    job = _one_more_boot(Job.objects.get(branch_commit=measured[-1]), 1000.0)
    with CaptureQueriesContext(connection) as ctx:
        summaries.job_stored(job.pk)
    return len(ctx.captured_queries), [q["sql"] for q in ctx.captured_queries]


def test_storing_a_job_summarises_only_its_kernel_and_commit(alice: Any, qemu_class: Any, tmp_path: Path) -> None:
    small, _ = _queries_to_store_one_job(alice, qemu_class, tmp_path, 20)
    large, sql = _queries_to_store_one_job(alice, qemu_class, tmp_path, 200)
    # The same work whatever the history's length ...
    assert small == large
    # ... and samples are read twice: the kernel's run and the commit's point.
    reads = [q for q in sql if "core_sample" in q and q.lstrip().upper().startswith("SELECT")]
    assert len(reads) == 2


def test_a_stored_job_updates_its_commit_and_kernel_summaries(alice: Any, qemu_class: Any, tmp_path: Path) -> None:
    _, measured = branch_with_series(alice, qemu_class, tmp_path, "one", 3, walk=0.0)
    summaries.summarise(Job.objects.all())
    row = CommitSummary.objects.get(commit=measured[-1], metric=WANDERS)
    assert row.boots == 1
    job = _one_more_boot(Job.objects.get(branch_commit=measured[-1]), 5000.0)
    summaries.job_stored(job.pk)
    row.refresh_from_db()
    assert row.boots == 2 and row.mean_lin > 2000
    run = RunSummary.objects.get(sha=job.build.sha, metric=WANDERS)
    assert run.boots == 2 and run.ssb_lin > 0


def test_the_series_of_one_metric_comes_in_a_window_and_pages(
    alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    branch, _measured = branch_with_series(alice, qemu_class, tmp_path, "paged", 30, walk=0.0)
    url = f"/branches/{branch.pk}/series?machine_class=qemu-x86_64&benchmark=spawn&metric={WANDERS}"
    got = alice_api.get(url + "&since=5&until=20&limit=10").json()
    assert [p["position"] for p in got["points"]] == list(range(11, 21))
    assert got["next_until"] == 10
    older = alice_api.get(url + f"&since=5&until={got['next_until']}&limit=10").json()
    assert [p["position"] for p in older["points"]] == list(range(5, 11))
    assert older["next_until"] is None
    raw_url = f"/branches/{branch.pk}/series?machine_class=qemu-x86_64&benchmark=spawn"
    raw = alice_api.get(raw_url + "&since=5&until=20&limit=10").json()
    # The raw form pages the same way, over the same commits.
    assert [c["position"] for c in raw["commits"]] == list(range(11, 21)) and raw["next_until"] == 10
    # The level is the commit's summary the change-point search uses (one boot: its boot_mean).
    boots = raw["metrics"][WANDERS][0]
    assert got["points"][0]["value"] == pytest.approx(float(np.exp(boot_mean(np.log(np.array(boots[0]))))))
    assert got["log_scale"] is True and got["points"][0]["boots"] == 1
    assert alice_api.get(url + "&limit=0").status_code == 400


def test_every_boots_samples_come_a_bounded_page_at_a_time(
    alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The raw form reads samples, so it never reads a whole branch: 20 commits
    unless asked, at most 100, older ones by next_until."""
    branch, measured = branch_with_series(alice, qemu_class, tmp_path, "raw", 30, walk=0.0)
    positions = sorted(c.position for c in measured)
    url = f"/branches/{branch.pk}/series?machine_class=qemu-x86_64&benchmark=spawn"
    newest = alice_api.get(url).json()
    assert [c["position"] for c in newest["commits"]] == positions[10:]
    assert newest["next_until"] == positions[10] - 1 and all(len(v) == 20 for v in newest["metrics"].values())
    rest = alice_api.get(url + f"&until={newest['next_until']}").json()
    assert [c["position"] for c in rest["commits"]] == positions[:10] and rest["next_until"] is None
    too_many = alice_api.get(url + "&limit=101")
    assert too_many.status_code == 400
    assert "1 to 100 commits" in too_many.json()["detail"] and "metric=NAME" in too_many.json()["detail"]
    # However few commits, no more samples than the bound: fewer commits a page then.
    per_commit = sum(CommitSummary.objects.filter(commit=measured[-1]).values_list("samples", flat=True))
    monkeypatch.setattr(history_api, "RAW_MAX_SAMPLES", 3 * per_commit)
    few = alice_api.get(url).json()
    assert [c["position"] for c in few["commits"]] == positions[-3:] and few["next_until"] == positions[-3] - 1
    assert sum(len(b) for v in few["metrics"].values() for boots in v for b in boots) == 3 * per_commit
    monkeypatch.setattr(history_api, "RAW_MAX_SAMPLES", 1)
    assert [c["position"] for c in alice_api.get(url).json()["commits"]] == positions[-1:]


def test_rebuild_history_recomputes_every_summary(alice: Any, qemu_class: Any, tmp_path: Path) -> None:
    branch, _ = branch_with_series(alice, qemu_class, tmp_path, "rebuilt", 40, walk=0.0, step_at=20, step=10.0)
    branches.analyse_series(branch, qemu_class.pk, "spawn", qemu_class.clock)
    before = (
        {(r.commit_id, r.metric): (r.boots, r.mean_log) for r in CommitSummary.objects.all()},
        {(r.metric,): (r.drift_n, r.build_lin) for r in SeriesState.objects.all()},
    )
    CommitSummary.objects.update(mean_log=0.0)
    RunSummary.objects.all().delete()
    call_command("rebuild_history", stdout=io.StringIO())
    after = (
        {(r.commit_id, r.metric): (r.boots, r.mean_log) for r in CommitSummary.objects.all()},
        {(r.metric,): (r.drift_n, r.build_lin) for r in SeriesState.objects.all()},
    )
    assert after == before
    assert RunSummary.objects.count() == 40 * 2


def test_the_noise_model_from_pools_and_outlier_candidates_equals_the_one_from_every_run() -> None:
    rng = np.random.default_rng(4)
    runs = [[list(100 + rng.normal(0, 1, 5) + rng.normal(0, 3)) for _ in range(k)] for k in [3] * 30 + [5] * 10]
    # A broken run: boots far apart.
    runs.append([list(100 + rng.normal(0, 1, 5) + shift) for shift in (0, 60, -60)])
    stats = [s for r in runs if (s := run_stats(r)) is not None]
    full = components_from_runs(stats)
    assert full.dropped_runs == 1
    pools: dict[int, RunPool] = {}
    for s in stats:
        pools[s.boots] = pools.get(s.boots, RunPool()) + RunPool.of(s)
    total = sum(pools.values(), RunPool())
    floors = {k: outlier_floor(total, k) for k in pools}
    candidates = [s for s in stats if (f := floors[s.boots]) is not None and s.ssb_log >= f]
    assert len(candidates) < len(stats) / 4
    kept = components_from_pool(total, candidates)
    assert kept.dropped_runs == 1 and kept.runs == full.runs
    assert kept.between_sd == pytest.approx(full.between_sd, rel=1e-9)
    assert kept.within_sd == pytest.approx(full.within_sd, rel=1e-9)
    assert (kept.between_dof, kept.within_dof, kept.log_scale) == (full.between_dof, full.within_dof, full.log_scale)


def test_runs_reduced_together_equal_runs_reduced_one_by_one() -> None:
    rng = np.random.default_rng(5)
    x = 100 + rng.normal(0, 1, (20, 3, 7))
    x[3, 1, 2] = 160.0  # an iteration the winsorizing clips
    x[4] = 5.0  # identical boots: exactly no spread
    x[5, 0, 0] = -1.0  # not positive: no log scale
    batch, lin, lg = run_stats_batch(x)
    for i, got in enumerate(batch):
        one = run_stats(x[i].tolist())
        assert one is not None
        for name in ("boots", "iterations", "positive", "dfw_log", "dfw_lin"):
            assert getattr(got, name) == getattr(one, name)
        for name in ("ssb_log", "ssw_log", "ssb_lin", "ssw_lin"):
            assert getattr(got, name) == pytest.approx(getattr(one, name), rel=1e-12, abs=1e-15, nan_ok=True)
    assert batch[4].ssb_lin == 0.0 and batch[4].ssw_lin == 0.0
    assert np.isnan(lg[5, 0]) and np.isfinite(lg[5, 1]) and np.isfinite(lin[5, 0])


def test_the_pools_stay_the_sum_of_the_kernels_runs(alice: Any, qemu_class: Any, tmp_path: Path) -> None:
    _, measured = branch_with_series(alice, qemu_class, tmp_path, "pooled", 6, walk=0.0)
    summaries.summarise(Job.objects.all())
    # A kernel measured again: its old run leaves its pool (of 1 boot) and the new one joins that of 2.
    summaries.job_stored(_one_more_boot(Job.objects.get(branch_commit=measured[-1]), 1000.0).pk)

    def pools() -> dict[tuple[str, int], tuple[int, float]]:
        return {(p.metric, p.boots): (p.runs, p.ssw_log) for p in NoisePool.objects.all()}

    kept = pools()
    assert kept[(WANDERS, 2)][0] == 1 and kept[(WANDERS, 1)][0] == 5
    call_command("rebuild_history", stdout=io.StringIO())
    rebuilt = pools()
    assert set(rebuilt) == set(kept)
    for key, (runs, ssw) in rebuilt.items():
        assert kept[key][0] == runs and kept[key][1] == pytest.approx(ssw, rel=1e-9, abs=1e-12)


def test_drift_sums_of_many_metrics_at_once_equal_them_one_by_one() -> None:
    rng = np.random.default_rng(6)
    groups = [
        [np.cumsum(rng.normal(0, w, n)) + rng.normal(0, 1, n) for n in sizes]
        for w, sizes in [(0.1, (40, 300)), (0.0, (25,)), (0.3, (3,)), (0.05, (120, 60, 200))]
    ]
    together = sh.drift_stats_many(groups)
    assert together == [sh.drift_stats(g) for g in groups]
    assert together[2] == sh.DriftStats.empty() and together[0].used == 2


def test_a_kept_detector_is_continued_unless_the_learned_drift_moves_its_threshold() -> None:
    from kperf.core.tracking import change_points

    rng = np.random.default_rng(7)
    values = list(rng.normal(0, 1, 200))
    ids = list(range(200))
    first, fed, replayed = change_points._detector(b"", ids[:-1], values[:-1], True, 1.0e-3)
    assert replayed and fed == ids[:-1]
    stored = sh.detector_to_bytes(first, fed, True)
    # The drift learned again after one more commit, a hair apart: one step, no replay.
    _, fed, replayed = change_points._detector(stored, ids, values, True, 1.001e-3)
    assert not replayed and fed == ids
    # A drift that moves the threshold (and window) by more than the tolerance: a replay.
    _, _, replayed = change_points._detector(stored, ids, values, True, 1.0e-2)
    assert replayed


def test_build_sums_of_arrays_equal_them_from_each_build() -> None:
    rng = np.random.default_rng(8)
    n = 60
    boots = rng.integers(0, 4, n)  # 0: the commit measured nothing of the metric
    means = np.where(boots > 0, rng.normal(5, 1, n), np.nan)
    ss = np.where(boots > 0, rng.uniform(0, 2, n), np.nan)
    bounds = summaries.segment_bounds(list(range(n)), {0, 17, 18, 40})
    assert bounds == [(0, 17), (17, 18), (18, 40), (40, 60)]
    groups = [[sh.BuildStat(int(boots[i]), means[i], ss[i]) for i in range(a, b) if boots[i] > 0] for a, b in bounds]
    got, want = sh.build_sums_of_arrays(boots, means, ss, bounds), sh.build_sums(groups)
    assert got.builds == want.builds and got.groups == want.groups == 3
    assert got.as_list() == pytest.approx(want.as_list(), rel=1e-12)


def _pools_from_rows(mclass: Any) -> dict[tuple[str, str], tuple[sh.DriftStats, list[float], list[float], int, int]]:
    """Every branch's SeriesState rows added up afresh: what the pools must hold."""
    out: dict[tuple[str, str], tuple[sh.DriftStats, list[float], list[float], int, int]] = {}
    for s in SeriesState.objects.filter(machine_class=mclass).order_by("branch_id"):
        drift = sh.DriftStats(tuple(s.drift_ssq), tuple(s.drift_logf), s.drift_n, s.drift_used)
        log_ = sh.BuildSums.from_list(s.build_log) if s.build_log else sh.BuildSums()
        lin = sh.BuildSums.from_list(s.build_lin) if s.build_lin else sh.BuildSums()
        if (s.benchmark, s.metric) in out:
            d, a, b, states, nonpositive = out[(s.benchmark, s.metric)]
            drift, log_, lin = d + drift, sh.BuildSums.from_list(a) + log_, sh.BuildSums.from_list(b) + lin
        else:
            states, nonpositive = 0, 0
        out[(s.benchmark, s.metric)] = (
            drift,
            log_.as_list(),
            lin.as_list(),
            states + 1,
            nonpositive + (not s.positive),
        )
    return out


def _assert_pools_hold_the_rows(mclass: Any) -> None:
    want = _pools_from_rows(mclass)
    pools = {(p.benchmark, p.metric): p for p in SeriesPool.objects.filter(machine_class=mclass)}
    assert set(pools) == set(want)
    for key, (drift, log_, lin, states, nonpositive) in want.items():
        p = pools[key]
        assert (p.states, p.nonpositive, p.drift_n, p.drift_used) == (states, nonpositive, drift.n, drift.used)
        assert p.drift_ssq == pytest.approx(list(drift.ssq), rel=1e-9, abs=1e-12)
        assert p.drift_logf == pytest.approx(list(drift.logf), rel=1e-9, abs=1e-12)
        assert p.build_log == pytest.approx(log_, rel=1e-9, abs=1e-12)
        assert p.build_lin == pytest.approx(lin, rel=1e-9, abs=1e-12)


def test_the_series_pools_stay_the_sum_of_the_branches_rows(alice: Any, qemu_class: Any, tmp_path: Path) -> None:
    wandering, _ = branch_with_series(alice, qemu_class, tmp_path, "wandering", 60, walk=0.1)
    stepping, _ = branch_with_series(alice, qemu_class, tmp_path, "stepping", 50, walk=0.0, step_at=25, step=8.0)
    clock = qemu_class.clock
    summaries.summarise(Job.objects.all())
    drift_pools.ensure_class_states(qemu_class.pk, clock)
    assert SeriesState.objects.count() == 4
    _assert_pools_hold_the_rows(qemu_class)
    # The analysis finds the step and cuts the series there: the branch's rows
    # are replaced (as many as before, other sums), and the pools move with them.
    before = SeriesState.objects.get(branch=stepping, metric=STEADY).drift_used
    branches.analyse_series(stepping, qemu_class.pk, "spawn", clock)
    assert SeriesState.objects.get(branch=stepping, metric=STEADY).drift_used != before
    _assert_pools_hold_the_rows(qemu_class)
    # A branch's rows replaced by fewer: the metric it no longer has leaves its pool.
    kept = {m: s for (_, m), s in drift_pools.class_sums(qemu_class.pk, clock, exclude_branch=stepping.pk).items()}
    with transaction.atomic():
        drift_pools.store_branch_sums(
            wandering.pk,
            qemu_class.pk,
            "spawn",
            clock,
            {WANDERS: summaries.BranchSums(kept[WANDERS].drift, sh.BuildSums(), sh.BuildSums(), True)},
            60,
        )
    assert not SeriesState.objects.filter(branch=wandering, metric=STEADY).exists()
    _assert_pools_hold_the_rows(qemu_class)
    # Rows that leave another way (a branch deleted): the next read adds the pools up again.
    stepping.delete()
    left = drift_pools.class_sums(qemu_class.pk, clock)
    _assert_pools_hold_the_rows(qemu_class)
    assert set(left) == {("spawn", WANDERS)} and left[("spawn", WANDERS)].drift == kept[WANDERS].drift


def test_a_read_catches_up_only_what_arrived_since_the_last(
    alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    """Jobs stored without the results hook and a branch never analysed are
    caught up by the next read, through what was noted, not a scan of the jobs."""
    branch, measured = branch_with_series(alice, qemu_class, tmp_path, "unhooked", 12, walk=0.0)
    assert not SeriesState.objects.exists() and not Job.objects.filter(summarised=True).exists()
    assert alice_api.get("/noise?machine_class=qemu-x86_64").status_code == 200
    # Every finished job is flagged, the branch's series has its state, the note is gone.
    assert not Job.objects.filter(status=Job.Status.DONE, summarised=False).exists()
    assert set(SeriesState.objects.values_list("branch_id", flat=True)) == {branch.pk}
    assert not SeriesCatchUp.objects.exists()
    # A boot of another kind (a calibration's) is flagged but pooled nowhere.
    runs = RunSummary.objects.count()
    calibration = _one_more_boot(Job.objects.get(branch_commit=measured[0]), 9000.0)
    Job.objects.filter(pk=calibration.pk).update(
        branch_commit=None, pinned_runner=Runner.register("calibrated", qemu_class)[0]
    )
    assert summaries.summarise(Job.objects.filter(machine_class=qemu_class)) == 0
    calibration.refresh_from_db()
    assert calibration.summarised and RunSummary.objects.count() == runs
    # What the catch-up reads is served by the partial index of unsummarised jobs.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = Job.objects.filter(
            machine_class=qemu_class, clock=qemu_class.clock, status=Job.Status.DONE, summarised=False
        ).explain()
    assert "job_unsummarised" in plan, plan


def test_the_branch_page_shows_the_newest_commits_and_offers_the_rest(
    alice: Any, qemu_class: Any, tmp_path: Path
) -> None:
    branch, measured = branch_with_series(alice, qemu_class, tmp_path, "long", 60, walk=0.0)
    browser = Client()
    browser.force_login(alice)
    newest = sorted(c.position for c in measured)[::-1]

    def rows(query: str = "") -> list[int]:
        page = browser.get(f"/branches/{branch.pk}{query}").content.decode()
        return [int(p) for p in re.findall(r'<tr>\n<td class="num">(\d+)</td>', page)]

    assert rows() == newest[:50]
    page = browser.get(f"/branches/{branch.pk}").content.decode()
    assert "The newest 50 of 60 commits" in page and "?commits=60" in page
    assert rows("?commits=60") == newest
    # Nonsense asks for the default, never an error.
    assert rows("?commits=lots") == newest[:50]


def test_a_class_that_measures_another_kind_of_kernel_starts_its_history_anew(
    alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    """add_runner --profile: the pools, runs, points and series states of the old kernels go."""
    branch_with_series(alice, qemu_class, tmp_path, "tiny-kernels", 8, walk=0.0)
    assert alice_api.get("/noise?machine_class=qemu-x86_64").json()["metrics"]
    assert NoisePool.objects.filter(machine_class=qemu_class).exists()
    assert SeriesState.objects.filter(machine_class=qemu_class).exists()
    call_command(
        "add_runner", "mm-1", "--machine-class", qemu_class.name, "--arch", "x86_64", "--profile", "mm",
        stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    for model in (NoisePool, RunSummary, CommitSummary, SeriesState, SeriesPool):
        assert not model.objects.filter(machine_class=qemu_class).exists(), model
    # The next read flags the old jobs again and pools none of them: they are tiny kernels.
    assert alice_api.get("/noise?machine_class=qemu-x86_64").json()["metrics"] == []
    assert not Job.objects.filter(machine_class=qemu_class, status=Job.Status.DONE, summarised=False).exists()
    assert not RunSummary.objects.filter(machine_class=qemu_class).exists()
