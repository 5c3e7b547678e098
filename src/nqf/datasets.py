"""Generated NQF data sets with known structure (the paper's settings and theorem test beds).

Nothing is downloaded: every data set here is generated from a seed.
"""

from __future__ import annotations

import numpy as np

from ._checks import as_array
from .data import CommutingData, DenseData

__all__ = [
    "orthogonal_features_data",
    "fig3_data",
    "powerlaw_data",
    "isotropic_data",
    "projector_data",
]


def _random_orthogonal(n: int, rng) -> np.ndarray:
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    return Q * np.sign(np.diag(R))


def orthogonal_features_data(r, C=1.0, *, m: int | None = None, seed: int = 0,
                             mix_samples: bool = True, rotate_basis: bool = False) -> CommutingData:
    """Commuting data with orthogonal features (Theorem 6) and prescribed r_k and C_kk.

    Lambda = Q diag(sqrt(C m / 8)) with Q (m, p) orthonormal columns (random if `mix_samples`,
    else the first p unit vectors, i.e. one nonzero per A_k), so that
    sum_mu lambda_{mu,k} lambda_{mu,j} = 0 (k != j) and C_kk = (8/m) sum_mu lambda_{mu,k}^2 = C_k;
    labels y = Q (m r / (8 sqrt(C m / 8))) give r_k = (8/m) sum_mu lambda_{mu,k} y_mu exactly.
    With `rotate_basis` the shared eigenbasis P is a random orthogonal matrix (else identity).

    **Arguments:** `r` (p,) growth rates (any sign), `C` (p,) or scalar > 0, `m >= p` samples
    (default p), `seed`.

    **Raises:** `ValueError` if C <= 0 or m < p.
    """
    r = np.asarray(as_array(r, "r", ndim=1))
    p = r.shape[0]
    C = np.broadcast_to(np.asarray(as_array(C, "C")), (p,))
    if np.any(C <= 0):
        raise ValueError(f"`C` must be > 0; found min {C.min()}.")
    m = p if m is None else int(m)
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


def fig3_data(seed: int = 0) -> CommutingData:
    """The paper's Fig. 3 left/middle setting (THEORY sec. 11): m = p = 5, diagonal A_mu whose
    diagonal is column mu of a random orthogonal matrix, C_kk = 1, r = (1, 1/2, 1/4, 1/8, 1/16)."""
    return orthogonal_features_data(FIG3_R, 1.0, seed=seed)


def powerlaw_data(p: int = 1000, *, a1: float = 2.0, a2: float = 0.8) -> CommutingData:
    """The paper's Fig. 3 right setting (THEORY sec. 11): m = p, A_k = A_kk e_k e_k^T with
    r_k = k^-a2 and V_k = r_k^2 / (8 C_kk) = k^-a1, so C_kk = k^(a1 - 2 a2) / 8."""
    k = np.arange(1, p + 1, dtype=float)
    r = k**-a2
    C = r**2 / (8.0 * k**-a1)
    return orthogonal_features_data(r, C, mix_samples=False)


def isotropic_data(p: int, c: float = 1.0, *, y=None, g=None, m: int | None = None,
                   seed: int = 0) -> DenseData:
    """Exactly isotropic data (Theorem 7): K(X) = 4 c X for every symmetric X.

    With B_1..B_n an orthonormal basis of Sym(p) (n = p (p + 1) / 2, `nqf.oracles.sym_basis`) and
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

    **Raises:** `ValueError` for p < 1, c <= 0, m < p (p + 1) / 2, both `y` and `g`, wrong shapes.
    """
    from .oracles import isotropy, sym_basis

    p = int(p)
    if p < 1:
        raise ValueError(f"`p` must be >= 1; found {p}.")
    c = float(as_array(c, "c", ndim=0))
    if not c > 0:
        raise ValueError(f"`c` must be > 0; found {c}.")
    n = p * (p + 1) // 2
    m = n if m is None else int(m)
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
        y = Q @ coords * (m / (4.0 * scale))
    elif y is None:
        y = rng.standard_normal(m)
    data = DenseData(A, y)
    _, res, _ = isotropy(data)
    if res > 1e-12:
        raise RuntimeError(f"isotropic_data: construction not isotropic (residual {res:.3g}).")
    return data


def projector_data(block_sizes, g, k=1.0, *, m: int | None = None, seed: int = 0,
                   rotate_basis: bool = True) -> tuple[CommutingData, np.ndarray]:
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
