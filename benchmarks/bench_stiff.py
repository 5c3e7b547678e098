"""asv benchmarks: the stiff GLV path at very large p (`nqf.stiff`, `solve_flow(..., stiff=True)`).

Problems:

- ``PowerlawMillion``: the Fig. 3 right power law (`nqf.datasets.powerlaw_data(p)`, a
  `DiagonalData`: r_k = k^-0.8, V_k = k^-2) at p = 10^6 (env ``NQF_BENCH_STIFF_P``), z_k(0) =
  1e-6 k^-1.2, integrated to t1 = 10^5 (five decades of time after t = 1) with Kvaerno5 and the
  diagonal Newton solve, rtol = 1e-6, saving only the excess loss at 100 log-spaced times
  (``save="loss"``; 64 of them fall in the fit window). Tracks: the solve time, the step count, the slope of the excess loss
  (rule of `nqf.experiments.fig3_powerlaw.slope_analysis`) relative to the finite-eps prediction,
  and the steps an explicit solver (Tsit5) needs for the same run, measured at p = 10^4 (the
  stiffness comes from the fastest modes k = 1, 2, ..., the same at every p; the step count of
  Tsit5 at p = 10^5 was measured equal within 2%).
- ``GeneralGLV``: a general commuting GLV with non-diagonal competition C' = Lambda^T Lambda of
  rank m: Lambda = G diag(k^-1/2) with G (m, p) standard normal, labels y = Lambda z_T with
  z_T,k = 1/k (a reachable equilibrium), z(0) = 1e-6, to t1 = 10^5 with Kvaerno5 and the
  Woodbury Newton solve (`nqf.stiff.WoodburySolver`, O(p m^2) per Jacobian). p = 10^5, m = 100 by
  default (env ``NQF_BENCH_GLV_P``, ``NQF_BENCH_GLV_M``; measured 253 steps, ~10 min on a
  loaded 2-core VM); the issue's p = 10^6 (~6 GB) took 203 steps and 1628 s on a quiet 2-core VM
  (docs/large-p.md). A dense Newton solve would need a p x p matrix
  (80 GB at p = 10^5).

Set-up compiles with the same shapes first, so ``time_`` numbers are solve times.
"""

import os
import time

import numpy as np

STIFF_P = int(float(os.environ.get("NQF_BENCH_STIFF_P", "1e6")))
GLV_P = int(float(os.environ.get("NQF_BENCH_GLV_P", "1e5")))
GLV_M = int(os.environ.get("NQF_BENCH_GLV_M", "100"))
T1 = 1e5
RTOL = 1e-6
EXPLICIT_P = 10_000


def _powerlaw(p):
    import nqf

    k = np.arange(1, p + 1, dtype=float)
    return nqf.datasets.powerlaw_data(p), 1e-6 * k**-1.2


def _powerlaw_solve(p, t1=T1, solver="kvaerno5", n=100):
    import nqf

    data, z0 = _powerlaw(p)
    ts = np.concatenate([[0.0], np.geomspace(1.0, t1, n)])
    return nqf.solve_flow(
        data, z0=z0, t1=t1, ts=ts, rtol=RTOL, solver=solver, dense=False, save="loss", max_steps=1_000_000
    )


class PowerlawMillion:
    """Stiff GLV solve of the power law at p = NQF_BENCH_STIFF_P (default 10^6)."""

    timeout = 1800
    number = 1
    repeat = 1

    def setup_cache(self):
        _powerlaw_solve(STIFF_P, t1=1.0)  # compile
        t0 = time.perf_counter()
        sol = _powerlaw_solve(STIFF_P)
        wall = time.perf_counter() - t0
        from nqf.experiments.fig3_powerlaw import slope_analysis

        sl = slope_analysis(sol.ts, sol.excess_loss, STIFF_P)
        explicit = _powerlaw_solve(EXPLICIT_P, solver="tsit5")
        return {
            "wall": wall,
            "steps": sol.stats["num_steps"],
            "slope": sl["measured"],
            "slope_rel_error": abs(sl["measured"] - sl["finite_eps_predicted"]) / abs(sl["finite_eps_predicted"]),
            "explicit_steps": explicit.stats["num_steps"],
        }

    def track_solve_seconds(self, r):
        return r["wall"]

    track_solve_seconds.unit = "s"

    def track_steps(self, r):
        return r["steps"]

    track_steps.unit = "steps"

    def track_slope_rel_error_vs_finite_eps(self, r):
        return r["slope_rel_error"]

    track_slope_rel_error_vs_finite_eps.unit = "relative"

    def track_explicit_steps(self, r):
        return r["explicit_steps"]

    track_explicit_steps.unit = "steps"

    def track_explicit_over_stiff_steps(self, r):
        return r["explicit_steps"] / r["steps"]

    track_explicit_over_stiff_steps.unit = "ratio"


def _general(p, m):
    from nqf.data import CommutingData

    rng = np.random.default_rng(0)
    k = np.arange(1, p + 1, dtype=float)
    Lam = rng.standard_normal((m, p)) * k**-0.5
    return CommutingData(Lam, Lam @ (1.0 / k)), np.full(p, 1e-6)


class GeneralGLV:
    """Stiff GLV solve with the Woodbury Newton solve: p = NQF_BENCH_GLV_P, m = NQF_BENCH_GLV_M."""

    timeout = 3600
    number = 1
    repeat = 1

    def setup(self):
        import nqf

        self.nqf = nqf
        self.data, self.z0 = _general(GLV_P, GLV_M)
        self.ts = np.concatenate([[0.0], np.geomspace(1e-2, T1, 100)])
        self.solve(1.0)  # compile

    def solve(self, t1=T1):
        return self.nqf.solve_flow(
            self.data,
            z0=self.z0,
            t1=t1,
            ts=self.ts * (t1 / T1),
            rtol=RTOL,
            stiff=True,
            dense=False,
            save="loss",
            max_steps=100_000,
        )

    def time_solve(self):
        self.solve()

    def peakmem_solve(self):
        self.solve()

    def track_steps(self):
        return self.solve().stats["num_steps"]

    track_steps.unit = "steps"


def _samplewise(m, K=3, seed=0):
    """Orthogonal samples with K modes each (`nqf.BlockData`, p = m K): eigenvalues U(0.5, 2),
    labels U(0.5, 1.5), z(0) = 1e-6 (the sample-wise setting of issue 16: a flow with 3 modes
    per sample at m = 1000)."""
    import nqf

    rng = np.random.default_rng(seed)
    data = nqf.BlockData(rng.uniform(0.5, 2.0, (m, K)), rng.uniform(0.5, 1.5, m))
    return data, np.full(m * K, 1e-6)


class SamplewiseBlock:
    """Stiff GLV solve of BlockData with the block-diagonal Newton solve (`nqf.stiff.BlockSolver`,
    O(p K) per Jacobian) at m = 1e3 and 1e4 (K = 3), to t1 = 1e5, saving the loss only. Before
    the block solve, m = 1000 with stiff=True had not finished after 7 minutes (dense p x p LU);
    measured on a 2-core VM: m = 1e3 in 0.1 s and m = 1e4 (p = 3e4) in 2.5 s, 97 steps each,
    0.55 GB peak RSS (set-up with compilation 3-5 s)."""

    params = [1_000, 10_000]
    param_names = ["m"]
    timeout = 1800
    number = 1
    repeat = 1

    def setup(self, m):
        import nqf

        self.nqf = nqf
        self.data, self.z0 = _samplewise(m)
        self.ts = np.concatenate([[0.0], np.geomspace(1e-2, T1, 100)])
        self.solve(1.0)  # compile

    def solve(self, t1=T1):
        return self.nqf.solve_flow(
            self.data,
            z0=self.z0,
            t1=t1,
            ts=self.ts * (t1 / T1),
            rtol=RTOL,
            stiff=True,
            dense=False,
            save="loss",
            max_steps=100_000,
        )

    def time_solve(self, m):
        self.solve()

    def peakmem_solve(self, m):
        self.solve()

    def track_steps(self, m):
        return self.solve().stats["num_steps"]

    track_steps.unit = "steps"
