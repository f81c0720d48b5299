"""Whom a tracked branch's regressions are mailed to: its owner, and the `notify` addresses that agreed.

The probe named 50 outside addresses in `notify`, and kperf would have
mailed each of them every regression of the branch. Now an address
besides the owner's own is asked once to confirm (the same link as for a
submission's `mail_to`, kperf.core.mail.confirmations) and gets nothing
else until its reader follows it; a branch names at most ten. Mail goes
through a real SMTP server on loopback (test_alerts' smtp).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from kperf.core.mail import alerts
from kperf.core.models import Alert, BranchCommit, ChangePoint, MachineClass, TrackedBranch

from tests.conftest import Api
from tests.mail_fixtures import Inbox, real_smtp_backend  # noqa: F401 (fixtures)
from tests.tracking_fixtures import track
from tests.triage_fixtures import regression_between

pytestmark = pytest.mark.django_db


@pytest.fixture
def outbox(request: pytest.FixtureRequest) -> Inbox:
    """What kperf mailed (test_alerts' SMTP server on loopback)."""
    inbox: Inbox = request.getfixturevalue("smtp")
    return inbox


def regression(branch: TrackedBranch, mclass: MachineClass, n: int) -> ChangePoint:
    """The branch's n-th regression (as its analysis finds one), its alert queued and sent."""
    before = BranchCommit.objects.create(branch=branch, sha=f"{2 * n:040x}", position=2 * n, status="done")
    at = BranchCommit.objects.create(branch=branch, sha=f"{2 * n + 1:040x}", position=2 * n + 1, status="done")
    cp = regression_between(branch, mclass, before, at)
    assert alerts.change_point_found(cp) is not None
    alerts.send_pending()
    return cp


def mailed(inbox: Inbox, kind: str) -> list[tuple[list[str], Any]]:
    return [(sorted(a.lower() for a in to), m) for to, m in inbox.messages if m["X-Kperf-Alert"] == kind]


def test_a_branch_names_at_most_ten_watchers(
    alice_api: Api, small_tree: Path, qemu_class: MachineClass, settings_dirs: Any
) -> None:
    fifty = [f"dev{i}@x{i}.example" for i in range(50)]
    resp = alice_api.post("/branches", {"tree": str(small_tree), "branch": "master", "notify": fifty})
    assert resp.status_code == 400 and resp.json()["field"] == "notify"
    assert "notify names 50 addresses; a tracked branch mails at most 10" in resp.json()["detail"]
    assert not TrackedBranch.objects.exists() and not Alert.objects.exists()


def test_unconfirmed_watchers_get_one_confirmation_request_and_no_alert_until_they_confirm(
    outbox: Inbox, alice_api: Api, small_tree: Path, qemu_class: MachineClass, settings_dirs: Any
) -> None:
    notify = ["Bob@Elsewhere.example", "alice@example.org", "carol@elsewhere.example"]
    branch = TrackedBranch.objects.get(pk=track(alice_api, small_tree, notify=notify)["id"])
    # Tracked again (new settings, the same watchers): nobody is asked twice while the link works.
    track(alice_api, small_tree, notify=notify, max_commits=4)
    alerts.send_pending()
    asked = mailed(outbox, "confirm-address")
    assert sorted(to for to, _ in asked) == [["bob@elsewhere.example"], ["carol@elsewhere.example"]]
    assert "alice <alice@example.org>" in asked[0][1].get_content()

    regression(branch, qemu_class, 1)
    [(to, alert)] = mailed(outbox, "change-point")
    assert to == ["alice@example.org"]  # her own address needs no confirmation; nobody else gets it yet
    body = " ".join(alert.get_content().split())
    assert "kperf did not mail this to bob@elsewhere.example, carol@elsewhere.example" in body
    assert "they have not confirmed" in body

    # bob follows his link (the button: opening it confirms nothing); carol does not.
    [bob_asked] = [m for to, m in asked if to == ["bob@elsewhere.example"]]
    link = re.search(r"https://kperf\.example\.org(/addresses/confirm/\S+)", bob_asked.get_content())
    assert link is not None
    assert "Confirmed" in Client().post(link.group(1)).content.decode()

    regression(branch, qemu_class, 2)
    assert [to for to, _ in mailed(outbox, "change-point")][1] == ["alice@example.org", "bob@elsewhere.example"]
    assert len(mailed(outbox, "confirm-address")) == 2  # and carol was not asked again


def test_the_lab_s_reference_series_mail_their_watchers_as_named(
    outbox: Inbox, staff_api: Api, staff: User, small_tree: Path, qemu_class: MachineClass, settings_dirs: Any
) -> None:
    # Staff are the operators: they could allow any address anyway.
    branch = TrackedBranch.objects.get(pk=track(staff_api, small_tree, notify=["linux-mm@kvack.org"])["id"])
    regression(branch, qemu_class, 1)
    assert [to for to, _ in mailed(outbox, "change-point")] == [sorted([staff.email, "linux-mm@kvack.org"])]
    assert mailed(outbox, "confirm-address") == []
