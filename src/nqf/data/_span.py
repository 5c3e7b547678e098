"""The span V of the structure components over the training set and its dimension k_V
(Theorem 3): the subspace that compression (`nqf.compress`) and the multi-layer spans
(`nqf.multilayer`) keep."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import numpy as np
from jaxtyping import ArrayLike, Float

from .._core._checks import check_positive
from ._model import NQFModel, as_model
from ._operators import AbstractData, CommutingData, DenseData, FeedForwardData, LowRankData

__all__ = ["DEFAULT_RTOL", "Span", "data_span", "k_V", "span_from_rows", "helmert_rows"]

DEFAULT_RTOL = 1e-10
"""Default relative rank tolerance of `data_span` (see there)."""


_CHUNK_ROWS = 4096


@dataclasses.dataclass(frozen=True)
class Span:
    """The span V of the structure components over the training set (Theorem 3).

    **Attributes:**

    - `V`: orthonormal basis, shape (p, k).
    - `k`: k_V = dim V.
    - `singular_values`: all p singular values of the stacked normalized spanning rows (see
      `data_span`), descending; the rank decision is sigma_i > `rtol` * sigma_1.
    - `rtol`: the relative rank tolerance used.
    - `gap`: sigma_k / sigma_{k+1} (inf if sigma_{k+1} = 0 or k = p), how clear the decision was.
    """

    V: Float[np.ndarray, "p k"]
    k: int
    singular_values: Float[np.ndarray, " p"]
    rtol: float

    @property
    def gap(self) -> float:
        s = self.singular_values
        if self.k == 0 or self.k >= s.size or s[self.k] == 0.0:
            return math.inf
        return float(s[self.k - 1] / s[self.k])


def _eig_rows(ev, E):
    """Rows spanning Col(A) for A = E diag(ev) E^T (stacked over samples): E[:, j]^T scaled by
    |ev_j| / max_j |ev_j|, so the rows' Gram matrix is (A / |A|_2)^2. Samples with A = 0 give
    zero rows. Shapes: ev (n, r), E (n, p, r) -> (n r, p)."""
    a = np.abs(ev)
    scale = a.max(axis=1, keepdims=True)
    w = np.divide(a, scale, out=np.zeros_like(a), where=scale > 0)
    return np.swapaxes(E * w[:, None, :], 1, 2).reshape(-1, E.shape[1])


def _rows_dense(A: np.ndarray):
    """Spanning rows of Col(A_mu), A (m, p, p) dense symmetric, by per-sample eigh (chunked)."""
    m, p, _ = A.shape
    step = max(1, _CHUNK_ROWS // max(p, 1))
    for i in range(0, m, step):
        ev, E = np.linalg.eigh(A[i : i + step])
        yield _eig_rows(ev, E)


def _rows_lowrank(U: np.ndarray, s: np.ndarray):
    """Spanning rows of Col(U_mu diag(s_mu) U_mu^T) without forming p x p: QR of U_mu (p, r),
    eigh of the r x r core R diag(s) R^T. Cost O(m p r^2)."""
    m, p, r = U.shape
    step = max(1, _CHUNK_ROWS // max(r, 1))
    for i in range(0, m, step):
        Q, R = np.linalg.qr(U[i : i + step])  # (b, p, r'), (b, r', r)
        core = np.einsum("bij,bj,bkj->bik", R, s[i : i + step], R)
        ev, E = np.linalg.eigh(0.5 * (core + np.swapaxes(core, 1, 2)))
        yield _eig_rows(ev, Q @ E)


def _rows_commuting(Lam: np.ndarray, P):
    """Spanning rows of commuting data A_mu = P diag(Lambda_mu) P^T: column k of P weighted by
    sqrt(sum_mu (lambda_{mu k} / max_j |lambda_{mu j}|)^2) (the same Gram matrix as stacking the
    per-sample rows). Cost O(m p + p^2)."""
    a = np.abs(Lam)
    scale = a.max(axis=1, keepdims=True)
    w = np.divide(a, scale, out=np.zeros_like(a), where=scale > 0)
    sig = np.sqrt(np.sum(w**2, axis=0))
    basis = np.eye(Lam.shape[1]) if P is None else np.asarray(P)
    yield (basis * sig).T


def _rows_vectors(G: np.ndarray, rtol: float):
    """Rows g_mu / |g_mu| for the vectors with |g_mu| > rtol * max |g|."""
    n = np.linalg.norm(G, axis=1)
    keep = n > rtol * n.max(initial=0.0)
    yield G[keep] / n[keep, None]


def _spanning_rows(model: NQFModel, rtol: float):
    data = model.data
    if type(data) is FeedForwardData:
        data = data.as_lowrank()
    if type(data) is LowRankData:
        yield from _rows_lowrank(np.asarray(data.U), np.asarray(data.s))
    elif type(data) is CommutingData:
        yield from _rows_commuting(np.asarray(data.Lambda), data.P)
    elif type(data) is DenseData:
        yield from _rows_dense(np.asarray(data.A))
    else:  # unknown representation: materializes (m, p, p)
        yield from _rows_dense(np.asarray(data.dense()))
    if model.g is not None:
        yield from _rows_vectors(np.asarray(model.g), rtol)
    if model.B is not None:
        yield from _rows_dense(np.asarray(model.B))


def _tsqr(blocks, p: int) -> np.ndarray:
    """R factor (<= p x p) of the vertically stacked row blocks, accumulated chunk by chunk
    (memory O((chunk + p) p)); its singular values and right singular vectors are those of the
    whole stack."""
    R = np.zeros((0, p))
    buf, n = [], 0
    for b in blocks:
        buf.append(np.asarray(b, dtype=float))
        n += buf[-1].shape[0]
        if n >= _CHUNK_ROWS:
            R = np.linalg.qr(np.vstack([R, *buf]), mode="r")
            buf, n = [], 0
    if buf:
        R = np.linalg.qr(np.vstack([R, *buf]), mode="r")
    return R


def span_from_rows(blocks: Iterable[Float[ArrayLike, "n p"]], p: int, rtol: float = DEFAULT_RTOL) -> Span:
    """`Span` of row blocks (each (n_i, p)): SVD of their TSQR factor, rank by sigma_i >
    rtol * sigma_1. Used by `data_span` and by the per-layer spans of `nqf.multilayer`."""
    rtol = check_positive(rtol, "rtol")
    R = _tsqr(blocks, p)
    if R.shape[0] == 0:
        return Span(np.zeros((p, 0)), 0, np.zeros(p), rtol)
    _, sv, Vt = np.linalg.svd(R)
    sv = np.concatenate([sv, np.zeros(p - sv.size)])
    k = int(np.sum(sv > rtol * sv[0])) if sv[0] > 0 else 0
    return Span(Vt[:k].T.copy(), k, sv, rtol)


def data_span(model: NQFModel | AbstractData, *, rtol: float = DEFAULT_RTOL) -> Span:
    """V = span of {g(x)}, Col A(x), Col B(x) over the training inputs of `model` (Theorem 3).

    **Method and rank tolerance.** Each sample contributes rows spanning its pieces, normalized
    per sample: g(x)/|g(x)| (only if |g(x)| > rtol max_x |g(x)|), and for A(x) (likewise B(x))
    its eigenvectors scaled by |eigenvalue| / |A(x)|_2, so the rows' Gram matrix is
    (A(x)/|A(x)|_2)^2 and every sample counts with weight 1 whatever its scale. The rows of all
    samples are stacked and reduced by a chunked QR (TSQR) to a p x p factor whose SVD gives
    singular values sigma_1 >= ... >= sigma_p; k_V = #{i : sigma_i > rtol * sigma_1} and V holds
    the corresponding right singular vectors. A direction that carries less than ~rtol of every
    sample's largest eigenvalue is treated as rounding; the compressed model then differs from
    the original by about that relative amount. `Span.gap` shows how clear the cut was.

    **Cost** (never an (m, p, p) tensor for structured data): `LowRankData` O(m p r^2) (QR of
    each U_mu (p, r) and eigh of an r x r core); `CommutingData` O(m p + p^2); `DenseData` and B
    O(m p^3) (per-sample eigh of the given dense matrices); plus O(N p^2) for the N stacked rows.

    **Arguments:** `model`: an `nqf.NQFModel` or a data set (plain model); `rtol` in (0, 1).

    **Returns:** a `Span` (V (p, k_V), k_V, singular values, rtol).

    **Raises:** `TypeError` for a bad model; `ValueError` for rtol not in (0, 1).
    """
    model = as_model(model)
    rtol = check_positive(rtol, "rtol")
    if rtol >= 1.0:
        raise ValueError(f"`rtol` must lie in (0, 1); found {rtol!r}.")
    return span_from_rows(_spanning_rows(model, rtol), model.p, rtol)


def k_V(model: NQFModel | AbstractData, *, rtol: float = DEFAULT_RTOL) -> int:
    """k_V = dim span U_x ({g(x)} u Col A(x) u Col B(x)) (Theorem 3); see `data_span`."""
    return data_span(model, rtol=rtol).k


def helmert_rows(k: int, n: int) -> Float[np.ndarray, "k n"]:
    """Z of shape (k, n), k <= n - 1: orthonormal rows orthogonal to the all-ones vector (the
    first k rows of the Helmert matrix without its constant row): Z Z^T = I_k, Z 1 = 0."""
    if k > n - 1:
        raise ValueError(f"need k <= n - 1 for rows orthogonal to 1; found k={k}, n={n}.")
    Z = np.zeros((k, n))
    for j in range(1, k + 1):
        Z[j - 1, :j] = 1.0
        Z[j - 1, j] = -float(j)
        Z[j - 1] /= math.sqrt(j * (j + 1.0))
    return Z
