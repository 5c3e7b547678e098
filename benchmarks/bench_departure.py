"""asv benchmarks: the cost of `nqf.predict`'s departure estimate against the prediction itself, at
widths 256 and 1024 (issue 34, item 1: the estimate's cost must not grow with the width).

Problem: `bench_predict`'s (an `eqx.nn.MLP(64, 1, d, depth=1, tanh)` without biases on the 1797
sklearn digits, init 0.01 x equinox's, full-batch SGD lr 0.05, 2000 steps). Contenders, warm
(compiled programs reused), best of 3 interleaved (`best_times`):

- ``predict``: `nqf.predict(..., estimate_departure=False)` (extraction, the exact map, the
  asymptote, ignition/drop times, the init-size check);
- ``departure``: the estimate alone (`_departure.remainder`) from s = 64 neurons (the default);
- ``departure_full``: the same at s = d (the previous estimate's cost).

``track_share`` = departure / (predict + departure): the estimate's share of `predict`'s time.
`setup_cache` also times the first (cold) call of each in the process (with
``NQF_COMPILATION_CACHE=0``: every compile included).

Run: `asv run -E existing --quick --bench bench_departure`, or `python benchmarks/bench_departure.py`.
"""

import time

import nqf

try:
    from ._problems import best_times
except ImportError:  # run as a script
    from _problems import best_times

LR, STEPS, SCALE = 0.05, 2000, 0.01
WIDTHS = (256, 1024)


def _contenders(width):
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    from sklearn.datasets import load_digits

    from nqf.network import _departure

    images, digits = load_digits(return_X_y=True)
    x, y = images / 16.0, (digits - 4.5) / 4.5
    mlp = eqx.nn.MLP(
        64, 1, width, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False, key=jax.random.key(0)
    )
    net = nqf.Network(mlp)
    kw = dict(training=nqf.SGD(LR, steps=STEPS), init_scale=SCALE)
    pred = nqf.predict(net, x, y, estimate_departure=False, **kw)
    path = _departure.weights_along(pred.trajectory, pred.W0)

    def departure(s):
        return lambda: _departure.remainder(net, pred.model, pred.x, pred.y, pred.t, pred.loss, path, 0.05, neurons=s)

    return {
        "predict": lambda: nqf.predict(net, x, y, estimate_departure=False, **kw),
        "departure": departure(64),
        "departure_full": departure(width),
    }


class DepartureCost:
    timeout = 1800
    number = 1
    repeat = (1, 2, 120.0)
    params = list(WIDTHS)
    param_names = ["width"]

    def setup_cache(self):
        out = {}
        for width in WIDTHS:
            fns = _contenders(width)
            cold = {}
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                cold[name] = time.perf_counter() - t0
            warm, _ = best_times(fns, repeat=3)
            print(
                f"d = {width}: cold",
                {k: round(v, 2) for k, v in cold.items()},
                "warm",
                {k: round(v, 3) for k, v in warm.items()},
            )
            out[width] = cold, warm
        return out

    def track_share(self, cache, width):
        """departure / (predict + departure), warm, s = 64."""
        warm = cache[width][1]
        return warm["departure"] / (warm["predict"] + warm["departure"])

    def track_share_full(self, cache, width):
        warm = cache[width][1]
        return warm["departure_full"] / (warm["predict"] + warm["departure_full"])

    track_share.unit = track_share_full.unit = "fraction"


if __name__ == "__main__":
    cache = DepartureCost().setup_cache()
    for w in WIDTHS:
        print(
            w,
            "share s=64",
            round(DepartureCost().track_share(cache, w), 3),
            "full",
            round(DepartureCost().track_share_full(cache, w), 3),
        )
