"""Plain-text mail through a real SMTP server (aiosmtpd on loopback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiosmtpd.controller import Controller

from kperf.core.lifecycle import owners
from kperf.core.mail import alerts
from kperf.core.models import Alert, TrackedBranch
from kperf.core.submissions.pipeline import SUBMISSION
from kperf.core.tracking import branches

from tests.conftest import Api
from tests.lab_fixtures import submission_ready_for_testing

# real_smtp_backend is autouse: every test here talks SMTP to a real server.
from tests.mail_fixtures import Inbox, finished_submission, free_port, real_smtp_backend  # noqa: F401  (fixtures)
from tests.tracking_fixtures import commit_n, finish_builds, run_jobs, track

pytestmark = pytest.mark.django_db


def test_a_finished_submission_mails_its_owner_the_verdicts_and_the_table(
    smtp: Inbox, alice: Any, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    sub = finished_submission(alice, qemu_class, runner_api[1], tmp_path, head_level=500.0)
    alert = Alert.objects.get(key=f"submission:{sub.pk}")
    assert alert.status == Alert.Status.PENDING and alert.recipients == ["alice@example.org"]
    assert alerts.send_pending() == 1

    [(to, msg)] = smtp.messages
    assert to == ["alice@example.org"]
    assert msg["Subject"] == f"[kperf] #{sub.pk} feature vs master: 2 regressions"
    assert msg["Auto-Submitted"] == "auto-generated"
    assert msg.get_content_type() == "text/plain"
    body = msg.get_content().replace("\r\n", "\n")
    assert "Regressions (negative is worse):" in body
    # Every verdict says which clock timed it: two clocks' numbers are different metrics.
    assert "  spawn-vmas-0 (spawn, qemu-x86_64): -49.95% [" in body
    # spawn's own threshold on the instruction clock (docs/statistics.md, "The practical threshold per benchmark").
    assert "      instructions clock, boots 4/4, iterations 12/12, threshold 0.25%" in body
    assert "spawn on qemu-x86_64 (tiny profile),\ninstruction clock (per 10^9 guest instructions):" in body
    assert "Hmean     spawn-vmas-0" in body  # the mmtests-style table
    assert f"Details: https://kperf.example.org/submissions/{sub.pk}" in body
    assert max(len(line) for line in body.splitlines()) <= 80, [line for line in body.splitlines() if len(line) > 80]
    alert.refresh_from_db()
    assert alert.status == Alert.Status.SENT and alert.sent is not None
    # Sending again sends nothing twice.
    assert alerts.send_pending() == 0 and len(smtp.messages) == 1


def test_a_failed_submission_says_why(smtp: Inbox, alice: Any, qemu_class: Any, tmp_path: Path) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    why = (
        "the head kernel (bbbbbbbbbbbb, x86_64) failed to build: mm/memory.c:42: error: expected ';' before '}' "
        "token, and the build log says more"
    )
    owners.fail(SUBMISSION, sub, why)
    assert alerts.send_pending() == 1
    [(_, msg)] = smtp.messages
    assert msg["Subject"].endswith(": failed")
    body = msg.get_content().replace("\r\n", "\n")
    assert "mm/memory.c:42: error" in body
    # The reason is wrapped as the rest of the mail is (a plain-text mail reader's 80 columns).
    assert max(len(line) for line in body.splitlines()) <= 80, body


def test_nothing_is_lost_while_the_mail_server_is_down_or_unset(
    settings: Any, alice: Any, qemu_class: Any, tmp_path: Path
) -> None:
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    settings.EMAIL_HOST = ""
    owners.fail(SUBMISSION, sub, "the base kernel did not boot")
    assert alerts.send_pending() == 0
    alert = Alert.objects.get()
    assert alert.status == Alert.Status.PENDING and "no SMTP host configured" in alert.last_error

    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nobody listens there
    assert alerts.send_pending() == 0
    alert.refresh_from_db()
    assert alert.status == Alert.Status.PENDING and alert.attempts == 1 and "cannot reach" in alert.last_error

    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=settings.EMAIL_PORT)
    controller.start()
    try:
        assert alerts.send_pending() == 1
    finally:
        controller.stop()
    alert.refresh_from_db()
    assert alert.status == Alert.Status.SENT and alert.attempts == 2 and len(inbox.messages) == 1


def test_a_user_without_an_address_gets_no_mail_and_it_says_so(
    smtp: Inbox, alice: Any, qemu_class: Any, tmp_path: Path
) -> None:
    alice.email = ""
    alice.save()
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path)
    owners.fail(SUBMISSION, sub, "boom")
    assert alerts.send_pending() == 0 and not smtp.messages
    assert Alert.objects.get().status == Alert.Status.NO_RECIPIENT


def test_a_regression_on_a_tracked_branch_mails_its_watchers_once(
    smtp: Inbox,
    alice_api: Api,
    runner_api: tuple[Any, Api],
    small_tree: Path,
    qemu_class: Any,
    settings_dirs: Any,
    tmp_path: Path,
) -> None:
    resp = alice_api.post("/branches", {"tree": str(small_tree), "branch": "master", "notify": ["not-an-address"]})
    assert resp.status_code == 400 and resp.json()["field"] == "notify"
    # The lab's list, which the operator allows (a stranger's address must confirm first: test_branch_watchers).
    settings_dirs.KPERF_MAIL_ALLOWED_RECIPIENTS = ["linux-mm@example.org"]
    data = track(alice_api, small_tree, boots=2, max_commits=50, notify=["linux-mm@example.org"])
    branch = TrackedBranch.objects.get(pk=data["id"])
    rng = np.random.default_rng(3)
    branches.poll_branch(branch.pk)
    commit_n(small_tree, 13)
    branches.poll_branch(branch.pk)
    levels = {c.sha: 1000.0 for c in branch.commits.all()}
    finish_builds(branch, tmp_path)
    run_jobs(runner_api[1], levels, rng)
    culprit, *rest = commit_n(small_tree, 8)
    branches.poll_branch(branch.pk)
    levels.update({sha: 880.0 for sha in [culprit, *rest]})
    finish_builds(branch, tmp_path)
    run_jobs(runner_api[1], levels, rng)

    assert alerts.send_pending() >= 1
    mails = [(to, msg) for to, msg in smtp.messages if "spawn-vmas" in msg["Subject"]]
    assert mails, [m["Subject"] for _, m in smtp.messages]
    for to, msg in mails:
        assert sorted(to) == ["alice@example.org", "linux-mm@example.org"]
        assert msg["Subject"].startswith("[kperf] master: spawn-vmas-") and culprit[:12] in msg["Subject"]
        body = msg.get_content()
        assert "kperf found a regression on the tracked branch master" in body
        assert f"first commit   {culprit[:12]}" in body and "right after" in body
        assert f"https://kperf.example.org/branches/{branch.pk}" in body
    sent = len(smtp.messages)
    # The same change found again by a later analysis is not mailed again.
    branches.analyse_series(branch, qemu_class.pk, "spawn", qemu_class.clock)
    assert alerts.send_pending() == 0 and len(smtp.messages) == sent
