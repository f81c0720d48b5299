"""kperf.stats.dist against scipy.stats over the arguments kperf passes them."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from kperf.stats import dist

# Welch's degrees of freedom are fractional; a known variance is infinite.
DOFS = [0.5, 1.0, 1.7, 2.0, 3.0, 4.5, 9.0, 19.0, 30.0, 100.0, 1e4, 1e7, math.inf]
XS = [-40.0, -5.0, -1.5, -0.1, 0.0, 0.1, 1.0, 2.5, 10.0, 40.0]
QS = [1e-6, 0.025, 0.05, 0.5, 0.8, 0.95, 0.975, 0.999]


def close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=1e-7, abs=1e-300)


@pytest.mark.parametrize("dof", DOFS)
def test_student_t(dof: float) -> None:
    assert all(close(dist.t_sf(x, dof), float(sps.t.sf(x, dof))) for x in XS)
    assert all(close(dist.t_ppf(q, dof), float(sps.t.ppf(q, dof))) for q in QS)


@pytest.mark.parametrize("dof", [0.5, 1.0, 2.0, 4.0, 19.0, 100.0, 1e4])
def test_chi_squared_and_f(dof: float) -> None:
    assert all(close(dist.chi2_sf(x, dof), float(sps.chi2.sf(x, dof))) for x in [0.01, 0.5, 1.0, 3.0, 10.0, 100.0])
    assert all(close(dist.chi2_isf(p, dof), float(sps.chi2.isf(p, dof))) for p in [1e-8, 1e-4, 0.05, 0.5, 0.95])
    assert all(close(dist.chi2_ppf(q, dof), float(sps.chi2.ppf(q, dof))) for q in [1e-4, 0.05, 0.5, 0.95])
    for dfd in [1.0, 3.0, 19.0, 1e4]:
        assert all(close(dist.f_sf(x, dof, dfd), float(sps.f.sf(x, dof, dfd))) for x in [0.0, 0.3, 1.0, 2.5, 30.0])


def test_normal() -> None:
    assert all(close(dist.norm_ppf(q), float(sps.norm.ppf(q))) for q in QS)
    assert all(close(dist.norm_isf(q), float(sps.norm.isf(q))) for q in QS)
    assert all(close(dist.norm_cdf(x), float(sps.norm.cdf(x))) for x in XS)


def test_degrees_of_freedom_that_mean_nothing_give_nan_as_scipy_does() -> None:
    for dof in [-1.0, math.nan]:
        assert math.isnan(dist.t_sf(1.0, dof)) and math.isnan(float(sps.t.sf(1.0, dof)))
        assert math.isnan(dist.t_ppf(0.9, dof)) and math.isnan(float(sps.t.ppf(0.9, dof)))
