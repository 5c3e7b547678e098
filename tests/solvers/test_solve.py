"""The closed MSE flow (Eq. E9) in each form against an independent scipy integration."""

import jax
import numpy as np
import pytest
import scipy.integrate

import nqf
import nqf.solvers._solve
from _jax_events import compile_events
from conftest import random_orthogonal, random_psd


def scipy_M_flow(A, y, M0, ts, gamma=0.0):
    """Dense M' = Y M + M Y - K(M) M - M K(M) - 2 gamma M in numpy, DOP853 at rtol 1e-13."""
    m, p, _ = A.shape
    Y = 4 / m * np.tensordot(y, A, 1)

    def rhs(t, v):
        M = v.reshape(p, p)
        KM = 4 / m * np.tensordot(np.tensordot(A, M, ((1, 2), (1, 0))), A, 1)
        G = (Y - KM - gamma * np.eye(p)) @ M
        return (G + G.T).ravel()

    atol = 1e-14 * np.abs(M0).max()
    sol = scipy.integrate.solve_ivp(rhs, (0, ts[-1]), M0.ravel(), "DOP853", t_eval=ts, rtol=1e-13, atol=atol)
    assert sol.success
    return sol.y.T.reshape(-1, p, p)


def rel_err(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.fixture(scope="module")
def dense_problem():
    rng = np.random.default_rng(7)
    m, p = 6, 4
    A = rng.standard_normal((m, p, p))
    A = (A + np.swapaxes(A, 1, 2)) / 2
    y = rng.standard_normal(m)
    M0 = random_psd(p, rng, scale=1e-3)
    ts = np.linspace(0, 5, 11)
    return A, y, M0, ts


@pytest.mark.parametrize("form", ["M", "factor"])
def test_dense_flow_matches_scipy(dense_problem, form):
    A, y, M0, ts = dense_problem
    sol = nqf.solve_flow(nqf.DenseData(A, y), M0=M0, t1=ts[-1], ts=ts, form=form, rtol=1e-12)
    ref = scipy_M_flow(A, y, M0, ts)
    assert sol.M.dtype == np.float64
    assert rel_err(sol.M, ref) < 1e-9
    np.testing.assert_allclose(sol.loss, [np.mean((np.einsum("mij,ji->m", A, M) - y) ** 2) for M in ref], rtol=1e-8)


def test_weight_decay_matches_scipy(dense_problem):
    A, y, M0, ts = dense_problem
    sol = nqf.solve_flow(nqf.DenseData(A, y), M0=M0, t1=ts[-1], ts=ts, rtol=1e-12, weight_decay=0.3)
    assert rel_err(sol.M, scipy_M_flow(A, y, M0, ts, gamma=0.3)) < 1e-9


def test_stiff_solver_matches_scipy(dense_problem):
    A, y, M0, ts = dense_problem
    sol = nqf.solve_flow(nqf.DenseData(A, y), M0=M0, t1=ts[-1], ts=ts, stiff=True, rtol=1e-10)
    assert rel_err(sol.M, scipy_M_flow(A, y, M0, ts)) < 1e-7


def test_feedforward_factor_form_matches_dense_flow(rng):
    m, k, q, d = 8, 3, 2, 4
    C = rng.standard_normal((m, k, q))
    y = rng.standard_normal(m)
    W0 = 0.05 * rng.standard_normal((k + q, d))
    ts = np.linspace(0, 3, 7)
    lowrank = nqf.feedforward_data(y, C)
    sol = nqf.solve_flow(lowrank, W0=W0, t1=3, ts=ts, rtol=1e-12)
    assert sol.form == "factor" and sol.W.shape == (7, k + q, d)
    ref = scipy_M_flow(np.asarray(lowrank.dense()), y, W0 @ W0.T, ts)
    assert rel_err(sol.M, ref) < 1e-9


def test_commuting_forms_agree_with_nondiagonal_init(rng):
    """GLV (with Prop. 7 reconstruction), factor and M forms give the same M(t)."""
    m, p = 6, 4
    data = nqf.CommutingData(rng.standard_normal((m, p)), rng.standard_normal(m), random_orthogonal(p, rng))
    W0 = 1e-3 * rng.standard_normal((p, p))
    ts = np.linspace(0, 4, 9)
    ref = scipy_M_flow(np.asarray(data.dense()), np.asarray(data.y), W0 @ W0.T, ts)
    for form in ["glv", "factor", "M"]:
        sol = nqf.solve_flow(data, W0=W0, t1=4, ts=ts, form=form, rtol=1e-12)
        assert rel_err(sol.M, ref) < 1e-9, form
        z_ref = np.einsum("ik,nij,jk->nk", data.P, ref, data.P)
        np.testing.assert_allclose(sol.z, z_ref, rtol=1e-8)
        if form != "M":
            np.testing.assert_allclose(sol.W @ np.swapaxes(sol.W, 1, 2), sol.M, rtol=1e-12)


def test_glv_masks_dead_modes():
    """A mode with z_k(0) = 0 stays at zero (no log(0))."""
    data = nqf.CommutingData(np.eye(3), [1.0, 1.0, 1.0])
    sol = nqf.solve_flow(data, M0=np.diag([1e-6, 0.0, 1e-6]), t1=20.0, form="glv")
    assert np.all(sol.z[:, 1] == 0) and np.all(np.isfinite(sol.z))
    np.testing.assert_allclose(sol.z[-1, [0, 2]], 3 / 8 * 8 / 8 / (3 / 8), rtol=1e-6)  # z* = y/lambda = 1


def test_small_init_relative_accuracy():
    """eps = 1e-12: the plateau is integrated to relative accuracy (Theorem 6 logistic)."""
    data = nqf.datasets.fig3_data()
    eps = 1e-12
    ts = np.linspace(0, 600, 601)
    r = np.array(nqf.datasets.FIG3_R)
    exact = r * eps / (eps + (r - eps) * np.exp(-r * ts[:, None]))
    for form in ["glv", "factor"]:
        sol = nqf.solve_flow(data, W0=np.sqrt(eps) * np.eye(5), t1=600, ts=ts, form=form)
        assert np.abs(sol.z / exact - 1).max() < 1e-8, form


def test_ignition_times_fig3():
    data = nqf.datasets.fig3_data()
    eps = 1e-5
    sol = nqf.solve_flow(data, M0=eps * np.eye(5), t1=250)
    r = np.array(nqf.datasets.FIG3_R)
    pred = nqf.predicted_ignition_times(r, 1.0, eps)
    # THEORY sec. 11 quotes the leading form (1/r) ln(r / (C eps)) = 11.51, ..., 139.85
    np.testing.assert_allclose(pred, [11.51, 21.64, 40.51, 75.47, 139.85], atol=1e-2)
    np.testing.assert_allclose(pred, np.log(r / eps) / r, rtol=1e-4)
    meas = nqf.measure_ignition_times(sol)
    assert np.abs(meas / pred - 1).max() < 1e-3
    # rho = 0.9: later, still exact
    assert (
        np.abs(nqf.measure_ignition_times(sol, rho=0.9) / nqf.predicted_ignition_times(r, 1.0, eps, rho=0.9) - 1).max()
        < 1e-6
    )


def test_predicted_ignition_edge_cases():
    t = nqf.predicted_ignition_times([1.0, -1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1e-3, 1e-3, 1e-3, 0.9])
    assert np.isfinite(t[0]) and np.isinf(t[1]) and np.isinf(t[2]) and t[3] == 0.0
    # Theorem 7 convention a = 2 halves the time
    np.testing.assert_allclose(nqf.predicted_ignition_times(1.0, 1.0, 1e-3, a=2), t[0] / 2)


def test_excess_loss_matches_E20():
    data = nqf.datasets.fig3_data()
    # 6 saved times, as test_solution_stats_and_dense_output (one compiled program for both)
    sol = nqf.solve_flow(data, M0=1e-5 * np.eye(5), t1=100, ts=np.linspace(0, 100, 6))
    r = np.array(nqf.datasets.FIG3_R)
    V = r**2 / 8
    np.testing.assert_allclose(sol.z_inf, r, rtol=1e-12)
    np.testing.assert_allclose(sol.excess_loss, (V * (1 - sol.z / r) ** 2).sum(1), rtol=1e-10)
    np.testing.assert_allclose(sol.excess_loss, sol.loss - sol.loss[-1] + sol.excess_loss[-1], rtol=1e-8)


def test_equilibrium_nnls_non_orthogonal(rng):
    """Non-orthogonal features: z_inf is the non-negative least-squares minimizer, and the GLV flow
    converges to it."""
    Lam = np.abs(rng.standard_normal((8, 4)))
    y = Lam @ np.array([1.0, 0.5, 0.0, 0.2]) - np.array([0, 0, 0, 0, 0, 0, 0, 0.3])
    data = nqf.CommutingData(Lam, y)
    sol = nqf.solve_flow(data, M0=1e-4 * np.eye(4), t1=3000, ts=[0.0, 3000.0], rtol=1e-10)
    np.testing.assert_allclose(sol.z[-1], sol.z_inf, atol=1e-6)
    assert sol.excess_loss[-1] < 1e-10 and np.all(sol.excess_loss >= 0)


def test_no_recompile_for_new_values(rng):
    data = nqf.datasets.fig3_data(seed=1)
    kw = dict(t1=50.0, ts=np.linspace(0, 50, 6))  # the shapes of test_solution_stats_and_dense_output
    nqf.solve_flow(data, M0=1e-4 * np.eye(5), **kw)
    before = nqf.solvers._solve.TRACE_COUNT[0]
    data2 = nqf.datasets.fig3_data(seed=2)
    nqf.solve_flow(data2, M0=1e-6 * np.eye(5), **{**kw, "t1": 60.0, "ts": np.linspace(0, 60, 6)})
    assert nqf.solvers._solve.TRACE_COUNT[0] == before


def test_repeated_solve_compiles_nothing():
    """A warm solve_flow call with new values of the same shapes (data, W0, t1, rtol) traces and
    compiles nothing, also for its derived quantities (issue 34: the shape-keyed caches of the
    front end and the numpy conversions keep it so)."""
    kw = dict(ts=np.linspace(0, 50, 601))  # the shapes of test_small_init_relative_accuracy (its programs)
    for seed, scale, t1, rtol in ((1, 1e-4, 50.0, 1e-10), (2, 1e-6, 60.0, 1e-8)):
        data = nqf.datasets.fig3_data(seed=seed)
        with compile_events() as seen:
            sol = nqf.solve_flow(data, W0=np.sqrt(scale) * np.eye(5), t1=t1, rtol=rtol, **kw)
            derived = sol.z, sol.loss, sol.M, sol.stats
        if seed == 2:  # the first call warmed every program of these shapes
            assert seen == [], seen
    assert derived[0].shape == (601, 5) and np.all(derived[0] > 0)
    with compile_events() as seen:  # the listener does see a new program being traced
        jax.jit(lambda x: x + 1.5)(np.ones(3))
    assert "/jax/core/compile/jaxpr_trace_duration" in seen


def test_no_recompile_for_a_new_loss_threshold():
    """Stop.loss_below's threshold is a dynamic value (it was in the static name: one compile per
    threshold); the stop reason still names it."""
    data = nqf.datasets.fig3_data(seed=1)
    kw = dict(M0=1e-4 * np.eye(5), t1=80.0, ts=np.linspace(0, 80, 9))
    a = nqf.solve_flow(data, stop=nqf.Stop.loss_below(0.05), **kw)
    before = nqf.solvers._solve.TRACE_COUNT[0]
    b = nqf.solve_flow(data, stop=nqf.Stop.loss_below(0.005), **kw)
    assert nqf.solvers._solve.TRACE_COUNT[0] == before
    assert a.stop_reason == "loss_below(0.05)" and b.stop_reason == "loss_below(0.005)"
    assert 10.0 < a.stop_time < 20.0 < b.stop_time < 30.0  # the saved losses (0.052, 0.010, 0.0049) bracket them


def test_solution_stats_and_dense_output():
    data = nqf.datasets.fig3_data()
    sol = nqf.solve_flow(data, M0=1e-5 * np.eye(5), t1=50.0, ts=np.linspace(0, 50, 6))
    assert sol.stats["num_steps"] > 0 and sol.stats["num_accepted_steps"] <= sol.stats["num_steps"]
    np.testing.assert_allclose(sol.z_at(sol.ts[2])[0], sol.z[2], rtol=1e-12)
    assert sol.M_at([10.0, 20.0]).shape == (2, 5, 5)
    sol2 = nqf.solve_flow(data, M0=1e-5 * np.eye(5), t1=50.0, dense=False)
    with pytest.raises(ValueError, match="dense"):
        sol2.evaluate(1.0)


def test_factor_form_stays_psd(rng):
    A = rng.standard_normal((5, 4, 4))
    A = A + np.swapaxes(A, 1, 2)
    sol = nqf.solve_flow(
        nqf.DenseData(A, rng.standard_normal(5)), W0=0.1 * rng.standard_normal((4, 2)), t1=2.0, form="factor"
    )
    assert np.linalg.eigvalsh(sol.M).min() > -1e-14


def test_lazy_dense_output_repeats_the_same_solve():
    """By default dense output is built on first use by repeating the solve with room for the steps
    taken: same steps, same interpolant as dense=True."""
    data = nqf.datasets.fig3_data()
    kw = dict(M0=1e-5 * np.eye(5), t1=50.0, ts=np.linspace(0, 50, 6))
    lazy = nqf.solve_flow(data, **kw)
    eager = nqf.solve_flow(data, dense=True, **kw)
    t = np.linspace(0.0, 50.0, 37)
    np.testing.assert_array_equal(lazy.step_times, eager.step_times)
    np.testing.assert_allclose(lazy.z_at(t), eager.z_at(t), rtol=1e-14)
    np.testing.assert_array_equal(lazy.ys, eager.ys)
