"""The between-build part per metric on shapes with several vCPUs (kperf.stats.build_spread).

On two vCPUs a kernel whose page faults cost a little more leaves the page
allocator in another state when its module runs: the memcg fixture read the
order-2 and order-4 rows about 1% off the base's on two vCPUs and not on one
(docs/benchmarks.md, "The page allocator on one vCPU and on two"), and the
realistic tier flagged them as regressions and improvements. The project's
fault-path records measure that part per metric; a comparison on such a shape
takes it, one vCPU keeps the benchmark's one figure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kperf.core.models import Clock, MetricComparison
from kperf.stats import boot_spread, build_spread
from kperf.stats.abtest import NoisePrior
from kperf.stats.builds import MEASURED_BUILD_FLOOR
from kperf_testing.benches import BENCH_DIR, load_bench

from tests.lab_fixtures import finish_all, results_body, submission_ready_for_testing

RECORD = BENCH_DIR / "records" / "build_noise-fault-path-mm-2vcpus-2026-12-07.json"


def test_the_projects_table_is_what_the_records_give() -> None:
    """service/kperf/stats/build_spread.json is bench/boot_spread.py's output from bench/records."""
    assert load_bench("boot_spread").build_table_json() == build_spread.TABLE.read_text()


def test_a_metric_takes_the_largest_part_of_its_group_never_below_the_floor() -> None:
    assert build_spread.metric_group("alloc-odr2-16") == "alloc-odr2"
    assert build_spread.metric_group("spawn-vmas-0") == "spawn-vmas"
    assert build_spread.metric_group("faults/sec-threads-1") == "faults/sec-threads"
    # Padding moves by layout, in a spread: a metric's part is its group's largest sd.
    padded = BENCH_DIR / "records" / "build_noise-padded-seeded-mm-2vcpus-2026-12-07.json"
    record = json.loads(padded.read_text())
    for bench, result in record["results"].items():
        rows = {r["metric"]: r["between_build_pct"] / 100 for r in result["metrics"]}
        parts = build_spread.build_spread_of_record(record, padded.name)[bench]
        assert set(parts) == set(rows)
        for metric, prior in parts.items():
            group = [sd for m, sd in rows.items() if build_spread.metric_group(m) == build_spread.metric_group(metric)]
            assert prior.sd == pytest.approx(max(max(group), MEASURED_BUILD_FLOOR))
            assert prior.dof == result["kernels"] - 2
    # A change in timing moves the allocator in steps: the part is the group's largest departure.
    record = json.loads(RECORD.read_text())
    largest = {r["metric"]: r["largest_pct"] / 100 for r in record["results"]["pagealloc"]["metrics"]}
    sds = {r["metric"]: r["between_build_pct"] / 100 for r in record["results"]["pagealloc"]["metrics"]}
    parts = build_spread.build_spread_of_record(record, RECORD.name)["pagealloc"]
    for metric, prior in parts.items():
        group = [v for m, v in largest.items() if build_spread.metric_group(m) == build_spread.metric_group(metric)]
        assert prior.sd == pytest.approx(max(max(group), MEASURED_BUILD_FLOOR))
    assert parts["alloc-odr2-2"].sd > sds["alloc-odr2-2"] > 10 * MEASURED_BUILD_FLOOR


def test_the_memcg_fixtures_order_2_rows_are_within_the_part_the_timing_builds_give() -> None:
    """The realistic tier's memcg fixture moved the order-2 alloc rows by up to 0.95% on two vCPUs
    with the module alone (2026-12-07), 4.5 times the largest sd of the 24 timing builds: the part
    is a bound that keeps such a step inside a two-build interval (sqrt(2) parts, t of its dof)."""
    bench = load_bench("boot_spread")
    alloc2 = build_spread.table_of(bench._named(bench.BUILD_RECORDS))["x86_64/mm/2vcpus"]["pagealloc"]["alloc-odr2-1"]
    assert 2.0 * 2**0.5 * alloc2.sd > 0.95 / 100


def test_the_page_allocator_on_two_vcpus_takes_the_parts_of_its_module_run_alone() -> None:
    """Since the module runs alone (kmodload -s), the records of it beside the other CPU no longer
    describe what kperf measures: the shape's pagealloc parts come from the later records alone."""
    bench = load_bench("boot_spread")
    since = bench.MEASURED_SINCE[("x86_64/mm/2vcpus", "pagealloc")]
    names = bench.BUILD_RECORDS["x86_64/mm/2vcpus"]
    later = names[names.index(since) :]
    alone = build_spread.table_of(
        {"x86_64/mm/2vcpus": [(n, json.loads((BENCH_DIR / "records" / n).read_text())) for n in later]}
    )
    table = build_spread.table_of(bench._named(bench.BUILD_RECORDS))
    assert table["x86_64/mm/2vcpus"]["pagealloc"] == alone["x86_64/mm/2vcpus"]["pagealloc"]
    # Not by chance: the earlier records measured the page allocator too, wider on some metric.
    assert RECORD.name in names[: names.index(since)]
    before = build_spread.table_of(bench._named({"elsewhere": names[: names.index(since)]}))["elsewhere"]
    assert any(before["pagealloc"][m].sd > prior.sd for m, prior in alone["x86_64/mm/2vcpus"]["pagealloc"].items())


def test_a_record_that_does_not_name_its_perturbation_or_has_no_rows_is_refused() -> None:
    record = json.loads(RECORD.read_text())
    # Records from before 2026-12-07 say neither their perturbation nor their vCPUs.
    old = {k: v for k, v in record.items() if k not in ("perturb", "vcpus")}
    with pytest.raises(ValueError, match="names its perturbation"):
        build_spread.build_spread_of_record(old, "old.json")
    with pytest.raises(ValueError, match="names its perturbation"):
        build_spread.build_spread_of_record(dict(record, kind="phases"), "phases.json")
    no_rows = dict(record, results={"pagealloc": {"metrics": [{"metric": "m"}], "kernels": 9}})
    with pytest.raises(ValueError, match="without largest_pct"):
        build_spread.build_spread_of_record(no_rows, "rows.json")
    few = dict(record, results={"pagealloc": {"metrics": [], "kernels": 2}})
    with pytest.raises(ValueError, match="at least 2 builds"):
        build_spread.build_spread_of_record(few, "few.json")


def test_which_shapes_take_the_measured_parts() -> None:
    measured = build_spread.shape_build_priors("x86_64", "mm", 2, "pagealloc")
    assert measured and "alloc-odr2-2" in measured
    assert "on x86_64 `mm` with 2 vCPUs" in build_spread.source_for("x86_64", "mm", 2, "pagealloc")
    # One vCPU: nothing per metric, the benchmark's one figure applies (kperf.stats.builds).
    assert build_spread.shape_build_priors("x86_64", "mm", 1, "pagealloc") == {}
    assert build_spread.shape_build_priors("x86_64", "mm", 0, "pagealloc") == {}
    assert build_spread.source_for("x86_64", "mm", 1, "pagealloc") == ""
    # Several vCPUs on a shape not measured: the nearest measured one, and the method line says so.
    assert build_spread.shape_build_priors("arm64", "tiny", 4, "pagealloc") == measured
    assert "the nearest shape it measured" in build_spread.source_for("arm64", "tiny", 4, "pagealloc")
    # Padding moves spawn's fork on two vCPUs (0.23% between builds, where one vCPU's moved 0.003%).
    spawn = build_spread.shape_build_priors("x86_64", "mm", 2, "spawn")
    assert spawn["spawn-vmas-0"].sd > 0.001
    # A point of a grid the records did not boot takes its group's part; a group not measured has none.
    full = build_spread.parts_for("x86_64", "mm", 2, "spawn", ["spawn-vmas-200", "spawn-vmas-0-anycpu"])
    assert full == {"spawn-vmas-200": spawn["spawn-vmas-0"]}
    # A benchmark no record measured has none.
    assert build_spread.shape_build_priors("x86_64", "mm", 2, "stream") == {}
    # The boots' own spread on that shape comes from the same record's seeded boots.
    assert boot_spread.measured_shape("x86_64", "mm", "pagealloc", 2)
    assert not boot_spread.measured_shape("x86_64", "mm", "pagealloc", 4)


@pytest.mark.django_db
@pytest.mark.parametrize("vcpus", [2, 1])
def test_without_history_a_comparison_on_two_vcpus_takes_the_measured_part_per_metric(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, vcpus: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exact boots a side, heads 0.5% below base, at a 0.01% threshold, on a table where the bench
    saw spawn-vmas-0 move by 0.5% between builds on two vCPUs: on two vCPUs both of spawn's points
    (one group, `spawn-vmas`) are within what two builds differ by; on one vCPU the table says
    nothing and both are regressions, as before."""
    table = {"x86_64/tiny/2vcpus": {"spawn": {"spawn-vmas-0": NoisePrior(0.005, 7.0)}}}
    monkeypatch.setattr(build_spread, "_project_table", lambda: table)
    monkeypatch.setattr(boot_spread, "_project_table", lambda: {})
    assert qemu_class.clock == Clock.INSTRUCTIONS and qemu_class.arch == "x86_64"
    qemu_class.vcpus = vcpus
    qemu_class.save(update_fields=["vcpus"])
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    sub.min_effect_pct = 0.01
    sub.profile = "tiny"
    sub.save(update_fields=["min_effect_pct", "profile"])
    finish_all(sub, api, lambda job, side: results_body(job, 1000.0 if side == "base" else 995.0))
    got = {m.metric: m for m in MetricComparison.objects.filter(comparison__submission=sub)}
    fork0, fork1000 = got["spawn-vmas-0"], got["spawn-vmas-1000"]
    assert fork0.change_pct == pytest.approx(-0.5, abs=0.01)
    method = fork0.comparison.method
    if vcpus == 2:
        assert fork0.verdict != MetricComparison.Verdict.REGRESSION, (fork0.note, method)
        assert fork1000.verdict != MetricComparison.Verdict.REGRESSION, (fork1000.note, method)
        assert fork0.ci_low_pct is not None and fork0.ci_high_pct is not None
        assert fork0.ci_low_pct < -0.5 < fork0.ci_high_pct
        assert "perturbed-build bench on this shape" in method and "on x86_64 `tiny` with 2 vCPUs" in method, method
    else:
        assert fork0.verdict == MetricComparison.Verdict.REGRESSION, fork0.note
        assert fork1000.verdict == MetricComparison.Verdict.REGRESSION, fork1000.note
        assert "perturbed-build bench on this shape" not in method, method
