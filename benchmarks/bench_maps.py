"""asv benchmarks: the closed SGD map on (M, mu) (`nqf.closed_sgd`, Theorem 2) against
weight-space SGD (`nqf.train_w`) on the same problem.

Problem: a two-layer MLP's NQF (Eq. E3 via `nqf.feedforward_data`, k = 64 inputs, q = 1 output,
p = 65, rank-2 A), m = 600 samples, minibatch SGD with b = 64 drawn from one shared key, lr 0.05,
1000 steps, small init W0 = 0.01 N(0, 1) / sqrt(d); widths d in {10^2, 10^3, 10^4}. A closed step
costs O(p^3 + b p^2 r) whatever d (r = 2 here); a W-space step adds O(p^2 d). Compilation is
excluded: `setup` runs each simulator once with the same shapes. `track_speedup` times both in
the same process (W-space time / closed time), so it is less sensitive to the machine and its
load than the raw times.

Measured (2-core CPU shared with other jobs): speed-up 1.3x, 6.8x, 47x at d = 10^2, 10^3, 10^4;
closed map ~0.2 s per 1000 steps at every d when the machine is quiet; max relative difference
of M (closed vs W-space) <= 7.4e-16.

`LrSweepCompare` (issue 14): a 64-member learning-rate sweep in ONE compiled call
(`nqf.closed_sgd_sweep`) against 64 calls of the compiled `closed_sgd` (same process, best of 5
interleaved rounds; `track_speedup` = singles time / sweep time), for MLP NQFs of three sizes
(p = k + 1 with k inputs, m samples, batch 32, one shared schedule, d = 100, save every 10
steps, lr = 0.01 .. 0.2 geometric). Measured (2 shared CPU cores; setup_cache prints the times):
8-13x at p = 5, 2.6-2.8x at p = 17, 0.9-1.3x at p = 65 (`LrSweepCompare`'s docstring).

Run: `asv run -E existing --quick --bench bench_maps`.
"""

import sys
import time

import numpy as np

import nqf

from ._problems import best_times

P_IN, M_SAMPLES, BATCH, STEPS, LR = 64, 600, 64, 1000, 0.05
WIDTHS = [100, 1_000, 10_000]


def _problem(d: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M_SAMPLES, P_IN)) / np.sqrt(P_IN)
    teacher = rng.standard_normal(P_IN)
    data = nqf.feedforward_data(np.tanh(x @ teacher), a=x[:, :, None], b=np.ones((M_SAMPLES, 1, 1)))
    W0 = 0.01 * rng.standard_normal((P_IN + 1, d)) / np.sqrt(d)
    batches = nqf.batch_indices(1, M_SAMPLES, BATCH, STEPS)
    return data, W0, batches


def _closed(data, W0, batches):
    return nqf.closed_sgd(data, W0=W0, lr=LR, steps=STEPS, batch_indices=batches, save_every=STEPS)


def _wspace(data, W0, batches):
    return nqf.train_w(data, W0, lr=LR, steps=STEPS, batch_indices=batches, save_every=STEPS)


class _Widths:
    params = WIDTHS
    param_names = ["d"]
    timeout = 600
    number = 1
    repeat = (1, 3, 60.0)

    def setup(self, d):
        self.args = _problem(d)


class TimeClosedSGD(_Widths):
    def setup(self, d):
        super().setup(d)
        _closed(*self.args)  # compile (excluded from the timing)

    def time_closed_sgd(self, d):
        _closed(*self.args)


class TimeWSpaceSGD(_Widths):
    def setup(self, d):
        super().setup(d)
        _wspace(*self.args)  # compile (excluded from the timing)

    def time_wspace_sgd(self, d):
        _wspace(*self.args)


class Speedup(_Widths):
    def setup(self, d):
        super().setup(d)
        self.closed, self.w = _closed(*self.args), _wspace(*self.args)  # compile

    def track_speedup(self, d):
        """W-space time / closed-map time, both measured here (best of 2 each)."""
        best = {}
        for name, run in (("closed", _closed), ("w", _wspace)):
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                run(*self.args)
                times.append(time.perf_counter() - t0)
            best[name] = min(times)
        return best["w"] / best["closed"]

    track_speedup.unit = "x"

    def track_max_relative_error(self, d):
        """max |M_closed - M_w| / max |M_w| over the saved steps (Theorem 2: rounding level),
        from the runs made in `setup`."""
        return float(np.abs(self.closed.M - self.w.M).max() / np.abs(self.w.M).max())

    track_max_relative_error.unit = "relative"


# -- a 64-member learning-rate sweep in one call vs 64 single calls (issue 14) -----------------

SWEEP_B, SWEEP_BATCH, SWEEP_D = 64, 32, 100
SWEEP_LRS = np.geomspace(0.01, 0.2, SWEEP_B)
# p = k + 1 (k inputs): (k, m, steps)
SWEEP_SIZES = {5: (4, 64, 500), 17: (16, 256, 500), 65: (64, 600, 200)}


class _LrSweep:
    def __init__(self, p: int):
        k, m, self.steps = SWEEP_SIZES[p]
        rng = np.random.default_rng(0)
        x = rng.standard_normal((m, k)) / np.sqrt(k)
        self.data = nqf.feedforward_data(np.tanh(x @ rng.standard_normal(k)), a=x[:, :, None], b=np.ones((m, 1, 1)))
        self.W0 = 0.01 * rng.standard_normal((p, SWEEP_D)) / np.sqrt(SWEEP_D)
        self.kw = dict(steps=self.steps, batch_indices=nqf.batch_indices(1, m, SWEEP_BATCH, self.steps), save_every=10)

    def single(self, lr):
        return nqf.closed_sgd(self.data, W0=self.W0, lr=lr, **self.kw)

    def singles(self):
        return [self.single(lr) for lr in SWEEP_LRS]

    def sweep(self):
        return nqf.closed_sgd_sweep(self.data, W0=self.W0, lr=SWEEP_LRS, **self.kw)


class LrSweepCompare:
    """64 compiled `closed_sgd` calls / one 64-member `closed_sgd_sweep` call (an lr sweep),
    best of 5 interleaved rounds in one process, all compiled first.

    Measured (2 CPU cores shared with other jobs, float64; three runs at different loads):
    p = 5 (m = 64, 500 steps): 8.0-13x (7-23 ms against 80-187 ms); p = 17 (m = 256, 500
    steps): 2.6-2.8x (45-83 ms against 115-219 ms); p = 65 (m = 600, 200 steps): 0.9-1.3x
    (~270-300 ms each). Members agree with their single calls to <= 1.3e-15. The sweep removes
    the per-call work (host checks, dispatch, transfers), not the arithmetic, so it pays for
    small problems and breaks even once a call's compute dominates.
    """

    params = [5, 17, 65]
    param_names = ["p"]
    timeout = 900

    def setup_cache(self):
        out = {}
        for p in self.params:
            prob = _LrSweep(p)
            prob.sweep()
            prob.single(SWEEP_LRS[0])  # compile both
            t, res = best_times({"sweep": prob.sweep, "singles": prob.singles}, 5)
            sw, singles = res["sweep"], res["singles"]
            diff = max(float(np.abs(sw.M[i] - s.M).max() / np.abs(s.M).max()) for i, s in enumerate(singles))
            print(
                f"lr sweep p={p}: sweep {t['sweep'] * 1e3:.1f} ms, 64 singles "
                f"{t['singles'] * 1e3:.1f} ms, ratio {t['singles'] / t['sweep']:.2f}, max rel diff "
                f"{diff:.2g}",
                file=sys.stderr,
            )
            if not diff <= 1e-12:  # the members are single calls' answers to rounding
                raise AssertionError(f"sweep members and single calls disagree at p={p}: {diff:.3g}")
            out[p] = {"t": t, "diff": diff}
        return out

    setup_cache.timeout = 900

    def track_speedup(self, cache, p):
        """(time of 64 compiled single calls) / (time of one 64-member sweep)."""
        return cache[p]["t"]["singles"] / cache[p]["t"]["sweep"]

    track_speedup.unit = "ratio"

    def track_rel_diff(self, cache, p):
        """max over members of max |M_sweep - M_single| / max |M_single| (rounding level;
        setup_cache fails above 1e-12)."""
        return cache[p]["diff"]

    track_rel_diff.unit = "relative"
