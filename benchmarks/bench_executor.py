"""asv benchmarks (issue 26): host-solver sweeps through a `concurrent.futures` executor, and the
cost of checkpointing a sweep.

(a) ``ExecutorLSODA``: a 16-member LSODA sweep (coupled `CommutingData`, m = 20, p = 20000,
eps = 1e-6 .. 1e-2, rtol 1e-10, 11 saved times; ~0.3 s a member) run sequentially
(``executor=None``: the loop of `solve_flow` calls) and through a `ProcessPoolExecutor` with 2
spawn-started workers (started and warmed up in `setup`, so worker start-up is not timed; one
member per task). ``track_speedup`` is sequential / pool (best of the interleaved rounds), and
the results are checked bitwise equal first.

(b) ``CheckpointFig3``: the 64-member fig3 eps sweep of bench_sweep.py (GLV form, rtol 1e-10,
201 saved times) in 4 chunks of 16, without a checkpoint, with one (a fresh directory each
call: 4 parts written), and resumed from a complete checkpoint (4 parts read, nothing
computed); and the one-call sweep for reference. ``track_overhead`` is (checkpointed - plain
chunked) / plain chunked.

Run as a plain script for a summary (``PYTHONPATH=src python -m benchmarks.bench_executor``).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import shutil
import sys
import tempfile

import numpy as np

from ._problems import FIG3_RTOL, FIG3_T1, FIG3_TS, best_times

N_MEMBERS = 16
M, P = 20, 20000
HOST_EPS = np.logspace(-6, -2, N_MEMBERS)
HOST_TS = np.linspace(0.0, 200.0, 11)
SWEEP_EPS = np.logspace(-12, -2, 64)
CHUNK = 16


def _host_problem():
    import nqf

    rng = np.random.default_rng(0)
    return nqf.CommutingData(rng.random((M, P)) / np.sqrt(P), rng.standard_normal(M))


def _host_sweep(data, executor=None):
    import nqf

    return nqf.solve_sweep(data, eps=HOST_EPS, t1=200.0, ts=HOST_TS, rtol=1e-10, solver="lsoda", executor=executor)


class ExecutorLSODA:
    timeout = 600
    repeat = 1
    number = 1

    def setup(self):
        self.data = _host_problem()
        self.pool = cf.ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
        # warm the workers (import nqf, first LSODA call) and the main process
        _host_sweep(self.data, self.pool)
        seq, par = _host_sweep(self.data), _host_sweep(self.data, self.pool)
        if not np.array_equal(seq.ys, par.ys):
            raise AssertionError("the pool's sweep differs from the sequential loop")

    def teardown(self):
        self.pool.shutdown()

    def time_sequential(self):
        _host_sweep(self.data)

    def time_process_pool_2(self):
        _host_sweep(self.data, self.pool)

    def track_speedup(self):
        best, _ = best_times(
            {"seq": lambda: _host_sweep(self.data), "pool": lambda: _host_sweep(self.data, self.pool)}, 3
        )
        return best["seq"] / best["pool"]

    track_speedup.unit = "x"


def _fig3_sweep(chunk_size=None, checkpoint=None):
    import nqf
    from nqf.datasets import fig3_data

    return nqf.solve_sweep(
        fig3_data(), eps=SWEEP_EPS, t1=FIG3_T1, ts=FIG3_TS, rtol=FIG3_RTOL, chunk_size=chunk_size, checkpoint=checkpoint
    )


class CheckpointFig3:
    timeout = 600
    repeat = 1
    number = 1

    def setup(self):
        self.tmp = tempfile.mkdtemp()
        self.full = self.tmp + "/full"
        self.ref = _fig3_sweep(CHUNK)  # compiles the chunk program
        _fig3_sweep()  # and the one-call program
        done = _fig3_sweep(CHUNK, self.full)
        if not np.array_equal(done.ys, self.ref.ys):
            raise AssertionError("the checkpointed sweep differs from the chunked one")
        self.n = 0

    def teardown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _fresh(self):
        self.n += 1
        return _fig3_sweep(CHUNK, f"{self.tmp}/run{self.n}")

    def time_one_call(self):
        _fig3_sweep()

    def time_chunked(self):
        _fig3_sweep(CHUNK)

    def time_checkpointed(self):
        self._fresh()

    def time_resume_complete(self):
        _fig3_sweep(CHUNK, self.full)

    def track_overhead(self):
        best, _ = best_times({"plain": lambda: _fig3_sweep(CHUNK), "ckpt": self._fresh}, 5)
        return (best["ckpt"] - best["plain"]) / best["plain"]

    track_overhead.unit = "fraction"


def main() -> None:
    a = ExecutorLSODA()
    a.setup()
    best, _ = best_times({"sequential": a.time_sequential, "pool2": a.time_process_pool_2}, 3)
    a.teardown()
    print(
        f"16-member LSODA sweep (m={M}, p={P}): sequential {best['sequential']:.3f} s, "
        f"ProcessPoolExecutor(2) {best['pool2']:.3f} s, speed-up {best['sequential'] / best['pool2']:.2f}x",
        file=sys.stderr,
    )
    b = CheckpointFig3()
    b.setup()
    best, _ = best_times(
        {
            "one call": b.time_one_call,
            "chunked 4x16": b.time_chunked,
            "checkpointed": b.time_checkpointed,
            "resume (all read)": b.time_resume_complete,
        },
        7,
    )
    b.teardown()
    print(
        "64-member fig3 sweep: "
        + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in best.items())
        + f"; checkpoint overhead {(best['checkpointed'] - best['chunked 4x16']) / best['chunked 4x16']:.1%}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
