"""Run kperf's SMTP listener for replies to alerts (docs/triage.md, "By mail")."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from kperf.core.mail.listener import MailListener


class Command(BaseCommand):
    help = "Receive replies to alert mails over SMTP and triage by them, until SIGINT or SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=settings.KPERF_MAIL_LISTEN_HOST, help="address to listen on")
        parser.add_argument("--port", type=int, default=settings.KPERF_MAIL_LISTEN_PORT, help="port to listen on")

    def handle(self, *args: Any, **opts: Any) -> None:
        listener = MailListener(opts["host"], opts["port"])
        self.stdout.write(
            f"kperf mail listener on {listener.host}:{listener.port}, for "
            f"{settings.KPERF_MAIL_LOCAL_PART}+<token>@{settings.KPERF_MAIL_DOMAIN or '(KPERF_MAIL_DOMAIN unset)'}"
        )
        self.stdout.flush()
        listener.serve_forever()
