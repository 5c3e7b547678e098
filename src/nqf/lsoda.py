"""The reduced GLV flow with scipy's LSODA: a host (CPU) solve path for coupled commuting data at
very large p (`solve_flow(..., solver="lsoda")`).

For `CommutingData` with m < p the log mode strengths move in an m-dimensional affine subspace,
u(t) = u0 + D_mask (Lambda^T G(t) - 2 gamma (t - t0)), with G_mu = -(8/m) int Delta_mu the
integrated residuals (`nqf.flow.rhs_glv_reduced`). Integrating G (m values) instead of u (p values)
makes the stiff linear algebra m x m: the Jacobian -(8/m) Lambda diag(z) Lambda^T costs one
O(p m^2) product, and a BDF/Adams method (scipy's LSODA, which switches between them) reuses it
over many steps, so the cost is dominated by right-hand sides, two passes over Lambda each. A
matrix-free Krylov BDF on the p-dimensional system (SUNDIALS CVODE-GMRES) needs Jacobian-vector
products on top of them (benchmarks/bench_peers.py measures both).

This path runs in numpy on the host: it is not traceable (no jit/vmap/grad; use the default
Rodas5P path, `stiff=True`, for that) and does not use an accelerator. Tolerances apply to G with
atol = rtol / max_k |lambda_k| by default (so |du| <= rtol per unit of atol), rtol on G.
"""

from __future__ import annotations

import numpy as np
import scipy.integrate

from .data import CommutingData

__all__ = ["ReducedLSODAInterpolation"]

_BLOCK = 1 << 14  # modes per block: m x 16384 doubles stay in cache between the two products


class _Reduced:
    """The reduced GLV problem on the host: data arrays, u0, mask, weight decay."""

    def __init__(self, data: CommutingData, u0: np.ndarray, mask: np.ndarray, gamma: float, t0: float):
        self.Lam = np.asarray(data.Lambda)
        self.y = np.asarray(data.y)
        self.c = 8.0 / data.m
        self.u0, self.mask, self.gamma, self.t0 = u0, mask, gamma, t0

    def log_z(self, t, G):
        """u = u0 + D_mask (Lambda^T G - 2 gamma (t - t0)), shape (p,) ((..., p) for G (..., m))."""
        u = self.u0 + G @ self.Lam - 2.0 * self.gamma * (np.asarray(t)[..., None] - self.t0)
        return np.where(self.mask, u, 0.0)

    def z(self, t, G):
        u = self.log_z(t, G)
        with np.errstate(over="ignore"):  # a trial step may overshoot; LSODA rejects it
            return np.where(self.mask, np.exp(u), 0.0)

    def rhs(self, t, G):
        """G' = -(8/m) (Lambda z - y): one pass over Lambda, block by block (each block of
        columns is read from memory once and reused from cache for Lambda z)."""
        shift = 2.0 * self.gamma * (t - self.t0)
        out = np.zeros_like(self.y)
        with np.errstate(over="ignore"):  # a trial step may overshoot; LSODA rejects it
            for s in range(0, self.u0.size, _BLOCK):
                L = self.Lam[:, s:s + _BLOCK]
                mask = self.mask[s:s + _BLOCK]
                out += L @ np.where(mask, np.exp(np.where(mask, self.u0[s:s + _BLOCK] + G @ L - shift, 0.0)), 0.0)
        return -self.c * (out - self.y)

    def jac(self, t, G):
        """-(8/m) Lambda diag(z) Lambda^T, shape (m, m): O(p m^2), blocks of columns."""
        z = self.z(t, G)
        J = np.zeros((self.Lam.shape[0],) * 2)
        for s in range(0, z.size, _BLOCK):
            L = self.Lam[:, s:s + _BLOCK]
            J += (L * z[s:s + _BLOCK]) @ L.T
        return -self.c * J


class ReducedLSODAInterpolation:
    """Dense output of the LSODA path in the GLV form's coordinates (host numpy): `evaluate(t)`
    gives log z at the times t (n,), shape (n, p); `step_ts` are LSODA's step times."""

    host = True  # evaluated on the host (not a JAX pytree); `FlowSolution.evaluate` calls it directly

    def __init__(self, problem: _Reduced, dense, t0: float, t1: float, step_ts: np.ndarray):
        self._problem, self._dense = problem, dense
        self.t0, self.t1, self.step_ts = t0, t1, step_ts

    def evaluate(self, t):
        t = np.atleast_1d(np.asarray(t, dtype=float))
        return self._problem.log_z(t, self._dense(t).T)


def solve_reduced_lsoda(data: CommutingData, u0, mask, *, t0, t1, ts, rtol, atol, gamma, max_steps):
    """Integrate the reduced GLV flow with LSODA; returns (G at ts (n, m), interpolation, stats)."""
    prob = _Reduced(data, np.asarray(u0), np.asarray(mask), float(gamma), float(t0))
    if atol is None:
        atol = rtol / max(float(np.sqrt(np.max(np.asarray(data.feature_norms())))), np.finfo(float).tiny)
    sol = scipy.integrate.solve_ivp(
        prob.rhs, (t0, t1), np.zeros(data.m), method="LSODA", t_eval=ts, dense_output=True,
        rtol=rtol, atol=atol, jac=prob.jac,
    )  # no step budget: solve_ivp's LSODA has none to set (`max_steps` is only reported)
    if sol.status != 0:
        raise RuntimeError(f"The LSODA solve of the reduced GLV flow failed: {sol.message}")
    steps = int(sol.sol.ts.size - 1)
    stats = {"num_steps": steps, "num_accepted_steps": steps, "num_rejected_steps": 0,
             "max_steps": int(max_steps), "nfev": int(sol.nfev), "njev": int(sol.njev)}
    interp = ReducedLSODAInterpolation(prob, sol.sol, float(t0), float(t1), np.asarray(sol.sol.ts))
    return sol.y.T, prob, interp, stats


def saved_outputs(prob: _Reduced, data: CommutingData, ts, G, save: str, z_star, grad, block: int = 8):
    """log z at ts (n, p) for save="state", else {"loss", "excess_loss"} (n,) each, computed
    `block` times at a time (memory O(block p))."""
    if save == "state":
        return prob.log_z(ts, G)
    loss, excess = [], []
    for s in range(0, len(ts), block):
        z = prob.z(ts[s:s + block], G[s:s + block])
        f = z @ prob.Lam.T
        loss.append(np.mean((f - prob.y) ** 2, axis=1))
        if z_star is not None:
            dz = z - z_star
            lin = np.sum(np.where(z_star == 0, np.maximum(grad, 0.0) * z, 0.0), axis=1)
            excess.append(np.sum((dz @ prob.Lam.T) ** 2, axis=1) / data.m + lin)
    out = {"loss": np.concatenate(loss)}
    if z_star is not None:
        out["excess_loss"] = np.concatenate(excess)
    return out
