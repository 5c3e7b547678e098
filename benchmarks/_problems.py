"""Shared problem definitions for `bench_flow.py`: the Fig. 3 flows solved by nqf and by
`scipy.integrate.solve_ivp` on the same equation, same tolerances and same output times.

Nothing here is a benchmark (asv only collects names starting with time_/track_/...); the module
is imported by `bench_flow.py`.

Equations (THEORY E9 and E13), time = gradient-flow time:

- dense M-flow  M' = Y M + M Y - K(M) M - M K(M),  Y = (4/m) sum_mu y_mu A_mu,
                K(M) = (4/m) sum_mu <A_mu, M> A_mu   (A as an (m, p, p) numpy array);
- GLV in log space (commuting data, A_mu = P diag(Lambda_mu) P^T, z = diag(P^T M P), u = log z):
                u' = -(8/m) Lambda^T (Lambda exp(u) - y).

Tolerances follow nqf's convention (`solve_flow`): the same rtol for both solvers and
atol = rtol * max|state(0)| (atol = rtol for the log-space GLV state).
"""

from __future__ import annotations

import os
import time

import numpy as np

# nqf (JAX) and scipy.integrate are imported where they are used, not here: asv imports this
# module in every benchmark process, and the track_ benchmarks only read `setup_cache` results,
# so they start in ~0.1 s instead of the ~2 s that importing JAX takes.

# --------------------------------------------------------------------------------------------
# Fig. 3 (left/middle): m = p = 5, W0 = sqrt(eps) I.
FIG3_EPS = 1e-5
FIG3_T1 = 250.0
FIG3_RTOL = 1e-10
FIG3_TS = np.linspace(0.0, FIG3_T1, 201)
FIG3_FORMS = ["glv", "M", "factor"]  # "glv" is solve_flow's default ("auto") for commuting data
FIG3_SCIPY = ["M-DOP853", "M-RK45", "glv-DOP853", "glv-RK45"]  # "<equation>-<method>"

# Fig. 3 (right): power law, m = p = 1000, z_k(0) = 1e-6 k^-1.2.
PL_P = 1000
PL_RTOL = 1e-8
PL_NTS = 200
PL_SCIPY = ["RK45", "LSODA"]
# The paper's horizon is t1 = 1e5. It is stiff for explicit solvers (the top mode relaxes at rate
# ~1, so Tsit5/RK45 need >= t1 / 3.5 steps: ~28,500 steps, 2-4 min per solve here), so the default
# suite runs t1 = 1e3 and the full horizon is opt-in: NQF_BENCH_PL_T1="1e3,1e5" (see README.md).
PL_T1S = [float(s) for s in os.environ.get("NQF_BENCH_PL_T1", "1e3").split(",") if s.strip()]
# NOTE: the dense M-flow in scipy is not run for p = 1000: the state has p^2 = 1e6 entries and
# the dense (m, p, p) data tensor A has m p^2 = 1e9 float64 entries (8 GB), and every RHS
# evaluation contracts all of it twice (K(M) by tensordot), so it is infeasible. Only the
# log-space GLV equation (p = 1000 states) is compared.


def best_time(fn, repeat: int):
    """Best wall time of `repeat` calls of fn() (seconds), and the last result."""
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def best_times(fns: dict, repeat: int):
    """Best wall time of `repeat` calls of each fn in `fns` ({name: fn}), the calls interleaved
    (round r calls every fn once) so that a change in machine load hits all of them alike.
    Returns ({name: seconds}, {name: last result})."""
    best = dict.fromkeys(fns, np.inf)
    out = {}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            out[k] = fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best, out


def rel_diff_M(Ma, Mb) -> float:
    """max over saved times of max|Ma(t) - Mb(t)| / max|Mb(t)| (normwise relative, per time)."""
    Ma, Mb = np.asarray(Ma), np.asarray(Mb)
    num = np.abs(Ma - Mb).max(axis=(1, 2))
    den = np.abs(Mb).max(axis=(1, 2))
    return float((num / den).max())


def rel_diff_z(za, zb) -> float:
    """max over saved times and modes of |za - zb| / |zb| (elementwise relative; z > 0)."""
    za, zb = np.asarray(za), np.asarray(zb)
    return float((np.abs(za - zb) / np.abs(zb)).max())


class Fig3:
    """The Fig. 3 left/middle problem and its nqf and scipy solvers."""

    def __init__(self):
        import scipy.integrate  # noqa: F401  (import cost in set-up, not in a timed solve)

        from nqf.datasets import fig3_data

        self.data = fig3_data()
        d = self.data
        self.p, self.m = d.p, d.m
        self.W0 = np.sqrt(FIG3_EPS) * np.eye(self.p)
        self.M0 = self.W0 @ self.W0.T
        self.A = np.asarray(d.dense())  # (m, p, p)
        self.y = np.asarray(d.y)
        self.Lambda = np.asarray(d.Lambda)  # (m, p)
        self.P = np.eye(self.p) if d.P is None else np.asarray(d.P)
        self.Y = 4.0 / self.m * np.tensordot(self.y, self.A, axes=1)
        self.z0 = np.einsum("ik,ij,jk->k", self.P, self.M0, self.P)  # diag(P^T M0 P)

    # -- nqf --------------------------------------------------------------------------------
    def nqf(self, form: str = "glv", dense=None):
        import nqf

        kw = {} if form == "glv" else {"form": form}  # "glv" = the default call
        if dense is not None:
            kw["dense"] = dense
        return nqf.solve_flow(self.data, W0=self.W0, t1=FIG3_T1, ts=FIG3_TS, rtol=FIG3_RTOL, **kw)

    # -- scipy ------------------------------------------------------------------------------
    def rhs_M(self, t, x):
        p = self.p
        M = x.reshape(p, p)
        K = 4.0 / self.m * np.tensordot(np.tensordot(self.A, M, axes=([1, 2], [0, 1])), self.A, axes=1)
        H = self.Y - K
        HM = H @ M
        return (HM + HM.T).ravel()  # Y M + M Y - K M - M K  (M, H symmetric)

    def rhs_glv(self, t, u):
        return -(8.0 / self.m) * ((self.Lambda @ np.exp(u) - self.y) @ self.Lambda)

    def scipy(self, variant: str):
        from scipy.integrate import solve_ivp

        eq, method = variant.split("-")
        if eq == "M":
            y0 = self.M0.ravel()
            atol = FIG3_RTOL * np.abs(y0).max()
            rhs = self.rhs_M
        else:
            y0 = np.log(self.z0)
            atol = FIG3_RTOL  # nqf's atol for the log-space state
            rhs = self.rhs_glv
        sol = solve_ivp(rhs, (0.0, FIG3_T1), y0, method=method, t_eval=FIG3_TS, rtol=FIG3_RTOL, atol=atol)
        if sol.status != 0:
            raise RuntimeError(f"solve_ivp({variant}) failed: {sol.message}")
        return sol

    def scipy_M(self, variant: str, sol) -> np.ndarray:
        """M(t) at the saved times, shape (n, p, p), from a `scipy(variant)` result."""
        p = self.p
        if variant.startswith("M-"):
            return sol.y.T.reshape(-1, p, p)
        # GLV: M(t) = Q M0 Q, Q = P diag(sqrt(z/z0)) P^T (Proposition 7 slaving; nqf's `_M_from`).
        s = np.sqrt(np.exp(sol.y.T) / self.z0)
        Mb = self.P.T @ self.M0 @ self.P
        return np.einsum("ik,nkl,jl->nij", self.P, s[:, :, None] * Mb[None] * s[:, None, :], self.P)


class Powerlaw:
    """The Fig. 3 right problem (p = 1000 power law) in the log-space GLV form."""

    def __init__(self):
        import scipy.integrate  # noqa: F401  (import cost in set-up, not in a timed solve)

        from nqf.datasets import powerlaw_data

        self.data = powerlaw_data(PL_P)
        d = self.data
        self.p, self.m = d.p, d.m
        k = np.arange(1, self.p + 1, dtype=float)
        self.z0 = 1e-6 * k**-1.2
        self.M0 = np.diag(self.z0)  # P = I for powerlaw_data, so z = diag(M)
        self.Lambda = np.asarray(d.Lambda)  # (m, p), dense as nqf stores it
        self.y = np.asarray(d.y)
        self.C = self.Lambda.T @ self.Lambda  # for the analytic Jacobian (set-up, not timed)

    @staticmethod
    def ts(t1: float) -> np.ndarray:
        """PL_NTS saved times: 0 and log-spaced from 1e-2 to t1."""
        return np.concatenate([[0.0], np.logspace(-2.0, np.log10(t1), PL_NTS - 1)])

    def nqf(self, t1: float):
        import nqf

        return nqf.solve_flow(self.data, M0=self.M0, t1=t1, ts=self.ts(t1), rtol=PL_RTOL)

    def warm_up(self):
        """Compile the nqf program cheaply: same shapes and static arguments, t1 = 1."""
        sol = self.nqf(1.0)
        assert sol.form == "glv", sol.form

    def rhs(self, t, u):
        return -(8.0 / self.m) * ((self.Lambda @ np.exp(u) - self.y) @ self.Lambda)

    def jac(self, t, u):
        # d/du_j of -(8/m) sum_mu lambda_mu,k (Lambda exp(u) - y)_mu = -(8/m) (Lambda^T Lambda)_kj z_j
        return -(8.0 / self.m) * self.C * np.exp(u)[None, :]

    def scipy(self, method: str, t1: float):
        from scipy.integrate import solve_ivp

        kw = {"jac": self.jac} if method in ("LSODA", "BDF", "Radau") else {}
        sol = solve_ivp(
            self.rhs, (0.0, t1), np.log(self.z0), method=method, t_eval=self.ts(t1), rtol=PL_RTOL, atol=PL_RTOL, **kw
        )
        if sol.status != 0:
            raise RuntimeError(f"solve_ivp({method}) failed: {sol.message}")
        return sol
