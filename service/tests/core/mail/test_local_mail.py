"""Mail on a laptop: kperf's listener keeps its own mail in a Maildir, `kperf mail`
reads it and answers an alert through the same listener, which triages
(kperf.core.mail.listener, kperf.cli.mail; docs/alerts.md, "Mail on a laptop")."""

from __future__ import annotations

import io
import mailbox
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from kperf import up
from kperf.core.mail import alerts
from kperf.core.mail.listener import MailListener
from kperf.core.models import MachineClass, Triage

from tests.mail_fixtures import finished_submission, free_port

pytestmark = pytest.mark.django_db(transaction=True)

KPERF = str(Path(sys.executable).parent / "kperf")


@pytest.fixture
def local(settings: Any, tmp_path: Path) -> Iterator[MailListener]:
    """What `make up` sets: kperf mails its own listener, which keeps every mail in a Maildir."""
    server = MailListener("127.0.0.1", free_port(), maildir=tmp_path / "mail")
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    settings.KPERF_MAIL_DOMAIN = "localhost"
    settings.KPERF_MAIL_AUTHSERV_IDS = []
    settings.KPERF_MAIL_ACCEPT_UNAUTHENTICATED = True
    server.start()
    try:
        yield server
    finally:
        server.stop()


def cli(server: MailListener, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KPERF_MAIL_LISTEN_PORT": str(server.port)}
    assert server.maildir is not None
    argv = [KPERF, "mail", "--maildir", str(server.maildir), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_an_alert_lands_in_the_local_mailbox_and_a_reply_from_there_triages_it(
    local: MailListener, alice: User, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    sub = finished_submission(alice, qemu_class, runner_api[1], tmp_path, head_level=500.0)
    assert alerts.send_pending() == 1
    listed = cli(local, "list")
    assert listed.returncode == 0, listed.stderr
    [line] = listed.stdout.splitlines()
    assert line.startswith("  1  ") and "alice@example.org" in line
    assert f"[kperf] #{sub.pk} feature vs master: 2 regressions" in line
    shown = cli(local, "show", "1")
    assert shown.returncode == 0, shown.stderr
    assert "Reply-To: kperf+" in shown.stdout and "@localhost" in shown.stdout
    assert "Regressions (negative is worse):" in shown.stdout

    answered = cli(local, "reply", "1", "#kperf expected: the series trades fork speed for memory")
    assert answered.returncode == 0, answered.stderr
    row = Triage.objects.get(submission=sub)
    assert (row.state, row.note) == ("expected", "the series trades fork speed for memory")
    last = row.events.order_by("-id").first()
    assert last is not None and (last.by, last.via) == (alice, "mail")


def test_a_message_that_is_not_there_and_a_mailbox_that_is_not_there_say_so(
    local: MailListener, tmp_path: Path
) -> None:
    assert local.maildir is not None
    mailbox.Maildir(local.maildir, create=True)
    missing = cli(local, "show", "3")
    assert missing.returncode != 0 and "no message 3: the mailbox has 0" in missing.stderr
    env = {**os.environ, "KPERF_HOME": str(tmp_path / "elsewhere")}
    nobox = subprocess.run([KPERF, "mail", "list"], env=env, capture_output=True, text=True, timeout=60)
    assert nobox.returncode != 0 and "no mailbox at" in nobox.stderr and "make up" in nobox.stderr


def test_the_local_mailbox_listens_only_on_loopback(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="listens only on loopback"):
        MailListener("0.0.0.0", free_port(), maildir=tmp_path / "mail")


def test_the_local_fixture_is_what_kperf_up_gives_its_children(tmp_path: Path) -> None:
    """What the test below stands on: the settings `local` sets are those kperf-up's environment makes."""
    env: dict[str, str] = {}
    assert up.local_mail(env, tmp_path) is True
    assert env == {
        "KPERF_MAIL_LISTEN_HOST": "127.0.0.1",
        "KPERF_MAIL_LISTEN_PORT": "8025",
        # kperf mails its own listener, which keeps every mail in the home's Maildir.
        "KPERF_SMTP_HOST": "127.0.0.1",
        "KPERF_SMTP_PORT": "8025",
        "KPERF_MAIL_DOMAIN": "localhost",
        # No KPERF_MAIL_AUTHSERV_ID: a reply on loopback is the local user's.
        "KPERF_MAIL_ACCEPT_UNAUTHENTICATED": "1",
        "KPERF_MAIL_LOCAL_MAILDIR": str(tmp_path / "mail"),
    }


def test_under_make_up_the_local_admin_triages_by_replying_with_kperf_mail(
    local: MailListener, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    """The admin `make up` makes submits, is alerted, and answers with `kperf mail reply`:
    its address must be one a reply is believed from ("admin@localhost is not a plain address")."""
    call_command("bootstrap_local", "--credentials-file", str(tmp_path / "credentials.json"), stdout=io.StringIO())
    admin = User.objects.get(username="admin")
    sub = finished_submission(admin, qemu_class, runner_api[1], tmp_path, head_level=500.0)
    assert alerts.send_pending() == 1
    answered = cli(local, "reply", "1", "#kperf expected: fork pays for the new accounting")
    assert answered.returncode == 0, answered.stderr
    row = Triage.objects.get(submission=sub)
    assert (row.state, row.note) == ("expected", "fork pays for the new accounting")
    last = row.events.order_by("-id").first()
    assert last is not None and (last.by, last.via) == (admin, "mail")
