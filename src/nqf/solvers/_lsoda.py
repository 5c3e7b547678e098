"""The reduced GLV flow with scipy's LSODA or SUNDIALS CVODE: a host (CPU) solve path for coupled
commuting data at very large p (`solve_flow(..., solver="lsoda")` or ``solver="cvode"``).

For `CommutingData` with m < p the log mode strengths move in an m-dimensional affine subspace,
u(t) = u0 + D_mask (Lambda^T G(t) - 2 gamma (t - t0)), with G_mu = -(8/m) int Delta_mu the
integrated residuals (`nqf.dynamics.rhs_glv_reduced`). Integrating G (m values) instead of u (p values)
makes the stiff linear algebra m x m: the Jacobian -(8/m) Lambda diag(z) Lambda^T costs one
O(p m^2) product, and a BDF method reuses it over many steps, so the cost is dominated by
right-hand sides, one blocked pass over Lambda each: scipy's LSODA (``"lsoda"``), or SUNDIALS
CVODE with a dense m x m direct solve (``"cvode"``, needs scikit-sundae: ``pip install
'nqf[sundials]'``; it takes about half LSODA's right-hand sides and a fifth of its Jacobians). A
matrix-free Krylov BDF on the p-dimensional system (CVODE-GMRES) needs Jacobian-vector products
on top of its right-hand sides (benchmarks/bench_peers.py measures them all). CVODE's dense
output is rebuilt by solving again to the requested times.

This path runs in numpy on the host: it is not traceable (no jit/vmap/grad; use the default
Rodas5P path, `stiff=True`, for that) and does not use an accelerator. Tolerances apply to G with
atol = rtol / max_k |lambda_k| by default (so |du| <= rtol per unit of atol), rtol on G.
"""

from __future__ import annotations

import numpy as np

from ..data._operators import CommutingData

__all__ = ["ReducedLSODAInterpolation"]

_BLOCK = 1 << 14  # modes per block: m x 16384 doubles stay in cache between the two products
_U_MAX = 600.0  # cap on log z in trial steps: exp stays finite (no inf * 0 = NaN in Lambda z)


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
        u = np.minimum(self.log_z(t, G), _U_MAX)  # a trial step may overshoot: large, finite, rejected
        return np.where(self.mask, np.exp(u), 0.0)

    def rhs(self, t, G):
        """G' = -(8/m) (Lambda z - y): one pass over Lambda, block by block (each block of
        columns is read from memory once and reused from cache for Lambda z)."""
        shift = 2.0 * self.gamma * (t - self.t0)
        out = np.zeros_like(self.y)
        for s in range(0, self.u0.size, _BLOCK):  # a trial step may overshoot: u is capped at
            L = self.Lam[:, s : s + _BLOCK]  # _U_MAX (large, finite), and the step rejected
            mask = self.mask[s : s + _BLOCK]
            u = np.minimum(np.where(mask, self.u0[s : s + _BLOCK] + G @ L - shift, 0.0), _U_MAX)
            out += L @ np.where(mask, np.exp(u), 0.0)
        return -self.c * (out - self.y)

    def jac(self, t, G):
        """-(8/m) Lambda diag(z) Lambda^T, shape (m, m): O(p m^2), blocks of columns."""
        z = self.z(t, G)
        J = np.zeros((self.Lam.shape[0],) * 2)
        for s in range(0, z.size, _BLOCK):
            L = self.Lam[:, s : s + _BLOCK]
            J += (L * z[s : s + _BLOCK]) @ L.T
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


def _cvode(prob: _Reduced, t_span: np.ndarray, rtol: float, atol: float, max_steps: int):
    """SUNDIALS CVODE (BDF, dense m x m direct solve with the analytic Jacobian) from scikit-sundae
    on the reduced flow, output at `t_span` (all internal steps when it has two entries)."""
    try:
        from sksundae.cvode import CVODE
    except ImportError:
        raise ImportError(
            "solver='cvode' needs SUNDIALS from scikit-sundae: pip install 'nqf[sundials]' "
            "(or scikit-sundae); solver='lsoda' needs only scipy."
        ) from None

    def rhs(t, G, dG):
        dG[:] = prob.rhs(t, G)

    def jac(t, G, fG, JJ):
        JJ[:, :] = prob.jac(t, G)

    sol = CVODE(
        rhs, method="BDF", rtol=rtol, atol=atol, linsolver="dense", jacfn=jac, max_num_steps=int(max_steps)
    ).solve(t_span, np.zeros(prob.Lam.shape[0]))
    if not sol.success:
        raise RuntimeError(f"The CVODE solve of the reduced GLV flow failed: {sol.message}")
    return sol


class ReducedCVODEInterpolation(ReducedLSODAInterpolation):
    """Dense output of the CVODE path: log z at any times t by solving again to them (CVODE's
    output times), `step_ts` its internal step times (one more solve on first use)."""

    def __init__(self, problem: _Reduced, t0, t1, rtol, atol, max_steps):
        self._problem, self.t0, self.t1 = problem, t0, t1
        self._settings = (rtol, atol, max_steps)

    def evaluate(self, t):
        t = np.atleast_1d(np.asarray(t, dtype=float))
        grid, inv = np.unique(t, return_inverse=True)
        span = grid if grid.size > 1 and grid[0] == self.t0 else np.concatenate([[self.t0], grid])
        if span.size < 2:
            span = np.array([self.t0, self.t1])
        G = _cvode(self._problem, span, *self._settings).y
        G = G[-grid.size :] if span.size > grid.size else G
        return self._problem.log_z(t, G[inv])

    @property
    def step_ts(self):
        return np.asarray(_cvode(self._problem, np.array([self.t0, self.t1]), *self._settings).t)


def solve_reduced(data: CommutingData, u0, mask, *, method, t0, t1, ts, rtol, atol, gamma, max_steps):
    """Integrate the reduced GLV flow with LSODA (``method="lsoda"``, scipy) or CVODE
    (``"cvode"``, SUNDIALS); returns (G at ts (n, m), the problem, the interpolation, stats)."""
    prob = _Reduced(data, np.asarray(u0), np.asarray(mask), float(gamma), float(t0))
    if atol is None:
        atol = rtol / max(float(np.sqrt(np.max(np.asarray(data.feature_norms())))), np.finfo(float).tiny)
    if method == "cvode":
        span = ts if ts[0] == t0 else np.concatenate([[t0], ts])
        span = span if span.size > 1 else np.array([t0, t1])
        sol = _cvode(prob, span, rtol, atol, max_steps)
        G = sol.y[-ts.size :]
        # CVODE reports no step count at fixed output times: -1 (its internal steps are
        # `step_times`, one more solve)
        stats = {
            "num_steps": -1,
            "num_accepted_steps": -1,
            "num_rejected_steps": -1,
            "max_steps": int(max_steps),
            "nfev": int(sol.nfev),
            "njev": int(sol.njev),
        }
        return G, prob, ReducedCVODEInterpolation(prob, float(t0), float(t1), rtol, atol, max_steps), stats
    import scipy.integrate  # on first use: ~0.3 s at import

    sol = scipy.integrate.solve_ivp(
        prob.rhs,
        (t0, t1),
        np.zeros(data.m),
        method="LSODA",
        t_eval=ts,
        dense_output=True,
        rtol=rtol,
        atol=atol,
        jac=prob.jac,
    )  # no step budget: solve_ivp's LSODA has none to set (`max_steps` is only reported)
    if sol.status != 0:
        raise RuntimeError(f"The LSODA solve of the reduced GLV flow failed: {sol.message}")
    steps = int(sol.sol.ts.size - 1)
    stats = {
        "num_steps": steps,
        "num_accepted_steps": steps,
        "num_rejected_steps": 0,
        "max_steps": int(max_steps),
        "nfev": int(sol.nfev),
        "njev": int(sol.njev),
    }
    interp = ReducedLSODAInterpolation(prob, sol.sol, float(t0), float(t1), np.asarray(sol.sol.ts))
    return sol.y.T, prob, interp, stats


def saved_outputs(prob: _Reduced, data: CommutingData, ts, G, save: str, z_star, grad, block: int = 8):
    """log z at ts (n, p) for save="state", else {"loss", "excess_loss"} (n,) each, computed
    `block` times at a time (memory O(block p))."""
    if save == "state":
        return prob.log_z(ts, G)
    loss, excess = [], []
    for s in range(0, len(ts), block):
        z = prob.z(ts[s : s + block], G[s : s + block])
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
