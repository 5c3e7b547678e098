"""The exact solve path (`solve_flow(..., method="exact")`, Theorem 6's closed form) against
independent computations: the ODE flow (non-stiff and stiff), a 50-digit evaluation of the
logistic formula, and the loss of the saved states."""

import mpmath
import numpy as np
import pytest

import nqf
from conftest import random_orthogonal
from nqf.dynamics._glv import logistic_log_z, logistic_z


def _mp_logistic(z0, a, C, t):
    """Theorem 6's z(t) = a z0 / (C z0 + (a - C z0) e^{-a t}) (z0 / (1 + C z0 t) at a = 0) in
    50-digit arithmetic."""
    with mpmath.workdps(50):
        z0, a, C, t = (mpmath.mpf(float(v)) for v in (z0, a, C, t))
        if a == 0:
            return z0 / (1 + C * z0 * t)
        return a * z0 / (C * z0 + (a - C * z0) * mpmath.exp(-a * t))


@pytest.mark.parametrize("a", [2.0, 1e-9, 0.0, -1e-9, -3.0, 1e-3])
def test_logistic_formula_to_full_precision(a):
    """`logistic_z` / `logistic_log_z` to a few ulps of the 50-digit value for every sign and
    size of a, from the first instant to t where e^{|a| t} overflows float64."""
    C = 0.7
    for z0 in (1e-12, 0.3, 5.0):
        for t in (0.0, 1e-12, 1e-3, 0.4, 3.0, 1e2, 1e4, 1e6):
            ref = _mp_logistic(z0, a, C, t)
            z = float(logistic_z(z0, a, C, t))
            lz = float(logistic_log_z(np.log(z0), z0, a, C, t))
            log_ref = float(mpmath.log(ref))
            assert abs(lz - log_ref) < 1e-14 * max(1.0, abs(log_ref)), (z0, t, lz, log_ref)
            if float(ref) > 1e-300:
                assert abs(z / float(ref) - 1) < 1e-14, (z0, t, z, ref)
            else:  # below float64's normal range: z underflows to (nearly) 0
                assert 0.0 <= z <= 1e-300


@pytest.fixture(scope="module")
def fig3():
    data = nqf.datasets.fig3_data()
    return data, np.sqrt(1e-5) * np.eye(data.p), np.linspace(0.0, 250.0, 101)


def test_exact_matches_the_ode_flow(fig3):
    """Fig. 3 data (orthogonal features): the closed form and a tight ODE solve agree on z, M, W,
    the loss and the ignition times; with weight decay too."""
    data, W0, ts = fig3
    for gamma in (0.0, 0.01):
        ex = nqf.solve_flow(data, W0=W0, t1=250.0, ts=ts, method="exact", weight_decay=gamma)
        ode = nqf.solve_flow(data, W0=W0, t1=250.0, ts=ts, rtol=1e-12, weight_decay=gamma)
        assert ex.method == "exact" and ex.form == "glv" and ex.stats["num_steps"] == 0
        assert np.abs(ex.z / ode.z - 1).max() < 1e-9
        assert np.abs(ex.W - ode.W).max() < 1e-9 * np.abs(ode.W).max()
        # the loss (f - y)^2 cancels near convergence: compare it on the scale of L(0)
        assert np.abs(ex.loss - ode.loss).max() < 1e-10 * ode.loss[0]
    ex = nqf.solve_flow(data, W0=W0, t1=250.0, ts=ts, method="exact")
    ode = nqf.solve_flow(data, W0=W0, t1=250.0, ts=ts, rtol=1e-12)
    np.testing.assert_allclose(nqf.measure_ignition_times(ex), nqf.measure_ignition_times(ode), rtol=1e-8)
    np.testing.assert_allclose(ex.z_at([17.3, 249.0]), ode.z_at([17.3, 249.0]), rtol=1e-9)
    np.testing.assert_array_equal(ex.step_times, [0.0, 250.0])


def test_exact_with_basis_and_offdiagonal_init(rng):
    """Commuting data with a basis P and orthogonal features, a non-diagonal M0 (off-diagonals
    slaved, Proposition 7): exact M(t) against the ODE in the M form."""
    p = m = 4
    P = random_orthogonal(p, rng)
    Lam = random_orthogonal(p, rng) @ np.diag(rng.uniform(0.5, 2.0, p))  # orthogonal columns
    data = nqf.CommutingData(Lam, rng.uniform(0.5, 1.5, m), P)
    F = 0.01 * rng.standard_normal((p, p))
    ts = np.linspace(0.0, 20.0, 11)
    ex = nqf.solve_flow(data, M0=F @ F.T, t1=20.0, ts=ts, method="exact")
    ode = nqf.solve_flow(data, M0=F @ F.T, t1=20.0, ts=ts, form="M", rtol=1e-12)
    assert np.abs(ex.M - ode.M).max() < 1e-9 * np.abs(ode.M).max()


def test_exact_loss_path_matches_stiff_flow():
    """DiagonalData power law (chunked loss path, p not a multiple of the chunk): the saved loss
    and excess loss equal those of the saved states, and a stiff ODE solve to 1e-6."""
    p = 3000
    data = nqf.datasets.powerlaw_data(p)
    z0 = 1e-6 * np.arange(1, p + 1.0) ** -1.2
    ts = np.concatenate([[0.0], np.geomspace(1.0, 1e4, 40)])
    lo = nqf.solve_flow(data, z0=z0, t1=1e4, ts=ts, method="exact", save="loss")
    st = nqf.solve_flow(data, z0=z0, t1=1e4, ts=ts, method="exact")
    np.testing.assert_allclose(lo.loss, st.loss, rtol=1e-12)
    np.testing.assert_allclose(lo.excess_loss, st.excess_loss, rtol=1e-10)
    stiff = nqf.solve_flow(data, z0=z0, t1=1e4, ts=ts, stiff=True, rtol=1e-9, save="loss", max_steps=10**5)
    np.testing.assert_allclose(stiff.excess_loss, lo.excess_loss, rtol=1e-6)


def test_exact_refuses_what_it_cannot_solve(fig3, rng):
    data, W0, ts = fig3
    with pytest.raises(nqf.AssumptionError, match="orthogonal features"):
        nqf.solve_flow(
            nqf.CommutingData(rng.standard_normal((3, 4)), np.ones(3)), z0=np.ones(4), t1=1.0, method="exact"
        )
    with pytest.raises(ValueError, match="needs commuting data"):
        nqf.solve_flow(nqf.DenseData(np.asarray(data.dense()), data.y), W0=W0, t1=1.0, method="exact")
    with pytest.raises(ValueError, match="choose an ODE solver"):
        nqf.solve_flow(data, W0=W0, t1=1.0, method="exact", stiff=True)
    with pytest.raises(ValueError, match="`method` must be 'ode' or 'exact'"):
        nqf.solve_flow(data, W0=W0, t1=1.0, method="closed")
