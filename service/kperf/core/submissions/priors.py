"""What a comparison takes as known where the lab has no history of its own.

Under the instruction clock, a lab with tracked branches learns each metric's
boot noise and between-build part from them (kperf.core.submissions.analysis,
learned_priors and learned_build_priors). A new lab, or a machine class nobody
tracks, has none; this module gives what was measured instead:

- the between-build part: the lab's own perturbed-build record for the class
  (KPERF_BUILD_NOISE_RECORDS), else the project's bench figure
  (kperf.stats.builds.measured_build_prior);
- the boot noise of the metrics whose boots spread with the seeded phase: the
  project's phase bench for the class's architecture and the submission's
  profile (kperf.stats.boot_spread), so that two boots a side that happen to
  agree within each side are not taken for a metric that never moves.

docs/statistics.md, "What an interval includes", says how each is used.
"""

from __future__ import annotations

from django.conf import settings

from kperf import stats
from kperf.core.models import Clock, MachineClass, Submission
from kperf.stats import boot_spread
from kperf.stats import builds as stats_builds

# The grid bench/build_noise.py boots: a spread measured on it says nothing of another grid's
# durations and iterations.
BENCH_GRID = "quick"


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
    mclass_id: int, bench: str, clock: str, metrics: list[str]
) -> tuple[dict[str, stats.NoisePrior], str]:
    """The between-build part where the class has learned none, under the instruction clock, and
    where it comes from: the lab's own perturbed-build record for the class where it has one for
    the benchmark (KPERF_BUILD_NOISE_RECORDS), else the project's bench figure
    (kperf.stats.builds.measured_build_prior), so that two single builds whose boots agree exactly
    never get an interval of zero width (docs/statistics.md, "What an interval includes"). The wall
    clock's boots hold far more."""
    if clock != Clock.INSTRUCTIONS:
        return {}, ""
    record = _lab_build_record(mclass_id)
    if record is not None and bench in record.priors:
        prior, source = record.priors[bench], record.source
    else:
        prior, source = stats_builds.measured_build_prior(bench), stats_builds.MEASURED_BUILD_SOURCE
    return {metric: prior for metric in metrics}, source


def measured_boot_priors(
    sub: Submission, mclass_id: int, bench: str, clock: str, metrics: list[str]
) -> tuple[dict[str, stats.NoisePrior], str]:
    """Per metric of `metrics` (those with no noise learned from history), the boot noise the lab's
    own seeded record for the class measured (KPERF_BUILD_NOISE_RECORDS, for the submission's
    profile), else the project's phase bench on the class's architecture and that profile, and
    where it comes from; nothing off the instruction clock (the wall clock's boots show their own
    spread) or where the bench has not measured what the comparison measures: its architecture
    and profile, the quick grid, one vCPU and no NUMA nodes."""
    if clock != Clock.INSTRUCTIONS or not metrics or sub.grid != BENCH_GRID:
        return {}, ""
    fields = ("name", "arch", "profile", "vcpus", "numa_nodes")
    mclass = MachineClass.objects.filter(pk=mclass_id).values_list(*fields).first()
    if mclass is None:
        return {}, ""
    name, arch, class_profile, vcpus, numa_nodes = mclass
    if vcpus > 1 or numa_nodes:
        return {}, ""
    profile = sub.profile or class_profile
    # The lab's own seeded record for the class first, where it measured this profile.
    record = _record_named(name)
    if record is not None and record.profile == profile and record.boot_spread.get(bench):
        chosen = {m: record.boot_spread[bench][m] for m in metrics if m in record.boot_spread[bench]}
        return chosen, record.source if chosen else ""
    spread = boot_spread.project_spread(arch, profile, bench)
    chosen = {m: spread[m] for m in metrics if m in spread}
    return chosen, f"{boot_spread.PROJECT_SOURCE} on {arch} `{profile}`" if chosen else ""
