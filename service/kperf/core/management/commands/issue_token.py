"""Create an API token for a user (for scripts and first-time CLI setup)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kperf.core.models import ApiToken


class Command(BaseCommand):
    help = "Print a new API token for a user."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli")

    def handle(self, *args: Any, **opts: Any) -> None:
        user = get_user_model().objects.filter(username=opts["username"]).first()
        if user is None:
            raise CommandError(f"no user {opts['username']!r}: create one with `createsuperuser` first")
        _, token = ApiToken.issue(user, opts["name"])
        self.stdout.write(token)
