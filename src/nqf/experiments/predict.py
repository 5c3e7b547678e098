"""Predict your network: users' own equinox / flax.nnx modules on sklearn's digits, predicted by
`nqf.predict` before training and measured by `nqf.record` (issue 23; the paper's Sec. 7 and
Appendix C: at small initialization a network follows its NQF).

Data: `sklearn.datasets.load_digits` (1797 images, pixels / 16 in [0, 1]); the scalar target
y = (digit - 4.5) / 4.5, or one-hot labels (10 outputs). *Chosen* (the paper has no such
experiment): the models, widths, learning rates, steps and init scales below, set so that each
run covers its NQF's drop. ``quick``: the first 300 images, width 32, 40 % of the steps.

Models (each as a user writes it: `nqf.Network(module)` with ``neurons="auto"``):

- ``MLP``: `eqx.nn.MLP(64, 1, 256, depth=1, tanh)`, no biases; SGD lr 0.05, init 0.01 x the
  module's own initialization;
- ``MLP + biases``: the same with biases (the hidden bias is a neuron parameter, the output bias
  is frozen in the NQF and, by `record`'s default, in training);
- ``MLP, GELU``: the first MLP with GELU units (GELU''(0) != 0: a cubic term, T3 != 0, so the
  network is expected to leave its NQF early, and the departure estimate is put to the test);
- ``MLP, minibatch``: the first MLP with batches of 100 (the prediction is Theorem 2's exact
  minibatch map with the batches `record` uses);
- ``MLP, 10 outputs``: one-hot targets (Corollary 1), width 256, lr 0.1;
- ``attention``: `eqx.nn.MultiheadAttention(4, 8, output_size=1)` reading the 8 image rows as
  tokens, the last token's output; init 0.05;
- ``CNN``: `eqx.nn.Conv2d(1, 16, 3)`, tanh, global sum pool, `eqx.nn.Linear(16, 1)`; lr 0.0015,
  6000 steps, init 0.05, the first 600 images (the sum over 36 patches makes its curvature large:
  at lr 0.003 the map is at its stability edge and `predict` warns; a float64 convolution over
  all 1797 images for 6000 steps would dominate the run time);
- ``flax.nnx MLP``: two `nnx.Linear` (64 -> 256 -> 1), float32 parameters cast to float64;
- ``MLP, cosine schedule + momentum``: the first MLP trained with `nqf.SGD` of optax's
  warmup-cosine schedule (0 -> 0.05 over the first 10 % of the steps, then down to 0) and
  heavy-ball momentum 0.5 (the exact map applies rate lr_n at step n; time t = sum of the rates);
- ``MLP, held-out third``: the first MLP trained on the first two thirds of the images, its test
  loss on the last third predicted (`predict(x_test=, y_test=)`) and measured (`record`);
- ``MLP, cross-entropy (10 classes)``: 10 outputs trained on the softmax cross-entropy of the
  integer digit classes (`nqf.SGD(loss="cross_entropy")`), lr 0.1, targets at the horizon;
- ``MLP depth 2 (multi-layer NQF)``: `eqx.nn.MLP(64, 1, 64, depth=2, tanh)` (quick: width 8), init
  0.3, every layer trained (`record(train="all")`), predicted by the multi-layer NQF (Theorems
  14/15, each layer's structure functions by autodiff);
- ``MLP, Adam``: the first MLP trained with `optax.adam(1e-3)` for the same number of steps
  (not predicted: Adam is not closed on M, Theorem 2; reported against the SGD prediction).

The ignition target is the eigenvalue of M at the end of the NQF's learning phase
(``target="phase_end"``; the least-squares limit of pixel data is reached only at very late
times), for the 10-output MLP at the horizon (its phase ends later).

**Checks** (is nqf right? they set the exit status): per model, the layout round trip
module -> W -> module is exact; the recorded run starts at M = W0 W0^T; the predicted map is
weight-space SGD on the extracted NQF for its first 20 steps (Theorem 2; `nqf.train_w`, an
independent autodiff computation); the structured extraction equals the dense Hessian on 16
inputs; the module minus its NQF at W0 scales as |W|^3 or faster (Theorem 1).

**Claims** (does the prediction hold? criteria fixed before measuring): per SGD model, the
loss gap over the NQF's learning phase <= 0.05 L(0) (the paper: the NQF follows the network at
small initialization, Sec. 7, Figs. 2 and 7); with held-out data the test-loss gap over the
phase <= 0.05 test L(0) (the same criterion); the half-drop time within 5 %; the ignition times
of the growing modes within 5 %; where the network leaves its NQF within the run, the
a-priori departure estimate within a factor 2 of the measured departure (Limitation 3). Adam:
"not expected at this setting".
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from ..data import Network, NQFModel, extract
from ..dynamics import SGD, closed_sgd, train_w
from ..dynamics._losses import as_loss
from ..network import compare, predict
from ._common import check, chosen, claim, prepare_out_dir, sensitivity, write_outputs

NAME = "predict"
TITLE = (
    "Predict your network: equinox / flax.nnx MLP, attention, CNN on sklearn digits, predicted by nqf.predict "
    "and measured by nqf.record (SGD, minibatch, Adam)"
)
SECTION = "Sec. 7 and Appendix C (the NQF follows the network at small initialization), Figs. 2 and 7"
GAP_TOL, TIME_RTOL, DEPART_FACTOR = 0.05, 0.05, 2.0
CHOSEN_SETTINGS = {
    "data": chosen(
        "sklearn digits, pixels / 16, y = (digit - 4.5) / 4.5 or one-hot",
        "no such experiment",
        "a data set that ships inside a package (nothing is downloaded)",
    ),
    "models": chosen(
        "MLP 64-256-1 (quick: width 32; with and without biases, 10 outputs, flax.nnx), 4-head "
        "attention over image rows, Conv2d(1, 16, 3) + sum pool + Linear",
        "no such experiment",
        "the layers of the user report behind issue 23",
    ),
    "optimizers": chosen(
        "SGD (full batch, batch 100), Adam 1e-3",
        "no such experiment",
        "SGD is Theorem 2's exact map; Adam is the common optimizer the NQF does not predict",
    ),
    "target": chosen(
        "ignition at half the eigenvalue at the end of the learning phase (10 outputs: at the horizon)",
        "E19 uses z_k(inf)",
        "the least-squares limit of pixel data is reached only at very late times",
    ),
}


def _models(quick: bool):
    """(name, builder, settings) of each run; builder(key) -> module."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    width = 32 if quick else 256

    def mlp(out=1, bias=False, activation=jnp.tanh):
        return lambda key: eqx.nn.MLP(
            64, out, width, depth=1, activation=activation, use_bias=bias, use_final_bias=bias, key=key
        )

    class Attention(eqx.Module):
        mha: eqx.nn.MultiheadAttention

        def __call__(self, image):
            rows = image.reshape(8, 8)
            return self.mha(rows, rows, rows)[-1, 0]

    class CNN(eqx.Module):
        conv: eqx.nn.Conv2d
        readout: eqx.nn.Linear

        def __call__(self, image):
            return self.readout(jnp.tanh(self.conv(image.reshape(1, 8, 8))).sum(axis=(1, 2)))

    def cnn(key):
        k1, k2 = jax.random.split(key)
        return CNN(eqx.nn.Conv2d(1, 16, 3, use_bias=False, key=k1), eqx.nn.Linear(16, 1, use_bias=False, key=k2))

    def flax_mlp(key):
        from flax import nnx

        class FlaxMLP(nnx.Module):
            def __init__(self, rngs):
                self.hidden = nnx.Linear(64, width, use_bias=False, rngs=rngs)
                self.readout = nnx.Linear(width, 1, use_bias=False, rngs=rngs)

            def __call__(self, x):
                return self.readout(jnp.tanh(self.hidden(x)))

        return FlaxMLP(nnx.Rngs(0))

    s = 0.4 if quick else 1.0  # quick: 40 % of the steps
    sgd = dict(lr=0.05, steps=int(2000 * s), init_scale=0.01, target="phase_end")
    return [
        ("MLP", mlp(), sgd, "sgd"),
        ("MLP + biases", mlp(bias=True), sgd, "sgd"),
        ("MLP, GELU", mlp(activation=jax.nn.gelu), sgd, "sgd"),
        ("MLP, minibatch", mlp(), dict(sgd, batch_size=100), "sgd"),
        (
            "MLP, 10 outputs",
            mlp(out=10),
            dict(lr=0.1, steps=int(1500 * s), init_scale=0.01, target="horizon", onehot=True),
            "sgd",
        ),
        (
            "attention",
            lambda key: Attention(eqx.nn.MultiheadAttention(4, 8, output_size=1, key=key)),
            dict(lr=0.05, steps=int(3000 * s), init_scale=0.05, target="phase_end"),
            "sgd",
        ),
        ("CNN", cnn, dict(lr=0.0015, steps=int(6000 * s), init_scale=0.05, target="phase_end", subset=600), "sgd"),
        ("flax.nnx MLP", flax_mlp, sgd, "sgd"),
        ("MLP, cosine schedule + momentum", mlp(), dict(sgd, schedule="warmup_cosine", momentum=0.5), "sgd"),
        ("MLP, held-out third", mlp(), dict(sgd, holdout=True), "sgd"),
        (
            "MLP, cross-entropy (10 classes)",
            mlp(out=10),
            dict(lr=0.1, steps=int(1500 * s), init_scale=0.01, target="horizon", loss="cross_entropy"),
            "sgd",
        ),
        (
            "MLP depth 2 (multi-layer NQF)",
            lambda key: eqx.nn.MLP(
                64, 1, width // 4, depth=2, activation=jnp.tanh, use_bias=False, use_final_bias=False, key=key
            ),
            dict(lr=0.05, steps=int(2000 * s), init_scale=0.3, target="phase_end", estimate_departure=False),
            "deep",
        ),
        ("MLP, Adam", mlp(), sgd, "adam"),
    ]


def load(quick: bool):
    """(x (m, 64), digits (m,)): sklearn's digits, pixels / 16 (the first 300 when quick)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise ImportError(
            "The 'predict' experiment needs scikit-learn (the digits data set): pip install \"nqf[digits]\"."
        ) from err
    images, digits = load_digits(return_X_y=True)
    n = 300 if quick else len(images)
    return images[:n] / 16.0, digits[:n]


def _training(opts: dict) -> SGD:
    """The `nqf.SGD` of a model's options (popped from `opts`): lr, steps, batch_size, momentum,
    loss and ``schedule="warmup_cosine"`` (optax's warmup-cosine from 0 to lr over the first 10 % of the
    steps, then down to 0)."""
    import optax

    lr, steps = opts.pop("lr"), opts.pop("steps")
    if opts.pop("schedule", None) == "warmup_cosine":
        lr = optax.warmup_cosine_decay_schedule(0.0, lr, steps // 10, steps)
    return SGD(
        lr,
        steps=steps,
        batch_size=opts.pop("batch_size", None),
        momentum=opts.pop("momentum", 0.0),
        loss=opts.pop("loss", "mse"),
    )


def _deep_checks(name, net, pred, run) -> list[dict]:
    """The checks of a deep model (the multi-layer NQF's own correctness is tests/network/test_deep.py's:
    autodiff structure against hand-written layers, exact on a deep linear chain): the layout round
    trip and the recorded start."""
    rng = np.random.default_rng(0)
    W = rng.standard_normal((net.p, net.d)) * (np.asarray(net.W) != 0)  # the block-diagonal pattern
    roundtrip = float(np.abs(np.asarray(net.to_W(net.with_params_W(net.params, W))) - W).max())
    M0 = pred.W0 @ pred.W0.T
    start = float(np.abs(run.M[0] - M0).max() / np.abs(M0).max())
    return [
        check(f"predict {name}: layout round trip module -> W -> module (max abs error)", roundtrip, 0.0),
        check(f"predict {name}: recorded M(0) vs W0 W0^T (relative)", start, 1e-14),
    ]


def _checks(name, net, pred, run, x, y) -> list[dict]:
    """The package-correctness checks of one model (module docstring)."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    W = rng.standard_normal((net.p, net.d))
    roundtrip = float(np.abs(np.asarray(net.to_W(net.with_params_W(net.params, W))) - W).max())
    M0 = pred.W0 @ pred.W0.T
    start = float(np.abs(run.M[0] - M0).max() / np.abs(M0).max())
    model = pred.model
    s = pred.settings
    batches = None if s["batch_indices"] is None else s["batch_indices"][:20]
    k = pred.y.shape[1]
    rows = None if batches is None else (batches[:, :, None] * k + np.arange(k)).reshape(20, -1)
    training = pred.training()  # its optax form runs in weight space: an independent autodiff computation
    lr20 = training.lr[:20] if training.scheduled else training.lr
    ell = as_loss(training.loss, k)
    if ell.k > 1:  # a loss coupling the k outputs takes input batches (closed_sgd expands them to rows)
        rows = batches
    ws = train_w(model, pred.W0, lr=training.lr_max, optimizer=training.optax(), steps=20, batch_indices=rows, loss=ell)
    sgd20 = SGD(lr20, steps=20, momentum=training.momentum, loss=ell)
    closed = closed_sgd(model, sgd20, W0=pred.W0, batch_indices=rows)
    theorem2 = float(np.abs(ws.M[-1] - closed.M[-1]).max() / np.abs(ws.M[-1]).max())
    sub = jax.tree_util.tree_map(lambda a: a[:16], x)
    ysub = np.asarray(y)[:16]
    ysub = ysub[:, 0] if k == 1 else ysub
    structured = extract(net, sub, y=ysub)
    dense = extract(net, sub, y=ysub, structure="dense")
    A = np.asarray((structured.data if isinstance(structured, NQFModel) else structured).dense())
    B = np.asarray((dense.data if isinstance(dense, NQFModel) else dense).dense())
    extract_err = float(np.abs(A - B).max() / np.abs(B).max())
    nqf_model = structured if isinstance(structured, NQFModel) else NQFModel(structured)

    def remainder(scale):
        Wt = jnp.asarray(scale * pred.W0)
        f_mod = np.asarray(jax.vmap(lambda xx: jnp.atleast_1d(net(Wt, xx)))(sub)).reshape(-1)
        f_nqf = np.asarray(nqf_model.outputs_factor(Wt, Wt.sum(axis=1)))
        return float(np.abs(f_mod - f_nqf).max())

    r1, r2 = remainder(4.0), remainder(2.0)
    order = float(np.log2(r1 / r2)) if r2 > 0 else float("inf")
    return [
        check(f"predict {name}: layout round trip module -> W -> module (max abs error)", roundtrip, 0.0),
        check(f"predict {name}: recorded M(0) vs W0 W0^T (relative)", start, 1e-14),
        check(
            f"predict {name}: predicted map vs weight-space SGD on the extracted NQF, 20 steps (Theorem 2, relative M)",
            theorem2,
            1e-10,
        ),
        check(f"predict {name}: structured vs dense extraction on 16 inputs (relative A)", extract_err, 1e-12),
        check(
            f"predict {name}: order of module - NQF at 4 W0 vs 2 W0 (Theorem 1: >= 3; bound on 3 - order)",
            3.0 - order,
            0.2,
        ),
    ]


def _claims(name, cmp, adam: bool, edge: bool = False) -> list[dict]:
    """The claims of one model; `edge`: the prediction warned that its learning rate is at the map's
    stability edge (a departure there is the map's catapult, not the network leaving the NQF)."""
    s = cmp.summary()
    setting, why_prefix = "package-chosen", f"{name}: "
    if adam:
        return [
            claim(
                f"predict {name}: loss gap over the SGD prediction's learning phase <= {GAP_TOL:g} L(0)",
                "At small initialization the network follows its NQF.",
                SECTION,
                metric="max |L_Adam(t) - L_NQF,SGD(t)| / L(0) over t <= phase end (t = lr steps)",
                value=cmp.phase_gap,
                criterion=f"<= {GAP_TOL:g}",
                holds=cmp.phase_gap <= GAP_TOL,
                setting=setting,
                expected=False,
                why=why_prefix + "Adam is not closed on M = W W^T (Theorem 2): nqf predicts SGD, not Adam",
            )
        ]
    half = s["half_drop_time"]
    ign = s["ignition_times"]
    out = [
        claim(
            f"predict {name}: loss gap over the learning phase <= {GAP_TOL:g} L(0)",
            "At small initialization the network follows its NQF.",
            SECTION,
            metric="max |L_network(t) - L_NQF(t)| / L(0) over the NQF's learning phase (whole run if it does not end)",
            value=cmp.phase_gap,
            criterion=f"<= {GAP_TOL:g}",
            holds=cmp.phase_gap <= GAP_TOL,
            setting=setting,
            why=why_prefix + f"phase end {cmp.phase_end:.4g}, measured departure {cmp.departure_time:.4g}",
        ),
        claim(
            f"predict {name}: half-drop time within {TIME_RTOL:.0%}",
            "The NQF predicts when the network learns (sudden learning, Sec. 6).",
            SECTION,
            metric="|t_half,measured - t_half,predicted| / t_half,predicted",
            value=half["relative_error"],
            criterion=f"<= {TIME_RTOL:g}",
            holds=half["relative_error"] <= TIME_RTOL,
            setting=setting,
            expected=bool(np.isfinite(half["predicted"])),
            why=why_prefix
            + (
                f"predicted {half['predicted']:.5g}, measured {half['measured']:.5g}"
                if np.isfinite(half["predicted"])
                else "the predicted loss does not fall half-way to the NQF's final loss within the "
                "horizon: nothing to compare"
            ),
        ),
    ]
    if ign["predicted"]:
        out.append(
            claim(
                f"predict {name}: ignition times within {TIME_RTOL:.0%}",
                "Modes ignite one by one at the predicted times (Eq. E19).",
                SECTION,
                metric="max relative error of the growing modes' ignition times",
                value=ign["max_relative_error"],
                criterion=f"<= {TIME_RTOL:g}",
                holds=ign["max_relative_error"] <= TIME_RTOL,
                setting=setting,
                why=why_prefix + f"{len(ign['predicted'])} growing modes",
            )
        )
    if np.isfinite(cmp.departure_time):
        ratio = cmp.departure_estimate / cmp.departure_time
        no_estimate = not np.isfinite(cmp.departure_estimate)  # predict has none for a loss other than MSE
        out.append(
            claim(
                f"predict {name}: departure estimate within a factor {DEPART_FACTOR:g}",
                "The next terms of the expansion tell when the NQF stops holding (Limitation 3).",
                "Theorem 13, Limitation 3",
                metric="estimated / measured departure time",
                value=ratio,
                criterion=f"in [1/{DEPART_FACTOR:g}, {DEPART_FACTOR:g}]",
                holds=1 / DEPART_FACTOR <= ratio <= DEPART_FACTOR,
                setting=setting,
                expected=not (edge or no_estimate),
                why=why_prefix
                + (
                    "predict makes no departure estimate for a loss other than MSE (its next terms are "
                    "compared in MSE): nothing to compare"
                    if no_estimate
                    else f"estimate {cmp.departure_estimate:.4g}, measured {cmp.departure_time:.4g} "
                    "(the estimate is first order in the remainder)"
                    if not edge
                    else "the learning rate is at the NQF map's stability edge (nqf.HorizonWarning): "
                    "the measured departure is the map's catapult, not the network leaving "
                    "the NQF"
                ),
            )
        )
    return out


def run_model(name, build, opts, optimizer, x, digits, key_seed: int = 0):
    """Predict, record and compare one model; returns (row, checks, claims, comparison)."""
    import jax
    import optax

    opts = dict(opts)
    opts.setdefault("estimate_departure", True)  # the claims test it (predict's default skips m k p > 2e5)
    onehot = opts.pop("onehot", False)
    n = opts.pop("subset", None)
    x, digits = (x, digits) if n is None else (x[:n], digits[:n])
    classes = opts.get("loss") == "cross_entropy"
    y = digits if classes else np.eye(10)[digits] if onehot else (digits - 4.5) / 4.5
    if opts.pop("holdout", False):  # train on the first two thirds, hold out the last third
        cut = 2 * len(y) // 3
        x, y, opts["x_test"], opts["y_test"] = x[:cut], y[:cut], x[cut:], y[cut:]
    module = build(jax.random.key(key_seed))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = Network(module)
        t0 = time.perf_counter()
        training = _training(opts)
        pred = predict(net, x, y, training, **opts)
        t_predict = time.perf_counter() - t0
    warned = sorted({w.category.__name__ for w in caught})
    edge = any("stability edge" in str(w.message) for w in caught)
    t0 = time.perf_counter()
    if optimizer == "adam":
        run = pred.record(optimizer=optax.adam(1e-3), label="adam")
    else:  # a deep network trains every array (its layers are all NQF layers)
        run = pred.record(train="all") if optimizer == "deep" else pred.record()
    t_record = time.perf_counter() - t0
    cmp = compare(pred, run)
    s = cmp.summary()
    row = {
        "model": name,
        "optimizer": optimizer,
        "p": net.p,
        "d": net.d,
        "layout": net.layout,
        "frozen": list(net.frozen),
        "warnings": warned,
        "settings": dict(opts),
        "half_drop_time": s["half_drop_time"],
        "ignition_times": s["ignition_times"],
        "phase_end": cmp.phase_end,
        "phase_gap": cmp.phase_gap,
        "final_loss_nqf": pred.final_loss,
        "final_loss_network": float(run.loss[-1]),
        "departed": bool(np.isfinite(cmp.departure_time)),
        "departure_time": cmp.departure_time,
        "departure_estimated": bool(np.isfinite(cmp.departure_estimate)),
        "stability_edge": edge,
        "departure_estimate": cmp.departure_estimate,
        "departure_estimate_module": cmp.departure_estimate_module,
        "wall_time_predict_s": t_predict,
        "wall_time_record_s": t_record,
        "verdicts": s["verdicts"],
        "test": s.get("test"),
    }
    row["settings"].pop("x_test", None)
    row["settings"].pop("y_test", None)
    checks = (
        []
        if optimizer == "adam"
        else _deep_checks(name, net, pred, run)
        if optimizer == "deep"
        else _checks(name, net, pred, run, pred.x, pred.y)
    )
    return row, checks, _claims(name, cmp, optimizer == "adam", edge) + _test_claims(name, s.get("test")), cmp


def _test_claims(name, test) -> list[dict]:
    """The held-out claim of a model with `x_test` (criterion: the training gap's, `GAP_TOL`, in
    units of the predicted test L(0))."""
    if not test or test.get("test_loss_gap") is None:
        return []
    gap = float(test["test_loss_gap"])
    return [
        claim(
            f"predict {name}: held-out test-loss gap over the learning phase <= {GAP_TOL:g} test L(0)",
            "The NQF gives every input's output, so it predicts the test loss too (Sec. 7, Fig. 7).",
            SECTION,
            metric="max |L_test,network(t) - L_test,NQF(t)| / L_test(0) over the NQF's learning phase",
            value=gap,
            criterion=f"<= {GAP_TOL:g}",
            holds=gap <= GAP_TOL,
            setting="package-chosen",
            why=f"{name}: {test.get('m_test')} held-out images; final test loss {test.get('final_test_loss')}",
        )
    ]


def run(out_dir, quick: bool = False, progress=None) -> dict:
    """Write out_dir/predict.png (predicted vs measured loss of every model) and
    out_dir/predict.json (rows, checks, claims)."""
    t_start = time.perf_counter()
    out = prepare_out_dir(out_dir)
    x, digits = load(quick)
    rows, checks, claims, comparisons = [], [], [], []
    for name, build, opts, optimizer in _models(quick):
        row, c, k, cmp = run_model(name, build, opts, optimizer, x, digits)
        rows.append(row)
        checks += c
        claims += k
        comparisons.append((name, cmp))
        if progress is not None:
            progress(name, {"half_drop_error": row["half_drop_time"]["relative_error"], "phase_gap": row["phase_gap"]})
    fig = _plot(comparisons, quick)
    summary = {
        "name": NAME,
        "title": TITLE,
        "quick": bool(quick),
        "settings": {"m": int(len(x)), "gap_tol": GAP_TOL, "time_rtol": TIME_RTOL, "departure_factor": DEPART_FACTOR},
        "rows": rows,
        "wall_time_s": time.perf_counter() - t_start,
        "chosen_settings": CHOSEN_SETTINGS,
        "checks": checks,
        "claims": claims,
        "sensitivity": sensitivity(
            rows=[], quick=quick, reason="every setting here is package-chosen; no paper setting to compare with"
        ),
    }
    return write_outputs(out, NAME, fig, summary)


def _plot(comparisons, quick):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(20, 10), layout="constrained")
    axes = fig.subplots(3, 4).ravel()
    for ax, (name, cmp) in zip(axes, comparisons):
        pred = cmp.prediction
        ax.plot(pred.t, pred.loss, lw=1.8, label="NQF (predicted)")
        ax.plot(cmp.t, cmp.loss_measured, "o", ms=1.8, label="network (measured)")
        for ti in pred.ignition_times[np.isfinite(pred.ignition_times)]:
            ax.axvline(ti, color="C0", lw=0.6, ls=":")
        if np.isfinite(cmp.departure_time):
            ax.axvline(cmp.departure_time, color="C3", lw=1.0, ls="--", label="departure")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("t = lr x steps")
        ax.legend(fontsize=7)
    fig.suptitle("nqf.predict vs nqf.record on sklearn digits" + (" [quick]" if quick else ""))
    return fig
