"""The loss landscape of commuting data in mode coordinates z (THEORY sec. 5, Eq. E20).

For commuting data the MSE loss depends on M only through z_k = (P^T M P)_kk >= 0:
L(z) = (1/m) |Lambda z - y|^2. The GLV flow (Eq. E13) from z(0) > 0 converges to the minimizer of
L over z >= 0 (its saturated fixed point), which `glv_equilibrium` computes, and the excess loss
E = L(z) - L(z*) is evaluated without cancellation, so it stays accurate over many decades.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core._checks import any_traced
from .._core._config import require_x64
from ..data._operators import AbstractCommutingData, BlockData, DiagonalData

__all__ = ["glv_equilibrium", "excess_loss", "orthogonal_features_residual", "logistic_z", "logistic_log_z"]

_TINY = np.finfo(float).tiny


def _check_commuting(data, fn: str) -> None:
    """TypeError unless `data` is commuting data (the mode coordinates z need a shared basis)."""
    if not isinstance(data, AbstractCommutingData):
        raise TypeError(
            f"`{fn}` needs commuting data (`CommutingData`, `DiagonalData` or `BlockData`: a shared "
            f"eigenbasis, Assumption 1), since it works in the mode coordinates z; found "
            f"{type(data).__name__}. Convert commuting dense matrices with `CommutingData.from_dense`."
        )


# Theorem 6's assumption in words (`nqf.AssumptionError`)
_THM6_COND = "orthogonal features sum_mu lambda_{mu,k} lambda_{mu,j} = 0 (k != j)"


def orthogonal_features_residual(data: AbstractCommutingData) -> tuple[float, tuple[int, int]]:
    """How far commuting data is from orthogonal features (the assumption of Theorem 6):
    max_{k != j} |sum_mu lambda_{mu,k} lambda_{mu,j}| / (|lambda_k| |lambda_j|), a cosine in
    [0, 1], and the pair (k, j) where it is attained.

    Structural, never a p x p matrix: 0 for `DiagonalData` (one feature per sample); for
    `CommutingData` only the s nonzero columns of Lambda enter (O(m p + m s^2)). More than m
    nonzero columns cannot be orthogonal in R^m, so then the first m + 1 of them are compared
    and the value returned is a lower bound on the residual.

    **Raises:** `TypeError` for data that are not commuting.
    """
    _check_commuting(data, "orthogonal_features_residual")
    if isinstance(data, DiagonalData):
        return 0.0, (0, 0)
    with jax.ensure_compile_time_eval():
        cos, cols = features_cosines(data.Lambda)
    cos, cols = np.asarray(cos), np.asarray(cols)
    if cos.shape[0] < 2 or not cos.max() > 0:
        return 0.0, (0, 0)
    k, j = np.unravel_index(np.argmax(cos), cos.shape)
    return float(cos[k, j]), (int(cols[k]), int(cols[j]))


def features_cosines(Lam):
    """|cosines| between the first m + 1 nonzero columns of Lambda (m, p) (see
    `orthogonal_features_residual`), in JAX (traceable, not differentiated): the (s, s) matrix,
    s = min(m + 1, p), with a zero diagonal and zeros for padding, and the columns' indices (s,)."""
    Lam = jax.lax.stop_gradient(jnp.asarray(Lam))
    m, p = Lam.shape
    live = jnp.einsum("mk,mk->k", Lam, Lam) > 0
    s = min(m + 1, p)
    cols = jnp.argsort(~live, stable=True)[:s]  # the nonzero columns first, in order
    sub = Lam[:, cols]
    G = sub.T @ sub
    nrm = jnp.sqrt(jnp.diagonal(G))
    cos = jnp.abs(G) / jnp.maximum(jnp.outer(nrm, nrm), _TINY)
    keep = live[cols][:, None] & live[cols][None, :] & ~jnp.eye(s, dtype=bool)
    return jnp.where(keep, cos, 0.0), cols


# Taylor coefficients 1/(n+1)! of (1 - e^s)/(-s) = sum_n s^n/(n+1)!: 16 terms reach 4e-16 on |s| < 1/2.
_EXPREL = [1.0 / math.factorial(n + 1) for n in range(16)]


def _logistic_terms(a, t):
    """s = -|a| t <= 0, e^s and (1 - e^s) / |a| = t (1 - e^s)/(-s) (= t at a = 0), the latter to
    full relative precision: a Taylor polynomial for |s| < 1/2 (where 1 - e^s cancels), else
    the direct quotient. One exponential per entry (cheaper than exp and expm1)."""
    s = -jnp.abs(a) * t
    e = jnp.exp(s)
    small = s > -0.5
    x = jnp.where(small, s, -1.0)
    poly = _EXPREL[-1]
    for c in _EXPREL[-2::-1]:
        poly = poly * x + c
    ratio = jnp.where(small, poly, (1.0 - e) / jnp.where(small, 1.0, -s))
    return s, e, t * ratio


def logistic_z(
    z0: Float[ArrayLike, "*shape"],
    a: Float[ArrayLike, "*shape"],
    C: Float[ArrayLike, "*shape"],
    t: Float[ArrayLike, "*shape"],
) -> Float[Array, "*shape"]:
    """z(t) for the logistic mode z' = (a - C z) z, z(0) = z0 >= 0: Theorem 6's
    z(t) = a z0 / (C z0 + (a - C z0) e^{-a t}) (Eq. E16; a = r_k - 2 gamma with weight decay),
    written without overflow or cancellation for every sign of a (traceable; broadcasts):
    z0 / (e^{-a t} + C z0 (1 - e^{-a t}) / a) for a > 0, and
    z0 e^{a t} / (1 + C z0 (e^{a t} - 1) / a) for a <= 0 (z0 / (1 + C z0 t) at a = 0).
    One exponential per entry."""
    _, e, frac = _logistic_terms(a, t)
    grows = jnp.asarray(a) > 0
    return jnp.asarray(z0) * jnp.where(grows, 1.0, e) / (jnp.where(grows, e, 1.0) + C * z0 * frac)


def logistic_log_z(
    log_z0: Float[ArrayLike, "*shape"],
    z0: Float[ArrayLike, "*shape"],
    a: Float[ArrayLike, "*shape"],
    C: Float[ArrayLike, "*shape"],
    t: Float[ArrayLike, "*shape"],
) -> Float[Array, "*shape"]:
    """log z(t) of `logistic_z` (z0 = exp(log_z0) > 0), in log space so that it stays finite
    and relatively accurate however small z gets."""
    s, e, frac = _logistic_terms(a, t)
    grows = jnp.asarray(a) > 0
    return jnp.asarray(log_z0) + jnp.where(grows, 0.0, s) - jnp.log(jnp.where(grows, e, 1.0) + C * z0 * frac)


def glv_equilibrium(data: AbstractCommutingData) -> Float[np.ndarray, " p"]:
    """z* = argmin_{z >= 0} (1/m) |Lambda z - y|^2, the limit z(inf) of the GLV flow (Eq. E13).

    With orthogonal features (Theorem 6) this is z*_k = max(r_k / C_kk, 0) in closed form;
    otherwise it is the non-negative least-squares solution (`scipy.optimize.nnls`). Modes with
    lambda_{., k} = 0 do not move and get z*_k = 0 here. Returns shape (p,).

    For `BlockData` (orthogonal samples: each sample's K modes are its own) the problem splits
    into m problems min_{z >= 0} (b_mu . z - y_mu)^2: z* puts y_mu / b_{mu,j} on the mode j with the
    largest b_{mu,j} y_mu if that is > 0 (fit exact), else 0; O(m K). The minimizer need not be
    unique there (NNLS may pick another one with the same outputs Lambda z*); `excess_loss` does
    not depend on the choice.

    Under JAX tracing (data as traced arrays inside jit / vmap / grad) the closed form is used
    for `DiagonalData`; other data must be concrete (NNLS runs on the host).

    **Raises:** `TypeError` for data that are not commuting (e.g. `DenseData`); `ValueError` for
    traced data other than `DiagonalData`.
    """
    _check_commuting(data, "glv_equilibrium")
    if isinstance(data, DiagonalData):  # orthogonal features by construction: O(p)
        lam, y = data.lam, data.y
        if any_traced(data):
            safe = jnp.where(lam != 0, lam, 1.0)
            return jnp.where(lam != 0, jnp.maximum(y / safe, 0.0), 0.0)
        lam, y = np.asarray(lam), np.asarray(y)
        safe = np.where(lam != 0, lam, 1.0)
        return np.where(lam != 0, np.maximum(y / safe, 0.0), 0.0)
    if isinstance(data, BlockData) and not any_traced(data):
        b, y = np.asarray(data.blocks), np.asarray(data.y)
        score = b * np.where(y >= 0, 1.0, -1.0)[:, None]
        j = np.argmax(score, axis=1)
        best = np.take_along_axis(b, j[:, None], axis=1)[:, 0]
        ok = np.take_along_axis(score, j[:, None], axis=1)[:, 0] > 0
        z = np.zeros(b.shape)
        z[np.arange(b.shape[0]), j] = np.where(ok, y / np.where(ok, best, 1.0), 0.0)
        return z.reshape(-1)
    if any_traced(data):
        raise ValueError(
            "glv_equilibrium of traced CommutingData: the non-negative least squares runs on the "
            "host; pass concrete data (close over it instead of tracing it), or DiagonalData."
        )
    y = np.asarray(data.y)
    Lam = np.asarray(data.Lambda)
    norms = np.einsum("mk,mk->k", Lam, Lam)
    if orthogonal_features_residual(data)[0] <= 1e-13:
        safe = np.where(norms > 0, norms, 1.0)
        return np.where(norms > 0, np.maximum(Lam.T @ y / safe, 0.0), 0.0)
    import scipy.optimize  # on first use: ~0.3 s at import

    z, _ = scipy.optimize.nnls(Lam, y, maxiter=50 * Lam.shape[1])
    return z


def excess_loss(
    data: AbstractCommutingData,
    z: Float[ArrayLike, "*batch p"],
    z_star: Float[ArrayLike, " p"] | None = None,
) -> Float[np.ndarray, "*batch"] | Float[Array, "*batch"]:
    """E(z) = L(z) - L(z*) for mode strengths z of shape (..., p); returns shape (...).

    Computed as (1/m) |Lambda (z - z*)|^2 + sum_{k: z*_k = 0} g_k z_k with g = grad L(z*) >= 0
    (the KKT form), which has no cancellation; for Theorem 6 data it equals
    sum_k V_k (1 - z_k / z_k(inf))^2 with V_k = r_k^2 / (8 C_kk) (Eq. E20). `z_star` defaults to
    `glv_equilibrium(data)`. Runs under jit / vmap / grad (JAX arrays in, JAX arrays out);
    concrete inputs give numpy arrays.

    **Raises:** `TypeError` for data that are not commuting; `RuntimeError` if JAX's float64 was
    turned off after importing nqf.
    """
    require_x64()
    _check_commuting(data, "excess_loss")
    if z_star is None:
        z_star = glv_equilibrium(data)
    m = data.m
    z, z_star = jnp.asarray(z), jnp.asarray(z_star)
    quad = jnp.sum(data.outputs_z(z - z_star) ** 2, axis=-1) / m
    g = 2.0 / m * data.pullback(data.outputs_z(z_star) - data.y)
    lin = jnp.sum(jnp.where(z_star == 0, jnp.maximum(g, 0.0) * z, 0.0), axis=-1)
    out = quad + lin
    return out if any_traced(out) else np.asarray(out)
