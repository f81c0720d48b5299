"""A submission's stored raw output as mmtests result directories.

Every boot's raw output is kept as the benchmark printed it; each benchmark
knows which files mmtests would have written for the same run
(`Benchmark.mmtests_runs`, formats from mmtests at 74aced35). Laid out as
`<run>/iter-<boot>/<mmtests benchmark>/logs/<file>`, the tree is what
mmtests' own `extract-mmtests.pl -d <dir> -b <benchmark> -n <run>` and
`compare-mmtests.pl` read, so a developer can check kperf's numbers with
mmtests' extractors on kperf's raw data.

Beside mmtests' files each boot gets `iter-<boot>/kernel.version`, the
`uname -a` line mmtests' `collect_kernel_info` (shellpacks/common.sh) writes
there, and each run a `kperf-run.json` (kperf.mmtests.KPERF_RUN_FILE): what
mmtests' files cannot say and an import needs to judge the run as kperf did
(clock, profile, machine shape, kernel). mmtests' extractors list only the
`iter-*` directories of a run and the files they know under `logs/`, so
neither is in their way.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db.models import Q, QuerySet

from kperf.core.builds import archive
from kperf.core.models import BootRecord, Job, Submission
from kperf.mmtests import KPERF_RUN_FILE, KPERF_RUN_FORMAT, RunSetup
from kperf_runner import benchmarks as registry

# `uname -m` of each kperf arch.
UNAME_MACHINE = {"x86_64": "x86_64", "arm64": "aarch64"}


class ExportError(ValueError):
    """Nothing to export; the message says why and what to ask for instead."""


@dataclass
class MmtestsExport:
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text
    runs: list[str] = field(default_factory=list)
    boots: int = 0
    # Boots whose output is not a complete run (say why), left out.
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Setup(RunSetup):
    """Where and how a boot was measured: one mmtests run is one of these."""

    # RunSetup's fields, as a query's columns from a boot record.
    COLUMNS = (
        "job__build__sha",
        "job__build__arch",
        "job__machine_class__name",
        "job__clock",
        "job__build__profile",
        "job__vcpus",
        "job__numa_nodes",
    )

    def describe(self) -> str:
        return (
            f"{self.machine_class} ({self.arch}, {self.clock} clock, {self.profile} profile, "
            f"{self.vcpus} vCPUs, {self.numa_nodes} NUMA nodes)"
        )


def kernel_version_line(record: BootRecord) -> str | None:
    """The booted kernel as mmtests' `uname -a > kernel.version` has it:
    `Linux <nodename> <release> <version> <machine> GNU/Linux`.

    kperf's init reports the release (`uname -r`) only, so the version field
    (`uname -v`, "#1 SMP ..." on a distribution) names the build instead,
    `kperf:<commit>`. The node name is the machine's where the runner
    recorded one (kexec), else the kernel's default `(none)`: kperf's init
    sets none. None when the boot has no release recorded.
    """
    release = record.environment.get("kernel_release") if isinstance(record.environment, dict) else None
    if not isinstance(release, str) or not release.strip():
        return None
    host = record.environment.get("machine_hostname")
    node = host.strip() if isinstance(host, str) and host.strip() else "(none)"
    build = record.job.build
    machine = UNAME_MACHINE.get(build.arch, build.arch)
    return f"Linux {node} {release.strip()} kperf:{build.sha[:12]} {machine} GNU/Linux\n"


def _one_grid(records: QuerySet[BootRecord], what: str) -> None:
    """ExportError when the boots ran several grids: two grids of one benchmark name their runs'
    points alike, and one mmtests run would mix them."""
    grids = sorted(set(records.order_by().values_list("job__grid", flat=True)))
    if len(grids) > 1:
        raise ExportError(
            f"{what} ran {len(grids)} grids ({', '.join(grids)}): export one at a time with --grid (grid= in the API)"
        )


def mmtests_tree(
    sub: Submission,
    side: str,
    benchmark: str,
    clock: str | None = None,
    machine_class: str | None = None,
    grid: str | None = None,
) -> MmtestsExport:
    """The boots of one side of a submission, one benchmark (and clock, machine class, grid), as mmtests runs.

    Boots are numbered in the order they ran: iter-0, iter-1, ... (mmtests'
    iterations). They must all have been measured alike (Setup): boots of
    two clocks or machine shapes in one mmtests run would be judged as one.
    """
    if side not in ("base", "head"):
        raise ExportError(f"side must be base or head, not {side!r}")
    try:
        bench = registry.get_benchmark(benchmark)
    except registry.UnknownBenchmark as e:
        raise ExportError(str(e)) from None
    # The side's own boots and the base boots it shares (kperf.core.lab.sharing).
    mine = Q(job__submission=sub, job__side=side) | Q(job__sharers__submission=sub, job__sharers__side=side)
    # distinct: a job shared by several submissions joins once per sharer.
    records = (
        BootRecord.objects.filter(mine, job__benchmark=benchmark, job__status=Job.Status.DONE)
        .select_related("job__build")
        .distinct()
    )
    if clock is not None:
        records = records.filter(job__clock=clock)
    if machine_class is not None:
        records = records.filter(job__machine_class__name=machine_class)
    if grid is not None:
        records = records.filter(job__grid=grid)
    _one_grid(records, f"submission {sub.pk}'s {side} boots of {benchmark}")
    setups = {Setup(*row) for row in records.order_by().values_list(*Setup.COLUMNS)}
    if len(setups) > 1:
        raise ExportError(
            f"submission {sub.pk}'s {side} boots of {benchmark} were measured {len(setups)} ways: "
            f"{'; '.join(sorted(s.describe() for s in setups))}. One mmtests run is one machine measured one way: "
            "export one at a time with --machine-class and --clock (machine_class= and clock= in the API)"
        )
    out = MmtestsExport()
    versions: dict[str, str | None] = {}
    boots_of: dict[str, int] = {}
    for record in records.order_by("job__seq", "job__id", "boot"):
        try:
            runs = bench.mmtests_runs(archive.raw_output(record), record.job.params)
        except ValueError as e:
            out.skipped.append(f"job {record.job_id} boot {record.boot}: {e}")
            continue
        version = kernel_version_line(record)
        for run, files in runs.items():
            if run not in out.runs:
                out.runs.append(run)
            iter_dir = f"{run}/iter-{out.boots}"
            for name, text in files.items():
                out.files[f"{iter_dir}/{bench.mmtests_name}/logs/{name}"] = text
            if version is not None:
                out.files[f"{iter_dir}/kernel.version"] = version
            versions.setdefault(run, version)
            boots_of[run] = boots_of.get(run, 0) + 1
        out.boots += 1
    if not out.boots:
        why = f"; {'; '.join(out.skipped)}" if out.skipped else ""
        raise ExportError(f"submission {sub.pk} has no finished {benchmark} boot on the {side} side{why}")
    (setup,) = setups
    for run in out.runs:
        meta: dict[str, Any] = {
            "format": KPERF_RUN_FORMAT,
            **asdict(setup),
            # The first boot's line, as an import reads iter-0/kernel.version.
            "kernel_version": (versions[run] or "").strip() or None,
            "benchmark": benchmark,
            "submission": sub.pk,
            "side": side,
            "boots": boots_of[run],
        }
        out.files[f"{run}/{KPERF_RUN_FILE}"] = json.dumps(meta, indent=2, sort_keys=True) + "\n"
    return out
