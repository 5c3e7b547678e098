"""Predict a deep MLP's training with the multi-layer NQF (Theorem 14) and measure it.

    python examples/predict_deep_network.py                      # teacher-student, depth 2 (quick)
    python examples/predict_deep_network.py digits 3 0.1 0.05 3000  # problem depth init_scale lr steps

`nqf.Network(mlp)` recognises the depth-2 / depth-3 `eqx.nn.MLP` as a chain of Linear layers;
`nqf.predict` solves its multi-layer NQF (structure functions derived from the module by
autodiff) and `pred.record(train="all")` trains every array of the module (optax SGD) from
the same start; `nqf.compare` puts them side by side (loss, half-drop time, phase end, ignition
times of every layer's modes).
"""

import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp

import nqf


def data(problem: str):
    if problem == "digits":
        from sklearn.datasets import load_digits

        images, digits = load_digits(return_X_y=True)
        return images / 16.0, (digits - 4.5) / 4.5, 128
    from nqf.experiments import fig8  # teacher-student: 200 Gaussian inputs, a 4-layer tanh teacher

    x, y, _, _ = fig8.make_data("mlp")
    return x, y, 32


def main(problem="teacher", depth=2, init_scale=0.1, lr=0.05, steps=2000):
    x, y, width = data(problem)
    mlp = eqx.nn.MLP(
        x.shape[1],
        1,
        width,
        depth=depth,
        activation=jnp.tanh,
        use_bias=False,
        use_final_bias=False,
        key=jax.random.key(0),
    )
    net = nqf.Network(mlp)  # a DeepNetwork: one NQF layer per pair of Linear layers (+ a readout)
    t0 = time.perf_counter()
    pred = nqf.predict(net, x, y, nqf.SGD(lr, steps=steps), init_scale=init_scale)
    t_pred = time.perf_counter() - t0
    t0 = time.perf_counter()
    run = pred.record(train="all")  # optax.sgd(lr) on every array of the module
    t_rec = time.perf_counter() - t0
    s = nqf.compare(pred, run).summary()
    print(f"{problem} depth {depth} init {init_scale} lr {lr} steps {steps}: {net}")
    print(f"  init error per layer {pred.layer_init_error}, predict {t_pred:.1f} s, record {t_rec:.1f} s")
    print(
        f"  half-drop predicted {s['half_drop_time']['predicted']:.4g} measured {s['half_drop_time']['measured']:.4g}"
    )
    print(f"  phase end predicted {s['phase_end']:.4g} measured {s['phase_end_measured']:.4g}")
    print(
        f"  loss gap over the phase {s['phase_gap']:.3g} L(0); departure (gap > 0.05 L(0)) at t = {s['departure_time']:.4g}"
    )
    print(f"  final loss predicted {pred.loss[-1]:.4g} measured {run.loss[-1]:.4g} (L(0) = {pred.loss[0]:.4g})")
    for layer in s["layers"]:
        print(
            f"  layer {layer['layer']} ignition predicted {[round(v, 3) for v in layer['predicted']]} "
            f"measured {[round(v, 3) for v in layer['measured']]}"
        )


if __name__ == "__main__":
    args = sys.argv[1:]
    kinds = (str, int, float, float, int)
    main(*(k(a) for k, a in zip(kinds, args)))
