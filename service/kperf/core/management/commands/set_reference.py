"""Set a machine class's reference kernel (and calibration set) for runner calibration (docs/calibration.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kperf.core import benchmarks
from kperf.core.lab import calibration
from kperf.core.models import KernelBuild, MachineClass


class Command(BaseCommand):
    help = "Choose the kernel build every runner of a machine class calibrates with, and the benchmark set."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("machine_class")
        parser.add_argument("build", help="a kernel build's id, or a built sha (or its prefix) of the class's arch")
        parser.add_argument("--benchmark", help="calibration benchmark (default: the class's, spawn)")
        parser.add_argument("--grid", help="its grid (default: the class's, quick)")
        parser.add_argument("--boots", type=int, help="boots per calibration (default: the class's, 2)")
        parser.add_argument(
            "--now", action="store_true", help="queue a calibration for every good runner of the class at once"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        mclass = MachineClass.objects.filter(name=opts["machine_class"]).first()
        if mclass is None:
            known = ", ".join(MachineClass.objects.order_by("name").values_list("name", flat=True)) or "none"
            raise CommandError(f"no machine class {opts['machine_class']!r} (known: {known})")
        build = self._build(mclass, opts["build"])
        if opts["benchmark"] or opts["grid"]:
            bench = opts["benchmark"] or mclass.calibration_benchmark
            grid = opts["grid"] or mclass.calibration_grid
            try:
                benchmarks.grid_for(bench, grid)
            except (benchmarks.BenchmarkChoiceError, KeyError) as e:
                raise CommandError(f"cannot calibrate with {bench} {grid}: {e}") from None
            mclass.calibration_benchmark, mclass.calibration_grid = bench, grid
        if opts["boots"] is not None:
            if opts["boots"] < 1:
                raise CommandError("--boots must be at least 1")
            mclass.calibration_boots = opts["boots"]
        mclass.reference_build = build
        mclass.save()
        self.stdout.write(
            f"{mclass.name}: reference build {build.pk} ({build.sha[:12]}), calibration "
            f"{mclass.calibration_benchmark} {mclass.calibration_grid} x {mclass.calibration_boots} boot(s)"
        )
        if opts["now"]:
            for runner in mclass.runners.filter(health="good"):
                try:
                    job = calibration.queue_for(runner)
                except calibration.CalibrationUnavailable as e:
                    # One runner that cannot take it (it does not give the
                    # class's clock) must not stop the others' calibrations.
                    self.stdout.write(f"{runner.name}: no calibration queued: {e}")
                    continue
                self.stdout.write(f"calibration job {job.pk} queued for {runner.name}")

    def _build(self, mclass: MachineClass, ref: str) -> KernelBuild:
        done = KernelBuild.objects.filter(arch=mclass.arch, status=KernelBuild.Status.DONE)
        if ref.isdigit() and len(ref) < 12:
            build = done.filter(pk=int(ref)).first()
        else:
            found = list(done.filter(sha__startswith=ref.lower()).order_by("-id")[:2])
            if len({b.sha for b in found}) > 1:
                raise CommandError(f"{ref!r} matches more than one built sha: give more of it, or the build id")
            build = found[0] if found else None
        if build is None:
            raise CommandError(
                f"no finished {mclass.arch} build {ref!r}: build the kernel first (submit it, or track a branch "
                "that contains it), then give its build id or sha"
            )
        return build
