"""Print the status history of a submission, tracked commit, build or job.

What an operator reads when a row looks stuck."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kperf.core.models import StatusChange

KINDS = {"submission": "Submission", "commit": "BranchCommit", "build": "KernelBuild", "job": "Job"}


class Command(BaseCommand):
    help = "Every status change of one row, oldest first: when, from, to, who or what moved it, and why."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", choices=sorted(KINDS), help="what the id is of")
        parser.add_argument("id", type=int)

    def handle(self, *args: Any, **opts: Any) -> None:
        rows = StatusChange.objects.filter(kind=KINDS[opts["kind"]], object_id=opts["id"]).order_by("at", "pk")
        if not rows.exists():
            raise CommandError(f"no status change of {opts['kind']} {opts['id']} is recorded (is the id right?)")
        for row in rows:
            why = f": {row.why.splitlines()[0][:200]}" if row.why else ""
            self.stdout.write(
                f"{row.at:%Y-%m-%d %H:%M:%S} {row.source or '(created)':>10} -> {row.target:<10} by {row.actor}{why}"
            )
