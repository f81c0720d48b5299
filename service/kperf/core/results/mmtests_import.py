"""Samples that were not measured by kperf: imported mmtests runs.

An import becomes a finished one-boot Job on a KernelBuild marked as
imported (no artifacts), so the samples sit next to kperf's own and
`compare_kernels` treats both alike.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from kperf.core.builds.gitops import SHA_RE
from kperf.core.models import BootRecord, Clock, Job, KernelBuild, MachineClass, MetricDef, Sample, Tree
from kperf.core.models.builds import IMPORTED_DIGEST

IMPORTED_TREE = "imported:mmtests"

# (metric pattern, unit, higher is better) per benchmark, as the registry names them.
METRIC_RULES: dict[str, tuple[re.Pattern[str], str, bool]] = {
    "aim9": (re.compile(r"(page|brk|exec|fork)_test"), "ops/sec", True),
    "pagealloc": (re.compile(r"(alloc|free|total)-odr\d+-\d+"), "cycles", False),
    "pft": (re.compile(r"faults/(sec|cpu)-(threads|processes)-\d+"), "faults/s", True),
    "spawn": (re.compile(r"spawn-vmas-\d+"), "forks/s", True),
}


# The largest iteration the samples' integer column holds.
ITERATION_MAX = 2**31 - 1


def _iteration(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= ITERATION_MAX


def _finite(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


class KernelImportError(ValueError):
    """A bad import; the message says what and what to do."""


@dataclass
class ImportResult:
    jobs: list[int]
    samples: int


def import_mmtests(data: dict[str, Any]) -> ImportResult:
    sha = str(data.get("kernel_sha", ""))
    if not SHA_RE.match(sha):
        raise KernelImportError(f"kernel_sha must be the kernel's full 40-hex commit id, not {sha!r}")
    mclass = MachineClass.objects.filter(name=data.get("machine_class", "")).first()
    if mclass is None:
        known = ", ".join(MachineClass.objects.values_list("name", flat=True)) or "none yet"
        raise KernelImportError(f"unknown machine class {data.get('machine_class')!r} (known: {known})")
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, dict) or not benchmarks:
        raise KernelImportError("benchmarks must map benchmark names to their samples")
    checked: list[tuple[str, list[tuple[str, int, float]], str]] = []
    for name, content in benchmarks.items():
        rule = METRIC_RULES.get(name)
        if rule is None:
            raise KernelImportError(f"unknown benchmark {name!r}: kperf imports {', '.join(METRIC_RULES)}")
        rows = []
        samples = content.get("samples", [])
        if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
            raise KernelImportError(f"{name}: samples must be a list of {{metric, iteration, value}} objects")
        for s in samples:
            metric, iteration, value = s.get("metric"), s.get("iteration"), s.get("value")
            if not isinstance(metric, str) or not rule[0].fullmatch(metric):
                raise KernelImportError(f"{name}: {metric!r} is not one of its metric names")
            if not _iteration(iteration) or not _finite(value):
                raise KernelImportError(
                    f"{name}: sample {s!r} needs an iteration in 0..{ITERATION_MAX} and a finite value"
                )
            rows.append((metric, iteration, float(value)))
        if not rows:
            raise KernelImportError(f"{name}: no samples")
        checked.append((name, rows, str(content.get("raw_output", ""))[:1_000_000]))

    raw_env = data.get("environment")
    environment: dict[str, Any] = raw_env if isinstance(raw_env, dict) else {}
    run_name = str(data.get("run_name", ""))[:200]
    job_ids: list[int] = []
    with transaction.atomic():
        tree, _ = Tree.objects.get_or_create(url=IMPORTED_TREE)
        build, _ = KernelBuild.objects.get_or_create(
            sha=sha,
            arch=mclass.arch,
            config_digest=IMPORTED_DIGEST,
            defaults={"tree": tree, "status": KernelBuild.Status.DONE, "phase": "imported"},
        )
        now = timezone.now()
        for name, rows, raw in checked:
            _, unit, hib = METRIC_RULES[name]
            for metric in {m for m, _, _ in rows}:
                MetricDef.objects.get_or_create(
                    name=metric, defaults={"benchmark": name, "unit": unit, "higher_is_better": hib}
                )
            job = Job.objects.create(
                build=build,
                benchmark=name,
                grid="mmtests-import",
                params={"source": "mmtests", "run": run_name},
                boots=1,
                machine_class=mclass,
                # mmtests times every benchmark with the wall clock.
                clock=Clock.WALL,
                status=Job.Status.DONE,
                phase="imported",
                started=now,
                finished=now,
            )
            record = BootRecord.objects.create(
                job=job, attempt=1, boot=0, environment={**environment, "source": "mmtests"}, raw_output=raw
            )
            Sample.objects.bulk_create([Sample(boot_record=record, metric=m, iteration=i, value=v) for m, i, v in rows])
            job_ids.append(job.pk)
    return ImportResult(jobs=job_ids, samples=sum(len(r) for _, r, _ in checked))
