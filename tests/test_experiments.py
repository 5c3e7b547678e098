"""The figure reproductions (`nqf.experiments`): JSON contents, measured vs predicted numbers."""

import json

import numpy as np
import pytest

import nqf.experiments
from _quick_runs import quick_run
from nqf.experiments import fig3_powerlaw

# THEORY sec. 11: t*_k = (1/r_k) ln(r_k / (C_kk eps)) for the Fig. 3 setting (rho = 1/2).
FIG3_TSTAR = [11.51, 21.64, 40.51, 75.47, 139.84]


def test_registry():
    assert {"fig2", "fig3", "fig3-powerlaw", "fig4", "fig4-powerlaw", "fig5"} <= set(nqf.experiments.EXPERIMENTS)
    assert all(callable(f) for f in nqf.experiments.EXPERIMENTS.values())
    assert set(nqf.experiments.TITLES) == set(nqf.experiments.EXPERIMENTS)
    with pytest.raises(KeyError, match="fig3-powerlaw"):
        nqf.experiments.run("nope", "unused")


def test_fig3_quick(tmp_path_factory):
    rc, out, _, res = quick_run("fig3", tmp_path_factory)
    assert rc == 0
    assert res == json.loads((out / "fig3.json").read_text())
    ign = res["ignition_times"]
    np.testing.assert_allclose(ign["predicted"], FIG3_TSTAR, atol=0.006)
    np.testing.assert_allclose(ign["measured"], ign["predicted"], rtol=1e-3)
    assert res["max_rel_error_vs_oracle"] <= 1e-8
    assert res["eps_1e-12"]["max_rel_error_vs_oracle"] <= 1e-8
    assert res["eps_1e-12"]["t1"] == 600.0
    np.testing.assert_allclose(res["eps_1e-12"]["ignition_times"]["measured"],
                               res["eps_1e-12"]["ignition_times"]["predicted"], rtol=1e-3)
    # GD at lr = 0.01 is a first-order discretization of the flow: ~2% off, not 1e-8.
    assert 1e-4 < res["gd_vs_flow_max_rel_deviation"] < 0.05
    assert res["settings"]["n_times"] >= 1000
    assert res["solver_stats"]["num_steps"] > 0
    names = [c["name"] for c in res["checks"]]
    assert len(names) == 13 and len(set(names)) == 13


def test_fig3_powerlaw_quick(tmp_path_factory):
    rc, out, _, res = quick_run("fig3-powerlaw", tmp_path_factory)
    assert rc == 0
    s, w = res["slope"], res["fit_window"]
    assert s["predicted"] == -1.25
    assert abs(s["measured"] - s["finite_eps_predicted"]) <= 0.05 * abs(s["finite_eps_predicted"])
    assert abs(s["measured"] - s["finite_size_predicted"]) <= 0.02 * abs(s["finite_size_predicted"])
    p = res["settings"]["p"]
    assert 1 <= w["k_lo"] < w["k_hi"] < p and 0 < w["t_min"] < w["t_max"] < res["settings"]["t1"]
    assert w["n_points"] >= 20
    assert res["solver_stats"]["num_steps"] > 0 and res["wall_time_s"]["solve"] > 0
    assert all(c["passed"] for c in res["checks"])


def test_finite_eps_slope_formula():
    """The generalized E22: equals E22 for a uniform init (b = 0), and -(a1-1)/a2 for b = a1-a2."""
    k = np.array([3.0, 30.0, 300.0])
    a1, a2, eps = 2.0, 0.8, 1e-6
    zeta, C = k**-a2, k ** (a1 - 2 * a2) / 8.0
    uniform = fig3_powerlaw.slope_eps(k, zeta, C, np.ones_like(k), eps, a1, a2, b=0.0)
    np.testing.assert_allclose(uniform, fig3_powerlaw.slope_E22_as_written(zeta, C, eps, a1, a2), rtol=1e-14)
    matched = fig3_powerlaw.slope_eps(k, zeta, C, k ** -(a1 - a2), eps, a1, a2, b=a1 - a2)
    np.testing.assert_allclose(matched, -(a1 - 1) / a2, rtol=1e-14)
    # Independent check: d ln t*/d ln k by finite differences of E19's leading form.
    def log_tstar(kk, b):
        z, c = kk**-a2, kk ** (a1 - 2 * a2) / 8.0
        return np.log(np.log(z / (c * kk**-b * eps)) / z)
    h = 1e-5
    for b in (0.0, 0.5, 1.2):
        dlt = (log_tstar(k * np.exp(h), b) - log_tstar(k * np.exp(-h), b)) / (2 * h)
        s = fig3_powerlaw.slope_eps(k, zeta, C, k**-b, eps, a1, a2, b=b)
        np.testing.assert_allclose(s, -(a1 - 1) / dlt, rtol=1e-7)
