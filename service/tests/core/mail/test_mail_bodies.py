"""Each mail body template rendered whole: its wording lives in templates/kperf/mail, and a change
to it shows here as a changed expected text (test_alerts and test_inbound_mail send them through SMTP)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import kperf.core
from kperf.core.mail import bodies

MAIL_TEMPLATES = Path(kperf.core.__file__).parent / "templates" / "kperf" / "mail"
RENDERED_HERE = {"address_confirmation", "change_point", "ignored_reply"}


def test_every_mail_template_is_rendered_by_a_test_here() -> None:
    assert {p.stem for p in MAIL_TEMPLATES.glob("*.txt")} == RENDERED_HERE


def test_the_address_confirmation_reads_line_for_line_and_escapes_nothing() -> None:
    body = bodies.render(
        "address_confirmation",
        name="alice",
        email="alice@example.org",
        base_url="https://kperf.example.org",
        address="linux-mm@kvack.org",
        days=7,
        link="https://kperf.example.org/addresses/confirm/t0k&n",
    )
    assert body == (
        "alice <alice@example.org>, a user of kperf at\n"
        "https://kperf.example.org, asked to have the results of their kernel\n"
        "performance tests mailed to\n"
        "\n"
        "  linux-mm@kvack.org\n"
        "\n"
        "If that is welcome, open this link and press Confirm (within 7 days):\n"
        "\n"
        "  https://kperf.example.org/addresses/confirm/t0k&n\n"
        "\n"
        "If not, ignore this mail: kperf mails nothing more here unless the link\n"
        "is followed. It reads no replies to this mail.\n"
    )
    without = bodies.render("address_confirmation", name="bob", email="", base_url="u", address="a", days=1, link="l")
    assert without.startswith("bob, a user of kperf at\n")


def test_the_change_point_mail_keeps_its_columns() -> None:
    branch = SimpleNamespace(branch="mm-unstable", tree=SimpleNamespace(url="https://git.example.org/mm.git"), pk=4)
    cp = SimpleNamespace(
        direction="regression", metric="spawn-vmas-200", benchmark="spawn", machine_class=SimpleNamespace(name="qemu")
    )
    body = bodies.render(
        "change_point",
        cp=cp,
        branch=branch,
        clock="instruction clock (per 10^9 guest instructions)",
        change="-4.10%",
        p="0.0031",
        commit="1a2b3c4d5e6f",
        subject="mm: take the <mmap_lock> & the page table lock",
        where="1a2b3c4d5e6f, right after 0f0f0f0f0f0f",
        seen="9e9e9e9e9e9e",
        base_url="https://kperf.example.org",
    )
    assert body == (
        "kperf found a regression on the tracked branch mm-unstable\n"
        "of https://git.example.org/mm.git:\n"
        "\n"
        "  metric         spawn-vmas-200 (spawn) on qemu\n"
        "  clock          instruction clock (per 10^9 guest instructions)\n"
        "  change         -4.10% (negative is worse), p=0.0031\n"
        "  first commit   1a2b3c4d5e6f mm: take the <mmap_lock> & the page table lock\n"
        "  where          1a2b3c4d5e6f, right after 0f0f0f0f0f0f\n"
        "  seen when      9e9e9e9e9e9e arrived\n"
        "\n"
        "As more commits arrive the location can still move; the branch page\n"
        "has the current answer: https://kperf.example.org/branches/4\n"
    )


def test_the_answer_to_an_ignored_reply_names_the_regression_only_when_there_is_one() -> None:
    context = {"sender": "eve@example.org", "detail": "its sender is not a kperf account.", "states": "new, expected"}
    regression = "https://k/regressions/3"
    body = bodies.render("ignored_reply", message_id="<m1@example.org>", regression=regression, **context)
    assert body == (
        "kperf ignored the mail from eve@example.org (<m1@example.org>)\n"
        "because its sender is not a kperf account.\n"
        "\n"
        "Nothing was changed.\n"
        "\n"
        "The regression: https://k/regressions/3\n"
        "\n"
        "To triage by mail, reply to the alert with a first line such as\n"
        "\n"
        "  #kperf expected: the series trades fork speed for memory\n"
        "  #kperf fixed 1a2b3c4: reverted in 1a2b3c4\n"
        "\n"
        "States: new, expected.\n"
        "\n"
        "This answer was sent automatically; kperf does not read replies to it.\n"
    )
    bare = bodies.render("ignored_reply", message_id="", regression="", **context)
    assert bare.startswith("kperf ignored the mail from eve@example.org\nbecause")
    assert "\nNothing was changed.\n\nTo triage by mail" in bare and "The regression" not in bare
