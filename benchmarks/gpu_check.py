"""Timings of nqf's JAX paths on the default JAX device (a GPU when JAX has CUDA), as one JSON.

    PYTHONPATH=src python benchmarks/gpu_check.py [--out FILE] [--quick]

Runs with nothing installed beyond a JAX that sees the device (plus nqf's own dependencies); no
device is hard-coded. Each problem is timed twice: the first call (trace + compile + run, in this
process) and the best of a few warm calls, with `jax.block_until_ready` on the results. Problems
(the settings of benchmarks/_peers.py):

- fig3 (m = p = 5, t1 = 250, rtol 1e-10), default solve (GLV, Tsit5) and `method="exact"`;
- the MLP factor form (`mlp_data(2000, 128)`, W (129, 4), t1 = 5, rtol 1e-7);
- the power law (`powerlaw_data(p)`, z0 = 1e-6 k^-1.2, t1 = 1e5, 101 saved times, save="loss")
  at p = 1e6 and 1e7: `method="exact"` and the stiff path (Rodas5P, rtol 1e-7);
- a 64-member eps sweep of fig3 (`solve_sweep`, joint mode);
- `closed_sgd` at d = 1e4 (MLP data p = 65, m = 600, 200 full-batch steps).

`--quick` shrinks the power law to p = 1e4 and 1e5 (a CPU smoke test, ~1 minute); the full run is
sized for a GPU (under 8 minutes). The JSON holds the backend, the device names, JAX's version and,
per problem, first-call and warm seconds plus solver statistics.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import time

import numpy as np


def _ready(out):
    """Wait for any device arrays in `out` (nqf's results are host arrays once returned)."""
    import jax

    jax.tree.map(lambda x: x.block_until_ready() if hasattr(x, "block_until_ready") else x, out)
    return out


def timed(fn, repeat: int = 3):
    """(first-call seconds, best warm seconds, last result) of fn()."""
    t0 = time.perf_counter()
    out = _ready(fn())
    first = time.perf_counter() - t0
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = _ready(fn())
        best = min(best, time.perf_counter() - t0)
    return first, best, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu_check.json", help="JSON output path (default gpu_check.json)")
    ap.add_argument("--quick", action="store_true", help="small power-law sizes (CPU smoke test)")
    args = ap.parse_args(argv)

    import jax

    import nqf

    res = {
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "device_kind": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "nqf": nqf.__version__,
        "python": platform.python_version(),
        "quick": bool(args.quick),
        "problems": {},
    }
    P = res["problems"]

    def record(name, fn, repeat=3, stats=None):
        first, warm, out = timed(fn, repeat)
        P[name] = {"first_s": first, "warm_s": warm}
        if stats is not None:
            P[name].update(stats(out))
        print(f"{name}: first {first:.3f} s, warm {warm:.4f} s", file=sys.stderr, flush=True)
        return out

    steps = lambda s: {"num_steps": int(s.stats["num_steps"])}  # noqa: E731

    fig3 = nqf.datasets.fig3_data()
    W0 = np.sqrt(1e-5) * np.eye(5)
    record("fig3 solve_flow", lambda: nqf.solve_flow(fig3, W0=W0, t1=250.0, rtol=1e-10), 10, steps)
    record("fig3 exact", lambda: nqf.solve_flow(fig3, W0=W0, t1=250.0, method="exact"), 10)

    mlp = nqf.datasets.mlp_data(2000, 128, seed=0)
    Wm = np.sqrt(1e-4) * np.random.default_rng(1).standard_normal((mlp.p, 4)) / np.sqrt(mlp.p)
    record("mlp factor form", lambda: nqf.solve_flow(mlp, W0=Wm, t1=5.0, ts=np.linspace(0, 5, 41), rtol=1e-7), 5, steps)

    ts = np.concatenate([[0.0], np.geomspace(1.0, 1e5, 100)])
    for p in (10**4, 10**5) if args.quick else (10**6, 10**7):
        data = nqf.datasets.powerlaw_data(p)
        z0 = 1e-6 * np.arange(1, p + 1.0) ** -1.2
        ex = record(
            f"powerlaw p={p:.0e} exact",
            lambda data=data, z0=z0: nqf.solve_flow(
                data,
                z0=z0,
                t1=1e5,
                ts=ts,
                method="exact",
                save="loss",
            ),
            2,
        )
        st = record(
            f"powerlaw p={p:.0e} stiff",
            lambda data=data, z0=z0: nqf.solve_flow(
                data,
                z0=z0,
                t1=1e5,
                ts=ts,
                stiff=True,
                rtol=1e-7,
                save="loss",
                max_steps=10**6,
            ),
            1,
            steps,
        )
        keep = ex.excess_loss >= 1e-10 * ex.excess_loss[0]
        P[f"powerlaw p={p:.0e} stiff"]["rel_err_vs_exact"] = float(
            np.abs(st.excess_loss[keep] / ex.excess_loss[keep] - 1).max()
        )

    eps = np.logspace(-12, -2, 64)
    record(
        "fig3 sweep 64",
        lambda: nqf.solve_sweep(fig3, eps=eps, t1=250.0, rtol=1e-10),
        3,
        lambda s: {"num_steps": int(np.max(s.stats["num_steps"])), "mode": s.mode},
    )

    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 64)) / 8.0
    sgd_data = nqf.feedforward_data(np.tanh(x @ rng.standard_normal(64)), a=x[:, :, None], b=np.ones((600, 1, 1)))
    Ws = 0.01 * rng.standard_normal((65, 10**4)) / 100.0
    record("closed_sgd d=1e4", lambda: nqf.closed_sgd(sgd_data, W0=Ws, lr=0.05, steps=200, save_every=200), 5)

    pathlib.Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
