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
from kperf.core import benchmarks, triage
from kperf.core.lab import sharing
from kperf.core.lifecycle import owners, states
from kperf.core.mail import alerts, replies
from kperf.core.models import (
    BootRecord,
    Clock,
    Comparison,
    Job,
    MachineClass,
    MetricComparison,
    MetricDef,
    Sample,
    SharedJob,
    Submission,
    SubmissionBuild,
)
from kperf.core.results import drift_pools, noise_pools, outcome, summaries
from kperf.core.submissions import priors as priors_without_history
from kperf.stats import noise, sequential, summary
from kperf.stats.builds import BuildNoise
from kperf.stats.changepoints import DriftEstimate
from kperf.stats.history import drift_from_stats

log = logging.getLogger("kperf.analysis")


Group = tuple[int, str, str]  # machine class id, benchmark, clock: what one comparison covers


def load_boots(sub: Submission, only: Group | None = None) -> dict[Group, dict[str, dict[str, list[list[float]]]]]:
    """{(machine class id, benchmark, clock): {metric: {"base": boots, "head": boots}}}, boots in run order.

    The clock is part of the key: samples of two clocks are two metrics and
    never meet in one comparison. Base boots shared with other submissions
    (kperf.core.lab.sharing) count on the side the submission shares them for.
    `only`: that comparison's boots alone.
    """
    shared = _shared_sides(sub)
    per_boot: dict[tuple[int, str, str, str, str, int], dict[int, float]] = defaultdict(dict)
    samples = Sample.objects.filter(
        Q(boot_record__job__submission=sub) | Q(boot_record__job_id__in=list(shared)),
        boot_record__job__status=Job.Status.DONE,
    )
    if only is not None:
        samples = samples.filter(
            boot_record__job__machine_class_id=only[0],
            boot_record__job__benchmark=only[1],
            boot_record__job__clock=only[2],
        )
    rows = samples.values_list(
        "boot_record__job__machine_class_id",
        "boot_record__job__benchmark",
        "boot_record__job__clock",
        "metric",
        "boot_record__job_id",
        "boot_record__job__side",
        "boot_record_id",
        "iteration",
        "value",
    ).order_by("boot_record__job__seq", "boot_record__job_id", "boot_record__boot", "iteration")
    for mclass, bench, clock, metric, job_id, side, boot_id, iteration, value in rows:
        per_boot[(mclass, bench, clock, metric, shared.get(job_id, side), boot_id)][iteration] = value
    out: dict[Group, dict[str, dict[str, list[list[float]]]]] = defaultdict(
        lambda: defaultdict(lambda: {"base": [], "head": []})
    )
    for (mclass, bench, clock, metric, side, _), iters in per_boot.items():
        out[(mclass, bench, clock)][metric][side].append([iters[i] for i in sorted(iters)])
    return out


def _shared_sides(sub: Submission) -> dict[int, str]:
    """{job id: side} of the jobs `sub` shares."""
    return dict(SharedJob.objects.filter(submission=sub).values_list("job_id", "side"))


def shared_base_boots(sub: Submission) -> dict[Group, int]:
    """How many finished base boots of each comparison `sub` shares with other submissions."""
    counts: dict[Group, int] = defaultdict(int)
    rows = SharedJob.objects.filter(
        submission=sub, side="base", job__status=Job.Status.DONE, job__boot_records__isnull=False
    ).values_list("job__machine_class_id", "job__benchmark", "job__clock")
    for group in rows:
        counts[group] += 1
    return counts


def phased_boots(sub: Submission) -> dict[Group, tuple[int, int]]:
    """Per comparison, (boots measured at a seeded phase, boots): what the page says the interval holds
    (docs/machine-tuning.md, "A phase per boot"). Boots from runners before phases record none."""
    counts: dict[Group, list[int]] = defaultdict(lambda: [0, 0])
    rows = BootRecord.objects.filter(
        Q(job__submission=sub) | Q(job_id__in=list(_shared_sides(sub))), job__status=Job.Status.DONE
    ).values_list("job__machine_class_id", "job__benchmark", "job__clock", "environment__phase_span_us")
    for mclass_id, bench, clock, span in rows:
        entry = counts[(mclass_id, bench, clock)]
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


def boots_per_side(metrics: dict[str, dict[str, list[list[float]]]]) -> int:
    """The boots per side a comparison has: its least measured metric's smaller side."""
    return min(min(len(s["base"]), len(s["head"])) for s in metrics.values())


def group_look(
    sub: Submission, defs: dict[str, MetricDef], group: Group, metrics: dict[str, dict[str, list[list[float]]]]
) -> GroupLook:
    """The sequential look of one comparison at the boots it has: the same
    inputs whether the look is the submission's analysis or an interim one
    (kperf.core.submissions.looks), so both decide alike."""
    mclass_id, bench, clock = group
    priors = learned_priors(sub, mclass_id, bench, clock, metrics)
    builds = learned_build_priors(mclass_id, bench, clock)
    measured, source = priors_without_history.measured_build_priors(
        mclass_id, bench, clock, [n for n in metrics if n not in builds]
    )
    spread, spread_source = priors_without_history.measured_boot_priors(
        sub, mclass_id, bench, clock, [n for n in metrics if n not in priors]
    )
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
    plan = benchmarks.look_plan(sub, bench, clock)
    look = sequential.sequential_look(inputs, sequential.look_number(plan, boots_per_side(metrics)), plan)
    return GroupLook(inputs, look, plan, priors, builds, measured, source, spread, spread_source)


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
        for (mclass_id, bench, clock), metrics in load_boots(sub).items():
            taken = group_look(sub, defs, (mclass_id, bench, clock), metrics)
            inputs, look, plan = taken.inputs, taken.look, taken.plan
            priors, builds, measured = taken.priors, taken.builds, taken.measured
            comp = Comparison.objects.create(
                submission=sub,
                machine_class_id=mclass_id,
                benchmark=bench,
                clock=clock,
                method=f"{stats.abtest.METHOD}; {plan.spending} alpha spending"
                + (f"; noise learned from history for {len(priors)} of {len(inputs)} metrics" if priors else "")
                + (
                    f"; between-build noise learned for {sum(n in builds for n in inputs)} of {len(inputs)} metrics"
                    if any(n in builds for n in inputs)
                    else ""
                )
                + (
                    f"; between-build noise for {len(measured)} of {len(inputs)} metrics from the "
                    f"{taken.measured_source}"
                    if measured
                    else ""
                )
                + (
                    f"; boot noise for {len(taken.spread)} of {len(inputs)} metrics from the {taken.spread_source}"
                    if taken.spread
                    else ""
                )
                + _interval_parts(phases.get((mclass_id, bench, clock), (0, 0)))
                + _rounding_part(look.results),
                alpha=plan.alpha,
                look=look.look,
                looks=len(plan.looks),
                final=look.decide,
                shared_base_boots=shared.get((mclass_id, bench, clock), 0),
                table=summary.format_table(inputs, look.results),
            )
            _store_metrics(comp, inputs, look.results, metrics, defs)
            if not look.decide and look.more_boots > 0:
                more_boots = True
                rerun(sub, mclass_id, bench, clock, look)
        if more_boots:
            sub.save(update_fields=["reruns"])
            states.move(sub, Submission.Status.TESTING)
            log.info("submission %s: inconclusive at this look, more boots queued", sub_id)
            return
        owners.finish(sub)
        alert = alerts.submission_finished(sub)
        # The alert's Reply-To carries a token for this triage (triage by mail, docs/triage.md).
        replies.issue(alert, triage.open_for_submission(sub))
    log.info("submission %s analysed", sub_id)


def _store_metrics(
    comp: Comparison,
    inputs: dict[str, stats.MetricInput],
    results: dict[str, stats.MetricResult],
    metrics: dict[str, dict[str, list[list[float]]]],
    defs: dict[str, MetricDef],
) -> None:
    MetricComparison.objects.bulk_create(
        [
            MetricComparison(
                comparison=comp,
                metric=name,
                unit=defs[name].unit,
                higher_is_better=defs[name].higher_is_better,
                verdict=str(r.verdict),
                base_mean=r.base_mean,
                head_mean=r.head_mean,
                change_pct=r.change_pct,
                ci_low_pct=r.ci_low_pct,
                ci_high_pct=r.ci_high_pct,
                p_value=r.p_value,
                q_value=r.q_value,
                min_effect_pct=r.min_effect_pct,
                base_boots=r.base_boots,
                head_boots=r.head_boots,
                base_samples=r.base_samples,
                head_samples=r.head_samples,
                values={"base": metrics[name]["base"], "head": metrics[name]["head"]},
                summary=[row.as_dict() for row in summary.summary_rows(inputs[name], r.verdict)],
                note=r.note,
            )
            for name, r in sorted(results.items())
        ]
    )


def rerun(sub: Submission, mclass_id: int, bench: str, clock: str, look: sequential.Look) -> None:
    """Queue more boots for one comparison and say so on the submission."""
    # The head boots are always the submission's own; its base boots may all be shared.
    jobs = Job.objects.filter(submission=sub, machine_class_id=mclass_id, benchmark=bench, clock=clock)
    head = jobs.filter(side="head").select_related("build", "machine_class").first()
    assert head is not None
    base = SubmissionBuild.objects.get(submission=sub, side="base", build__arch=head.build.arch).build
    sharing.queue_boots(sub, base, head.build, head.machine_class, bench, head.params, look.more_boots)
    sub.reruns = [
        *sub.reruns,
        {
            "machine_class": head.machine_class.name,
            "benchmark": bench,
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


class UnknownClock(ValueError):
    """No such clock, or no boots of both kernels with it; the message says which there are."""


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
    inputs = {
        name: stats.MetricInput(
            base=base[name],
            head=head[name],
            higher_is_better=defs[name].higher_is_better,
            min_effect_pct=benchmarks.min_effect_pct(name, clock, benchmark=defs[name].benchmark),
        )
        for name in common
    }
    results = stats.compare_metrics(inputs, alpha=settings.KPERF_ALPHA)
    return {
        "machine_class": machine_class,
        "benchmark": benchmark,
        "clock": clock,
        "base_sha": base_sha,
        "head_sha": head_sha,
        "method": stats.abtest.METHOD,
        "alpha": settings.KPERF_ALPHA,
        "only_in_base": sorted(set(base) - set(head)),
        "only_in_head": sorted(set(head) - set(base)),
        "metrics": [
            {
                **outcome.metric_verdict(name, defs[name].unit, defs[name].higher_is_better, r),
                # compare-mmtests.pl's rows of the pooled iterations, as a submission's comparisons have them.
                "summary": [row.as_dict() for row in summary.summary_rows(inputs[name], r.verdict)],
            }
            for name, r in sorted(results.items())
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
    sub: Submission, mclass_id: int, bench: str, clock: str, metrics: dict[str, dict[str, list[list[float]]]]
) -> dict[str, stats.NoisePrior]:
    """Per metric, the boot-summary noise learned from earlier runs of the same
    benchmark and grid on this machine class and clock, excluding this
    submission's own boots (they are the data, not the history)."""
    if not settings.KPERF_LEARNED_NOISE:
        return {}
    # Like the pools, only boots with no boot parameters of their own (summaries.default_boots).
    jobs = (
        summaries.default_boots(Job.objects.all())
        .filter(status=Job.Status.DONE, machine_class_id=mclass_id, benchmark=bench, grid=sub.grid, clock=clock)
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
    pooled = noise_pools.noise_models(mclass_id, clock, bench, sub.grid, exclude_shas=own, extra=extra)
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


def requested_clock(machine_class: str, clock: str | None) -> str:
    """The clock a report is for: the one asked (UnknownClock if there is no such clock), else the machine class's."""
    if clock is not None:
        if clock not in Clock.values:
            raise UnknownClock(f"unknown clock {clock!r}: choose {' or '.join(Clock.values)}")
        return clock
    mclass = MachineClass.objects.filter(name=machine_class).first()
    return mclass.clock if mclass is not None else str(Clock.WALL)


def noise_report(machine_class: str, boots: int, iterations: int, clock: str) -> list[NoiseRow]:
    """Between- and within-boot noise per metric, learned from every finished
    boot on a machine class and clock (one run per kernel sha), and what K x N detects."""
    mclass = MachineClass.objects.filter(name=machine_class).first()
    if mclass is None:
        return []
    # One run per kernel, benchmark and grid, pooled as the kernels' summaries
    # arrived (this catches up any finished job of the class not yet summarised).
    pooled = noise_pools.noise_models(mclass.pk, clock)
    # How fast each metric's level wanders along tracked branches (what picks
    # the change-point window); only metrics some branch has measured have one.
    # Both it and the between-build noise come from the branches' summaries
    # pooled per class (kperf.core.results.drift_pools): no branch's samples are read here.
    drift: dict[str, DriftEstimate] = {}
    builds: dict[str, BuildNoise] = {}
    measured = set(drift_pools.ensure_class_states(mclass.pk, clock))
    # Every benchmark's rows in one read (metric names are unique across benchmarks).
    for (bench, metric), sums in drift_pools.class_sums(mclass.pk, clock).items():
        if bench not in measured:
            continue
        drift[metric] = drift_from_stats(sums.drift)
        builds[metric] = drift_pools.build_noise_of(sums)
    out: list[NoiseRow] = []
    for metric, (total, model) in pooled.items():
        if total.boots < 3:
            continue
        out.append(
            {
                "metric": metric,
                "clock": clock,
                "kernels": total.runs,
                "boots": total.boots,
                # Between builds of code that should behave alike (tracked
                # branches' commits with no change point between them); None
                # where no branch has two such commits.
                "between_build_sd": builds[metric].sd if metric in builds and builds[metric].builds else None,
                "between_build_builds": builds[metric].builds if metric in builds else 0,
                "between_boot_sd": model.between_sd,
                "within_boot_sd": model.within_sd,
                "log_scale": model.log_scale,
                "boots_per_side": boots,
                "iterations": iterations,
                "min_detectable_pct": noise.min_detectable_effect(
                    model,
                    boots,
                    iterations,
                    alpha=settings.KPERF_ALPHA,
                    use_history=False,
                    build_sd=builds[metric].sd if metric in builds else 0.0,
                ),
                # Random-walk variance of the level per commit, relative to one
                # commit's noise; None where no tracked branch measured the metric.
                "drift_rate": drift[metric].rate if metric in drift else None,
                "drift_commits": drift[metric].commits if metric in drift else 0,
                "change_point_window": drift[metric].window if metric in drift else None,
            }
        )
    return out


class KernelMetric(outcome.MetricVerdict):
    summary: list[dict[str, Any]]  # compare-mmtests.pl's rows (kperf.stats.summary.SummaryRow)


class KernelComparison(TypedDict):
    """Two kernels compared on one machine class and clock (compare_kernels)."""

    machine_class: str
    benchmark: str
    clock: str
    base_sha: str
    head_sha: str
    method: str
    alpha: float
    only_in_base: list[str]
    only_in_head: list[str]
    metrics: list[KernelMetric]


class NoiseRow(TypedDict):
    """One metric's noise on a machine class and clock, and what K boots x N iterations detect (noise_report)."""

    metric: str
    clock: str
    kernels: int
    boots: int
    between_build_sd: float | None  # None: no tracked branch has two builds that should behave alike
    between_build_builds: int
    between_boot_sd: float
    within_boot_sd: float
    log_scale: bool
    boots_per_side: int
    iterations: int
    min_detectable_pct: float
    drift_rate: float | None  # None: no tracked branch measured the metric
    drift_commits: int
    change_point_window: int | None
