"""The departure estimate against the departures networks make (issue 34, item 1): a script, not
an asv benchmark (each row trains the module). For each problem: `nqf.predict`'s wall time
without the departure estimate, with it from s = 64 neurons (the default) and from all d
neurons (the previous estimate's cost), cold (first call: compiles included) and warm (second
call); the estimates (s = 64 with its interval, s = d) against `nqf.compare(pred,
pred.record(optax.sgd(lr))).departure_time`; and `init_gap`.

Run: ``NQF_COMPILATION_CACHE=0 python benchmarks/departure_table.py [problem ...]`` (problems:
see `problems`; default all; without the persistent cache "cold" includes every compile).
Prints one JSON line per problem.
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
    import optax

    import nqf

    net, x, y, kw = build()
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
    run, t_rec = timed(lambda: pred.record(optax.sgd(kw["lr"])))
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
