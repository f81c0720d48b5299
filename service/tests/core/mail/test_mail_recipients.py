"""Whom kperf mails besides the user: their own address, addresses they confirmed, the operator's lists.

Through the API, the web pages, the `kperf` command and a real SMTP server
(aiosmtpd on loopback): the probe's burst (five submissions naming ten
outside addresses each) is stopped, a confirmed address gets the result, an
unconfirmed one is refused saying how to confirm it, the operator's allowed
addresses and domains pass, and the limits are per user, counted when a
submission names addresses and again when the mail goes out.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from kperf.core.lifecycle import owners
from kperf.core.mail import alerts
from kperf.core.models import Alert, ApiToken, RecipientAddress, Submission, Tree
from kperf.core.submissions.pipeline import SUBMISSION

from tests.conftest import Api, kperf_cli
from tests.mail_fixtures import Inbox, real_smtp_backend  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

LIST = "lists.example.net"  # the lab's mailing lists, allowed by the operator in some tests


@pytest.fixture
def outbox(request: pytest.FixtureRequest) -> Inbox:
    """What kperf mailed (test_alerts' SMTP server on loopback)."""
    inbox: Inbox = request.getfixturevalue("smtp")
    return inbox


def body(tree: Path, mail_to: list[str]) -> dict[str, Any]:
    return {"tree": str(tree), "branch": "feature", "base": "master", "benchmarks": ["spawn"], "mail_to": mail_to}


def addresses(n: int, domain: str, prefix: str = "dev") -> list[str]:
    return [f"{prefix}{i}@{domain}" for i in range(n)]


def finish(sub_id: int) -> None:
    """The submission ends (as a failed one does), and its result mail is queued."""
    owners.fail(SUBMISSION, Submission.objects.get(pk=sub_id), "the base kernel did not boot")


def mails(inbox: Inbox, kind: str) -> list[tuple[list[str], Any]]:
    return [(sorted(to), m) for to, m in inbox.messages if m["X-Kperf-Alert"] == kind]


def user_api(django_user_model: Any, name: str) -> Api:
    user = django_user_model.objects.create_user(name, f"{name}@example.org", f"{name}-password-1")
    return Api(ApiToken.issue(user)[1])


def test_the_probes_burst_of_outside_addresses_is_refused_and_nothing_is_stored(
    alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    for i in range(5):
        named = addresses(10, f"x{i}.example")
        resp = alice_api.post("/submissions", body(small_tree, named))
        assert resp.status_code == 400, resp.content
        refusal = resp.json()
        assert (refusal["code"], refusal["field"], refusal["addresses"]) == ("unconfirmed-recipients", "mail_to", named)
        assert "kperf addresses confirm ADDR" in refusal["detail"] and "POST /api/v1/addresses" in refusal["detail"]
    assert not Submission.objects.exists() and not Alert.objects.exists()
    # The same submission without them goes through: nothing else of it is refused.
    assert alice_api.post("/submissions", body(small_tree, ["alice@example.org"])).status_code == 201


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_submissions_at_once_passes_the_daily_limit_once(
    live_server: Any, alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any, settings: Any
) -> None:
    settings.KPERF_MAIL_ALLOWED_RECIPIENTS = [LIST]
    start = threading.Barrier(5)

    def submit(i: int) -> requests.Response:
        start.wait()
        return requests.post(
            f"{live_server.url}/api/v1/submissions",
            json=body(small_tree, addresses(10, LIST, prefix=f"l{i}-")),
            headers={"Authorization": f"Bearer {alice_api.token}"},
            timeout=60,
        )

    with ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(submit, range(5)))
    assert sorted(r.status_code for r in answers) == [201, 201, 429, 429, 429]
    refusal = next(r.json() for r in answers if r.status_code == 429)
    assert refusal["code"] == "recipient-limit" and refusal["retry_after"] > 0
    assert "at most 20 a day" in refusal["detail"] and "Submit without mail_to" in refusal["detail"]
    assert Submission.objects.count() == 2


def test_the_limit_is_counted_again_when_the_mails_go_out(
    outbox: Inbox, alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any, settings: Any
) -> None:
    settings.KPERF_MAIL_ALLOWED_RECIPIENTS = [LIST]
    ids = []
    for i in range(3):
        resp = alice_api.post("/submissions", body(small_tree, addresses(10, LIST, prefix=f"l{i}-")))
        assert resp.status_code == 201, resp.content
        ids.append(resp.json()["id"])
        # Submitted days ago: the next submission's count does not see it, but all three finish today.
        Submission.objects.filter(pk=ids[-1]).update(created=timezone.now() - timedelta(days=2))
    for sub_id in ids:
        finish(sub_id)
    assert alerts.send_pending() == 3
    sent = mails(outbox, "submission")
    assert [len(to) for to, _ in sent] == [11, 11, 1]
    (to, last) = sent[-1]
    text = " ".join(last.get_content().split())
    assert to == ["alice@example.org"] and "kperf did not mail this to l2-0@lists.example.net" in text
    assert "KPERF_MAIL_EXTRA_RECIPIENTS_PER_DAY" in text
    # The result still reached its owner; the outbox keeps whom it went to.
    assert Alert.objects.get(key=f"submission:{ids[2]}").recipients == ["alice@example.org"]


def test_an_address_named_before_confirmations_existed_is_left_out_and_the_owner_told(
    outbox: Inbox, alice: User, settings: Any
) -> None:
    settings.KPERF_MAIL_ALLOWED_RECIPIENTS = ["kvack.org"]
    tree = Tree.objects.create(url="https://git.example.org/mm.git")
    sub = Submission.objects.create(
        owner=alice, tree=tree, head_ref="mm-fix", base_ref="v6.1", mail_to=["linux-mm@kvack.org", "who@else.example"]
    )
    finish(sub.pk)
    assert alerts.send_pending() == 1
    [(to, mail)] = mails(outbox, "submission")
    assert to == ["alice@example.org", "linux-mm@kvack.org"]
    assert "did not mail this to who@else.example: not confirmed" in " ".join(mail.get_content().split())


def test_a_confirmed_address_gets_the_result_and_only_for_the_user_who_asked(
    outbox: Inbox,
    alice_api: Api,
    django_user_model: Any,
    small_tree: Path,
    qemu_class: Any,
    settings_dirs: Any,
) -> None:
    resp = alice_api.post("/addresses", {"address": "Bob@Elsewhere.example"})
    assert resp.status_code == 201 and (resp.json()["state"], resp.json()["mailed"]) == ("pending", True)
    # Asked again while the link works: kperf mails an address once.
    again = alice_api.post("/addresses", {"address": "bob@elsewhere.example"})
    assert again.status_code == 200 and not again.json()["mailed"]
    alerts.send_pending()
    [(to, asking)] = mails(outbox, "confirm-address")
    text = asking.get_content()
    assert to == ["bob@elsewhere.example"] and "alice <alice@example.org>" in text
    assert asking["Reply-To"] is None and asking["Auto-Submitted"] == "auto-generated"
    found = re.search(r"https://kperf\.example\.org(/addresses/confirm/\S+)", text)
    assert found is not None
    link = found.group(1)
    # Not yet confirmed: a submission naming it is refused.
    assert alice_api.post("/submissions", body(small_tree, ["bob@elsewhere.example"])).status_code == 400

    reader = Client()  # whoever reads bob's mail, signed in or not
    page = reader.get(link)
    assert page.status_code == 200 and "alice" in page.content.decode() and "Confirm" in page.content.decode()
    # Opening the link (as a mail scanner does) confirms nothing; the button does.
    assert RecipientAddress.objects.get().confirmed is None
    assert "Confirmed" in reader.post(link).content.decode()
    assert reader.get(link).status_code == 404  # a link works once
    assert [(a["address"], a["state"]) for a in alice_api.get("/addresses").json()] == [
        ("bob@elsewhere.example", "confirmed")
    ]

    resp = alice_api.post("/submissions", body(small_tree, ["bob@elsewhere.example"]))
    assert resp.status_code == 201, resp.content
    finish(resp.json()["id"])
    alerts.send_pending()
    [(to, _)] = mails(outbox, "submission")
    assert to == ["alice@example.org", "bob@elsewhere.example"]
    # Confirmed for alice: carol has to ask herself.
    carol = user_api(django_user_model, "carol")
    assert carol.post("/submissions", body(small_tree, ["bob@elsewhere.example"])).status_code == 400
    # Forgotten, it is refused again.
    forgotten = alice_api.client.delete(
        "/api/v1/addresses/bob@elsewhere.example", HTTP_AUTHORIZATION=f"Bearer {alice_api.token}"
    )
    assert forgotten.json() == {"address": "bob@elsewhere.example", "removed": True}
    assert alice_api.post("/submissions", body(small_tree, ["bob@elsewhere.example"])).status_code == 400


def test_the_operators_allowed_addresses_and_domains_need_no_confirmation(
    alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any, settings: Any
) -> None:
    settings.KPERF_MAIL_ALLOWED_RECIPIENTS = ["kvack.org", "list@example.net"]
    ok = alice_api.post(
        "/submissions", body(small_tree, ["linux-mm@kvack.org", "LIST@example.net", "alice@example.org"])
    )
    assert ok.status_code == 201, ok.content
    # A domain entry is that domain, not its subdomains; an address entry is that address alone.
    refused = alice_api.post("/submissions", body(small_tree, ["x@lists.kvack.org", "other@example.net"]))
    assert refused.status_code == 400 and refused.json()["addresses"] == ["x@lists.kvack.org", "other@example.net"]
    allowed = alice_api.post("/addresses", {"address": "linux-mm@kvack.org"})
    assert (allowed.status_code, allowed.json()["state"], allowed.json()["mailed"]) == (200, "allowed", False)
    assert not Alert.objects.filter(kind="confirm-address").exists()


def test_the_limits_are_per_user(
    alice_api: Api, django_user_model: Any, small_tree: Path, qemu_class: Any, settings_dirs: Any, settings: Any
) -> None:
    settings.KPERF_MAIL_ALLOWED_RECIPIENTS = [LIST]
    settings.KPERF_MAIL_CONFIRMATIONS_PER_DAY = 3
    bob = user_api(django_user_model, "bob")
    for i in range(2):
        assert alice_api.post("/submissions", body(small_tree, addresses(10, LIST, f"a{i}-"))).status_code == 201
    assert alice_api.post("/submissions", body(small_tree, addresses(1, LIST, "a9-"))).status_code == 429
    assert bob.post("/submissions", body(small_tree, addresses(10, LIST, "b-"))).status_code == 201

    for n in range(3):
        assert alice_api.post("/addresses", {"address": f"a{n}@elsewhere.example"}).status_code == 201
    over = alice_api.post("/addresses", {"address": "a3@elsewhere.example"})
    assert over.status_code == 429 and over.json()["code"] == "confirmation-limit" and over.json()["retry_after"] > 0
    assert "at most 3 such requests a day" in over.json()["detail"]
    assert bob.post("/addresses", {"address": "a3@elsewhere.example"}).status_code == 201
    assert Alert.objects.filter(kind="confirm-address").count() == 4


def test_the_web_pages_ask_for_confirmation_and_refuse_an_unconfirmed_address_keeping_the_form(
    alice: User, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    browser = Client()
    assert browser.login(username="alice", password="alice-password-1")
    page = browser.post("/addresses", {"address": "carol@elsewhere.example", "action": "confirm"}).content.decode()
    assert "kperf mailed carol@elsewhere.example a link" in page
    assert "<td>carol@elsewhere.example</td><td>pending</td>" in page
    fields = {"tree": str(small_tree), "branch": "feature", "base": "master", "benchmarks": ["spawn"]}
    fields |= {"grids": ["quick"], "arches": ["x86_64"], "mail_to": "carol@elsewhere.example"}
    resp = browser.post("/submissions/new", fields)
    form = resp.content.decode()
    assert resp.status_code == 200 and "carol@elsewhere.example is not confirmed" in form
    assert f'value="{small_tree}"' in form and not Submission.objects.exists()
    bad = browser.post("/addresses", {"address": "not an address", "action": "confirm"})
    assert bad.status_code == 400 and "is not an e-mail address" in bad.content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_command_line_says_how_to_confirm_and_confirms(
    live_server: Any, alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any, tmp_path: Path
) -> None:
    cli = kperf_cli(live_server.url, alice_api, tmp_path / "cli.json")
    submit = ["submit", "--tree", str(small_tree), "--branch", "feature", "--base", "master"]
    out = cli(*submit, "--reply-to", "dev@elsewhere.example")
    assert out.returncode == 2 and "dev@elsewhere.example is not confirmed" in out.stderr
    assert "kperf addresses confirm ADDR" in out.stderr and not Submission.objects.exists()
    out = cli("addresses", "confirm", "dev@elsewhere.example")
    assert out.returncode == 0 and "kperf mailed dev@elsewhere.example a link" in out.stdout, out.stderr
    out = cli("addresses", "list")
    assert out.returncode == 0 and "pending    dev@elsewhere.example" in out.stdout
    assert cli("addresses", "remove", "dev@elsewhere.example").returncode == 0
    assert not RecipientAddress.objects.exists()
