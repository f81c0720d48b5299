"""Triage of regressions: opened by kperf, decided through the API, the pages and `kperf triage`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from kperf.core import triage
from kperf.core.models import (
    ApiToken,
    BranchCommit,
    ChangePoint,
    MachineClass,
    Triage,
    TriageEvent,
)

from tests.conftest import Api, kperf_cli
from tests.mail_fixtures import finished_submission
from tests.tracking_fixtures import land_a_step_in_a_gap
from tests.triage_fixtures import regressed_branch, regressed_submission

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("head_level", "opened"), [(500.0, True), (1000.0, False)])
def test_a_submission_that_finishes_with_regressions_opens_a_new_triage(
    alice: User, qemu_class: MachineClass, runner_api: Any, tmp_path: Path, head_level: float, opened: bool
) -> None:
    sub = finished_submission(alice, qemu_class, runner_api[1], tmp_path, head_level=head_level)
    row = Triage.objects.filter(submission=sub).first()
    if not opened:
        assert row is None  # no regression, nothing to decide
        return
    assert row is not None and row.state == "new" and row.kind == "submission"
    assert f"#{sub.pk} " in row.title and "regression" in row.title
    (event,) = row.events.all()
    assert (event.by, event.from_state, event.to_state, event.via) == (None, "", "new", "kperf")


def test_the_owner_triages_through_the_api_and_the_history_says_who_what_and_how(
    alice: User, alice_api: Api, qemu_class: MachineClass
) -> None:
    sub = regressed_submission(alice, qemu_class)
    got = alice_api.get(f"/submissions/{sub.pk}/triage")
    assert got.status_code == 200 and got.json()["state"] == "new" and got.json()["may_triage"] is True

    resp = alice_api.post(f"/submissions/{sub.pk}/triage", {"state": "expected", "note": "trades forks for memory"})
    assert resp.status_code == 200, resp.content
    assert resp.json()["state"] == "expected" and resp.json()["note"] == "trades forks for memory"
    # A retry changes nothing and writes no second event.
    again = alice_api.post(f"/submissions/{sub.pk}/triage", {"state": "expected", "note": "trades forks for memory"})
    assert again.status_code == 200 and len(again.json()["history"]) == 2
    # "won't fix" as people write it.
    assert alice_api.post(f"/submissions/{sub.pk}/triage", {"state": "won't fix"}).json()["state"] == "wont-fix"
    done = alice_api.post(
        f"/submissions/{sub.pk}/triage", {"state": "fixed", "fixed_by": "ABCDEF1234", "note": "reverted"}
    ).json()
    assert done["state"] == "fixed" and done["fixed_by"] == "abcdef1234"

    history = [(e["by"], e["from_state"], e["to_state"], e["note"], e["via"]) for e in done["history"]]
    assert history == [
        (None, "", "new", "found by kperf", "kperf"),
        ("alice", "new", "expected", "trades forks for memory", "api"),
        ("alice", "expected", "wont-fix", "", "api"),
        ("alice", "wont-fix", "fixed", "reverted", "api"),
    ]
    assert done["history"][-1]["fixed_by"] == "abcdef1234"

    fixed = alice_api.get("/regressions?state=fixed").json()
    assert [r["submission"] for r in fixed] == [sub.pk]
    assert alice_api.get("/regressions?state=new").json() == []
    bad = alice_api.get("/regressions?state=maybe")
    assert bad.status_code == 400 and "confirmed" in bad.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"state": "maybe"}, "state", "unknown triage state 'maybe': choose one of confirmed, expected"),
        ({"state": "new"}, "state", "'new' is what kperf sets"),
        ({"state": "fixed", "note": "gone"}, "fixed_by", "'fixed' needs the commit that fixed it"),
        ({"state": "fixed", "fixed_by": "xyz1234"}, "fixed_by", "is not a commit"),
        ({"state": "fixed", "fixed_by": "abc12"}, "fixed_by", "7 to 40 characters"),
        ({"state": "fixed", "fixed_by": "a" * 41}, "fixed_by", "7 to 40 characters"),
        ({"state": "expected", "fixed_by": "abcdef1"}, "fixed_by", "only with 'fixed'"),
        ({"state": "expected", "note": "x" * 4001}, "note", "at most 4000"),
    ],
)
def test_bad_input_is_refused_with_what_to_do_and_changes_nothing(
    alice: User, alice_api: Api, qemu_class: MachineClass, body: dict[str, Any], field: str, words: str
) -> None:
    cp = regressed_branch(alice, qemu_class)
    resp = alice_api.post(f"/change-points/{cp.pk}/triage", body)
    assert resp.status_code == 400, resp.content
    assert resp.json()["code"] == "invalid-triage" and resp.json()["field"] == field
    assert words in resp.json()["detail"]
    row = Triage.objects.get(change_point=cp)
    assert (row.state, row.note, row.fixed_by) == ("new", "", "")
    assert row.events.count() == 1


def test_the_domain_refuses_bad_input_and_strangers_with_typed_errors(
    alice: User, django_user_model: Any, qemu_class: MachineClass
) -> None:
    sub = regressed_submission(alice, qemu_class)
    bob = django_user_model.objects.create_user("bob", "bob@example.org")
    with pytest.raises(triage.TriageForbidden):
        triage.triage(sub, bob, "invalid", via="mail")
    with pytest.raises(triage.TriageError, match="via must be one of"):
        triage.triage(sub, alice, "invalid", via="fax")
    event = triage.triage(sub, alice, "Invalid", note="a noisy runner", via="mail")
    assert (event.from_state, event.to_state, event.via, event.by) == ("new", "invalid", "mail", alice)
    assert TriageEvent.objects.filter(triage__submission=sub).count() == 2


def test_another_user_can_neither_see_nor_triage_and_staff_can(
    alice: User, alice_api: Api, staff_api: Api, django_user_model: Any, qemu_class: MachineClass
) -> None:
    sub = regressed_submission(alice, qemu_class)
    cp = regressed_branch(alice, qemu_class)
    bob = django_user_model.objects.create_user("bob", "bob@example.org", "bob-password-1")
    bob_api = Api(ApiToken.issue(bob)[1])
    for path in (f"/submissions/{sub.pk}/triage", f"/change-points/{cp.pk}/triage"):
        assert bob_api.get(path).status_code == 404
        refused = bob_api.post(path, {"state": "invalid"})
        assert refused.status_code == 404 and refused.json()["code"] == "not-found"
    assert bob_api.get("/regressions").json() == []
    page = Client()
    page.force_login(bob)
    assert page.post(f"/triage/{Triage.objects.get(change_point=cp).pk}", {"state": "invalid"}).status_code == 404
    assert set(Triage.objects.values_list("state", flat=True)) == {"new"}

    assert {r["id"] for r in alice_api.get("/regressions?state=new").json()} == set(
        Triage.objects.values_list("pk", flat=True)
    )
    admin = staff_api.post(f"/change-points/{cp.pk}/triage", {"state": "confirmed", "note": "seen on hardware too"})
    assert admin.status_code == 200 and admin.json()["history"][-1]["by"] == "lab-admin"


def test_watchers_triage_the_reference_series_and_other_readers_only_read(
    staff: User, django_user_model: Any, qemu_class: MachineClass
) -> None:
    watcher = django_user_model.objects.create_user("mm-dev", "MM-Dev@example.org")
    reader = django_user_model.objects.create_user("carol", "carol@example.org")
    cp = regressed_branch(staff, qemu_class, notify=["mm-dev@example.org"])
    reader_api, watcher_api = Api(ApiToken.issue(reader)[1]), Api(ApiToken.issue(watcher)[1])
    seen = reader_api.get(f"/change-points/{cp.pk}/triage")
    assert seen.status_code == 200 and seen.json()["may_triage"] is False
    refused = reader_api.post(f"/change-points/{cp.pk}/triage", {"state": "invalid"})
    assert refused.status_code == 403 and "watchers" in refused.json()["detail"]
    ok = watcher_api.post(f"/change-points/{cp.pk}/triage", {"state": "confirmed"})
    assert ok.status_code == 200 and ok.json()["state"] == "confirmed"


def test_improvements_and_submissions_without_regressions_have_nothing_to_triage(
    alice: User, alice_api: Api, qemu_class: MachineClass
) -> None:
    cp = regressed_branch(alice, qemu_class)
    better = ChangePoint.objects.create(
        branch=cp.branch,
        machine_class=qemu_class,
        benchmark="spawn",
        metric="spawn-vmas-1",
        clock="instructions",
        commit=cp.commit,
        detected_at=cp.commit,
        direction="improvement",
        change_pct=9.0,
        p_value=0.001,
        statistic=5.0,
    )
    assert triage.open_for_change_point(better) is None
    resp = alice_api.get(f"/change-points/{better.pk}/triage")
    assert resp.status_code == 404 and resp.json()["code"] == "no-regression"
    detail = alice_api.get(f"/branches/{cp.branch_id}").json()
    assert {c["id"]: c["triage"] for c in detail["change_points"]} == {cp.pk: "new", better.pk: None}


def test_a_change_point_that_moves_keeps_its_triage_and_history(alice: User, qemu_class: MachineClass) -> None:
    cp = regressed_branch(alice, qemu_class)
    triage.triage(cp, alice, "expected", note="known", via="api")
    row = Triage.objects.get(change_point=cp)
    # Re-analysis (a bisection step) puts the change one commit earlier: the old row goes.
    earlier = BranchCommit.objects.create(branch=cp.branch, sha="c" * 40, position=3, status="done")
    cp.delete()
    assert row.branch is not None
    moved = ChangePoint.objects.create(
        branch=row.branch,
        machine_class=qemu_class,
        benchmark="spawn",
        metric="spawn-vmas-0",
        clock="instructions",
        commit=earlier,
        detected_at=earlier,
        direction="regression",
        change_pct=-11.0,
        p_value=0.001,
        statistic=5.0,
    )
    assert triage.open_for_change_point(moved) == row
    row.refresh_from_db()
    assert row.change_point == moved and row.state == "expected" and "cccccccccccc" in row.title
    assert [e.note for e in row.events.all()][-1] == "the change point moved to cccccccccccc (re-analysis)"
    assert Triage.objects.count() == 1


def test_bisection_leaves_one_new_triage_per_regression_at_the_culprit(
    alice_api: Api, runner_api: tuple[Any, Api], small_tree: Path, qemu_class: Any, settings_dirs: Any, tmp_path: Path
) -> None:
    branch, landed, _ = land_a_step_in_a_gap(alice_api, runner_api[1], small_tree, tmp_path, bisect=True)
    cps = list(ChangePoint.objects.filter(branch=branch, direction="regression"))
    assert cps
    rows = list(Triage.objects.filter(branch=branch))
    # Every regression has its triage, and none was left behind where bisection first placed it.
    assert sorted(r.change_point_id for r in rows) == sorted(cp.pk for cp in cps)  # type: ignore[type-var]
    assert all(r.state == "new" and landed[5][:12] in r.title for r in rows)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert found, "the triage form carries no CSRF token"
    return found.group(1)


def test_the_pages_show_the_state_and_the_form_changes_it(alice: User, qemu_class: MachineClass) -> None:
    sub = regressed_submission(alice, qemu_class)
    cp = regressed_branch(alice, qemu_class)
    row = Triage.objects.get(submission=sub)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    page = browser.get(f"/submissions/{sub.pk}").content.decode()
    assert f'id="triage-{row.pk}" data-triage-state="new"' in page and f'action="/triage/{row.pk}"' in page
    token = _csrf(page)
    # No token, no change.
    assert browser.post(f"/triage/{row.pk}", {"state": "expected"}).status_code == 403

    sent = browser.post(f"/triage/{row.pk}", {"state": "expected", "note": "a trade-off", "csrfmiddlewaretoken": token})
    assert sent.status_code == 302 and sent["Location"] == f"/submissions/{sub.pk}#triage"
    page = browser.get(f"/submissions/{sub.pk}").content.decode()
    assert 'data-triage-state="expected"' in page and "a trade-off" in page
    assert TriageEvent.objects.filter(triage=row).last().via == "web"  # type: ignore[union-attr]

    # A bad sha goes back to the page with what was wrong; nothing changes.
    bad = browser.post(
        f"/triage/{row.pk}", {"state": "fixed", "fixed_by": "not-a-sha", "csrfmiddlewaretoken": token}, follow=True
    )
    text = bad.content.decode()
    assert "not changed: fixed_by &#x27;not-a-sha&#x27; is not a commit" in text
    assert 'data-triage-state="expected"' in text
    row.refresh_from_db()
    assert row.state == "expected"

    branch_page = browser.get(f"/branches/{cp.branch_id}").content.decode()
    cp_row = Triage.objects.get(change_point=cp)
    assert f'id="triage-{cp_row.pk}" data-triage-state="new"' in branch_page and "spawn-vmas-0 -12.00%" in branch_page
    done = browser.post(
        f"/triage/{cp_row.pk}", {"state": "fixed", "fixed_by": "deadbeef", "csrfmiddlewaretoken": token}, follow=True
    )
    assert done.redirect_chain[-1][0] == f"/branches/{cp.branch_id}#triage-{cp_row.pk}"
    assert "fixed by <code>deadbeef</code>" in done.content.decode()


def test_kperf_triage_against_a_live_server(
    live_server: Any, alice: User, alice_api: Api, qemu_class: MachineClass, tmp_path: Path
) -> None:
    sub = regressed_submission(alice, qemu_class)
    cp = regressed_branch(alice, qemu_class)
    cli = kperf_cli(live_server.url, alice_api, tmp_path / "config.json")

    out = cli("triage", "list", "--state", "new")
    assert out.returncode == 0, out.stderr
    assert f"submission {sub.pk}" in out.stdout and f"changepoint {cp.pk}" in out.stdout

    out = cli("triage", "submission", str(sub.pk), "expected", "-m", "the series trades fork speed for memory")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"triage {Triage.objects.get(submission=sub).pk}: expected")
    assert "alice via cli  new -> expected: the series trades fork speed for memory" in out.stdout

    out = cli("triage", "changepoint", str(cp.pk), "fixed", "-m", "reverted")
    assert out.returncode == 2 and "'fixed' needs the commit that fixed it" in out.stderr
    out = cli("triage", "changepoint", str(cp.pk), "fixed", "--commit", "abc1234", "-m", "reverted")
    assert out.returncode == 0, out.stderr
    assert "fixed by abc1234" in out.stdout and "new -> fixed (abc1234): reverted" in out.stdout

    out = cli("triage", "list", "--state", "new")
    assert out.returncode == 0 and out.stdout.strip() == "no regressions in state new"
    shown = cli("triage", "changepoint", str(cp.pk))
    assert shown.returncode == 0 and "fixed by abc1234" in shown.stdout
    assert cli("triage", "submission", "99999", "expected").returncode == 2
