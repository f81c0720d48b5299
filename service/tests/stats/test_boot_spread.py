"""The boot noise measured at seeded phases where a lab has no history (kperf.stats.boot_spread).

On the `mm` profile the page allocator's `alloc-odr0-8` (one iteration a boot)
reads 414 or 421 cycles by the phase a boot draws, about half the boots each
(bench/records/build_noise-padded-seeded-mm-2026-11-30.json). Two boots a side
that agree within each side and differ between them looked exact, and 2 of 20
unrelated builds got a flag on it; with the spread the phase bench measured
for that metric they do not, and a real slowdown still does.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from kperf.conf import ConfigError, env_build_noise_records
from kperf.core.models import Clock, MetricComparison
from kperf.stats import boot_spread, build_spread
from kperf.stats.abtest import MetricInput, NoisePrior, Verdict, compare_metrics
from kperf.stats.builds import measured_build_prior
from kperf.stats.sequential import Plan, sequential_look
from kperf_testing.benches import BENCH_DIR, load_bench

from tests.lab_fixtures import finish_all, results_body, submission_ready_for_testing

MM_RECORD = BENCH_DIR / "records" / "build_noise-padded-seeded-mm-2026-11-30.json"


def test_the_projects_table_is_what_the_records_give() -> None:
    """service/kperf/stats/boot_spread.json is bench/boot_spread.py's output from bench/records."""
    assert load_bench("boot_spread").table_json() == boot_spread.TABLE.read_text()


def test_the_phase_spread_of_a_bimodal_metric_is_measured_and_exact_metrics_get_none() -> None:
    spread = boot_spread.project_spread("x86_64", "mm", "pagealloc")
    # 414 or 421 cycles: about 1% a boot on the log scale, from the base and 20 padded builds of 2 boots.
    assert 0.006 < spread["alloc-odr0-8"].sd < 0.012 and spread["alloc-odr0-8"].dof == 21
    runs = json.loads(MM_RECORD.read_text())["results"]["pagealloc"]["runs"]
    # Metrics whose boot summaries (the median of a boot's iterations) repeat in every kernel.
    exact = [m for m in runs["base"] if all(len({statistics.median(b) for b in runs[k][m]}) == 1 for k in runs)]
    assert exact and not set(exact) & set(spread)
    # What the bench has not measured gives nothing.
    assert boot_spread.project_spread("x86_64", "distro", "pagealloc") == {}
    assert boot_spread.project_spread("riscv64", "tiny", "spawn") == {}


def first_look(inputs: dict[str, MetricInput]) -> Verdict:
    look = sequential_look(inputs, 1, Plan(looks=(2, 4), alpha=0.05))
    return look.results["m"].verdict


@pytest.mark.parametrize("with_spread", [True, False])
def test_two_boots_a_side_that_drew_different_phases_are_not_a_change_with_the_measured_spread(
    with_spread: bool,
) -> None:
    prior = boot_spread.project_spread("x86_64", "mm", "pagealloc")["alloc-odr0-8"] if with_spread else None
    build = measured_build_prior("pagealloc")

    def inputs(base: float, head: float) -> dict[str, MetricInput]:
        # Cycles: lower is better. The service's default threshold for the page allocator.
        return {"m": MetricInput([[base], [base]], [[head], [head]], False, 0.5, noise=prior, build_noise=build)}

    unrelated = first_look(inputs(421.0, 414.0))
    if with_spread:
        assert unrelated != Verdict.IMPROVEMENT
        # Its interval holds 0: 421 and 414 are both what this kernel reads.
        [r] = compare_metrics(inputs(421.0, 414.0)).values()
        assert r.ci_low_pct is not None and r.ci_high_pct is not None and r.ci_low_pct < 0 < r.ci_high_pct
    else:
        assert unrelated == Verdict.IMPROVEMENT  # what the service called 2 of 20 unrelated builds
    # A slower allocator (5% more cycles in every boot) is a regression either way.
    assert compare_metrics(inputs(421.0, 442.0))["m"].verdict == Verdict.REGRESSION


def test_a_record_without_seeded_boots_or_runs_is_refused_with_what_is_wrong(tmp_path: Path) -> None:
    record = json.loads(MM_RECORD.read_text())
    assert set(boot_spread.spread_of_record(record, "mm.json")) == {"spawn", "aim9", "pft", "pagealloc"}
    unseeded = dict(record, header="Measured 2026-11-28 ..., 20 perturbed builds + base, 2 boot(s) each; builds")
    with pytest.raises(ValueError, match="seeded phase"):
        boot_spread.spread_of_record(unseeded, "old.json")
    with pytest.raises(ValueError, match="no 'results'"):
        boot_spread.spread_of_record([], "list.json")
    no_runs = dict(record, results={"spawn": {"metrics": []}})
    with pytest.raises(ValueError, match="no runs of at least two kernels of the base's code"):
        boot_spread.spread_of_record(no_runs, "summary.json")
    bad = dict(record, results={"spawn": {"runs": {"base": {"m": [["x"]]}, "perturb-01": {"m": [[1.0]]}}}})
    with pytest.raises(ValueError, match="not boots of numbers"):
        boot_spread.spread_of_record(bad, "bad.json")


@pytest.mark.django_db
@pytest.mark.parametrize("profile", ["tiny", "distro", "tiny on two vCPUs"])
def test_without_history_a_comparison_takes_the_boot_spread_the_bench_measured_for_its_profile(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exact boots a side, heads 0.5% below base, at a 0.01% threshold, on a table where the bench
    saw spawn-vmas-0's boots spread by 0.5% with the phase on x86_64 `tiny` and spawn-vmas-1000's
    not at all: the first is within what two boots a side can draw, the second a regression. The
    bench has not measured the `distro` profile nor two vCPUs: there both are regressions, as before."""
    table = {"x86_64/tiny": {"spawn": {"spawn-vmas-0": NoisePrior(0.005, 20.0)}}}
    monkeypatch.setattr(boot_spread, "_project_table", lambda: table)
    # The between-build parts measured on other shapes of several vCPUs (kperf.stats.build_spread),
    # which two vCPUs on `tiny` would borrow, are not what this test is about.
    monkeypatch.setattr(build_spread, "_project_table", lambda: {})
    assert qemu_class.clock == Clock.INSTRUCTIONS and qemu_class.arch == "x86_64"
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    if profile == "tiny on two vCPUs":
        # The bench booted one vCPU: a class of two measures something it has not.
        qemu_class.vcpus = 2
        qemu_class.save(update_fields=["vcpus"])
    sub.min_effect_pct = 0.01
    sub.profile = profile.split()[0]
    sub.save(update_fields=["min_effect_pct", "profile"])
    finish_all(sub, api, lambda job, side: results_body(job, 1000.0 if side == "base" else 995.0))
    got = {m.metric: m for m in MetricComparison.objects.filter(comparison__submission=sub)}
    fork0, fork1000 = got["spawn-vmas-0"], got["spawn-vmas-1000"]
    assert fork0.change_pct == pytest.approx(-0.5, abs=0.01)
    assert fork1000.verdict == MetricComparison.Verdict.REGRESSION, fork1000.note
    method = fork0.comparison.method
    if profile == "tiny":
        assert fork0.verdict != MetricComparison.Verdict.REGRESSION, (fork0.note, method)
        assert fork0.ci_low_pct is not None and fork0.ci_high_pct is not None
        assert fork0.ci_low_pct < -0.5 < fork0.ci_high_pct and fork0.ci_high_pct - fork0.ci_low_pct > 0.5
        assert (
            "boot noise for 1 of 2 metrics from the phase bench (bench/build_noise.py --seeded) on x86_64 `tiny`"
            in (method)
        )
    else:
        assert fork0.verdict == MetricComparison.Verdict.REGRESSION, fork0.note
        assert "boot noise for" not in method


def seeded_record(tmp: Path, profile: str = "tiny") -> Path:
    """A lab's own bench/build_noise.py --seeded --json record (spawn only): spawn-vmas-0's boots
    spread by 0.5% with the phase, spawn-vmas-1000's repeat."""
    kernels = ["base", *(f"perturb-{n:02d}" for n in range(1, 11))]
    runs = {
        k: {"spawn-vmas-0": [[1000.0 * (1 + s)] * 3 for s in (0.005, -0.005)], "spawn-vmas-1000": [[500.0] * 3] * 2}
        for k in kernels
    }
    rows = [{"metric": m, "between_build_pct": 0.0, "boot_sd_pct": 0.0} for m in ("spawn-vmas-0", "spawn-vmas-1000")]
    header = (
        f"Measured 2026-11-30 on a lab box (x86_64, 8 cores), x86_64 guest, the {profile} profile, instruction "
        "clock, quick grids, 10 perturbed builds + base, 2 boot(s) each, each boot at a seeded phase"
    )
    record = {"header": header, "kind": "builds", "results": {"spawn": {"metrics": rows, "runs": runs, "kernels": 11}}}
    path = tmp / f"lab-{profile}.json"
    path.write_text(json.dumps(record))
    return path


def test_a_labs_seeded_record_gives_its_boot_spread_for_its_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KPERF_BUILD_NOISE_RECORDS", f"{MM_RECORD},qemu-arm64={seeded_record(tmp_path)}")
    records = env_build_noise_records("KPERF_BUILD_NOISE_RECORDS")
    mm = records["*"]
    assert mm.profile == "mm" and 0.006 < mm.boot_spread["pagealloc"]["alloc-odr0-8"].sd < 0.012
    assert mm.priors["pagealloc"].sd >= 0.0001  # its between-build part, as before
    lab = records["qemu-arm64"]
    assert lab.profile == "tiny" and set(lab.boot_spread["spawn"]) == {"spawn-vmas-0"}
    # A seeded record that does not say its profile cannot be matched to a submission's.
    record = json.loads(seeded_record(tmp_path).read_text())
    record["header"] = record["header"].replace("the tiny profile, ", "")
    (tmp_path / "anon.json").write_text(json.dumps(record))
    monkeypatch.setenv("KPERF_BUILD_NOISE_RECORDS", str(tmp_path / "anon.json"))
    with pytest.raises(ConfigError, match="does not say which profile"):
        env_build_noise_records("KPERF_BUILD_NOISE_RECORDS")


@pytest.mark.django_db
@pytest.mark.parametrize("profile", ["tiny", "mm"])
def test_a_labs_seeded_record_comes_before_the_projects_table_for_the_profile_it_measured(
    alice: Any,
    qemu_class: Any,
    runner_api: Any,
    tmp_path: Path,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    profile: str,
) -> None:
    """The lab measured `tiny` on its class: a `tiny` comparison takes the lab's 0.5% for
    spawn-vmas-0 and a 0.5% difference between exact-looking sides is no regression; an `mm`
    comparison on the same class takes the project's table for x86_64 `mm` (0.03%), where it is."""
    monkeypatch.setenv("KPERF_BUILD_NOISE_RECORDS", f"qemu-x86_64={seeded_record(tmp_path)}")
    settings.KPERF_BUILD_NOISE_RECORDS = env_build_noise_records("KPERF_BUILD_NOISE_RECORDS")
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    sub.min_effect_pct = 0.01
    sub.profile = profile
    sub.save(update_fields=["min_effect_pct", "profile"])
    finish_all(sub, api, lambda job, side: results_body(job, 1000.0 if side == "base" else 995.0))
    got = {m.metric: m for m in MetricComparison.objects.filter(comparison__submission=sub)}
    method = got["spawn-vmas-0"].comparison.method
    if profile == "tiny":
        assert "boot noise for 1 of 2 metrics from the perturbed-build record lab-tiny.json, 2026-11-30" in method
        assert got["spawn-vmas-0"].verdict != MetricComparison.Verdict.REGRESSION, got["spawn-vmas-0"].note
    else:
        assert "boot noise for 2 of 2 metrics from the phase bench (bench/build_noise.py --seeded) on x86_64 `mm`" in (
            method
        )
        assert got["spawn-vmas-0"].verdict == MetricComparison.Verdict.REGRESSION, got["spawn-vmas-0"].note
    assert got["spawn-vmas-1000"].verdict == MetricComparison.Verdict.REGRESSION
