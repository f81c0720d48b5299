"""The between-build component, learned from tracked branches under the instruction clock, in a
submission's comparisons (kperf.core.submissions.analysis, kperf.core.submissions.priors).

Under the instruction clock the boots of one build agree exactly; builds of
code that runs the same paths still differ a little (layout). Comparisons
learn that spread from history (KPERF_LEARNED_BUILD_NOISE), so a difference
of that size is not called a regression even when the boots agree exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kperf.conf import ConfigError, env_build_noise_records
from kperf.core.models import (
    Clock,
    MetricComparison,
    Submission,
)
from kperf.stats.builds import build_noise_from_record, measured_build_prior
from kperf_testing import reference_history

from tests.conftest import Api
from tests.lab_fixtures import finish_all, results_body, submission_ready_for_testing
from tests.noise_fixtures import BUILD_SD, METRICS, branch_of_builds

pytestmark = pytest.mark.django_db


def compared(sub: Submission) -> dict[str, MetricComparison]:
    return {m.metric: m for m in MetricComparison.objects.filter(comparison__submission=sub)}


def finish(sub: Submission, api: Api, head_value: float) -> dict[str, MetricComparison]:
    finish_all(sub, api, lambda job, side: results_body(job, 1000.0 if side == "base" else head_value))
    return compared(sub)


def test_the_between_build_spread_is_learned_from_a_branch_and_reported(
    alice: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    assert qemu_class.clock == Clock.INSTRUCTIONS
    branch_of_builds(alice, qemu_class, tmp_path)
    learned = reference_history.learned_build_noise(qemu_class.pk, "spawn", Clock.INSTRUCTIONS)
    for metric in METRICS:
        estimate = learned[metric]
        assert estimate.builds == 16 and estimate.boot_sd == 0.0
        assert 0.5 * BUILD_SD < estimate.sd < 2.0 * BUILD_SD, estimate
        assert estimate.prior() is not None
    # Nothing is learned for the wall clock from instruction-clock history.
    assert reference_history.learned_build_noise(qemu_class.pk, "spawn", Clock.WALL) == {}
    report = alice_api.get("/noise?machine_class=qemu-x86_64&boots=4&iterations=3").json()
    rows = {r["metric"]: r for r in report["metrics"]}
    assert report["clock"] == "instructions"
    for metric in METRICS:
        assert 0.5 * BUILD_SD < rows[metric]["between_build_sd"] < 2.0 * BUILD_SD
        assert rows[metric]["between_build_builds"] == 16
        assert rows[metric]["between_boot_sd"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("learned", [True, False])
def test_a_difference_the_size_of_build_noise_is_a_regression_only_without_the_component(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, settings: Any, learned: bool
) -> None:
    """Boots that agree exactly, heads 0.2% below base: without the learned
    component that deterministic difference is a regression beyond a 0.1%
    threshold; with it, 0.2% is what two builds of the same code differ by."""
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    sub.min_effect_pct = 0.1
    sub.save(update_fields=["min_effect_pct"])
    settings.KPERF_LEARNED_BUILD_NOISE = learned
    branch_of_builds(alice, qemu_class, tmp_path)
    got = finish(sub, api, head_value=998.0)
    for metric in METRICS:
        m = got[metric]
        assert m.min_effect_pct == 0.1 and m.change_pct == pytest.approx(-0.2, abs=0.01)
        if learned:
            assert m.verdict != MetricComparison.Verdict.REGRESSION, (metric, m.verdict, m.note)
            assert m.ci_high_pct is not None
            assert m.ci_low_pct is not None and m.ci_low_pct < -0.2 < m.ci_high_pct
        else:
            assert m.verdict == MetricComparison.Verdict.REGRESSION, (metric, m.note)
    method = got[METRICS[0]].comparison.method
    assert ("between-build noise learned for 2 of 2 metrics" in method) == learned


def test_without_history_the_interval_of_two_exact_builds_holds_the_benchs_build_part(
    alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path, alice_api: Api
) -> None:
    """No tracked branch on this class: every boot of both sides gives the same
    number, yet the interval is not a point, because another build of either
    side could differ by what the perturbed-build bench measured."""
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)

    def phased(job: dict[str, Any], side: str) -> dict[str, Any]:
        body = results_body(job)
        # Each boot at its seeded phase, as the runner reports it; the phase moved nothing here.
        body["boots"][0]["environment"] |= {"phase_seed": 1000 + job["id"], "phase_span_us": 1000000}
        return body

    boots = finish_all(sub, api, phased)
    got = compared(sub)
    for metric in METRICS:
        m = got[metric]
        assert m.change_pct == pytest.approx(0.0, abs=1e-9)
        assert m.ci_low_pct is not None and m.ci_high_pct is not None
        assert m.ci_low_pct < 0.0 < m.ci_high_pct, (metric, m.ci_low_pct, m.ci_high_pct)
        assert m.ci_high_pct - m.ci_low_pct > 0.005
        # Not "significant": exact boots of one build say nothing of another build.
        assert m.verdict == MetricComparison.Verdict.NO_CHANGE, (metric, m.verdict, m.note)
        assert "significant" not in (m.note or "")
    method = got[METRICS[0]].comparison.method
    assert "between-build noise for 2 of 2 metrics from the perturbed-build bench" in method
    assert f"boots each at a seeded phase ({boots} of {boots})" in method
    page = alice_api.get(f"/submissions/{sub.pk}").json()
    assert "perturbed-build bench" in page["comparisons"][0]["method"]


def lab_record(tmp: Path, between_build_pct: float) -> Path:
    """A bench/build_noise.py --json record as a lab's own run writes it (spawn only)."""
    rows = [{"metric": m, "between_build_pct": between_build_pct, "boot_sd_pct": 0.0} for m in METRICS]
    record = {
        "header": "Measured 2026-11-30 on a lab box (x86_64, 8 cores), instruction clock, quick grids",
        "results": {"spawn": {"metrics": rows, "ways": {}, "power": {}, "kernels": 11}},
    }
    path = tmp / "lab-build-noise.json"
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("for_class", ["qemu-x86_64", "*", "qemu-arm64"])
def test_a_labs_own_perturbed_build_record_is_the_build_part_without_history(
    alice: Any,
    qemu_class: Any,
    runner_api: Any,
    tmp_path: Path,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    for_class: str,
) -> None:
    """KPERF_BUILD_NOISE_RECORDS: a lab whose builds spread by 0.2% (its own
    bench run) does not call a 0.3% difference between exact boots a
    regression; the project's figure for spawn (0.003%) would. A record for
    another machine class changes nothing here."""
    path = lab_record(tmp_path, 0.2)
    monkeypatch.setenv("KPERF_BUILD_NOISE_RECORDS", str(path) if for_class == "*" else f"{for_class}={path}")
    settings.KPERF_BUILD_NOISE_RECORDS = env_build_noise_records("KPERF_BUILD_NOISE_RECORDS")
    _, api = runner_api
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    sub.min_effect_pct = 0.1
    sub.save(update_fields=["min_effect_pct"])
    got = finish(sub, api, head_value=997.0)
    used = for_class != "qemu-arm64"
    method = got[METRICS[0]].comparison.method
    assert ("perturbed-build record lab-build-noise.json, 2026-11-30" in method) == used, method
    assert ("from the perturbed-build bench (bench/build_noise.py" in method) == (not used), method
    for metric in METRICS:
        m = got[metric]
        assert m.change_pct == pytest.approx(-0.3, abs=0.01)
        if used:
            assert m.verdict != MetricComparison.Verdict.REGRESSION, (metric, m.note)
            assert m.ci_low_pct is not None and m.ci_high_pct is not None and m.ci_low_pct < -0.3 < m.ci_high_pct
        else:
            assert m.verdict == MetricComparison.Verdict.REGRESSION, (metric, m.note)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{missing}", "KPERF_BUILD_NOISE_RECORDS: cannot read"),
        ("{notjson}", "is not JSON"),
        ("{noresults}", "not a bench/build_noise.py --json record"),
        ("{nokernels}", "needs 'kernels'"),
        ("qemu-x86_64=", "is not a path or machine-class=path"),
        ("{phases}", "a record of settle phases"),
    ],
)
def test_a_bad_build_noise_record_setting_says_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    (tmp_path / "notjson.json").write_text("results: spawn")
    (tmp_path / "noresults.json").write_text(json.dumps({"header": "x"}))
    broken = json.loads(lab_record(tmp_path, 0.1).read_text())
    del broken["results"]["spawn"]["kernels"]
    (tmp_path / "nokernels.json").write_text(json.dumps(broken))
    (tmp_path / "phases.json").write_text(json.dumps({**broken, "kind": "phases"}))
    files = {k: str(tmp_path / f"{k}.json") for k in ("missing", "notjson", "noresults", "nokernels", "phases")}
    monkeypatch.setenv("KPERF_BUILD_NOISE_RECORDS", value.format(**files))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        env_build_noise_records("KPERF_BUILD_NOISE_RECORDS")


def test_the_projects_own_record_reads_as_its_built_in_figures() -> None:
    """The padding record the built-in figures come from gives the same parts through the setting."""
    path = Path(__file__).resolve().parents[4] / "bench" / "records" / "build_noise-padding-2026-11-28.json"
    record = build_noise_from_record(json.loads(path.read_text()), path.name)
    for bench in ("spawn", "aim9", "pft", "pagealloc"):
        assert record.priors[bench].sd == pytest.approx(measured_build_prior(bench).sd, rel=0.1, abs=1e-5)
        assert record.priors[bench].dof == 19.0
    assert record.source == "perturbed-build record build_noise-padding-2026-11-28.json, 2026-11-28"
