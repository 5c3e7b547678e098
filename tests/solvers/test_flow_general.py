"""The (M, mu) flow of the general model (Eq. E10) against scipy: a numpy E10 and W-space
gradient flow with autodiff gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate

import nqf
import nqf.solvers._solve

M_, P_, D_ = 6, 4, 3  # m, p, width (shapes shared with test_solve: compiled programs are reused)
TS = np.linspace(0.0, 2.0, 11)


def sym(X):
    return (X + np.swapaxes(X, -1, -2)) / 2


def problem(seed, kind="dense"):
    """(model, (A, g, B, f0, y) in numpy). `kind`: "dense" or "feedforward" (LowRankData)."""
    rng = np.random.default_rng(seed)
    y = rng.standard_normal(M_)
    g = rng.standard_normal((M_, P_))
    B = 0.5 * sym(rng.standard_normal((M_, P_, P_)))
    f0 = 0.3 * rng.standard_normal(M_)
    if kind == "dense":
        A = sym(rng.standard_normal((M_, P_, P_)))
        data = nqf.DenseData(A, y)
    else:
        C = rng.standard_normal((M_, P_ - 1, 1))
        A = np.zeros((M_, P_, P_))
        A[:, : P_ - 1, P_ - 1 :] = C / 2
        A[:, P_ - 1 :, : P_ - 1] = np.swapaxes(C, 1, 2) / 2
        data = nqf.feedforward_data(y, C)
    return nqf.NQFModel(data, g=g, B=B, f0=f0), (A, g, B, f0, y)


def outputs(dense, M, mu):
    A, g, B, f0, _ = dense
    return f0 + g @ mu + np.einsum("i,mij,j->m", mu, B, mu) + np.einsum("mij,ji->m", A, M)


def scipy_E10(dense, M0, mu0, d, ts, gamma=0.0):
    """Eq. E10 in numpy: mu' = -(d v + H mu), M' = -(v mu^T + mu v^T + H M + M H), DOP853."""
    A, g, B, f0, y = dense
    m, p, _ = A.shape

    def rhs(t, s):
        M, mu = s[: p * p].reshape(p, p), s[p * p :]
        lp = 2.0 / m * (outputs(dense, M, mu) - y)
        v = lp @ (g + 2.0 * np.einsum("mij,j->mi", B, mu))
        H = 2.0 * np.tensordot(lp, A, 1) + gamma * np.eye(p)
        dM = -(np.outer(v, mu) + np.outer(mu, v) + H @ M + M @ H)
        return np.concatenate([dM.ravel(), -(d * v + H @ mu)])

    s0 = np.concatenate([M0.ravel(), mu0])
    sol = scipy.integrate.solve_ivp(
        rhs, (0, ts[-1]), s0, "DOP853", t_eval=ts, rtol=1e-12, atol=1e-14 * np.abs(s0).max()
    )
    assert sol.success
    return sol.y.T[:, : p * p].reshape(-1, p, p), sol.y.T[:, p * p :]


def scipy_wspace(dense, W0, ts, gamma=0.0):
    """W' = -grad_W [ (1/m) sum (f_x(W) - y_x)^2 + gamma/2 |W|^2 ] with a JAX autodiff gradient."""
    A, g, B, f0, y = (jnp.asarray(a) for a in dense)
    p, d = W0.shape

    def loss(w):
        W = w.reshape(p, d)
        mu = W.sum(axis=1)
        f = f0 + g @ mu + jnp.einsum("i,mij,j->m", mu, B, mu) + jnp.einsum("mij,ia,ja->m", A, W, W)
        return jnp.mean((f - y) ** 2) + gamma / 2 * jnp.sum(w**2)

    grad = jax.jit(jax.grad(loss))
    sol = scipy.integrate.solve_ivp(
        lambda t, w: -np.asarray(grad(w)),
        (0, ts[-1]),
        W0.ravel(),
        "DOP853",
        t_eval=ts,
        rtol=1e-13,
        atol=1e-15 * np.abs(W0).max(),
    )
    assert sol.success
    return sol.y.T.reshape(-1, p, d)


def rel_err(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("kind", ["dense", "feedforward"])
def test_E10_matches_scipy(kind):
    model, dense = problem(1, kind)
    W = 0.5 * np.random.default_rng(2).standard_normal((P_, D_))
    M0, mu0 = W @ W.T, W.sum(axis=1)
    sol = nqf.solve_flow(model, M0=M0, mu0=mu0, d=D_, t1=TS[-1], ts=TS, rtol=1e-12, weight_decay=0.2)
    assert sol.form == "M-mu" and sol.d == D_ and sol.model is model
    assert sol.M.shape == (11, P_, P_) and sol.mu.shape == (11, P_)
    M_ref, mu_ref = scipy_E10(dense, M0, mu0, D_, TS, gamma=0.2)
    assert rel_err(sol.M, M_ref) < 1e-9
    assert rel_err(sol.mu, mu_ref) < 1e-9
    loss_ref = [np.mean((outputs(dense, M, mu) - dense[-1]) ** 2) for M, mu in zip(M_ref, mu_ref)]
    np.testing.assert_allclose(sol.loss, loss_ref, rtol=1e-9)
    np.testing.assert_allclose(sol.mu_at(TS[3]), sol.mu[3:4], rtol=1e-12)
    np.testing.assert_allclose(sol.M_at(TS[3]), sol.M[3:4], rtol=1e-12)


@pytest.mark.parametrize("gamma", [0.0, 0.1])
def test_E10_matches_wspace_gradient_flow(gamma):
    """Theorem 2 in the flow limit: M = W W^T and mu = W 1 of the weight-space flow (d = 3)."""
    model, dense = problem(3)
    W0 = 0.5 * np.random.default_rng(4).standard_normal((P_, D_))
    sol = nqf.solve_flow(model, W0=W0, t1=TS[-1], ts=TS, rtol=1e-12, weight_decay=gamma)
    assert sol.form == "M-mu" and sol.d == D_  # "auto" with g, B; mu0 and d derived from W0
    Ws = scipy_wspace(dense, W0, TS, gamma)
    assert rel_err(sol.M, Ws @ np.swapaxes(Ws, 1, 2)) < 1e-9
    assert rel_err(sol.mu, Ws.sum(axis=2)) < 1e-9
    with pytest.raises(ValueError, match=r"`W` is not available for form='M-mu'"):
        sol.W


def test_no_recompile_for_new_values():
    W0 = 0.5 * np.random.default_rng(5).standard_normal((P_, D_))
    nqf.solve_flow(problem(6)[0], W0=W0, t1=TS[-1], ts=TS)
    before = nqf.solvers._solve.TRACE_COUNT[0]
    W = 0.1 * np.random.default_rng(7).standard_normal((P_, 5))
    nqf.solve_flow(problem(8)[0], M0=W @ W.T, mu0=W.sum(1), d=5, t1=1.0, ts=TS / 2, weight_decay=0.3)
    assert nqf.solvers._solve.TRACE_COUNT[0] == before


def test_bare_data_M_mu_form_matches_factor_form():
    """With g = B = 0, mu = W 1 follows W' = -H W: compare with the factor form's W(t)."""
    model, _ = problem(9)
    W0 = 0.5 * np.random.default_rng(10).standard_normal((P_, D_))
    sol = nqf.solve_flow(model.data, W0=W0, t1=TS[-1], ts=TS, rtol=1e-12, form="M-mu")
    ref = nqf.solve_flow(model.data, W0=W0, t1=TS[-1], ts=TS, rtol=1e-12, form="factor")
    assert rel_err(sol.M, ref.M) < 1e-9
    assert rel_err(sol.mu, ref.W.sum(axis=2)) < 1e-9
    np.testing.assert_allclose(sol.loss, ref.loss, rtol=1e-9)


def test_model_without_mean_field_behaves_as_before():
    model, (A, _, _, f0, y) = problem(11)
    M0 = 1e-3 * np.eye(P_)
    kw = dict(M0=M0, t1=TS[-1], ts=TS, rtol=1e-12)
    plain = nqf.solve_flow(model.data, **kw)
    same = nqf.solve_flow(nqf.NQFModel(model.data), **kw)
    assert same.form == plain.form == "M" and same.mu is None and same.d is None
    np.testing.assert_array_equal(same.M, plain.M)
    # f0 only: the same flow as labels y - f0, and the loss uses the outputs f0 + Tr[M A]
    shifted = nqf.solve_flow(nqf.NQFModel(model.data, f0=f0), **kw)
    ref = nqf.solve_flow(nqf.DenseData(A, y - f0), **kw)
    np.testing.assert_array_equal(shifted.M, ref.M)
    loss = [np.mean((f0 + np.einsum("mij,ji->m", A, M) - y) ** 2) for M in shifted.M]
    np.testing.assert_allclose(shifted.loss, loss, rtol=1e-12)
    with pytest.raises(ValueError, match=r"`mu_at` needs the 'M-mu' form"):
        plain.mu_at(1.0)


@pytest.fixture(scope="module")
def model():
    return problem(0)[0]


W3 = np.arange(12.0).reshape(P_, D_) / 10


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(M0=np.eye(P_)), r"'M-mu' form .* needs `mu0` \(p,\) and the width `d` together with `M0`"),
        (dict(M0=np.eye(P_), mu0=np.zeros(P_)), r"needs `mu0` \(p,\) and the width `d`.*d=None"),
        (dict(M0=np.eye(P_), d=3), r"needs `mu0`.*mu0=None"),
        (dict(M0=np.eye(P_), mu0=np.zeros(P_), d=0), r"`d` \(the number of neurons\) must be an integer >= 1; found 0"),
        (dict(M0=np.eye(P_), mu0=np.zeros(P_), d=1.5), r"integer >= 1; found 1.5"),
        (dict(M0=np.eye(P_), mu0=np.zeros(P_ + 1), d=3), r"`mu0` must have shape \(4,\); found \(5,\)"),
        (dict(M0=np.eye(P_), mu0=np.full(P_, 3.0), d=3), r"`M0 - mu0 mu0\^T / d` must be positive semi-definite"),
        (dict(W0=W3, mu0=W3.sum(1)), r"`mu0` and `d` are derived from `W0`"),
        (dict(W0=W3, d=3), r"derived from `W0`"),
        (dict(W0=W3, M0=np.eye(P_)), r"exactly one initial condition"),
        (dict(W0=W3[:3]), r"`W0` must have shape \(4, d\)"),
        (dict(W0=W3, form="M"), r"`form='M'` tracks M only and ignores the model's g and B"),
        (dict(W0=W3, form="factor"), r"ignores the model's g and B.*form='M-mu'"),
        (dict(W0=W3, form="glv"), r"`form='glv'` needs commuting data"),
        (dict(W0=W3, form="Mmu"), r"`form` must be one of"),
    ],
)
def test_bad_general_arguments(model, kwargs, match):
    with pytest.raises(ValueError, match=match):
        nqf.solve_flow(model, t1=1.0, **kwargs)


def test_mu0_without_M_mu_form_is_refused(model):
    with pytest.raises(ValueError, match=r"`mu0` and `d` are used only by form='M-mu'"):
        nqf.solve_flow(model.data, M0=np.eye(P_), mu0=np.zeros(P_), d=3, t1=1.0)
    with pytest.raises(ValueError, match=r"used only by form='M-mu'"):
        nqf.solve_flow(nqf.NQFModel(model.data), W0=W3, d=3, t1=1.0)


# -- a g of low rank runs on its factors (issue 23: the sigmoid MLP's constant g) ---------------

MS, KS, DS = 40, 12, 16  # m, k (p = k + 1), width: large enough that the factors save work
TS_S = np.linspace(0.0, 1.5, 7)


def sigmoid_like(seed, rank=1, with_B=False):
    """A bias-free two-layer MLP with phi(0) != 0 (FeedForwardData a = phi'(0) x, b = 1) and a g
    of the given rank (rank 1: the sigmoid's constant g = [0 (k); 1/2]); numpy arrays as `problem`."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((MS, KS))
    y = rng.standard_normal(MS)
    p = KS + 1
    data = nqf.FeedForwardData(0.25 * x[:, :, None], np.ones((MS, 1, 1)), y)
    if rank == 1:
        g = np.zeros((MS, p))
        g[:, -1] = 0.5
    else:
        g = rng.standard_normal((MS, rank)) @ rng.standard_normal((rank, p)) / rank
    B = 0.05 * sym(rng.standard_normal((MS, p, p))) if with_B else np.zeros((MS, p, p))
    model = nqf.NQFModel(data, g=g, B=B if with_B else None)
    return model, (np.asarray(data.dense()), g, B, np.zeros(MS), y)


@pytest.mark.parametrize("rank, with_B", [(1, False), (3, False), (2, True)])
def test_factor_linear_term_is_exact(rank, with_B):
    from nqf.dynamics._flow import FactoredG, factor_linear_term, rhs_M_mu

    model, _ = sigmoid_like(20 + rank, rank, with_B)
    fac = factor_linear_term(model)
    assert isinstance(fac, FactoredG) and fac.U.shape == (MS, rank) and fac.V.shape == (rank, KS + 1)
    assert fac.model.g is None and (fac.model.B is not None) == with_B
    assert rel_err(np.asarray(fac.U @ fac.V), np.asarray(model.g)) <= 1e-15
    rng = np.random.default_rng(1)
    W = 0.3 * rng.standard_normal((KS + 1, DS))
    M, mu = jnp.asarray(W @ W.T), jnp.asarray(W.sum(1))
    assert rel_err(np.asarray(fac.outputs(M, mu)), np.asarray(model.outputs(M, mu))) <= 1e-14
    for a, b in zip(rhs_M_mu(0.0, (M, mu), (fac, 0.1, float(DS))), rhs_M_mu(0.0, (M, mu), (model, 0.1, float(DS)))):
        assert rel_err(np.asarray(a), np.asarray(b)) <= 1e-14


def test_factor_linear_term_keeps_models_it_cannot_help():
    from nqf.dynamics._flow import factor_linear_term

    full, _ = problem(0)  # m = 6, p = 4, random g: no saving possible
    assert factor_linear_term(full) is full
    high, _ = sigmoid_like(2, rank=10)  # rank 10 > 8: never approximated
    assert factor_linear_term(high) is high
    plain = nqf.NQFModel(sigmoid_like(2)[0].data)
    assert factor_linear_term(plain) is plain and factor_linear_term(plain.data) is plain.data
    traced = jax.jit(lambda g: factor_linear_term(nqf.NQFModel(plain.data, g=g)).g)(np.ones((MS, KS + 1)))
    np.testing.assert_array_equal(traced, 1.0)  # under tracing: the model as given


@pytest.mark.parametrize("rank, with_B", [(1, False), (2, True)])
def test_factored_flow_matches_scipy_and_the_dense_path(rank, with_B, monkeypatch):
    """The "M-mu" solve on the factors against the numpy E10 (scipy DOP853, dense A, g, B) and
    against the same solve with the factorization turned off; loss-only saving and dense output
    go through the factored model too."""
    model, dense = sigmoid_like(30 + rank, rank, with_B)
    W0 = 0.3 * np.random.default_rng(3).standard_normal((KS + 1, DS))
    kw = dict(W0=W0, t1=TS_S[-1], ts=TS_S, rtol=1e-12, weight_decay=0.05)
    sol = nqf.solve_flow(model, **kw)
    M_ref, mu_ref = scipy_E10(dense, W0 @ W0.T, W0.sum(1), DS, TS_S, gamma=0.05)
    assert rel_err(sol.M, M_ref) < 1e-9 and rel_err(sol.mu, mu_ref) < 1e-9
    assert rel_err(nqf.solve_flow(model, save="loss", **kw).loss, sol.loss) < 1e-12
    np.testing.assert_allclose(sol.mu_at(TS_S[2]), sol.mu[2:3], rtol=1e-12)
    monkeypatch.setattr(nqf.solvers._solve, "factor_linear_term", lambda m: m)
    unfactored = nqf.solve_flow(model, **kw)
    assert rel_err(sol.M, unfactored.M) < 1e-11 and rel_err(sol.mu, unfactored.mu) < 1e-11


def test_factored_flow_is_the_limit_of_gd():
    """Theorem 2 in the flow limit: W-space GD (`nqf.train_w`, autodiff gradients) at t = lr n
    approaches the factored (M, mu) flow at first order in lr."""
    model, _ = sigmoid_like(40)
    W0 = 0.3 * np.random.default_rng(5).standard_normal((KS + 1, DS))
    T = 1.0
    sol = nqf.solve_flow(model, W0=W0, t1=T, ts=np.array([0.0, T]), rtol=1e-12)
    errs = []
    for lr in (4e-3, 2e-3):
        gd = nqf.train_w(model, W0, lr=lr, steps=int(round(T / lr)), save_every=int(round(T / lr)))
        errs.append(rel_err(gd.M[-1], sol.M[-1]) + rel_err(gd.mu[-1], sol.mu[-1]))
    assert errs[0] < 1e-3  # measured 3e-4 at lr = 4e-3, M changes by 18% over [0, T]
    assert 1.7 < errs[0] / errs[1] < 2.3, errs  # error ~ lr
