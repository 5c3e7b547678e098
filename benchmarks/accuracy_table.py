"""The accuracy a user asks for against the error a solve makes (issue 36, item 5): a script, not
an asv benchmark (each row runs several solves and a tight reference).

For each problem and each asked accuracy a: `nqf.solve_flow(..., accuracy=a)`, its estimate
(``stats["global_error"]``), the rtol it chose, the number of solves, the wall time (warm: the
program compiled by a first call), and the true error against a tight reference, all in the
measure `accuracy` uses: max over the saved times of |x(t) - x_ref(t)| / |x_ref(t)|, x = z
(Euclidean norm) for commuting data, M (Frobenius norm) otherwise.

Problems (those of `benchmarks/_peers.py`):

- ``fig3``: Fig. 3, m = p = 5, W0 = sqrt(1e-5) I, t1 = 250, 201 times, default solver (Tsit5,
  GLV form); reference: Theorem 6 (`nqf.theorem6`).
- ``mlp``: `nqf.datasets.mlp_data(2000, 128)` (p = 129), W0 (129, 4) = sqrt(1e-4) G / sqrt(p),
  t1 = 5, 41 times, default solver (Tsit5, factor form); reference: scipy DOP853 on the W-flow at
  rtol 1e-13 (atol 1e-13 max|W0|).
- ``powerlaw``: `nqf.datasets.powerlaw_data(1000)` (DiagonalData), z0 = 1e-6 k^-1.2, t1 = 1e5,
  101 times (0 and 100 log-spaced from 1), ``stiff=True`` (Rodas5P: Tsit5 needs ~28,500 steps per
  solve on this horizon); reference: Theorem 6's logistic z(t) in numpy.

Run: ``python benchmarks/accuracy_table.py [problem ...]`` (default all). Prints one JSON line
per row. The table measured is in docs/numerics.md.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

ASKED = (1e-4, 1e-6, 1e-8, 1e-10)


def rel_z(z, z_ref) -> float:
    return float((np.linalg.norm(z - z_ref, axis=-1) / np.linalg.norm(z_ref, axis=-1)).max())


def rel_M(M, M_ref) -> float:
    return float((np.linalg.norm(M - M_ref, axis=(-2, -1)) / np.linalg.norm(M_ref, axis=(-2, -1))).max())


def fig3():
    import nqf

    data = nqf.datasets.fig3_data()
    W0, ts = np.sqrt(1e-5) * np.eye(data.p), np.linspace(0.0, 250.0, 201)
    z_ref = np.asarray(nqf.theorem6(data, ts, W0=W0).z)
    return (lambda a: nqf.solve_flow(data, W0=W0, t1=250.0, ts=ts, accuracy=a)), (lambda s: rel_z(s.z, z_ref))


def mlp():
    from scipy.integrate import solve_ivp

    import nqf

    data = nqf.datasets.mlp_data(2000, 128, seed=0)
    p, m, width = data.p, data.m, 4
    X, y = np.ascontiguousarray(np.asarray(data.a)[:, :, 0]), np.asarray(data.y)
    W0 = np.sqrt(1e-4) * np.random.default_rng(1).standard_normal((p, width)) / np.sqrt(p)
    ts = np.linspace(0.0, 5.0, 41)

    def rhs(t, w):  # the W-flow of f = v . (U^T x) (A(x) = 1/2 [[0, x], [x^T, 0]])
        W = w.reshape(p, width)
        U, v = W[:-1], W[-1]
        h = (2.0 / m) * ((X @ (U @ v) - y) @ X)
        return np.concatenate([-np.outer(h, v), -(h @ U)[None]], axis=0).ravel()

    ref = solve_ivp(rhs, (0.0, 5.0), W0.ravel(), "DOP853", t_eval=ts, rtol=1e-13, atol=1e-13 * np.abs(W0).max())
    W = ref.y.T.reshape(-1, p, width)
    M_ref = np.einsum("nir,njr->nij", W, W)
    return (lambda a: nqf.solve_flow(data, W0=W0, t1=5.0, ts=ts, accuracy=a)), (lambda s: rel_M(s.M, M_ref))


def powerlaw():
    import nqf

    data = nqf.datasets.powerlaw_data(1000)
    k = np.arange(1, 1001, dtype=float)
    z0, t1 = 1e-6 * k**-1.2, 1e5
    ts = np.concatenate([[0.0], np.geomspace(1.0, t1, 100)])
    lam, yv = np.asarray(data.lam), np.asarray(data.y)
    r, C = 8.0 / data.p * lam * yv, 8.0 / data.p * lam**2
    t = ts[:, None]
    z_ref = r * z0 / (C * z0 + (r - C * z0) * np.exp(-r * t))  # Theorem 6 (r > 0 for every mode)

    def solve(a):
        return nqf.solve_flow(data, z0=z0, t1=t1, ts=ts, stiff=True, max_steps=10**6, accuracy=a)

    return solve, (lambda s: rel_z(s.z, z_ref))


PROBLEMS = {"fig3": fig3, "mlp": mlp, "powerlaw": powerlaw}


def main(names) -> None:
    for name in names:
        solve, error = PROBLEMS[name]()
        solve(ASKED[0])  # compile
        for a in ASKED:
            t0 = time.perf_counter()
            sol = solve(a)
            wall = time.perf_counter() - t0
            st = sol.stats
            row = {
                "problem": name,
                "asked": a,
                "estimated": st["global_error"],
                "true": error(sol),
                "rtol": st["rtol"],
                "solves": st["accuracy_solves"],
                "seconds": round(wall, 3),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(PROBLEMS))
