"""The pictures as served: a finished submission's and a tracked branch's plots,
drawn from what the runners uploaded over the real protocol (kperf.core.web.plot_pages)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kperf.core.lifecycle import owners
from kperf.core.models import BranchCommit, ChangePoint, Job, MetricComparison, Sample, Submission
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION
from kperf.core.web import plot_data

from tests.conftest import Api
from tests.lab_fixtures import results_body, submission_ready_for_testing
from tests.tracking_fixtures import land_a_step_in_a_gap

pytestmark = pytest.mark.django_db

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def browser(alice: Any) -> Client:
    c = Client()
    assert c.login(username="alice", password="alice-password-1")
    return c


def finished_submission(alice: Any, qemu_class: Any, runner: Api, tmp_path: Path) -> Submission:
    """Spawn measured over the runner protocol, head at half the base's rate."""
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    while (job := runner.post("/runner/claim").json()["job"]) is not None:
        value = 1000.0 if Job.objects.get(pk=job["id"]).side == "base" else 500.0
        assert runner.post(f"/runner/jobs/{job['id']}/results", results_body(job, value)).status_code == 200
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE
    return sub


def image_urls(page: str, kind: str) -> list[str]:
    return [unescape(u) for u in re.findall(rf'<img loading="lazy"[^>]* src="([^"]*/plots/{kind}\.svg[^"]*)"', page)]


def svg(client: Client, url: str) -> ET.Element:
    resp = client.get(url)
    assert resp.status_code == 200, (url, resp.content[:300])
    assert resp["Content-Type"] == "image/svg+xml; charset=utf-8"
    assert "default-src 'none'" in resp["Content-Security-Policy"]
    return ET.fromstring(resp.content)


def pts(root: ET.Element, **attrs: str) -> list[ET.Element]:
    return [
        c
        for c in root.iter(f"{SVG}circle")
        if c.get("class") == "pt" and all(c.get(f"data-{k}") == v for k, v in attrs.items())
    ]


def test_a_finished_submission_has_a_plot_per_metric_with_every_sample(
    browser: Client, alice: Any, qemu_class: Any, runner_api: tuple[Any, Api], tmp_path: Path
) -> None:
    sub = finished_submission(alice, qemu_class, runner_api[1], tmp_path)
    page = browser.get(f"/submissions/{sub.pk}").content.decode()
    metrics = sorted(MetricComparison.objects.filter(comparison__submission=sub).values_list("metric", flat=True))
    urls = image_urls(page, "metric")
    assert len(urls) == len(metrics) >= 2
    for name, url in zip(metrics, urls, strict=True):
        root = svg(browser, url)
        assert root.get("data-metric") == name and root.get("data-verdict") == "regression"
        for side in ("base", "head"):
            stored = Sample.objects.filter(metric=name, boot_record__job__submission=sub, boot_record__job__side=side)
            assert len(pts(root, side=side)) == stored.count() > 0
        # Every boot of the quick grid, each with its three iterations.
        assert {p.get("data-boot") for p in pts(root, side="head")} == {"1", "2", "3", "4"}
        assert {p.get("data-iter") for p in pts(root, side="head")} == {"1", "2", "3"}
        assert [g for g in root.iter(f"{SVG}g") if g.get("class") == "interval"]


def test_the_spawn_sweep_is_one_picture_of_every_sample(
    browser: Client, alice: Any, qemu_class: Any, runner_api: tuple[Any, Api], tmp_path: Path
) -> None:
    sub = finished_submission(alice, qemu_class, runner_api[1], tmp_path)
    (url,) = image_urls(browser.get(f"/submissions/{sub.pk}").content.decode(), "shape")
    root = svg(browser, url)
    stored = Sample.objects.filter(boot_record__job__submission=sub, metric__startswith="spawn-vmas-")
    assert len(pts(root)) == stored.count() > 0
    assert {p.get("data-x") for p in pts(root)} == {"0", "1000"}
    assert {e.get("data-side") for e in root.iter(f"{SVG}polyline")} == {"base", "head"}
    # qemu-x86_64 measures with the instruction clock: a rate is per 10^9 guest instructions, not per second.
    assert "forks per 10^9 instr., higher is better" in ET.tostring(root, encoding="unicode")


def test_plots_are_for_the_owner_and_need_their_parameters(
    browser: Client,
    alice: Any,
    django_user_model: Any,
    qemu_class: Any,
    runner_api: tuple[Any, Api],
    tmp_path: Path,
) -> None:
    sub = finished_submission(alice, qemu_class, runner_api[1], tmp_path)
    clock = sub.comparisons.get().clock
    url = f"/submissions/{sub.pk}/plots/metric.svg?class=qemu-x86_64&benchmark=spawn&clock={clock}&metric=spawn-vmas-0"
    assert browser.get(url).status_code == 200
    assert Client().get(url).status_code == 302
    django_user_model.objects.create_user("bob", "bob@example.org", "bob-password-1")
    bob = Client()
    assert bob.login(username="bob", password="bob-password-1")
    assert bob.get(url).status_code == 404
    assert browser.get(url.replace("spawn-vmas-0", "no-such-metric")).status_code == 404
    assert browser.get(url.split("&metric=")[0]).status_code == 404
    shape = f"/submissions/{sub.pk}/plots/shape.svg?class=qemu-x86_64&benchmark=pft&clock={clock}"
    assert browser.get(shape).status_code == 404


def test_a_tracked_branch_plots_its_series_with_change_point_bisection_and_culprit(
    browser: Client,
    alice_api: Api,
    runner_api: tuple[Any, Api],
    small_tree: Path,
    qemu_class: Any,
    settings_dirs: Any,
    tmp_path: Path,
) -> None:
    branch, landed, _ = land_a_step_in_a_gap(alice_api, runner_api[1], small_tree, tmp_path, bisect=True)
    culprit = landed[5]
    assert {cp.commit.sha for cp in ChangePoint.objects.filter(branch=branch)} == {culprit}
    page = browser.get(f"/branches/{branch.pk}").content.decode()
    urls = image_urls(page, "series")
    metrics = sorted(
        set(Sample.objects.filter(boot_record__job__branch_commit__branch=branch).values_list("metric", flat=True))
    )
    assert len(urls) == len(metrics) >= 2
    measured = set(branch.commits.filter(status=BranchCommit.Status.DONE).values_list("sha", flat=True))
    for url in urls:
        root = svg(browser, url)
        name = root.get("data-metric")
        stored = Sample.objects.filter(metric=name, boot_record__job__branch_commit__branch=branch)
        assert len(pts(root)) == stored.count() > 0
        assert {p.get("data-sha") for p in pts(root)} == measured
        marks = {g.get("class"): g for g in root.iter(f"{SVG}g")}
        assert marks["culprit"].get("data-sha") == culprit
        assert marks["change-point"].get("data-direction") == "regression"
        steps = {g.get("data-sha") for g in root.iter(f"{SVG}g") if g.get("class") == "bisect-step"}
        # Commits kperf measured to narrow the range: the two left between landed[4] and landed[7].
        assert {landed[5], landed[6]} <= steps and steps.isdisjoint(landed[:5])


def test_bisection_steps_are_the_commits_added_behind_newer_ones(
    alice_api: Api, runner_api: tuple[Any, Api], small_tree: Path, qemu_class: Any, settings_dirs: Any, tmp_path: Path
) -> None:
    branch, _, _ = land_a_step_in_a_gap(alice_api, runner_api[1], small_tree, tmp_path, bisect=False)
    assert plot_data.bisection_steps(branch) == {}
