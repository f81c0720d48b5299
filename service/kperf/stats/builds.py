"""The between-build component: how far one build's level lies from its source's, learned from history.

Two builds of what should be the same kernel do not run the same code: an
unrelated change moves functions and data, and with them cache, TLB and
branch-predictor behaviour. Under the instruction clock two boots of one
build agree to 0.01-0.3% or exactly, while a change in a syscall no benchmark
calls moved metrics by up to 0.06% with `norandmaps nokaslr` and by 1.7%
without (MEASUREMENT.md). An A/B comparison sets one build against another,
so this component is part of every difference; without it, an unrelated
change is "significant" whenever the boots agree better than the builds do.

The model for one boot summary (trimmed mean of its iterations, on the log
scale when every value is positive, as the A/B test computes it):

    y = mu(group) + B(build) + b(boot),  var B = sd_build^2,  var b = sd_boot^2

A group is a set of builds that share one true level: consecutive commits of
a tracked branch with no change point between them, or builds of one source
with unrelated changes (a different build id, a touched file no benchmark
reaches). Rebuilds of one unchanged source are no use: kperf's build driver
is reproducible, so they are the same image and show no between-build spread.

The estimate is the one-way random-effects method of moments (ANOVA), nested
in groups and pooled over them; for unbalanced data it is the usual moment
estimate with n0 (REML agrees for balanced data):

    MS_within  = pooled variance of boot summaries around their build's mean
    MS_between = sum over builds of n (build mean - group mean)^2 / sum (builds - 1)
    sd_build^2 = max(0, (MS_between - MS_within) / n0)

Its degrees of freedom are Satterthwaite's for a difference of mean squares;
with boots that agree exactly (MS_within = 0) they are the between-build ones,
and the A/B test on the build component alone is an exact t-test.

When the builds spread no more than their boots explain (the F-test of the
two mean squares does not reject at BUILD_F_LEVEL, 5%), prior() gives None.
An estimate that is mostly boot noise has few degrees of freedom and would
cost the A/B test its power for little: on TCG wall-clock boots of 12%
(bench/ab_clocks.py) a between-build sd of 0.1%, invisible under them,
took the power at 3 sds of the difference from .70 (no component) to .46
with this test at 25%, to .64 at 5%. A between-build part that small next
to the boots moves the false-regression rate little (1.3% per direction
without it, 1.0% with it, where the boots are 0.3% and the builds 0.1%).
Under the instruction clock the boots agree exactly or nearly, so any real
between-build spread passes the test. For the wall clock, do not learn the
component at all: the boots hide it.

A build with a real change inside a group (a change point that was missed)
inflates the estimate, which makes the A/B test conservative, not liberal:
cut the history at the change points found (groups_between).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kperf.stats import dist
from kperf.stats.abtest import Boots, NoisePrior, boot_summaries, normalise_boots, sum_sq_dev

BUILD_F_LEVEL = 0.05

# The between-build sd measured without any history, per benchmark, on the instruction clock: the
# largest over the benchmark's metrics among 20 builds of the base that differ only by code no
# benchmark runs (bench/build_noise.py, text padding; 2026-11-28, docs/statistics.md "Measured
# without history"), on the log scale. The phase part, which the padding does not move, is in the
# boots instead (each boot at a seeded phase, kperf_runner.backends.with_phase_seed). Below
# MEASURED_BUILD_FLOOR the bench saw nothing (the page allocator's 120 metrics: exactly 0), and 0
# would make an interval between two exact builds a point; the floor keeps it an interval.
MEASURED_BUILD_SD: dict[str, float] = {"spawn": 0.00003, "aim9": 0.00061, "pft": 0.00019, "pagealloc": 0.0}
MEASURED_BUILD_FLOOR = 0.0001
MEASURED_BUILD_DOF = 19.0  # 20 builds: the estimate's degrees of freedom
MEASURED_BUILD_SOURCE = "perturbed-build bench (bench/build_noise.py, 20 builds, 2026-11-28)"


def measured_build_prior(benchmark: str) -> NoisePrior:
    """The between-build part for `benchmark` on the instruction clock where nothing was learned yet."""
    # A benchmark the bench has not measured gets the largest part it measured for any.
    sd = MEASURED_BUILD_SD.get(benchmark, max(MEASURED_BUILD_SD.values()))
    return NoisePrior(max(sd, MEASURED_BUILD_FLOOR), MEASURED_BUILD_DOF)


@dataclass(frozen=True)
class MeasuredBuildNoise:
    """A lab's own perturbed-build measurement: per benchmark, the between-build part to use where
    its machine class has learned none, and where it comes from (for the comparison's method line)."""

    priors: dict[str, NoisePrior]
    source: str
    # Where the record's boots were each at a seeded phase: per benchmark and metric their spread
    # (kperf.stats.boot_spread), for the profile the record was made with.
    boot_spread: dict[str, dict[str, NoisePrior]] = field(default_factory=dict)
    profile: str = ""


def between_build_rows(
    result: object, name: str, bench: str, column: str = "between_build_pct"
) -> tuple[dict[str, float], float]:
    """One benchmark's result in a `bench/build_noise.py --json` record: each metric's between-build
    sd (a fraction, on the log scale; or another column of the rows in percent, `largest_pct`: the
    largest departure of a build from the base) and the degrees of freedom of those estimates.
    ValueError says what is missing (`name` is the record's, for messages)."""
    rows = result.get("metrics") if isinstance(result, dict) else None
    kernels = result.get("kernels") if isinstance(result, dict) else None
    if not isinstance(kernels, int) or kernels < 3:
        raise ValueError(f"{name}: benchmark {bench!r} needs 'kernels' (the base and at least 2 builds)")
    sds: dict[str, float] = {}
    for row in rows or []:
        try:
            metric, sd = str(row["metric"]), float(row[column]) / 100.0
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{name}: benchmark {bench!r} has a metric row without {column}") from None
        if not math.isfinite(sd) or sd < 0.0:
            raise ValueError(f"{name}: benchmark {bench!r}, {metric}: {column} {sd * 100} is not a spread")
        sds[metric] = sd
    if not sds:
        raise ValueError(f"{name}: benchmark {bench!r} has no metrics with a {column}")
    # The base and kernels - 1 perturbed builds: the spread of those builds has kernels - 2 dof.
    return sds, float(kernels - 2)


def build_noise_from_record(record: object, name: str) -> MeasuredBuildNoise:
    """The between-build parts of a `bench/build_noise.py --json` record: per benchmark, the largest
    sd among its metrics (never below MEASURED_BUILD_FLOOR), with the builds' degrees of freedom.

    `name` says which record it is in messages and in the source. ValueError says what is missing.
    """
    if not isinstance(record, dict) or not isinstance(record.get("results"), dict) or not record["results"]:
        raise ValueError(f"{name}: not a bench/build_noise.py --json record (no 'results' by benchmark)")
    header = record.get("header")
    # A --phases record is the base booted at other settle phases: that spread is what each boot's
    # seeded phase already samples, so as a between-build part it would count twice.
    if record.get("kind") == "phases" or (isinstance(header, str) and "settle phases" in header):
        raise ValueError(
            f"{name}: a record of settle phases (bench/build_noise.py --phases), whose spread the boots' "
            "seeded phases already hold; make one of perturbed builds (without --phases)"
        )
    priors: dict[str, NoisePrior] = {}
    for bench, result in record["results"].items():
        sds, dof = between_build_rows(result, name, str(bench))
        priors[str(bench)] = NoisePrior(max(max(sds.values()), MEASURED_BUILD_FLOOR), dof)
    when = f", {header.split(' on ', 1)[0].removeprefix('Measured ')}" if isinstance(header, str) else ""
    return MeasuredBuildNoise(priors, f"perturbed-build record {name}{when}")


@dataclass(frozen=True)
class BuildNoise:
    """The between-build component of one metric on one machine class and clock.

    sd: standard deviation of one build's level around its group's, on the compared scale (log
    scale when every value is positive: roughly a coefficient of variation); dof: the degrees of
    freedom of sd^2 (Satterthwaite; 0 when the estimate was clipped at 0); builds: how many
    builds it rests on (in groups of at least two); groups: how many groups they came in.
    boot_sd, boot_dof: the pooled sd of one boot summary around its build's level, and its dof.
    """

    sd: float
    dof: float
    builds: int
    groups: int
    boot_sd: float
    boot_dof: float
    log_scale: bool
    clipped: bool = False
    p_value: float = 1.0  # F-test of between-build against within-build spread

    def prior(self) -> NoisePrior | None:
        """MetricInput.build_noise for the A/B test; None when history shows no between-build spread
        beyond what the boots explain (see the module's docstring)."""
        if self.sd <= 0.0 or self.dof <= 0.0 or self.p_value >= BUILD_F_LEVEL:
            return None
        return NoisePrior(self.sd, self.dof)


def _mean_squares(groups: list[list[np.ndarray]]) -> tuple[float, float, float, float, float, int, int]:
    """(SS between builds, its dof, SS within builds, its dof, n0 numerator, builds, groups)."""
    ssb = dfb = ssw = dfw = n0_num = 0.0
    builds = used_groups = 0
    for g in groups:
        if len(g) < 2:
            # One build says nothing about builds; its boots still tell the within part.
            for y in g:
                ssw += sum_sq_dev(y)
                dfw += y.size - 1
            continue
        sizes = np.array([y.size for y in g], dtype=float)
        means = np.array([y.mean() for y in g])
        total = float(sizes.sum())
        grand = float(np.dot(sizes, means) / total)
        ssb += float(np.dot(sizes, (means - grand) ** 2))
        dfb += len(g) - 1
        n0_num += total - float(np.dot(sizes, sizes)) / total
        for y in g:
            ssw += sum_sq_dev(y)
            dfw += y.size - 1
        builds += len(g)
        used_groups += 1
    return ssb, dfb, ssw, dfw, n0_num, builds, used_groups


def between_build_noise(groups: Sequence[Sequence[Boots]], boot_noise: NoisePrior | None = None) -> BuildNoise:
    """Estimate the between-build sd from groups of builds that share a level.

    groups: each a sequence of builds; each build its boots, each boot its iterations (a flat list
    is one boot; with only boot summaries at hand, give each boot as a one-element list).
    boot_noise: the boot-summary noise learned for this metric (NoiseModel.prior()), pooled with
    the within-build spread seen here; it matters when the history has one boot per build, where
    otherwise all of the spread is counted as between builds (conservative: the A/B test then
    counts the boot noise twice).
    """
    cleaned = [[normalise_boots(b) for b in g] for g in groups]
    cleaned = [[b for b in g if b] for g in cleaned]
    values = [v for g in cleaned for b in g for boot in b for v in boot]
    log_scale = bool(values) and all(v > 0 for v in values)
    summaries = [[boot_summaries(b, log_scale) for b in g] for g in cleaned]
    ssb, dfb, ssw, dfw, n0_num, builds, used = _mean_squares(summaries)
    if boot_noise is not None and boot_noise.dof > 0.0 and math.isfinite(boot_noise.sd) and boot_noise.sd >= 0.0:
        # History's boot noise counts as dof0 more boots' worth of within-build spread.
        ssw += boot_noise.dof * boot_noise.sd**2
        dfw += boot_noise.dof
    return between_build_noise_from_sums(ssb, dfb, ssw, dfw, n0_num, builds, used, log_scale)


def between_build_noise_from_sums(
    ssb: float, dfb: float, ssw: float, dfw: float, n0_num: float, builds: int, used: int, log_scale: bool
) -> BuildNoise:
    """The estimate from pooled mean squares (_mean_squares' sums, which add across
    groups: kperf.stats.history keeps them per tracked branch)."""
    msw = ssw / dfw if dfw > 0 else 0.0
    boot_sd = math.sqrt(msw)
    if dfb == 0:
        return BuildNoise(0.0, 0.0, builds, used, boot_sd, dfw, log_scale)
    msb = ssb / dfb
    n0 = n0_num / dfb
    var = (msb - msw) / n0
    if var <= 0.0:
        return BuildNoise(0.0, 0.0, builds, used, boot_sd, dfw, log_scale, clipped=True)
    # Boots that agree exactly (or no boot-level information): any spread of builds is theirs.
    p = dist.f_sf(msb / msw, dfb, dfw) if msw > 0.0 and dfw > 0 else 0.0
    denom = msb * msb / dfb + (msw * msw / dfw if dfw > 0 else 0.0)
    dof = (msb - msw) ** 2 / denom if denom > 0 else dfb
    return BuildNoise(math.sqrt(var), dof, builds, used, boot_sd, dfw, log_scale, p_value=p)


def groups_between(builds: Sequence[Boots], change_points: Sequence[int]) -> list[list[Boots]]:
    """A tracked branch's builds (one per commit, in order) cut at its change points' indices.

    Each change point's index is the first commit after the change (as
    kperf.stats.changepoints reports it), so it starts a new group.
    """
    cuts = sorted({i for i in change_points if 0 < i < len(builds)})
    edges = [0, *cuts, len(builds)]
    return [list(builds[a:b]) for a, b in zip(edges, edges[1:]) if b > a]
