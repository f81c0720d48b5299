"""What a machine class's finished boots say about its noise: per metric, the
spread between builds, boots and iterations, the drift along tracked branches,
and the smallest change K boots x N iterations detect (`GET /noise`,
`kperf noise`). Read from the summaries kept as results arrive (docs/history.md)."""

from __future__ import annotations

from django.conf import settings
from typing_extensions import TypedDict

from kperf.core.models import Clock, MachineClass
from kperf.core.results import drift_pools, noise_pools
from kperf.stats import noise
from kperf.stats.builds import BuildNoise
from kperf.stats.changepoints import DriftEstimate
from kperf.stats.history import drift_from_stats


class UnknownClock(ValueError):
    """No such clock, or no boots of both kernels with it; the message says which there are."""


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
