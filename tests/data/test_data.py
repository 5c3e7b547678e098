"""Each data representation against dense matrices built independently in numpy."""

import numpy as np
import pytest

import nqf
from conftest import random_orthogonal, random_psd


def _dense_commuting(Lam, P):
    return np.stack([P @ np.diag(l) @ P.T for l in Lam])


def _dense_lowrank(U, s):
    m, p, r = U.shape
    A = np.zeros((m, p, p))
    for mu in range(m):
        for j in range(r):
            A[mu] += s[mu, j] * np.outer(U[mu, :, j], U[mu, :, j])
    return A


def _dense_feedforward(C):
    m, k, q = C.shape
    A = np.zeros((m, k + q, k + q))
    A[:, :k, k:] = C / 2
    A[:, k:, :k] = np.swapaxes(C, 1, 2) / 2
    return A


def _cases(rng):
    m, p = 7, 5
    Lam = rng.standard_normal((m, p))
    P = random_orthogonal(p, rng)
    y = rng.standard_normal(m)
    U = rng.standard_normal((m, p, 3))
    s = rng.standard_normal((m, 3))
    C = rng.standard_normal((m, 3, 2))
    a = rng.standard_normal((m, 2, 2))
    b = rng.standard_normal((m, 3, 2))
    Cab = np.einsum("mkr,mqr->mkq", a, b)
    A_dense = rng.standard_normal((m, p, p))
    A_dense = A_dense + np.swapaxes(A_dense, 1, 2)
    return [
        (nqf.DenseData(A_dense, y), A_dense),
        (nqf.CommutingData(Lam, y, P), _dense_commuting(Lam, P)),
        (nqf.CommutingData(Lam, y), _dense_commuting(Lam, np.eye(p))),
        (nqf.LowRankData(U, s, y), _dense_lowrank(U, s)),
        (nqf.feedforward_data(y, C), _dense_feedforward(C)),
        (nqf.feedforward_data(y, np.swapaxes(C, 1, 2)), _dense_feedforward(np.swapaxes(C, 1, 2))),
        (nqf.feedforward_data(y, a=a, b=b), _dense_feedforward(Cab)),
    ]


@pytest.mark.parametrize("case", range(7))
def test_operations_match_dense(rng, case):
    data, A = _cases(rng)[case]
    y = np.asarray(data.y)
    m, p, _ = A.shape
    assert (data.m, data.p) == (m, p)
    X = random_psd(p, rng)
    F = rng.standard_normal((p, 4))
    c = rng.standard_normal(m)
    tol = dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(data.dense(), A, **tol)
    tr = np.einsum("mij,ji->m", A, X)
    np.testing.assert_allclose(data.traces(X), tr, **tol)
    np.testing.assert_allclose(data.traces_factor(F), np.einsum("mij,ji->m", A, F @ F.T), **tol)
    S = np.einsum("m,mij->ij", c, A)
    np.testing.assert_allclose(data.weighted_sum(c), S, **tol)
    np.testing.assert_allclose(data.apply(c, F), S @ F, **tol)
    np.testing.assert_allclose(data.Y(), 4 / m * np.einsum("m,mij->ij", y, A), **tol)
    np.testing.assert_allclose(data.K(X), 4 / m * np.einsum("m,mij->ij", tr, A), **tol)
    np.testing.assert_allclose(data.H(X), data.K(X) - data.Y(), **tol)
    np.testing.assert_allclose(data.loss(X), np.mean((tr - y) ** 2), **tol)


def test_commuting_from_dense_recovers_basis(rng):
    Lam = rng.standard_normal((6, 4))
    P = random_orthogonal(4, rng)
    A = _dense_commuting(Lam, P)
    data = nqf.CommutingData.from_dense(A, np.ones(6))
    np.testing.assert_allclose(data.dense(), A, atol=1e-12)
    X = random_psd(4, rng)
    np.testing.assert_allclose(data.traces(X), np.einsum("mij,ji->m", A, X), atol=1e-12)


def test_mlp_structure_matrix_is_rank_two(rng):
    """Two-layer MLP data (THEORY sec. 2): A = phi'(0)/2 [[0, x], [x^T, 0]] has rank 2."""
    x = rng.standard_normal((5, 6))
    data = nqf.feedforward_data(np.zeros(5), a=x[:, :, None], b=np.ones((5, 1, 1)))
    assert isinstance(data, nqf.FeedForwardData) and data.p == 7
    assert data.as_lowrank().U.shape == (5, 7, 2)
    A = np.asarray(data.dense())
    assert all(np.linalg.matrix_rank(a) == 2 for a in A)
    np.testing.assert_allclose(A[:, :6, 6], x / 2, atol=1e-15)


def test_data_is_float64(rng):
    data = nqf.CommutingData(np.float32(rng.standard_normal((3, 2))), [1, 2, 3])
    assert data.Lambda.dtype == np.float64 and data.y.dtype == np.float64


@pytest.mark.parametrize("small_C", [True, False])
@pytest.mark.parametrize(
    "m, k, q, r, front, back, n", [(7, 4, 3, 2, 0, 0, 3), (5, 6, 1, 1, 2, 1, 4), (9, 3, 5, 2, 1, 0, 40)]
)
def test_feedforward_data_against_dense(rng, monkeypatch, small_C, m, k, q, r, front, back, n):
    """`FeedForwardData` (factors a, b; both contraction orders) against A_mu built entry by entry
    as 1/2 [[0, a b^T], [b a^T, 0]] with zero rows front and back (THEORY Eq. E3)."""
    a, b, y = rng.standard_normal((m, k, r)), rng.standard_normal((m, q, r)), rng.standard_normal(m)
    data = nqf.FeedForwardData(a, b, y, front=front, back=back)
    monkeypatch.setattr(nqf.FeedForwardData, "_small_C", lambda self, n: small_C)
    p = front + k + q + back
    C = np.einsum("mkr,mqr->mkq", a, b)
    A = np.zeros((m, p, p))
    i, j = front, front + k
    A[:, i:j, j : j + q] = C / 2
    A[:, j : j + q, i:j] = np.swapaxes(C, 1, 2) / 2
    F = rng.standard_normal((p, n))
    c = rng.standard_normal(m)
    tol = 1e-13 * np.abs(A).max() * np.abs(F).max() ** 2 * m
    assert data.p == p and data.m == m
    np.testing.assert_allclose(np.asarray(data.dense()), A, atol=1e-15)
    np.testing.assert_allclose(np.asarray(data.traces_factor(F)), np.einsum("mij,ir,jr->m", A, F, F), atol=tol)
    np.testing.assert_allclose(np.asarray(data.traces(F @ F.T)), np.einsum("mij,ij->m", A, F @ F.T), atol=tol)
    np.testing.assert_allclose(np.asarray(data.apply(c, F)), np.einsum("m,mij,jn->in", c, A, F), atol=tol)
    np.testing.assert_allclose(np.asarray(data.weighted_sum(c)), np.einsum("m,mij->ij", c, A), atol=tol)
    np.testing.assert_allclose(np.asarray(data.as_lowrank().dense()), A, atol=1e-14)
    idx = np.array([2, 0, 2])
    np.testing.assert_allclose(np.asarray(data.subset(idx).dense()), A[idx], atol=1e-15)
    np.testing.assert_allclose(np.asarray(data.scaled(-2.5).dense()), -2.5 * A, atol=1e-14)


def test_feedforward_data_errors():
    with pytest.raises(ValueError, match="must agree in m and r"):
        nqf.FeedForwardData(np.ones((3, 2, 1)), np.ones((3, 1, 2)), np.ones(3))
    with pytest.raises(ValueError, match="`front` must be an integer >= 0"):
        nqf.FeedForwardData(np.ones((3, 2, 1)), np.ones((3, 1, 1)), np.ones(3), front=-1)
    with pytest.raises(ValueError, match="`a` must be finite"):
        nqf.FeedForwardData(np.full((3, 2, 1), np.nan), np.ones((3, 1, 1)), np.ones(3))
