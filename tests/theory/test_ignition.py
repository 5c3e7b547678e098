"""`measure_ignition_times` on every kind of trajectory (flows of commuting and dense data, sweeps,
the discrete maps), against independent computations: the z-based crossings of the same flow,
the same flow solved in commuting form, hand-computed crossings, step counting, and Eq. E19; its
horizon-independent target (`nqf.asymptote`) and mode selection; the loss-curve times
(`drop_times`, `plateau_levels`, `learning_phase_end`) against Theorem 6 (E19, E20) and
hand-made curves."""

import types

import numpy as np
import pytest
import scipy.optimize

import nqf

R = np.array([2.0, 1.5, 1.0, 0.7, 0.5])  # Theorem 6 growth rates (C_kk = 1): ignition by t ~ 30
EPS = 1e-6
RHO = 0.5


@pytest.fixture(scope="module")
def commuting():
    """Orthogonal features in a random basis P (M(t) = P diag(z(t)) P^T from M0 = eps I)."""
    return nqf.datasets.orthogonal_features_data(R, 1.0, seed=3, rotate_basis=True)


@pytest.fixture(scope="module")
def glv(commuting):
    return nqf.solve_flow(commuting, M0=EPS * np.eye(5), t1=80.0, dense=True)


def _by_rank(values):
    """Permutation sorting mode values (p,) in decreasing order: eigenvalue k is mode order[k]."""
    return np.argsort(-np.asarray(values))


def test_eigenvalue_crossings_equal_z_crossings_on_a_glv_flow(glv):
    """M = P diag(z) P^T: the k-th largest eigenvalue is the k-th largest z_k, so both quantities
    (each refined by Brent on the dense output) give the same times, mode for mode."""
    z_inf = glv.z_inf
    t_z = nqf.measure_ignition_times(glv)  # default: quantity "z", target z(inf)
    order = _by_rank(z_inf)
    t_eig = nqf.measure_ignition_times(glv, quantity="eigenvalues", target=z_inf[order])
    np.testing.assert_allclose(t_eig, t_z[order], rtol=1e-12)  # measured 2.2e-16
    # and both are Eq. E19 (Theorem 6 is exact for these data)
    np.testing.assert_allclose(t_z, nqf.predicted_ignition_times(R, 1.0, EPS, rho=RHO), rtol=1e-9)  # 1.5e-11


def test_dense_data_flow_matches_its_commuting_form(commuting, glv):
    """The same data as DenseData (A_mu = P diag(lambda_mu) P^T), solved in the M form: its
    eigenvalue crossings equal the commuting form's z crossings (targets: the values at t1)."""
    P, Lam = np.asarray(commuting.P), np.asarray(commuting.Lambda)
    dense = nqf.DenseData(np.einsum("ik,mk,jk->mij", P, Lam, P), np.asarray(commuting.y))
    sol = nqf.solve_flow(dense, M0=EPS * np.eye(5), t1=80.0, dense=True)
    assert sol.form == "M" and sol.z is None
    t_dense = nqf.measure_ignition_times(sol)  # auto: eigenvalues of M, target at ts[-1]
    z_final = glv.z_at(glv.ts[-1:])[0]
    order = _by_rank(z_final)
    t_glv = nqf.measure_ignition_times(glv, target=z_final)
    np.testing.assert_allclose(t_dense, t_glv[order], rtol=1e-9)  # measured 2.1e-11
    # without dense output: linear interpolation between the 201 saved times (spacing 0.4)
    t_lin = nqf.measure_ignition_times(sol, refine="linear")
    np.testing.assert_allclose(t_lin, t_dense, rtol=1e-3)  # measured 2.5e-4
    assert np.abs(t_lin - t_dense).max() > 1e-6  # a different method, not the same numbers


def _trajectory(t, lam):
    """A constructed discrete trajectory: M(t_i) = Q diag(lam_i) Q^T for a fixed rotation Q."""
    Q = np.linalg.qr(np.random.default_rng(0).standard_normal((lam.shape[-1],) * 2))[0]
    return types.SimpleNamespace(t=t, M=np.einsum("ik,...nk,jk->...nij", Q, lam, Q))


# Mode values at 7 saved steps (lr = 0.5), ordered by size at every step (so mode k is the k-th
# largest eigenvalue throughout): a fast and a slow riser, a decaying mode, a dead mode.
T = 0.5 * np.arange(7)
LAM = np.array(
    [
        [1.0, 1.2, 2.2, 3.0, 3.8, 4.0, 4.0],  # final 4, level 2 between steps 1 and 2: t = 0.5 + 0.5 (0.8/1)
        [0.1, 0.2, 0.6, 1.4, 1.9, 2.0, 2.0],  # level 1 between steps 2 and 3: t = 1 + 0.5 (0.4/0.8)
        [0.05, 0.04, 0.03, 0.02, 0.01, 0.01, 0.01],  # level 0.005: already above at t = 0
        [0.0] * 7,  # final 0: never ignites
    ]
).T


def test_hand_computed_crossings_on_a_constructed_trajectory():
    traj = _trajectory(T, LAM)
    linear = nqf.measure_ignition_times(traj)
    np.testing.assert_allclose(linear[:3], [0.9, 1.25, 0.0], rtol=1e-12, atol=1e-12)
    assert np.isnan(linear[3])
    step = nqf.measure_ignition_times(traj, refine="step")
    np.testing.assert_allclose(step[:3], [1.0, 1.5, 0.0], atol=1e-12)
    # a target that is never reached, and rho = 0.9: level 0.9 * 2 = 1.8 between 1.4 and 1.9
    far = nqf.measure_ignition_times(traj, rho=0.9, target=[4.0, 2.0, 1.0, 1.0])
    np.testing.assert_allclose(far[:2], [1.5 + 0.5 * 0.6 / 0.8, 1.5 + 0.5 * 0.4 / 0.5], rtol=1e-12)
    assert np.isnan(far[2:]).all()
    # the same values as mode strengths z (unsorted columns, GLVTrajectory-like)
    cols = [2, 0, 3, 1]
    z = types.SimpleNamespace(t=T, z=LAM[:, cols])
    np.testing.assert_allclose(nqf.measure_ignition_times(z), linear[cols], equal_nan=True, atol=1e-12)
    np.testing.assert_allclose(
        nqf.measure_ignition_times(z, quantity="eigenvalues"), linear, equal_nan=True, atol=1e-12
    )


def test_batched_trajectory_gives_one_row_per_member():
    """A leading batch axis (a sweep of learning rates: times (B, n)) gives (B, p)."""
    lam = np.stack([LAM, 2.0 * LAM])
    t = np.stack([T, 2.0 * T])  # member 1: twice the learning rate
    out = nqf.measure_ignition_times(_trajectory(t, lam))
    assert out.shape == (2, 4)
    np.testing.assert_allclose(out[:, :3], [[0.9, 1.25, 0.0], [1.8, 2.5, 0.0]], atol=1e-12)
    rows = nqf.measure_ignition_times(_trajectory(t, lam), target=[[4.0, 2.0, 1.0, 1.0], [8.0, 4.0, 2.0, 2.0]])
    np.testing.assert_allclose(rows[:, 0], [0.9, 1.8], atol=1e-12)
    with pytest.raises(
        ValueError,
        match=r"`target` must have shape \(4,\) \(one final value per mode\) "
        r"or \(2, 4\) \(one row per member\); found \(3, 4\)",
    ):
        nqf.measure_ignition_times(_trajectory(t, lam), target=np.ones((3, 4)))


@pytest.fixture(scope="module")
def fig3():
    return nqf.datasets.fig3_data()  # P = I, r = (1, 1/2, ..., 1/16)


def test_discrete_maps_against_step_counting(fig3):
    """closed_sgd (M), train_w (W) and glv_gd (z) run the same GD map; each trajectory's ignition
    time is lr x the first step at which the mode reaches rho times its final value, counted
    here by hand on glv_gd's z."""
    lr, steps, eps = 0.25, 240, 1e-3
    gz = nqf.glv_gd(fig3, np.full(5, eps), lr=lr, steps=steps)
    z = gz.z
    first = [next(n for n in range(steps + 1) if z[n, k] >= RHO * z[-1, k]) for k in range(5)]
    by_hand = lr * np.array(first, float)
    assert len(set(first)) == 5 and min(first) > 0  # distinct, non-trivial crossings
    lin_hand = [lr * (n - 1 + (RHO * z[-1, k] - z[n - 1, k]) / (z[n, k] - z[n - 1, k])) for k, n in enumerate(first)]
    order = _by_rank(z[-1])
    maps = nqf.closed_sgd(fig3, M0=eps * np.eye(5), lr=lr, steps=steps)
    wspace = nqf.train_w(fig3, np.sqrt(eps) * np.eye(5), lr=lr, steps=steps)
    for traj, perm in ((gz, np.arange(5)), (maps, order), (wspace, order)):
        np.testing.assert_array_equal(nqf.measure_ignition_times(traj, refine="step"), by_hand[perm])
        np.testing.assert_allclose(nqf.measure_ignition_times(traj), np.array(lin_hand)[perm], rtol=1e-9)


def test_small_lr_converges_to_e19_at_first_order(fig3):
    """closed_sgd at lr -> 0 approaches the flow, whose ignition times are Eq. E19: the error
    is O(lr) and halves with lr."""
    eps = 1e-5
    pred = nqf.predicted_ignition_times(np.array(nqf.datasets.FIG3_R), 1.0, eps, rho=RHO)
    z_inf = nqf.glv_equilibrium(fig3)  # E19's target
    err = []
    for lr in (0.02, 0.01):
        traj = nqf.closed_sgd(fig3, M0=eps * np.eye(5), lr=lr, steps=int(160 / lr), save_every=5)
        err.append(nqf.measure_ignition_times(traj, target=z_inf) / pred - 1)
    err = np.array(err)
    assert np.abs(err).max() < 0.25 * 0.02, err  # measured 4.1e-3 at lr = 0.02
    np.testing.assert_allclose(err[0] / err[1], 2.0, rtol=0.01)  # first order in lr (1.9987 measured)


def test_sweep_gives_one_row_per_member(fig3):
    eps = np.array([1e-4, 1e-6])
    sweep = nqf.solve_sweep(fig3, eps=eps, t1=250.0)
    pred = np.stack([nqf.predicted_ignition_times(np.array(nqf.datasets.FIG3_R), 1.0, e) for e in eps])
    t = nqf.measure_ignition_times(sweep)  # each member: Brent on its dense output
    assert t.shape == (2, 5)
    np.testing.assert_allclose(t, pred, rtol=1e-9)  # measured 3.7e-11
    lin = nqf.measure_ignition_times(sweep, refine="linear")  # the saved (B, n, p) arrays
    np.testing.assert_allclose(lin, pred, rtol=2e-3)  # measured 1.0e-3 (saved times 1.25 apart)
    rows = np.stack([m.z_inf for m in sweep])  # per-member targets (B, p) = the defaults
    np.testing.assert_array_equal(nqf.measure_ignition_times(sweep, target=rows, refine="linear"), lin)
    # each member's own limit (orthogonal features: z(inf) again)
    np.testing.assert_array_equal(nqf.measure_ignition_times(sweep, target="asymptote", refine="linear"), lin)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (
            dict(target=np.ones(3)),
            ValueError,
            r"`target` must have shape \(5,\) \(one final value per mode\); found \(3,\)",
        ),
        (
            dict(z_inf=np.ones(3)),
            ValueError,
            r"`z_inf` must have shape \(5,\) \(one final value per mode\); found \(3,\)",
        ),
        (dict(target=np.ones(5), z_inf=np.ones(5)), ValueError, r"`target` or as `z_inf`.*not both"),
        (dict(target=[1.0, np.nan, 1, 1, 1]), ValueError, r"`target` must be finite"),
        (dict(rho=1.0), ValueError, r"`rho` must lie in \(0, 1\); found 1.0"),
        (dict(quantity="eig"), ValueError, r"`quantity` must be one of \('auto', 'z', 'eigenvalues'\); found 'eig'"),
        (dict(refine="cubic"), ValueError, r"`refine` must be one of .*found 'cubic'"),
        (dict(xtol=0.0), ValueError, r"`xtol` must be finite and > 0"),
        (dict(modes="some"), ValueError, r"`modes` must be one of \('all', 'growing'\); found 'some'"),
        (
            dict(modes=[0, 2]),
            ValueError,
            (
                r"`modes` must be 'all', 'growing' or a boolean mask of shape \(5,\); "
                r"found an array of dtype int64"
            ),
        ),
        (dict(modes=np.ones(4, bool)), ValueError, r"`modes` \(a boolean mask\) must have shape \(5,\); found \(4,\)"),
        (
            dict(target="final"),
            ValueError,
            r"`target` must be an array, an nqf.Asymptote or 'asymptote'; found 'final'",
        ),
    ],
)
def test_bad_arguments(glv, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        nqf.measure_ignition_times(glv, **kwargs)


def test_what_a_trajectory_cannot_give(fig3):
    traj = nqf.closed_sgd(fig3, M0=1e-3 * np.eye(5), lr=0.1, steps=3)
    with pytest.raises(ValueError, match=r"quantity='z'.*MapTrajectory has M only.*quantity='eigenvalues'"):
        nqf.measure_ignition_times(traj, quantity="z")
    with pytest.raises(ValueError, match=r"refine='brent' needs dense output.*MapTrajectory"):
        nqf.measure_ignition_times(traj, refine="brent")
    no_dense = nqf.solve_flow(fig3, z0=np.full(5, 1e-3), t1=20.0, dense=False)
    with pytest.raises(ValueError, match=r"refine='brent' needs the dense output.*dense=False"):
        nqf.measure_ignition_times(no_dense, refine="brent")
    np.testing.assert_allclose(
        nqf.measure_ignition_times(no_dense)[:1],  # auto: linear on ts
        nqf.predicted_ignition_times([1.0], 1.0, 1e-3),
        rtol=1e-2,
    )
    with pytest.raises(TypeError, match=r"`trajectory` must be a FlowSolution.*found ndarray"):
        nqf.measure_ignition_times(np.ones((3, 5)))
    decay = nqf.solve_flow(fig3, z0=np.full(5, 1e-3), t1=20.0, weight_decay=0.01, dense=False)
    with pytest.raises(ValueError, match=r"target='asymptote': this flow was solved with weight_decay = 0.01"):
        nqf.measure_ignition_times(decay, target="asymptote")


# -- horizon-independent targets and mode selection -------------------------------------------------


@pytest.fixture(scope="module")
def mlp():
    data = nqf.datasets.mlp_data(40, 6, seed=1)
    return data, 1e-3 * np.random.default_rng(0).standard_normal((7, 4))


def test_target_asymptote_does_not_depend_on_the_horizon(commuting):
    """The issue's report: the default target of the eigenvalues (their values at ts[-1]) moves
    with t1 while a mode is still growing at t1, and so do the times (every mode's, since the
    eigenvalues are the sorted z). target="asymptote" (the flow's limit, `nqf.asymptote`) gives
    Eq. E19's times whatever the horizon; a mode that has not reached rho x its limit by t1
    is nan (not yet ignited), not an early time."""
    sols = [nqf.solve_flow(commuting, M0=EPS * np.eye(5), t1=t1, method="exact") for t1 in (25.0, 80.0)]
    default = [nqf.measure_ignition_times(s, quantity="eigenvalues") for s in sols]
    assert default[1][4] - default[0][4] > 3.0  # measured 23.14 (t1 = 25) vs 26.24 (t1 = 80)
    pred = nqf.predicted_ignition_times(R, 1.0, EPS, rho=RHO)  # R is decreasing: mode k = k-th largest
    short, long = (nqf.measure_ignition_times(s, quantity="eigenvalues", target="asymptote") for s in sols)
    np.testing.assert_allclose(long, pred, rtol=1e-9)
    np.testing.assert_allclose(short[:4], pred[:4], rtol=1e-9)
    assert np.isnan(short[4])  # at t1 = 25 the last mode (t* = 26.2) has not ignited yet


def test_feedforward_asymptote_as_target(mlp):
    """An MLP flow: the Asymptote object and target="asymptote" are the same target; modes whose
    limit is 0 (all but one: E = e has rank 1) never ignite."""
    data, W0 = mlp
    sol = nqf.solve_flow(data, W0=W0, t1=30.0, dense=False)
    asy = nqf.asymptote(data, W0=W0)
    t = nqf.measure_ignition_times(sol, target="asymptote")
    np.testing.assert_array_equal(nqf.measure_ignition_times(sol, target=asy), t)
    assert np.isnan(t[1:]).all() and 3.0 < t[0] < 5.0  # measured 3.8504 (linear on ts)


def test_modes_growing_and_masks():
    """On the constructed trajectory: "growing" drops the decaying mode (t0 under "all") and the
    dead one; a boolean mask keeps the modes it selects."""
    traj = _trajectory(T, LAM)
    out = nqf.measure_ignition_times(traj, modes="growing")
    np.testing.assert_allclose(out[:2], [0.9, 1.25], rtol=1e-12)
    assert np.isnan(out[2:]).all()
    masked = nqf.measure_ignition_times(traj, modes=np.array([True, False, True, True]))
    np.testing.assert_allclose(masked[[0, 2]], [0.9, 0.0], atol=1e-12)
    assert np.isnan(masked[[1, 3]]).all()
    lam = np.stack([LAM, 2.0 * LAM])  # a batch: one mask row per member
    rows = np.array([[True, True, True, True], [False, True, True, True]])
    both = nqf.measure_ignition_times(_trajectory(np.stack([T, T]), lam), modes=rows)
    assert np.isnan(both[1, 0]) and both[0, 0] == pytest.approx(0.9)


def test_asymptote_target_on_a_discrete_trajectory(fig3):
    """A MapTrajectory takes an Asymptote (its eigenvalues: the sorted z(inf) here) but not the
    string "asymptote" (it has no model or initial condition)."""
    traj = nqf.closed_sgd(fig3, M0=1e-3 * np.eye(5), lr=0.25, steps=240)
    asy = nqf.asymptote(fig3, M0=1e-3 * np.eye(5))
    z_sorted = np.sort(nqf.glv_equilibrium(fig3))[::-1]
    np.testing.assert_array_equal(
        nqf.measure_ignition_times(traj, target=asy), nqf.measure_ignition_times(traj, target=z_sorted)
    )
    with pytest.raises(ValueError, match=r"target='asymptote' needs a flow .*target=nqf.asymptote\(model"):
        nqf.measure_ignition_times(traj, target="asymptote")
    with pytest.raises(ValueError, match=r"Asymptote without mode strengths z .*quantity='eigenvalues'"):
        nqf.measure_ignition_times(
            types.SimpleNamespace(t=traj.t, z=np.ones((traj.t.size, 7))),
            target=nqf.asymptote(nqf.datasets.mlp_data(20, 6), W0=1e-3 * np.ones((7, 1))),
        )


# -- loss curves ------------------------------------------------------------------------------------

R3 = np.array([2.0, 0.5, 0.125])  # well separated drops (Theorem 6, C_kk = 1)
EPS3 = 1e-8


@pytest.fixture(scope="module")
def staircase():
    data = nqf.datasets.orthogonal_features_data(R3, 1.0, seed=0)
    sol = nqf.solve_flow(data, M0=EPS3 * np.eye(3), t1=250.0)
    return data, sol, nqf.asymptote(data, M0=EPS3 * np.eye(3))


def test_drop_times_are_e19_at_the_midpoint_fraction(staircase):
    """Plateaus of E20: L_k = L_inf + sum_{j > k} V_j, V_j = r_j^2 / (8 C). The loss reaches the
    midpoint L_{k+1} + V_{k+1} / 2 when mode k + 1 has (1 - z / z_inf)^2 = 1/2, i.e. at E19's
    time with rho = 1 - 1/sqrt(2) (up to the exponentially small tails of the other modes)."""
    data, sol, asy = staircase
    V = R3**2 / 8
    levels = np.array([sol.loss[0], V[1] + V[2], V[2], asy.loss])
    t = nqf.drop_times(sol, levels=levels)  # Brent on the dense loss
    pred = nqf.predicted_ignition_times(R3, 1.0, EPS3, rho=1 - 1 / np.sqrt(2))
    np.testing.assert_allclose(t, pred, rtol=1e-6)  # measured 1.4e-7
    lin = nqf.drop_times(sol.ts, sol.loss, levels=levels)  # samples 1.25 apart
    np.testing.assert_allclose(lin, t, rtol=1e-2)  # measured 3.7e-3
    np.testing.assert_array_equal(nqf.drop_times(sol, levels=levels, refine="linear"), lin)


def test_plateau_levels_are_e20(staircase):
    """At the harmonic means of E19's ignition times the loss sits on E20's plateaus (to the
    other modes' tails, measured 1.7e-4 relative)."""
    data, sol, asy = staircase
    V = R3**2 / 8
    levels = nqf.plateau_levels(sol, ignition_times=nqf.predicted_ignition_times(R3, 1.0, EPS3), final=asy)
    np.testing.assert_allclose(levels, [sol.loss[0], V[1] + V[2], V[2], asy.loss], rtol=1e-3)
    assert levels[0] == sol.loss[0] and levels[-1] == asy.loss


def test_learning_phase_end_against_theorem6(staircase):
    """L(t) - L_inf = 0.02 (L(0) - L_inf), with L(t) from Theorem 6's closed form (`nqf.theorem6`)
    and scipy's Brent: the same time to 1e-9 (measured 2e-11)."""
    data, sol, asy = staircase
    level = asy.loss + 0.02 * (sol.loss[0] - asy.loss)

    def loss(t):
        z = nqf.theorem6(data, np.array([t]), M0=EPS3 * np.eye(3)).z[0]
        return float(np.mean((np.asarray(data.outputs_z(z)) - np.asarray(data.y)) ** 2))

    ref = scipy.optimize.brentq(lambda t: loss(t) - level, 1.0, 250.0, xtol=1e-12)
    np.testing.assert_allclose(nqf.learning_phase_end(sol, final_loss=asy), ref, rtol=1e-9)


# a hand-made curve: plateaus 4, 2 (from t = 2), 1 (from t = 3)
TC = np.arange(5.0)
LC = np.array([4.0, 4.0, 2.0, 1.0, 1.0])


def test_loss_curve_times_by_hand():
    np.testing.assert_allclose(nqf.drop_times(TC, LC, levels=[4, 2, 1]), [1.5, 2.5])  # midpoints 3, 1.5
    np.testing.assert_allclose(nqf.drop_times(TC, LC, levels=[4, 2, 1], refine="step"), [2.0, 3.0])
    np.testing.assert_array_equal(nqf.drop_times(TC, LC, levels=[5, 4.5, 4]), [0.0, 0.0])  # below from the start
    assert np.isnan(nqf.drop_times(TC, LC, levels=[1, 0.5, 0])).all()  # never reached
    traj = types.SimpleNamespace(t=TC, loss=LC)  # a trajectory with `t` and `loss`
    np.testing.assert_allclose(nqf.drop_times(traj, levels=[4, 2, 1]), [1.5, 2.5])
    assert nqf.learning_phase_end(TC, LC, 1.0, tol=0.5) == pytest.approx(1.75)  # level 2.5
    assert nqf.learning_phase_end(TC, LC, 4.0) == 0.0  # L(t_0) = L_inf
    assert np.isnan(nqf.learning_phase_end(TC, LC, 0.0, tol=0.1))  # 0.4 never reached
    # harmonic mean of 1.5 and 2.5: 1.875, where the interpolated loss is 2.25
    np.testing.assert_allclose(nqf.plateau_levels(TC, LC, [2.5, 1.5, np.nan, np.inf], 0.9), [4.0, 2.25, 0.9])
    assert nqf.learning_phase_end(TC, LC, 1.0, 0.5) == pytest.approx(1.75)  # positional tol


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (
            lambda: nqf.drop_times(TC, LC, levels=[4, 4, 1]),
            ValueError,
            r"`levels` must be strictly decreasing .*levels\[0\] = 4.0 <= levels\[1\] = 4.0",
        ),
        (lambda: nqf.drop_times(TC, LC, levels=[4]), ValueError, r"at least 2 plateau levels .*found 1"),
        (lambda: nqf.drop_times(TC, LC, levels=[4, np.nan]), ValueError, r"`levels` must be finite"),
        (
            lambda: nqf.drop_times(TC[::-1], LC, levels=[4, 1]),
            ValueError,
            r"`t` must be non-decreasing; found t\[0\] = 4.0 > t\[1\] = 3.0",
        ),
        (lambda: nqf.drop_times(TC, LC[:4], levels=[4, 1]), ValueError, r"same length; found shapes \(5,\) and \(4,\)"),
        (lambda: nqf.drop_times(TC, np.where(TC > 2, np.inf, LC), levels=[4, 1]), ValueError, r"`loss` must be finite"),
        (lambda: nqf.drop_times(TC, LC, levels=[4, 1], refine="brent"), ValueError, r"refine='brent' needs a flow"),
        (lambda: nqf.drop_times(np.ones(3), levels=[4, 1]), TypeError, r"`trajectory` must be a FlowSolution.*ndarray"),
        (lambda: nqf.learning_phase_end(TC, LC), ValueError, r"`final_loss` .* is required"),
        (lambda: nqf.learning_phase_end(TC, LC, 5.0), ValueError, r"`final_loss` = 5 lies above the initial loss"),
        (lambda: nqf.learning_phase_end(TC, LC, 1.0, tol=1.0), ValueError, r"`tol` must lie in \(0, 1\)"),
        (
            lambda: nqf.plateau_levels(TC, LC, ignition_times=[0.0, 2.0], final=1.0),
            ValueError,
            r"`ignition_times` must lie in \(t_0, t_end\] = \(0, 4\] of the curve; found range \[0, 2\]",
        ),
        (
            lambda: nqf.plateau_levels(TC, LC, ignition_times=[1.0], final=[1.0, 2.0]),
            ValueError,
            r"`final` must be a scalar loss or an nqf.Asymptote",
        ),
        (lambda: nqf.plateau_levels(TC, LC, ignition_times=[1.0]), ValueError, r"`final` .* are required"),
    ],
)
def test_loss_curve_bad_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_loss_curve_of_a_sweep_is_refused(fig3):
    sweep = nqf.solve_sweep(fig3, eps=np.array([1e-4, 1e-6]), t1=20.0)
    with pytest.raises(TypeError, match=r"SweepSolution holds B loss curves: measure each member"):
        nqf.drop_times(sweep, levels=[1.0, 0.5])
