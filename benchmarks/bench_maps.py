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

Run: `asv run -E existing --quick --bench bench_maps`.
"""

import time

import numpy as np

import nqf

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
