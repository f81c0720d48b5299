"""Each machine shape's own boot spread (kperf.core.submissions.shape_spread, issue 41).

The phase bench measured the boot spread of one shape (the quick grid, one
vCPU, no NUMA nodes); elsewhere an interval was Welch's on two boots a side.
Here the lab measures each shape from its submissions' seeded base boots,
stores it, and uses it from then on; until then the page and the mail say the
interval is from the boots alone. `kperf compare` always adds the
between-build part, so one build a side with exact boots is not a point.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kperf.cli.main import main as kperf_main
from kperf.core.mail import alerts
from kperf.core.models import (
    Comparison,
    Job,
    KernelBuild,
    MachineClass,
    MetricComparison,
    ShapeBootSpread,
    Submission,
    SubmissionBuild,
    Tree,
)
from kperf.core.submissions import analysis
from kperf.core.submissions.pipeline import schedule_jobs
from kperf.stats import build_spread, jsonio

from tests.conftest import Api
from tests.lab_fixtures import finish_all, results_body, submission_page

METRICS = ("spawn-vmas-0", "spawn-vmas-1000")
# How far a base boot of the first submission sits from its kernel's level, either way, by the
# phase it drew: the spread the lab must measure (a relative sd of about 0.44% over six boots).
PHASE = 0.004


@pytest.fixture(autouse=True)
def two_boots_a_side(settings: Any) -> None:
    """The instruction clock's first look as a lab has it (two boots a side) and extra base boots on."""
    settings.KPERF_INSTRUCTION_CLOCK_BOOTS = 2
    settings.KPERF_SHAPE_SPREAD_BOOTS = 4


@pytest.fixture
def two_vcpus(qemu_class: MachineClass, monkeypatch: pytest.MonkeyPatch) -> MachineClass:
    """A shape the phase bench never measured: two vCPUs on `tiny`. The project's between-build
    parts for other shapes with several vCPUs (kperf.stats.build_spread, which such a shape would
    borrow) are left out: what these tests measure is the lab's own boot spread."""
    monkeypatch.setattr(build_spread, "_project_table", lambda: {})
    qemu_class.vcpus = 2
    qemu_class.save(update_fields=["vcpus"])
    return qemu_class


def _build(tree: Tree, sha: str, tmp: Path) -> KernelBuild:
    kernel = tmp / f"bzImage-{sha[:6]}"
    kernel.write_bytes(b"not really a kernel " + sha.encode())
    artifact = {"path": str(kernel), "sha256": hashlib.sha256(kernel.read_bytes()).hexdigest(), "size": 20}
    return KernelBuild.objects.create(
        tree=tree, sha=sha, arch="x86_64", config_digest="d" * 64, status=KernelBuild.Status.DONE,
        artifacts={"kernel": artifact},
    )  # fmt: skip


def submission(owner: Any, tmp: Path, base_sha: str, head_sha: str, min_effect_pct: float = 0.01) -> Submission:
    """A spawn submission (quick grid) of two kernels of these shas, built, its jobs queued."""
    tmp.mkdir(parents=True, exist_ok=True)
    tree = Tree.objects.create(url=str(tmp / f"tree-{base_sha[:4]}"))
    sub = Submission.objects.create(
        owner=owner, tree=tree, head_ref="feature", base_ref="master", head_sha=head_sha, base_sha=base_sha,
        benchmarks=["spawn"], grids=["quick"], arches=["x86_64"], status=Submission.Status.TESTING,
        min_effect_pct=min_effect_pct,
    )  # fmt: skip
    links = [
        SubmissionBuild.objects.create(submission=sub, build=_build(tree, sha, tmp), side=side)
        for side, sha in (("base", base_sha), ("head", head_sha))
    ]
    schedule_jobs(sub, links)
    return sub


def seeded(job: dict[str, Any], value: float, phased: bool = True) -> dict[str, Any]:
    """A runner's report of one boot at `value`, at a seeded phase (phase_span_us) unless not `phased`."""
    body = results_body(job, value)
    for sample in body["boots"][0]["samples"]:
        sample["value"] = value
    if phased:
        body["boots"][0]["environment"]["phase_span_us"] = 2000
    return body


def spread_boots(sub: Submission, api: Api, phased: bool = True) -> None:
    """Finish `sub`: base boots at 1000 +- PHASE by the phase each drew, head boots at 1000."""
    signs = itertools.cycle((1.0, -1.0))
    finish_all(
        sub,
        api,
        lambda job, side: seeded(job, 1000.0 * (1 + PHASE * next(signs)) if side == "base" else 1000.0, phased),
    )


def exact_boots(sub: Submission, api: Api, head: float = 995.0, phased: bool = True) -> None:
    """Finish `sub` with boots that agree exactly within each side: base 1000, head `head`."""
    finish_all(sub, api, lambda job, side: seeded(job, 1000.0 if side == "base" else head, phased))


def rows(sub: Submission) -> dict[str, MetricComparison]:
    return {m.metric: m for m in MetricComparison.objects.filter(comparison__submission=sub)}


def base_boots(sub: Submission) -> int:
    return Job.objects.filter(submission=sub, side="base").count()


@pytest.mark.django_db
@pytest.mark.parametrize("phased", [True, False])
def test_the_first_submission_of_a_shape_measures_its_spread_from_its_seeded_base_boots(
    alice: Any, two_vcpus: MachineClass, runner_api: Any, tmp_path: Path, phased: bool
) -> None:
    """Two boots a side, and four extra base boots for a shape nobody measured; the six base boots'
    spread is stored for the shape (profile, vCPUs, NUMA nodes, grid) when they were each at a
    seeded phase, and not from boots without phases. The next submission of the shape gets no
    extra boots once it is measured."""
    _, api = runner_api
    first = submission(alice, tmp_path / "one", "a" * 40, "b" * 40)
    assert base_boots(first) == 6 and Job.objects.filter(submission=first, side="head").count() == 2
    spread_boots(first, api, phased)
    stored = {s.metric: s for s in ShapeBootSpread.objects.all()}
    if not phased:
        assert stored == {}
        assert base_boots(submission(alice, tmp_path / "two", "c" * 40, "d" * 40)) == 6
        return
    assert set(stored) == set(METRICS)
    for s in stored.values():
        assert (s.machine_class_id, s.clock, s.profile, s.vcpus, s.numa_nodes, s.benchmark, s.grid) == (
            two_vcpus.pk, "instructions", "tiny", 2, 0, "spawn", "quick",
        )  # fmt: skip
        assert (s.boots, s.kernels, s.dof) == (6, 1, 5.0)
        # Three boots at +0.4% and three at -0.4%: an sd of 0.4% x sqrt(6/5).
        assert s.sd == pytest.approx(PHASE * (6 / 5) ** 0.5, rel=0.01)
        assert sorted(s.jobs) == sorted(Job.objects.filter(submission=first, side="base").values_list("id", flat=True))
    assert base_boots(submission(alice, tmp_path / "two", "c" * 40, "d" * 40)) == 2


@pytest.mark.django_db
@pytest.mark.parametrize("shape", ["measured", "other vCPUs"])
def test_the_analysis_uses_the_stored_spread_for_its_shape_only(
    alice: Any, two_vcpus: MachineClass, runner_api: Any, tmp_path: Path, shape: str, settings: Any
) -> None:
    """After the first submission measured the two-vCPU shape at 0.44%, a second one whose boots
    agree exactly within each side, heads 0.5% below, is within what two boots a side can draw
    there: no regression, and an interval around -0.5%. On four vCPUs, which nobody measured,
    the same boots are a regression and the interval is from the boots alone.

    The noise learned from the class's history comes first where there is enough of it
    (test_learned_noise.py); it is off here, so that what is seen is the shape's spread alone."""
    settings.KPERF_LEARNED_NOISE = False
    _, api = runner_api
    spread_boots(submission(alice, tmp_path / "one", "a" * 40, "b" * 40), api)
    if shape == "other vCPUs":
        two_vcpus.vcpus = 4
        two_vcpus.save(update_fields=["vcpus"])
    second = submission(alice, tmp_path / "two", "c" * 40, "d" * 40)
    exact_boots(second, api)
    got = rows(second)
    method = Comparison.objects.get(submission=second).method
    for metric in METRICS:
        m = got[metric]
        assert m.change_pct == pytest.approx(-0.5, abs=0.01)
        assert m.ci_low_pct is not None and m.ci_high_pct is not None
        if shape == "measured":
            assert m.verdict != MetricComparison.Verdict.REGRESSION, (m.notes, method)
            assert m.ci_low_pct < -0.5 < m.ci_high_pct and m.ci_high_pct - m.ci_low_pct > 0.5
        else:
            assert m.verdict == MetricComparison.Verdict.REGRESSION, (m.notes, method)
    if shape == "measured":
        assert "boot noise for 2 of 2 metrics from the lab's boot spread for this shape (6 seeded base boots" in method
        assert "boots alone" not in method
    else:
        assert "boot noise for" not in method
        assert "interval from boots alone for 2 of 2 metrics" in method


@pytest.mark.django_db
def test_a_shape_whose_boots_repeat_is_measured_and_its_intervals_are_not_from_boots_alone(
    alice: Any, two_vcpus: MachineClass, runner_api: Any, tmp_path: Path, settings: Any
) -> None:
    """Six base boots that repeat to the digit measure the shape at 0: no prior (a prior of 0 adds
    nothing), but the interval no longer rests on boots that might have agreed by chance."""
    settings.KPERF_LEARNED_NOISE = False
    _, api = runner_api
    exact_boots(submission(alice, tmp_path / "one", "a" * 40, "b" * 40), api, head=1000.0)
    assert {(s.sd, s.dof) for s in ShapeBootSpread.objects.all()} == {(0.0, 5.0)}
    second = submission(alice, tmp_path / "two", "c" * 40, "d" * 40)
    exact_boots(second, api, head=1000.0)
    comp = Comparison.objects.get(submission=second)
    assert comp.boots_alone == 0 and "boots alone" not in comp.method and "boot noise for" not in comp.method


@pytest.mark.django_db
def test_a_comparison_does_not_take_its_own_base_boots_as_its_prior(
    alice: Any, two_vcpus: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    """The shape's spread rests on the first submission's base boots; analysed again, that
    submission's intervals are still from its boots alone, not from a prior made of its own data."""
    _, api = runner_api
    first = submission(alice, tmp_path / "one", "a" * 40, "b" * 40)
    spread_boots(first, api)
    assert ShapeBootSpread.objects.count() == 2
    Submission.objects.filter(pk=first.pk).update(status=Submission.Status.ANALYSING)
    analysis.analyse_submission(first.pk)
    method = Comparison.objects.get(submission=first).method
    assert "boot noise for" not in method and "interval from boots alone for 2 of 2 metrics" in method


@pytest.mark.django_db
@pytest.mark.parametrize("vcpus", [0, 2])
def test_the_page_and_the_mail_say_when_an_interval_is_from_boots_alone(
    alice: Any, qemu_class: MachineClass, runner_api: Any, tmp_path: Path, vcpus: int
) -> None:
    """On two vCPUs, before the lab measured the shape, the page and the mail say the intervals are
    from the boots alone; on the shape the phase bench measured (one vCPU, the quick grid, `tiny`)
    neither does."""
    qemu_class.vcpus = vcpus
    qemu_class.save(update_fields=["vcpus"])
    _, api = runner_api
    sub = submission(alice, tmp_path / "one", "a" * 40, "b" * 40, min_effect_pct=1.0)
    exact_boots(sub, api, head=1000.0)
    comp = Comparison.objects.get(submission=sub)
    page = submission_page(alice, Submission.objects.get(pk=sub.pk))
    _, mail = alerts.submission_mail(Submission.objects.get(pk=sub.pk))
    if vcpus == 2:
        assert comp.boots_alone == 2
        assert "interval from boots alone for 2 of 2 metrics (no boot spread measured yet" in page
        assert "Interval from boots alone for spawn on qemu-x86_64, 2 metrics" in " ".join(mail.split())
    else:
        assert comp.boots_alone == 0
        assert "boots alone" not in page and "boots alone" not in mail.lower()


def one_build_a_side(**top: Any) -> dict[str, Any]:
    """One build a side, two boots each, every boot exact: head 0.1% below base."""
    base, head = [[1000.0] * 3] * 2, [[999.0] * 3] * 2
    metric = {"higher_is_better": True, "base": base, "head": head}
    return {"clock": "instructions", **top, "metrics": {"spawn-vmas-0": metric}}


def test_kperf_compare_gives_one_build_a_side_an_interval_that_is_not_a_point() -> None:
    """With exact boots the interval was [-0.10%, -0.10%]: the between-build part is always added,
    the benchmark's where one is named (spawn's is its floor, pagealloc's too), and the metric says
    its interval is from the boots alone unless the shape is one the phase bench measured."""
    _, results, out = jsonio.run_compare(one_build_a_side(), "spawn")
    r = out["metrics"]["spawn-vmas-0"]
    assert r["change_pct"] == pytest.approx(-0.1, abs=1e-9)
    assert r["ci_low_pct"] < -0.1 - 0.01 and r["ci_high_pct"] > -0.1 + 0.01, r
    assert r["build_noise"]["sd"] == pytest.approx(0.0001)
    assert any("interval from boots alone" in n for n in r["notes"])
    # Named by the file's shape instead: aim9's part is larger, and the shape is the bench's.
    shape = {"benchmark": "aim9", "arch": "x86_64", "profile": "tiny", "vcpus": 1, "grid": "quick"}
    _, _, aim9 = jsonio.run_compare(one_build_a_side(shape=shape))
    r9 = aim9["metrics"]["spawn-vmas-0"]
    assert r9["build_noise"]["sd"] == pytest.approx(0.00061)
    assert r9["ci_high_pct"] - r9["ci_low_pct"] > r["ci_high_pct"] - r["ci_low_pct"]
    assert not any("boots alone" in n for n in r9["notes"])
    with pytest.raises(jsonio.FormatError, match=r"shape\.vcpus must be a whole number"):
        jsonio.run_compare(one_build_a_side(shape={"vcpus": "two"}))
    assert results["spawn-vmas-0"].ci_low_pct != results["spawn-vmas-0"].ci_high_pct


def test_the_kperf_compare_command_takes_the_benchmark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "samples.json"
    doc.write_text(json.dumps(one_build_a_side()))
    assert kperf_main(["compare", str(doc), "--json", "--benchmark", "aim9"]) == 0
    r = json.loads(capsys.readouterr().out)["metrics"]["spawn-vmas-0"]
    assert r["build_noise"]["sd"] == pytest.approx(0.00061) and r["ci_low_pct"] < r["ci_high_pct"]


@pytest.mark.django_db
def test_compare_kernels_uses_the_stored_spread_and_the_between_build_part(
    alice: Any, two_vcpus: MachineClass, runner_api: Any, tmp_path: Path, settings: Any
) -> None:
    """Two stored kernels whose boots agree exactly: before the shape is measured their interval
    holds the between-build part only and says it is from the boots alone; after, the shape's
    spread widens it past the 0.5% between them."""
    _, api = runner_api
    settings.KPERF_SHAPE_SPREAD_BOOTS = 0
    # Boots without phases: they are compared, and measure no shape.
    exact_boots(submission(alice, tmp_path / "two", "c" * 40, "d" * 40), api, phased=False)
    before = analysis.compare_kernels(two_vcpus.name, "spawn", "c" * 40, "d" * 40)
    m0 = {m["metric"]: m for m in before["metrics"]}["spawn-vmas-0"]
    assert m0["ci_low_pct"] is not None and m0["ci_high_pct"] is not None
    assert m0["ci_low_pct"] < m0["ci_high_pct"] < -0.3, m0
    assert "between-build noise from the perturbed-build bench" in before["method"]
    assert "interval from boots alone for 2 of 2 metrics" in before["method"]
    assert not ShapeBootSpread.objects.exists()
    settings.KPERF_SHAPE_SPREAD_BOOTS = 4
    spread_boots(submission(alice, tmp_path / "one", "a" * 40, "b" * 40), api)
    after = analysis.compare_kernels(two_vcpus.name, "spawn", "c" * 40, "d" * 40)
    m1 = {m["metric"]: m for m in after["metrics"]}["spawn-vmas-0"]
    assert m1["ci_low_pct"] is not None and m1["ci_high_pct"] is not None
    assert m1["ci_low_pct"] < -0.5 < m1["ci_high_pct"], m1
    assert "boot noise for 2 of 2 metrics from the lab's boot spread for this shape" in after["method"]
    assert "boots alone" not in after["method"]


def test_the_extra_base_boots_default_to_four() -> None:
    """The setting's default (the test run sets 0 for every other test: kperf_testing.plugin)."""
    env = {k: v for k, v in os.environ.items() if k != "KPERF_SHAPE_SPREAD_BOOTS"}
    env["DJANGO_SETTINGS_MODULE"] = "kperf.settings"
    code = "import django; django.setup(); from django.conf import settings; print(settings.KPERF_SHAPE_SPREAD_BOOTS)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "4"
    env["KPERF_SHAPE_SPREAD_BOOTS"] = "-1"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "KPERF_SHAPE_SPREAD_BOOTS" in bad.stderr


@pytest.mark.django_db
def test_the_admin_lists_each_shapes_spread(staff: Any, two_vcpus: MachineClass) -> None:
    ShapeBootSpread.objects.create(
        machine_class=two_vcpus, clock="instructions", profile="mm", vcpus=2, numa_nodes=0, benchmark="spawn",
        grid="full", metric="spawn-vmas-3200", sd=0.004, dof=5.0, boots=6, kernels=1, jobs=[1, 2],
    )  # fmt: skip
    staff.is_superuser = True
    staff.save()
    browser = Client()
    browser.force_login(staff)
    page = browser.get("/admin/core/shapebootspread/")
    assert page.status_code == 200 and "spawn-vmas-3200" in page.content.decode()
