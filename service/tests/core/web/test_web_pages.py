"""The web pages: login, the submission form, the submission page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kperf.core.lifecycle import owners
from kperf.core.models import Job, Submission
from kperf.core.models.lab import unit_on
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION
from kperf.core.web.presenters import verdict_estimate

from tests.conftest import Api
from tests.lab_fixtures import results_body, submission_ready_for_testing

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(alice: Any) -> Client:
    c = Client()
    assert c.login(username="alice", password="alice-password-1")
    return c


def test_pages_need_a_login(db: Any) -> None:
    for path in ("/", "/submissions/new", "/submissions/1", "/builds/1/log", "/jobs/1/console"):
        resp = Client().get(path)
        assert resp.status_code == 302 and resp["Location"].startswith("/accounts/login/"), path


def form(tree: Path, **changes: Any) -> dict[str, Any]:
    """What the submission form posts for tree's feature branch against master."""
    fields = {
        "tree": str(tree),
        "branch": "feature",
        "base": "master",
        "benchmarks": ["spawn"],
        "grids": ["quick"],
        "arches": ["x86_64"],
    }
    return fields | changes


def test_the_form_creates_a_submission(browser: Client, small_tree: Path, qemu_class: Any) -> None:
    resp = browser.post("/submissions/new", form(small_tree, min_effect_pct="0.8"))
    sub = Submission.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/submissions/{sub.pk}"
    assert sub.min_effect_pct == 0.8
    page = browser.get(resp["Location"]).content.decode()
    assert "feature vs master" in page and "queued" in page


def test_the_form_asks_for_several_grids(browser: Client, small_tree: Path, qemu_class: Any) -> None:
    resp = browser.post("/submissions/new", form(small_tree, benchmarks=["pft"], grids=["quick", "scaling"]))
    sub = Submission.objects.get()
    assert resp.status_code == 302 and sub.grids == ["quick", "scaling"]
    # A grid none of the benchmarks has is shown beside the grids, and nothing is stored.
    resp = browser.post("/submissions/new", form(small_tree, benchmarks=["spawn"], grids=["scaling"]))
    assert resp.status_code == 200 and "no grid &#x27;scaling&#x27; in spawn" in resp.content.decode()
    assert Submission.objects.count() == 1


def test_the_form_offers_a_profile_and_submits_it_with_its_grids(
    browser: Client, small_tree: Path, qemu_class: Any
) -> None:
    page = browser.get("/submissions/new").content.decode()
    assert 'name="grids" value="cross-cpu"' in page
    assert '<select name="profile"' in page
    assert '<option value="" selected>each machine class&#x27;s own</option>' in page
    assert all(f'<option value="{p}">{p}</option>' in page for p in ("tiny", "mm", "distro"))
    resp = browser.post("/submissions/new", form(small_tree, grids=["cross-cpu"], profile="mm"))
    sub = Submission.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/submissions/{sub.pk}"
    assert (sub.grids, sub.profile) == (["cross-cpu"], "mm")
    page = browser.get(resp["Location"]).content.decode()
    assert 'kernels of <span id="profile">the <strong>mm</strong> configuration profile' in page


def test_an_unknown_profile_is_refused_next_to_its_field(browser: Client, small_tree: Path, qemu_class: Any) -> None:
    resp = browser.post("/submissions/new", form(small_tree, profile="huge"))
    assert resp.status_code == 200
    errors = resp.context["form"].errors
    # The pipeline's own words, as the API gives them (kperf.core.submissions.pipeline.validate).
    assert list(errors) == ["profile"], errors
    assert errors["profile"][0].startswith("unknown configuration profile 'huge': choose tiny, mm, distro"), errors
    assert not Submission.objects.exists()


def test_a_threshold_out_of_range_is_shown_next_to_its_field(
    browser: Client, small_tree: Path, qemu_class: Any
) -> None:
    resp = browser.post("/submissions/new", form(small_tree, min_effect_pct="99"))
    assert resp.status_code == 200 and "a percentage from 0.05 to 50" in resp.content.decode()
    assert not Submission.objects.exists()


def test_the_form_shows_what_is_wrong_and_stores_nothing(browser: Client, small_tree: Path, qemu_class: Any) -> None:
    resp = browser.post(
        "/submissions/new",
        {
            "tree": "ext::sh -c id",
            "branch": "a..b",
            "base": "master",
            "benchmarks": ["spawn"],
            "grids": ["quick"],
            "arches": ["x86_64"],
        },
    )
    assert resp.status_code == 200
    assert "transport" in resp.content.decode()
    assert not Submission.objects.exists()


def test_the_submission_page_shows_progress_then_the_verdict(
    browser: Client, alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    _, api = runner_api
    page = browser.get(f"/submissions/{sub.pk}").content.decode()
    assert "base boots 0 of 4" in page and 'http-equiv="refresh"' in page
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        value = 1000.0 if Job.objects.get(pk=job["id"]).side == "base" else 500.0
        api.post(f"/runner/jobs/{job['id']}/results", results_body(job, value))
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    page = browser.get(f"/submissions/{sub.pk}").content.decode()
    assert 'data-metric="spawn-vmas-0"' in page and "verdict-regression" in page
    assert 'http-equiv="refresh"' not in page
    # Which clock timed the numbers, the threshold, and the estimate the change was computed from.
    assert 'data-clock="instructions"' in page and "instruction clock" in page
    # spawn's own threshold on the instruction clock (docs/statistics.md).
    assert "±0.25%" in page and "Base est." in page and "Base mean" in page
    # The unit says what the clock measured: forks per 10^9 guest instructions, not per second.
    assert "<td>spawn-vmas-0</td><td>forks per 10^9 instr.</td>" in page and "forks/s" not in page
    job = Job.objects.filter(submission=sub).first()
    assert job is not None
    console = browser.get(f"/jobs/{job.pk}/console")
    assert console["Content-Type"].startswith("text/plain") and "KPERF-DONE" in console.content.decode()


def test_the_api_also_works_with_the_browser_session(
    browser: Client, alice: Any, qemu_class: Any, tmp_path: Path
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    resp = browser.get(f"/api/v1/submissions/{sub.pk}")
    assert resp.status_code == 200 and resp.json()["progress"]["base"]["boots_total"] == 4
    assert Api(None).get(f"/submissions/{sub.pk}").status_code == 401


def test_units_are_shown_as_the_clock_measured_them() -> None:
    assert unit_on("forks/s", "instructions") == "forks per 10^9 instr."
    assert unit_on("faults/cpu-s", "instructions") == "faults per 10^9 CPU instr."
    assert unit_on("cycles", "instructions") == "cycles"
    assert unit_on("forks/s", "wall") == "forks/s"


def test_the_verdicts_estimate_is_not_the_plain_mean() -> None:
    """One boot with a wild iteration: the plain mean moves, the trimmed boot means do not."""
    boots = [[100.0] * 5, [100.0, 100.0, 100.0, 100.0, 10000.0]]
    assert verdict_estimate(boots, log_scale=True) == pytest.approx(100.0)
    assert verdict_estimate(boots, log_scale=False) == pytest.approx(100.0)
    assert verdict_estimate([], log_scale=True) is None
    # The geometric mean of the boot summaries, on the log scale.
    assert verdict_estimate([[100.0], [400.0]], log_scale=True) == pytest.approx(200.0)
    assert verdict_estimate([[100.0], [400.0]], log_scale=False) == pytest.approx(250.0)
