"""Proposition 9 (`nqf.theory.width_regime`, `ntk_drift`, `width_scaled_model`): the regime
against the paper's conditions, the drift against weight-space autodiff, the width scan."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate

from nqf.data._model import NQFModel
from nqf.solvers._solve import solve_flow
from nqf.theory import ntk, ntk_drift, width_regime, width_scaled_model
from nqf.validate import _regime as R
from nqf.validate._flow import _wspace_jacobian, _wspace_outputs


@pytest.mark.parametrize(
    "aA, aB",
    [(a, b) for a in (0.0, 0.25, 0.5, 1.0, 2.0) for b in (0.5, 0.75, 1.0, 1.25, 2.0, math.inf)],
)
def test_width_regime_is_the_papers_conditions(aA, aB):
    res = width_regime(aA, aB)
    lazy = aA > 0 and aB > 1  # Prop. 9, case 1
    feature = aA == 0 or 0.5 <= aB <= 1  # Prop. 9, case 2
    assert lazy != feature  # the two cases partition the allowed exponents
    assert res.regime == ("lazy" if lazy else "feature learning")
    assert res.drift_exponent == max(1 - aB, -aA)  # the two rates of the proof
    assert (res.drift_exponent < 0) == lazy
    assert res.limiting_term == ("A and B" if 1 - aB == -aA else "B" if 1 - aB > -aA else "A")


def test_width_regime_refuses_bad_exponents():
    with pytest.raises(ValueError, match="alpha_A.*>= 0.*-0.1"):
        width_regime(-0.1, 2.0)
    with pytest.raises(ValueError, match="alpha_B.*>= 0.5.*0.4"):
        width_regime(0.5, 0.4)
    with pytest.raises(ValueError, match="alpha_g.*1/2.*1.0"):
        width_regime(0.5, 2.0, alpha_g=1.0)
    with pytest.raises(ValueError, match="alpha_A"):
        width_regime(float("nan"), 2.0)
    for bad in ("x", "1", True):  # strings that parse as numbers and bools too (a new-user trial)
        with pytest.raises(TypeError, match="alpha_B"):
            width_regime(0.5, bad)  # type: ignore[arg-type]


def test_width_scaled_model_scales_each_coefficient():
    base, M0, mu0 = R._base()
    d, aA, aB = 100, 0.5, 1.5
    sc = width_scaled_model(base, d, aA, aB)
    X = jnp.asarray(M0 + 0.1)
    np.testing.assert_allclose(sc.data.traces(X), d**-aA * np.asarray(base.data.traces(X)), rtol=1e-14)
    assert sc.g is not None and sc.B is not None and base.g is not None and base.B is not None
    np.testing.assert_allclose(sc.g, d**-0.5 * np.asarray(base.g), rtol=1e-15)
    np.testing.assert_allclose(sc.B, d**-aB * np.asarray(base.B), rtol=1e-15)
    np.testing.assert_array_equal(sc.y, base.y)
    assert width_scaled_model(base, d, aA).B is None  # alpha_B = inf: no B
    with pytest.raises(ValueError, match="alpha_A"):
        width_scaled_model(base, d, -1.0)
    with pytest.raises(TypeError, match="model"):
        width_scaled_model(np.eye(3), d, 0.5)  # type: ignore[arg-type]


@pytest.mark.slow
def test_ntk_drift_matches_weight_space_autodiff_and_scales_with_width():
    """ntk_drift on the (M, mu) flow vs |J J^T(t) - J J^T(0)| / |J J^T(0)| from the weight-space
    gradient flow W' = -grad_W L (scipy DOP853, rtol 1e-13), J = d f / d W by autodiff, d = 3."""
    base, _, _ = R._base()
    sc = width_scaled_model(base, 3, 0.0, 1.0)
    model = NQFModel(sc.data, g=sc.g, B=sc.B, f0=np.zeros(sc.m))
    p, d, T = model.p, 3, 1.0
    W0 = 0.5 * np.random.default_rng(1).standard_normal((p, d))
    ts = np.linspace(0.0, T, 21)  # the shapes of the width scan below (one compiled flow)
    sol = solve_flow(
        sc, M0=W0 @ W0.T, mu0=W0.sum(axis=1), d=d, t1=T, ts=ts, form="M-mu", rtol=1e-10, atol=1e-14, dense=False
    )
    drift = ntk_drift(sol)

    grad = jax.jit(jax.grad(lambda w: jnp.mean((_wspace_outputs(model, w.reshape(p, d)) - model.y) ** 2)))
    ref = scipy.integrate.solve_ivp(
        lambda t, w: -np.asarray(grad(w)), (0.0, T), W0.ravel(), "DOP853", t_eval=ts, rtol=1e-13, atol=1e-15
    )
    assert ref.success
    thetas = []
    for w in ref.y.T:
        J = np.asarray(_wspace_jacobian(model, jnp.asarray(w.reshape(p, d)))).reshape(model.m, -1)
        thetas.append((J @ J.T).ravel())
    thetas = np.asarray(thetas)
    want = np.linalg.norm(thetas - thetas[0], axis=1) / np.linalg.norm(thetas[0])
    assert want[-1] > 0.1  # the NTK does move here (feature learning at d = 3)
    np.testing.assert_allclose(drift, want, rtol=1e-7, atol=1e-12)
    # a bare data set: mu does not enter (g = B = 0)
    sol0 = solve_flow(base.data, M0=0.01 * np.eye(p), t1=T, ts=ts, form="M", dense=False)
    dr0 = ntk_drift(sol0)
    th = np.stack([np.asarray(ntk(base.data, M=M, mu=np.zeros(p), d=p + 1)).ravel() for M in np.asarray(sol0.M)])
    np.testing.assert_allclose(dr0, np.linalg.norm(th - th[0], axis=1) / np.linalg.norm(th[0]), rtol=1e-12)
    with pytest.raises(ValueError, match="`d` must not be given"):
        ntk_drift(sol, d=5)
    with pytest.raises(TypeError, match="FlowSolution"):
        ntk_drift(ref)  # type: ignore[arg-type]

    # the width scan: two cases of the validate check (lazy A-limited, feature learning with
    # alpha_B = 1) at d = 10..10^4: the drift exponent within 0.05 of Prop. 9's, O(1) loss drop
    for aA, aB in ((0.5, 2.0), (1.0, 1.0)):
        drift, ratio = R.regime_drifts(aA, aB)
        slope = R.measured_exponent(R.REGIME_WIDTHS, drift)
        assert abs(slope - width_regime(aA, aB).drift_exponent) <= R.REGIME_EXPONENT_BOUND, (aA, aB, drift)
        assert np.all(ratio < 0.7)  # an O(1) drop of the loss in the window
    assert drift[-1] > 1.0  # feature learning: the NTK changes by O(1) even at d = 10^4
