"""Register a build machine that pulls builds (kperf-builder), printing its token once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kperf.core.models import BuildMachine


class Command(BaseCommand):
    help = (
        "Register a build machine for `kperf-builder run` (docs/builders.md) and print its token; "
        "run again to give it a new token (the old one stops working), or --disable to lock it out."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the machine's name, as it shows in builds' worker column")
        parser.add_argument("--disable", action="store_true", help="refuse this machine's token from now on")

    def handle(self, *args: Any, **opts: Any) -> None:
        name = opts["name"].strip()
        if not name or len(name) > 64:
            raise CommandError("a build machine's name is 1 to 64 characters")
        if opts["disable"]:
            if not BuildMachine.objects.filter(name=name).update(enabled=False):
                raise CommandError(f"there is no build machine {name!r}")
            self.stderr.write(f"build machine {name} is disabled; its builds are queued again when their leases end")
            return
        _, token = BuildMachine.register(name)
        self.stdout.write(token)
