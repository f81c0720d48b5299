"""The checks a submission and a tracked branch share: tree URL, refs, what is measured, the threshold.

Each raises SubmissionError naming the field at fault. The submission request
(kperf.core.submissions.request) attaches them to its fields; a tracked branch
(kperf.core.tracking.branches) calls them in turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from kperf.core import benchmarks
from kperf.core.builds import gitops, profiles, tree_urls
from kperf.core.models import Clock, MachineClass
from kperf_kbuild.driver import SUPPORTED_ARCHES


class SubmissionError(ValueError):
    """Bad submission input; the message says what was wrong and what to do."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


# A practical threshold outside these bounds is a typo: 0 would call any
# difference a regression, and above 50% nothing a kernel change does would be.
MIN_EFFECT_BOUNDS = (0.05, 50.0)


def validate_min_effect(value: float | None) -> float | None:
    if value is None:
        return None
    low, high = MIN_EFFECT_BOUNDS
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise SubmissionError(
            f"min_effect_pct must be a percentage from {low} to {high} (or left out for the clock's default), "
            f"not {value!r}",
            "min_effect_pct",
        )
    return float(value)


def validate_tree(url: str) -> str:
    """A tree URL the service may fetch (kperf.core.builds.tree_urls' policy); a refusal names `tree`."""
    try:
        return gitops.validate_tree_url(url, tree_urls.policy_from_settings())
    except gitops.GitInputError as e:
        raise SubmissionError(str(e), "tree") from None


def validate_ref(ref: str, field: str) -> str:
    """A branch or base as given, checked; a refusal names the field it came from."""
    try:
        return gitops.validate_ref(ref, field)
    except gitops.GitInputError as e:
        raise SubmissionError(str(e), field) from None


@dataclass(frozen=True)
class Measurement:
    """What a submission and a tracked branch both choose, checked: the benchmarks ("all" expanded),
    the grids, the architectures and the configuration profile."""

    benchmarks: list[str]
    grids: list[str]
    arches: list[str]
    profile: str


def validate_measurement(names: list[str], grid: str, grids: list[str], arches: list[str], profile: str) -> Measurement:
    """Check what is to be measured, alike for a submission and a tracked branch; raise SubmissionError
    naming the field at fault."""
    return validate_runs(validate_benchmarks(names), grid, grids, validate_arches(arches), validate_profile(profile))


def validate_benchmarks(names: list[str]) -> list[str]:
    """The benchmarks asked for, "all" expanded and repeats dropped; a refusal names `benchmarks`."""
    try:
        return benchmarks.expand(names)
    except benchmarks.BenchmarkChoiceError as e:
        raise SubmissionError(str(e), "benchmarks") from None


def validate_profile(profile: str) -> str:
    """'' (each machine class's own) or a known configuration profile; a refusal names `profile`."""
    try:
        return profiles.clean_profile(profile)
    except profiles.ProfileError as e:
        raise SubmissionError(str(e), "profile") from None


def validate_arches(asked: list[str]) -> list[str]:
    """The architectures asked for, repeats dropped, each one a machine class of this service runs."""
    arches = list(dict.fromkeys(asked))
    if not arches:
        raise SubmissionError(f"no architecture given: choose from {', '.join(SUPPORTED_ARCHES)}", "arches")
    for arch in arches:
        if arch not in SUPPORTED_ARCHES:
            raise SubmissionError(f"unknown architecture {arch!r}: choose from {', '.join(SUPPORTED_ARCHES)}", "arches")
        if not MachineClass.objects.filter(arch=arch).exists():
            raise SubmissionError(
                f"no machine class runs {arch} on this service: register a runner for it "
                "(docs/runners.md) or choose another architecture",
                "arches",
            )
    return arches


def validate_runs(benches: list[str], grid: str, grids: list[str], arches: list[str], profile: str) -> Measurement:
    """The grids of checked benchmarks, architectures and profile, and what they allow together: each
    benchmark has one of the grids, fits the instruction clock's budget and the profile's kernels.
    A refusal names the grid's field, or `profile` when one was chosen."""
    chosen_grids, grid_field = _grids(grid, grids)
    try:
        chosen = benchmarks.check_grids(benches, chosen_grids)
    except benchmarks.BenchmarkChoiceError as e:
        raise SubmissionError(str(e), grid_field) from None
    if MachineClass.objects.filter(arch__in=arches, clock=Clock.INSTRUCTIONS).exists():
        for name, one in chosen:
            refusal = benchmarks.instruction_clock_refusal(name, one)
            if refusal:
                raise SubmissionError(refusal, grid_field)
    measured = sorted({p for arch in arches for p in profiles.needed(arch, profile)})
    for name, one in chosen:
        refusal = benchmarks.profile_refusal(name, one, measured)
        if refusal:
            raise SubmissionError(refusal, "profile" if profile else grid_field)
    return Measurement(benches, chosen_grids, arches, profile)


def _grids(grid: str, grids: list[str]) -> tuple[list[str], str]:
    """The grids asked for (one as `grid` or several as `grids`), repeats dropped, and the field that
    named them (for errors)."""
    if grid and grids:
        raise SubmissionError("give one grid as grid, or several as grids, not both", "grids")
    if grid:
        return [grid], "grid"
    if not grids:
        return ["quick"], "grid"
    if not all(isinstance(g, str) and g for g in grids):
        raise SubmissionError("grids must be a list of grid names (docs/benchmarks.md, Grids)", "grids")
    return list(dict.fromkeys(grids)), "grids"
