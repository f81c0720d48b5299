"""A submission's stored raw output as mmtests result directories.

Every boot's raw output is kept as the benchmark printed it; each benchmark
knows which files mmtests would have written for the same run
(`Benchmark.mmtests_runs`, formats from mmtests at 74aced35). Laid out as
`<run>/iter-<boot>/<mmtests benchmark>/logs/<file>`, the tree is what
mmtests' own `extract-mmtests.pl -d <dir> -b <benchmark> -n <run>` and
`compare-mmtests.pl` read, so a developer can check kperf's numbers with
mmtests' extractors on kperf's raw data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q

from kperf.core.builds import archive
from kperf.core.models import BootRecord, Job, Submission
from kperf_runner import benchmarks as registry


class ExportError(ValueError):
    """Nothing to export; the message says why and what to ask for instead."""


@dataclass
class MmtestsExport:
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text
    runs: list[str] = field(default_factory=list)
    boots: int = 0
    # Boots whose output is not a complete run (say why), left out.
    skipped: list[str] = field(default_factory=list)


def mmtests_tree(sub: Submission, side: str, benchmark: str, clock: str | None = None) -> MmtestsExport:
    """The boots of one side of a submission, one benchmark (and clock), as mmtests runs.

    Boots are numbered in the order they ran, across every job and machine
    class of that side: iter-0, iter-1, ... (mmtests' iterations).
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
        .select_related("job")
        .distinct()
    )
    if clock is not None:
        records = records.filter(job__clock=clock)
    out = MmtestsExport()
    for record in records.order_by("job__seq", "job__id", "boot"):
        try:
            runs = bench.mmtests_runs(archive.raw_output(record), record.job.params)
        except ValueError as e:
            out.skipped.append(f"job {record.job_id} boot {record.boot}: {e}")
            continue
        for run, files in runs.items():
            if run not in out.runs:
                out.runs.append(run)
            for name, text in files.items():
                out.files[f"{run}/iter-{out.boots}/{bench.mmtests_name}/logs/{name}"] = text
        out.boots += 1
    if not out.boots:
        why = f"; {'; '.join(out.skipped)}" if out.skipped else ""
        raise ExportError(f"submission {sub.pk} has no finished {benchmark} boot on the {side} side{why}")
    return out
