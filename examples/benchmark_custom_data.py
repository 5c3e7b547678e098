"""Benchmark the flow on your own data set: `nqf.solve_flow` vs scipy's `solve_ivp` on the same
equation, same tolerances, same output times.

    python examples/benchmark_custom_data.py

"Your data" here is a small phase-retrieval problem, y_mu = a_mu^T M* a_mu with A_mu = a_mu a_mu^T
(rank one), given to nqf as `LowRankData` (never an (m, p, p) tensor) and to scipy as the dense
M-flow M' = Y M + M Y - K(M) M - M K(M) (Eq. E9). Replace `a` and `y` by your own arrays. For a
tracked, repeatable benchmark use the asv suite instead (benchmarks/README.md).
"""

import time

import numpy as np
import scipy.integrate

import nqf

# --- your data set: m sensing vectors a_mu in R^p and labels y_mu -----------------------------
rng = np.random.default_rng(0)
m, p = 60, 12
a = rng.standard_normal((m, p)) / np.sqrt(p)
W_teacher = rng.standard_normal((p, 2)) / np.sqrt(p)
y = np.einsum("mi,ij,mj->m", a, W_teacher @ W_teacher.T, a)

data = nqf.LowRankData(a[:, :, None], np.ones((m, 1)), y)  # A_mu = a_mu a_mu^T
eps, t1, rtol = 1e-6, 400.0, 1e-8
M0 = eps * np.eye(p)
ts = np.linspace(0.0, t1, 101)


def best_of(fn, n=3):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


# --- nqf: the first call compiles (once per shape), later calls only solve -------------------
t0 = time.perf_counter()
sol = nqf.solve_flow(data, M0=M0, t1=t1, ts=ts, rtol=rtol, form="M", dense=False)
t_first = time.perf_counter() - t0
t_nqf, sol = best_of(lambda: nqf.solve_flow(data, M0=M0, t1=t1, ts=ts, rtol=rtol, form="M", dense=False))
M_nqf = np.asarray(sol.M)

# --- scipy on the dense M-flow (Eq. E9) --------------------------------------------------------
A = np.einsum("mi,mj->mij", a, a)  # (m, p, p): fine for a small benchmark
Y = 4.0 / m * np.tensordot(y, A, axes=1)


def rhs(t, x):
    M = x.reshape(p, p)
    K = 4.0 / m * np.tensordot(np.tensordot(A, M, axes=([1, 2], [0, 1])), A, axes=1)
    G = (Y - K) @ M
    return (G + G.T).ravel()


def scipy_solve():
    return scipy.integrate.solve_ivp(rhs, (0.0, t1), M0.ravel(), method="DOP853", t_eval=ts, rtol=rtol, atol=rtol * eps)


t_scipy, res = best_of(scipy_solve)
M_scipy = res.y.T.reshape(-1, p, p)
diff = np.max(np.abs(M_nqf - M_scipy)) / np.max(np.abs(M_scipy))

print(f"data: m = {m}, p = {p}, rank-one A_mu; eps = {eps:g}, t1 = {t1:g}, rtol = {rtol:g}")
print(f"loss {float(sol.loss[0]):.3e} -> {float(sol.loss[-1]):.3e}")
print(
    f"nqf   solve_flow: first call {t_first:.2f} s (compile + solve), then {1e3 * t_nqf:.1f} ms "
    f"({sol.stats['num_steps']} steps)"
)
print(f"scipy solve_ivp (DOP853): {1e3 * t_scipy:.1f} ms ({res.nfev} right-hand sides)")
print(f"speedup scipy / nqf: {t_scipy / t_nqf:.1f}x; max rel difference of M: {diff:.1e}")
assert diff < 1e-5
