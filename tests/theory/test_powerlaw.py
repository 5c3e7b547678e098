"""Power-law exponents (Eqs. E21-E23) and the exponent fitter (`nqf.powerlaw`)."""

import numpy as np
import pytest

from nqf.experiments import fig3_powerlaw
from nqf.powerlaw import (
    featurewise_exponent,
    featurewise_limit,
    finite_eps_exponent,
    first_drop_time,
    fit_power_law,
    ignition_window,
    samplewise_exponent,
    window_average,
)
from nqf.samplewise import staircase_limit


def test_exponent_formulas():
    assert featurewise_exponent(2.0, 0.8) == 1.25
    assert samplewise_exponent(1.0, 1.5) == pytest.approx(2 / 3, rel=1e-15)
    # Fig. 5: a1 = 2 beta, a2 = theta + beta
    for theta, expected in ((0.0, 4 / 3), (0.5, 1.0), (1.0, 0.8)):
        assert featurewise_exponent(3.0, theta + 1.5) == pytest.approx(expected, rel=1e-15)
    for bad in ((1.0, 1.0), (2.0, 0.0)):
        with pytest.raises(ValueError):
            featurewise_exponent(*bad)
    with pytest.raises(ValueError):
        samplewise_exponent(0.5, 1.0)
    with pytest.raises(ValueError):
        finite_eps_exponent(2.0, 0.8, [10.0, -1.0])


def test_finite_eps_exponent_is_E22():
    """E22 equals fig3-powerlaw's slope for a uniform init (sign flipped), tends to E21 as
    eps -> 0, and is -(d ln E/d ln k)/(d ln t*/d ln k) by finite differences of t*_k."""
    a1, a2, eps = 2.0, 0.8, 1e-6
    k = np.array([3.0, 30.0, 300.0])
    zeta, C = k**-a2, k ** (a1 - 2 * a2) / 8.0
    g = finite_eps_exponent(a1, a2, np.log(zeta / (C * eps)))
    np.testing.assert_allclose(-g, fig3_powerlaw.slope_E22_as_written(zeta, C, eps, a1, a2), rtol=1e-14)
    np.testing.assert_allclose(finite_eps_exponent(a1, a2, np.log(zeta / (C * 1e-300))), 1.25, rtol=0.01)

    def log_tstar(kk):
        z, c = kk**-a2, kk ** (a1 - 2 * a2) / 8.0
        return np.log(np.log(z / (c * eps)) / z)

    h = 1e-5
    dlt = (log_tstar(k * np.exp(h)) - log_tstar(k * np.exp(-h))) / (2 * h)
    np.testing.assert_allclose(g, (a1 - 1) / dlt, rtol=1e-7)


@pytest.mark.parametrize("a1, a2", [(2.0, 0.8), (3.0, 2.5)])
def test_featurewise_limit_has_E21_exponent(a1, a2):
    """The eps -> 0 staircase sum_k V_k I(tau < 1/zeta_k) with zeta_k = k^-a2, V_k = k^-a1 and
    p = 10^5 modes decays as tau^-(a1-1)/a2 (E21), independently of any flow."""
    k = np.arange(1, 100_001, dtype=float)
    tau = np.geomspace(10.0 ** (2 * a2), 10.0 ** (3.5 * a2), 400)  # modes ~100..3000 ignite
    E = featurewise_limit(tau, k**-a2, k**-a1)
    fit = fit_power_law(tau, E, tau[0], tau[-1])
    assert fit.exponent == pytest.approx(featurewise_exponent(a1, a2), rel=0.01)
    assert fit.is_power_law


def test_samplewise_staircase_is_featurewise_limit_and_E23():
    """Theorem 10's staircase is the feature-wise limit with V = y^2/m; with zeta ~ mu^-g2,
    y ~ mu^-g1 it decays as tau^-(2 g1 - 1)/g2 (Theorem 11, E23)."""
    m, g1, g2 = 100_000, 1.0, 1.5
    mu = np.arange(1, m + 1, dtype=float)
    zeta, y = mu**-g2, mu**-g1
    tau = np.geomspace(10.0 ** (2 * g2), 10.0 ** (3 * g2), 300)  # samples ~100..1000
    S = staircase_limit(tau, zeta, y)
    direct = np.mean(y[None, :] ** 2 * (tau[:, None] < 1 / zeta[None, :]), axis=1)
    np.testing.assert_allclose(S, direct, rtol=1e-10)
    fit = fit_power_law(tau, S, tau[0], tau[-1])
    assert fit.exponent == pytest.approx(samplewise_exponent(g1, g2), rel=0.01)


def test_fit_exact_power_law_and_resampling():
    t = np.geomspace(1.0, 1e4, 500)
    fit = fit_power_law(t, 3.0 * t**-1.3, 10.0, 1e3)
    assert fit.exponent == pytest.approx(1.3, rel=1e-12)
    assert fit.log_prefactor == pytest.approx(np.log(3.0), rel=1e-12)
    assert fit.rms < 1e-12 and fit.drift < 1e-10 and fit.is_power_law and fit.reasons == ()
    assert fit.decades == pytest.approx(2.0)
    np.testing.assert_allclose(fit.predict([10.0, 100.0]), 3.0 * np.array([10.0, 100.0]) ** -1.3, rtol=1e-12)
    # the same staircase saved on a linear and on a log grid gives the same exponent
    k = np.arange(1, 501, dtype=float)
    tstar = k**1.5  # unit k (weight k^-2) is learned at t ~ k^1.5: exponent (2 - 1)/1.5

    def stair(tt):
        L = np.sum(k[None, :] ** -2.0 / (1 + np.exp(np.clip(5 * (tt[:, None] / tstar - 1), -700, 700))), axis=1)
        return L + 1 / 500.5  # units k > 500 (not ignited before t ~ 1e4)

    t_lin = np.linspace(1.0, 3e4, 20_000)
    t_log = np.geomspace(1.0, 3e4, 2000)
    f1 = fit_power_law(t_lin, stair(t_lin), 30.0, 3e3)
    f2 = fit_power_law(t_log, stair(t_log), 30.0, 3e3)
    assert f1.exponent == pytest.approx(f2.exponent, rel=2e-3)
    assert f1.exponent == pytest.approx(1 / 1.5, rel=0.05) and f1.is_power_law


def test_fit_rejects_non_power_laws():
    t = np.geomspace(1.0, 1e4, 2000)
    # plateau then a logistic drop (one ignition)
    L = 0.1 + 1.0 / (1 + np.exp(t / 100 - 10))
    fit = fit_power_law(t, L, 10.0, 1e4)
    assert not fit.is_power_law and any("rms" in r or "differ" in r for r in fit.reasons)
    # exponential decay over two decades: the local exponent drifts
    fit = fit_power_law(t, np.exp(-t / 300), 10.0, 1e3)
    assert not fit.is_power_law and any("differ" in r for r in fit.reasons)
    # flat: no decay
    fit = fit_power_law(t, np.ones_like(t), 10.0, 1e3)
    assert not fit.is_power_law and any("no decay" in r for r in fit.reasons)
    # too short a window, even for an exact power law
    fit = fit_power_law(t, t**-1.0, 10.0, 50.0)
    assert not fit.is_power_law and any("decades" in r for r in fit.reasons)


def test_fit_bad_input():
    t = np.geomspace(1.0, 100.0, 50)
    with pytest.raises(ValueError, match="inside"):
        fit_power_law(t, t**-1.0, 0.5, 10.0)
    with pytest.raises(ValueError, match="t_min < t_max"):
        fit_power_law(t, t**-1.0, 10.0, 5.0)
    with pytest.raises(ValueError, match="> 0"):
        fit_power_law(t, -t, 2.0, 10.0)
    with pytest.raises(ValueError, match="increasing"):
        fit_power_law(t[::-1], t, 2.0, 10.0)
    with pytest.raises(ValueError, match="shape"):
        fit_power_law(t, t[:-1], 2.0, 10.0)


def test_windows_and_helpers():
    tstar = np.arange(1, 1001, dtype=float) ** 0.8
    w = ignition_window(tstar, 2.0, k_lo=5)
    assert (w["k_lo"], w["k_hi"]) == (5, 50)
    assert w["t_min"] == tstar[4] and w["t_max"] == tstar[49]
    assert ignition_window(tstar, 2.0, t_end=10.0)["t_max"] == 10.0
    w = ignition_window(np.arange(1, 65, dtype=float) ** 2.5, 3.0, k_lo=2)
    assert w["k_hi"] == 14  # (14/64)^2 <= 0.05 < (15/64)^2
    with pytest.raises(ValueError):
        ignition_window(tstar[:10], 2.0, k_lo=5)
    assert window_average(tstar, np.full(1000, 0.7), 10.0, 100.0) == pytest.approx(0.7, rel=1e-14)
    # log-uniform weighting: the average of ln k over [t*_10, t*_100] is the midpoint in ln k
    val = window_average(tstar, np.log(np.arange(1, 1001.0)), tstar[9], tstar[99])
    assert val == pytest.approx(0.5 * (np.log(10) + np.log(100)), rel=1e-3)
    t = np.linspace(0.0, 10.0, 11)
    assert first_drop_time(t, 10.0 - t, 0.5) == pytest.approx(5.0)
    assert np.isnan(first_drop_time(t, np.ones(11)))
