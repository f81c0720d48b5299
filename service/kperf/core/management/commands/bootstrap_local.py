"""Set up a local kperf for `make up`: admin account, machine class, runner, build machine.

Idempotent: the admin keeps its password across restarts (stored in the
credentials file, mode 0600); the local runner gets a fresh token each time,
because the old one was only ever shown to the previous session.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from kperf.core.models import ApiToken, BuildMachine, MachineClass, Runner
from kperf.core.models.accounts import hash_token
from kperf.core.tracking import rebuild
from kperf_kbuild.profiles import PROFILES


def local_address(name: str) -> str:
    """The local admin's address: one a reply to an alert is believed from.

    Replies are read only from a plain address at a domain name with a dot
    (kperf.core.mail.authentication.mailbox); `admin@localhost` is not one, so
    triage by reply was ignored under `make up`. `.localhost` names are
    reserved for this machine (RFC 6761), so no mail to it leaves it.
    """
    return f"{name}@kperf.localhost"


class Command(BaseCommand):
    help = "Create the local admin, machine class and runner; write their credentials to a file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--credentials-file", required=True)
        parser.add_argument("--runner-name", default="local-qemu")
        parser.add_argument("--arch", default="x86_64")
        parser.add_argument("--machine-class", default="")
        parser.add_argument("--admin", default="admin")
        parser.add_argument(
            "--runners", type=int, default=1, help="local runners of the class: NAME, NAME-2, ... (each its own token)"
        )
        parser.add_argument(
            "--vcpus",
            type=int,
            choices=(0, 1, 2, 4),
            default=None,
            help="vCPUs of the class's QEMU guests (0: the runner's default); left as it is when not given",
        )
        parser.add_argument(
            "--profile",
            choices=PROFILES,
            default=None,
            help="configuration profile of the class's kernels (docs/kernels.md); left as it is when not given",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        path = Path(opts["credentials_file"])
        old: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        User = get_user_model()
        user = User.objects.filter(username=opts["admin"]).first()
        password = old.get("admin_password") if user is not None else None
        if user is None or not password or not user.check_password(password):
            password = secrets.token_urlsafe(12)
            if user is None:
                user = User.objects.create_superuser(opts["admin"], local_address(opts["admin"]), password)
            else:
                user.set_password(password)
                user.save()
        if user.email == f"{opts['admin']}@localhost":
            # What older homes were given: a reply from it was refused as no plain address.
            user.email = local_address(opts["admin"])
            user.save(update_fields=["email"])
        mclass_name = opts["machine_class"] or f"qemu-{opts['arch']}"
        mclass, _ = MachineClass.objects.get_or_create(
            name=mclass_name, defaults={"arch": opts["arch"], "description": "QEMU on the kperf host (make up)"}
        )
        if opts["vcpus"] is not None and mclass.vcpus != opts["vcpus"]:
            # Jobs carry their class's vCPUs, and boots of different shapes
            # are never pooled or shared (docs/kernels.md, "vCPUs").
            MachineClass.objects.filter(pk=mclass.pk).update(vcpus=opts["vcpus"])
        if opts["profile"] is not None and mclass.profile != opts["profile"]:
            # As add_runner --profile: the old kernels' history is never pooled with the new ones'.
            MachineClass.objects.filter(pk=mclass.pk).update(profile=opts["profile"])
            rebuild.forget_class(mclass.pk)
            self.stderr.write(f"machine class {mclass.name} now builds the {opts['profile']} profile")
        mclass.refresh_from_db()
        local = []
        for n in range(1, max(1, opts["runners"]) + 1):
            name = opts["runner_name"] if n == 1 else f"{opts['runner_name']}-{n}"
            runner, token = Runner.register(name, mclass)
            # They share this machine with the builds worker (docs/runners.md):
            # on the wall clock they wait for builds; the instruction clock never needs to.
            runner.yields_to_builds = True
            runner.save(update_fields=["yields_to_builds"])
            local.append({"name": name, "token": token})
        runner_token = local[0]["token"]
        # Used when KPERF_BUILDERS=remote: `make up` then runs kperf-builder with it (docs/builders.md).
        _, builder_token = BuildMachine.register("local-builder")
        api_token = old.get("api_token", "")
        if not api_token or not ApiToken.objects.filter(token_hash=hash_token(api_token), user=user).exists():
            _, api_token = ApiToken.issue(user, "make-up")
        creds = {
            "admin_user": opts["admin"],
            "admin_password": password,
            "api_token": api_token,
            "runner_name": opts["runner_name"],
            "runner_token": runner_token,
            # Every local runner, the first one above included.
            "runners": local,
            "builder_token": builder_token,
            "machine_class": mclass_name,
            "arch": opts["arch"],
            # What its guests ask of QEMU: kperf-up checks them before its next start (kperf.up).
            "vcpus": mclass.vcpus,
            "clock": mclass.clock,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(creds, fh, indent=2)
        self.stdout.write(f"credentials written to {path}")
