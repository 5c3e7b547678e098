"""The departure estimate's cost against `predict`'s at larger data (issue 34, item 1): synthetic
tanh-teacher data, m inputs of dimension n_in, a tanh MLP n_in-1024-1 without biases, init 0.01,
full-batch SGD lr 0.05 for 300 steps (the issue's setting at m = 20000, n_in = 256). Prints, for a
cold and a warm round, `predict(..., estimate_departure=False)`'s wall time and the estimate's
(`_departure.remainder`, s = 64 neurons).

Measured (2 shared cores, load ~5), warm: m = 6000, n_in = 160 (m k p = 9.7e5): predict 1.10 s,
estimate 3.35 s (75 % of the total); m = 20000, n_in = 256 (5.1e6): 21.8 s and 33.0 s (60 %).
With the digits MLP (m k p = 1.2e5, `bench_departure.py`) the estimate is 0.36 s: linear in m k p.

Run: ``python benchmarks/departure_scale.py M N_IN`` (default 6000 160).
"""

import sys
import time
import warnings

import numpy as np

import nqf


def main(m: int, n_in: int, width: int = 1024) -> None:
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from nqf.network import _departure

    warnings.simplefilter("ignore", nqf.NQFWarning)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, n_in)) / np.sqrt(n_in)
    y = np.tanh(x @ rng.standard_normal(n_in) / 2)
    mlp = eqx.nn.MLP(
        n_in, 1, width, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False, key=jax.random.key(0)
    )
    net = nqf.Network(mlp)
    for label in ("cold", "warm"):
        t0 = time.perf_counter()
        pred = nqf.predict(net, x, y, nqf.SGD(0.05, steps=300), init_scale=0.01, estimate_departure=False)
        t1 = time.perf_counter()
        path = _departure.weights_along(pred.trajectory, pred.W0)
        _departure.remainder(net, pred.model, pred.x, pred.y, pred.t, pred.loss, path, 0.05)
        t2 = time.perf_counter()
        print(f"{label}: m k p = {m * net.p}, predict {t1 - t0:.2f} s, estimate (s = 64) {t2 - t1:.2f} s", flush=True)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]] or [6000, 160]
    main(*args)
