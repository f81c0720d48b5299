"""Move old console logs and raw benchmark outputs out of the database into the artifact storage."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kperf.core.builds import archive, artifacts


class Command(BaseCommand):
    help = (
        "Move console logs of jobs finished, and raw outputs of boots recorded, more than DAYS days ago "
        "to the artifact storage; pages, the API and exports still show them. Safe to interrupt and to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", type=float, required=True, metavar="DAYS")
        parser.add_argument("--limit", type=int, default=0, help="at most this many of each kind per run (0: all)")
        parser.add_argument("--dry-run", action="store_true", help="count what would move; change nothing")
        parser.add_argument(
            "--build-files",
            action="store_true",
            help="also copy files of builds made before the artifact storage (rows naming a local path) into it",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        days = opts["older_than"]
        if days < 0:
            raise CommandError(f"--older-than {days}: give a number of days, 0 or more")
        report = archive.archive_older_than(days, limit=max(0, opts["limit"]), dry_run=opts["dry_run"])
        if opts["build_files"]:
            archive.copy_build_files(report, dry_run=opts["dry_run"])
        verb = "would move" if opts["dry_run"] else "moved"
        self.stdout.write(
            f"{verb} {report.moved} texts ({report.bytes} bytes) to the {artifacts.where()}; "
            f"skipped {report.skipped} (changed meanwhile); builds with copied files: {report.builds}"
        )
        if report.failed:
            for line in report.failed[:20]:
                self.stderr.write(line)
            raise CommandError(
                f"{len(report.failed)} could not be moved and stay in the database; check that the "
                f"{artifacts.where()} is reachable from here (`kperf-manage storage_check`), then run again"
            )
