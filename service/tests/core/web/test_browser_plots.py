"""The pictures in a real browser: a finished submission's and a tracked
branch's plots drawn, with as many points as samples were stored
(kperf.core.web.plot_pages).

Same set-up as test_browser (Debian's Chromium through Playwright against
the live server, data made through the service's own code paths). Each
test saves screenshots of what it checked in test-artifacts/screenshots/
(KPERF_SCREENSHOTS names another directory) for a reader to look at.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from kperf.core.lifecycle import owners
from kperf.core.models import ChangePoint, Job, MetricComparison, Sample
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION

from tests.browser_fixtures import Chromium, log_in
from tests.browser_fixtures import pages_settled_before_the_flush as pages_settled_before_the_flush  # autouse
from tests.conftest import Api
from tests.lab_fixtures import results_body, submission_ready_for_testing
from tests.tracking_fixtures import land_a_step_in_a_gap

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(
    os.environ.get("KPERF_SCREENSHOTS", Path(__file__).resolve().parents[4] / "test-artifacts/screenshots")
)


@pytest.fixture
def shots() -> Iterator[Path]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    yield SCREENSHOTS


def drawn(page: Page, img: Locator) -> str:
    """Scroll a lazy image into view, wait until the browser has drawn it, and return its URL."""
    img.scroll_into_view_if_needed()
    page.wait_for_function("i => i.complete && i.naturalWidth > 0", arg=img.element_handle())
    src = img.get_attribute("src")
    assert src
    return src


def open_svg(page: Page, src: str, shot: Path) -> Locator:
    """Open a picture on its own, as the browser renders the SVG document; its points."""
    resp = page.goto(src)
    assert resp is not None and resp.ok and resp.headers["content-type"].startswith("image/svg+xml")
    points = page.locator("circle.pt")
    expect(points.first).to_be_visible()
    page.screenshot(path=str(shot))
    return points


def test_a_finished_submission_draws_its_plots(
    chromium: Chromium,
    live_server: Any,
    alice: Any,
    qemu_class: Any,
    runner_api: tuple[Any, Api],
    tmp_path: Path,
    shots: Path,
) -> None:
    page = chromium.new_page(live_server.url)
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    _, runner = runner_api
    while (job := runner.post("/runner/claim").json()["job"]) is not None:
        value = 1000.0 if Job.objects.get(pk=job["id"]).side == "base" else 500.0
        assert runner.post(f"/runner/jobs/{job['id']}/results", results_body(job, value)).status_code == 200
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)

    log_in(page)
    page.goto(f"/submissions/{sub.pk}")
    expect(page.locator("#status")).to_have_text("done")

    # The spawn sweep is drawn open, and so is the plot of every flagged
    # metric (here all of them: every one halved); nothing is left to fold.
    shape = page.get_by_role("img", name="spawn on qemu-x86_64", exact=False)
    expect(shape).to_have_count(1)
    shape_src = drawn(page, shape)
    per_metric = page.locator("div.plots-flagged figure.plot-metric img")
    metrics = sorted(MetricComparison.objects.filter(comparison__submission=sub).values_list("metric", flat=True))
    expect(per_metric).to_have_count(len(metrics))
    expect(per_metric.first).to_be_visible()
    expect(page.locator("details.plots-per-metric")).to_have_count(0)
    sources = [drawn(page, per_metric.nth(i)) for i in range(len(metrics))]
    per_metric.first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "submission-plots.png"), full_page=True)

    points = open_svg(page, shape_src, shots / "submission-spawn-shape.png")
    expect(points).to_have_count(Sample.objects.filter(boot_record__job__submission=sub).count())
    for name, src in zip(metrics, sources, strict=True):
        points = open_svg(page, src, shots / f"submission-{name}.png")
        stored = Sample.objects.filter(metric=name, boot_record__job__submission=sub)
        expect(points.and_(page.locator("[data-side=base]"))).to_have_count(
            stored.filter(boot_record__job__side="base").count()
        )
        expect(points.and_(page.locator("[data-side=head]"))).to_have_count(
            stored.filter(boot_record__job__side="head").count()
        )
        expect(page.locator("g.interval")).to_be_visible()
        expect(page.locator("text.verdict")).to_have_text("regression")


def test_a_tracked_branch_draws_its_series(
    chromium: Chromium,
    live_server: Any,
    alice_api: Api,
    runner_api: tuple[Any, Api],
    small_tree: Path,
    qemu_class: Any,
    settings_dirs: Any,
    tmp_path: Path,
    shots: Path,
) -> None:
    page = chromium.new_page(live_server.url)
    branch, landed, _ = land_a_step_in_a_gap(alice_api, runner_api[1], small_tree, tmp_path, bisect=True)
    culprit = landed[5]
    assert {cp.commit.sha for cp in ChangePoint.objects.filter(branch=branch)} == {culprit}

    log_in(page)
    page.goto(f"/branches/{branch.pk}")
    expect(page.get_by_role("heading", name="Series")).to_be_visible()
    figures = page.locator("figure.plot-series")
    metrics = set(
        Sample.objects.filter(boot_record__job__branch_commit__branch=branch).values_list("metric", flat=True)
    )
    expect(figures).to_have_count(len(metrics))
    sources = {
        figures.nth(i).get_attribute("data-metric"): drawn(page, figures.nth(i).locator("img"))
        for i in range(len(metrics))
    }
    page.locator("h2:text-is('Series')").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "branch-series.png"), full_page=True)

    for name, src in sorted(sources.items()):
        points = open_svg(page, src, shots / f"branch-{name}.png")
        stored = Sample.objects.filter(metric=name, boot_record__job__branch_commit__branch=branch)
        expect(points).to_have_count(stored.count())
        expect(page.locator("g.change-point[data-direction=regression]")).to_have_count(1)
        expect(page.locator(f"g.culprit[data-sha='{culprit}']")).to_be_visible()
        expect(page.get_by_text(f"culprit {culprit[:12]}")).to_be_visible()
        for sha in (landed[5], landed[6]):
            expect(page.locator(f"g.bisect-step[data-sha='{sha}']")).to_be_visible()


def test_the_plots_are_drawn_without_javascript(
    chromium: Chromium,
    live_server: Any,
    alice: Any,
    qemu_class: Any,
    runner_api: tuple[Any, Api],
    tmp_path: Path,
    shots: Path,
) -> None:
    chromium.new_page(live_server.url)  # fails the test, with what to install, without Chromium
    assert chromium.browser is not None
    context = chromium.browser.new_context(base_url=live_server.url, java_script_enabled=False)
    chromium.contexts.append(context)
    page = context.new_page()
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    _, runner = runner_api
    while (job := runner.post("/runner/claim").json()["job"]) is not None:
        assert runner.post(f"/runner/jobs/{job['id']}/results", results_body(job, 1000.0)).status_code == 200
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)

    log_in(page)
    page.goto(f"/submissions/{sub.pk}")
    page.locator("details.plots-per-metric summary").click()
    imgs = page.locator("div.plots img")
    expect(imgs).to_have_count(1 + MetricComparison.objects.filter(comparison__submission=sub).count())
    for i in range(imgs.count()):
        drawn(page, imgs.nth(i))
    page.screenshot(path=str(shots / "submission-plots-without-javascript.png"), full_page=True)
