"""The departure estimate against the departures networks make (issue 34, item 1): a script, not
an asv benchmark (each row trains the module). For each problem: `nqf.predict`'s wall time
without the departure estimate, with it from s = 64 neurons (the default) and from all d
neurons (the previous estimate's cost), cold (first call: compiles included) and warm (second
call); the estimates (s = 64 with its interval, s = d) against `nqf.compare(pred,
pred.record(optax.sgd(lr))).departure_time`; and `init_gap`.

Run: ``NQF_COMPILATION_CACHE=0 python benchmarks/departure_table.py [problem ...]`` (problems:
see `problems`; default all; without the persistent cache "cold" includes every compile).
Prints one JSON line per problem.

Measured (2 cores shared with other jobs, load 3-7, so the wall times are rough; the clean cost
numbers are `bench_departure.py`'s). Departure times are gradient-flow times; "none": the
run stays within `gap_tol` = 0.05 L(0) of the NQF over the horizon; predict warm s without /
with the s = 64 estimate / with the s = d one; init_gap at W0 and at 5 % of the horizon:

| problem (MLP, no biases, SGD) | d | horizon | measured | s = 64 [interval] | s = d | max gap 64 / d | predict warm s | init_gap |
|---|---|---|---|---|---|---|---|---|
| digits 64-d-1 tanh, init 0.01, lr 0.05 | 256 | 100 | none | inf [inf, inf] | inf | 1.5e-4 / 1.6e-4 | 1.9 / 2.2 / 5.5 | 3e-11, 3e-8 |
| same | 1024 | 100 | none | inf [inf, inf] | inf | 3.4e-5 / 4.0e-5 | 1.9 / 1.9 / 15.9 | 2e-11, 1e-7 |
| same, equinox's own init, lr 0.02 | 256 | 50 | 46.1 | inf [28.3, inf] | inf | 0.044 / 0.018 | - | 0.005, 0.011 (warns) |
| digits GELU, init 0.05 | 256 | 100 | 99.5 | inf [inf, inf] | inf | 0.028 / 0.032 | 3.7 / 4.3 / 12.6 | 4e-7, 3e-6 |
| tanh teacher, 2000 x 64 Gaussian, lr 0.2 | 1024 | 200 | none | inf [inf, inf] | inf | 3.0e-5 / 2.8e-5 | - | 2e-12, 3e-10 |
| 6-d-1 tanh, 120 inputs, init 0.02 | 256 | 200 | none | inf [inf, inf] | inf | 1.4e-3 / 1.3e-3 | 0.04 / 0.06 / 0.09 | 3e-10, 7e-4 |
| same | 16 | 200 | 110 | inf (s = d) | inf | 0.024 | 0.05 / 0.12 / - | 1e-9, 7e-4 |
| 6-d-1 tanh + 10 z^2, init 0.2 | 256 | 75 | 1.05 | inf [3.3, inf] | inf | 0.031 / 0.014 | 0.14 / 0.06 / 0.12 | 0.001, 0.026 (warns) |
| test_predict's cubic module | 16 | 75 | 2.45 | 3.3 (s = d) | 3.3 | - | - | 3e-4, 0.015 (warns) |

Hits: 1 of 5 departures (the cubic module at d = 16, within the learning phase); misses: the
late departures (46, 99.5, 110) and the cubic module at d = 256 (1.05: before the first saved
time past the start, at 3.3 the lower end of its interval). The init-size check flags both runs
that leave early (own init, cubic) and none of the small-init runs. The s = 64 maximum gap is
within 4-16 % of the full width's at small init (1.5e-4 vs 1.6e-4, 3.4e-5 vs 4.0e-5) and noisier,
biased up, once the remainder is large (0.044 vs 0.018, 0.031 vs 0.014). ``deep`` (64-256-32-1, two hidden layers) did not finish within 10 minutes
(not a neuron sum: the estimate falls back to the full width) and is not in the table.
"""

import json
import sys
import time
import warnings

import numpy as np


def _digits():
    from sklearn.datasets import load_digits

    images, digits = load_digits(return_X_y=True)
    return images / 16.0, (digits - 4.5) / 4.5


def _mlp(n_in, width, activation, depth=1, seed=0):
    import equinox as eqx
    import jax

    return eqx.nn.MLP(
        n_in,
        1,
        width,
        depth=depth,
        activation=activation,
        use_bias=False,
        use_final_bias=False,
        key=jax.random.key(seed),
    )


def problems():
    """name -> (network, x, y, predict keywords)."""
    import jax
    import jax.numpy as jnp

    import nqf

    x, y = _digits()
    rng = np.random.default_rng(1)
    xt = rng.standard_normal((2000, 64)) / 8.0
    teacher = nqf.Network(_mlp(64, 4, jnp.tanh, seed=7))
    yt = np.asarray(jax.vmap(lambda xx: teacher(np.asarray(teacher.W) * 3.0, xx))(jnp.asarray(xt)))[:, 0]
    base = dict(lr=0.05, steps=2000, init_scale=0.01)
    xs = rng.standard_normal((120, 6)) / np.sqrt(6)  # tests/network/test_predict.py's problem
    ys = np.tanh(xs @ rng.standard_normal(6))
    return {
        "digits256": lambda: (nqf.Network(_mlp(64, 256, jnp.tanh)), x, y, base),
        "digits1024": lambda: (nqf.Network(_mlp(64, 1024, jnp.tanh)), x, y, base),
        "digits256_own_init": lambda: (nqf.Network(_mlp(64, 256, jnp.tanh)), x, y, dict(lr=0.02, steps=2500)),
        "gelu": lambda: (nqf.Network(_mlp(64, 256, jax.nn.gelu)), x, y, dict(base, init_scale=0.05)),
        "small256": lambda: (nqf.Network(_mlp(6, 256, jnp.tanh)), xs, ys, dict(lr=0.05, steps=4000, init_scale=0.02)),
        "deep": lambda: (_deep(), x, y, dict(base, init_scale=0.1)),
        "small16": lambda: (nqf.Network(_mlp(6, 16, jnp.tanh)), xs, ys, dict(lr=0.05, steps=4000, init_scale=0.02)),
        "cubic256": lambda: (nqf.Network(_mlp(6, 256, _cubic)), xs, ys, dict(lr=0.05, steps=1500, init_scale=0.2)),
        "teacher1024": lambda: (nqf.Network(_mlp(64, 1024, jnp.tanh)), xt, yt, dict(base, lr=0.2, steps=1000)),
    }


def _cubic(z):
    import jax.numpy as jnp

    return jnp.tanh(z) + 10.0 * z**2  # test_predict's module with a strong cubic term


def _deep():
    """Two hidden tanh layers 64-256-32-1; the first layer's rows with the second layer's columns
    are the neurons (the NQF layer); the rest is frozen."""
    import jax.numpy as jnp

    import nqf

    mlp = _mlp(64, 256, jnp.tanh, depth=2)
    return nqf.Network(mlp, neurons={"layers[0].weight": 0, "layers[1].weight": 1})


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def row(name, build):

    import nqf

    net, x, y, kw = build()
    kw = dict(kw)
    kw["training"] = nqf.SGD(kw.pop("lr"), steps=kw.pop("steps"))
    out = dict(problem=name, d=net.d, p=net.p, m=len(y))
    warnings.simplefilter("ignore", nqf.NQFWarning)
    for label, extra in (
        ("none", dict(estimate_departure=False)),
        ("s64", {}),
        ("full", dict(departure_neurons=net.d)),
    ):
        cold_pred, cold = timed(lambda extra=extra: nqf.predict(net, x, y, **kw, **extra))
        pred, warm = timed(lambda extra=extra: nqf.predict(net, x, y, **kw, **extra))
        out[f"time_{label}"] = [round(cold, 2), round(warm, 2)]
        if label != "none":
            out[f"estimate_{label}"] = pred.departure_estimate
            out[f"interval_{label}"] = [float(v) for v in pred.departure_interval]
            out[f"gap_max_{label}"] = float(pred.remainder_gap.max())
            out[f"sampling_{label}"] = pred.settings["departure"]["sampling"]
    out["init_gap"] = [float(v) for v in pred.init_gap]
    run, t_rec = timed(lambda: pred.record())
    out["time_record"] = round(t_rec, 2)
    cmp = nqf.compare(pred, run)
    out["measured_departure"] = float(cmp.departure_time)
    out["phase_end"] = float(pred.phase_end)
    out["t1"] = float(pred.t[-1])
    return out


if __name__ == "__main__":
    todo = problems()
    for name in sys.argv[1:] or list(todo):
        print(json.dumps(row(name, todo[name])), flush=True)
