"""Issue 18: the linearized (early-time) flow, the He2 data and the spiked He2 generator, the
spectral view of Y (BBP thresholds, Krylov eigenpairs). Each test checks against an independent
computation (autodiff of the formula, the flow solver, scipy's ODE solver, dense matrices, Monte
Carlo)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import nqf
from nqf import spectral
from nqf.data import DenseData, He2Data
from nqf.datasets import spiked_he2_data


def _dense_data(rng, m=12, p=5):
    A = rng.standard_normal((m, p, p))
    return DenseData(A + np.swapaxes(A, 1, 2), rng.standard_normal(m))


# ---- piece 1: nqf.linearized -------------------------------------------------------------------
def test_linearized_solves_the_linear_flow(rng):
    """dM/dt of the result (forward-mode autodiff in t) equals Y M + M Y, and M(0) = M0."""
    data = _dense_data(rng)
    F = rng.standard_normal((5, 3))
    M0 = F @ F.T
    Y = np.asarray(data.Y())
    ts = jnp.array([0.0, 0.1, 0.37])
    M = nqf.linearized(data, ts, M0=M0)
    assert M.shape == (3, 5, 5)
    np.testing.assert_allclose(M[0], M0, rtol=1e-12, atol=1e-12)
    dM = jax.jit(jax.vmap(jax.jacfwd(lambda t: nqf.linearized(data, t, M0=M0))))(ts)  # one program
    expected = Y @ M + M @ Y
    np.testing.assert_allclose(dM, expected, rtol=1e-10, atol=1e-10 * np.abs(expected).max())
    # W0 form: M0 = W0 W0^T; scalar t gives (p, p); t of any shape is vectorised
    np.testing.assert_allclose(nqf.linearized(data, 0.37, W0=F), M[2], rtol=1e-12)
    assert nqf.linearized(data, np.zeros((2, 4)), M0=M0).shape == (2, 4, 5, 5)
    with pytest.raises(FloatingPointError, match="`linearized` overflowed"):
        nqf.linearized(data, 1e6, M0=M0)
    # the matrix exponential, independently (scipy.linalg.expm)
    from scipy.linalg import expm

    E = expm(0.37 * Y)
    np.testing.assert_allclose(M[2], E @ M0 @ E, rtol=1e-10)


def test_linearized_is_the_linear_part_of_nqfs_vector_field(rng):
    """Y of `linearized` is nqf's own: rhs_M (the flow's M' = -(H M + M H)) at eps M0, divided by
    eps, tends to Y M0 + M0 Y (the K(M) term is O(eps))."""
    from nqf.dynamics._flow import rhs_M

    data = _dense_data(rng)
    F = rng.standard_normal((5, 3))
    M0 = F @ F.T
    lin = jax.jit(jax.jacfwd(lambda t: nqf.linearized(data, t, M0=M0)))(0.0)  # one program
    KM = np.asarray(data.K(M0))
    quad = KM @ M0 + M0 @ KM  # the O(M^2) term: rhs_M(eps M0) = eps (Y M0 + M0 Y) - eps^2 quad
    eps = 1e-4
    v = np.asarray(rhs_M(0.0, eps * M0, (data, 0.0, None))) / eps
    np.testing.assert_allclose((v - lin) / eps, -quad, rtol=1e-6, atol=1e-8 * np.abs(quad).max())


def test_linearized_under_jit_vmap_grad(rng):
    data = _dense_data(rng)
    M0 = np.eye(5) * 1e-3
    ts = jnp.linspace(0.0, 0.5, 4)
    ref = nqf.linearized(data, ts, M0=M0)
    f = jax.jit(lambda d, t, M: nqf.linearized(d, t, M0=M))
    np.testing.assert_allclose(f(data, ts, M0), ref, rtol=1e-12)
    np.testing.assert_allclose(jax.vmap(lambda t: nqf.linearized(data, t, M0=M0))(ts), ref, rtol=1e-12)
    # d/dy of a scalar readout: vs central finite differences
    y = np.asarray(data.y)
    loss = jax.jit(lambda yy: jnp.sum(nqf.linearized(DenseData(data.A, yy), 0.5, M0=M0) ** 2))
    g = jax.grad(loss)(jnp.asarray(y))
    h = 1e-6
    e0 = np.zeros_like(y)
    e0[0] = h
    fd = (loss(y + e0) - loss(y - e0)) / (2 * h)
    np.testing.assert_allclose(g[0], fd, rtol=1e-6)
    th = jax.jit(lambda d: spectral.linearized_horizon(d, M0=M0))(data)
    np.testing.assert_allclose(th, spectral.linearized_horizon(data, M0=M0), rtol=1e-12)


def test_linearized_vs_flow_before_and_after_the_horizon():
    """Against solve_flow (tsit5, rtol 1e-10) on spiked He2 data from M0 = eps I: relative error
    O(eps) at a fixed early time (halving eps halves it), <= 2 delta up to the horizon
    t_h(delta = 0.1), and >= 0.5 once the top mode has ignited (t_h(delta = 10))."""
    data, _ = spiked_he2_data(400, 6, gamma=1.0, K=3, seed=3)
    errs = {}
    for eps in (1e-6, 5e-7):
        M0 = eps * np.eye(6)
        th = spectral.linearized_horizon(data, M0=M0, delta=0.1)
        th_after = spectral.linearized_horizon(data, M0=M0, delta=10.0)
        assert 0 < th < th_after < np.inf
        ts = np.concatenate([np.linspace(0.0, th, 30), [th_after]])
        sol = nqf.solve_flow(data, M0=M0, t1=th_after, ts=ts, form="M", rtol=1e-11)
        Mf = np.asarray(sol.M)
        Ml = np.asarray(nqf.linearized(data, ts, M0=M0))
        rel = np.linalg.norm(Mf - Ml, axis=(1, 2)) / np.linalg.norm(Mf, axis=(1, 2))
        errs[eps] = rel
        assert rel[:30].max() <= 0.2, rel[:30].max()
        assert rel[-1] >= 0.5, rel[-1]
    early = 5  # a fixed early time (same grid fraction; th differs by ln 2 / (2 g1) only)
    ratio = errs[1e-6][early] / errs[5e-7][early]
    assert 1.7 < ratio < 2.3, ratio


def test_linearized_horizon_values(rng):
    data = _dense_data(rng)
    Y = np.asarray(data.Y())
    g, V = np.linalg.eigh(Y)
    k1 = np.abs(np.linalg.eigvalsh(np.asarray(data.K(np.outer(V[:, -1], V[:, -1]))))).max()
    eps = 1e-8
    th = spectral.linearized_horizon(data, M0=eps * np.eye(5), delta=0.1)
    np.testing.assert_allclose(th, np.log(0.1 * g[-1] / (k1 * eps)) / (2 * g[-1]), rtol=1e-12)
    assert spectral.linearized_horizon(data, M0=np.zeros((5, 5))) == np.inf
    assert spectral.linearized_horizon(data, M0=1e6 * np.eye(5)) == 0.0
    neg = DenseData(np.asarray(data.A), -np.abs(np.asarray(data.y)) * 0)  # Y = 0: nothing grows
    assert spectral.linearized_horizon(neg, M0=eps * np.eye(5)) == np.inf


def test_linearized_errors(rng):
    data = _dense_data(rng)
    with pytest.raises(ValueError, match="exactly one"):
        nqf.linearized(data, 1.0)
    with pytest.raises(ValueError, match="exactly one"):
        nqf.linearized(data, 1.0, M0=np.eye(5), W0=np.eye(5))
    with pytest.raises(ValueError, match="`M0`"):
        nqf.linearized(data, 1.0, M0=np.eye(4))
    with pytest.raises(ValueError, match="`W0`"):
        nqf.linearized(data, 1.0, W0=np.eye(4))
    with pytest.raises(ValueError, match="`M0` must be positive semi-definite"):
        nqf.linearized(data, 1.0, M0=-np.eye(5))
    with pytest.raises(ValueError, match="`t` must be finite"):
        nqf.linearized(data, np.nan, M0=np.eye(5))
    with pytest.raises(ValueError, match="`delta`"):
        spectral.linearized_horizon(data, M0=np.eye(5), delta=0.0)
    with pytest.raises(TypeError, match="`data`"):
        nqf.linearized(np.eye(5), 1.0, M0=np.eye(5))


# ---- piece 2: He2Data and the spiked He2 generator ------------------------------------------------
def test_he2data_matches_dense(rng):
    X = rng.standard_normal((30, 6))
    y = rng.standard_normal(30)
    data = He2Data(X, y, c=0.7)
    A = 0.7 * (np.einsum("mi,mj->mij", X, X) - np.eye(6))
    dense = DenseData(A, y)
    np.testing.assert_allclose(data.dense(), A, rtol=1e-13)
    S = rng.standard_normal((6, 6))
    S = S + S.T
    F = rng.standard_normal((6, 3))
    c = rng.standard_normal(30)
    for name, args in (
        ("traces", (S,)),
        ("traces_factor", (F,)),
        ("apply", (c, F)),
        ("weighted_sum", (c,)),
        ("Y", ()),
        ("K", (S,)),
        ("loss", (S @ S,)),
    ):
        np.testing.assert_allclose(
            getattr(data, name)(*args), getattr(dense, name)(*args), rtol=1e-11, atol=1e-11, err_msg=name
        )
    np.testing.assert_allclose(data.scaled(2.0).dense(), 2 * A, rtol=1e-13)
    np.testing.assert_allclose(data.subset(np.array([3, 3, 0])).dense(), A[[3, 3, 0]], rtol=1e-13)
    with pytest.raises(ValueError, match="`X`"):
        He2Data(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="`y`"):
        He2Data(np.ones((3, 2)), np.ones(4))


def test_he2data_save_load(tmp_path, rng):
    data = He2Data(rng.standard_normal((5, 3)), rng.standard_normal(5), c=0.5)
    nqf.save({"data": data}, tmp_path / "s.npz")
    back = nqf.load(tmp_path / "s.npz")["data"]
    assert isinstance(back, He2Data)
    np.testing.assert_array_equal(back.dense(), data.dense())


def test_spiked_generator_structure():
    data, T = spiked_he2_data(50, 20, gamma=0.6, K=7, sigma=0.3, seed=1)
    assert isinstance(data, He2Data) and data.X.shape == (50, 20) and data.m == 50
    np.testing.assert_allclose(T.a.T @ T.a, np.eye(7), atol=1e-12)
    i = np.arange(1, 8)
    np.testing.assert_allclose(T.lam, T.Z * i**-0.6, rtol=1e-14)
    np.testing.assert_allclose(np.sum(T.lam**2), 1.0, rtol=1e-14)  # default Z normalisation
    np.testing.assert_allclose(T.s2, 2.0 + 0.09, rtol=1e-14)
    # same seed: same teacher whatever n, nested inputs
    data2, T2 = spiked_he2_data(80, 20, gamma=0.6, K=7, sigma=0.3, seed=1)
    np.testing.assert_array_equal(T.a, T2.a)
    np.testing.assert_array_equal(np.asarray(data2.X)[:50], np.asarray(data.X))
    # noiseless labels are the teacher NQF's outputs Tr[M* A(x)]
    d0, T0 = spiked_he2_data(40, 20, gamma=1.0, K=5, seed=2)
    np.testing.assert_allclose(d0.y, d0.traces(T0.M_star()), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.linalg.eigvalsh(T0.EY())[::-1][:5], 8 * T0.lam, rtol=1e-12)
    for kw, name in (
        (dict(n=0, d=3, gamma=1.0), "`n`"),
        (dict(n=5, d=3, gamma=1.0, K=4), "`K`"),
        (dict(n=5, d=3, gamma=-1.0), "`gamma`"),
        (dict(n=5, d=3, gamma=1.0, sigma=-1.0), "`sigma`"),
        (dict(n=5, d=3, gamma=1.0, Z=0.0), "`Z`"),
    ):
        with pytest.raises(ValueError, match=name):
            spiked_he2_data(**kw)


def test_spiked_population_quantities_monte_carlo():
    """E[Y] = 8 M*, population K(X) = 8 X and loss 2 |M - M*|^2 + sigma^2, by Monte Carlo at
    n = 200000, d = 4 (errors within 5 standard errors of the GOE noise level)."""
    n, d = 200_000, 4
    data, T = spiked_he2_data(n, d, gamma=1.0, K=2, sigma=0.5, seed=7)
    se = np.sqrt(2 * T.s2 / n) * 4  # largest entry standard deviation of Y (diagonal)
    assert np.abs(np.asarray(data.Y()) - T.EY()).max() < 5 * se
    S = np.diag([1.0, -0.5, 0.2, 0.0])
    assert np.abs(np.asarray(data.K(S)) - 8 * S).max() < 0.2
    M = 0.3 * np.eye(d)
    mc = float(np.mean((np.asarray(data.traces(M)) - np.asarray(data.y)) ** 2))
    np.testing.assert_allclose(mc, T.population_loss(M), rtol=0.02)


def test_population_flow_vs_scipy():
    _, T = spiked_he2_data(10, 5, gamma=1.0, K=3, seed=0)
    Y = T.EY()
    M0 = 1e-3 * np.eye(5) + 1e-4 * np.ones((5, 5))
    ts = np.linspace(0.0, 3.0, 7)
    rhs = lambda t, v: (lambda M: (Y @ M + M @ Y - 16 * M @ M).ravel())(v.reshape(5, 5))  # noqa: E731
    ref = solve_ivp(rhs, (0, 3.0), M0.ravel(), t_eval=ts, rtol=1e-11, atol=1e-14, method="DOP853").y.T.reshape(-1, 5, 5)
    got = T.population_flow(ts, M0)
    np.testing.assert_allclose(got, ref, rtol=1e-7, atol=1e-10)
    # on the teacher's span it converges to M* (the complement decays only as 1/t: K has no gap there)
    late = T.population_flow([200.0], M0)[0]
    np.testing.assert_allclose(T.a.T @ late @ T.a, np.diag(T.lam), atol=1e-8)
    loss = T.population_loss(got)
    assert np.all(np.diff(loss) < 0)


# ---- piece 3: the spectral view ---------------------------------------------------------------------
def test_top_eigenpairs_vs_dense_eigh(rng):
    data, _ = spiked_he2_data(300, 30, gamma=1.0, K=5, seed=4)
    Y = np.asarray(data.Y())
    w, U = np.linalg.eigh(Y)
    for source in (data, Y, spectral.Y_operator(data)):
        g, V = spectral.top_eigenpairs(source, 4)
        np.testing.assert_allclose(g, w[::-1][:4], rtol=1e-9)
        np.testing.assert_allclose(np.abs(V.T @ U[:, ::-1][:, :4]), np.eye(4), atol=1e-6)
    v = rng.standard_normal((30, 2))
    np.testing.assert_allclose(spectral.Y_operator(data).matmat(v), Y @ v, rtol=1e-10)
    np.testing.assert_allclose(spectral.Y_operator(_dense_data(rng, p=5)).matvec(np.ones(5)).shape, (5,))
    with pytest.raises(ValueError, match="`k`"):
        spectral.top_eigenpairs(Y, 30)
    with pytest.raises(ValueError, match="`Y` must be square"):
        spectral.top_eigenpairs(np.ones((3, 4)), 1)


def test_noise_of_Y_has_the_stated_variances():
    """The two variances behind the thresholds, measured on one draw: (Y/4 - 2 M*) entries
    between bulk directions have variance s^2 / n, entries between a_1 and the bulk rho_1 s^2 / n."""
    n, d = 4000, 60
    data, T = spiked_he2_data(n, d, gamma=0.0, K=1, Z=1.0, sigma=0.5, seed=5)
    B = np.linalg.qr(np.concatenate([T.a, np.random.default_rng(0).standard_normal((d, d - 1))], axis=1))[0]
    N = B.T @ (np.asarray(data.Y()) / 4 - 2 * T.M_star()) @ B  # the noise in the basis (a_1, bulk)
    bulk = N[1:, 1:][np.triu_indices(d - 1, 1)]
    row = N[0, 1:]
    np.testing.assert_allclose(n * bulk.var(), T.s2, rtol=0.06)
    rho = spectral.spike_variance_ratio(T.lam, sigma=0.5)[0]
    np.testing.assert_allclose(rho, 1 + 8 / 2.25, rtol=1e-14)
    np.testing.assert_allclose(n * row.var(), rho * T.s2, rtol=0.25)  # 59 samples of the row


def test_bbp_formulas():
    lam = np.array([1.0, 0.5])
    s2 = 2 * 1.25 + 0.25
    ni = spectral.bbp_thresholds(lam, 100, sigma=0.5)
    np.testing.assert_allclose(ni, 100 * s2 / (4 * lam**2), rtol=1e-14)
    rho = 1 + 8 * lam**2 / s2
    n = np.array([10.0, 1e3, 1e5])
    np.testing.assert_allclose(
        spectral.bbp_overlap(n, lam, 100, sigma=0.5), np.clip(1 - rho * ni / n[:, None], 0, None), rtol=1e-14
    )
    np.testing.assert_allclose(
        spectral.bbp_overlap(n, lam, 100, sigma=0.5, gaussian_row=True),
        np.clip(1 - ni / n[:, None], 0, None),
        rtol=1e-14,
    )
    half = spectral.half_overlap_sizes(lam, 100, sigma=0.5)
    np.testing.assert_allclose(spectral.bbp_overlap(half, lam, 100, sigma=0.5).diagonal(), 0.5, rtol=1e-12)
    np.testing.assert_allclose(spectral.bulk_edge(1e4, 100, lam=lam, sigma=0.5), 8 * np.sqrt(s2 * 100 / 1e4))
    with pytest.raises(ValueError, match="`lam`"):
        spectral.bbp_thresholds([1.0, 0.0], 10)
    with pytest.raises(ValueError, match="`d`"):
        spectral.bbp_thresholds([1.0], 0)
    with pytest.raises(ValueError, match="`sigma`"):
        spectral.bbp_thresholds([1.0], 10, sigma=-1.0)
    with pytest.raises(ValueError, match="`n`"):
        spectral.bbp_overlap(0.0, [1.0], 10)


def test_overlap_above_threshold_matches_prediction():
    """Spiked He2 data (d = 100, one spike): the top eigenvector's cos^2 at n = 4 rho n_1
    (predicted 0.75) and 8 rho n_1 (0.875), mean of 3 seeds, within 0.06."""
    d = 100
    _, T = spiked_he2_data(1, d, gamma=0.0, K=1, sigma=0.5)
    nh = spectral.half_overlap_sizes(T.lam, d, sigma=0.5)[0]  # = 2 rho n_1
    for f, want in ((2.0, 0.75), (4.0, 0.875)):
        n = int(f * nh)
        got = []
        for seed in range(3):
            data, T = spiked_he2_data(n, d, gamma=0.0, K=1, sigma=0.5, seed=seed)
            X, y = np.asarray(data.X), np.asarray(data.y)
            _, V = spectral.top_eigenpairs(4 / n * (X.T @ (y[:, None] * X) - y.sum() * np.eye(d)), 2)
            got.append((V[:, 0] @ T.a[:, 0]) ** 2)
        np.testing.assert_allclose(spectral.bbp_overlap(n, T.lam, d, sigma=0.5)[0], want, atol=0.002)
        assert abs(np.mean(got) - want) < 0.06, (f, got)


# --- issue 27 item 8: signs, nonlinear readout, the He2 lift -----------------------------------
def test_he2_lift_kernel_identity():
    """<phi(x), phi(x')> = (x.x')^2 / 2 - (|x|^2 + |x'|^2) / 2 + d / 2 (orthonormal He2 features)."""
    from nqf.datasets import he2_lift

    X = np.random.default_rng(0).standard_normal((5, 4))
    F = he2_lift(X)
    assert F.shape == (5, 10)
    G = X @ X.T
    sq = np.diag(G)
    np.testing.assert_allclose(F @ F.T, G**2 / 2 - (sq[:, None] + sq[None, :]) / 2 + 2.0, rtol=1e-12, atol=1e-12)


def test_spiked_signs_readout_and_lift():
    d0, T0 = spiked_he2_data(60, 10, gamma=1.0, K=4, seed=2)
    d1, T1 = spiked_he2_data(60, 10, gamma=1.0, K=4, seed=2, signs=True)
    d2, T2 = spiked_he2_data(60, 10, gamma=1.0, K=4, seed=2, signs=True, readout="tanh")
    np.testing.assert_array_equal(T0.a, T1.a)
    np.testing.assert_array_equal(d0.X, d1.X)
    assert set(np.unique(T1.signs)) == {-1.0, 1.0}  # seed 2 draws both signs for K = 4
    np.testing.assert_allclose(d1.y, d1.traces(T1.M_star()), rtol=1e-12, atol=1e-12)  # signed NQF teacher
    np.testing.assert_allclose(d2.y, np.tanh(np.asarray(d1.y)), rtol=1e-12)
    np.testing.assert_allclose(T1.spikes, T1.signs * T1.lam, rtol=0)
    np.testing.assert_allclose(
        np.linalg.eigvalsh(T1.EY()), np.sort(np.r_[8 * T1.signs * T1.lam, np.zeros(6)]), atol=1e-12
    )
    for what in ("EY", "M_star"):
        with pytest.raises(ValueError, match="readout"):
            getattr(T2, what)()
    d3, T3 = spiked_he2_data(30, 5, gamma=1.0, K=3, seed=0, q=2)
    assert d3.p == T3.p == 15 and T3.d == 5
    np.testing.assert_allclose(d3.y, d3.traces(T3.M_star()), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="q = 1"):
        T3.population_loss(np.zeros((15, 15)))
    for kw, err in (
        ({"q": 3}, ValueError),
        ({"signs": "yes"}, TypeError),
        ({"readout": "relu"}, ValueError),
        ({"readout": 3}, TypeError),
    ):
        with pytest.raises(err, match=next(iter(kw))):
            spiked_he2_data(10, 5, gamma=1.0, **kw)


def test_effective_spikes_of_a_nonlinear_readout():
    """Stein's lemma by Monte Carlo: the identity as a callable recovers the exact linear values,
    Stein agrees with the direct projection E[y (u^2 - 1)] / 2, and the data's a_i^T Y a_i / 8
    agree with the tanh teacher's effective spikes."""
    _, Tl = spiked_he2_data(10, 16, gamma=1.0, K=6, sigma=0.5, seed=1, signs=True, readout=lambda h: h)
    assert not Tl.linear
    se = Tl.mc_stderr
    assert np.all(np.abs(Tl.spikes - Tl.signs * Tl.lam) <= 5 * se + 1e-3)
    np.testing.assert_allclose(Tl.s2, 2.0 + 0.25, rtol=0.02)
    np.testing.assert_allclose(Tl.spike_variance_ratio, 1 + 8 * Tl.lam**2 / 2.25, rtol=0.05)
    data, T = spiked_he2_data(40_000, 16, gamma=1.0, K=6, sigma=0.5, seed=1, signs=True, readout="tanh")
    assert np.all(np.abs(T.spikes - T.spikes_projection) <= 5 * T.mc_stderr)
    X, y = np.asarray(data.X), np.asarray(data.y)
    u = X @ T.a
    proj = y[:, None] * (u**2 - 1) / 2
    diag = np.einsum("ik,ij,jk->k", T.a, np.asarray(data.Y()), T.a) / 8
    np.testing.assert_allclose(diag, proj.mean(0), rtol=1e-10)  # a_i^T Y a_i / 8 is the sample projection
    assert np.all(np.abs(diag - T.spikes) <= 5 * proj.std(0) / np.sqrt(len(y)))
    np.testing.assert_allclose(np.mean(y**2), T.s2, rtol=0.03)


def test_spectral_overrides():
    lam = np.array([0.5, 0.3])
    np.testing.assert_allclose(spectral.bbp_thresholds(lam, 50, s2=0.7), 50 * 0.7 / (4 * lam**2), rtol=1e-14)
    np.testing.assert_allclose(
        spectral.half_overlap_sizes(lam, 50, s2=0.7, rho=[2.0, 3.0]), np.array([2.0, 3.0]) * 2 * 50 * 0.7 / (4 * lam**2)
    )
    np.testing.assert_allclose(
        spectral.bbp_overlap(1e4, lam, 50, s2=0.7, rho=2.0), 1 - 2 * 50 * 0.7 / (4 * lam**2) / 1e4
    )
    np.testing.assert_allclose(spectral.bulk_edge(1e4, 50, s2=0.7), 8 * np.sqrt(0.7 * 50 / 1e4))
    with pytest.raises(ValueError, match="lam"):
        spectral.bulk_edge(1e4, 50)
    with pytest.raises(ValueError, match="rho"):
        spectral.half_overlap_sizes(lam, 50, rho=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="s2"):
        spectral.bbp_thresholds(lam, 50, s2=-1.0)


def test_trial_findings_on_the_spiked_model():
    """A new user's trial (issue 27 item 8): kinked readouts refuse `spikes` (Stein's lemma fails;
    the projection stays), numpy readouts are refused up front, a tanh teacher pickles, seeds and
    q are checked, and `s2=` needs `rho=`."""
    import pickle

    _, T = spiked_he2_data(10, 8, gamma=1.0, K=3, sigma=0.5, seed=0, readout=jax.nn.relu)
    with pytest.raises(ValueError, match="twice differentiable"):
        T.spikes
    assert np.all(T.spikes_projection > 0)  # relu(h) still projects positively on every He2 direction
    with pytest.raises(TypeError, match="JAX-traceable"):
        spiked_he2_data(10, 8, gamma=1.0, readout=np.tanh)
    _, T = spiked_he2_data(10, 8, gamma=1.0, K=3, seed=0, readout="tanh")
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(T)).spikes, T.spikes)
    for kw in ({"seed": -1}, {"seed": 1.5}, {"q": 2.0}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            spiked_he2_data(10, 4, gamma=1.0, **kw)
    assert set(spiked_he2_data(10, 4, gamma=1.0, K=4, seed=None, signs=True)[1].signs) <= {-1.0, 1.0}
    with pytest.raises(ValueError, match="orthonormal"):
        nqf.datasets.SpikedTeacher(np.ones((4, 2)), [1.0, 0.5], 0.0, 1.0, 1.0)
    lam = np.array([0.3, 0.2])
    with pytest.raises(ValueError, match="`rho` is needed"):
        spectral.half_overlap_sizes(lam, 50, s2=0.7)
    with pytest.raises(ValueError, match="np.abs"):
        spectral.bbp_thresholds(np.array([0.3, -0.2]), 50, s2=0.7)
    with pytest.raises(ValueError, match="not both"):
        spectral.bbp_thresholds(lam, 50, s2=0.7, sigma=0.5)
    with pytest.raises(ValueError, match="gaussian_row"):
        spectral.bbp_overlap(1e4, lam, 50, gaussian_row=True, rho=2.0)


def test_top_eigenpairs_largest_magnitude():
    """which="LM": a signed teacher's spikes at both ends of Y's spectrum, against a dense eigh."""
    data, _ = spiked_he2_data(2000, 20, gamma=1.0, K=4, sigma=0.5, seed=2, signs=True)
    g, V = spectral.top_eigenpairs(data, 4, which="LM")
    w, U = np.linalg.eigh(np.asarray(data.Y()))
    idx = np.argsort(-np.abs(w))[:4]
    np.testing.assert_allclose(g, w[idx], rtol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(V * U[:, idx], axis=0)), 1.0, rtol=1e-8)
    assert np.any(g < 0)
    with pytest.raises(ValueError, match="which"):
        spectral.top_eigenpairs(data, 4, which="SA")


def test_spiked_memory_estimated_first():
    with pytest.raises(MemoryError, match=r"spiked_he2_data\(n=100000, d=200, q=2\)"):
        spiked_he2_data(100_000, 200, gamma=1.0, q=2)
