"""Profile of each structured right-hand side: time per evaluation, flops and bytes against the
structure's minimum, and the achieved bandwidth against a numpy copy on the same machine.

Not an asv file (asv tracks the solves, `bench_peers.py`); run it as a script:

    PYTHONPATH=src python benchmarks/profile_rhs.py [--quick]

It prints a markdown table (the one in docs/performance.md, "Right-hand sides against the
structure's minimum") and writes `rhs_profile.json` to the current directory.

Counted per evaluation (float64, 8 bytes):

- "minimum bytes": the data the structure needs (stored factors, features, labels) plus the
  state read and the velocity written; every right-hand side must read its data at least once.
- "flops": the multiply-adds of the structured products (2 flops each), as in the class
  docstrings of `nqf.data`.
- bandwidth: minimum bytes / time, against the copy bandwidth (bytes read + written / time of
  `np.copyto` on a 400 MB array): the fraction is the distance to the memory-traffic bound for
  the large cases; small cases live in cache and are bound by per-call work instead.
"""

from __future__ import annotations

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import nqf
from nqf import flow

QUICK = "--quick" in sys.argv


def best(fn, repeat: int) -> float:
    fn()
    out = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def copy_bandwidth(nbytes: int = 400 * 2**20) -> float:
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    return 2 * nbytes / best(lambda: np.copyto(b, a), 7)


def jax_rhs(rhs, state, args, repeat):
    f = jax.jit(lambda s, a: rhs(0.0, s, a))
    state = jax.device_put(state)
    return best(lambda: f(state, args).block_until_ready(), repeat)


def cases():
    rng = np.random.default_rng(0)
    small = 1 if QUICK else 0
    out = []

    # dense factor form: A (m, p, p), F (p, r)
    m, p, r = (20, 40, 4) if small else (100, 200, 4)
    A = rng.standard_normal((m, p, p)) / p
    data = nqf.DenseData(0.5 * (A + np.swapaxes(A, 1, 2)), rng.standard_normal(m))
    out.append(
        dict(
            name=f"DenseData, factor form (m={m}, p={p}, r={r})",
            run=lambda d=data, p=p, r=r: (flow.rhs_factor, 0.01 * rng.standard_normal((p, r)), (d, 0.0, None)),
            flops=4 * m * p * p * r,
            bytes=8 * (m * p * p + m + 2 * p * r),
        )
    )

    # feed-forward (MLP) factor form: X (m, k), W (k + 1, r)
    m, k, r = (200, 32, 4) if small else (2000, 128, 4)
    ff = nqf.datasets.mlp_data(m, k)
    p = ff.p
    out.append(
        dict(
            name=f"FeedForwardData (MLP), factor form (m={m}, p={p}, r={r})",
            run=lambda d=ff, p=p, r=r: (flow.rhs_factor, 0.01 * rng.standard_normal((p, r)), (d, 0.0, None)),
            flops=2 * 2 * m * k * r + 2 * 2 * k * r,
            bytes=8 * (m * k + m + 2 * p * r),
        )
    )

    # the same data in the generic low-rank layout, what FeedForwardData replaced:
    # A = 1/2 [[0, x], [x^T, 0]] = 1/4 (u u^T - v v^T), u = [x; 1], v = [x; -1]: U (m, p, 2)
    X = np.asarray(ff.a)[:, :, 0] if np.ndim(ff.a) == 3 else np.asarray(ff.a)
    ones = np.ones((m, 1))
    U = np.stack([np.hstack([X, ones]), np.hstack([X, -ones])], axis=2)
    lr = nqf.LowRankData(U, np.tile([0.25, -0.25], (m, 1)), np.asarray(ff.y))
    out.append(
        dict(
            name="LowRankData (the same MLP data, U (m, p, 2)), factor form",
            run=lambda d=lr, p=p, r=r: (flow.rhs_factor, 0.01 * rng.standard_normal((p, r)), (d, 0.0, None)),
            flops=2 * 2 * m * p * 2 * r,
            bytes=8 * (m * p * 2 + 2 * m + m + 2 * p * r),
        )
    )

    # commuting data, GLV form: Lambda (m, p)
    m, p = (20, 10**4) if small else (100, 10**5)
    Lam = rng.standard_normal((m, p)) * np.arange(1, p + 1.0) ** -0.5
    cd = nqf.CommutingData(Lam, Lam @ (1.0 / np.arange(1, p + 1.0)))
    out.append(
        dict(
            name=f"CommutingData, GLV form (m={m}, p={p})",
            run=lambda d=cd, p=p: (flow.rhs_glv, np.full(p, np.log(1e-6)), (d, 0.0, jnp.ones(p, bool))),
            flops=4 * m * p,
            bytes=8 * (m * p + m + 2 * p),
        )
    )

    # commuting data, reduced GLV form (m coordinates)
    u0 = jnp.full(p, np.log(1e-6))
    out.append(
        dict(
            name=f"CommutingData, reduced GLV form (m={m}, p={p})",
            run=lambda d=cd, p=p, m=m: (flow.rhs_glv_reduced, np.zeros(m), (d, 0.0, jnp.ones(p, bool), u0, 0.0)),
            flops=4 * m * p,
            bytes=8 * (m * p + 2 * m + p),
        )
    )

    # diagonal data, GLV form
    p = 10**5 if small else 10**6
    dd = nqf.datasets.powerlaw_data(p)
    out.append(
        dict(
            name=f"DiagonalData, GLV form (p={p})",
            run=lambda d=dd, p=p: (flow.rhs_glv, np.full(p, np.log(1e-6)), (d, 0.0, jnp.ones(p, bool))),
            flops=4 * p,
            bytes=8 * 4 * p,
        )
    )
    return out


def main():
    bw = copy_bandwidth()
    rows = []
    for case in cases():
        rhs, state, args = case["run"]()
        t = jax_rhs(rhs, state, args, 5 if QUICK else 30)
        rows.append(
            dict(
                name=case["name"],
                seconds=t,
                flops=case["flops"],
                min_bytes=case["bytes"],
                gflops=case["flops"] / t / 1e9,
                gbytes_s=case["bytes"] / t / 1e9,
                copy_fraction=case["bytes"] / t / bw,
            )
        )
    print(f"numpy copy bandwidth: {bw / 1e9:.1f} GB/s (read + write)\n")
    print("| right-hand side | time | flops | minimum bytes | GFlop/s | GB/s | of copy bandwidth |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['name']} | {r['seconds'] * 1e6:.0f} us | {r['flops']:.3g} | {r['min_bytes'] / 1e6:.3g} MB "
            f"| {r['gflops']:.2f} | {r['gbytes_s']:.2f} | {100 * r['copy_fraction']:.0f} % |"
        )
    with open("rhs_profile.json", "w") as f:
        json.dump({"copy_bandwidth_bytes_per_s": bw, "rows": rows, "backend": jax.default_backend()}, f, indent=1)


if __name__ == "__main__":
    main()
