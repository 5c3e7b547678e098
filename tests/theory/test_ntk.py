"""NTK of Proposition 8 (Eq. E25) against J J^T of the weight-space model by autodiff."""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from conftest import random_orthogonal

P, K, Q = 6, 4, 2  # neuron dimension p = k + q (feed-forward blocks)
M1, M2 = 5, 4  # inputs x and x'


def sym(X):
    return (X + np.swapaxes(X, -1, -2)) / 2


def make_data(kind, m, rng):
    """(data set, its dense A built independently in numpy)."""
    y = rng.standard_normal(m)
    if kind == "dense":
        A = sym(rng.standard_normal((m, P, P)))
        return nqf.DenseData(A, y), A
    if kind == "commuting":
        Lam, Pm = rng.standard_normal((m, P)), random_orthogonal(P, rng)
        return nqf.CommutingData(Lam, y, Pm), np.einsum("ik,mk,jk->mij", Pm, Lam, Pm)
    if kind == "lowrank":
        U, s = rng.standard_normal((m, P, 2)), rng.standard_normal((m, 2))
        return nqf.LowRankData(U, s, y), np.einsum("mir,mr,mjr->mij", U, s, U)
    C = rng.standard_normal((m, K, Q))  # feed-forward A = 1/2 [[0, C], [C^T, 0]] (Eq. E3)
    A = np.zeros((m, P, P))
    A[:, :K, K:] = C / 2
    A[:, K:, :K] = np.swapaxes(C, 1, 2) / 2
    return nqf.feedforward_data(y, C), A


def make_model(kind, m, with_g, with_B, rng):
    data, A = make_data(kind, m, rng)
    g = rng.standard_normal((m, P)) if with_g else None
    B = sym(rng.standard_normal((m, P, P))) if with_B else None
    f0 = rng.standard_normal(m)
    return nqf.NQFModel(data, g=g, B=B, f0=f0), (A, g, B, f0)


def f_wspace(w, A, g, B, f0):
    """f_x(W) = f0 + g^T W1 + (W1)^T B (W1) + Tr[W^T A W] for all x, W = w.reshape(p, -1)."""
    W = w.reshape(A.shape[1], -1)
    mu = W.sum(axis=1)
    return f0 + g @ mu + jnp.einsum("i,mij,j->m", mu, B, mu) + jnp.einsum("mij,ia,ja->m", A, W, W)


JAC = {"rev": jax.jit(jax.jacrev(f_wspace)), "fwd": jax.jit(jax.jacfwd(f_wspace))}


def wspace_jacobian(dense, W, mode):
    """d f_x / d vec(W) by autodiff, shape (m, p d); an absent g or B enters as zeros."""
    A, g, B, f0 = dense
    g = np.zeros(A.shape[:2]) if g is None else g
    B = np.zeros_like(A) if B is None else B
    return np.asarray(JAC[mode](jnp.asarray(W.ravel()), A, g, B, f0))


def rel_err(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


KINDS = ["dense", "commuting", "lowrank", "feedforward"]
GB = [(False, False), (True, False), (False, True), (True, True)]


@pytest.mark.parametrize(
    "kind, with_g, with_B",
    [(k, *gb) for k in KINDS for gb in (GB[0], GB[3])] + [("dense", *GB[1]), ("dense", *GB[2])],
)
def test_ntk_matches_autodiff(kind, with_g, with_B):
    rng = np.random.default_rng(10 * KINDS.index(kind) + GB.index((with_g, with_B)))
    mx, dx = make_model(kind, M1, with_g, with_B, rng)
    mxp, dxp = make_model(kind, M2, with_g, with_B, rng)
    for d in (1, 3, 50):
        W = rng.standard_normal((P, d)) / np.sqrt(d)
        Mw, mu = W @ W.T, W.sum(axis=1)
        J1 = wspace_jacobian(dx, W, "rev")
        J2 = wspace_jacobian(dxp, W, "fwd")
        theta = np.asarray(nqf.ntk(mx, mxp, M=Mw, mu=mu, d=d))
        assert theta.shape == (M1, M2) and theta.dtype == np.float64
        assert rel_err(theta, J1 @ J2.T) < 1e-12, d
        if with_g and with_B:  # model_xp defaults to model_x
            self_theta = np.asarray(nqf.ntk(mx, M=Mw, mu=mu, d=d))
            assert rel_err(self_theta, J1 @ J1.T) < 1e-12, d
        if not (with_g or with_B):  # a bare data set is the model with g = B = 0
            np.testing.assert_array_equal(nqf.ntk(mx.data, mxp.data, M=Mw, mu=mu, d=d), theta)


def test_ntk_chunked_columns_match(monkeypatch):
    """Columns computed in several chunks (lax.map batches, with a remainder) give the same Theta."""
    rng = np.random.default_rng(3)
    mx, dx = make_model("lowrank", 7, True, True, rng)
    W = rng.standard_normal((P, 3))
    full = np.asarray(nqf.ntk(mx, M=W @ W.T, mu=W.sum(1), d=3))
    monkeypatch.setattr(importlib.import_module("nqf.ntk"), "_CHUNK_ELEMENTS", 3 * 7 * 7)  # chunk 3 of 7
    chunked = np.asarray(nqf.ntk(mx, M=W @ W.T, mu=W.sum(1), d=3))
    np.testing.assert_allclose(chunked, full, rtol=1e-14, atol=1e-14 * np.abs(full).max())
    J = wspace_jacobian(dx, W, "rev")
    assert rel_err(chunked, J @ J.T) < 1e-12


@pytest.fixture(scope="module")
def models():
    rng = np.random.default_rng(0)
    return make_model("dense", M1, True, True, rng)[0], make_model("dense", M2, True, False, rng)[0]


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(M=np.eye(P + 1), mu=np.ones(P), d=3), ValueError, r"`M` must have shape \(6, 6\); found \(7, 7\)"),
        (dict(M=np.eye(P), mu=np.ones(P + 1), d=3), ValueError, r"`mu` must have shape \(6,\); found \(7,\)"),
        (dict(M=np.triu(np.ones((P, P))), mu=np.ones(P), d=3), ValueError, r"`M` must be symmetric"),
        (dict(M=np.eye(P), mu=np.full(P, np.nan), d=3), ValueError, r"`mu` must be finite"),
        (
            dict(M=np.eye(P), mu=np.ones(P), d=0),
            ValueError,
            r"`d` \(the number of neurons\) must be an integer >= 1; found 0",
        ),
        (dict(M=np.eye(P), mu=np.ones(P), d=2.5), ValueError, r"integer >= 1; found 2.5"),
        (dict(M=np.eye(P), mu=np.ones(P), d=True), ValueError, r"integer >= 1; found True"),
    ],
)
def test_ntk_bad_arguments(models, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        nqf.ntk(models[0], models[1], **kwargs)


def test_ntk_bad_models(models):
    other = nqf.DenseData(np.stack([np.eye(P + 1)] * 2), np.ones(2))
    with pytest.raises(ValueError, match=r"same neuron dimension p; found p = 6 and p = 7"):
        nqf.ntk(models[0], other, M=np.eye(P), mu=np.ones(P), d=2)
    with pytest.raises(TypeError, match=r"`model_xp` must be an `NQFModel` or an nqf data set; found ndarray"):
        nqf.ntk(models[0], np.eye(P), M=np.eye(P), mu=np.ones(P), d=2)
    with pytest.raises(TypeError, match=r"`model_x` must be an `NQFModel`"):
        nqf.ntk([1.0], M=np.eye(P), mu=np.ones(P), d=2)
