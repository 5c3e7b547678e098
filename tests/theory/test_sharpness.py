"""nqf.sharpness against the dense W-space Hessian (autodiff, every width regime, plain and
mean-field models, weight decay), under jit and vmap, and the stability edge 2 / S against
W-space gradient descent started at a minimum."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf

RNG = np.random.default_rng(3)
P, M_DATA = 4, 7
A = RNG.standard_normal((M_DATA, P, P))
A = A + A.transpose(0, 2, 1)
Y = RNG.standard_normal(M_DATA)
G = RNG.standard_normal((M_DATA, P))
B = RNG.standard_normal((M_DATA, P, P))
B = B + B.transpose(0, 2, 1)
F0 = RNG.standard_normal(M_DATA)
DATA = nqf.DenseData(A, Y)
MODEL = nqf.NQFModel(DATA, g=G, B=B, f0=F0)


def _dense_top(W, mean_field: bool, gamma: float = 0.0) -> float:
    p, d = W.shape

    def loss(w):
        W_ = w.reshape(p, d)
        mu = W_.sum(axis=1)
        f = jnp.einsum("mij,ij->m", A, W_ @ W_.T)
        if mean_field:
            f = f + G @ mu + jnp.einsum("i,mij,j->m", mu, B, mu) + F0
        return jnp.mean((f - Y) ** 2) + 0.5 * gamma * jnp.sum(W_**2)

    H = jax.jit(jax.hessian(loss))(jnp.asarray(W).reshape(-1))  # one program, not one per primitive
    return float(np.linalg.eigvalsh(np.asarray(H))[-1])


@pytest.mark.parametrize("d", [2, 9])  # d <= p + 1 (the exact representative) and d > p + 1 (reduced)
def test_sharpness_is_the_top_eigenvalue_of_the_w_space_hessian(d):
    W = 0.5 * RNG.standard_normal((P, d))
    s, res = nqf.sharpness(DATA, W=W, return_residual=True)
    assert float(s) == pytest.approx(_dense_top(W, False), rel=1e-10)
    assert float(res) < 1e-8
    # from (M, d) alone: the same value; a plain model's does not need mu
    assert float(nqf.sharpness(DATA, M=W @ W.T, d=d)) == pytest.approx(float(s), rel=1e-10)
    sm = nqf.sharpness(MODEL, W=W, weight_decay=0.3)
    assert float(sm) == pytest.approx(_dense_top(W, True, 0.3), rel=1e-10)
    assert float(nqf.sharpness(MODEL, M=W @ W.T, mu=W.sum(1), d=d, weight_decay=0.3)) == pytest.approx(
        float(sm), rel=1e-10
    )


def test_sharpness_near_zero_is_the_positive_side_of_minus_y():
    """At small W the Hessian is -2 Y (x) I up to O(|W|^2): S is its largest *algebraic*
    eigenvalue (the stable side), not the largest in magnitude (the growing, learning side)."""
    W = 1e-4 * RNG.standard_normal((P, 9))
    Ymat = 4.0 / M_DATA * np.einsum("m,mij->ij", Y, A)
    lam = np.linalg.eigvalsh(Ymat)
    assert float(nqf.sharpness(DATA, W=W)) == pytest.approx(-lam[0], rel=1e-5)


def test_sharpness_under_jit_and_vmap():
    Ws = jnp.asarray(0.5 * RNG.standard_normal((3, P, 9)))
    direct = [float(nqf.sharpness(DATA, W=W)) for W in Ws]
    np.testing.assert_allclose(jax.vmap(lambda W: nqf.sharpness(DATA, W=W))(Ws), direct, rtol=1e-12)
    np.testing.assert_allclose(jax.jit(lambda W: nqf.sharpness(DATA, W=W))(Ws[0]), direct[0], rtol=1e-12)


def test_the_stability_edge_is_where_gradient_descent_leaves_a_minimum():
    """W-space GD (nqf.train_w) started next to a minimum W*: below the edge 2 / S(W*) it stays
    (the loss returns to its minimum), above it the perturbation along the sharp direction
    grows (the loss rises by orders of magnitude)."""
    W0 = 0.3 * RNG.standard_normal((P, 6))
    W_star = nqf.train_w(DATA, W0, lr=2e-3, steps=40_000, save_every=40_000).W[-1]
    S = float(nqf.sharpness(DATA, W=W_star))
    edge = float(nqf.stability_edge(S))
    kick = W_star + 1e-6 * RNG.standard_normal(W_star.shape)
    L_star = float(nqf.train_w(DATA, W_star, lr=1e-9, steps=1).loss[0])
    below = nqf.train_w(DATA, kick, lr=0.9 * edge, steps=400, save_every=400)
    above = nqf.train_w(DATA, kick, lr=1.1 * edge, steps=400, save_every=400)
    assert below.loss[-1] - L_star < 1e-10
    assert above.loss[-1] - L_star > 1e-3


def test_sharpness_refuses_bad_input():
    with pytest.raises(ValueError, match="`W` must have shape"):
        nqf.sharpness(DATA, W=np.zeros((P + 1, 3)))
    with pytest.raises(ValueError, match="Give the point"):
        nqf.sharpness(DATA)
    with pytest.raises(ValueError, match="mean field"):
        nqf.sharpness(MODEL, M=np.eye(P))
    with pytest.raises(ValueError, match="`iterations`"):
        nqf.sharpness(DATA, M=np.eye(P), iterations=0)
    with pytest.raises(ValueError, match="`weight_decay`"):
        nqf.sharpness(DATA, M=np.eye(P), weight_decay=-1.0)
    with pytest.raises(ValueError, match="`d`"):
        nqf.sharpness(DATA, M=np.eye(P), d=0)
    assert np.isinf(nqf.stability_edge(-1.0)) and np.isnan(nqf.stability_edge(np.nan))
    with pytest.raises(TypeError, match="sharpness_value"):
        nqf.stability_edge("a")
    with pytest.raises(ValueError, match="symmetric"):
        nqf.sharpness(DATA, M=np.triu(np.ones((P, P))))
    with pytest.raises(ValueError, match="positive semi-definite"):
        nqf.sharpness(DATA, M=-np.eye(P))
    W = RNG.standard_normal((P, 3))
    with pytest.raises(ValueError, match="rank 3 > d = 2"):
        nqf.sharpness(DATA, M=W @ W.T, d=2)
