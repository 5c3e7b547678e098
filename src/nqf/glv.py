"""The loss landscape of commuting data in mode coordinates z (THEORY sec. 5, Eq. E20).

For commuting data the MSE loss depends on M only through z_k = (P^T M P)_kk >= 0:
L(z) = (1/m) |Lambda z - y|^2. The GLV flow (Eq. E13) from z(0) > 0 converges to the minimizer of
L over z >= 0 (its saturated fixed point), which `glv_equilibrium` computes, and the excess loss
E = L(z) - L(z*) is evaluated without cancellation, so it stays accurate over many decades.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize

from .data import AbstractCommutingData, DiagonalData

__all__ = ["glv_equilibrium", "excess_loss"]


def glv_equilibrium(data: AbstractCommutingData) -> np.ndarray:
    """z* = argmin_{z >= 0} (1/m) |Lambda z - y|^2, the limit z(inf) of the GLV flow (Eq. E13).

    With orthogonal features (Theorem 6) this is z*_k = max(r_k / C_kk, 0) in closed form;
    otherwise it is the non-negative least-squares solution (`scipy.optimize.nnls`). Modes with
    lambda_{., k} = 0 do not move and get z*_k = 0 here. Returns shape (p,).
    """
    y = np.asarray(data.y)
    if isinstance(data, DiagonalData):  # orthogonal features by construction: O(p)
        lam = np.asarray(data.lam)
        safe = np.where(lam != 0, lam, 1.0)
        return np.where(lam != 0, np.maximum(y / safe, 0.0), 0.0)
    Lam = np.asarray(data.Lambda)
    norms = np.einsum("mk,mk->k", Lam, Lam)
    live = np.flatnonzero(norms > 0)
    orthogonal = False
    if live.size <= Lam.shape[0]:  # more than m nonzero columns cannot be orthogonal in R^m
        sub = Lam[:, live]
        gram_off = sub.T @ sub - np.diag(norms[live])
        orthogonal = np.abs(gram_off).max(initial=0.0) <= 1e-13 * max(norms.max(initial=0.0), 1e-300)
    if orthogonal:
        safe = np.where(norms > 0, norms, 1.0)
        return np.where(norms > 0, np.maximum(Lam.T @ y / safe, 0.0), 0.0)
    z, _ = scipy.optimize.nnls(Lam, y, maxiter=50 * Lam.shape[1])
    return z


def excess_loss(data: AbstractCommutingData, z, z_star=None) -> np.ndarray:
    """E(z) = L(z) - L(z*) for mode strengths z of shape (..., p); returns shape (...).

    Computed as (1/m) |Lambda (z - z*)|^2 + sum_{k: z*_k = 0} g_k z_k with g = grad L(z*) >= 0
    (the KKT form), which has no cancellation; for Theorem 6 data it equals
    sum_k V_k (1 - z_k / z_k(inf))^2 with V_k = r_k^2 / (8 C_kk) (Eq. E20).
    """
    y = np.asarray(data.y)
    if z_star is None:
        z_star = glv_equilibrium(data)
    z = np.asarray(z)
    m = data.m
    dz = z - z_star
    quad = np.sum(np.asarray(data.outputs_z(dz)) ** 2, axis=-1) / m
    g = 2.0 / m * np.asarray(data.pullback(np.asarray(data.outputs_z(z_star)) - y))
    lin = np.sum(np.where(z_star == 0, np.maximum(g, 0.0) * z, 0.0), axis=-1)
    return quad + lin
