"""`nqf.asymptote`, the flow's limit t -> inf, against independent computations: Theorem 6's
closed form z_k(inf) = r_k / C_kk, long flows (`solve_flow`), least squares and reduced-rank
regression written out by hand, and a teacher the data were generated from."""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf

R = np.array([2.0, 1.5, -0.5, 1.0])  # Theorem 6 rates (C_kk = 1); mode 2 decays
EPS = 1e-6


def _desc_eig(M):
    return np.linalg.eigvalsh(M)[::-1]


@pytest.fixture(scope="module")
def orthogonal():
    return nqf.datasets.orthogonal_features_data(R, 1.0, seed=3, rotate_basis=True)


def test_orthogonal_features_give_theorem6_limit(orthogonal):
    """From M0 = eps I the limit is z_k = max(r_k / C_kk, 0) (Theorem 6), M* = P diag(z) P^T."""
    asy = nqf.asymptote(orthogonal, M0=EPS * np.eye(4))
    assert asy.method == "glv" and asy.t is None and asy.mu is None
    z = np.maximum(R, 0.0)
    np.testing.assert_allclose(asy.z, z, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(asy.eigenvalues, np.sort(z)[::-1], rtol=1e-12, atol=1e-15)
    P = np.asarray(orthogonal.P)
    np.testing.assert_allclose(asy.M, P @ np.diag(z) @ P.T, atol=1e-12)
    np.testing.assert_allclose(asy.loss, float(orthogonal.loss(jnp.asarray(asy.M))), rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(asy.outputs, np.asarray(orthogonal.traces(jnp.asarray(asy.M))), atol=1e-12)


def test_commuting_factor_init_keeps_rank_and_matches_a_long_flow(orthogonal):
    """From a random factor W0 (p, 2) the off-diagonals are slaved (Eq. E12): M* has rank 2 and
    is not P diag(z*) P^T; a long flow (t1 = 100, the slowest rate 1) gives the same M*."""
    W0 = 1e-3 * np.random.default_rng(1).standard_normal((4, 2))
    asy = nqf.asymptote(orthogonal, W0=W0)
    sol = nqf.solve_flow(orthogonal, W0=W0, t1=100.0, ts=np.array([100.0]), dense=False)
    np.testing.assert_allclose(asy.M, sol.M[-1], atol=1e-9)  # measured 5.5e-11
    np.testing.assert_allclose(asy.eigenvalues, _desc_eig(sol.M[-1]), atol=1e-9)
    assert np.abs(asy.eigenvalues[2:]).max() < 1e-14  # rank <= d = 2
    np.testing.assert_allclose(asy.z, sol.z[-1], rtol=1e-9, atol=1e-20)  # the decaying mode: e^{-100} there
    np.testing.assert_allclose(asy.loss, sol.loss[-1], rtol=1e-9, atol=1e-15)


def test_nonunique_minimizer_is_the_one_the_flow_selects():
    """m = 3 < p = 6: the minimizers of L over z >= 0 form a polytope; the GLV flow selects
    z_k = z_k(0) e^{lambda_k^T u} (not the NNLS vertex, `glv_equilibrium`). A long stiff flow
    agrees to 1e-12; the loss is the same for both."""
    rng = np.random.default_rng(1)
    Lam = np.abs(rng.standard_normal((3, 6)))
    data = nqf.CommutingData(Lam, Lam @ np.abs(rng.standard_normal(6)))
    z0 = 1e-3 * rng.uniform(0.5, 2.0, 6)
    asy = nqf.asymptote(data, z0=z0)
    sol = nqf.solve_flow(data, z0=z0, t1=5000.0, ts=np.array([5000.0]), stiff=True, dense=False)
    np.testing.assert_allclose(asy.z, sol.z[-1], rtol=1e-11)  # measured 1.3e-15
    nnls = nqf.glv_equilibrium(data)
    assert np.abs(nnls - asy.z).max() > 0.1 and (nnls == 0).sum() == 3  # a vertex, not the flow's limit
    np.testing.assert_allclose(asy.loss, 0.0, atol=1e-25)


def test_diagonal_data_under_jit_and_vmap():
    data = nqf.datasets.powerlaw_data(40)
    ref = nqf.asymptote(data, z0=np.full(40, 1e-6))
    np.testing.assert_allclose(ref.z, np.asarray(data.y) / np.asarray(data.lam), rtol=1e-12)  # y_k / lam_k > 0
    out = jax.jit(lambda d, e: nqf.asymptote(d, z0=e * jnp.ones(40)))(data, 1e-6)
    assert isinstance(out, nqf.Asymptote) and out.method == "glv"
    np.testing.assert_array_equal(np.asarray(out.z), ref.z)
    eig = jax.jit(lambda e: nqf.asymptote(data, M0=e * jnp.eye(40)).eigenvalues)(1e-3)
    np.testing.assert_allclose(eig, ref.eigenvalues, atol=1e-14)
    losses = jax.vmap(lambda e: nqf.asymptote(data, z0=e * jnp.ones(40)).loss)(jnp.array([1e-3, 1e-6]))
    np.testing.assert_allclose(losses, ref.loss, atol=1e-30)


@pytest.fixture(scope="module")
def mlp():
    data = nqf.datasets.mlp_data(40, 6, seed=1)
    W0 = 1e-3 * np.random.default_rng(0).standard_normal((7, 4))
    return data, W0


def test_mlp_is_least_squares_and_matches_a_long_flow(mlp):
    """MLP data (q = 1): E = e (k,), the limit is the least-squares e* = lstsq(X, y), M*'s one
    nonzero eigenvalue is 2 |e*| and the loss is the least-squares loss (by hand). A flow to
    t1 = 2000 agrees to O(|W0|^2) = 1e-6 in the eigenvalue (measured 3.1e-11 relative) and to
    rounding in the loss."""
    data, W0 = mlp
    asy = nqf.asymptote(data, W0=W0)
    assert asy.method == "feedforward"
    X, y = np.asarray(data.a)[:, :, 0], np.asarray(data.y)
    e = np.linalg.lstsq(X, y, rcond=None)[0]
    np.testing.assert_allclose(asy.eigenvalues[0], 2 * np.linalg.norm(e), rtol=1e-12)
    assert np.all(asy.eigenvalues[1:] == 0)
    np.testing.assert_allclose(asy.loss, np.mean((X @ e - y) ** 2), rtol=1e-12)
    np.testing.assert_allclose(asy.M[:6, 6], e, rtol=1e-12)  # the z1-z2 block is E
    sol = nqf.solve_flow(data, W0=W0, t1=2000.0, ts=np.array([2000.0]), dense=False)
    ev = _desc_eig(sol.M[-1])
    np.testing.assert_allclose(ev[0], asy.eigenvalues[0], rtol=1e-9)
    assert np.abs(ev[1:]).max() < 1e-4  # the O(|W0|^2) leftovers that never grow
    np.testing.assert_allclose(sol.loss[-1], asy.loss, rtol=1e-12)


def test_mlp_flow_method_certifies_the_same_state(mlp):
    data, W0 = mlp
    flow = nqf.asymptote(data, W0=W0, method="flow")
    closed = nqf.asymptote(data, W0=W0)
    assert flow.method == "flow" and flow.t > 0 and flow.accuracy <= 1e-7
    np.testing.assert_allclose(flow.eigenvalues[0], closed.eigenvalues[0], rtol=1e-8)  # measured 1.2e-10
    np.testing.assert_allclose(flow.loss, closed.loss, rtol=1e-10)


def test_width_limits_the_rank_reduced_rank_regression():
    """Multi-output regression (samples (x_mu, output j): a = x_mu, b = e_j) with one neuron
    (d = 1): the limit is the best rank-1 least-squares E, by hand
    E_1 = S^{-1/2} [S^{1/2} E_ols]_1 (S = X^T X), not the truncated E_ols; a flow to t1 = 100
    agrees."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 4))
    Y = X @ rng.standard_normal((4, 3)) + 0.3 * rng.standard_normal((30, 3))
    data = nqf.feedforward_data(
        Y.reshape(-1), a=np.repeat(X, 3, axis=0)[:, :, None], b=np.tile(np.eye(3), (30, 1))[:, :, None]
    )
    W0 = 1e-4 * rng.standard_normal((7, 1))
    asy = nqf.asymptote(data, W0=W0)
    w, V = np.linalg.eigh(X.T @ X)
    E_ols = np.linalg.lstsq(X, Y, rcond=None)[0]
    U, s, Vt = np.linalg.svd((V * np.sqrt(w)) @ V.T @ E_ols)
    E1 = (V / np.sqrt(w)) @ V.T @ (s[0] * np.outer(U[:, 0], Vt[0]))
    np.testing.assert_allclose(asy.M[:4, 4:], E1, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(asy.eigenvalues[0], 2 * np.linalg.norm(E1, 2), rtol=1e-12)
    np.testing.assert_allclose(asy.loss, np.mean((X @ E1 - Y) ** 2), rtol=1e-12)
    truncated = np.linalg.svd(E_ols, compute_uv=False)[0] * 2
    assert abs(truncated - asy.eigenvalues[0]) > 1e-3  # not the truncated SVD of E_ols
    sol = nqf.solve_flow(data, W0=W0, t1=100.0, ts=np.array([100.0]), dense=False)
    np.testing.assert_allclose(_desc_eig(sol.M[-1])[0], asy.eigenvalues[0], rtol=1e-9)  # measured 9.3e-11
    np.testing.assert_allclose(sol.loss[-1], asy.loss, rtol=1e-12)


def test_feedforward_assumptions_fail_and_auto_takes_the_flow():
    """Matrix completion with every row and column observed: 6 entries of a 3 x 3 E, so the
    least-squares E is not unique in span(a) (x) span(b) and the limit is the flow's implicit
    bias. method='feedforward' refuses (the condition, the design rank); 'auto' solves the flow,
    which fits the 6 entries. A large init is refused too."""
    data = nqf.datasets.matrix_completion_data(3, 3, 6, rank=1, seed=1)
    W0 = 1e-3 * np.random.default_rng(0).standard_normal((6, 3))
    with pytest.raises(nqf.AssumptionError, match=r"unique least-squares E .* design rank 6 of 9"):
        nqf.asymptote(data, W0=W0, method="feedforward")
    asy = nqf.asymptote(data, W0=W0)
    assert asy.method == "flow" and asy.loss < 1e-10
    mlp = nqf.datasets.mlp_data(40, 6, seed=1)
    big = 0.5 * np.random.default_rng(0).standard_normal((7, 4))
    with pytest.raises(nqf.AssumptionError, match=r"small initialization.*relative residual"):
        nqf.asymptote(mlp, W0=big, method="feedforward")


@pytest.fixture(scope="module")
def slow_second_mode():
    """Theorem 6 data with rates (2, 0.05, -0.3) written as DenseData: the second mode ignites
    at t* = ln(0.05 / 1e-6) / 0.05 = 216, long after the first has settled (a plateau)."""
    c = nqf.datasets.orthogonal_features_data(np.array([2.0, 0.05, -0.3]), 1.0, seed=2, rotate_basis=True)
    P, Lam = np.asarray(c.P), np.asarray(c.Lambda)
    return c, nqf.DenseData(np.einsum("ik,mk,jk->mij", P, Lam, P), np.asarray(c.y))


def test_dense_flow_does_not_stop_on_a_plateau(slow_second_mode):
    commuting, dense = slow_second_mode
    M0 = EPS * np.eye(3)
    asy = nqf.asymptote(dense, M0=M0)
    exact = nqf.asymptote(commuting, M0=M0)  # Theorem 6: eigenvalues (2, 0.05, 0)
    assert asy.method == "flow" and asy.t > 216
    np.testing.assert_allclose(asy.eigenvalues, exact.eigenvalues, atol=1e-8)  # measured 1.0e-10
    np.testing.assert_allclose(asy.loss, exact.loss, rtol=1e-8)
    with pytest.raises(
        RuntimeError,
        match=r"budget .* ran out at t = 128.*unstable direction: lambda_min\(H on "
        r"the live directions\) / kappa = -0.02.*plateau",
    ) as err:
        nqf.asymptote(dense, M0=M0, max_segments=6)
    assert err.value.last["t"] == pytest.approx(128.0)


def test_dense_teacher_is_recovered():
    """m = 8 >= p (p + 1) / 2 generic matrices and labels from a PSD teacher: the global
    minimum of the convex problem over PSD M is the teacher (loss 0)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((8, 3, 3))
    A = (A + A.transpose(0, 2, 1)) / 2
    F = rng.standard_normal((3, 2))
    teacher = F @ F.T
    data = nqf.DenseData(A, np.einsum("mij,ij->m", A, teacher))
    asy = nqf.asymptote(data, M0=1e-6 * np.eye(3))
    np.testing.assert_allclose(asy.M, teacher, atol=1e-8)  # measured 2.4e-10
    assert asy.loss < 1e-12


def test_a_start_that_never_moves(slow_second_mode):
    """W = 0 is stationary (M' = -(H M + M H) = 0): its limit is M = 0, the loss mean(y^2); with
    y = 0 also H(M0) = 0 (no rate scale), and the start is returned at t = 0."""
    _, dense = slow_second_mode
    asy = nqf.asymptote(dense, M0=np.zeros((3, 3)))
    assert asy.method == "flow" and np.all(asy.M == 0) and asy.t > 0
    np.testing.assert_allclose(asy.loss, np.mean(np.asarray(dense.y) ** 2), rtol=1e-14)
    still = nqf.asymptote(nqf.DenseData(dense.A, np.zeros(3)), M0=np.zeros((3, 3)))
    assert still.t == 0.0 and np.all(still.M == 0) and still.loss == 0.0


def test_model_with_g_matches_a_long_flow():
    """f = g^T mu + Tr[M A] (Eq. E2): the "M-mu" flow, certified; a flow three times as long
    ends at the same (M, mu, loss)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 2, 2))
    A = (A + A.transpose(0, 2, 1)) / 2
    model = nqf.NQFModel(nqf.DenseData(A, rng.standard_normal(5)), g=0.3 * rng.standard_normal((5, 2)))
    W0 = 1e-3 * rng.standard_normal((2, 3))
    asy = nqf.asymptote(model, W0=W0)
    assert asy.method == "flow" and asy.mu.shape == (2,)
    sol = nqf.solve_flow(model, W0=W0, t1=3 * asy.t, ts=np.array([3 * asy.t]), dense=False)
    np.testing.assert_allclose(asy.eigenvalues, _desc_eig(sol.M[-1]), rtol=1e-7)  # measured 1.3e-11
    np.testing.assert_allclose(asy.mu, sol.mu[-1], rtol=1e-7)
    np.testing.assert_allclose(asy.loss, sol.loss[-1], rtol=1e-9)
    np.testing.assert_allclose(asy.outputs, np.asarray(model.outputs(jnp.asarray(asy.M), jnp.asarray(asy.mu))))


def test_f0_shifts_the_labels(mlp):
    data, W0 = mlp
    f0 = np.linspace(-0.5, 0.5, data.m)
    shifted = nqf.asymptote(nqf.NQFModel(data, f0=f0), W0=W0)
    plain = nqf.asymptote(nqf.feedforward_data(np.asarray(data.y) - f0, a=data.a, b=data.b), W0=W0)
    np.testing.assert_allclose(shifted.eigenvalues, plain.eigenvalues, rtol=1e-12)
    np.testing.assert_allclose(shifted.loss, plain.loss, rtol=1e-12)
    np.testing.assert_allclose(shifted.outputs, plain.outputs + f0, atol=1e-12)


def test_result_pickles_saves_and_is_a_pytree(orthogonal, tmp_path):
    asy = nqf.asymptote(orthogonal, M0=EPS * np.eye(4))
    back = pickle.loads(pickle.dumps(asy))
    assert type(back) is nqf.Asymptote and back.method == "glv"
    np.testing.assert_array_equal(back.M, asy.M)
    loaded = nqf.load(asy.save(tmp_path / "asy"))
    np.testing.assert_array_equal(loaded.eigenvalues, asy.eigenvalues)
    assert loaded.loss == asy.loss and loaded.t is None
    leaves, tree = jax.tree.flatten(asy)
    assert jax.tree.unflatten(tree, leaves).method == "glv"


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(method="exact"), ValueError, r"`method` must be one of \('auto', 'glv', 'feedforward', 'flow'\)"),
        (dict(method="feedforward"), ValueError, r"method='feedforward' needs FeedForwardData; found DenseData"),
        (dict(method="glv"), ValueError, r"method='glv' needs commuting data .*found DenseData"),
        (dict(mu0=np.zeros(3), d=2), ValueError, r"`mu0` and `d` belong to a model with g or B"),
        (dict(tol=0.0), ValueError, r"`tol` must be a finite number > 0; found 0.0"),
        (dict(max_segments=1), ValueError, r"`max_segments` must be an integer >= 2; found 1"),
        (dict(solve_options={"t1": 5.0}), ValueError, r"`solve_options` must not set \['t1'\]"),
    ],
)
def test_bad_arguments(slow_second_mode, kwargs, exc, match):
    _, dense = slow_second_mode
    with pytest.raises(exc, match=match):
        nqf.asymptote(dense, M0=EPS * np.eye(3), **kwargs)


def test_bad_initial_conditions_and_tracing(slow_second_mode, mlp):
    _, dense = slow_second_mode
    with pytest.raises(ValueError, match=r"Give exactly one initial condition"):
        nqf.asymptote(dense)
    with pytest.raises(ValueError, match=r"`M0` must have shape \(3, 3\)"):
        nqf.asymptote(dense, M0=np.eye(2))
    with pytest.raises(ValueError, match=r"`z0` \(mode strengths\) needs commuting data"):
        nqf.asymptote(dense, z0=np.ones(3))
    data, _ = mlp
    with pytest.raises(ValueError, match=r"\[Z1; Z2\] block of the initial condition is 0"):
        nqf.asymptote(data, W0=np.zeros((7, 2)))
    with pytest.raises(TypeError, match=r"runs on concrete input .* except for DiagonalData"):
        jax.jit(lambda d: nqf.asymptote(d, M0=1e-6 * jnp.eye(7)).loss)(data)
