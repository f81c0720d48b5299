"""Each machine shape's own boot spread, measured by the lab from its submissions' seeded base boots.

The phase bench (kperf.stats.boot_spread) measured how far one boot's summary
spreads with the seeded phase for one shape only: the quick grid, one vCPU, no
NUMA nodes. A comparison on any other shape (the `full` grid, two vCPUs, NUMA
nodes) had no prior for it, and its interval was Welch's on two boots a side:
6.1 against 6.12 with spawn's full grid on two vCPUs read +38.0% [+0.4, +89.8]
in a run whose repeat matched it to 0.03 points.

So the lab measures every shape it runs. A shape is the machine class, the
clock, the kernels' configuration profile, the vCPUs and NUMA nodes, the
benchmark and its grid (ShapeBootSpread). Its spread comes from the boots
every submission already makes of its base kernel, each at a seeded phase
(docs/statistics.md, "A phase per boot"): several boots of one build, whose
only differences are the phase, the boot and the iteration. After each
analysis the shape's spread is measured again from its latest seeded base
boots (WINDOW_JOBS of them, newest first: a lab's machines change) and stored.
The first submission of a shape nobody has measured gets
KPERF_SHAPE_SPREAD_BOOTS extra base boots, so the shape is measured by the
time the next one comes.

A comparison takes the stored spread as the boot noise of each metric with
none learned from history, in place of the phase bench's. Where the shape has
no spread with at least MIN_DOF degrees of freedom yet, and the phase bench
did not measure it either, the page and the mail say the interval is from the
boots alone. Only the instruction clock: its boots of one build agree so
well that two a side can agree by chance; the wall clock's show their spread.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from kperf import stats
from kperf.core.lifecycle import owners
from kperf.core.models import Clock, Job, KernelBuild, MachineClass, Sample, ShapeBootSpread, Submission
from kperf.stats import boot_spread

log = logging.getLogger(__name__)

# Fewer degrees of freedom than this (four boots of one kernel) and the spread is too rough to
# stand for the shape: the comparison says its interval is from the boots alone.
MIN_DOF = 3.0
# The latest seeded base boots a shape's spread is measured from. Past about 30 degrees of freedom
# more adds nothing (the A/B test counts a prior for at most abtest.PRIOR_DOF_CAP), and a window
# lets the spread follow the lab's machines.
WINDOW_JOBS = 64


@dataclass(frozen=True)
class Shape:
    """What a boot's spread depends on besides the kernel (ShapeBootSpread's key but the metric)."""

    machine_class_id: int
    clock: str
    profile: str
    vcpus: int
    numa_nodes: int
    benchmark: str
    grid: str

    def fields(self) -> dict[str, Any]:
        return {
            "machine_class_id": self.machine_class_id,
            "clock": self.clock,
            "profile": self.profile,
            "vcpus": self.vcpus,
            "numa_nodes": self.numa_nodes,
            "benchmark": self.benchmark,
            "grid": self.grid,
        }


@dataclass(frozen=True)
class ShapePriors:
    """The stored spread of a comparison's shape: the priors (metrics whose boots spread), every
    metric measured (spread or not), and where it comes from for the method line."""

    priors: dict[str, stats.NoisePrior]
    measured: frozenset[str]
    source: str


NONE = ShapePriors({}, frozenset(), "")


def shape_of(sub: Submission, mclass_id: int, bench: str, grid: str, clock: str) -> Shape | None:
    """The shape of one comparison of `sub`: its head boots' (the base's are the same by sharing's rules)."""
    row = (
        Job.objects.filter(
            submission=sub, machine_class_id=mclass_id, benchmark=bench, grid=grid, clock=clock, side="head"
        )
        .values_list("build__profile", "vcpus", "numa_nodes")
        .first()
    )
    if row is None:
        return None
    profile, vcpus, numa_nodes = row
    return Shape(mclass_id, clock, profile, vcpus, numa_nodes, bench, grid)


def seeded_base_jobs(shape: Shape) -> QuerySet[Job]:
    """Submissions' finished base boots of this shape, each at a seeded phase, measured as kperf
    boots every kernel (no boot parameters or THP mode of their own), not marked suspect."""
    return (
        Job.objects.filter(
            status=Job.Status.DONE,
            side="base",
            submission__isnull=False,
            machine_class_id=shape.machine_class_id,
            clock=shape.clock,
            build__profile=shape.profile,
            vcpus=shape.vcpus,
            numa_nodes=shape.numa_nodes,
            benchmark=shape.benchmark,
            grid=shape.grid,
            boot_params="",
            thp="",
            boots=1,
            suspect_note="",
            boot_records__environment__phase_span_us__gt=0,
        )
        .distinct()
        .order_by("-finished", "-id")
    )


def _runs(job_ids: Iterable[int]) -> dict[str, dict[str, list[list[float]]]]:
    """{build id: {metric: boots of iterations}} of these jobs."""
    per_boot: dict[tuple[int, str, int], dict[int, float]] = defaultdict(dict)
    rows = (
        Sample.objects.filter(boot_record__job_id__in=list(job_ids))
        .values_list("boot_record__job__build_id", "metric", "boot_record_id", "iteration", "value")
        .order_by("boot_record_id", "iteration")
    )
    for build, metric, boot, iteration, value in rows:
        per_boot[(build, metric, boot)][iteration] = value
    runs: dict[str, dict[str, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    for (build, metric, _), iters in per_boot.items():
        runs[str(build)][metric].append([iters[i] for i in sorted(iters)])
    return runs


def measure(shape: Shape) -> int:
    """Measure the shape's spread again from its latest seeded base boots and store it; returns how
    many metrics were stored."""
    jobs = list(seeded_base_jobs(shape).values_list("id", flat=True)[:WINDOW_JOBS])
    spreads = boot_spread.measured_spread(_runs(jobs))
    now = timezone.now()
    for metric, spread in spreads.items():
        ShapeBootSpread.objects.update_or_create(
            **shape.fields(),
            metric=metric,
            defaults={
                "sd": spread.sd,
                "dof": spread.dof,
                "boots": spread.boots,
                "kernels": spread.kernels,
                "jobs": sorted(jobs),
                "measured": now,
            },
        )
    return len(spreads)


def measure_for(sub: Submission, groups: Iterable[tuple[int, str, str, str]]) -> None:
    """After an analysis: the spread of every instruction-clock shape `sub` compared on, with its
    base boots in."""
    for mclass_id, bench, grid, clock in groups:
        if clock != Clock.INSTRUCTIONS:
            continue
        shape = shape_of(sub, mclass_id, bench, grid, clock)
        if shape is None:
            continue
        try:
            # In a savepoint: a failure here is kperf's, and must not cost the submission its verdicts.
            with transaction.atomic():
                stored = measure(shape)
        except owners.TEMPORARY:
            raise
        except Exception:  # logged; the next analysis of the shape measures it again
            log.exception("submission %s: measuring the boot spread of %s failed", sub.pk, shape)
            continue
        log.info("submission %s: boot spread of %s measured for %d metrics", sub.pk, shape, stored)


def _data_jobs(sub: Submission) -> set[int]:
    """The jobs whose boots are `sub`'s data: its own and those it shares."""
    return set(Job.objects.filter(Q(submission=sub) | Q(sharers__submission=sub)).values_list("id", flat=True))


def spread_for(shape: Shape, metrics: list[str], exclude: set[int]) -> ShapePriors:
    """The stored spread of `shape` for `metrics`, without the boots of the jobs in `exclude` (a
    comparison's own boots are its data, not its prior): measured again without them where the
    stored spread rests on any. Metrics with fewer than MIN_DOF degrees of freedom are not measured."""
    rows = list(ShapeBootSpread.objects.filter(**shape.fields(), metric__in=metrics))
    if not rows:
        return NONE
    spreads = {r.metric: boot_spread.Spread(r.sd, r.dof, r.boots, r.kernels) for r in rows}
    used = set().union(*(set(r.jobs) for r in rows))
    if used & exclude:
        spreads = boot_spread.measured_spread(_runs(used - exclude))
        spreads = {m: s for m, s in spreads.items() if m in metrics}
    kept = {m: s for m, s in spreads.items() if s.dof >= MIN_DOF}
    if not kept:
        return NONE
    priors = {m: p for m, s in kept.items() if (p := s.prior()) is not None}
    most = max(kept.values(), key=lambda s: s.dof)
    when = max(r.measured for r in rows).date().isoformat()
    kernels = f"{most.kernels} kernel{'s' if most.kernels != 1 else ''}"
    source = f"lab's boot spread for this shape ({most.boots} seeded base boots of {kernels}, {when})"
    return ShapePriors(priors, frozenset(kept), source)


def submission_spread(
    sub: Submission, mclass_id: int, bench: str, grid: str, clock: str, metrics: list[str]
) -> ShapePriors:
    """The stored spread of one comparison's shape, without `sub`'s own boots."""
    if clock != Clock.INSTRUCTIONS or not metrics:
        return NONE
    shape = shape_of(sub, mclass_id, bench, grid, clock)
    return NONE if shape is None else spread_for(shape, metrics, _data_jobs(sub))


def is_measured(shape: Shape) -> bool:
    """Whether the shape has a spread the analysis uses."""
    return ShapeBootSpread.objects.filter(**shape.fields(), dof__gte=MIN_DOF).exists()


def extra_base_boots(sub: Submission, base: KernelBuild, mclass: MachineClass, bench: str, grid: str) -> int:
    """The base boots to add to `sub` to measure a shape nobody has measured yet: KPERF_SHAPE_SPREAD_BOOTS
    on the instruction clock, for boots measured as kperf boots every kernel; none where the shape
    is measured, or another submission's boots of one base build, queued or running, will be enough."""
    wanted = int(settings.KPERF_SHAPE_SPREAD_BOOTS)
    clock = Job.clock_for(mclass, bench, sub)
    if wanted <= 0 or clock != Clock.INSTRUCTIONS or sub.boot_params or sub.thp:
        return 0
    shape = Shape(mclass.pk, clock, base.profile, mclass.vcpus, mclass.numa_nodes, bench, grid)
    if is_measured(shape):
        return 0
    pending = (
        Job.objects.filter(
            status__in=(Job.Status.QUEUED, Job.Status.LEASED),
            side="base",
            submission__isnull=False,
            machine_class=mclass,
            clock=clock,
            build__profile=base.profile,
            vcpus=mclass.vcpus,
            numa_nodes=mclass.numa_nodes,
            benchmark=bench,
            grid=grid,
            boot_params="",
            thp="",
        )
        .exclude(submission=sub)
        .values_list("build_id", flat=True)
    )
    per_build: dict[int, int] = defaultdict(int)
    for build_id in pending:
        per_build[build_id] += 1
    if max(per_build.values(), default=0) >= MIN_DOF + 1:
        return 0
    return wanted


def queue_extra_base_boots(
    sub: Submission, base: KernelBuild, mclass: MachineClass, bench: str, grid: str, params: dict[str, object]
) -> int:
    """Queue extra_base_boots' boots of the base after the comparison's own (so the first look's
    base and head boots are claimed first); returns how many. They are base boots like the others:
    the comparison uses them too."""
    extra = extra_base_boots(sub, base, mclass, bench, grid)
    last = Job.objects.filter(submission=sub).aggregate(m=Max("seq"))["m"]
    seq = 0 if last is None else last + 1
    for n in range(extra):
        Job.queue_one_boot(base, mclass, bench, grid, params, seq + n, submission=sub, side="base")
    if extra:
        log.info(
            "submission %s: %d extra base boots of %s %s on %s measure its shape's boot spread",
            sub.pk,
            extra,
            bench,
            grid,
            mclass.name,
        )
    return extra
