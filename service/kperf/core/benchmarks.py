"""The service's view of the benchmark registry.

The registry itself lives in the runner package (kperf_runner.benchmarks), the
one place that knows how a benchmark is run, parsed and named; the service
imports it (the runner never imports the service).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from typing_extensions import TypedDict

from kperf.core.models import Submission
from kperf.stats import sequential
from kperf_kbuild.profiles import PROFILE_FEATURES
from kperf_runner import benchmarks as registry

ALL = "all"


class BenchmarkChoiceError(ValueError):
    pass


def known() -> list[str]:
    return sorted(registry.BENCHMARKS)


def expand(names: list[str]) -> list[str]:
    """Validate benchmark names ('all' means every benchmark); keeps order, drops repeats."""
    if not names:
        raise BenchmarkChoiceError(f"no benchmark given: choose from {', '.join(known())} or 'all'")
    out: list[str] = []
    for name in names:
        chosen = known() if name == ALL else [name]
        for b in chosen:
            if b not in registry.BENCHMARKS:
                raise BenchmarkChoiceError(f"unknown benchmark {b!r}: choose from {', '.join(known())} or 'all'")
            if b not in out:
                out.append(b)
    return out


def grid_names() -> list[str]:
    """Every grid some benchmark has, `quick` and `full` first."""
    names = {g for name in known() for g in registry.get_benchmark(name).grids}
    return sorted(names, key=lambda g: ({"quick": 0, "full": 1}.get(g, 2), g))


def grid_for(benchmark: str, grid: str, clock: str = "wall") -> tuple[int, dict[str, Any]]:
    """(boots per side, resolved parameters) for a benchmark's grid on `clock`
    (the instruction clock replaces a grid's time-based parameters: Grid.instruction_params)."""
    bench = registry.get_benchmark(benchmark)
    if grid not in bench.grids:
        raise BenchmarkChoiceError(
            f"benchmark {benchmark!r} has no grid {grid!r}: choose from {', '.join(sorted(bench.grids))}"
        )
    return bench.grids[grid].boots, registry.resolve_params(benchmark, grid, clock=clock)


def runs(names: list[str], grids: list[str]) -> list[tuple[str, str]]:
    """(benchmark, grid) for each benchmark and each of `grids` it has, in the order given: what a
    submission measures, one comparison each. Unknown names raise BenchmarkChoiceError."""
    return [(name, grid) for name in names for grid in grids if grid in registry.get_benchmark(name).grids]


def submission_runs(sub: Submission) -> list[tuple[str, str]]:
    return runs(list(sub.benchmarks), list(sub.grids))


def check_grids(names: list[str], grids: list[str]) -> list[tuple[str, str]]:
    """runs(), once every grid is one some benchmark of `names` has and every benchmark has one of
    them; BenchmarkChoiceError saying which does not and what to choose otherwise."""
    if not grids:
        raise BenchmarkChoiceError(f"no grid given: choose from {', '.join(grid_names())}")
    chosen = runs(names, grids)
    for grid in grids:
        if not any(g == grid for _, g in chosen):
            have = sorted({g for name in names for g in registry.get_benchmark(name).grids})
            raise BenchmarkChoiceError(
                f"no grid {grid!r} in {', '.join(names)}: choose from {', '.join(have)} (docs/benchmarks.md, Grids)"
            )
    for name in names:
        if not any(b == name for b, _ in chosen):
            own = sorted(registry.get_benchmark(name).grids)
            raise BenchmarkChoiceError(
                f"benchmark {name!r} has none of the grids {', '.join(grids)}: add one of its own "
                f"({', '.join(own)}) or leave it out"
            )
    return chosen


def profile_refusal(benchmark: str, grid: str, profiles: list[str]) -> str | None:
    """Why a grid cannot run on kernels of these profiles (it needs memcg or swap they lack), or None."""
    needs = registry.get_benchmark(benchmark).grids[grid].needs
    for profile in profiles:
        lacking = [need for need in needs if need not in PROFILE_FEATURES.get(profile, frozenset())]
        if lacking:
            having = [p for p, features in PROFILE_FEATURES.items() if set(needs) <= features]
            return (
                f"the {grid} grid of {benchmark} needs {' and '.join(lacking)} in the kernel, which the {profile} "
                f"profile does not build: submit with the {' or '.join(having)} profile "
                "(--profile, docs/kernels.md), or choose another grid"
            )
    return None


def instruction_clock_refusal(benchmark: str, grid: str) -> str | None:
    """Why a boot of this grid cannot finish on QEMU's instruction clock, or None when it fits.

    A benchmark that runs for a time runs that many 10^9 instructions there,
    which TCG executes at about KPERF_INSTRUCTION_CLOCK_RATE a second; one
    that does fixed work takes about its expected_seconds (sized for TCG).
    Either must fit in KPERF_INSTRUCTION_CLOCK_BOOT_BUDGET seconds a boot.
    """
    host, guest = _instruction_clock_seconds(benchmark, grid)
    rate, budget = float(settings.KPERF_INSTRUCTION_CLOCK_RATE), float(settings.KPERF_INSTRUCTION_CLOCK_BOOT_BUDGET)
    if host <= budget:
        return None
    work = f"{guest * 1e9:.2g} instructions" if guest is not None else "its fixed work"
    return (
        f"the {grid} grid of {benchmark} would take about {host / 60:.0f} min a boot on the instruction clock "
        f"({work}, at about {rate:.2g} instructions a second under QEMU's TCG), more than the "
        f"{budget / 60:.0f} min a boot may take there: choose a grid that fits ({', '.join(_fitting(benchmark))}), "
        "or a machine class on the wall clock"
    )


def _instruction_clock_seconds(benchmark: str, grid: str) -> tuple[float, float | None]:
    """(host seconds a boot's commands take on the instruction clock, guest seconds when the grid fixes them)."""
    _, params = grid_for(benchmark, grid, "instructions")
    bench = registry.get_benchmark(benchmark)
    guest = bench.guest_seconds(params)
    host = guest * 1e9 / float(settings.KPERF_INSTRUCTION_CLOCK_RATE) if guest is not None else None
    return (host if host is not None else bench.expected_seconds(params)), guest


def _fitting(benchmark: str) -> list[str]:
    budget = float(settings.KPERF_INSTRUCTION_CLOCK_BOOT_BUDGET)
    grids = registry.get_benchmark(benchmark).grids
    return [name for name in grids if _instruction_clock_seconds(benchmark, name)[0] <= budget]


def boots_per_side(grid_boots: int, clock: str) -> int:
    """The first look's boots per side on a machine class of `clock`.

    Under QEMU's instruction clock the boots of one build differ only by the
    phase each draws (a seeded sleep before every command): two a side kept
    unrelated changes inside the interval in the bench (docs/statistics.md,
    "A phase per boot, measured"), so a first look takes at most
    KPERF_INSTRUCTION_CLOCK_BOOTS (2) and later looks add more where a metric
    is still open. The wall clock keeps the grid's.
    """
    if clock == "instructions":
        return max(1, min(grid_boots, int(settings.KPERF_INSTRUCTION_CLOCK_BOOTS)))
    return grid_boots


def min_effect_pct(metric: str, clock: str = "wall", chosen: float | None = None, benchmark: str = "") -> float:
    """The practical threshold (in %) for a metric of `benchmark` timed with `clock`.

    `chosen` is what a submission or tracked branch set for itself; without
    it, an operator's per-metric override, else the benchmark's default on
    the instruction clock where one is set, else the clock's default.
    """
    if chosen is not None:
        return float(chosen)
    overrides: dict[str, float] = getattr(settings, "KPERF_MIN_EFFECT_OVERRIDES", {})
    for prefix, value in overrides.items():
        if metric.startswith(prefix):
            return value
    if clock == "instructions":
        per_benchmark: dict[str, float] = settings.KPERF_MIN_EFFECT_PCT_INSTRUCTIONS_BY_BENCHMARK
        return float(per_benchmark.get(benchmark, settings.KPERF_MIN_EFFECT_PCT_INSTRUCTIONS))
    return float(settings.KPERF_MIN_EFFECT_PCT)


class GridInfo(TypedDict):
    boots: int
    params: dict[str, Any]


class BenchmarkInfo(TypedDict):
    name: str
    description: str
    grids: dict[str, GridInfo]


def describe() -> list[BenchmarkInfo]:
    """Benchmarks and grids as the API and the web form show them."""
    out: list[BenchmarkInfo] = []
    for name in known():
        bench = registry.get_benchmark(name)
        out.append(
            {
                "name": name,
                "description": bench.description,
                "grids": {g: {"boots": spec.boots, "params": dict(spec.params)} for g, spec in bench.grids.items()},
            }
        )
    return out


def look_plan(benchmark: str, grid: str, clock: str) -> sequential.Plan:
    """Looks at K, 2K, ... boots per side, up to the submission's budget.

    K is the grid's boots per side on the clock (benchmarks.boots_per_side);
    the budget is KPERF_BOOT_BUDGET_FACTOR x K.
    Alpha is spent over the looks (O'Brien-Fleming), so looking again after
    adding boots does not inflate false alarms.
    """
    grid_boots, _ = grid_for(benchmark, grid)
    first = boots_per_side(grid_boots, clock)
    budget = max(first, first * settings.KPERF_BOOT_BUDGET_FACTOR)
    if budget == first:
        return sequential.Plan(looks=(first,), alpha=settings.KPERF_ALPHA)
    plan = sequential.plan_looks(first=first, budget=budget, step=first)
    return sequential.Plan(looks=plan.looks, alpha=settings.KPERF_ALPHA)
