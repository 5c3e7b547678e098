"""Weight decay in the oracles (Theorems 4, 5, 6, 7, 16, Proposition 7) and in the ignition times
(E19), against an independent scipy integration of the flow with weight decay, against
`nqf.solve_flow(..., weight_decay=gamma)` (slow tests) and plain GD on L + gamma/2 |W|^2.

nqf's convention is the penalty gamma/2 |W|^2 (M' gets -2 gamma M, threshold r_k - 2 gamma); the
paper writes "-gamma M" and r_k - gamma.
"""

import numpy as np
import pytest
import scipy.integrate

from nqf import datasets
from nqf.solvers import solve_flow
from nqf.theory._ignition import predicted_ignition_times
from nqf.theory._oracles import proposition7, theorem6, theorem6_rates, theorem7, theorem7_commuting, theorem16
from nqf.theory.samplewise import theorem4, theorem5
from nqf.validate import THM6_C, THM6_R, generic_commuting_data, norm_relative_error, relative_error
from nqf.validate._samplewise import thm4_data, thm5_data
from nqf.validate._weight_decay import WD_GAMMA, gd_weight_decay

BOUND = 1e-8
RTOL = 1e-11


def flow(data, form, T, ts, gamma, **init):
    kw = {} if form == "glv" else {"atol": 1e-250}
    return solve_flow(data, t1=T, ts=ts, form=form, rtol=RTOL, weight_decay=gamma, **kw, **init)


def scipy_flow(data, M0, ts, gamma):
    """Independent reference: M' = -(H M + M H) - 2 gamma M, H = (4/m) sum_mu Delta_mu A_mu
    (the gradient flow of L + gamma/2 |W|^2 on M = W W^T), dense, by scipy DOP853 at rtol 1e-12."""
    A = np.asarray(data.dense())
    y = np.asarray(data.y)
    m, p = A.shape[0], A.shape[1]

    def rhs(t, x):
        M = x.reshape(p, p)
        H = 4.0 / m * np.einsum("a,aij->ij", np.einsum("aij,ji->a", A, M) - y, A)
        return (-(H @ M + M @ H) - 2.0 * gamma * M).ravel()

    sol = scipy.integrate.solve_ivp(
        rhs, (0.0, ts[-1]), np.asarray(M0, float).ravel(), method="DOP853", t_eval=ts, rtol=1e-12, atol=1e-22
    )
    assert sol.success
    return sol.y.T.reshape(len(ts), p, p)


def random_psd(p, eps, seed):
    W = np.random.default_rng(seed).standard_normal((p, p))
    return eps * (W @ W.T) / p


def test_theorem6_weight_decay():
    """Rotated Theorem 6 data, r = (1, .5, 0, -.25, .125), gamma = 0.1: the mode r = 0.125 lies
    between gamma and 2 gamma and decays (nqf's threshold 2 gamma), the others saturate at
    (r - 2 gamma)/C."""
    gamma = 0.1
    data = datasets.orthogonal_features_data(THM6_R, THM6_C, seed=4, rotate_basis=True)
    ts = np.linspace(0.0, 250.0, 51)
    W0 = np.sqrt(1e-6) * np.random.default_rng(3).standard_normal((5, 5))
    orc = theorem6(data, ts, W0=W0, weight_decay=gamma)
    assert norm_relative_error(scipy_flow(data, W0 @ W0.T, ts, gamma), orc.M) <= BOUND
    assert orc.W is not None
    assert norm_relative_error(np.einsum("nid,njd->nij", orc.W, orc.W), orc.M) <= 1e-12
    r, C = (np.asarray(v) for v in theorem6_rates(data))
    up = r > 2 * gamma
    np.testing.assert_allclose(orc.z[-1, up], (r[up] - 2 * gamma) / C[up], rtol=1e-6)
    assert np.all(orc.z[-1, ~up] < orc.z[0, ~up])  # r = 0.125 > gamma decays too
    # gamma = 0 is the old oracle
    np.testing.assert_array_equal(theorem6(data, ts, W0=W0, weight_decay=0.0).z, theorem6(data, ts, W0=W0).z)


def test_theorem7_weight_decay():
    """Isotropic data g = (1, .5, -.4), c = 0.5, gamma = 0.3: Y -> Y - gamma I, the growing modes
    saturate at (g - gamma)/(4 c) = (0.35, 0.1)."""
    gamma = 0.3
    iso = datasets.isotropic_data(3, 0.5, g=(1.0, 0.5, -0.4), seed=1)
    ts = np.linspace(0.0, 60.0, 51)
    M0 = random_psd(3, 1e-6, seed=7)
    orc = theorem7(iso, ts, M0=M0, weight_decay=gamma)
    assert norm_relative_error(scipy_flow(iso, M0, ts, gamma), orc.M) <= BOUND
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(orc.M[-1]))[1:], [0.1, 0.35], rtol=1e-4)
    # the eigenvalue form with the same shift
    g, V = np.linalg.eigh(np.asarray(iso.Y()))
    z0 = 1e-6 * np.array([1.0, 2.0, 3.0])
    full = theorem7(iso, ts, M0=(V * z0) @ V.T, weight_decay=gamma)
    assert relative_error(full.z, theorem7_commuting(g, 0.5, z0, ts, weight_decay=gamma)) <= 1e-12


def test_theorem16_weight_decay():
    gamma = 0.1
    data, Pi = datasets.projector_data((2, 1, 2), (1.0, 0.4, -0.2), (1.0, 2.0, 0.5), m=5, seed=2)
    ts = np.linspace(0.0, 120.0, 51)
    M0 = np.einsum("a,aij->ij", 1e-6 * np.array([1.0, 2.0, 0.5]), Pi)
    orc = theorem16(data, Pi, ts, M0=M0, weight_decay=gamma)
    assert norm_relative_error(scipy_flow(data, M0, ts, gamma), orc.M) <= BOUND
    np.testing.assert_allclose(orc.z[-1, :2], (np.array([1.0, 0.4]) - gamma) / np.array([1.0, 2.0]), rtol=1e-6)


def test_proposition7_holds_with_weight_decay():
    """The slaving relation does not involve gamma: the flow with weight decay (scipy) equals
    `proposition7` applied to its own diagonal z = diag(P^T M P), off-diagonals included."""
    data = generic_commuting_data(seed=3)
    ts = np.linspace(0.0, 100.0, 51)
    M0 = random_psd(5, 1e-6, seed=5)
    M = scipy_flow(data, M0, ts, 0.05)
    P = np.eye(5) if data.P is None else np.asarray(data.P)
    z = np.einsum("ik,nij,jk->nk", P, M, P)
    Mp = proposition7(data, M0, z)
    off = ~np.eye(5, dtype=bool)
    assert np.abs(Mp[:, off]).max() > 0.1 * np.abs(Mp).max()  # off-diagonals matter
    assert norm_relative_error(M, Mp) <= BOUND


@pytest.mark.parametrize("which", ["theorem4", "theorem5"])
def test_samplewise_oracles_weight_decay(which):
    oracle, data = (theorem4, thm4_data()) if which == "theorem4" else (theorem5, thm5_data())
    ts = np.linspace(0.0, 40.0, 51)
    M0 = random_psd(data.p, 1e-6, seed=9)
    orc = oracle(data, ts, M0=M0, weight_decay=0.05)
    assert norm_relative_error(scipy_flow(data, M0, ts, 0.05), orc.M) <= BOUND
    if which == "theorem5":  # the block form (matrices=False) agrees with the matrix form
        blk = theorem5(data, ts, M0=M0, matrices=False, weight_decay=0.05)
        assert relative_error(blk.outputs, orc.outputs) <= 1e-12


@pytest.mark.slow
def test_oracles_weight_decay_vs_solve_flow():
    """The oracles with weight decay against `nqf.solve_flow(..., weight_decay=gamma)` (GLV form
    for Theorem 5, M form for Theorem 7; Theorem 6 is in the `nqf validate` check below)."""
    data = thm5_data()
    ts = np.linspace(0.0, 40.0, 201)
    M0 = random_psd(data.p, 1e-6, seed=9)
    orc = theorem5(data, ts, M0=M0, weight_decay=0.05)
    glv = flow(data, "glv", 40.0, ts, 0.05, M0=M0)
    assert relative_error(glv.z, orc.z) <= BOUND
    assert norm_relative_error(glv.M, orc.M) <= BOUND
    iso = datasets.isotropic_data(3, 0.5, g=(1.0, 0.5, -0.4), seed=1)
    ts = np.linspace(0.0, 60.0, 201)
    M0 = random_psd(3, 1e-6, seed=7)
    sol = flow(iso, "M", 60.0, ts, 0.3, M0=M0)
    assert norm_relative_error(sol.M, theorem7(iso, ts, M0=M0, weight_decay=0.3).M) <= BOUND


def test_predicted_ignition_times_weight_decay():
    """E19 with zeta -> zeta - 2 gamma / a: the closed-form oracles reach rho z(inf) exactly at
    the predicted time (a = 1, Theorem 6; a = 2, Theorem 7), and modes below the threshold get inf."""
    gamma, rho = 0.1, 0.3
    data = datasets.fig3_data()
    r, C = (np.asarray(v) for v in theorem6_rates(data))
    z0 = np.full(5, 1e-6)
    t = predicted_ignition_times(r, C, z0, rho=rho, weight_decay=gamma)
    up = r > 2 * gamma
    assert np.all(np.isinf(t[~up])) and np.all(np.isfinite(t[up]))
    z = theorem6(data, t[up], M0=np.diag(z0), weight_decay=gamma).z
    np.testing.assert_allclose(np.diagonal(z[:, up]), rho * (r[up] - 2 * gamma) / C[up], rtol=1e-12)
    g, c = np.array([1.0, 0.5, 0.25, 0.15]), 0.5  # Theorem 7: threshold g > gamma (0.15 > gamma only)
    t7 = predicted_ignition_times(g, 4 * c, z0[:4], rho=rho, a=2.0, weight_decay=gamma)
    assert np.all(np.isfinite(t7))
    z7 = theorem7_commuting(g, c, z0[:4], t7, weight_decay=gamma)
    np.testing.assert_allclose(np.diagonal(z7), rho * (g - gamma) / (4 * c), rtol=1e-12)
    assert np.isinf(predicted_ignition_times(g, 4 * c, z0[:4], a=2.0, weight_decay=0.3))[-1]
    with pytest.raises(ValueError, match="weight_decay"):
        predicted_ignition_times(r, C, z0, weight_decay=-0.1)


def test_weight_decay_threshold_gd():
    """Plain GD on L + gamma/2 |W|^2 (autodiff): with gamma = 0.1 the modes r_k < 0.2 never grow
    (the mode r = 0.125, above the paper's literal threshold gamma, included) and the others end
    at (r_k - 2 gamma)/C_kk."""
    data = datasets.fig3_data()
    r = np.asarray(datasets.FIG3_R)
    eps = 1e-6
    Ws = gd_weight_decay(
        np.asarray(data.dense()), np.asarray(data.y), np.sqrt(eps) * np.eye(5), lr=0.02, steps=25_000, gamma=WD_GAMMA
    )
    P = np.eye(5) if data.P is None else np.asarray(data.P)
    z = np.einsum("ik,nid,jk,njd->nk", P, Ws, P, Ws)  # (P^T W W^T P)_kk
    below = r < 2 * WD_GAMMA
    assert np.all(z[1:, below] < eps)
    np.testing.assert_allclose(z[-1, ~below], r[~below] - 2 * WD_GAMMA, rtol=1e-4)
    with pytest.raises(ValueError, match="weight_decay"):
        theorem6(data, [0.0, 1.0], M0=np.eye(5), weight_decay=-1.0)


def test_weight_decay_traced():
    """Under jit the traced gamma gives the concrete result; d z_k(T) / d gamma = -2 / C_kk for a
    saturated mode (z(inf) = (r - 2 gamma)/C); a traced negative gamma is refused at run time."""
    import jax

    data = datasets.fig3_data()
    ts = np.linspace(0.0, 100.0, 5)
    M0 = 1e-6 * np.eye(5)
    z = jax.jit(lambda g: theorem6(data, ts, M0=M0, weight_decay=g).z)(0.1)
    assert relative_error(np.asarray(z), theorem6(data, ts, M0=M0, weight_decay=0.1).z) <= 1e-13
    dz = jax.grad(lambda g: theorem6(data, ts, M0=M0, weight_decay=g).z[-1, 0])(0.1)
    assert float(dz) == pytest.approx(-2.0, rel=1e-9)
    with pytest.raises(Exception, match="weight_decay"):
        jax.jit(lambda g: theorem6(data, ts, M0=M0, weight_decay=g).z)(-0.1)


def test_flow_solution_z_inf_and_measured_ignition_times_with_weight_decay():
    """A weight-decayed flow's z_inf is the decayed equilibrium max((r - 2 gamma)/C, 0) (the flow's
    own end value, independently), and measure_ignition_times' default target uses it: the
    measured times equal predicted_ignition_times(weight_decay=gamma) (a new-user trial found the
    gamma = 0 equilibrium used, 0.3-10 % off); a coupled CommutingData gives None (not known)."""
    from nqf.theory import measure_ignition_times

    data, gamma = datasets.fig3_data(), 0.05
    sol = solve_flow(data, M0=1e-6 * np.eye(5), t1=2000.0, weight_decay=gamma)
    assert np.abs(sol.z_inf - sol.z[-1]).max() <= 1e-8
    assert sol.z_inf[-1] == 0.0  # r_5 = 1/16 < 2 gamma: never grows
    r, C = theorem6_rates(data)
    pred = predicted_ignition_times(r, C, z0=np.full(5, 1e-6), weight_decay=gamma)
    meas = measure_ignition_times(sol)
    assert relative_error(meas[:4], pred[:4]) <= 1e-6 and np.isinf(pred[4]) and not np.isfinite(meas[4])
    import nqf

    stopped = solve_flow(data, M0=1e-6 * np.eye(5), t1=2000.0, weight_decay=gamma, stop=nqf.Stop.ignition(2))
    assert abs(stopped.stop_time / pred[2] - 1) <= 1e-6  # the event's target is the decayed z_inf too
    coupled = solve_flow(
        generic_commuting_data(), M0=1e-6 * np.eye(generic_commuting_data().p), t1=1.0, weight_decay=gamma
    )
    assert coupled.z_inf is None


def test_weight_decay_of_wrong_type_is_refused():
    """`weight_decay` given as a string (which `float` parses), a bool or None: TypeError naming the
    argument, the expected type and what was found, in every oracle and in `solve_flow` (one shared
    check, `nqf._core._checks.real_scalar`); the same for momentum in the maps."""
    from nqf import NQFModel, closed_sgd_sweep
    from nqf.dynamics._train_args import check_momentum

    data = datasets.orthogonal_features_data(THM6_R, THM6_C, seed=4)
    iso = datasets.isotropic_data(3, 0.5, g=(1.0, 0.5, -0.4), seed=1)
    ts, M0 = np.array([0.0, 1.0]), 1e-3 * np.eye(5)
    calls = [
        lambda wd: theorem6(data, ts, M0=M0, weight_decay=wd),
        lambda wd: theorem7(iso, ts, M0=1e-3 * np.eye(3), weight_decay=wd),
        lambda wd: predicted_ignition_times(np.ones(3), np.ones(3), np.full(3, 1e-3), weight_decay=wd),
        lambda wd: solve_flow(data, t1=1.0, M0=M0, weight_decay=wd),
        lambda wd: closed_sgd_sweep(NQFModel(data), W0=np.ones((2, 5, 2)), lr=0.01, steps=2, weight_decay=[wd, wd]),
    ]
    for call in calls:
        for bad, found in (("0.1", "str_? '0.1'"), (True, "bool_? True"), (None, "NoneType None")):
            with pytest.raises(TypeError, match=rf"`weight_decay` must be a real number >= 0 .*JAX scalar.*{found}"):
                call(bad)
    with pytest.raises(TypeError, match=r"`momentum` must be a real number in \[0, 1\).*found str '0.9'"):
        check_momentum("0.9")
