"""Samples that were not measured by kperf: imported mmtests runs.

An import becomes a finished one-boot Job on a KernelBuild marked as
imported (no artifacts), so the samples sit next to kperf's own and
`compare_kernels` treats both alike.

A run kperf exported says how it was measured (kperf.mmtests.KperfRun: clock,
configuration profile, vCPUs, NUMA nodes, arch); the import keeps it, so the
run is judged on its own clock's thresholds, and takes it only into a machine
class of that shape, the only boots the class compares
(kperf.core.results.summaries.default_boots). A plain mmtests run says none of
it: the wall clock, which mmtests times with, and the shape of old imports.
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
from kperf.core.models.builds import imported_digest
from kperf_kbuild.driver import DEFAULT_PROFILE, PROFILES

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


@dataclass(frozen=True)
class Measured:
    """How the imported boots were measured."""

    clock: str
    profile: str
    vcpus: int
    numa_nodes: int


# The largest vCPU or NUMA node count a job holds (a PositiveSmallIntegerField).
SHAPE_MAX = 32767


def measured(data: dict[str, Any], mclass: MachineClass) -> Measured:
    """The clock and shape an import says, checked against its machine class.

    A plain mmtests run says none: the wall clock and the shape imports
    always had (the build's default profile, no vCPUs or NUMA nodes given).
    """
    clock = data.get("clock")
    if clock is None:
        clock = Clock.WALL  # mmtests times every benchmark with the wall clock.
    elif clock not in Clock.values:
        raise KernelImportError(f"unknown clock {clock!r}: kperf's clocks are {', '.join(Clock.values)}")
    arch = data.get("arch")
    if arch is not None and arch != mclass.arch:
        raise KernelImportError(
            f"the run was measured on {arch!r}, but machine class {mclass.name} is {mclass.arch}: "
            f"import it into a machine class of {arch!r}"
        )
    shape = {key: data.get(key) for key in ("profile", "vcpus", "numa_nodes")}
    if all(value is None for value in shape.values()):
        return Measured(str(clock), DEFAULT_PROFILE, 0, 0)
    profile = shape["profile"]
    if profile not in PROFILES:
        raise KernelImportError(f"unknown configuration profile {profile!r}: kperf's are {', '.join(PROFILES)}")
    run = Measured(str(clock), str(profile), _count(shape, "vcpus"), _count(shape, "numa_nodes"))
    mine = Measured(run.clock, mclass.profile or DEFAULT_PROFILE, mclass.vcpus, mclass.numa_nodes)
    if run != mine:
        raise KernelImportError(
            f"the run was measured as {_shape(run)}, but machine class {mclass.name} measures {_shape(mine)} "
            "and compares only boots of its own shape: import it into a machine class of the run's shape "
            "(kperf-manage add_runner sets a class's --profile, --vcpus and --numa-nodes)"
        )
    return run


def _count(shape: dict[str, Any], key: str) -> int:
    value = shape[key]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= SHAPE_MAX:
        raise KernelImportError(f"{key} must be a count in 0..{SHAPE_MAX}, not {value!r}")
    return value


def _shape(m: Measured) -> str:
    return f"the {m.profile} profile with {m.vcpus} vCPUs and {m.numa_nodes} NUMA nodes"


# (benchmark, its (boot, metric, iteration, value) rows, raw output)
Checked = list[tuple[str, list[tuple[int, str, int, float]], str]]


def _checked_benchmarks(benchmarks: Any) -> Checked:
    """The import's benchmarks and samples, each checked (KernelImportError says what is wrong)."""
    if not isinstance(benchmarks, dict) or not benchmarks:
        raise KernelImportError("benchmarks must map benchmark names to their samples")
    checked: Checked = []
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
            # Which boot: a run kperf exported holds several (kperf.mmtests.ImportedBenchmark); else one.
            boot = s.get("boot", 0)
            if not isinstance(metric, str) or not rule[0].fullmatch(metric):
                raise KernelImportError(f"{name}: {metric!r} is not one of its metric names")
            if not _iteration(iteration) or not _iteration(boot) or not _finite(value):
                raise KernelImportError(
                    f"{name}: sample {s!r} needs an iteration (and a boot, if any) in 0..{ITERATION_MAX} "
                    "and a finite value"
                )
            rows.append((boot, metric, iteration, float(value)))
        if not rows:
            raise KernelImportError(f"{name}: no samples")
        checked.append((name, rows, str(content.get("raw_output", ""))[:1_000_000]))
    return checked


def import_mmtests(data: dict[str, Any]) -> ImportResult:
    sha = str(data.get("kernel_sha", ""))
    if not SHA_RE.match(sha):
        raise KernelImportError(f"kernel_sha must be the kernel's full 40-hex commit id, not {sha!r}")
    mclass = MachineClass.objects.filter(name=data.get("machine_class", "")).first()
    if mclass is None:
        known = ", ".join(MachineClass.objects.values_list("name", flat=True)) or "none yet"
        raise KernelImportError(f"unknown machine class {data.get('machine_class')!r} (known: {known})")
    checked = _checked_benchmarks(data.get("benchmarks"))
    how = measured(data, mclass)
    raw_env = data.get("environment")
    environment: dict[str, Any] = raw_env if isinstance(raw_env, dict) else {}
    run_name = str(data.get("run_name", ""))[:200]
    job_ids: list[int] = []
    with transaction.atomic():
        tree, _ = Tree.objects.get_or_create(url=IMPORTED_TREE)
        build, _ = KernelBuild.objects.get_or_create(
            sha=sha,
            arch=mclass.arch,
            # One imported build per profile: kernels of two profiles are two series.
            config_digest=imported_digest(how.profile),
            defaults={"tree": tree, "status": KernelBuild.Status.DONE, "phase": "imported", "profile": how.profile},
        )
        now = timezone.now()
        for name, rows, raw in checked:
            _, unit, hib = METRIC_RULES[name]
            for metric in {m for _, m, _, _ in rows}:
                MetricDef.objects.get_or_create(
                    name=metric, defaults={"benchmark": name, "unit": unit, "higher_is_better": hib}
                )
            # One one-boot job per boot, as kperf queues its own.
            for boot in sorted({b for b, _, _, _ in rows}):
                job = Job.objects.create(
                    build=build,
                    benchmark=name,
                    grid="mmtests-import",
                    params={"source": "mmtests", "run": run_name},
                    boots=1,
                    machine_class=mclass,
                    clock=how.clock,
                    vcpus=how.vcpus,
                    numa_nodes=how.numa_nodes,
                    status=Job.Status.DONE,
                    phase="imported",
                    started=now,
                    finished=now,
                )
                record = BootRecord.objects.create(
                    job=job,
                    attempt=1,
                    boot=0,
                    environment={**environment, "source": "mmtests", "clock": how.clock},
                    raw_output=raw,
                )
                Sample.objects.bulk_create(
                    [Sample(boot_record=record, metric=m, iteration=i, value=v) for b, m, i, v in rows if b == boot]
                )
                job_ids.append(job.pk)
    return ImportResult(jobs=job_ids, samples=sum(len(r) for _, r, _ in checked))
