"""`nqf.datasets.deep_linear_data`: Theorem 16's deep-linear-network instance (App. B.7).

Everything here is checked against a computation made in the test from the network itself
(numpy), not against the constructor's own formulas."""

import numpy as np
import pytest

from nqf.data.datasets import deep_linear_data
from nqf.validate._deeplinear import saxe_eq12

S_VALUES = (2.0, 1.0, 0.5)


@pytest.fixture(scope="module")
def dl():
    return deep_linear_data(singular_values=S_VALUES, n_out=4, n_in=5, n_samples=6, seed=5)


def _dense_A(x, n_out):
    """A_mu = 1/2 [[0, e_o x^T], [x e_o^T, 0]] built by hand, mu = n n_out + o."""
    N, n_in = x.shape
    p = n_out + n_in
    A = np.zeros((N * n_out, p, p))
    for n in range(N):
        for o in range(n_out):
            S = np.outer(np.eye(n_out)[o], x[n])
            A[n * n_out + o, :n_out, n_out:] = S / 2
            A[n * n_out + o, n_out:, :n_out] = S.T / 2
    return A


def test_white_inputs_and_correlation(dl):
    N = dl.x.shape[0]
    np.testing.assert_allclose(dl.x.T @ dl.x / N, np.eye(5), atol=1e-13)
    np.testing.assert_allclose(dl.y.T @ dl.x / N, dl.S, atol=1e-13)
    np.testing.assert_allclose(np.linalg.svd(dl.S, compute_uv=False)[:3], S_VALUES, rtol=1e-13)
    np.testing.assert_allclose((dl.U * dl.s) @ dl.V.T, dl.S, atol=1e-13)
    assert dl.tau == 2.0 and dl.projectors.shape == (3, 9, 9)


def test_nqf_is_the_network(dl, rng):
    """Tr[W W^T A_mu] (the data's outputs) equals the linear network W2 W1 x_n, output o."""
    W = rng.standard_normal((9, 7))
    F = (dl.x @ W[4:]) @ W[:4].T  # (N, n_out)
    out = np.asarray(dl.data.traces(W @ W.T))
    np.testing.assert_allclose(out, F.reshape(-1), rtol=1e-12, atol=1e-12)
    A = _dense_A(dl.x, 4)
    np.testing.assert_allclose(np.einsum("mij,ji->m", A, W @ W.T), F.reshape(-1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(dl.data.y), dl.y.reshape(-1), atol=0)


def test_theorem16_constants(dl):
    """g_a = 2 s_a / n_out, k_a = 1 / n_out and the exact commutation relations, with Y and
    K(Pi_b) formed from the hand-built dense A."""
    A = _dense_A(dl.x, 4)
    m = A.shape[0]
    y = dl.y.reshape(-1)
    Y = 4.0 / m * np.einsum("m,mij->ij", y, A)
    for a, Pa in enumerate(dl.projectors):
        np.testing.assert_allclose(Y @ Pa + Pa @ Y, 2 * (2 * S_VALUES[a] / 4) * Pa, atol=1e-13)
        for b, Pb in enumerate(dl.projectors):
            K = 4.0 / m * np.einsum("m,mij->ij", np.einsum("mij,ji->m", A, Pb), A)
            np.testing.assert_allclose(K @ Pa + Pa @ K, 2 * (1 / 4) * (a == b) * Pa, atol=1e-13)
            np.testing.assert_allclose(Pa @ Pb, (a == b) * Pa, atol=1e-14)


def test_balanced_init(dl):
    W0 = dl.balanced_init([1e-3, 2e-3, 3e-3], d=5, seed=1)
    W2, W1 = W0[:4], W0[4:].T
    np.testing.assert_allclose(W2 @ W1, (dl.U * [1e-3, 2e-3, 3e-3]) @ dl.V.T, atol=1e-17)
    np.testing.assert_allclose(W2.T @ W2, W1 @ W1.T, atol=1e-17)  # balanced
    M0 = W0 @ W0.T
    np.testing.assert_allclose(M0, np.einsum("a,aij->ij", 2 * np.array([1e-3, 2e-3, 3e-3]), dl.projectors), atol=1e-17)


def test_saxe_formula_solves_its_ode():
    """Eq. 12 solves tau u' = 2 u (s - u), u(0) = u0 (finite differences), for both signs of s - u0."""
    s, tau, t = 1.3, 2.0, np.linspace(0.0, 5.0, 11)
    for u0 in (1e-3, 2.0):
        h = 1e-6
        du = (saxe_eq12(s, u0, t + h, tau) - saxe_eq12(s, u0, t - h, tau)) / (2 * h)
        u = saxe_eq12(s, u0, t, tau)
        np.testing.assert_allclose(tau * du, 2 * u * (s - u), rtol=1e-7, atol=1e-12)
        assert saxe_eq12(s, u0, 0.0, tau) == pytest.approx(u0, rel=1e-14)


def test_given_S_and_errors(rng):
    S = rng.standard_normal((3, 4))
    d = deep_linear_data(S, n_samples=7, seed=2)
    np.testing.assert_allclose(d.y.T @ d.x / 7, S, atol=1e-13)
    assert d.projectors.shape == (3, 7, 7) and d.data.m == 21
    with pytest.raises(ValueError, match="exactly one"):
        deep_linear_data()
    with pytest.raises(ValueError, match="exactly one"):
        deep_linear_data(S, singular_values=(1.0,))
    with pytest.raises(ValueError, match="n_samples"):
        deep_linear_data(S, n_samples=3)
    with pytest.raises(ValueError, match="singular_values"):
        deep_linear_data(singular_values=(1.0, -1.0), n_out=2, n_in=2)
    with pytest.raises(ValueError, match="n_in"):
        deep_linear_data(singular_values=(1.0, 2.0, 3.0), n_out=3, n_in=2)
    with pytest.raises(ValueError, match="zero"):
        deep_linear_data(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="d"):
        d.balanced_init(1e-3, d=2)
    with pytest.raises(ValueError, match="u0"):
        d.balanced_init(-1.0)


def test_saxe_mapping_on_the_network(dl):
    """The stated mapping (tau = n_out / 2, u = z / 2): the network's own gradient flow on
    L = (1/(N n_out)) sum_n |W2 W1 x_n - y_n|^2 (hand-written gradient, scipy) gives
    W2 W1(t) = sum_a u_a(t) u_a v_a^T with Eq. 12 at tau = 2; at tau = n_out = 4 it does not."""
    from scipy.integrate import solve_ivp

    N, no = dl.x.shape[0], 4
    W0 = dl.balanced_init(1e-3, d=4, seed=3)

    def rhs(t, w):
        W = w.reshape(9, 4)
        W2, W1 = W[:no], W[no:].T
        R = (dl.x @ W1.T) @ W2.T - dl.y  # (N, n_out)
        G = 2.0 / (N * no) * R.T @ dl.x  # dL/d(W2 W1)
        return -np.concatenate([G @ W1.T, (W2.T @ G).T]).ravel()

    ts = np.linspace(0.0, 12.0, 7)
    sol = solve_ivp(rhs, (0, 12.0), W0.ravel(), "DOP853", t_eval=ts, rtol=1e-12, atol=1e-16)
    Ws = sol.y.T.reshape(-1, 9, 4)
    prod = Ws[:, :no] @ np.swapaxes(Ws[:, no:], 1, 2)
    for tau, ok in ((2.0, True), (4.0, False)):
        u = saxe_eq12(dl.s, 1e-3, ts[:, None], tau)
        ref = np.einsum("na,ia,ja->nij", u, dl.U, dl.V)
        err = np.linalg.norm(prod - ref, axis=(1, 2)).max() / np.linalg.norm(ref, axis=(1, 2)).max()
        assert (err < 1e-8) == ok, (tau, err)
