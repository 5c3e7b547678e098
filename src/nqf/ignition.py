"""Ignition times of sudden learning (THEORY sec. 7, Eq. E19).

A mode k "ignites" when z_k reaches a fraction rho of its final value z_k(inf). For a logistic mode
z' = a zeta z (1 - C z / zeta) (Theorem 6: a = 1, zeta = r_k, C = C_kk; Theorem 7: a = 2,
zeta = g_k, C = 4c) the time is exact in closed form (`predicted_ignition_times`); for any solved
flow it is measured by root finding on the solver's dense interpolant (`measure_ignition_times`).
"""

from __future__ import annotations

import numpy as np
import scipy.optimize

from ._checks import as_array

__all__ = ["predicted_ignition_times", "measure_ignition_times"]


def predicted_ignition_times(zeta, C, z0, *, rho: float = 0.5, a: float = 1.0) -> np.ndarray:
    """t*_k = 1/(a zeta_k) ln( (zeta_k - C_k z_k(0)) rho / (C_k z_k(0) (1 - rho)) ) (Eq. E19).

    With z_k(0) = c_k eps this is E19's (1/(a zeta)) ln(1/eps) - (1/(a zeta)) ln(C c /(zeta - C c
    eps) (1 - rho)/rho). Exact for the logistic solutions of Theorems 6, 7 and 16.

    **Arguments:** `zeta` (p,) growth rates, `C` (p,) self-competition, `z0` (p,) initial mode
    strengths (broadcastable); `rho` in (0, 1); `a` = 1 (Theorem 6) or 2 (Theorem 7).

    **Returns:** times of shape (p,) in gradient-flow time: `inf` for modes that never ignite
    (zeta <= 0 or C = 0, or z0 = 0) and 0 for modes already at or above rho z(inf).

    **Raises:** `ValueError` for rho outside (0, 1), a <= 0, negative C or z0, non-finite input.
    """
    zeta, C, z0 = np.broadcast_arrays(
        *(np.asarray(as_array(v, n)) for v, n in ((zeta, "zeta"), (C, "C"), (z0, "z0")))
    )
    if not 0.0 < rho < 1.0:
        raise ValueError(f"`rho` must lie in (0, 1); found {rho!r}.")
    if not a > 0:
        raise ValueError(f"`a` must be > 0 (1 for Theorem 6, 2 for Theorem 7); found {a!r}.")
    for v, n, what in ((C, "C", "self-competition"), (z0, "z0", "initial mode strength")):
        if np.any(v < 0):
            raise ValueError(f"`{n}` ({what}) must be >= 0; found minimum {v.min():.3g}.")
    ignites = (zeta > 0) & (C > 0) & (z0 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        arg = (zeta - C * z0) * rho / (C * z0 * (1.0 - rho))
        t = np.log(arg) / (a * zeta)
    return np.where(ignites, np.where(arg > 1.0, t, 0.0), np.inf)


def measure_ignition_times(solution, *, rho: float = 0.5, z_inf=None, xtol: float = 1e-12) -> np.ndarray:
    """Times at which z_k(t) first reaches rho z_k(inf), measured on a solved flow.

    Brackets each crossing on the solver's own step grid and refines it with Brent's method on
    diffrax's dense interpolant (not by grid lookup), to absolute time tolerance `xtol`.

    **Arguments:** `solution` a `FlowSolution` of commuting data solved with `dense=True`;
    `z_inf` (p,) defaults to `solution.z_inf` (the GLV equilibrium).

    **Returns:** shape (p,); `nan` for modes with z_inf = 0 or that do not cross before `t1`.

    **Raises:** `ValueError` for data that is not commuting, no dense output, or rho outside (0, 1).
    """
    if not 0.0 < rho < 1.0:
        raise ValueError(f"`rho` must lie in (0, 1); found {rho!r}.")
    if solution.z_inf is None and z_inf is None:
        raise ValueError("Ignition times need commuting data (mode strengths z_k).")
    z_inf = solution.z_inf if z_inf is None else np.asarray(as_array(z_inf, "z_inf", ndim=1))
    grid = solution.step_times
    zg = solution.z_at(grid)
    target = rho * z_inf
    out = np.full(z_inf.shape, np.nan)
    for k in np.flatnonzero(z_inf > 0):
        above = zg[:, k] >= target[k]
        if not above.any():
            continue
        i = int(np.argmax(above))
        if i == 0:
            out[k] = grid[0]
            continue
        f = lambda t, k=k: float(solution.z_at(t)[0, k] - target[k])
        out[k] = scipy.optimize.brentq(f, grid[i - 1], grid[i], xtol=xtol, rtol=4 * np.finfo(float).eps)
    return out
