"""The strongest hand-written peers of nqf, problem by problem, calibrated to one accuracy target.

Nothing here is an asv benchmark (see `bench_peers.py`); `python benchmarks/bench_peers.py` prints
the same numbers as a table. Each problem defines

- a reference computed independently of nqf (a closed form in plain numpy, or a tight solve by
  scipy or SUNDIALS),
- an error measure and a target (stated below, before any timing),
- contenders: functions rtol -> result. nqf's entries call the public API as a user would; the
  peers are what a competent user writes by hand with the same libraries, using the structure
  (a structured diffrax right-hand side, scipy LSODA with the analytic banded Jacobian, SUNDIALS
  CVODE with the analytic diagonal Jacobian or a matrix-free Krylov solve).

**Calibration.** Every contender runs at the loosest rtol of `RTOL_GRID` (10^-3 down to
10^-12 in quarter decades, atol = rtol x the contender's natural scale) whose error meets the
target; a contender that never meets it is reported as such. Times are the best of `repeat`
calls interleaved across contenders in one process (machine load hits all alike), JAX programs
compiled first.

Problems and targets:

- ``fig3``: Fig. 3, m = p = 5, eps = 1e-5, t1 = 250, 201 times. Error: max_t,k |z/z_Thm6 - 1|
  (Theorem 6 closed form in numpy). Target 1e-8.
- ``mlp``: `nqf.datasets.mlp_data(2000, 128)` (p = 129), W0 (129, 4) = sqrt(1e-4) G / sqrt(p),
  t1 = 5, 41 times. Error: max_t |M(t) - M_ref(t)|_max / |M_ref(t)|_max, reference scipy DOP853
  on the W-flow at rtol 1e-13. Target 1e-6.
- ``powerlaw``: `DiagonalData` power law (r_k = k^-0.8, V_k = k^-2), z0 = 1e-6 k^-1.2, t1 = 1e5,
  101 times (0 and 100 log-spaced from 1). Error: max_t |E(t)/E_ref(t) - 1| over the times with
  E_ref >= 1e-10 E_ref(0), E the excess loss, E_ref from the logistic closed form (numpy).
  Target 1e-5.
- ``coupled``: general commuting data, Lambda = G diag(k^-1/2) (G (m, p) normal), y = Lambda z_T
  with z_T,k = 1/k, z0 = 1e-6, t1 = 1e5, 101 times (0 and 100 log-spaced from 1e-2). Error as in
  powerlaw, reference CVODE (BDF, GMRES) at rtol = atol = 1e-12. Target 1e-5.
- ``sgd``: the closed SGD map (Theorem 2) vs the W-space loop: MLP data p = 65 (k = 64 inputs),
  m = 600, full batch, lr 0.05, 200 steps, width d. Both exact (no calibration); agreement
  max|M_closed - M_W| / max|M_W| is reported.
"""

from __future__ import annotations

import os
import time

import numpy as np

RTOL_GRID = 10.0 ** -np.arange(3.0, 12.25, 0.25)


def env_list(name: str, default: str) -> list[float]:
    """Comma-separated floats from the environment (e.g. NQF_BENCH_PEERS_P="1e3,1e4")."""
    return [float(s) for s in os.environ.get(name, default).split(",") if s.strip()]


def interleaved_best(fns: dict, repeat: int) -> tuple[dict, dict]:
    """Best wall time of `repeat` interleaved calls of each fn (seconds) and the last results
    (`_problems.best_times`)."""
    try:
        from ._problems import best_times
    except ImportError:  # run as a script
        from _problems import best_times
    return best_times(fns, repeat)


def calibrate(run, error, target: float, grid=RTOL_GRID):
    """Loosest rtol of `grid` whose result meets `target`: (rtol, error) or (None, best error).
    `run(rtol)` returns a result, `error(result)` its error."""
    best = np.inf
    for r in grid:
        try:
            e = float(error(run(r)))
        except Exception:  # a solver that fails at this tolerance
            continue
        best = min(best, e)
        if e <= target:
            return r, e
    return None, best


def jax_ready(x):
    import jax

    return jax.block_until_ready(x)


# ---------------------------------------------------------------------------------------------
# fig3
class Fig3:
    target = 1e-8
    T1, EPS = 250.0, 1e-5

    def __init__(self):
        import jax
        import jax.numpy as jnp

        import nqf

        self.data = nqf.datasets.fig3_data()
        d = self.data
        self.p, self.m = d.p, d.m
        self.W0 = np.sqrt(self.EPS) * np.eye(self.p)
        self.ts = np.linspace(0.0, self.T1, 201)
        self.Lam, self.y = np.asarray(d.Lambda), np.asarray(d.y)
        self.P = np.eye(self.p) if d.P is None else np.asarray(d.P)
        self.A = np.asarray(d.dense())
        z0 = np.sum((self.P.T @ self.W0) ** 2, axis=1)
        r = 8.0 / self.m * self.Lam.T @ self.y
        C = 8.0 / self.m * np.sum(self.Lam**2, axis=0)
        t = self.ts[:, None]
        self.z_ref = r * z0 / (C * z0 + (r - C * z0) * np.exp(-r * t))  # Theorem 6 (E16), r > 0 here
        m = self.m

        def rhs_glv(t, u, args):
            Lam, y = args
            return -(8.0 / m) * ((Lam @ jnp.exp(u) - y) @ Lam)

        def rhs_M(t, M, args):
            A, y = args
            H = (4.0 / m) * jnp.einsum("m,mij->ij", jnp.einsum("mij,ij->m", A, M) - y, A)
            HM = H @ M
            return -(HM + HM.T)

        import diffrax

        @jax.jit
        def hand_glv(Lam, y, P, W0, ts, rtol):
            u0 = jnp.log(jnp.sum((P.T @ W0) ** 2, axis=1))
            return diffrax.diffeqsolve(
                diffrax.ODETerm(rhs_glv),
                diffrax.Tsit5(),
                ts[0],
                ts[-1],
                None,
                u0,
                args=(Lam, y),
                saveat=diffrax.SaveAt(ts=ts),
                stepsize_controller=diffrax.PIDController(rtol=rtol, atol=rtol),
                max_steps=100_000,
            ).ys

        @jax.jit
        def hand_M(A, y, W0, ts, rtol):
            M0 = W0 @ W0.T
            return diffrax.diffeqsolve(
                diffrax.ODETerm(rhs_M),
                diffrax.Tsit5(),
                ts[0],
                ts[-1],
                None,
                M0,
                args=(A, y),
                saveat=diffrax.SaveAt(ts=ts),
                stepsize_controller=diffrax.PIDController(rtol=rtol, atol=rtol * jnp.max(jnp.abs(M0))),
                max_steps=100_000,
            ).ys

        Lj, yj, Pj, Aj = (jnp.asarray(v) for v in (self.Lam, self.y, self.P, self.A))
        self._hand_glv = lambda r: np.exp(np.asarray(hand_glv(Lj, yj, Pj, self.W0, self.ts, r)))
        self._hand_M = lambda r: np.einsum(
            "ik,nij,jk->nk", self.P, np.asarray(hand_M(Aj, yj, self.W0, self.ts, r)), self.P
        )

    def error(self, z):
        return np.abs(z / self.z_ref - 1.0).max()

    def contenders(self):
        from scipy.integrate import solve_ivp

        import nqf

        u0 = np.log(np.sum((self.P.T @ self.W0) ** 2, axis=1))
        c = 8.0 / self.m

        def scipy_glv(r):
            s = solve_ivp(
                lambda t, u: -c * ((self.Lam @ np.exp(u) - self.y) @ self.Lam),
                (0.0, self.T1),
                u0,
                method="DOP853",
                t_eval=self.ts,
                rtol=r,
                atol=r,
            )
            return np.exp(s.y.T)

        return {
            "nqf": lambda r: nqf.solve_flow(self.data, W0=self.W0, t1=self.T1, ts=self.ts, rtol=r).z,
            "diffrax GLV (hand)": self._hand_glv,
            "diffrax M-flow (hand)": self._hand_M,
            "scipy DOP853 GLV": scipy_glv,
        }

    def exact(self):
        import nqf

        return lambda: nqf.solve_flow(self.data, W0=self.W0, t1=self.T1, ts=self.ts, method="exact").z

    def overhead_contenders(self):
        """The fixed cost of a call (issue 34): nqf's default solve (GLV form) and its
        ``form="M"`` solve, each next to its hand-written diffrax twin (the same equation and
        Tsit5 steps: GLV log form, dense M-flow); all return z (n, p) on the host."""
        import nqf

        def nqf_M(r):
            return nqf.solve_flow(self.data, W0=self.W0, t1=self.T1, ts=self.ts, rtol=r, form="M").z

        c = self.contenders()
        return {
            "nqf": c["nqf"],
            "diffrax GLV (hand)": self._hand_glv,
            "nqf form=M": nqf_M,
            "diffrax M-flow (hand)": self._hand_M,
        }


# ---------------------------------------------------------------------------------------------
# mlp
class MLP:
    target = 1e-6
    T1, EPS, WIDTH = 5.0, 1e-4, 4

    def __init__(self):
        import diffrax
        import jax
        import jax.numpy as jnp
        from scipy.integrate import solve_ivp

        import nqf

        self.data = nqf.datasets.mlp_data(2000, 128, seed=0)
        self.p, self.m = self.data.p, self.data.m
        self.X = np.ascontiguousarray(np.asarray(self.data.a)[:, :, 0])
        self.y = np.asarray(self.data.y)
        G = np.random.default_rng(1).standard_normal((self.p, self.WIDTH))
        self.W0 = np.sqrt(self.EPS) * G / np.sqrt(self.p)
        self.ts = np.linspace(0.0, self.T1, 41)
        self.atol_scale = np.abs(self.W0).max()
        ref = solve_ivp(
            self.np_rhs,
            (0.0, self.T1),
            self.W0.ravel(),
            method="DOP853",
            t_eval=self.ts,
            rtol=1e-13,
            atol=1e-13 * self.atol_scale,
        )
        W = ref.y.T.reshape(-1, self.p, self.WIDTH)
        self.M_ref = np.einsum("nir,njr->nij", W, W)

        def rhs(t, W, args):
            X, y = args
            U, v = W[:-1], W[-1]
            h = (2.0 / X.shape[0]) * ((X @ (U @ v) - y) @ X)
            return jnp.concatenate([-jnp.outer(h, v), -(h @ U)[None]], axis=0)

        @jax.jit
        def hand(X, y, W0, ts, rtol):
            return diffrax.diffeqsolve(
                diffrax.ODETerm(rhs),
                diffrax.Tsit5(),
                ts[0],
                ts[-1],
                None,
                W0,
                args=(X, y),
                saveat=diffrax.SaveAt(ts=ts),
                stepsize_controller=diffrax.PIDController(rtol=rtol, atol=rtol * jnp.max(jnp.abs(W0))),
                max_steps=100_000,
            ).ys

        Xj, yj = jnp.asarray(self.X), jnp.asarray(self.y)
        self._hand = lambda r: np.asarray(hand(Xj, yj, self.W0, self.ts, r))

    def np_rhs(self, t, w):
        W = w.reshape(self.p, self.WIDTH)
        U, v = W[:-1], W[-1]
        h = (2.0 / self.m) * ((self.X @ (U @ v) - self.y) @ self.X)
        return np.concatenate([-np.outer(h, v), -(h @ U)[None]], axis=0).ravel()

    def error(self, W):
        M = np.einsum("nir,njr->nij", W, W)
        return (np.abs(M - self.M_ref).max(axis=(1, 2)) / np.abs(self.M_ref).max(axis=(1, 2))).max()

    def contenders(self):
        from scipy.integrate import solve_ivp

        import nqf

        def scipy(method):
            def run(r):
                s = solve_ivp(
                    self.np_rhs,
                    (0.0, self.T1),
                    self.W0.ravel(),
                    method=method,
                    t_eval=self.ts,
                    rtol=r,
                    atol=r * self.atol_scale,
                )
                return s.y.T.reshape(-1, self.p, self.WIDTH)

            return run

        return {
            "nqf": lambda r: nqf.solve_flow(self.data, W0=self.W0, t1=self.T1, ts=self.ts, rtol=r).W,
            "diffrax W-flow (hand)": self._hand,
            "scipy LSODA W-flow": scipy("LSODA"),
            "scipy DOP853 W-flow": scipy("DOP853"),
        }

    def dense_scipy_seconds(self, rtol: float) -> tuple[float, float]:
        """The strawman: scipy RK45 on the dense M-flow with A as an (m, p, p) array (266 MB),
        at `rtol`: (seconds, error)."""
        from scipy.integrate import solve_ivp

        A = np.asarray(self.data.dense())
        M0 = self.W0 @ self.W0.T
        p = self.p

        def rhs(t, x):
            M = x.reshape(p, p)
            H = 4.0 / self.m * np.tensordot(np.tensordot(A, M, axes=([1, 2], [0, 1])) - self.y, A, axes=1)
            HM = H @ M
            return -(HM + HM.T).ravel()

        t0 = time.perf_counter()
        s = solve_ivp(
            rhs, (0.0, self.T1), M0.ravel(), method="RK45", t_eval=self.ts, rtol=rtol, atol=rtol * np.abs(M0).max()
        )
        wall = time.perf_counter() - t0
        M = s.y.T.reshape(-1, p, p)
        err = (np.abs(M - self.M_ref).max(axis=(1, 2)) / np.abs(self.M_ref).max(axis=(1, 2))).max()
        return wall, err


# ---------------------------------------------------------------------------------------------
# power law (DiagonalData)
def _excess_loss_diagonal(lam, y, z, z_star, g):
    """The excess loss of DiagonalData (KKT form, per mode; `nqf.excess_loss`), z (n, p)."""
    p = lam.size
    return (np.sum((lam * (z - z_star)) ** 2, axis=1) + np.sum(np.where(z_star == 0, g * z, 0.0), axis=1)) / p


class Powerlaw:
    target = 1e-5
    T1 = 1e5

    def __init__(self, p: int):
        import nqf

        self.p = int(p)
        self.data = nqf.datasets.powerlaw_data(self.p)
        k = np.arange(1, self.p + 1, dtype=float)
        self.z0 = 1e-6 * k**-1.2
        self.ts = np.concatenate([[0.0], np.geomspace(1.0, self.T1, 100)])
        self.lam, self.y = np.asarray(self.data.lam), np.asarray(self.data.y)
        self.c = 8.0 / self.p
        self.a = self.c * self.lam * self.y  # r_k
        self.C = self.c * self.lam**2
        self.z_star = np.where(self.lam != 0, np.maximum(self.y / np.where(self.lam != 0, self.lam, 1), 0), 0)
        self.g = np.maximum(2.0 / self.p * self.lam * (self.lam * self.z_star - self.y), 0.0)
        self.E_ref = self.closed_form()
        self.keep = self.E_ref >= 1e-10 * self.E_ref[0]

    def closed_form(self):
        """The excess loss from Theorem 6's logistic z(t) in plain numpy (r > 0 for every mode
        here), one saved time at a time: the "plain numpy closed form" peer."""
        out = np.empty(self.ts.size)
        for i, t in enumerate(self.ts):
            e = np.exp(-self.a * t)
            z = self.a * self.z0 / (self.C * self.z0 + (self.a - self.C * self.z0) * e)
            out[i] = _excess_loss_diagonal(self.lam, self.y, z[None], self.z_star, self.g)[0]
        return out

    def error(self, E):
        return np.abs(E[self.keep] / self.E_ref[self.keep] - 1.0).max()

    def _E(self, u):
        return _excess_loss_diagonal(self.lam, self.y, np.exp(u), self.z_star, self.g)

    def contenders(self):
        from scipy.integrate import solve_ivp
        from scipy.sparse import diags

        import nqf

        u0 = np.log(self.z0)
        lam, y, c = self.lam, self.y, self.c

        def rhs(t, u):
            return -c * lam * (lam * np.exp(u) - y)

        def lsoda(r):
            jac = lambda t, u: (-c * lam**2 * np.exp(u))[None, :]  # noqa: E731  (banded: 1 x p)
            s = solve_ivp(
                rhs, (0.0, self.T1), u0, method="LSODA", t_eval=self.ts, rtol=r, atol=r, jac=jac, lband=0, uband=0
            )
            return self._E(s.y.T)

        def bdf(r):
            s = solve_ivp(
                rhs,
                (0.0, self.T1),
                u0,
                method="BDF",
                t_eval=self.ts,
                rtol=r,
                atol=r,
                jac=lambda t, u: diags(-c * lam**2 * np.exp(u)),
            )
            return self._E(s.y.T)

        def cvode(r):
            from scipy.sparse import identity
            from sksundae.cvode import CVODE

            def f(t, u, du):
                du[:] = -c * lam * (lam * np.exp(u) - y)

            def jacfn(t, u, fu, JJ):  # JJ: the diagonal, in the sparsity pattern's order
                JJ[:] = -c * lam**2 * np.exp(u)

            # scikit-sundae's "band" solver takes a dense (p, p) template; "sparse" (SuperLU_MT)
            # with a diagonal pattern is its O(p) way to the diagonal Jacobian
            s = CVODE(
                f,
                method="BDF",
                rtol=r,
                atol=r,
                linsolver="sparse",
                sparsity=identity(self.p, format="csc"),
                jacfn=jacfn,
                max_num_steps=10**6,
            ).solve(self.ts, u0)
            return self._E(s.y)

        out = {
            "nqf stiff (Rodas5P)": lambda r: (
                nqf.solve_flow(
                    self.data, z0=self.z0, t1=self.T1, ts=self.ts, stiff=True, rtol=r, save="loss", max_steps=10**6
                ).excess_loss
            ),
            "scipy LSODA banded": lsoda,
            "scipy BDF sparse": bdf,
        }
        if _have_sundials():
            out["CVODE BDF (diagonal Jacobian)"] = cvode
        return out

    def exact_contenders(self):
        import nqf

        return {
            "nqf exact": lambda: (
                nqf.solve_flow(self.data, z0=self.z0, t1=self.T1, ts=self.ts, method="exact", save="loss").excess_loss
            ),
            "numpy closed form": self.closed_form,
        }


# ---------------------------------------------------------------------------------------------
# coupled commuting data
class Coupled:
    target = 1e-5
    T1 = 1e5

    def __init__(self, p: int, m: int = 100):
        from nqf import glv_equilibrium
        from nqf.data import CommutingData

        self.p, self.m = int(p), int(m)
        rng = np.random.default_rng(0)
        k = np.arange(1, self.p + 1, dtype=float)
        self.Lam = rng.standard_normal((self.m, self.p)) * k**-0.5
        self.y = self.Lam @ (1.0 / k)
        self.data = CommutingData(self.Lam, self.y)
        self.z0 = np.full(self.p, 1e-6)
        self.ts = np.concatenate([[0.0], np.geomspace(1e-2, self.T1, 100)])
        self.z_star = glv_equilibrium(self.data)
        self.E_ref = self.cvode(1e-12)
        self.keep = self.E_ref >= 1e-10 * self.E_ref[0]

    def excess(self, u):
        from nqf import excess_loss

        return excess_loss(self.data, np.exp(u), self.z_star)

    def cvode(self, r):
        """SUNDIALS CVODE, BDF with matrix-free GMRES (Krylov dimension 20) and the analytic
        Jacobian-vector product J v = -(8/m) Lambda^T (Lambda (z * v)) on the p-dim log-z system."""
        from sksundae.cvode import CVODE, CVODEJacTimes

        Lam, y, c = self.Lam, self.y, 8.0 / self.m
        state = {}

        def f(t, u, du):
            du[:] = -c * (Lam.T @ (Lam @ np.exp(u) - y))

        def setup(t, u, fu):
            state["z"] = np.exp(u)

        def jtimes(t, u, fu, v, Jv):
            Jv[:] = -c * (Lam.T @ (Lam @ (state["z"] * v)))

        s = CVODE(
            f,
            method="BDF",
            rtol=r,
            atol=r,
            linsolver="gmres",
            krylov_dim=20,
            jactimes=CVODEJacTimes(setup, jtimes),
            max_num_steps=10**6,
        ).solve(self.ts, np.log(self.z0))
        return self.excess(s.y)

    def error(self, E):
        return np.abs(E[self.keep] / self.E_ref[self.keep] - 1.0).max()

    def contenders(self):
        import nqf

        def run(**kw):
            return lambda r: (
                nqf.solve_flow(
                    self.data, z0=self.z0, t1=self.T1, ts=self.ts, rtol=r, save="loss", max_steps=10**6, **kw
                ).excess_loss
            )

        return {
            "nqf lsoda (reduced)": run(solver="lsoda"),
            "nqf cvode (reduced)": run(solver="cvode"),
            "nqf stiff (Rodas5P, reduced)": run(stiff=True),
            "CVODE BDF GMRES": self.cvode,
        }


def _have_sundials() -> bool:
    try:
        import sksundae  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# closed SGD map vs W-space
class SGD:
    P_IN, M_S, STEPS, LR = 64, 600, 200, 0.05

    def __init__(self, d: int):
        import nqf

        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((self.M_S, self.P_IN)) / np.sqrt(self.P_IN)
        self.y = np.tanh(self.x @ rng.standard_normal(self.P_IN))
        self.data = nqf.feedforward_data(self.y, a=self.x[:, :, None], b=np.ones((self.M_S, 1, 1)))
        self.W0 = 0.01 * rng.standard_normal((self.P_IN + 1, int(d))) / np.sqrt(d)

    def closed(self):
        import nqf

        return nqf.closed_sgd(self.data, W0=self.W0, lr=self.LR, steps=self.STEPS, save_every=self.STEPS).M[-1]

    def wspace(self):
        """The hand-written W-space loop with the MLP gradient: f = X (U v), h = (2/m) X^T delta,
        U -= lr h v^T, v -= lr U^T h (the NQF of a two-layer MLP, Proposition 1)."""
        x, y, lr, m = self.x, self.y, self.LR, self.M_S
        U, v = self.W0[:-1].copy(), self.W0[-1].copy()
        for _ in range(self.STEPS):
            h = (2.0 / m) * ((x @ (U @ v) - y) @ x)
            gU, gv = np.outer(h, v), U.T @ h
            U -= lr * gU
            v -= lr * gv
        W = np.vstack([U, v[None]])
        return W @ W.T
