"""asv benchmarks: the numba GLV kernels (`nqf.kernels`, issue 7) at p = 10^7 against numpy.

Problems (float64, seed 0): dense commuting data Lambda (m = 4, p = 10^7), N(0, 1) / sqrt(p)
entries, labels N(0, 1), z uniform in [0, 1e-3) (u = log z for the log form); and the diagonal
layout m = p = 10^7 (lam N(0, 1), y N(0, 1)). Weight decay gamma = 0.1. Memory: about 1.8 GB
for the dense cases (Lambda 320 MB, the copy baseline 880 MB, numpy temporaries), 0.9 GB diagonal.
The data are passed as raw arrays with ``check=False`` (no per-call finiteness scan of the data).

Cases (`case` parameter): ``dense-z`` / ``dense-log`` (glv_rhs on Lambda (4, p), z or log form),
``diag-z`` / ``diag-log`` (diagonal layout).

Baselines, all in this process:

- ``numpy``: the vectorized expression a user writes (the scipy right-hand side of
  `bench_flow.py`), e.g. ``r = -(8/m) * ((L @ z - y) @ L) - 2 g; out = r * z``, log form
  ``z = np.exp(u)`` first; diagonal ``(-(8/p) * lam * (lam * z - y) - 2 g) * z``. Temporaries
  are allocated per call, as in that code.
- ``numpy_inplace``: the same with every temporary preallocated and updated in place
  (``np.dot(..., out=)``, ``np.multiply(..., out=)``): the best plain numpy can do.
- ``copy``: ``np.copyto(dst, src)`` of an array holding half the bytes the kernel moves, so the
  copy reads + writes exactly `nqf.kernels.bytes_moved(m, p)` bytes: 8 (2 m + 3) p for the dense
  z form (pass 1 reads Lambda, z; pass 2 reads Lambda, z and writes out), 8 (2 m + 2) p in log
  form, 32 p diagonal (lam, y, z in, out). Hardware write-allocate traffic is not counted on
  either side.

`track_speedup_numpy` = numpy time / numba time; `track_speedup_numpy_inplace` likewise;
`track_bandwidth_fraction` = (bytes_moved / numba time) / (bytes_moved / copy time) = copy time /
numba time. All three are measured in one `setup_cache` process, best of `REPEAT` interleaved
calls of each (the machine is shared: the best call is the least disturbed one). `TrackGD`
does the same for `glv_gd` (numba) against a numpy loop of the same map and the JAX backend:
dense m = 4 full-batch GD, 10 steps, and diagonal full batch, 20 steps.

Issue 7's targets for the GLV right-hand side at p = 10^7: numba >= 3x faster than numpy and
>= 50 % of the copy bandwidth. Measured numbers: benchmarks/README.md ("bench_kernels.py").

Run: ``asv run -E existing --quick --show-stderr --bench bench_kernels``, or
``python benchmarks/bench_kernels.py`` for the same table without asv (``NQF_BENCH_KERNEL_P``
sets p, default 10^7).
"""

import os
import time

import numpy as np

from nqf import kernels

P = int(float(os.environ.get("NQF_BENCH_KERNEL_P", "1e7")))
M = 4
GAMMA = 0.1
REPEAT = 7
CASES = ["dense-z", "dense-log", "diag-z", "diag-log"]
GD_CASES = ["dense", "diag"]
GD_STEPS = {"dense": 10, "diag": 20}
GD_LR = {"dense": 0.5, "diag": 0.5}


class Case:
    """Data, buffers and the three implementations of one `case`."""

    def __init__(self, case: str, p: int = P, with_copy: bool = True):
        layout, form = case.split("-")
        self.diag = layout == "diag"
        self.log = form == "log"
        rng = np.random.default_rng(0)
        # raw arrays (no data object: that would hold a second, JAX copy of Lambda), built in
        # place so that set-up does not raise the process's peak memory above the benchmark's
        if self.diag:
            self.L = rng.standard_normal(p)
            self.y = rng.standard_normal(p)
        else:
            self.L = rng.standard_normal((M, p))
            self.L /= np.sqrt(p)
            self.y = rng.standard_normal(M)
        self.m = None if self.diag else M
        self.v = rng.random(p)
        self.v *= 1e-3
        if self.log:
            np.log(self.v, out=self.v)
        self.out = np.empty(p)
        self.p = p
        self.nbytes = kernels.bytes_moved(self.m, p, log=self.log)
        if with_copy:
            half = self.nbytes // 16  # float64 entries: copy reads 8 half + writes 8 half bytes
            self.src = np.ones(half)
            self.dst = np.empty(half)
        # in-place numpy buffers
        self.zbuf = np.empty(p)
        self.dbuf = np.empty(M)
        self.numba()  # compile (or load from the cache) outside the timings

    def numba(self):
        # check=False: no finiteness scan of the (fixed) data per call, as in a solver loop;
        # the state v is still checked (for free, inside pass 1)
        return kernels.glv_rhs(
            self.L, self.v, y=self.y, weight_decay=GAMMA, log=self.log, out=self.out, backend="numba", check=False
        )

    def numpy(self):
        L, y, v = self.L, self.y, self.v
        z = np.exp(v) if self.log else v
        if self.diag:
            r = -(8.0 / self.p) * L * (L * z - y) - 2.0 * GAMMA
        else:
            r = -(8.0 / M) * ((L @ z - y) @ L) - 2.0 * GAMMA
        return r if self.log else r * z

    def numpy_inplace(self):
        L, y, v, out, zb = self.L, self.y, self.v, self.out, self.zbuf
        z = np.exp(v, out=zb) if self.log else v
        if self.diag:
            np.multiply(L, z, out=out)
            out -= y
            out *= L
            out *= -8.0 / self.p
        else:
            np.dot(L, z, out=self.dbuf)
            self.dbuf -= y
            np.dot(self.dbuf, L, out=out)
            out *= -8.0 / M
        out -= 2.0 * GAMMA
        if not self.log:
            out *= z
        return out

    def copy(self):
        np.copyto(self.dst, self.src)


def best_times(fns: dict, repeat: int) -> dict:
    """Best wall time of `repeat` calls of each fn, the calls interleaved (round r calls every fn
    once) so that a change in machine load hits all of them alike."""
    best = dict.fromkeys(fns, np.inf)
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def measure_rhs(case: str, repeat: int = REPEAT) -> dict:
    c = Case(case)
    ref = c.numpy()
    got = c.numba().copy()
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    t = best_times({"numba": c.numba, "numpy": c.numpy, "numpy_inplace": c.numpy_inplace, "copy": c.copy}, repeat)
    return {
        **{f"time_{k}": v for k, v in t.items()},
        "speedup_numpy": t["numpy"] / t["numba"],
        "speedup_numpy_inplace": t["numpy_inplace"] / t["numba"],
        "bandwidth_fraction": t["copy"] / t["numba"],
        "numba_GBps": c.nbytes / t["numba"] / 1e9,
        "copy_GBps": c.nbytes / t["copy"] / 1e9,
        "bytes": c.nbytes,
        "rel_diff": err,
    }


class GDCase:
    def __init__(self, case: str, p: int = P):
        self.diag = case == "diag"
        rng = np.random.default_rng(0)
        if self.diag:
            self.L, self.y = rng.standard_normal(p), rng.standard_normal(p)
        else:
            self.L, self.y = rng.standard_normal((M, p)), rng.standard_normal(M)
            self.L /= np.sqrt(p)
        self.z0 = 1e-3 * rng.random(p)
        self.p = p
        self.steps, self.lr = GD_STEPS[case], GD_LR[case]
        self.run("numba")
        self.run("jax")

    def run(self, backend):
        return kernels.glv_gd(
            self.L,
            self.z0,
            y=self.y,
            lr=self.lr,
            steps=self.steps,
            weight_decay=GAMMA,
            save_every=self.steps,
            backend=backend,
            check=False,
        ).z[-1]

    def numpy(self):
        L, y, z, lr = self.L, self.y, self.z0, self.lr
        for _ in range(self.steps):
            if self.diag:
                h = (4.0 / self.p) * L * (L * z - y) + GAMMA
            else:
                h = (4.0 / M) * ((L @ z - y) @ L) + GAMMA
            z = z * (1.0 - lr * h) ** 2
        return z


def measure_gd(case: str, repeat: int = 3) -> dict:
    c = GDCase(case)
    ref = c.numpy()
    err = float(np.abs(c.run("numba") - ref).max() / np.abs(ref).max())
    t = best_times({"numba": lambda: c.run("numba"), "jax": lambda: c.run("jax"), "numpy": c.numpy}, repeat)
    return {
        **{f"time_{k}": v for k, v in t.items()},
        "speedup_numpy": t["numpy"] / t["numba"],
        "speedup_jax": t["jax"] / t["numba"],
        "rel_diff": err,
    }


# ------------------------------------------------------------------------------------------
# asv classes
# ------------------------------------------------------------------------------------------


class TimeRHS:
    """Raw times of one right-hand side evaluation (compiled in setup)."""

    params = CASES
    param_names = ["case"]
    timeout = 600
    number = 1
    repeat = (3, 7, 60.0)

    def setup(self, case):
        self.c = Case(case)

    def time_numba(self, case):
        self.c.numba()

    def time_numpy(self, case):
        self.c.numpy()

    def time_numpy_inplace(self, case):
        self.c.numpy_inplace()

    def time_copy(self, case):
        self.c.copy()


class PeakmemRHS:
    """Peak resident memory of the process (asv: its maximum RSS) for one evaluation, data
    included (dense: Lambda 320 MB + z, out, work 240 MB; diagonal: 320 MB); numba allocates
    O(m) beyond them, numpy's temporaries add several 80 MB arrays."""

    params = CASES
    param_names = ["case"]
    timeout = 600

    def setup(self, case):
        self.c = Case(case, with_copy=False)

    def peakmem_numba(self, case):
        self.c.numba()

    def peakmem_numpy(self, case):
        self.c.numpy()


class TrackRHS:
    """Ratios measured in one process (`setup_cache`), best of REPEAT interleaved calls."""

    params = CASES
    param_names = ["case"]
    timeout = 1200

    def setup_cache(self):
        return {case: measure_rhs(case) for case in CASES}

    def track_speedup_numpy(self, results, case):
        """numpy (vectorized, with temporaries) time / numba time; target >= 3."""
        return results[case]["speedup_numpy"]

    track_speedup_numpy.unit = "x"

    def track_speedup_numpy_inplace(self, results, case):
        """numpy (preallocated, in place) time / numba time."""
        return results[case]["speedup_numpy_inplace"]

    track_speedup_numpy_inplace.unit = "x"

    def track_bandwidth_fraction(self, results, case):
        """(bytes_moved / numba time) / (bytes copied / copy time), same bytes; target >= 0.5."""
        return results[case]["bandwidth_fraction"]

    track_bandwidth_fraction.unit = "fraction"

    def track_rel_diff(self, results, case):
        """max |numba - numpy| / max |numpy| (rounding level)."""
        return results[case]["rel_diff"]

    track_rel_diff.unit = "relative"


class TimeGD:
    params = GD_CASES
    param_names = ["case"]
    timeout = 600
    number = 1
    repeat = (1, 3, 60.0)

    def setup(self, case):
        self.c = GDCase(case)

    def time_numba(self, case):
        self.c.run("numba")

    def time_jax(self, case):
        self.c.run("jax")

    def time_numpy(self, case):
        self.c.numpy()


class TrackGD:
    params = GD_CASES
    param_names = ["case"]
    timeout = 1200

    def setup_cache(self):
        return {case: measure_gd(case) for case in GD_CASES}

    def track_speedup_numpy(self, results, case):
        """numpy loop time / numba `glv_gd` time (same steps, same map)."""
        return results[case]["speedup_numpy"]

    track_speedup_numpy.unit = "x"

    def track_speedup_jax(self, results, case):
        """JAX backend time / numba backend time of `glv_gd`."""
        return results[case]["speedup_jax"]

    track_speedup_jax.unit = "x"

    def track_rel_diff(self, results, case):
        return results[case]["rel_diff"]

    track_rel_diff.unit = "relative"


if __name__ == "__main__":
    import sys

    cases = sys.argv[1:] or CASES + GD_CASES
    for case in cases:
        r = measure_gd(case) if case in GD_CASES else measure_rhs(case)
        print(case, {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
