"""Shared test scenarios, moved out of test_alerts.py so no test module imports another."""

from __future__ import annotations

import email
import email.policy
import socket
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from kperf.core.lifecycle import owners
from kperf.core.models import Job, Submission
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION

from tests.conftest import Api
from tests.lab_fixtures import results_body, submission_ready_for_testing


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], EmailMessage]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append((list(envelope.rcpt_tos), msg))
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def real_smtp_backend(settings: Any) -> None:
    # pytest-django swaps in an in-memory outbox; these tests talk SMTP.
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


@pytest.fixture
def smtp(settings: Any) -> Iterator[Inbox]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.KPERF_BASE_URL = "https://kperf.example.org"
    try:
        yield inbox
    finally:
        controller.stop()


def finished_submission(
    alice: Any,
    mclass: Any,
    runner: Api,
    tmp: Path,
    head_level: float,
    prepare: Callable[[Submission], None] | None = None,
) -> Submission:
    """A submission measured (base at 1000, head at `head_level`) and analysed; `prepare` sees it before its boots."""
    sub = submission_ready_for_testing(alice, mclass, tmp)
    if prepare is not None:
        prepare(sub)
    while (job := runner.post("/runner/claim").json()["job"]) is not None:
        level = 1000.0 if Job.objects.get(pk=job["id"]).side == "base" else head_level
        runner.post(f"/runner/jobs/{job['id']}/results", results_body(job, level))
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE
    return sub
