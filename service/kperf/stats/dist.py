"""The few distribution functions the tests call per metric, from scipy.special.

scipy.stats' distribution objects check and broadcast their arguments on
every call (tens of microseconds each); a comparison of 105 metrics calls
them hundreds of times, which was a third of its time. scipy.special
computes the same functions directly: service/tests/stats/test_stats_dist.py checks each
against scipy.stats over the arguments kperf passes, infinite degrees of
freedom included.
"""

from __future__ import annotations

from scipy import special


def t_sf(x: float, dof: float) -> float:
    """P(T > x) for Student's t with `dof` degrees of freedom (scipy.stats.t.sf)."""
    return float(special.stdtr(dof, -x))


def t_ppf(q: float, dof: float) -> float:
    """The q quantile of Student's t (scipy.stats.t.ppf)."""
    return float(special.stdtrit(dof, q))


def f_sf(x: float, dfn: float, dfd: float) -> float:
    """P(F > x) for the F distribution (scipy.stats.f.sf)."""
    return float(special.fdtrc(dfn, dfd, x))


def chi2_sf(x: float, dof: float) -> float:
    """P(X > x) for chi-squared with `dof` degrees of freedom (scipy.stats.chi2.sf)."""
    return float(special.chdtrc(dof, x))


def chi2_isf(p: float, dof: float) -> float:
    """The x with chi2_sf(x, dof) == p (scipy.stats.chi2.isf)."""
    return float(special.chdtri(dof, p))


def chi2_ppf(q: float, dof: float) -> float:
    """The q quantile of chi-squared (scipy.stats.chi2.ppf)."""
    return float(special.chdtri(dof, 1.0 - q))


def norm_ppf(q: float) -> float:
    """The q quantile of the standard normal (scipy.stats.norm.ppf)."""
    return float(special.ndtri(q))


def norm_cdf(x: float) -> float:
    """P(Z <= x) for the standard normal (scipy.stats.norm.cdf)."""
    return float(special.ndtr(x))


def norm_isf(p: float) -> float:
    """The z with P(Z > z) == p (scipy.stats.norm.isf)."""
    return float(-special.ndtri(p))
