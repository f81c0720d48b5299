"""What a comparison takes as known where the lab has no history of its own.

Under the instruction clock, a lab with tracked branches learns each metric's
boot noise and between-build part from them (kperf.core.submissions.analysis,
learned_priors and learned_build_priors). A new lab, or a machine class nobody
tracks, has none; this module gives what was measured instead:

- the between-build part: the lab's own perturbed-build record for the class
  (KPERF_BUILD_NOISE_RECORDS), else per metric the project's figure for the
  comparison's shape where it measured one (kperf.stats.build_spread: several
  vCPUs), else the project's bench figure (kperf.stats.builds.measured_build_prior);
- the boot noise of the metrics whose boots spread with the seeded phase: the
  lab's own spread for the comparison's shape (kperf.core.submissions.shape_spread),
  else the project's phase bench for the class's architecture and the
  submission's profile where it measured that shape (kperf.stats.boot_spread),
  so that two boots a side that happen to agree within each side are not
  taken for a metric that never moves. A metric with neither has an interval
  from its boots alone, and the page and the mail say so.

docs/statistics.md, "What an interval includes", says how each is used.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import QuerySet

from kperf import stats
from kperf.core.models import Clock, Job, MachineClass, Submission
from kperf.core.submissions import shape_spread
from kperf.stats import boot_spread, build_spread
from kperf.stats import builds as stats_builds

# The grid bench/build_noise.py boots: a spread measured on it says nothing of another grid's
# durations and iterations.
BENCH_GRID = "quick"
# Why an interval rests on its boots alone, said on the page, in the mail and by compare-kernels.
BOOTS_ALONE_WHY = "no boot spread measured yet for this profile, vCPUs, NUMA nodes and grid"


def _lab_build_record(mclass_id: int) -> stats_builds.MeasuredBuildNoise | None:
    """The lab's own perturbed-build record for this machine class (KPERF_BUILD_NOISE_RECORDS), if any."""
    if not settings.KPERF_BUILD_NOISE_RECORDS:
        return None
    return _record_named(MachineClass.objects.filter(pk=mclass_id).values_list("name", flat=True).first())


def _record_named(mclass_name: str | None) -> stats_builds.MeasuredBuildNoise | None:
    """The record KPERF_BUILD_NOISE_RECORDS gives the class of this name, or every class ("*")."""
    records: dict[str, stats_builds.MeasuredBuildNoise] = settings.KPERF_BUILD_NOISE_RECORDS
    return records.get(mclass_name or "") or records.get("*")


def measured_build_priors(
    mclass_id: int, bench: str, clock: str, metrics: list[str], profile: str = ""
) -> tuple[dict[str, stats.NoisePrior], str]:
    """The between-build part where the class has learned none, under the instruction clock, and
    where it comes from: the lab's own perturbed-build record for the class where it has one for
    the benchmark (KPERF_BUILD_NOISE_RECORDS); else, per metric, the project's figure for the
    comparison's shape where it measured one (kperf.stats.build_spread: several vCPUs, where a
    change elsewhere moves the page allocator); else the project's bench figure for the benchmark
    (kperf.stats.builds.measured_build_prior), so that two single builds whose boots agree exactly
    never get an interval of zero width (docs/statistics.md, "What an interval includes"). The wall
    clock's boots hold far more. `profile` is the kernels' (the submission's), else the class's."""
    if clock != Clock.INSTRUCTIONS:
        return {}, ""
    record = _lab_build_record(mclass_id)
    if record is not None and bench in record.priors:
        return {metric: record.priors[bench] for metric in metrics}, record.source
    default = stats_builds.measured_build_prior(bench)
    shape = MachineClass.objects.filter(pk=mclass_id).values_list("arch", "profile", "vcpus").first()
    if shape is not None:
        arch, class_profile, vcpus = shape
        per_metric = build_spread.parts_for(arch, profile or class_profile, vcpus, bench, metrics)
        if per_metric:
            source = build_spread.source_for(arch, profile or class_profile, vcpus, bench)
            others = sum(m not in per_metric for m in metrics)
            if others:
                source += f" ({others} of them from the {stats_builds.MEASURED_BUILD_SOURCE})"
            return {m: per_metric.get(m, default) for m in metrics}, source
    return {metric: default for metric in metrics}, stats_builds.MEASURED_BUILD_SOURCE


@dataclass(frozen=True)
class BootPriors:
    """The boot noise of the metrics with none learned from history: the priors, where they come
    from, and the metrics whose intervals rest on their boots alone (no spread measured for the shape)."""

    spread: dict[str, stats.NoisePrior]
    source: str
    boots_alone: tuple[str, ...] = ()


def measured_boot_priors(
    sub: Submission, mclass_id: int, bench: str, grid: str, clock: str, metrics: list[str]
) -> BootPriors:
    """Per metric of `metrics` (those with no noise learned from history), the boot noise measured
    without history, and where it comes from; nothing off the instruction clock (the wall clock's
    boots show their own spread).

    In order: the lab's own spread for the comparison's shape (kperf.core.submissions.shape_spread);
    the lab's own seeded record for the class (KPERF_BUILD_NOISE_RECORDS, for the submission's
    profile, one vCPU); the project's phase bench on the class's architecture, that profile and its
    vCPUs. The last two only where they measured what the comparison measures: its architecture,
    profile and vCPUs, the quick grid and no NUMA nodes. A metric none of them measured is in
    `boots_alone`."""
    if clock != Clock.INSTRUCTIONS or not metrics:
        return BootPriors({}, "")
    own = shape_spread.submission_spread(sub, mclass_id, bench, grid, clock, metrics)
    if own.measured:
        rest = [m for m in metrics if m not in own.measured]
        chosen = {m: p for m, p in own.priors.items() if m in metrics}
        return BootPriors(chosen, own.source if chosen else "", tuple(rest))
    bench_spread, source = _bench_boot_priors(sub, mclass_id, bench, grid, metrics)
    if source is None:
        return BootPriors({}, "", tuple(metrics))
    return BootPriors(bench_spread, source)


def _bench_boot_priors(
    sub: Submission, mclass_id: int, bench: str, grid: str, metrics: list[str]
) -> tuple[dict[str, stats.NoisePrior], str | None]:
    """The seeded records' spread (the lab's, else the project's) where they measured this shape;
    source None where they did not ("" where they did and no metric's boots spread)."""
    if grid != BENCH_GRID:
        return {}, None
    fields = ("name", "arch", "profile", "vcpus", "numa_nodes")
    mclass = MachineClass.objects.filter(pk=mclass_id).values_list(*fields).first()
    if mclass is None:
        return {}, None
    name, arch, class_profile, vcpus, numa_nodes = mclass
    if numa_nodes:
        return {}, None
    profile = sub.profile or class_profile
    # The lab's own seeded record for the class first, where it measured this profile (on one vCPU).
    record = _record_named(name)
    if vcpus <= 1 and record is not None and record.profile == profile and record.boot_spread.get(bench):
        chosen = {m: record.boot_spread[bench][m] for m in metrics if m in record.boot_spread[bench]}
        return chosen, record.source if chosen else ""
    if not boot_spread.measured_shape(arch, profile, bench, vcpus):
        return {}, None
    spread = boot_spread.project_spread(arch, profile, bench, vcpus)
    chosen = {m: spread[m] for m in metrics if m in spread}
    where = f"{arch} `{profile}`" + (f" with {vcpus} vCPUs" if vcpus > 1 else "")
    return chosen, f"{boot_spread.PROJECT_SOURCE} on {where}" if chosen else ""


@dataclass(frozen=True)
class KernelPriors:
    """What two stored kernels' comparison (analysis.compare_kernels) takes as known, and the
    method line's words for it."""

    spread: dict[str, stats.NoisePrior]
    builds: dict[str, stats.NoisePrior]
    method: str


def kernel_priors(
    mclass: MachineClass | None, bench: str, clock: str, compared: QuerySet[Job], metrics: list[str]
) -> KernelPriors:
    """For two stored kernels compared on a class under the instruction clock: the between-build
    part measured without history (the kernels are one build each, as a submission's are) and the
    class's stored boot spread for the shape of the compared boots (their grid, the class's profile
    and VM shape), without those boots themselves. Off the instruction clock, nothing."""
    if mclass is None or clock != Clock.INSTRUCTIONS or not metrics:
        return KernelPriors({}, {}, "")
    builds, build_source = measured_build_priors(mclass.pk, bench, clock, metrics)
    parts = [f"between-build noise from the {build_source}"]
    grids = sorted(set(compared.values_list("grid", flat=True)))
    own = shape_spread.NONE
    if len(grids) == 1:
        shape = shape_spread.Shape(mclass.pk, clock, mclass.profile, mclass.vcpus, mclass.numa_nodes, bench, grids[0])
        own = shape_spread.spread_for(shape, metrics, set(compared.values_list("id", flat=True)))
    if own.priors:
        parts.append(f"boot noise for {len(own.priors)} of {len(metrics)} metrics from the {own.source}")
    alone = [m for m in metrics if m not in own.measured]
    if alone:
        parts.append(f"interval from boots alone for {len(alone)} of {len(metrics)} metrics ({BOOTS_ALONE_WHY})")
    return KernelPriors(own.priors, builds, "; ".join(parts))
