"""Read replies to alerts from the IMAP mailbox once (docs/triage.md, "By mail")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from kperf.core.mail import mailbox


class Command(BaseCommand):
    help = "Poll KPERF_IMAP_MAILBOX on KPERF_IMAP_HOST once and triage by the replies found there."

    def handle(self, *args: Any, **opts: Any) -> None:
        result = mailbox.poll()
        if result is None:
            raise CommandError("KPERF_IMAP_HOST is not set: there is no mailbox to poll (docs/triage.md)")
        if result.busy:
            self.stdout.write("another poll of the mailbox is running; nothing read")
            return
        self.stdout.write(
            f"{result.read} messages read, {result.failed - result.given_up} left for the next poll, "
            f"{result.given_up} given up as unreadable"
        )
