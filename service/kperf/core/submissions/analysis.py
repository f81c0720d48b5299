"""Turn a submission's samples into comparisons (the ORM side of kperf.stats)."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from typing_extensions import TypedDict

from kperf import stats
from kperf.core import benchmarks
from kperf.core.lab import sharing
from kperf.core.lifecycle import owners, states
from kperf.core.models import (
    BootRecord,
    Clock,
    Comparison,
    Job,
    MachineClass,
    MetricDef,
    Sample,
    SharedJob,
    Submission,
    SubmissionBuild,
)
from kperf.core.results import drift_pools, noise_pools, outcome, summaries, sweeps
from kperf.core.results.noise_report import requested_clock
from kperf.core.submissions import priors as priors_without_history
from kperf.core.submissions import shape_spread, verdicts
from kperf.stats import noise, sequential, summary
from kperf_kbuild.driver import DEFAULT_PROFILE

log = logging.getLogger(__name__)


Group = tuple[int, str, str, str]  # machine class id, benchmark, grid, clock: what one comparison covers


def load_boots(sub: Submission, only: Group | None = None) -> dict[Group, dict[str, dict[str, list[list[float]]]]]:
    """{(machine class id, benchmark, grid, clock): {metric: {"base": boots, "head": boots}}}, boots in run order.

    The grid and the clock are part of the key: samples of two clocks are two
    metrics, and two grids of one benchmark name their metrics alike, so
    neither ever meets another in one comparison. Base boots shared with other submissions
    (kperf.core.lab.sharing) count on the side the submission shares them for.
    `only`: that comparison's boots alone.
    """
    shared = _shared_sides(sub)
    per_boot: dict[tuple[int, str, str, str, str, str, int], dict[int, float]] = defaultdict(dict)
    samples = Sample.objects.filter(
        Q(boot_record__job__submission=sub) | Q(boot_record__job_id__in=list(shared)),
        boot_record__job__status=Job.Status.DONE,
    )
    if only is not None:
        samples = samples.filter(
            boot_record__job__machine_class_id=only[0],
            boot_record__job__benchmark=only[1],
            boot_record__job__grid=only[2],
            boot_record__job__clock=only[3],
        )
    rows = samples.values_list(
        "boot_record__job__machine_class_id",
        "boot_record__job__benchmark",
        "boot_record__job__grid",
        "boot_record__job__clock",
        "metric",
        "boot_record__job_id",
        "boot_record__job__side",
        "boot_record_id",
        "iteration",
        "value",
    ).order_by("boot_record__job__seq", "boot_record__job_id", "boot_record__boot", "iteration")
    for mclass, bench, grid, clock, metric, job_id, side, boot_id, iteration, value in rows:
        per_boot[(mclass, bench, grid, clock, metric, shared.get(job_id, side), boot_id)][iteration] = value
    out: dict[Group, dict[str, dict[str, list[list[float]]]]] = defaultdict(
        lambda: defaultdict(lambda: {"base": [], "head": []})
    )
    for (mclass, bench, grid, clock, metric, side, _), iters in per_boot.items():
        out[(mclass, bench, grid, clock)][metric][side].append([iters[i] for i in sorted(iters)])
    return out


def _shared_sides(sub: Submission) -> dict[int, str]:
    """{job id: side} of the jobs `sub` shares."""
    return dict(SharedJob.objects.filter(submission=sub).values_list("job_id", "side"))


def shared_base_boots(sub: Submission) -> dict[Group, int]:
    """How many finished base boots of each comparison `sub` shares with other submissions."""
    counts: dict[Group, int] = defaultdict(int)
    rows = SharedJob.objects.filter(
        submission=sub, side="base", job__status=Job.Status.DONE, job__boot_records__isnull=False
    ).values_list("job__machine_class_id", "job__benchmark", "job__grid", "job__clock")
    for group in rows:
        counts[group] += 1
    return counts


def phased_boots(sub: Submission) -> dict[Group, tuple[int, int]]:
    """Per comparison, (boots measured at a seeded phase, boots): what the page says the interval holds
    (docs/machine-tuning.md, "A phase per boot"). Boots from runners before phases record none."""
    counts: dict[Group, list[int]] = defaultdict(lambda: [0, 0])
    rows = BootRecord.objects.filter(
        Q(job__submission=sub) | Q(job_id__in=list(_shared_sides(sub))), job__status=Job.Status.DONE
    ).values_list("job__machine_class_id", "job__benchmark", "job__grid", "job__clock", "environment__phase_span_us")
    for mclass_id, bench, grid, clock, span in rows:
        entry = counts[(mclass_id, bench, grid, clock)]
        entry[0] += isinstance(span, int) and span > 0
        entry[1] += 1
    return {group: (phased, total) for group, (phased, total) in counts.items()}


def _interval_parts(phased: tuple[int, int]) -> str:
    """The method line's account of the boots in the interval."""
    done, total = phased
    if total and done == total:
        return f"; boots each at a seeded phase ({total} of {total})"
    if done:
        return f"; boots at a seeded phase: {done} of {total} (the others from runners without phases)"
    return ""


def _rounding_part(results: dict[str, stats.MetricResult]) -> str:
    """The method line's account of the readings' resolution (kperf.stats.abtest.reading_unit)."""
    rounded = sum("resolution" in r.extra for r in results.values())
    if not rounded:
        return ""
    return f"; the rounding of whole-number readings for {rounded} of {len(results)} metrics"


@dataclass(frozen=True)
class GroupLook:
    """One comparison's sequential look and what went into it."""

    inputs: dict[str, stats.MetricInput]
    look: sequential.Look
    plan: sequential.Plan
    priors: dict[str, stats.NoisePrior]
    builds: dict[str, stats.NoisePrior]
    measured: dict[str, stats.NoisePrior]
    measured_source: str  # where `measured` came from, for the method line
    # The boot noise measured without history (kperf.core.submissions.priors), and where it came from.
    spread: dict[str, stats.NoisePrior]
    spread_source: str
    # The metrics whose intervals rest on their boots alone: no spread measured for the shape.
    boots_alone: tuple[str, ...] = ()


def boots_per_side(metrics: dict[str, dict[str, list[list[float]]]]) -> int:
    """The boots per side a comparison has: its least measured metric's smaller side."""
    return min(min(len(s["base"]), len(s["head"])) for s in metrics.values())


def group_look(
    sub: Submission, defs: dict[str, MetricDef], group: Group, metrics: dict[str, dict[str, list[list[float]]]]
) -> GroupLook:
    """The sequential look of one comparison at the boots it has: the same
    inputs whether the look is the submission's analysis or an interim one
    (kperf.core.submissions.looks), so both decide alike."""
    mclass_id, bench, grid, clock = group
    priors = learned_priors(sub, mclass_id, bench, grid, clock, metrics)
    builds = learned_build_priors(mclass_id, bench, clock)
    measured, source = priors_without_history.measured_build_priors(
        mclass_id, bench, clock, [n for n in metrics if n not in builds], sub.profile
    )
    boot_priors = priors_without_history.measured_boot_priors(
        sub, mclass_id, bench, grid, clock, [n for n in metrics if n not in priors]
    )
    spread = boot_priors.spread
    inputs = {
        name: stats.MetricInput(
            base=sides["base"],
            head=sides["head"],
            higher_is_better=defs[name].higher_is_better,
            min_effect_pct=benchmarks.min_effect_pct(name, clock, sub.min_effect_pct, defs[name].benchmark),
            noise=priors.get(name) or spread.get(name),
            build_noise=builds.get(name) or measured.get(name),
        )
        for name, sides in metrics.items()
    }
    plan = benchmarks.look_plan(bench, grid, clock)
    look = sequential.sequential_look(inputs, sequential.look_number(plan, boots_per_side(metrics)), plan)
    return GroupLook(
        inputs, look, plan, priors, builds, measured, source, spread, boot_priors.source, boot_priors.boots_alone
    )


def judged_look(
    sub: Submission, defs: dict[str, MetricDef], group: Group, metrics: dict[str, dict[str, list[list[float]]]]
) -> tuple[GroupLook | None, dict[str, str]]:
    """group_look over the metrics kperf can judge, and for each metric it failed on, the note saying so.

    A metric whose input or test raises (a bug, kperf's and never the data's) must not cost the
    others their verdicts: the look is taken again without it. None: no metric could be judged.
    Each try runs in a savepoint, so a query that failed leaves the analysis' transaction usable.
    """
    try:
        return _look_in_savepoint(sub, defs, group, metrics), {}
    except owners.TEMPORARY:
        raise
    except Exception as exc:  # found below: which metrics fail alone
        log.exception("submission %s: the look of %s failed; looking at its metrics one by one", sub.pk, group)
        whole: Exception = exc
    failed: dict[str, str] = {}
    for name in sorted(metrics):
        try:
            _look_in_savepoint(sub, defs, group, {name: metrics[name]})
        except owners.TEMPORARY:
            raise
        except Exception as exc:  # this metric's failure: noted on its row
            failed[name] = verdicts.failure_note(exc)
    rest = {name: sides for name, sides in metrics.items() if name not in failed}
    if rest and failed:
        try:
            return _look_in_savepoint(sub, defs, group, rest), failed
        except owners.TEMPORARY:
            raise
        except Exception as exc:  # the rest fail together: nothing of the comparison is judged
            whole = exc
    # No metric fails alone, or the others fail together: kperf cannot judge the comparison.
    log.error("submission %s: no metric of %s could be judged", sub.pk, group)
    return None, {**dict.fromkeys(metrics, verdicts.failure_note(whole)), **failed}


def _look_in_savepoint(
    sub: Submission, defs: dict[str, MetricDef], group: Group, metrics: dict[str, dict[str, list[list[float]]]]
) -> GroupLook:
    with transaction.atomic():
        return group_look(sub, defs, group, metrics)


def method_line(taken: GroupLook, phased: tuple[int, int]) -> str:
    """What a comparison's verdicts rest on: the test, alpha spending and what history lent it."""
    inputs, n = taken.inputs, len(taken.inputs)
    learned_builds = sum(name in taken.builds for name in inputs)
    parts = [f"{stats.abtest.METHOD}; {taken.plan.spending} alpha spending"]
    if taken.priors:
        parts.append(f"noise learned from history for {len(taken.priors)} of {n} metrics")
    if learned_builds:
        parts.append(f"between-build noise learned for {learned_builds} of {n} metrics")
    if taken.measured:
        parts.append(f"between-build noise for {len(taken.measured)} of {n} metrics from the {taken.measured_source}")
    if taken.spread:
        parts.append(f"boot noise for {len(taken.spread)} of {n} metrics from the {taken.spread_source}")
    if taken.boots_alone:
        why = priors_without_history.BOOTS_ALONE_WHY
        parts.append(f"interval from boots alone for {len(taken.boots_alone)} of {n} metrics ({why})")
    return "; ".join(parts) + _interval_parts(phased) + _rounding_part(taken.look.results)


class NothingJudged(RuntimeError):
    """kperf could judge no metric of a submission: its message is the first metric's failure."""


# The method of a comparison kperf could judge no metric of (each metric's notes say what failed).
NOT_JUDGED = "not judged: kperf failed on every metric of this comparison (a kperf fault; see each metric's note)"


def _table(sub: Submission, taken: GroupLook) -> str:
    """The mmtests-style table; none, rather than no verdicts, if kperf fails to draw it."""
    try:
        return summary.format_table(taken.inputs, taken.look.results)
    except Exception:  # the verdicts matter more than their table
        log.exception("submission %s: drawing a comparison's table failed", sub.pk)
        return ""


def analyse_submission(sub_id: int) -> None:
    with transaction.atomic():
        sub = Submission.objects.select_for_update().get(pk=sub_id)
        if sub.status != Submission.Status.ANALYSING:
            return
        defs = {m.name: m for m in MetricDef.objects.all()}
        Comparison.objects.filter(submission=sub).delete()
        more_boots = False
        shared = shared_base_boots(sub)
        phases = phased_boots(sub)
        groups = load_boots(sub)
        # Metrics kperf fails on are stored as such beside the others' verdicts; when it can
        # judge nothing at all, there is no verdict to show: the analysis fails, saying so.
        judgeable = [judged_look(sub, defs, group, metrics) for group, metrics in groups.items()]
        if judgeable and all(taken is None for taken, _ in judgeable):
            raise NothingJudged(next(iter(judgeable[0][1].values()), "no metric"))
        for group, metrics, (taken, failed) in zip(groups, groups.values(), judgeable, strict=True):
            mclass_id, bench, grid, clock = group
            comp = Comparison.objects.create(
                submission=sub,
                machine_class_id=mclass_id,
                benchmark=bench,
                grid=grid,
                clock=clock,
                method=method_line(taken, phases.get(group, (0, 0))) if taken is not None else NOT_JUDGED,
                alpha=taken.plan.alpha if taken is not None else settings.KPERF_ALPHA,
                look=taken.look.look if taken is not None else 1,
                looks=len(taken.plan.looks) if taken is not None else 1,
                final=taken.look.decide if taken is not None else True,
                shared_base_boots=shared.get(group, 0),
                boots_alone=len(taken.boots_alone) if taken is not None else 0,
                table=_table(sub, taken) if taken is not None else "",
            )
            inputs = taken.inputs if taken is not None else {}
            results = taken.look.results if taken is not None else {}
            verdicts.store_metrics(comp, inputs, results, metrics, defs, failed)
            if taken is not None and not taken.look.decide and taken.look.more_boots > 0:
                more_boots = True
                rerun(sub, group, taken.look)
        # Its seeded base boots are in: each shape's spread, for the comparisons after this one.
        shape_spread.measure_for(sub, groups)
        if more_boots:
            sub.save(update_fields=["reruns"])
            states.move(sub, Submission.Status.TESTING)
            log.info("submission %s: inconclusive at this look, more boots queued", sub_id)
            return
        # Done, and the lifecycle sends the result mail (SUBMISSION.finished).
        owners.finish(sub)
    log.info("submission %s analysed", sub_id)


def rerun(sub: Submission, group: Group, look: sequential.Look) -> None:
    """Queue more boots for one comparison and say so on the submission."""
    mclass_id, bench, grid, clock = group
    # The head boots are always the submission's own; its base boots may all be shared.
    jobs = Job.objects.filter(submission=sub, machine_class_id=mclass_id, benchmark=bench, grid=grid, clock=clock)
    head = jobs.filter(side="head").select_related("build", "machine_class").first()
    assert head is not None
    base = SubmissionBuild.objects.get(submission=sub, side="base", build__arch=head.build.arch).build
    sharing.queue_boots(sub, base, head.build, head.machine_class, bench, grid, head.params, look.more_boots)
    sub.reruns = [
        *sub.reruns,
        {
            "machine_class": head.machine_class.name,
            "benchmark": bench,
            "grid": grid,
            "look": look.look,
            "more_boots": look.more_boots,
            "inconclusive": sorted(n for n, r in look.results.items() if r.verdict == stats.Verdict.INCONCLUSIVE),
        },
    ]


def boots_per_metric(jobs: QuerySet[Job]) -> dict[str, list[list[float]]]:
    """{metric: one list of iteration values per boot} over finished jobs, in run order."""
    per_boot: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    rows = (
        Sample.objects.filter(boot_record__job__in=jobs, boot_record__job__status=Job.Status.DONE)
        .values_list("metric", "boot_record_id", "iteration", "value")
        .order_by("boot_record__job__finished", "boot_record__boot", "iteration")
    )
    for metric, boot_id, iteration, value in rows:
        per_boot[(metric, boot_id)][iteration] = value
    out: dict[str, list[list[float]]] = defaultdict(list)
    for (metric, _), iters in per_boot.items():
        out[metric].append([iters[i] for i in sorted(iters)])
    return dict(out)


def compare_kernels(
    machine_class: str,
    benchmark: str,
    base_sha: str,
    head_sha: str,
    clock: str | None = None,
    jobs: QuerySet[Job] | None = None,
) -> KernelComparison:
    """Compare every finished boot of two kernels on one machine class and
    clock, whatever produced them (kperf submissions, tracked branches,
    mmtests imports), booted as kperf boots every kernel: boots a submission
    made with its own boot parameters or THP mode are that submission's
    comparison, not the kernel's. Without a clock: the one both kernels were
    measured with, the machine class's own if that is more than one. `jobs`
    limits the boots to those (the ones the asking user may see, kperf.core.access)."""
    jobs = summaries.default_boots(Job.objects.all() if jobs is None else jobs).filter(
        status=Job.Status.DONE, machine_class__name=machine_class, benchmark=benchmark
    )
    clock = _choose_clock(jobs, machine_class, base_sha, head_sha, clock)
    jobs = jobs.filter(clock=clock)
    base = boots_per_metric(jobs.filter(build__sha=base_sha))
    head = boots_per_metric(jobs.filter(build__sha=head_sha))
    defs = {m.name: m for m in MetricDef.objects.filter(name__in=set(base) | set(head))}
    common = sorted(set(base) & set(head))
    # default_boots took only boots of the class's own profile and shape: say which.
    mclass = MachineClass.objects.filter(name=machine_class).first()
    # Each kernel is one build, as a submission's sides are: the same priors where none is learned.
    known = priors_without_history.kernel_priors(
        mclass, benchmark, clock, jobs.filter(build__sha__in=(base_sha, head_sha)), common
    )
    learned = learned_build_priors(mclass.pk, benchmark, clock) if mclass is not None else {}
    inputs = {
        name: stats.MetricInput(
            base=base[name],
            head=head[name],
            higher_is_better=defs[name].higher_is_better,
            min_effect_pct=benchmarks.min_effect_pct(name, clock, benchmark=defs[name].benchmark),
            noise=known.spread.get(name),
            build_noise=learned.get(name) or known.builds.get(name),
        )
        for name in common
    }
    results = stats.compare_metrics(inputs, alpha=settings.KPERF_ALPHA)
    return {
        "machine_class": machine_class,
        "benchmark": benchmark,
        "clock": clock,
        "profile": (mclass.profile or DEFAULT_PROFILE) if mclass is not None else "",
        "vcpus": mclass.vcpus if mclass is not None else 0,
        "numa_nodes": mclass.numa_nodes if mclass is not None else 0,
        "base_sha": base_sha,
        "head_sha": head_sha,
        "method": "; ".join(filter(None, [stats.abtest.METHOD, known.method])),
        "alpha": settings.KPERF_ALPHA,
        "only_in_base": sorted(set(base) - set(head)),
        "only_in_head": sorted(set(head) - set(base)),
        "metrics": [
            {
                **outcome.metric_verdict(name, defs[name].unit, defs[name].higher_is_better, r),
                # compare-mmtests.pl's rows of the pooled iterations, as a submission's comparisons have them.
                "summary": [row.as_dict() for row in summary.summary_rows(inputs[name], r.verdict)],
            }
            for name, r in sorted(results.items(), key=lambda kv: sweeps.metric_order(kv[0]))
        ],
    }


def _choose_clock(jobs: QuerySet[Job], machine_class: str, base_sha: str, head_sha: str, clock: str | None) -> str:
    if clock is None:
        both = set(jobs.filter(build__sha=base_sha).values_list("clock", flat=True)) & set(
            jobs.filter(build__sha=head_sha).values_list("clock", flat=True)
        )
        if len(both) == 1:
            return str(both.pop())
    return requested_clock(machine_class, clock)


def history_runs(jobs: QuerySet[Job]) -> dict[str, list[list[list[float]]]]:
    """{metric: one run per kernel sha, each its boots of iterations}: the
    shape noise.variance_components learns from (a kernel's boots share its
    true mean; different kernels may differ)."""
    per_metric: dict[str, list[list[list[float]]]] = defaultdict(list)
    for sha in jobs.values_list("build__sha", flat=True).distinct().order_by("build__sha"):
        for metric, sha_boots in boots_per_metric(jobs.filter(build__sha=sha)).items():
            per_metric[metric].append(sha_boots)
    return dict(per_metric)


# Fewer boots of history than this and the prior is not worth its degrees of freedom.
MIN_HISTORY_BOOTS = 6


def learned_priors(
    sub: Submission,
    mclass_id: int,
    bench: str,
    grid: str,
    clock: str,
    metrics: dict[str, dict[str, list[list[float]]]],
) -> dict[str, stats.NoisePrior]:
    """Per metric, the boot-summary noise learned from earlier runs of the same
    benchmark and grid on this machine class and clock, excluding this
    submission's own boots (they are the data, not the history)."""
    if not settings.KPERF_LEARNED_NOISE:
        return {}
    # Like the pools, only boots with no boot parameters of their own (summaries.default_boots).
    jobs = (
        summaries.default_boots(Job.objects.all())
        .filter(status=Job.Status.DONE, machine_class_id=mclass_id, benchmark=bench, grid=grid, clock=clock)
        .exclude(submission=sub)
        .exclude(sharers__submission=sub)
    )
    # Every other kernel from its summary; the submission's own kernels, whose
    # summaries hold the boots excluded here, from their samples (a few boots).
    own = _own_shas(sub)
    extra: dict[str, list[noise.RunStats]] = defaultdict(list)
    for sha in sorted(own):
        for metric, run in summaries.runs_of(jobs.filter(build__sha=sha)).items():
            extra[metric].append(run)
    out: dict[str, stats.NoisePrior] = {}
    pooled = noise_pools.noise_models(mclass_id, clock, bench, grid, exclude_shas=own, extra=extra)
    for metric, (total, model) in pooled.items():
        if metric not in metrics or total.runs < 2 or total.boots < MIN_HISTORY_BOOTS:
            continue
        boots = metrics[metric]["base"] + metrics[metric]["head"]
        iterations = sorted(len(b) for b in boots)[len(boots) // 2] if boots else None
        out[metric] = model.prior(iterations)
    return out


def _own_shas(sub: Submission) -> set[str]:
    """The kernels of the jobs whose boots are `sub`'s data: its own and those it shares."""
    return set(Job.objects.filter(Q(submission=sub) | Q(sharers__submission=sub)).values_list("build__sha", flat=True))


def learned_build_priors(mclass_id: int, bench: str, clock: str) -> dict[str, stats.NoisePrior]:
    """Per metric, the between-build component learned from tracked branches'
    histories on this machine class, where it is worth having: under the
    instruction clock, whose boots agree so well that builds are the noise
    (kperf.stats.builds; the wall clock's boots hide it)."""
    if not settings.KPERF_LEARNED_BUILD_NOISE or clock != Clock.INSTRUCTIONS:
        return {}
    out: dict[str, stats.NoisePrior] = {}
    # From the tracked branches' summaries (kperf.core.results.drift_pools), not their samples.
    for metric, estimate in drift_pools.learned_build_noise(mclass_id, bench, clock).items():
        prior = estimate.prior()
        if prior is not None:
            out[metric] = prior
    return out


class KernelMetric(outcome.MetricVerdict):
    summary: list[dict[str, Any]]  # compare-mmtests.pl's rows (kperf.stats.summary.SummaryRow)


class KernelComparison(TypedDict):
    """Two kernels compared on one machine class and clock (compare_kernels)."""

    machine_class: str
    benchmark: str
    clock: str
    # The class's configuration profile, vCPUs and NUMA nodes: only boots of
    # these are compared (as a submission's Comparison says them).
    profile: str
    vcpus: int
    numa_nodes: int
    base_sha: str
    head_sha: str
    method: str
    alpha: float
    only_in_base: list[str]
    only_in_head: list[str]
    metrics: list[KernelMetric]
