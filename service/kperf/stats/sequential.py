"""More boots for `inconclusive`, without peeking until significant.

A group-sequential design: the looks are fixed in advance (e.g. after 5, 10,
15 and 20 boots per side) and the false-alarm probability alpha is spent
across them with a Lan-DeMets spending function, O'Brien-Fleming-like by
default (almost nothing spent early, nearly the full alpha at the last look)
or Pocock-like (evenly). The boundaries c_1..c_L on the |z| scale are found
by numerical integration over the Brownian motion of the score (Armitage,
McPherson and Rowe's recursion), so that under no change

    P(|Z_k| >= c_k at some look k) = alpha.

At look k each metric's Welch t on boot summaries (kperf.stats.abtest) is
mapped to a z with the same two-sided p-value (small-sample correction), and
turned into a repeated p-value: the smallest alpha at which the design would
stop at this look. Repeated p-values are valid at every look, so
Benjamini-Hochberg across the comparison's metrics works on them as usual.

Decisions per metric at look k:
- regression / improvement: its q < alpha and the change clears the minimum
  effect;
- no-change: the repeated confidence interval (estimate +- c_k * se) lies
  inside +- the minimum effect. Stopping for no-change can only lower the
  chance of a false regression, so it costs no alpha;
- otherwise undecided: more boots, unless this was the last look, in which
  case it is inconclusive, budget spent.
A significant change below the minimum effect is never a regression or an
improvement (kperf.stats.abtest.decide, the same rule as the fixed test).

With a between-build component (MetricInput.build_noise) the build part of
the difference is the same at every look, so the looks' z are more strongly
correlated than the boots-only model behind the boundaries assumes; that
makes the design conservative (test_stats_builds.py simulates it), and more
boots narrow only the boots' part of the interval (extra["build_share"] says
how much of it is the builds'). The same holds for the readings' rounding
(kperf.stats.abtest.reading_unit), a bound by which the difference is
shrunk before the test and the interval widened. A metric whose fixed part alone, at the
last look's boundary, could neither fit inside the threshold nor exclude 0
is left inconclusive with a note and asks for no boots: no number of them
would decide it (arm64's page allocator at 14-55 units a reading).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

from kperf.stats import dist
from kperf.stats.abtest import (
    BootTest,
    MetricInput,
    MetricResult,
    Verdict,
    benjamini_hochberg,
    compare_with_test,
    decide,
)

GRID = 201  # points per look in the numerical integration


def spent(t: float, alpha: float, kind: str) -> float:
    """Alpha spent by information fraction t (Lan-DeMets)."""
    t = min(max(t, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if kind == "obrien-fleming":
        return float(2.0 - 2.0 * sps.norm.cdf(sps.norm.ppf(1.0 - alpha / 2.0) / math.sqrt(t)))
    if kind == "pocock":
        return float(alpha * math.log(1.0 + (math.e - 1.0) * t))
    raise ValueError(f"unknown spending function {kind!r}: use 'obrien-fleming' or 'pocock'")


@lru_cache(maxsize=4096)
def boundaries(fractions: tuple[float, ...], alpha: float, kind: str = "obrien-fleming") -> tuple[float, ...]:
    """Two-sided |z| boundaries at the given information fractions (increasing, last = 1)."""
    out: list[float] = []
    # density of the score S(t) = Z(t) sqrt(t) on the continuation region, on a grid
    grid = np.zeros(0)
    dens = np.zeros(0)
    prev_t, prev_spent = 0.0, 0.0
    for t in fractions:
        target = spent(t, alpha, kind) - prev_spent
        dt = t - prev_t
        if not out:
            c = float(sps.norm.isf(max(target, 1e-300) / 2.0))
        else:
            w = np.gradient(grid) if grid.size > 1 else np.ones(1)

            def cross(
                c: float,
                grid: np.ndarray = grid,
                dens: np.ndarray = dens,
                w: np.ndarray = w,
                t: float = t,
                dt: float = dt,
                target: float = target,
            ) -> float:
                b = c * math.sqrt(t)
                sd = math.sqrt(dt)
                p = special.ndtr((grid - b) / sd) + special.ndtr((-b - grid) / sd)
                return float(np.sum(dens * p * w)) - target

            if target <= 0.0 or cross(12.0) >= 0.0:
                c = 12.0
            else:
                c = float(optimize.brentq(cross, 0.0, 12.0, xtol=1e-6)) if cross(0.0) > 0 else 0.0
        out.append(c)
        b = c * math.sqrt(t)
        new_grid = np.linspace(-b, b, GRID)
        if not grid.size:
            new_dens = sps.norm.pdf(new_grid / math.sqrt(t)) / math.sqrt(t)
        else:
            w = np.gradient(grid) if grid.size > 1 else np.ones(1)
            sd = math.sqrt(dt)
            u = (new_grid[:, None] - grid[None, :]) / sd
            kernel = np.exp(-0.5 * u * u) / (sd * math.sqrt(2.0 * math.pi))
            new_dens = kernel @ (dens * w)
        grid, dens = new_grid, new_dens
        prev_t, prev_spent = t, spent(t, alpha, kind)
    return tuple(out)


@dataclass(frozen=True)
class Plan:
    """Boots per side at each look; the last is the budget."""

    looks: tuple[int, ...] = (5, 10, 15, 20)
    alpha: float = 0.05
    spending: str = "obrien-fleming"

    def __post_init__(self) -> None:
        if not self.looks or any(b <= a for a, b in zip(self.looks, self.looks[1:])) or self.looks[0] < 2:
            raise ValueError("looks must be increasing boot counts, the first at least 2")

    @property
    def fractions(self) -> tuple[float, ...]:
        return tuple(k / self.looks[-1] for k in self.looks)

    def boundary(self, look: int, alpha: float | None = None) -> float:
        """|z| boundary at look number `look` (1-based)."""
        return boundaries(self.fractions, self.alpha if alpha is None else alpha, self.spending)[look - 1]

    def repeated_p(self, z: float, look: int) -> float:
        """Smallest alpha at which |z| would cross the boundary at this look (interpolated on log alpha)."""
        table = _alpha_table(self.fractions, self.spending)
        cs = np.array([b[look - 1] for b in table])  # falls as alpha grows
        z = abs(z)
        if z >= cs[0]:
            return float(_ALPHAS[0])
        if z <= cs[-1]:
            return 1.0
        return float(np.exp(np.interp(-z, -cs, np.log(_ALPHAS))))


_ALPHAS = np.geomspace(1e-8, 0.5, 49)


@lru_cache(maxsize=64)
def _alpha_table(fractions: tuple[float, ...], kind: str) -> tuple[tuple[float, ...], ...]:
    return tuple(boundaries(fractions, float(a), kind) for a in _ALPHAS)


def plan_looks(first: int = 5, budget: int = 20, step: int = 5) -> Plan:
    """Looks at first, first+step, ..., budget boots per side."""
    looks = list(range(first, budget + 1, step))
    if looks[-1] != budget:
        looks.append(budget)
    return Plan(tuple(looks))


@dataclass
class Look:
    """What to do after a look: decide now, or run `more_boots` boots per side and look again."""

    decide: bool
    more_boots: int
    look: int
    results: dict[str, MetricResult] = field(default_factory=dict)
    boundary: float = math.inf
    alpha_spent: float = 0.0


def _z_from_t(t: float, dof: float) -> float:
    p = 2.0 * dist.t_sf(abs(t), dof)
    return math.copysign(dist.norm_isf(p / 2.0), t) if p > 0 else math.copysign(40.0, t)


def sequential_look(metrics: Mapping[str, MetricInput], look: int, plan: Plan) -> Look:
    """Decide each metric with the alpha spent so far, or ask for more boots.

    metrics: the boots so far (all of them, not just the new ones); look: this
    look's number (1-based) in plan.looks. The service calls this after each
    batch of boots; once Look.decide is true the results are final.
    """
    if not 1 <= look <= len(plan.looks):
        raise ValueError(f"look {look} is outside the plan's {len(plan.looks)} looks")
    bound = plan.boundary(look)
    results: dict[str, MetricResult] = {}
    repeated: dict[str, float] = {}
    tests: dict[str, BootTest] = {}
    for name, inp in metrics.items():
        r, test = compare_with_test(inp, plan.alpha)
        results[name] = r
        if test is None or r.change_pct is None:
            continue
        tests[name] = test
        beyond = test.beyond  # what the readings' rounding cannot explain
        z = _z_from_t(test.t, test.dof) if test.se > 0 else (0.0 if beyond == 0 else math.copysign(40.0, beyond))
        repeated[name] = plan.repeated_p(z, look)
        r.p_value = repeated[name]
        # repeated interval on the z scale, mapped back to percent, widened by the rounding's bound
        se_z = abs(beyond / z) if z else test.se
        half = test.bound + bound * se_z
        lo = test.to_pct(test.diff - half, inp.higher_is_better)
        hi = test.to_pct(test.diff + half, inp.higher_is_better)
        if lo is not None and hi is not None:
            r.ci_low_pct, r.ci_high_pct = sorted((lo, hi))
    names = list(repeated)
    for name, q in zip(names, benjamini_hochberg([repeated[n] for n in names]), strict=True):
        results[name].q_value = q
    undecided = 0
    for r in results.values():
        r.extra["look"] = float(look)
        r.extra["boundary_z"] = bound
        # The same rule as the fixed test (practical threshold included), on the repeated p and interval.
        decide(r, plan.alpha)
    for name, r in results.items():
        if r.verdict is not Verdict.INCONCLUSIVE:
            continue
        test = tests.get(name)
        if test is not None and not _boots_can_decide(test, r, metrics[name].higher_is_better, plan):
            span = test.to_pct(test.fixed_half(plan.boundary(len(plan.looks))), True)
            r.extra["boots_cannot_decide"] = 1.0
            r.notes.append(
                f"more boots cannot decide it: the builds' and the readings' rounding part alone spans "
                f"+-{span:.2g}%, against the {r.min_effect_pct:g}% threshold"
            )
            continue
        undecided += 1
    last = look == len(plan.looks)
    for r in results.values():
        if r.verdict is Verdict.INCONCLUSIVE and "boots_cannot_decide" not in r.extra:
            r.notes.append(
                f"budget of {plan.looks[-1]} boots per side spent" if last else f"look {look} of {len(plan.looks)}"
            )
    have = min((min(r.base_boots, r.head_boots) for r in results.values()), default=0)
    more = 0 if (last or undecided == 0) else max(0, plan.looks[look] - have)
    return Look(
        decide=last or undecided == 0,
        more_boots=more,
        look=look,
        results=results,
        boundary=bound,
        alpha_spent=spent(plan.fractions[look - 1], plan.alpha, plan.spending),
    )


def _boots_can_decide(test: BootTest, r: MetricResult, higher_is_better: bool, plan: Plan) -> bool:
    """Whether infinitely many boots, at the present estimate, would decide the metric.

    They shrink the boots' part of the interval to nothing; the builds' and the rounding's stay.
    The last look's boundary is the narrowest the plan allows.
    """
    half = test.fixed_half(plan.boundary(len(plan.looks)))
    if half <= 0.0 or r.change_pct is None:
        return True
    lo, hi = test.to_pct(test.diff - half, higher_is_better), test.to_pct(test.diff + half, higher_is_better)
    if lo is None or hi is None:
        return True
    lo, hi = sorted((lo, hi))
    m = r.min_effect_pct
    return (-m < lo and hi < m) or ((lo > 0.0 or hi < 0.0) and abs(r.change_pct) >= m)


def look_number(plan: Plan, boots_per_side: int) -> int:
    """Which look a comparison with this many boots per side is at (the last one reached)."""
    reached = [i + 1 for i, k in enumerate(plan.looks) if boots_per_side >= k]
    if not reached:
        raise ValueError(f"{boots_per_side} boots per side is fewer than the first look ({plan.looks[0]})")
    return reached[-1]
