"""The verdict in one line and the notes on added boots: the same words on the page, the API, the CLI and the mail
(kperf.core.results.outcome)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kperf.cli.status import render_status
from kperf.core.lifecycle import owners
from kperf.core.mail import alerts
from kperf.core.models import Job, MachineClass, Submission
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION

from tests.conftest import Api, qemu_runner
from tests.lab_fixtures import results_body, submission_ready_for_testing
from tests.lab_fixtures import submission_page as page
from tests.mail_fixtures import Inbox, real_smtp_backend  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

# Base and head draw the same values in another order: no real change, and
# at the first look too noisy to decide, so kperf adds boots.
NOISY = [1000.0, 900.0, 1300.0, 800.0, 800.0, 1300.0, 900.0, 1000.0]


def run_all(sub: Submission, runners: list[Api], values: dict[int, Iterator[float]]) -> None:
    for api in runners:
        while (job := api.post("/runner/claim").json()["job"]) is not None:
            value = next(values[id(api)])
            assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job, value)).status_code == 200
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()


@pytest.fixture
def two_classes(qemu_class: MachineClass) -> list[Api]:
    """Two machine classes of x86_64, one runner each: a submission has two comparisons."""
    other = MachineClass.objects.create(name="qemu-x86_64-b", arch="x86_64")
    return [qemu_runner("qemu-1", qemu_class)[1], qemu_runner("qemu-b-1", other)[1]]


def test_added_boots_read_the_same_everywhere_and_in_the_past_once_done(
    smtp: Inbox,
    alice: Any,
    alice_api: Api,
    qemu_class: MachineClass,
    two_classes: list[Api],
    tmp_path: Path,
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    values = {id(api): iter(NOISY * 4) for api in two_classes}
    run_all(sub, two_classes, values)
    assert sub.status == Submission.Status.TESTING and len(sub.reruns) == 2

    pending = [
        f"Look 1 of spawn on {name} was inconclusive for spawn-vmas-0, spawn-vmas-1000: "
        "kperf queued 4 more boots per side; they are running."
        for name in ("qemu-x86_64", "qemu-x86_64-b")
    ]
    detail = alice_api.get(f"/submissions/{sub.pk}").json()
    assert detail["rerun_notes"] == pending
    html = page(alice, sub)
    assert all(note in html for note in pending)
    # Wrapped to 100 columns, in the same words.
    said = " ".join(render_status(detail).split())
    assert all(note in said for note in pending)

    run_all(sub, two_classes, values)
    assert sub.status == Submission.Status.DONE
    done = [
        note.replace("queued 4 more boots per side; they are running", "added 4 more boots per side")
        for note in pending
    ]
    detail = alice_api.get(f"/submissions/{sub.pk}").json()
    assert detail["rerun_notes"] == done
    html = page(alice, sub)
    assert all(note in html for note in done) and "they are running" not in html

    # The mail says it in the same words (wrapped at 80 columns), per comparison: never "8 boots".
    assert alerts.send_pending() == 1
    [(_, msg)] = smtp.messages
    text = msg.get_content().replace("\r\n", "\n")
    assert max(len(line) for line in text.splitlines()) <= 80
    body = " ".join(text.split())
    assert all(note in body for note in done)
    assert "added 8" not in body, body


def test_the_page_opens_with_the_mails_verdict_and_the_jobs_have_times(
    smtp: Inbox,
    alice: Any,
    alice_api: Api,
    qemu_class: MachineClass,
    runner_api: Any,
    tmp_path: Path,
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    html = page(alice, sub)
    assert re.search(r'id="verdict"[^>]*>Verdict: <strong>no verdict yet \(testing\)</strong>', html)

    _, api = runner_api
    while (job := api.post("/runner/claim").json()["job"]) is not None:
        level = 1000.0 if Job.objects.get(pk=job["id"]).side == "base" else 500.0
        api.post(f"/runner/jobs/{job['id']}/results", results_body(job, level))
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE

    assert alerts.send_pending() == 1
    [(_, msg)] = smtp.messages
    verdict = msg["Subject"].split(": ", 1)[1]
    assert verdict == "2 regressions"
    detail = alice_api.get(f"/submissions/{sub.pk}").json()
    assert detail["verdict"] == verdict
    assert render_status(detail).splitlines()[1] == f"verdict: {verdict}"
    html = page(alice, sub)
    # At the top: before the first table.
    found = re.search(r'id="verdict"[^>]*>Verdict: <strong>([^<]*)</strong>', html)
    assert found and found.group(1) == verdict and found.start() < html.index("<table")

    # Each job: when it was queued and started, and how long it took.
    assert "<th" in html and ">Queued</th>" in html and ">Started</th>" in html and "<th>Took</th>" in html
    jobs = detail["jobs"]
    assert len(jobs) == 8
    for j in jobs:
        assert j["queued"] and j["started"] and j["finished"] and j["duration_s"] is not None
        assert j["queued"] <= j["started"] <= j["finished"]
        row = html[
            html.index(f'<a href="/jobs/{j["id"]}/console">') - 400 : html.index(f'<a href="/jobs/{j["id"]}/console">')
        ]
        assert f'title="{j["started"]}">{j["started"][11:19]}</td>' in row
        assert f"{j['duration_s']:.0f} s</td>" in row
