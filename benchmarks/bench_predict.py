"""asv benchmarks: `nqf.predict` (and `nqf.plan`) against training the same module for the same
horizon: `nqf.record` and the user's own hand-written optax loop (issues 23 and 34).

Problems (``NQF_BENCH_PREDICT`` picks them, comma-separated; default the first four):

- ``digits-256``, ``digits-1024``, ``digits-4096``: `eqx.nn.MLP(64, 1, width, depth=1, tanh)`
  without biases on the 1797 sklearn digits (pixels / 16, y = (digit - 4.5) / 4.5), p = 65;
- ``digits10-256``: the same with 10 outputs and one-hot labels (p = 74);
- ``teacher-1024``: a synthetic teacher-student problem, m = 2000 inputs x ~ N(0, I / 256),
  y = tanh(x . u) with |u| = 4, `eqx.nn.MLP(256, 1, 1024, tanh)` (p = 257) (the issue's m = 20 000 is
  ``teacher20k-1024``, opt-in: its record takes minutes).

Every run: init 0.01 x equinox's, full-batch SGD lr 0.05 for `STEPS` steps (t = 50; 300 steps at
lr 0.05, t = 15, for the teacher problems), the loss saved every 10 steps.

Contenders:

- ``predict``: `nqf.predict(..., lr, steps)` at its defaults (extraction, Theorem 2's exact map,
  the asymptote, event times, the departure estimate);
- ``predict_flow``: the gradient-flow prediction to the same horizon (no learning rate);
- ``plan``: `nqf.plan(..., lr=lr)` (phase end, stability edge along the path, init check);
- ``record``: `nqf.record` of the same run (one compiled scan; the optimizer object reused);
- ``user_sgd``: the user's loop: an `eqx.filter_jit` step of `optax.sgd` on the module, one call
  per step, the loss evaluated every 10 steps (what a user writes).

Cold times and peak memory: each contender once in a fresh subprocess (compile included; peak
RSS of that process, and its increase over the process after the data and module are built).
Warm times: best of `REPEAT` interleaved calls in one process (`best_times`).
``track_speedup_*`` = record time / contender time (> 1: the prediction is cheaper than the
training it predicts); ``track_speedup_*_user`` against the hand-written loop.

Run: `asv run -E existing --quick --bench bench_predict`, or `python benchmarks/bench_predict.py`
(prints a table).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

try:
    from ._problems import best_times
except ImportError:  # run as a script
    from _problems import best_times

LR, SCALE, SAVE, REPEAT = 0.05, 0.01, 10, 2
PROBLEMS = {
    "digits-256": dict(kind="digits", width=256, k=1, steps=1000),
    "digits-1024": dict(kind="digits", width=1024, k=1, steps=1000),
    "digits-4096": dict(kind="digits", width=4096, k=1, steps=1000),
    "digits10-256": dict(kind="digits", width=256, k=10, steps=1000),
    "teacher-1024": dict(kind="teacher", width=1024, k=1, steps=300, m=2000),
    "teacher20k-1024": dict(kind="teacher", width=1024, k=1, steps=300, m=20_000),
}
DEFAULT = "digits-256,digits-1024,digits10-256,teacher-1024"
CHOSEN = [s.strip() for s in os.environ.get("NQF_BENCH_PREDICT", DEFAULT).split(",") if s.strip()]
CONTENDERS = ("predict", "predict_flow", "plan", "record", "user_sgd")


def problem(name: str):
    """(net, x, y, steps) of a named problem."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import nqf

    spec = PROBLEMS[name]
    if spec["kind"] == "digits":
        from sklearn.datasets import load_digits

        images, digits = load_digits(return_X_y=True)
        x = images / 16.0
        y = (digits - 4.5) / 4.5 if spec["k"] == 1 else np.eye(10)[digits]
        n_in = 64
    else:
        rng = np.random.default_rng(0)
        n_in = 256
        x = rng.standard_normal((spec["m"], n_in)) / np.sqrt(n_in)
        u = rng.standard_normal(n_in)
        y = np.tanh(x @ (4.0 * u / np.linalg.norm(u)))
    mlp = eqx.nn.MLP(
        n_in, spec["k"], spec["width"], depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False,
        key=jax.random.key(0),
    )  # fmt: skip
    return nqf.Network(mlp), x, y, spec["steps"]


def _user_sgd(net, x, y, steps: int):
    """The hand-written loop a user writes: optax on the module, loss every SAVE steps."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    module = net.with_W(SCALE * net.W)
    opt = optax.sgd(LR)
    xj, yj = jnp.asarray(x), jnp.asarray(y).reshape(len(x), -1)

    def loss(m):
        return jnp.mean((jax.vmap(m)(xj) - yj) ** 2)

    @eqx.filter_jit
    def step(m, state):
        g = eqx.filter_grad(loss)(m)
        u, state = opt.update(g, state, eqx.filter(m, eqx.is_array))
        return eqx.apply_updates(m, u), state

    losses = []
    state = opt.init(eqx.filter(module, eqx.is_array))
    for n in range(steps):
        module, state = step(module, state)
        if (n + 1) % SAVE == 0:
            losses.append(float(loss(module)))
    return np.asarray(losses)


def contenders(net, x, y, steps: int) -> dict:

    import nqf

    sgd = nqf.SGD(LR, steps=steps)  # the one description of the run: predict, plan and record take it
    return {
        "predict": lambda: nqf.predict(net, x, y, sgd, init_scale=SCALE),
        "predict_flow": lambda: nqf.predict(net, x, y, nqf.Flow(LR * steps), init_scale=SCALE),
        "plan": lambda: nqf.plan(net, x, y, sgd, init_scale=SCALE),
        "record": lambda: nqf.record(net, x, y, sgd, save_every=SAVE, init_scale=SCALE),
        "user_sgd": lambda: _user_sgd(net, x, y, steps),
    }


def _cold_child(name: str, contender: str) -> None:
    """In a fresh process: build the problem, then one call; print wall time and peak RSS."""
    import resource
    import warnings

    warnings.simplefilter("ignore")
    net, x, y, steps = problem(name)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    contenders(net, x, y, steps)[contender]()
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"cold_s": wall, "peak_mb": peak / 1024, "increase_mb": (peak - base) / 1024}))


def cold(name: str) -> dict:
    """{contender: {cold_s, peak_mb, increase_mb}}, each from its own fresh process."""
    out = {}
    here = os.path.dirname(os.path.abspath(__file__))
    for c in CONTENDERS:
        code = f"import sys; sys.path.insert(0, {here!r}); import bench_predict as b; b._cold_child({name!r}, {c!r})"
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        out[c] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def warm(name: str) -> dict:
    """{contender: best warm seconds} (after one call each to compile)."""
    import warnings

    warnings.simplefilter("ignore")
    net, x, y, steps = problem(name)
    fns = contenders(net, x, y, steps)
    for fn in fns.values():
        fn()
    return best_times(fns, repeat=REPEAT)[0]


def measure(name: str) -> dict:
    return {"cold": cold(name), "warm": warm(name)}


class PredictVsTraining:
    timeout = 7200
    number = 1
    repeat = (1, 1, 60.0)
    params = CHOSEN
    param_names = ["problem"]

    def setup_cache(self):
        results = {name: measure(name) for name in CHOSEN}
        print(json.dumps(results, indent=1))
        return results

    def track_speedup_predict(self, cache, name):
        """record / predict, both warm."""
        return cache[name]["warm"]["record"] / cache[name]["warm"]["predict"]

    def track_speedup_predict_flow(self, cache, name):
        return cache[name]["warm"]["record"] / cache[name]["warm"]["predict_flow"]

    def track_speedup_predict_user(self, cache, name):
        """user_sgd / predict, both warm."""
        return cache[name]["warm"]["user_sgd"] / cache[name]["warm"]["predict"]

    def track_speedup_predict_cold(self, cache, name):
        """record / predict, each the first call of a fresh process."""
        return cache[name]["cold"]["record"]["cold_s"] / cache[name]["cold"]["predict"]["cold_s"]

    def track_plan_seconds(self, cache, name):
        return cache[name]["warm"]["plan"]

    def track_memory_ratio_predict(self, cache, name):
        """peak RSS increase of predict / that of record (<= 1: predict needs no more memory)."""
        c = cache[name]["cold"]
        return c["predict"]["increase_mb"] / c["record"]["increase_mb"]

    track_speedup_predict.unit = track_speedup_predict_flow.unit = track_speedup_predict_user.unit = "x"
    track_speedup_predict_cold.unit = track_memory_ratio_predict.unit = "x"
    track_plan_seconds.unit = "s"


def _table(results: dict) -> str:
    rows = ["| problem | contender | warm s | cold s | peak MB | increase MB |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        for c in CONTENDERS:
            k = r["cold"][c]
            rows.append(
                f"| {name} | {c} | {r['warm'][c]:.3g} | {k['cold_s']:.3g} | {k['peak_mb']:.0f} | {k['increase_mb']:.0f} |"
            )
    return "\n".join(rows)


if __name__ == "__main__":
    out, path = {}, os.environ.get("NQF_BENCH_OUT")
    for name in CHOSEN:  # each problem printed (and written) as soon as it is measured
        out[name] = measure(name)
        print(_table({name: out[name]}), flush=True)
        if path:
            with open(path, "w") as fh:
                json.dump(out, fh, indent=1)
