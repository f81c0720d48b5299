"""The web pages in a real browser: Debian's Chromium, driven by Playwright,
against a live kperf server (pytest-django's `live_server`, a real HTTP
server on the test database): the pages of kperf.core.web.pages.

The tests assert what a user sees: text, the state of form fields, where the
browser ends up, and what is highlighted. The data behind the pages is made
through the same code paths the service uses (the form, the runner protocol,
the analysis, branch tracking); only the kernels are stand-ins.

One Chromium runs for the whole module; every test gets a fresh browser
context (no cookies), so each one logs in through the form as a user does.
Chromium comes from Debian (`apt-get install chromium`, which `.ci/run`
does), not from Playwright's own download; KPERF_CHROMIUM names another
binary. Without it the tests fail: they are never skipped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import expect

from kperf.core.lifecycle import owners
from kperf.core.models import ChangePoint, Job, Submission, TrackedBranch
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION
from kperf.core.tracking import branches

from tests.browser_fixtures import Chromium, log_in, pages_settled_before_the_flush  # noqa: F401  (fixtures; the last is autouse)
from tests.conftest import Api
from tests.finding_fixtures import REGRESSED
from tests.lab_fixtures import results_body, submission_ready_for_testing
from tests.tracking_fixtures import commit_n, finish_builds, run_jobs, track

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The background of `.verdict-regression` in base.html (#fdd), as the browser computes it.
REGRESSION_RED = "rgb(255, 221, 221)"


def test_log_in_submit_a_branch_and_log_out(
    chromium: Chromium, live_server: Any, alice: Any, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    page = chromium.new_page(live_server.url)

    # A wrong password keeps the user on the login form, with the reason.
    page.goto("/submissions/new")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/submissions/new$"))
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".errorlist")).to_contain_text("correct username and password")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/submissions/new$"))
    expect(page.get_by_role("link", name="Submit a branch")).to_have_count(0)

    log_in(page)
    expect(page.get_by_text("Nothing submitted yet.")).to_be_visible()

    # A tree URL that would make git run a program: the error sits on the
    # field (shown above it and tied to it for assistive technology), what
    # the user typed is kept, and nothing is created.
    page.get_by_role("link", name="Submit a branch").first.click()
    expect(page).to_have_url(re.compile(r"/submissions/new$"))
    expect(page.get_by_role("heading", name="Submit a branch")).to_be_visible()
    tree = page.get_by_label("Tree URL")
    tree.fill("ext::sh -c id")
    page.get_by_label("Branch (head)").fill("feature")
    page.get_by_label("Base").fill("master")
    expect(page.get_by_role("checkbox", name="spawn")).to_be_checked()
    expect(page.get_by_role("checkbox", name="x86_64")).to_be_checked()
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#id_tree_error")).to_contain_text("<transport>::")
    tree = page.get_by_label("Tree URL")
    expect(tree).to_have_attribute("aria-invalid", "true")
    expect(tree).to_have_accessible_description(re.compile(r"<transport>::.*use an https://"))
    expect(tree).to_have_value("ext::sh -c id")
    expect(page.get_by_label("Branch (head)")).not_to_have_attribute("aria-invalid", "true")
    expect(page).to_have_url(re.compile(r"/submissions/new$"))
    page.get_by_role("link", name="kperf", exact=True).click()
    expect(page.get_by_text("Nothing submitted yet.")).to_be_visible()

    # A good submission lands on its own page, queued, with the grid and profile chosen in the form.
    page.get_by_role("link", name="Submit a branch").first.click()
    page.get_by_label("Tree URL").fill(str(small_tree))
    page.get_by_label("Branch (head)").fill("feature")
    page.get_by_label("Base").fill("master")
    quick, cross_cpu = (page.get_by_role("checkbox", name=g, exact=True) for g in ("quick", "cross-cpu"))
    profile = page.get_by_label("Configuration profile")
    expect(quick).to_be_checked()
    expect(profile).to_have_value("")
    expect(profile).to_have_accessible_description(re.compile(r"tiny \(fast\), mm .* each machine class's own"))
    quick.uncheck()
    cross_cpu.check()
    profile.select_option("mm")
    page.get_by_role("button", name="Submit").click()
    expect(page).to_have_url(re.compile(r"/submissions/\d+$"))
    sub_id = page.url.rsplit("/", 1)[1]
    expect(page.get_by_role("heading", level=1)).to_have_text(f"#{sub_id}: feature vs master")
    expect(page.locator("#status")).to_have_text("queued")
    expect(page.get_by_text(str(small_tree), exact=True)).to_be_visible()
    expect(page.get_by_text("Fetching the tree and resolving refs…")).to_be_visible()
    expect(page.locator("#profile")).to_have_text("the mm configuration profile")
    assert Submission.objects.get(pk=int(sub_id)).grids == ["cross-cpu"]

    # ... and is listed on the front page.
    page.get_by_role("link", name="kperf", exact=True).click()
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=sub_id, exact=True))
    expect(row).to_contain_text("feature")
    expect(row).to_contain_text("queued")
    expect(row).to_contain_text("alice")

    # Logging out ends the session: the pages send the user to the login form again.
    page.get_by_role("button", name="log out").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/$"))
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    page.goto(f"/submissions/{sub_id}")
    expect(page).to_have_url(re.compile(rf"/accounts/login/\?next=/submissions/{sub_id}$"))


def test_a_finished_submission_shows_its_verdicts(
    chromium: Chromium,
    live_server: Any,
    alice: Any,
    qemu_class: Any,
    runner_api: tuple[Any, Api],
    tmp_path: Path,
) -> None:
    page = chromium.new_page(live_server.url)
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    _, runner = runner_api
    while (job := runner.post("/runner/claim").json()["job"]) is not None:
        value = 1000.0 if Job.objects.get(pk=job["id"]).side == "base" else 500.0
        resp = runner.post(f"/runner/jobs/{job['id']}/results", results_body(job, value))
        assert resp.status_code == 200, resp.content
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)

    log_in(page)
    page.get_by_role("link", name=str(sub.pk), exact=True).click()
    expect(page).to_have_url(re.compile(rf"/submissions/{sub.pk}$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(f"#{sub.pk}: feature vs master")
    expect(page.locator("#status")).to_have_text("done")
    expect(page.get_by_text("base boots 4 of 4")).to_be_visible()
    # A finished submission stops reloading itself.
    expect(page.locator('meta[http-equiv="refresh"]')).to_have_count(0)

    # The verdict table: every metric of spawn halved, so every row is a
    # regression, highlighted.
    expect(page.get_by_role("heading", name="spawn on qemu-x86_64")).to_be_visible()
    rows = page.locator("table.comparison tr[data-metric]")
    expect(rows.first).to_be_visible()
    assert rows.count() >= 2
    first = rows.filter(has=page.get_by_role("cell", name="spawn-vmas-0", exact=True))
    expect(first).to_have_count(1)
    expect(first.locator("td.verdict")).to_have_text("regression")
    expect(first).to_have_css("background-color", REGRESSION_RED)
    expect(first.get_by_role("cell", name=re.compile(r"^-(49|50)\.\d\d%$"))).to_have_count(1)
    for i in range(rows.count()):
        expect(rows.nth(i).locator("td.verdict")).to_have_text("regression")
        expect(rows.nth(i)).to_have_css("background-color", REGRESSION_RED)

    # The mmtests-style summary, open for copying into a cover letter.
    summary = page.locator("details", has=page.get_by_text("mmtests-style summary"))
    expect(summary).to_have_attribute("open", "")
    table = summary.locator("pre.table")
    expect(table).to_be_visible()
    # mmtests' layout: throughput as a harmonic mean, the change marked as significant.
    expect(table).to_contain_text(re.compile(r"Hmean\s+spawn-vmas-0\s.*\*\s*-(49|50)\.\d\d%\*"))
    # The samples stay folded until asked for.
    samples = page.locator("details", has=page.get_by_text("Samples per boot"))
    expect(samples.locator("pre").first).to_be_hidden()
    samples.get_by_text("Samples per boot").click()
    expect(samples.locator("pre").first).to_be_visible()
    expect(samples.locator("pre").first).to_contain_text("base:")

    # A job's console log opens as plain text.
    page.get_by_role("link", name="console").first.click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/console$"))
    expect(page.locator("body")).to_contain_text("KPERF-DONE")


def test_the_tracked_branch_pages_show_a_change_point(
    chromium: Chromium,
    live_server: Any,
    alice_api: Api,
    runner_api: tuple[Any, Api],
    small_tree: Path,
    qemu_class: Any,
    settings_dirs: Any,
    tmp_path: Path,
) -> None:
    page = chromium.new_page(live_server.url)
    _, runner = runner_api
    rng = np.random.default_rng(11)
    branch = TrackedBranch.objects.get(pk=track(alice_api, small_tree, boots=2, max_commits=50)["id"])
    branches.poll_branch(branch.pk)
    commit_n(small_tree, 11)
    branches.poll_branch(branch.pk)
    levels = {c.sha: 1000.0 for c in branch.commits.all()}
    finish_builds(branch, tmp_path)
    run_jobs(runner, levels, rng)
    after = commit_n(small_tree, 8)
    branches.poll_branch(branch.pk)
    levels.update({sha: 900.0 for sha in after})
    finish_builds(branch, tmp_path)
    run_jobs(runner, levels, rng)
    # Where exactly the change lands is test_tracking's business; here the
    # pages must show what kperf found: a regression after the step.
    found_at = {cp.commit.sha[:12] for cp in ChangePoint.objects.filter(branch=branch).select_related("commit")}
    assert found_at, "the set-up made no change point"
    assert found_at <= {sha[:12] for sha in after}, found_at

    log_in(page)
    page.get_by_role("link", name="Tracked branches").click()
    expect(page).to_have_url(re.compile(r"/branches/$"))
    expect(page.get_by_role("heading", name="Tracked branches")).to_be_visible()
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=str(branch.pk), exact=True))
    expect(row).to_contain_text("master")
    expect(row).to_contain_text(str(small_tree))
    expect(row).to_contain_text("spawn (quick)")
    expect(row).to_contain_text("polling")
    expect(row).to_contain_text(after[-1][:12])

    row.get_by_role("link", name=str(branch.pk), exact=True).click()
    expect(page).to_have_url(re.compile(rf"/branches/{branch.pk}$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("master")
    expect(page.get_by_text("Polling; head")).to_be_visible()

    change_points = page.locator("h2:text-is('Change points') + table")
    expect(change_points).not_to_contain_text("No change points")
    for culprit in sorted(found_at):
        shown = change_points.get_by_role("row").filter(has_text=culprit)
        expect(shown.first).to_be_visible()
        for i in range(shown.count()):
            cp_row = shown.nth(i)
            expect(cp_row.get_by_role("cell").first).to_have_text(re.compile(r"^spawn-"))
            expect(cp_row.get_by_role("cell", name=re.compile(r"^-\d+\.\d\d% regression$"))).to_have_count(1)
            expect(cp_row).to_have_css("background-color", REGRESSION_RED)
        # ... and the commit itself, measured, in the list of commits.
        measured = page.locator("h2:text-is('Commits') + table").get_by_role("row").filter(has_text=culprit)
        expect(measured).to_contain_text("2 / 2")
        expect(measured).to_contain_text("done")


def test_the_finding_is_on_the_first_screen_above_the_folded_rerun_notes(
    chromium: Chromium,
    live_server: Any,
    alice: Any,
    finished: Submission,
) -> None:
    page = chromium.new_page(live_server.url)
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page)
    page.goto(f"/submissions/{finished.pk}")
    flagged = page.locator(f'#finding [data-flagged-metric="{REGRESSED}"]')
    expect(flagged).to_be_visible()
    expect(flagged).to_contain_text(re.compile(r"regression spawn-vmas-1600 .*-49\.\d\d% \[-\d", re.S))
    expect(page.locator("#finding .not-flagged")).to_contain_text(
        re.compile(r"pagealloc on qemu-x86_64: \d{3} no-change")
    )
    # On the first screen, and above the notes on added boots, which stay folded until asked for.
    box, notes = flagged.bounding_box(), page.locator("details.reruns").bounding_box()
    assert box is not None and notes is not None
    assert box["y"] + box["height"] <= 800 and box["y"] < notes["y"], (box, notes)
    expect(page.locator("p.rerun").first).to_be_hidden()
