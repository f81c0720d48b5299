"""Register a runner and print its token; change a machine class's shape.

An existing runner keeps its token unless --rotate-token asks for a new one:
changing a class's profile or vCPUs on a running lab (add_runner on its
runner is how that is done) must not lock that runner out.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kperf.core.models import Clock, MachineClass, Runner
from kperf.core.tracking import rebuild
from kperf_kbuild.driver import PROFILES, SUPPORTED_ARCHES


class Command(BaseCommand):
    help = "Register a runner in a machine class and print its token (shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--machine-class", required=True, help="e.g. qemu-x86_64, x86-skylake-2s")
        parser.add_argument("--arch", required=True, choices=SUPPORTED_ARCHES)
        parser.add_argument("--description", default="")
        parser.add_argument(
            "--clock",
            choices=Clock.values,
            help="the clock the machine class's jobs are timed with from now on "
            "(a new class: instructions, QEMU's instruction clock; bare metal and KVM want wall)",
        )
        parser.add_argument(
            "--profile",
            choices=PROFILES,
            help="the configuration profile the class's kernels are built with unless a submission or branch "
            "chooses one (a new class: tiny); its history restarts with the new one (docs/kernels.md)",
        )
        parser.add_argument(
            "--vcpus",
            type=int,
            choices=(1, 2, 4),
            help="vCPUs a QEMU runner of the class boots (a new class: its default, one on the instruction "
            "clock); its history restarts with the new count",
        )
        parser.add_argument(
            "--numa-nodes",
            type=int,
            choices=(0, 2, 4),
            help="NUMA nodes a QEMU runner of the class boots, memory and vCPUs split evenly (a new class: "
            "0, none declared); its history restarts with the new count",
        )
        parser.add_argument(
            "--rotate-token",
            action="store_true",
            help="give an existing runner a new token (its old one stops working at once); without it an "
            "existing runner keeps its token and nothing is printed on stdout",
        )
        parser.add_argument(
            "--yields-to-builds",
            action="store_true",
            help="the runner shares its machine with a builds worker: give it no job while a kernel builds",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        defaults = {"arch": opts["arch"], "description": opts["description"]}
        if opts["clock"]:
            defaults["clock"] = opts["clock"]
        mclass, created = MachineClass.objects.get_or_create(name=opts["machine_class"], defaults=defaults)
        if not created and mclass.arch != opts["arch"]:
            raise CommandError(
                f"machine class {mclass.name} is {mclass.arch}, not {opts['arch']}: pick another class name"
            )
        if opts["clock"] and mclass.clock != opts["clock"]:
            moved = mclass.set_clock(opts["clock"])
            self.stderr.write(f"machine class {mclass.name} now times with the {mclass.clock} clock")
            self.stderr.write(f"{moved} queued job(s) moved to it; jobs of comparisons already measured keep theirs")
        shape = {
            k: opts[k]
            for k in ("profile", "vcpus", "numa_nodes")
            if opts[k] is not None and getattr(mclass, k) != opts[k]
        }
        if shape:
            # Never mixed with the old kernels or VM shape: summaries.default_boots keeps only the class's own.
            MachineClass.objects.filter(pk=mclass.pk).update(**shape)
            rebuild.forget_class(mclass.pk)
            words = ", ".join(f"{k} {v}" for k, v in shape.items())
            self.stderr.write(f"machine class {mclass.name} now measures with {words}; its history starts anew")
        existing = Runner.objects.filter(name=opts["name"]).first()
        if existing is not None and not opts["rotate_token"]:
            if existing.machine_class_id != mclass.pk or (opts["yields_to_builds"] and not existing.yields_to_builds):
                existing.machine_class = mclass
                existing.yields_to_builds = existing.yields_to_builds or opts["yields_to_builds"]
                existing.save(update_fields=["machine_class", "yields_to_builds"])
            self.stderr.write(
                f"runner {existing.name} exists and keeps its token (--rotate-token gives it a new one, "
                "which it must then be restarted with)"
            )
            return
        runner, token = Runner.register(opts["name"], mclass)
        runner.yields_to_builds = opts["yields_to_builds"]
        runner.save(update_fields=["yields_to_builds"])
        self.stdout.write(token)
