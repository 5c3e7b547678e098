"""Generated NQF data sets with known structure (the paper's settings and theorem test beds).

Nothing is downloaded: every data set here is generated from a seed.
"""

from __future__ import annotations

import numpy as np

from ._checks import as_array
from .data import CommutingData

__all__ = ["orthogonal_features_data", "fig3_data", "powerlaw_data"]


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
