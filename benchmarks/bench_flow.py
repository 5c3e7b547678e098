"""asv benchmarks: nqf's closed-flow solver (`nqf.solve_flow`, diffrax) against
`scipy.integrate.solve_ivp` on the same flow, for the paper's Fig. 3 settings.

Problems (definitions in `_problems.py`):

- fig3: m = p = 5 (`nqf.datasets.fig3_data()`), W0 = sqrt(1e-5) I, t1 = 250, 201 equally spaced
  saved times, rtol = 1e-10. nqf solves the GLV form (its default for commuting data), the dense
  M form and the factor form; scipy solves the dense M-flow (THEORY E9, K(M) by tensordot on the
  (m, p, p) array A) and the same GLV equation in log space, each with DOP853 and RK45.
- powerlaw: m = p = 1000 (`nqf.datasets.powerlaw_data(1000)`), z_k(0) = 1e-6 k^-1.2, M0 = diag(z0),
  200 log-spaced saved times up to t1, rtol = 1e-8. nqf and scipy both solve the log-space GLV
  equation (nqf: default Tsit5; scipy: RK45, and LSODA with the analytic Jacobian). t1 = 1e3 by
  default; the paper's t1 = 1e5 with NQF_BENCH_PL_T1="1e3,1e5" (minutes per solve, see
  README.md). The dense M-flow in scipy is not run at p = 1000 (1e6 states, an 8 GB A tensor).

All times exclude JIT compilation (`setup` runs nqf once with the same shapes first);
`Fig3FirstCall` measures the compile-inclusive first call separately. The `*Compare` classes time
both solvers in one process (`setup_cache`) and report scipy_time / nqf_time (> 1: nqf is faster)
and the largest relative difference between the two answers.
"""

import sys

import numpy as np

from ._problems import (
    FIG3_FORMS,
    FIG3_SCIPY,
    PL_SCIPY,
    PL_T1S,
    Fig3,
    Powerlaw,
    best_times,
    rel_diff_M,
    rel_diff_z,
)

# Answers that differ by more than this (relative) fail the rel_diff benchmark: a broken
# equivalence, not a tolerance effect (observed differences are 1e-10 .. 1e-6).
FIG3_GROSS = 1e-4
PL_GROSS = 1e-3


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# fig3 (m = p = 5)


class Fig3NQF:
    """nqf.solve_flow on fig3, compiled. dense=None is the default call (dense output built lazily
    on first use); dense=False never builds it."""

    params = [FIG3_FORMS, [None, False]]
    param_names = ["form", "dense"]
    timeout = 300

    def setup(self, form, dense):
        self.prob = Fig3()
        sol = self.prob.nqf(form, dense)  # compile + one run, excluded from the timing
        assert sol.form == form, (sol.form, form)

    def time_solve(self, form, dense):
        self.prob.nqf(form, dense)


class Fig3Scipy:
    """scipy.integrate.solve_ivp on fig3: the dense M-flow or the log-space GLV equation."""

    params = [FIG3_SCIPY]
    param_names = ["equation-method"]
    timeout = 300

    def setup(self, variant):
        self.prob = Fig3()

    def time_solve(self, variant):
        self.prob.scipy(variant)


class Fig3FirstCall:
    """First call of nqf.solve_flow on fig3 with empty JAX caches: trace + compile + solve."""

    params = [FIG3_FORMS]
    param_names = ["form"]
    number = 1
    repeat = (1, 3, 60.0)
    warmup_time = 0
    timeout = 300

    def setup(self, form):
        self.prob = Fig3()
        self.prob.nqf(form)  # initialize JAX and the backend; compile once
        import jax

        self.clear_caches = jax.clear_caches
        self.clear_caches()

    def time_first_call(self, form):
        self.clear_caches()  # a fresh trace and compile every call (clearing takes ~ms)
        self.prob.nqf(form)


class _Fig3Timings:
    """Shared `setup_cache` of Fig3Compare and Fig3DenseOverhead (asv runs it once): every nqf
    form (default call and dense=False) and every scipy variant timed in one process, best of 7
    interleaved calls each, nqf compiled first; plus the answers' differences."""

    timeout = 300

    def setup_cache(self):
        prob = Fig3()
        fns = {}
        for form in FIG3_FORMS:
            prob.nqf(form)  # compile (dense=None and dense=False are two programs)
            prob.nqf(form, False)
            fns[form] = lambda form=form: prob.nqf(form)
            fns[form, False] = lambda form=form: prob.nqf(form, False)
        for v in FIG3_SCIPY:
            fns[v] = lambda v=v: prob.scipy(v)
        t, out = best_times(fns, 7)
        for form in FIG3_FORMS:
            _log(
                f"fig3 nqf {form}: {t[form] * 1e3:.2f} ms (dense=False {t[form, False] * 1e3:.2f} "
                f"ms), stats {out[form].stats}"
            )
        for v in FIG3_SCIPY:
            _log(f"fig3 scipy {v}: {t[v] * 1e3:.2f} ms, nfev {out[v].nfev}")
        M_sp = {v: prob.scipy_M(v, out[v]) for v in FIG3_SCIPY}
        diff = {(f, v): rel_diff_M(out[f].M, M_sp[v]) for f in FIG3_FORMS for v in FIG3_SCIPY}
        return {"t": t, "diff": diff}

    setup_cache.timeout = 600


class Fig3Compare(_Fig3Timings):
    """scipy_time / nqf_time and answer differences on fig3 (see `_Fig3Timings`). nqf is the
    default call (dense output kept); `Fig3DenseOverhead` gives the factor dense=False removes."""

    params = [FIG3_FORMS, FIG3_SCIPY]
    param_names = ["nqf_form", "scipy"]

    def track_speedup(self, cache, form, variant):
        """scipy time / nqf time (> 1: nqf faster)."""
        return cache["t"][variant] / cache["t"][form]

    track_speedup.unit = "ratio"

    def track_rel_diff(self, cache, form, variant):
        """max over saved times of max|M_nqf - M_scipy| / max|M_scipy|."""
        d = cache["diff"][(form, variant)]
        if not d <= FIG3_GROSS:
            raise AssertionError(f"nqf {form} and scipy {variant} disagree: rel diff {d:.3g}")
        return d

    track_rel_diff.unit = "relative"


class Fig3DenseOverhead(_Fig3Timings):
    """nqf time with dense output (the default) / time with dense=False, from the same
    `setup_cache` run as Fig3Compare. Multiply a Fig3Compare speedup by it to get the speedup
    of a dense=False solve."""

    params = [FIG3_FORMS]
    param_names = ["nqf_form"]

    def track_dense_overhead(self, cache, form):
        return cache["t"][form] / cache["t"][form, False]

    track_dense_overhead.unit = "ratio"


# ---------------------------------------------------------------------------------------------
# powerlaw (m = p = 1000), log-space GLV


class PowerlawNQF:
    """nqf.solve_flow (default call: GLV form, Tsit5) on the power-law problem, compiled."""

    params = [PL_T1S]
    param_names = ["t1"]
    number = 1
    repeat = (1, 3, 60.0)
    warmup_time = 0
    timeout = 1800

    def setup(self, t1):
        self.prob = Powerlaw()
        self.prob.warm_up()  # compile with t1 = 1 (same shapes), excluded from the timing

    def time_solve(self, t1):
        self.prob.nqf(t1)


class PowerlawScipy:
    """scipy.integrate.solve_ivp on the same log-space GLV equation."""

    params = [PL_T1S, PL_SCIPY]
    param_names = ["t1", "method"]
    number = 1
    repeat = (1, 3, 60.0)
    warmup_time = 0
    timeout = 1800

    def setup(self, t1, method):
        self.prob = Powerlaw()

    def time_solve(self, t1, method):
        self.prob.scipy(method, t1)


class PowerlawCompare:
    """scipy_time / nqf_time and the answer difference on the power-law problem, measured in one
    process (nqf compiled first; best of 5 interleaved calls each for t1 <= 1e3, else one)."""

    params = [PL_T1S, PL_SCIPY]
    param_names = ["t1", "scipy"]
    timeout = 1800

    def setup_cache(self):
        prob = Powerlaw()
        prob.warm_up()
        t_nqf, t_sp, diff = {}, {}, {}
        for t1 in PL_T1S:
            fns = {"nqf": lambda t1=t1: prob.nqf(t1)}
            for method in PL_SCIPY:
                fns[method] = lambda method=method, t1=t1: prob.scipy(method, t1)
            t, out = best_times(fns, 5 if t1 <= 1e3 else 1)  # t1 = 1e3: ~1 s per solve
            t_nqf[t1] = t["nqf"]
            _log(f"powerlaw t1={t1:g} nqf: {t['nqf']:.2f} s, stats {out['nqf'].stats}")
            for method in PL_SCIPY:
                t_sp[t1, method] = t[method]
                diff[t1, method] = rel_diff_z(np.exp(out[method].y.T), out["nqf"].z)
                _log(
                    f"powerlaw t1={t1:g} scipy {method}: {t[method]:.2f} s, nfev "
                    f"{out[method].nfev}, njev {out[method].njev}, rel diff {diff[t1, method]:.3g}"
                )
        return {"t_nqf": t_nqf, "t_scipy": t_sp, "diff": diff}

    setup_cache.timeout = 7200

    def track_speedup(self, cache, t1, method):
        """scipy time / nqf time (> 1: nqf faster)."""
        return cache["t_scipy"][t1, method] / cache["t_nqf"][t1]

    track_speedup.unit = "ratio"

    def track_rel_diff(self, cache, t1, method):
        """max over saved times and modes of |z_nqf - z_scipy| / z_nqf."""
        d = cache["diff"][t1, method]
        if not d <= PL_GROSS:
            raise AssertionError(f"nqf and scipy {method} disagree at t1={t1:g}: rel diff {d:.3g}")
        return d

    track_rel_diff.unit = "relative"
