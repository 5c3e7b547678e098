"""asv benchmarks: minibatch SGD as an SDE ensemble (`nqf.dynamics.sgd_sde`, issue 24 part 3)
against the exact minibatch-map ensemble (`nqf.closed_sgd_sweep` with one batch seed per run).

Problem: the Fig. 3 data (`fig3_data`, m = p = 5, commuting), M0 = 1e-5 I, batch size 2 without
replacement, horizon t = 30 (two modes ignite), 1000 runs each, only the final state saved. The
map takes t / eta steps; the SDE (log-space form, Heun, default step dt0 = sqrt(eta) / 4) takes
4 t / sqrt(eta) steps (rate 1 here). "Equal weak error": at that dt0 the SDE's discretization error is below
its O(eta) modelling error against the map (measured: E log z_1(8) moves by <= 0.004 between
dt0 = 0.05 and 0.0125 at eta = 0.02-0.04, against a map-SDE bias of 0.033-0.067), so the
ensemble's weak error is the SDE's own, O(eta) (`benchmarks/sde_weak_error.py`). Compilation is
excluded (setup runs both once). `track_speedup` = map-ensemble time / SDE-ensemble time, best
of 2 interleaved rounds in the same process.

Measured (2 CPU cores shared with other jobs; `python -m benchmarks.bench_sde`): SDE 0.99 s vs
maps 5.4 s at eta = 0.01 (5.5x), 2.3 s vs 28 s at eta = 0.002 (12x); an earlier, more loaded run
gave 4.7x and 6.7x. The M-space SDE is slower per step (O(m) operator applications for the Ito
term and the Stratonovich correction): on an MLP NQF with m = 16 it took 2.5-5.5x the time of
the maps (`nqf.dynamics._sde` docstring).

Run: `asv run -E existing --quick --bench bench_sde`.
"""

import numpy as np

import nqf
from nqf.data.datasets import fig3_data
from nqf.dynamics import sgd_sde

from ._problems import best_times

N_RUNS, T1, BATCH, EPS = 1000, 30.0, 2, 1e-5
LRS = [0.01, 0.002]


class _Problem:
    def __init__(self, lr: float):
        self.data = fig3_data()
        self.M0 = EPS * np.eye(self.data.p)
        self.lr = lr
        self.steps = int(round(T1 / lr))

    def maps(self):
        return nqf.closed_sgd_sweep(
            self.data,
            M0=self.M0,
            lr=self.lr,
            steps=self.steps,
            batch_size=BATCH,
            key=np.arange(N_RUNS),
            save_every=self.steps,
            form="M",
        )

    def sde(self):
        return sgd_sde(self.data, self.M0, lr=self.lr, batch_size=BATCH, ts=[0.0, T1], key=0, n_paths=N_RUNS)


class _Lrs:
    params = LRS
    param_names = ["lr"]
    timeout = 900
    number = 1
    repeat = (1, 2, 120.0)

    def setup(self, lr):
        self.problem = _Problem(lr)


class TimeSDEEnsemble(_Lrs):
    def setup(self, lr):
        super().setup(lr)
        self.problem.sde()  # compile

    def time_sde_ensemble(self, lr):
        self.problem.sde()


class TimeMapEnsemble(_Lrs):
    def setup(self, lr):
        super().setup(lr)
        self.problem.maps()  # compile

    def time_map_ensemble(self, lr):
        self.problem.maps()


class Speedup(_Lrs):
    def setup(self, lr):
        super().setup(lr)
        self.problem.sde(), self.problem.maps()  # compile

    def track_speedup(self, lr):
        """Map-ensemble time / SDE-ensemble time (1000 runs each, best of 2 interleaved)."""
        best, _ = best_times({"sde": self.problem.sde, "map": self.problem.maps}, 2)
        return best["map"] / best["sde"]

    track_speedup.unit = "x"


if __name__ == "__main__":  # quick manual measurement
    for lr in LRS:
        pr = _Problem(lr)
        pr.sde(), pr.maps()
        best, _ = best_times({"sde": pr.sde, "map": pr.maps}, 2)
        print(
            f"lr={lr}: sde {best['sde']:.2f} s, map {best['map']:.2f} s, ratio {best['map'] / best['sde']:.1f}x",
            flush=True,
        )
