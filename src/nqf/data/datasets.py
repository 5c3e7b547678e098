"""Generated NQF data sets with known structure (the paper's settings and theorem test beds).

Nothing is downloaded: every data set here is generated from a seed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np
from jaxtyping import ArrayLike, Float, Int

from .._core._checks import as_array, check_int, check_positive, is_traced, real_scalar
from ._operators import CommutingData, DenseData, DiagonalData, FeedForwardData

__all__ = [
    "orthogonal_features_data",
    "fig3_data",
    "powerlaw_data",
    "isotropic_data",
    "sampled_isotropic_data",
    "projector_data",
]


def _random_orthogonal(n: int, rng) -> np.ndarray:
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    return Q * np.sign(np.diag(R))


def _on_host(fn):
    """Mark a generator as a host (numpy) construction: inside `jax.jit` / `jax.vmap` / `jax.grad`
    its arguments are tracers, which it refuses with a clear `TypeError` (not a raw
    TracerArrayConversionError from deep inside). Build the data set outside and pass it in:
    data sets are pytrees."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if any(is_traced(leaf) for leaf in jax.tree_util.tree_leaves((args, kwargs))):
            raise TypeError(
                f"nqf.datasets.{fn.__name__} builds its data set on the host with numpy and cannot run "
                "inside jax.jit / vmap / grad (found traced arguments). Build it outside the "
                "transformation and pass the data set in: data sets are JAX pytrees."
            )
        return fn(*args, **kwargs)

    return wrapper


@_on_host
def orthogonal_features_data(
    r: Sequence[float] | Float[ArrayLike, " p"],
    C: float | Float[ArrayLike, " p"] = 1.0,
    *,
    m: int | None = None,
    seed: int = 0,
    mix_samples: bool = True,
    rotate_basis: bool = False,
) -> CommutingData:
    """Commuting data with orthogonal features (Theorem 6) and prescribed r_k and C_kk.

    Lambda = Q diag(sqrt(C m / 8)) with Q (m, p) orthonormal columns (random if `mix_samples`,
    else the first p unit vectors, i.e. one nonzero per A_k), so that
    sum_mu lambda_{mu,k} lambda_{mu,j} = 0 (k != j) and C_kk = (8/m) sum_mu lambda_{mu,k}^2 = C_k;
    labels y = Q (m r / (8 sqrt(C m / 8))) give r_k = (8/m) sum_mu lambda_{mu,k} y_mu exactly.
    With `rotate_basis` the shared eigenbasis P is a random orthogonal matrix (else identity).

    **Arguments:** `r` (p,) growth rates (any sign), `C` (p,) or scalar > 0, `m >= p` samples
    (default p), `seed`.

    **Raises:** `ValueError` if C <= 0, `C` is an array of another length than `r`, or m < p;
    `TypeError` for an `m` that is not an integer.
    """
    r = np.asarray(as_array(r, "r", ndim=1))
    p = int(r.shape[0])
    C = np.asarray(as_array(C, "C"))
    if C.shape not in ((), (p,)):
        raise ValueError(f"`C` must be a scalar or have shape ({p},) like `r`; found shape {C.shape}.")
    C = np.broadcast_to(C, (p,))
    if np.any(C <= 0):
        raise ValueError(f"`C` must be > 0; found min {C.min()}.")
    m = p if m is None else check_int(m, "m")
    if m < p:
        raise ValueError(f"orthogonal features need m >= p; found m={m}, p={p}.")
    rng = np.random.default_rng(seed)
    Q = _random_orthogonal(m, rng)[:, :p] if mix_samples else np.eye(m, p)
    d = np.sqrt(C * m / 8.0)
    Lam = Q * d
    y = Q @ (m * r / (8.0 * d))
    P = _random_orthogonal(p, rng) if rotate_basis else None
    return CommutingData(Lam, y, P)


FIG3_R = (1.0, 0.5, 0.25, 0.125, 0.0625)


@_on_host
def fig3_data(seed: int = 0) -> CommutingData:
    """The paper's Fig. 3 left/middle setting (THEORY sec. 11): m = p = 5, diagonal A_mu whose
    diagonal is column mu of a random orthogonal matrix, C_kk = 1, r = (1, 1/2, 1/4, 1/8, 1/16)."""
    return orthogonal_features_data(FIG3_R, 1.0, seed=seed)


@_on_host
def powerlaw_data(p: int = 1000, *, a1: float = 2.0, a2: float = 0.8) -> DiagonalData:
    """The paper's Fig. 3 right setting (THEORY sec. 11): m = p, A_k = lam_k e_k e_k^T with
    r_k = k^-a2 and V_k = r_k^2 / (8 C_kk) = k^-a1, so C_kk = k^(a1 - 2 a2) / 8.

    Returned as `DiagonalData` (O(p) memory: p = 10^6 and beyond): lam_k = sqrt(C_kk p / 8),
    y_k = p r_k / (8 lam_k), so that r_k = (8/p) lam_k y_k and C_kk = (8/p) lam_k^2 (Eq. E16).

    **Raises:** `ValueError` if p < 1 or the exponents overflow float64 (lam_k or y_k not finite
    and > 0); `TypeError` for `a1` / `a2` that are not real numbers.
    """
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise ValueError(f"`p` must be an integer >= 1; found {p!r}.")
    a1, a2 = real_scalar(a1, "a1"), real_scalar(a2, "a2")
    k = np.arange(1, p + 1, dtype=float)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        r = k**-a2
        C = r**2 / (8.0 * k**-a1)
        lam = np.sqrt(C * p / 8.0)
        y = p * r / (8.0 * lam)
    if not (np.all(np.isfinite(lam)) and np.all(np.isfinite(y)) and np.all(lam > 0)):
        raise ValueError(
            f"`a1` = {a1!r} and `a2` = {a2!r} must be finite and give finite lam_k, y_k > 0 for k = 1..{p} "
            "(k^(a1 - 2 a2) and k^-a2 overflow or vanish in float64)."
        )
    return DiagonalData(lam, y)


@_on_host
def isotropic_data(
    p: int,
    c: float = 1.0,
    *,
    y: Float[ArrayLike, " m"] | None = None,
    g: Float[ArrayLike, " p"] | None = None,
    m: int | None = None,
    seed: int = 0,
) -> DenseData:
    """Exactly isotropic data (Theorem 7): K(X) = 4 c X for every symmetric X.

    With B_1..B_n an orthonormal basis of Sym(p) (n = p (p + 1) / 2, `nqf.theory.sym_basis`) and
    Q (m, n) a random matrix with orthonormal columns (a random orthogonal matrix when m = n),
    A_mu = sqrt(c m) sum_a Q[mu, a] B_a, so (4/m) sum_mu <A_mu, X> A_mu = 4 c sum_a <B_a, X> B_a
    = 4 c X. The construction is verified numerically (relative residual <= 1e-12).

    **Arguments:**

    - `p`: neuron dimension; `c` > 0 the isotropy constant; `m` >= p (p + 1) / 2 samples
      (default p (p + 1) / 2).
    - `y` (m,): labels; or `g` (p,): prescribed eigenvalues of Y = (4/m) sum_mu y_mu A_mu (in a
      random eigenbasis), the growth rates of Theorem 7; default: standard normal labels.
    - `seed`: seed of every random choice.

    **Returns:** a `DenseData` with A of shape (m, p, p).

    **Raises:** `ValueError` for p < 1, c <= 0, m < p (p + 1) / 2, both `y` and `g`, wrong shapes;
    `TypeError` for a `p` or `m` that is not an integer.
    """
    from ._isotropic import isotropy, sym_basis

    p = check_int(p, "p")
    c = float(as_array(c, "c", ndim=0))
    if not c > 0:
        raise ValueError(f"`c` must be > 0; found {c}.")
    n = p * (p + 1) // 2
    m = n if m is None else check_int(m, "m")
    if m < n:
        raise ValueError(f"isotropic data needs m >= p(p+1)/2 = {n}; found m = {m}.")
    if y is not None and g is not None:
        raise ValueError("Give at most one of `y` (labels) and `g` (eigenvalues of Y).")
    rng = np.random.default_rng(seed)
    B = sym_basis(p)
    Q = _random_orthogonal(m, rng)[:, :n]
    scale = np.sqrt(c * m)
    A = scale * np.einsum("ma,aij->mij", Q, B)
    A = 0.5 * (A + np.swapaxes(A, 1, 2))
    if g is not None:
        g = np.asarray(as_array(g, "g", ndim=1, shape=(p,)))
        R = _random_orthogonal(p, rng)
        Y = (R * g) @ R.T
        coords = np.einsum("aij,ij->a", B, Y)
        y = np.asarray(Q @ coords * (m / (4.0 * scale)))
    elif y is None:
        y = rng.standard_normal(m)
    data = DenseData(A, y)
    _, res, _ = isotropy(data)
    if res > 1e-12:
        raise RuntimeError(f"isotropic_data: construction not isotropic (residual {res:.3g}).")
    return data


@_on_host
def sampled_isotropic_data(
    p: int,
    m: int,
    c: float = 0.25,
    *,
    M_star: Float[ArrayLike, "p p"] | None = None,
    repeat: int = 1,
    seed: int = 0,
) -> DenseData:
    """Approximately isotropic data: m samples of an isotropic distribution (Theorem 7 holds for
    the population, only approximately for the sample).

    A_mu = (G_mu + G_mu^T) / sqrt 2 with G_mu (p, p) i.i.d. N(0, c / 2), so that
    E[A_ij A_kl] = (c / 2)(d_ik d_jl + d_il d_jk), Theorem 7's condition in expectation
    (K(X) = 4 c X for the population); the sample's K deviates from 4 c I on Sym(p) by a relative
    residual of order sqrt(p^2 / m) (measure it with `nqf.theory.isotropy`; isotropy needs
    m >= p (p + 1) / 2 even then). Labels from a teacher: y_mu = Tr[A_mu M*], so
    Y = K(M*) ~ 4 c M*.

    **Arguments:**

    - `p`: neuron dimension (>= 1); `m`: number of distinct samples (>= 1); `c` > 0 the population
      isotropy constant.
    - `M_star` (p, p) symmetric: the teacher; default R diag(1, 1/2, ..., 2^-(p-1)) R^T with R a
      random orthogonal matrix (drawn from `seed` after the samples).
    - `repeat`: every sample is repeated this many times (m * repeat matrices in all): K, Y and
      the flow are those of the m distinct samples, so data sets of different m but equal
      m * repeat share their shapes (one compiled flow).
    - `seed`: seed of every random choice.

    **Returns:** a `DenseData` with A of shape (m * repeat, p, p).

    **Raises:** `TypeError` for a p, m or repeat that is not an int; `ValueError` for p, m or
    repeat < 1, c <= 0, or an `M_star` of the wrong shape
    or not symmetric.
    """
    for name, v in (("p", p), ("m", m), ("repeat", repeat)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise TypeError(f"`{name}` must be an int; found {v!r} ({type(v).__name__}).")
    p, m, repeat = int(p), int(m), int(repeat)
    if p < 1 or m < 1 or repeat < 1:
        raise ValueError(f"`p`, `m` and `repeat` must be >= 1; found p={p}, m={m}, repeat={repeat}.")
    c = float(as_array(c, "c", ndim=0))
    if not c > 0:
        raise ValueError(f"`c` must be > 0; found {c}.")
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((m, p, p)) * np.sqrt(c / 2.0)
    A = (G + np.swapaxes(G, 1, 2)) / np.sqrt(2.0)
    if M_star is None:
        R = _random_orthogonal(p, rng)
        M_star = (R * 2.0 ** -np.arange(p)) @ R.T
    Ms = np.asarray(as_array(M_star, "M_star", shape=(p, p)))
    if not np.allclose(Ms, Ms.T, rtol=1e-12, atol=1e-14 * max(np.abs(Ms).max(), 1e-300)):
        raise ValueError("`M_star` must be symmetric.")
    A = np.tile(A, (repeat, 1, 1))
    return DenseData(A, np.einsum("mij,ij->m", A, 0.5 * (Ms + Ms.T)))


@_on_host
def projector_data(
    block_sizes: Int[ArrayLike, " nb"],
    g: Float[ArrayLike, " nb"],
    k: float | Float[ArrayLike, " nb"] = 1.0,
    *,
    m: int | None = None,
    seed: int = 0,
    rotate_basis: bool = True,
) -> tuple[CommutingData, np.ndarray]:
    """Commuting data satisfying Theorem 16 (but not Theorem 6) with projectors Pi_a.

    The p = sum(block_sizes) modes are split into consecutive blocks; every mode of block a has the
    same feature column lambda_{., k} = f_a, and the f_a are mutually orthogonal:
    f_a = sqrt(k_a m / (4 n_a)) q_a with orthonormal q_a (random), n_a the block size. With
    Pi_a = P_a P_a^T (P_a the block's columns of a random orthogonal P), Y Pi_a + Pi_a Y =
    2 g_a Pi_a and K(Pi_b) Pi_a + Pi_a K(Pi_b) = 2 k_a delta_ab Pi_a hold exactly, with labels
    y = sum_a (g_a m / 4) q_a / |f_a|. A block of size >= 2 repeats a feature, so Theorem 6's
    orthogonal-features assumption fails.

    **Arguments:** `block_sizes` (n_b,) positive ints; `g` (n_b,) growth rates (any sign); `k`
    (n_b,) or scalar > 0 self-competition; `m` >= n_b samples (default n_b); `seed`;
    `rotate_basis` (else P = I).

    **Returns:** `(data, projectors)` with `projectors` of shape (n_b, p, p).

    **Raises:** `ValueError` for non-positive block sizes or k, m < n_b, shape mismatches.
    """
    sizes = np.asarray(block_sizes)
    if sizes.ndim != 1 or sizes.size == 0 or not np.issubdtype(sizes.dtype, np.integer) or np.any(sizes < 1):
        raise ValueError(f"`block_sizes` must be a non-empty 1-d list of positive ints; found {block_sizes!r}.")
    n_b = sizes.size
    g = np.asarray(as_array(g, "g", ndim=1, shape=(n_b,)))
    k = np.broadcast_to(np.asarray(as_array(k, "k")), (n_b,))
    if np.any(k <= 0):
        raise ValueError(f"`k` must be > 0; found min {k.min()}.")
    m = n_b if m is None else int(m)
    if m < n_b:
        raise ValueError(f"projector_data needs m >= number of blocks = {n_b}; found m = {m}.")
    rng = np.random.default_rng(seed)
    q = _random_orthogonal(m, rng)[:, :n_b]
    fn = np.sqrt(k * m / (4.0 * sizes))
    block = np.repeat(np.arange(n_b), sizes)
    Lam = (q * fn)[:, block]
    y = q @ (g * m / 4.0 / fn)
    p = int(sizes.sum())
    P = _random_orthogonal(p, rng) if rotate_basis else np.eye(p)
    Pi = np.stack([P[:, block == a] @ P[:, block == a].T for a in range(n_b)])
    return CommutingData(Lam, y, P if rotate_basis else None), Pi


# --------------------------------------------------------------------------------------------
# Low-rank test beds for compression (Theorem 3): MLP, phase retrieval, matrix completion.
# Each can confine its structure matrices to a subspace, so that k_V < p.
# --------------------------------------------------------------------------------------------
__all__ += ["mlp_data", "phase_retrieval_data", "matrix_completion_data"]


def _subspace_vectors(rng, n: int, dim: int, rank: int | None) -> np.ndarray:
    """n Gaussian vectors in R^dim (rows), confined to a random rank-`rank` subspace if given."""
    if rank is None or rank >= dim:
        return rng.standard_normal((n, dim))
    if rank < 1:
        raise ValueError(f"`rank` must be >= 1; found {rank}.")
    Q = _random_orthogonal(dim, rng)[:, :rank]
    return rng.standard_normal((n, rank)) @ Q.T


@_on_host
def mlp_data(m: int, k: int, *, rank: int | None = None, width: int = 4, seed: int = 0):
    """Two-layer MLP data f = sum_i v_i tanh(u_i^T x) (Prop. 1): A(x) = 1/2 [[0, x], [x^T, 0]]
    (phi'(0) = 1), neurons w = [u (k); v (1)], p = k + 1, as `FeedForwardData` (a = x, b = 1: rank-2 A).

    Inputs x ~ N(0, I_k) (confined to a random `rank`-dimensional subspace if `rank` < k, so
    that k_V = rank + 1); labels from a teacher tanh MLP of `width` units with N(0, 1/k) first
    and N(0, 1/width) second-layer weights, standardized to unit variance.

    **Raises:** `ValueError` for m, k < 1 or rank < 1; `TypeError` for an `m` or `k` that is not an integer.
    """
    from ._operators import feedforward_data

    m, k = check_int(m, "m"), check_int(k, "k")
    rng = np.random.default_rng(seed)
    X = _subspace_vectors(rng, m, k, rank)
    U = rng.standard_normal((width, k)) / np.sqrt(k)
    v = rng.standard_normal(width) / np.sqrt(width)
    y = np.tanh(X @ U.T) @ v
    y = (y - y.mean()) / max(y.std(), 1e-300)
    return feedforward_data(y, a=X[:, :, None], b=np.ones((m, 1, 1)))


@_on_host
def phase_retrieval_data(m: int, p: int, *, rank: int | None = None, teacher_rank: int = 1, seed: int = 0):
    """Phase retrieval y = a^T M* a with A(a) = a a^T (THEORY sec. 2) as `LowRankData`.

    Sensing vectors a ~ N(0, I_p / p) (in a random `rank`-dimensional subspace if given, so
    k_V = rank); teacher M* = W* W*^T with W* (p, teacher_rank) standard normal / sqrt(p).

    **Raises:** `ValueError` for m, p < 1 or rank < 1; `TypeError` for an `m` or `p` that is not an integer.
    """
    from ._operators import LowRankData

    m, p = check_int(m, "m"), check_int(p, "p")
    rng = np.random.default_rng(seed)
    a = _subspace_vectors(rng, m, p, rank) / np.sqrt(p)
    Ws = rng.standard_normal((p, teacher_rank)) / np.sqrt(p)
    y = np.sum((a @ Ws) ** 2, axis=1)
    return LowRankData(a[:, :, None], np.ones((m, 1)), y)


@_on_host
def matrix_completion_data(
    n_rows: int,
    n_cols: int,
    n_observed: int,
    *,
    rank: int = 1,
    active_rows: int | None = None,
    active_cols: int | None = None,
    seed: int = 0,
):
    """Matrix completion R_ij = u_i^T v_j (THEORY sec. 2): A = 1/2 [[0, e_i e_j^T],
    [e_j e_i^T, 0]], neurons w = [u (n_rows); v (n_cols)], p = n_rows + n_cols, as
    `FeedForwardData` (rank 2 per sample).

    `n_observed` distinct entries (i, j) are drawn uniformly from the first `active_rows` rows
    and `active_cols` columns (default: all); the other rows/columns are never observed (cold
    start), so k_V = (rows observed) + (columns observed). Labels: the entries of a rank-`rank`
    teacher U* V*^T with standard normal factors / rank^(1/4).

    **Raises:** `ValueError` if `n_observed` exceeds active_rows * active_cols or sizes are < 1.
    """
    from ._operators import feedforward_data

    n_rows, n_cols = int(n_rows), int(n_cols)
    ar = n_rows if active_rows is None else int(active_rows)
    ac = n_cols if active_cols is None else int(active_cols)
    if min(n_rows, n_cols, ar, ac, int(n_observed)) < 1 or ar > n_rows or ac > n_cols:
        raise ValueError(
            f"need 1 <= active_rows <= n_rows, 1 <= active_cols <= n_cols, n_observed >= 1; found "
            f"n_rows={n_rows}, n_cols={n_cols}, active_rows={ar}, active_cols={ac}, "
            f"n_observed={n_observed}."
        )
    if n_observed > ar * ac:
        raise ValueError(
            f"`n_observed` must be <= active_rows * active_cols = {ar * ac} (distinct entries); found {n_observed}."
        )
    rng = np.random.default_rng(seed)
    flat = rng.choice(ar * ac, size=int(n_observed), replace=False)
    i, j = np.divmod(flat, ac)
    Us = rng.standard_normal((n_rows, rank)) / rank**0.25
    Vs = rng.standard_normal((n_cols, rank)) / rank**0.25
    y = np.sum(Us[i] * Vs[j], axis=1)
    a = np.eye(n_rows)[i][:, :, None]
    b = np.eye(n_cols)[j][:, :, None]
    return feedforward_data(y, a=a, b=b)


# --------------------------------------------------------------------------------------------
# Theorems 4, 5 and 10 (sample-wise); the Fourier MLP of Fig. 5 (`nqf.samplewise`, fig4, fig5)
# --------------------------------------------------------------------------------------------
__all__ += [
    "proportional_data",
    "orthogonal_samples_data",
    "FIG4_Y",
    "FIG4_BLOCK",
    "fig4_data",
    "samplewise_powerlaw_data",
    "fourier_mlp_data",
]


@_on_host
def proportional_data(
    lam: Float[ArrayLike, " p"],
    c: Float[ArrayLike, " m"],
    y: Float[ArrayLike, " m"],
    *,
    rotate_basis: bool = True,
    seed: int = 0,
) -> CommutingData:
    """Proportional samples (Theorem 4): A_mu = c_mu A, A = P diag(lam) P^T.

    **Arguments:** `lam` (p,) eigenvalues of A; `c` (m,) proportionality constants; `y` (m,)
    labels; `rotate_basis`: P a random orthogonal matrix (else the identity); `seed`.

    **Returns:** a `CommutingData` with Lambda = outer(c, lam) (rank 1).
    """
    lam = np.asarray(as_array(lam, "lam", ndim=1))
    c = np.asarray(as_array(c, "c", ndim=1))
    P = _random_orthogonal(lam.shape[0], np.random.default_rng(seed)) if rotate_basis else None
    return CommutingData(np.outer(c, lam), y, P)


@_on_host
def orthogonal_samples_data(
    blocks: Float[ArrayLike, "m K"], y: Float[ArrayLike, " m"], *, rotate_basis: bool = False, seed: int = 0
) -> CommutingData:
    """Orthogonal samples (Theorem 5): A_mu A_nu = 0 for mu != nu.

    Sample mu owns the modes mu K .. mu K + K - 1 (p = m K): A_mu = P diag(lambda_mu) P^T with
    lambda_mu zero outside its block and equal to `blocks[mu]` on it.

    **Arguments:** `blocks` (m, K) the eigenvalues of each sample on its own block; `y` (m,);
    `rotate_basis`: P a random orthogonal matrix (else the identity: diagonal A_mu); `seed`.

    **Raises:** `ValueError` for bad shapes or non-finite values.
    """
    blocks = np.asarray(as_array(blocks, "blocks", ndim=2))
    m, K = blocks.shape
    p = m * K
    Lam = np.zeros((m, p))
    for mu in range(m):
        Lam[mu, mu * K : (mu + 1) * K] = blocks[mu]
    P = _random_orthogonal(p, np.random.default_rng(seed)) if rotate_basis else None
    return CommutingData(Lam, y, P)


FIG4_BLOCK = (1.0, 1.5, 2.0)
"""The three nonzero eigenvalues of every A_mu in the paper's Fig. 4 (Appendix C)."""

FIG4_Y = (1.0, 0.5, 0.25, 0.125)
"""Labels chosen for Fig. 4 (the paper does not give them): y_mu = 2^-mu, so that
zeta_mu = (8/m) 2 y_mu = (4, 2, 1, 1/2) are distinct and the plateaus are equally spaced in
log time, and the staircase levels (1/m) sum_{nu > mu} y_nu^2 drop by factors ~4."""


@_on_host
def fig4_data(y: Sequence[float] | Float[ArrayLike, " m"] = FIG4_Y) -> CommutingData:
    """The paper's Fig. 4 setting (THEORY sec. 11): m = 4, K = 3, p = 12, diagonal A_mu with
    nonzeros (1, 1.5, 2) on the block [mu K, mu K + K - 1]; labels `y` (default `FIG4_Y`)."""
    y = np.asarray(as_array(y, "y", ndim=1))
    return orthogonal_samples_data(np.tile(FIG4_BLOCK, (y.shape[0], 1)), y)


@_on_host
def samplewise_powerlaw_data(
    m: int,
    g1: float,
    g2: float,
    *,
    ratios: Sequence[float] | Float[ArrayLike, " K"] = (0.5, 0.75, 1.0),
    c_zeta: float = 1.0,
) -> CommutingData:
    """Orthogonal samples with power-law growth rates and labels (Theorem 11, Eq. E23).

    y_mu = mu^-g1 and zeta_mu = (8/m) lambda*_mu y_mu = c_zeta mu^-g2 (mu = 1..m), so
    lambda*_mu = m c_zeta mu^-g2 / (8 y_mu); sample mu owns K = len(ratios) diagonal modes with
    eigenvalues lambda*_mu * ratios (the largest ratio must be 1; Fig. 4's 1 : 1.5 : 2 is
    (0.5, 0.75, 1)), so every sample has subdominant eigenvalues and the data are genuinely of
    Theorem 5's kind (features within a block are parallel, so Theorem 6 does not apply).

    **Raises:** `ValueError` for m < 1, g1 <= 1/2, g2 <= 0, c_zeta <= 0, ratios not in (0, 1]
    with maximum 1.
    """
    m = int(m)
    ratios = np.asarray(as_array(ratios, "ratios", ndim=1))
    if m < 1 or not g1 > 0.5 or not g2 > 0 or not c_zeta > 0:
        raise ValueError(f"Need m >= 1, g1 > 1/2, g2 > 0, c_zeta > 0; found m={m}, g1={g1}, g2={g2}, c_zeta={c_zeta}.")
    if np.any(ratios <= 0) or ratios.max() != 1.0:
        raise ValueError(f"`ratios` must lie in (0, 1] with maximum 1; found {ratios}.")
    mu = np.arange(1, m + 1, dtype=float)
    y = mu**-g1
    lam_star = m * c_zeta * mu**-g2 / (8.0 * y)
    return orthogonal_samples_data(lam_star[:, None] * ratios[None, :], y)


@_on_host
def fourier_mlp_data(P: int = 64, M: int = 256, *, beta: float = 1.5, theta: float = 0.0) -> CommutingData:
    """The NQF of the paper's Fourier MLP (Fig. 5, THEORY sec. 11).

    f(x) = P^-1/2 sum_k W_k tanh(s_k a_k psi_k(x)), psi_k(x) = sqrt(2) cos(2 pi k x) on the grid
    x in {0, 1/M, ..., (M-1)/M}, s_k = k^-theta; target y = sum_k b_k psi_k, b_k = k^-beta.
    Its NQF (tanh'(0) = 1) is f = Tr[w w^T A(x)] with one neuron (d = 1) w = [a_1..a_P, W_1..W_P]
    (p = 2P) and A(x) block diagonal over units: A_k(x) = s_k/(2 sqrt P) [[0, psi_k], [psi_k, 0]] on
    (a_k, W_k). In the eigenbasis P_basis (column k: (e_{a_k} + e_{W_k})/sqrt 2, column P + k:
    (e_{a_k} - e_{W_k})/sqrt 2) the eigenvalues are +-lambda_{x,k}, lambda_{x,k} = s_k psi_k(x) /
    (2 sqrt P). Under the mean-MSE flow r_k = 4 s_k b_k / sqrt P, C_kk = 2 s_k^2 / P and
    V_k = r_k^2 / (8 C_kk) = b_k^2 (so a1 = 2 beta, a2 = theta + beta).

    **Returns:** `CommutingData` with Lambda (M, 2P), labels y (M,), basis P_basis (2P, 2P).

    **Raises:** `ValueError` unless 1 <= P < M/2 (the Fourier modes are then orthogonal on the grid).
    """
    P, M = int(P), int(M)
    if not (1 <= P and 2 * P < M):
        raise ValueError(f"Need 1 <= P < M/2 for orthogonal Fourier modes on the grid; found P={P}, M={M}.")
    k = np.arange(1, P + 1, dtype=float)
    x = np.arange(M) / M
    psi = np.sqrt(2.0) * np.cos(2.0 * np.pi * np.outer(x, k))  # (M, P)
    lam = psi * k ** -float(theta) / (2.0 * np.sqrt(P))
    y = psi @ k ** -float(beta)
    Q = np.zeros((2 * P, 2 * P))
    idx = np.arange(P)
    h = np.sqrt(0.5)
    Q[idx, idx] = h
    Q[P + idx, idx] = h
    Q[idx, P + idx] = h
    Q[P + idx, P + idx] = -h
    return CommutingData(np.concatenate([lam, -lam], axis=1), y, Q)


# --------------------------------------------------------------------------------------------
# The spiked He2 model (issue 18): sample-size power laws from one NQF (`nqf.spectral`).
# --------------------------------------------------------------------------------------------
__all__ += ["SpikedTeacher", "spiked_he2_data", "he2_lift"]


_MC_SAMPLES = 400_000  # Gaussian draws for a nonlinear readout's effective spikes (SpikedTeacher)
_STEIN_BOUND = 6.0  # Stein vs direct projection, in Monte Carlo standard errors, before `spikes` refuses


@_on_host
def he2_lift(X: Float[ArrayLike, "n d"]) -> Float[np.ndarray, "n D"]:
    """The He2 lift of Gaussian inputs: phi(x) = [(x_a^2 - 1) / sqrt(2) for a = 1..d,
    x_a x_b for a < b], D = d (d + 1) / 2 features with E[phi] = 0 and E[phi phi^T] = I_D for
    x ~ N(0, I_d) (orthonormal degree-2 Hermite features; not Gaussian). Used by
    `spiked_he2_data(q=2)`: the spiked model on phi(x), whose thresholds grow as D ~ d^2 / 2.

    **Arguments:** `X` inputs, shape (n, d).

    **Returns:** phi(X), shape (n, d (d + 1) / 2) (float64; the diagonal features first, then
    the pairs a < b in row-major order).
    """
    X = np.asarray(as_array(X, "X", ndim=2), dtype=float)
    iu = np.triu_indices(X.shape[1], k=1)
    return np.concatenate([(X**2 - 1.0) / np.sqrt(2.0), X[:, iu[0]] * X[:, iu[1]]], axis=1)


def _readout(readout):
    """(name, g) for the readout argument of `spiked_he2_data`: None (identity), "tanh", or a
    JAX-traceable scalar function g (its derivatives enter the effective spikes)."""
    import jax.numpy as jnp

    if readout is None:
        return None, None
    if isinstance(readout, str):
        if readout != "tanh":
            raise ValueError(f"`readout` must be None, 'tanh' or a callable g(h); found {readout!r}.")
        return "tanh", jnp.tanh
    if not callable(readout):
        raise TypeError(f"`readout` must be None, 'tanh' or a callable g(h); found {type(readout).__name__}.")
    try:
        out = jax.eval_shape(jax.vmap(jax.grad(jax.grad(readout))), jax.ShapeDtypeStruct((3,), jnp.float64))
    except Exception as e:  # noqa: BLE001 - any failure to trace is the user's function
        raise TypeError(
            "`readout` must be a JAX-traceable scalar function g(h) (jax.numpy, not numpy: its first two "
            f"derivatives enter the effective spikes); tracing g''(h) failed with {type(e).__name__}: {e}"
        ) from None
    if out.shape != (3,):
        raise ValueError(f"`readout` must map a scalar to a scalar; g''(h) of 3 values has shape {out.shape}.")
    return getattr(readout, "__name__", "callable"), readout


@functools.lru_cache(maxsize=16)
def _readout_derivatives(g):
    """h -> (g(h), g'(h), g''(h)) elementwise, compiled once per readout function."""
    return jax.jit(lambda h: (g(h), jax.vmap(jax.grad(g))(h), jax.vmap(jax.grad(jax.grad(g)))(h)))


class SpikedTeacher:
    """The teacher of the spiked He2 model and its population quantities (nqf's normalisation:
    Y = (4/m) sum_mu y_mu A_mu, A(x) = phi phi^T - I, THEORY Eq. E9):

        y = g(h) + sigma xi,   h = sum_i s_i lambda_i (<a_i, phi(x)>^2 - 1),   x ~ N(0, I_d),

    with phi(x) = x (q = 1) or the He2 lift `he2_lift(x)` (q = 2, p = d (d + 1) / 2 features),
    signs s_i = +1 or Rademacher, and the readout g the identity or nonlinear (tanh).

    Linear readout, q = 1 (exact, Wick's theorem): the teacher is an NQF, y = Tr[M* A(x)] + sigma
    xi with M* = sum_i s_i lambda_i a_i a_i^T; E[Y] = 8 M* (`EY`), the population K(X) = 8 X (the
    population flow is Theorem 7's isotropic flow with c = 2, `population_flow`, THEORY E17), the
    population loss is 2 |M - M*|_F^2 + sigma^2 (`population_loss`), E[y^2] = s^2 =
    2 sum_i lambda_i^2 + sigma^2 (`s2`).

    Nonlinear readout (q = 1): by Stein's lemma E[y (x x^T - I)] = E[nabla^2 g(h)] is still
    diagonal on the a_i (h is even in each <a_i, x>), so E[Y] = 8 sum_i lambda_eff,i a_i a_i^T with

        lambda_eff,i = s_i lambda_i E[g'(h)] + 2 lambda_i^2 E[g''(h) u_i^2],   u_i = <a_i, x>,

    (`spikes`), and s^2 = E[g(h)^2] + sigma^2, rho_i = E[y^2 u_i^2] / E[y^2]
    (`spike_variance_ratio`): Gaussian expectations over u ~ N(0, I_K), evaluated by Monte Carlo
    with `_MC_SAMPLES` draws from a fixed seed (relative error ~ 1e-3; `mc_stderr`). For q = 2 the
    same numbers are the Gaussian-equivalent prediction (phi(x) is not Gaussian; E[Y] is then not
    exactly 8 M*, which `EY`, `population_flow` and `population_loss` refuse).

    **Attributes:** `a` (p, K) orthonormal directions (columns); `lam` (K,) spike strengths
    lambda_i > 0; `signs` (K,) s_i = +-1; `sigma` label-noise standard deviation; `gamma`, `Z` the
    power law lambda_i = Z i^-gamma; `q` (1 or 2); `readout` the readout's name (None: identity).
    """

    def __init__(
        self,
        a: Float[ArrayLike, "p K"],
        lam: Float[ArrayLike, " K"],
        sigma: float,
        gamma: float,
        Z: float,
        *,
        signs: Float[ArrayLike, " K"] | None = None,
        readout=None,
        q: int = 1,
        d: int | None = None,
    ):
        self.a = np.asarray(as_array(a, "a", ndim=2), dtype=float)
        p, K = self.a.shape
        self.lam = np.asarray(as_array(lam, "lam", ndim=1, shape=(K,)), dtype=float)
        if np.any(self.lam <= 0):
            raise ValueError(f"`lam` (the spike strengths) must be > 0; found min {self.lam.min():.3g}.")
        self.signs = (
            np.ones_like(self.lam) if signs is None else np.asarray(as_array(signs, "signs", shape=(K,)), float)
        )
        if not np.all(np.abs(self.signs) == 1.0):
            raise ValueError("`signs` must be +1 or -1 for every direction.")
        if not np.allclose(self.a.T @ self.a, np.eye(K), atol=1e-8):
            raise ValueError(f"`a` ({p}, {K}) must have orthonormal columns (the directions a_i).")
        self.sigma = check_positive(sigma, "sigma", allow_zero=True)
        self.gamma, self.Z = check_positive(gamma, "gamma", allow_zero=True), check_positive(Z, "Z")
        self.readout, self._g = _readout(readout)
        if isinstance(q, bool) or q not in (1, 2) or not isinstance(q, (int, np.integer)):
            raise ValueError(f"`q` (the lift degree) must be the integer 1 or 2; found {q!r}.")
        self.q = int(q)
        self._d = p if d is None else int(d)
        if (self.q == 1 and self._d != p) or (self.q == 2 and self._d * (self._d + 1) // 2 != p):
            raise ValueError(
                f"`a` has {p} rows; q = {self.q} with d = {self._d} needs p = d (q = 1) or d (d + 1) / 2 (q = 2)."
            )
        self._mc: dict | None = None

    def __getstate__(self):  # a named readout is stored by name (jax functions do not pickle)
        state = dict(self.__dict__)
        if self.readout == "tanh":
            state["_g"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.readout == "tanh":
            self._g = _readout("tanh")[1]

    @property
    def d(self) -> int:
        """Input dimension d (x ~ N(0, I_d))."""
        return self._d

    @property
    def p(self) -> int:
        """Feature dimension p of the NQF's data (d for q = 1, d (d + 1) / 2 for q = 2)."""
        return self.a.shape[0]

    @property
    def K(self) -> int:
        """Number K of teacher directions."""
        return self.a.shape[1]

    @property
    def linear(self) -> bool:
        """Whether the readout is the identity (then the teacher is an NQF and `EY` etc. are exact)."""
        return self.readout is None

    def _exact(self, what: str) -> None:
        if not self.linear or self.q != 1:
            raise ValueError(
                f"SpikedTeacher.{what} is exact only for the linear readout with q = 1 (Wick's theorem); this "
                f"teacher has readout={self.readout!r}, q={self.q}. Use `spikes`, `s2` and "
                "`spike_variance_ratio` (the effective spectral parameters) instead."
            )

    def lift(self, X: Float[ArrayLike, "n d"]) -> Float[np.ndarray, "n p"]:
        """The features phi(X) (n, p) the NQF sees: X itself (q = 1) or `he2_lift(X)` (q = 2)."""
        X = np.asarray(as_array(X, "X", ndim=2, shape=(None, self.d)), dtype=float)
        return X if self.q == 1 else he2_lift(X)

    def labels(self, X: Float[ArrayLike, "n d"], rng: np.random.Generator | None = None) -> Float[np.ndarray, " n"]:
        """Labels y (n,) of inputs X (n, d) (noise drawn from `rng` when sigma > 0)."""
        y = self._labels_from_features(self.lift(X))
        if self.sigma > 0:
            rng = np.random.default_rng() if rng is None else rng
            y = y + self.sigma * rng.standard_normal(y.shape[0])
        return y

    def _labels_from_features(self, F) -> np.ndarray:
        h = ((F @ self.a) ** 2 - 1.0) @ (self.signs * self.lam)
        return h if self.linear else np.asarray(self._g(h), dtype=float)  # pyright: ignore[reportOptionalCall]

    def _moments(self) -> dict:
        """Monte Carlo Gaussian moments of a nonlinear readout (cached; module docstring)."""
        if self._mc is None:
            import jax.numpy as jnp

            derivs = _readout_derivatives(self._g)
            rng = np.random.default_rng(20260)
            sl = self.signs * self.lam
            chunk, n, var = 50_000, 0, None
            tot: dict = dict.fromkeys(("g1", "g2u", "proj", "y2", "y2u"), 0.0)
            for _ in range(_MC_SAMPLES // chunk):  # streamed, matrix-vector products: memory O(chunk K)
                u2 = rng.standard_normal((chunk, self.K)) ** 2
                gh, dg, d2g = (np.asarray(v) for v in derivs(jnp.asarray(u2 @ sl - sl.sum())))
                y2 = gh**2 + self.sigma**2
                if var is None:  # variance of (Stein - projection) per draw, from the first chunk
                    diff = dg[:, None] * sl + 2.0 * self.lam**2 * (d2g[:, None] * u2) - gh[:, None] * (u2 - 1.0) / 2
                    var = diff.var(axis=0)
                tot["g1"] = tot["g1"] + dg.sum()
                tot["g2u"] = tot["g2u"] + d2g @ u2
                tot["proj"] = tot["proj"] + (gh @ u2 - gh.sum()) / 2.0
                tot["y2"] = tot["y2"] + float(y2.sum())
                tot["y2u"] = tot["y2u"] + y2 @ u2
                n += chunk
            s2 = tot["y2"] / n
            if not s2 > 0:
                raise ValueError(
                    f"The labels of readout={self.readout!r} with sigma = 0 are identically zero (E[y^2] = 0)."
                )
            self._mc = {
                "spikes": sl * tot["g1"] / n + 2.0 * self.lam**2 * np.asarray(tot["g2u"]) / n,
                "spikes_projection": np.asarray(tot["proj"]) / n,
                "stderr": np.sqrt(np.asarray(var) / n),
                "s2": float(s2),
                "rho": np.asarray(tot["y2u"]) / n / s2,
            }
        return self._mc

    @property
    def spikes(self) -> Float[np.ndarray, " K"]:
        """Effective signed spikes lambda_eff,i (K,): E[Y] = 8 sum_i lambda_eff,i a_i a_i^T for q = 1
        (linear readout: s_i lambda_i exactly; nonlinear: Stein's lemma by Monte Carlo, class
        docstring). For q = 2 this is only the Gaussian-equivalent value, not E[Y]'s: the lifted
        features are not Gaussian (measured 1.1-2x larger at d <= 32 by ``nqf reproduce sample-grid``).

        **Raises:** `ValueError` for a readout that is not twice differentiable (Stein's lemma and the
        direct projection disagree by more than 6 Monte Carlo standard errors)."""
        if self.linear:
            return self.signs * self.lam
        m = self._moments()
        z = float(np.max(np.abs(m["spikes"] - m["spikes_projection"]) / np.maximum(m["stderr"], 1e-300)))
        if z > _STEIN_BOUND:
            raise ValueError(
                f"`readout` {self.readout!r} is not twice differentiable (a kink or jump, e.g. relu, abs, sign): "
                f"Stein's lemma, which the autodiff g'' evaluates, disagrees with the direct projection "
                f"E[y (u_i^2 - 1)] / 2 by {z:.0f} Monte Carlo standard errors (bound {_STEIN_BOUND:g}). Use "
                "`spikes_projection` (valid for any g, noisier for weak spikes) or a smooth readout."
            )
        return m["spikes"]

    @property
    def spikes_projection(self) -> Float[np.ndarray, " K"] | None:
        """The direct-projection estimate E[y (u_i^2 - 1)] / 2 of `spikes` from the same Monte Carlo
        draws (an independent estimator of the same number; None for the linear readout)."""
        return None if self.linear else self._moments()["spikes_projection"]

    @property
    def mc_stderr(self) -> Float[np.ndarray, " K"] | None:
        """Monte Carlo standard error of the difference between the Stein and the direct-projection
        (E[y (u_i^2 - 1)] / 2) estimates of `spikes` (None for the linear readout: exact)."""
        return None if self.linear else self._moments()["stderr"]

    @property
    def s2(self) -> float:
        """E[y^2] for Gaussian u_i = <a_i, phi>: 2 sum_i lambda_i^2 + sigma^2 (linear readout),
        E[g(h)^2] + sigma^2 otherwise (Monte Carlo). Exact for q = 1; for q = 2 the Gaussian-equivalent
        value (the lifted labels' true E[y^2] is larger: 11.8 vs 2.25 at d = 8, linear readout)."""
        if self.linear:
            return float(2.0 * np.sum(self.lam**2) + self.sigma**2)
        return self._moments()["s2"]

    @property
    def spike_variance_ratio(self) -> Float[np.ndarray, " K"]:
        """rho_i = E[y^2 <a_i, phi>^2] / E[y^2] (K,): 1 + 8 lambda_i^2 / s^2 for the linear readout
        (`nqf.spectral.spike_variance_ratio`), Monte Carlo otherwise."""
        if self.linear:
            return 1.0 + 8.0 * self.lam**2 / self.s2
        return self._moments()["rho"]

    def M_star(self) -> np.ndarray:
        """M* = sum_i s_i lambda_i a_i a_i^T, shape (p, p): y = Tr[M* A(x)] + sigma xi for the linear
        readout (any q). With signs M* is indefinite: M = W W^T (PSD) reaches only its positive part,
        the flow from small initialization grows only the directions with s_i = +1.
        **Raises:** `ValueError` for a nonlinear readout (no M* exists)."""
        if not self.linear:
            raise ValueError(f"A teacher with readout={self.readout!r} is not an NQF: it has no M*.")
        return (self.a * (self.signs * self.lam)) @ self.a.T

    def EY(self) -> np.ndarray:
        """E[Y] = 8 M*, shape (d, d) (linear readout, q = 1)."""
        self._exact("EY")
        return 8.0 * self.M_star()

    def population_loss(self, M: Float[ArrayLike, "*batch d d"]) -> Float[np.ndarray, "*batch"]:
        """E[(Tr[M A(x)] - y)^2] = 2 |M - M*|_F^2 + sigma^2 for M of shape (..., d, d) (linear readout, q = 1)."""
        self._exact("population_loss")
        M = np.asarray(as_array(M, "M"))
        if M.shape[-2:] != (self.d, self.d):
            raise ValueError(f"`M` must have shape (..., {self.d}, {self.d}); found {M.shape}.")
        return 2.0 * np.sum((M - self.M_star()) ** 2, axis=(-2, -1)) + self.sigma**2

    def population_flow(self, ts: Float[ArrayLike, " nt"], M0: Float[ArrayLike, "d d"]) -> Float[np.ndarray, "nt d d"]:
        """The population (n -> infinity) MSE flow M' = Y M + M Y - 16 M^2, Y = 8 M*, from
        M0 (d, d) symmetric PSD at gradient-flow times `ts` (n_t,) >= 0: Theorem 7's exact
        solution with c = 2 (THEORY E17, `nqf.theorem7`'s graded evaluation; linear readout, q = 1).

        **Returns:** M(t), shape (n_t, d, d).
        """
        from ._isotropic import _initial_M, _riccati_isotropic, _times

        self._exact("population_flow")
        ts = _times(ts)
        M0 = _initial_M(M0, self.d)
        g, V = np.linalg.eigh(self.EY())
        Mb = _riccati_isotropic(g, 2.0, V.T @ M0 @ V, ts)
        return np.einsum("ij,njk,lk->nil", V, Mb, V)


@_on_host
def spiked_he2_data(
    n: int,
    d: int,
    *,
    gamma: float,
    K: int | None = None,
    Z: float | None = None,
    sigma: float = 0.0,
    seed: int = 0,
    signs: bool = False,
    readout=None,
    q: int = 1,
):
    """Gaussian inputs and a spiked quadratic teacher (arXiv 2605.14567's hierarchical model in
    nqf's form; `nqf.spectral`): x ~ N(0, I_d), y = g(sum_{i=1..K} s_i lambda_i
    (<a_i, phi(x)>^2 - 1)) + sigma xi, lambda_i = Z i^-gamma, orthonormal a_i (the first K
    columns of a random orthogonal matrix). The NQF data are A(x) = phi phi^T - I (quadratic
    network / phase retrieval on the features phi, centred), returned as `nqf.He2Data` (the
    features (n, p); never an n x p x p tensor). Defaults: phi(x) = x, s_i = 1, g the identity.

    **Arguments:**

    - `n`: number of samples (m = n); `d`: input dimension.
    - `gamma` >= 0: spike decay; `K`: number of directions, 1 <= K <= p (default p // 2);
      `Z` > 0: scale (default: normalised so that sum_i lambda_i^2 = 1, E[h^2] = 2 for q = 1).
    - `sigma` >= 0: label-noise standard deviation; `seed`: an integer >= 0 (or None: fresh
      entropy) for the directions, the inputs and the noise (the directions do not depend on n, so
      data sets of different n with one seed share the teacher, and the first n' rows of the
      inputs of the largest are the n'-sample set's inputs; the labels too when sigma = 0).
    - `signs`: if True, s_i are Rademacher signs (drawn from their own stream of `seed`: the
      directions, inputs and noise are those of signs=False).
    - `readout`: None (identity: the teacher is an NQF), "tanh", or a JAX-traceable scalar
      function g (its effective spikes: `SpikedTeacher.spikes`).
    - `q`: 1 (phi(x) = x, p = d, thresholds n_i ~ d) or 2 (the He2 lift phi = `he2_lift(x)`,
      p = d (d + 1) / 2, thresholds n_i ~ d^2 / 2).

    **Returns:** `(data, teacher)`: `He2Data` (features (n, p), y (n,)) and the `SpikedTeacher`
    with the population quantities.

    **Raises:** `ValueError` for n, d < 1, K outside [1, p], gamma < 0, Z <= 0, sigma < 0, q not
    in {1, 2}, an unknown readout name; `nqf.MemoryBudgetError` when the features and the
    orthogonal draw (8 (2 n p + 2 p^2 + n d) bytes, estimated first) exceed the memory budget; `TypeError` for a non-bool `signs` or a readout that is
    neither None, a string nor callable.
    """
    from ._operators import He2Data

    for name, v in (("n", n), ("d", d)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"`{name}` must be an integer >= 1; found {v!r}.")
    if isinstance(q, bool) or not isinstance(q, (int, np.integer)) or q not in (1, 2):
        raise ValueError(f"`q` (the lift degree) must be the integer 1 or 2; found {q!r}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"`seed` must be an integer >= 0 or None; found {seed!r}.")
    if not isinstance(signs, (bool, np.bool_)):
        raise TypeError(f"`signs` must be a bool (Rademacher signs or all +1); found {type(signs).__name__}.")
    _readout(readout)
    n, d = int(n), int(d)
    p = d if q == 1 else d * (d + 1) // 2
    K = max(p // 2, 1) if K is None else K
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or not 1 <= K <= p:
        raise ValueError(f"`K` (number of teacher directions) must be an integer in [1, p = {p}]; found {K!r}.")
    gamma = check_positive(gamma, "gamma", allow_zero=True)
    sigma = check_positive(sigma, "sigma", allow_zero=True)
    i = np.arange(1, K + 1, dtype=float)
    shape = i**-gamma
    Z = float(1.0 / np.sqrt(np.sum(shape**2))) if Z is None else check_positive(Z, "Z")
    lam = Z * shape
    from .._core.memory import check

    check(
        8.0 * (2 * n * p + 2 * p * p + n * d),
        f"spiked_he2_data(n={n}, d={d}, q={q}): features (n, p) = ({n}, {p}) and a (p, p) orthogonal draw",
        "use a smaller n or d (q = 2 has p = d (d + 1) / 2 features).",
    )
    rng = np.random.default_rng(seed)
    a = _random_orthogonal(p, rng)[:, :K]
    sign_rng = np.random.default_rng(None if seed is None else [seed, 1])
    s = sign_rng.choice([-1.0, 1.0], size=K) if signs else None
    teacher = SpikedTeacher(a, lam, sigma, gamma, Z, signs=s, readout=readout, q=q, d=d)
    X = rng.standard_normal((n, d))
    y = teacher.labels(X, rng)
    return He2Data(teacher.lift(X), y), teacher


# --------------------------------------------------------------------------------------------
# Theorem 16's deep-linear-network instance (App. B.7; Saxe et al. 2014)
# --------------------------------------------------------------------------------------------
__all__ += ["DeepLinearData", "deep_linear_data"]


class DeepLinearData(NamedTuple):
    """A two-layer linear network's NQF (paper App. B.7) with its Theorem 16 projectors.

    The network is F(x) = W2 W1 x (W2 (n_out, d), W1 (d, n_in)); neuron i is
    w_i = [W2[:, i] (n_out); W1[i, :] (n_in)], so W (p, d) = [W2; W1^T], p = n_out + n_in, and
    F_o(x) = Tr[W W^T A_o(x)] exactly with A_o(x) = 1/2 [[0, e_o x^T], [x e_o^T, 0]] (App. B.7
    with S = e_o x^T). Data index mu = n n_out + o (input-major, as `nqf.structure`).

    Fields:

    - `data`: `FeedForwardData` (m = n_samples n_out, p = n_out + n_in), labels y[n, o].
    - `projectors` (r, p, p): Pi_a = 1/2 `[u_a; v_a][u_a; v_a]^T`, one per nonzero singular value.
    - `S` (n_out, n_in): the input-output correlation Sigma_yx = (1/N) sum_n y_n x_n^T (inputs
      white: (1/N) sum_n x_n x_n^T = I exactly); `s` (r,), `U` (n_out, r), `V` (n_in, r): its
      SVD S = U diag(s) V^T (nonzero part, s decreasing).
    - `x` (N, n_in), `y` (N, n_out): the inputs and targets y_n = S x_n.
    - `tau`: Saxe et al.'s time constant in nqf's time, n_out / 2 (see `deep_linear_data`).

    Theorem 16 holds with g_a = 2 s_a / n_out, k_a = 1 / n_out (z_a' = 2 g_a z_a - 2 k_a z_a^2),
    and the mode strength of Saxe et al. is u_a = z_a / 2: W2 W1 = sum_a (z_a / 2) u_a v_a^T for
    M = sum_a z_a Pi_a.
    """

    data: FeedForwardData
    projectors: np.ndarray
    S: np.ndarray
    s: np.ndarray
    U: np.ndarray
    V: np.ndarray
    x: np.ndarray
    y: np.ndarray
    tau: float

    @property
    def n_out(self) -> int:
        return int(self.S.shape[0])

    @property
    def n_in(self) -> int:
        return int(self.S.shape[1])

    def balanced_init(self, u0: float | Float[ArrayLike, " r"], d: int | None = None, *, seed: int = 0) -> np.ndarray:
        """W0 (p, d) of a balanced, aligned start with W2 W1 = sum_a u0_a u_a v_a^T and
        W2^T W2 = W1 W1^T (Saxe et al.'s decoupled initial condition), i.e. M0 = sum_a 2 u0_a Pi_a
        (App. B.7: M(0) = sum_a 2 rho_a(0) Pi_a): W0 = sum_a sqrt(2 u0_a) q_a o_a^T with
        q_a = `[u_a; v_a]` / sqrt 2 and o_a (d,) orthonormal (random, from `seed`).

        **Arguments:** `u0` scalar or (r,) initial mode strengths >= 0; `d` >= r the width
        (default r).

        **Raises:** `ValueError` for u0 < 0 or of the wrong shape, or d < r.
        """
        r = self.s.shape[0]
        u = np.asarray(as_array(u0, "u0"), float)
        if u.ndim == 0:
            u = np.full(r, float(u))
        if u.shape != (r,):
            raise ValueError(f"`u0` must be a scalar or have shape ({r},) (one per mode); found {u.shape}.")
        if np.any(u < 0):
            raise ValueError(f"`u0` (initial mode strengths) must be >= 0; found min {u.min():.3g}.")
        width = r if d is None else int(d)
        if width < r:
            raise ValueError(f"`d` (width) must be >= the number of modes r = {r}; found d = {width}.")
        Q = np.concatenate([self.U, self.V], axis=0) / np.sqrt(2.0)  # (p, r) orthonormal
        O = _random_orthogonal(width, np.random.default_rng(seed))[:r]  # (r, d) orthonormal rows
        return (Q * np.sqrt(2.0 * u)) @ O


@_on_host
def deep_linear_data(
    S: Float[ArrayLike, "n_out n_in"] | None = None,
    *,
    singular_values: Float[ArrayLike, " r"] | Sequence[float] | None = None,
    n_out: int | None = None,
    n_in: int | None = None,
    n_samples: int | None = None,
    seed: int = 0,
) -> DeepLinearData:
    """The NQF of a two-layer linear network F(x) = W2 W1 x on white inputs (paper App. B.7, the
    instance of Theorem 16 that contains Saxe et al. 2014), with its projectors.

    Inputs x_n = sqrt(N) q_n, q_n the rows of a random N x n_in matrix with orthonormal columns,
    so (1/N) sum_n x_n x_n^T = I exactly; targets y_n = S x_n, so the input-output correlation is
    Sigma_yx = (1/N) sum_n y_n x_n^T = S exactly. With S = sum_a s_a u_a v_a^T (SVD, s_a > 0) and
    Pi_a = 1/2 `[u_a; v_a][u_a; v_a]^T` (App. B.7), Y = (2 / n_out) [[0, S], [S^T, 0]] and
    K(Pi_b) = (1 / n_out) [[0, u_b v_b^T], [v_b u_b^T, 0]], so Theorem 16 holds with
    g_a = 2 s_a / n_out and k_a = 1 / n_out.

    **Time and scale (against Saxe et al. 2014, Eq. 12).** nqf's flow is gradient flow in
    t (t = eta * GD steps) on L = (1/m) sum_mu (f_mu - y_mu)^2 = (2 / n_out) L_Saxe with
    L_Saxe = 1/2 (1/N) sum_n |y_n - W2 W1 x_n|^2, whose flow Saxe write as
    tau dW1/dt = W2^T (Sigma_yx - W2 W1 Sigma_xx); so tau = n_out / 2. Saxe's mode strength is
    u_a = z_a / 2 (z_a the eigenvalue of M = W W^T on Pi_a), and Eq. 12,
    u_a(t) = s_a e^{2 s_a t / tau} / (e^{2 s_a t / tau} - 1 + s_a / u_a(0)), is Theorem 16's
    logistic z_a(t) for this data.

    **Arguments:** either `S` (n_out, n_in), or `singular_values` (r,) > 0 with `n_out`,
    `n_in` >= r (then S = U diag(s) V^T with random orthonormal U, V from `seed`); `n_samples`
    N >= n_in (default n_in); `seed` (the inputs, and U, V).

    **Returns:** `DeepLinearData` (data, projectors, S, s, U, V, x, y, tau).

    **Raises:** `ValueError` if both or neither of `S` and `singular_values` are given, on bad
    shapes, non-positive singular values, r > min(n_out, n_in), N < n_in, or S = 0.
    """
    rng = np.random.default_rng(seed)
    if (S is None) == (singular_values is None):
        raise ValueError("Give exactly one of `S` (n_out, n_in) and `singular_values` (with `n_out`, `n_in`).")
    if S is not None:
        S = np.asarray(as_array(S, "S", ndim=2))
        if n_out is not None or n_in is not None:
            raise ValueError("`n_out` and `n_in` are taken from `S`; do not pass them with `S`.")
    else:
        s_in = np.asarray(as_array(singular_values, "singular_values", ndim=1))
        if s_in.size == 0 or np.any(s_in <= 0):
            raise ValueError(f"`singular_values` must be a non-empty list of values > 0; found {s_in.tolist()}.")
        for name, v in (("n_out", n_out), ("n_in", n_in)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < s_in.size:
                raise ValueError(
                    f"`{name}` must be an integer >= the number of singular values {s_in.size}; found {v!r}."
                )
        assert n_out is not None and n_in is not None  # checked above
        U0 = _random_orthogonal(int(n_out), rng)[:, : s_in.size]
        V0 = _random_orthogonal(int(n_in), rng)[:, : s_in.size]
        S = (U0 * s_in) @ V0.T
    no, ni = S.shape
    N = ni if n_samples is None else n_samples
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < ni:
        raise ValueError(f"`n_samples` must be an integer >= n_in = {ni} (white inputs); found {N!r}.")
    N = int(N)
    Uf, sf, Vtf = np.linalg.svd(S, full_matrices=False)
    if sf[0] == 0.0:
        raise ValueError("`S` is zero: the network has nothing to learn (no projector).")
    keep = sf > 1e-12 * sf[0]
    U, s, V = Uf[:, keep], sf[keep], Vtf[keep].T
    x = np.sqrt(N) * _random_orthogonal(N, rng)[:, :ni]
    y = x @ S.T
    a = np.tile(np.eye(no)[:, :, None], (N, 1, 1))  # e_o, data index n * n_out + o
    b = np.repeat(x[:, :, None], no, axis=0)  # x_n
    data = FeedForwardData(a, b, y.reshape(-1))
    q = np.concatenate([U, V], axis=0)  # (p, r), |q_a|^2 = 2
    Pi = 0.5 * np.einsum("ia,ja->aij", q, q)
    return DeepLinearData(data, Pi, S, s, U, V, x, y, no / 2.0)
