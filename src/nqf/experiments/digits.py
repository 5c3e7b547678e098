"""The idea of Fig. 7 of the paper (Appendix C) on real data that ships inside a package:
scikit-learn's 8x8 digits, odd vs even. Each module and its NQF are trained side by side with Adam,
full batch, from the same small init; train-loss and test-accuracy curves of both are compared.

The paper uses 4000 MNIST images (28 x 28), which cannot be downloaded at run time here;
`sklearn.datasets.load_digits` (1797 images, 8 x 8, 17 gray levels) ships inside scikit-learn (the
``digits`` extra: ``pip install "nqf[digits]"``).

Data: labels y = +1 for odd digits, -1 for even; a fixed random split (numpy rng 0 permutation)
into 1200 training and 597 test images; pixels = gray level / 16, in [0, 1] like the paper's MNIST
pixels (the first version standardized every pixel, |x| ~ 7.8 instead of ~3.9: see the outcome).

Models (`nqf.modules`; the paper's sizes scaled from 28 x 28 to 8 x 8 where marked *chosen*):

- MLP: 64 -> 20 tanh -> 1, no bias (paper: hidden 20, tanh, no bias), input = the 64 pixels;
- CNN: one layer, 20 kernels 4 x 4, stride 1, no padding, tanh, global sum pool (Proposition 16;
  *chosen*: paper 50 channels 15 x 15 on 28 x 28; the kernel keeps the paper's ~half-image size,
  and 20 instead of 50 channels keep the full run within ~1 minute on 2 CPU cores, where the
  float64 convolution dominates the run time);
- attention: query-key heads with a fixed readout (Proposition 3), 10 heads (paper), tokens = the
  8 image rows (D = 8 pixels each, N = 8 tokens; paper: 28 rows of 28), d_k = 8 (*chosen*: paper
  32 = D + 4 on 28 x 28), query = the last token (the bottom row, as `fig2`'s query), readout
  c ~ N(0, I_8 / (10 r)^2) with r = `ROW_RMS` = 1.369 the rms norm of a training image row (rng 1;
  *chosen* so that the output range of the 10 heads, 10 c^T x_n, is O(1) like the labels; the
  paper says only "a fixed readout vector").

Training (paper): MSE, Adam (b1 0.9, b2 0.999, 1e-8), lr 1e-3, full batch; W0 ~ N(0, eps^2)
(rng 3) shared by module and NQF, eps = 0.01 (paper) and 0.1 (*chosen*, larger, for contrast).
The paper does not give the number of steps; *chosen*: 1000 (``quick``: 100), saved every 10 (5).

Measured per model x eps:

- ``max_train_loss_gap`` = max over saved steps of |L_module(t) - L_NQF(t)| / L_module(0) (train MSE);
- the NQF's learning phase, defined from the NQF alone before comparing (issue 15): the saved
  steps until L_NQF <= L_LS + 0.02 L(0) (``nqf_phase_end_step``; the whole run if never), L_LS the
  closed-form least-squares optimum of the NQF's linear feature model (`least_squares_loss`: the
  MLP's NQF is linear in the pixels, the CNN's in the patch sum s(X), the attention's in
  x_q u^T); ``max_train_loss_gap_nqf_phase`` over it;
- ``tracking_horizon_step`` = the last saved step up to which the gap stayed <= 0.05;
- test accuracy (fraction of test images with sign(F) = y) of both models at every saved step,
  their final values and ``max_test_accuracy_gap``;
- ``gd_mlp``: the MLP and its NQF under plain full-batch GD (lr 0.03, eps = 0.01, 10000 steps):
  is the departure after the NQF's phase specific to Adam?

Checks (package correctness, eps = 0.01): the module - NQF output gap at init is O(eps^4) (order
3.995 / 3.997 / 4.000); the NQF's loss never goes below L_LS; the held-out outputs of `nqf.predict`
/ `nqf.record` (GD, below) equal those of the NQF's / the module's own GD loop (`train_pair`) to
1e-10 (measured: 7e-16 / 0).

Claim (Fig. 7, test accuracy; issue 35): `nqf.predict(x_test=, y_test=)` of the MLP at eps = 0.01
under full-batch GD (lr 0.03, 1000 steps: Adam is not closed on (M, mu)) against
`nqf.record(x_test=, y_test=)`: the test accuracies (sign(f) = y on the 597 test images) differ by
<= 0.02 over the NQF's learning phase (criterion: 2 points, 12 of 597 images, written after one
exploratory run of the held-out prediction, not before any measurement). Measured: 0.0034 over
the phase (t <= 13.0), 0.0084 at t = 30 (0.899 predicted / 0.908 measured); test-loss gap 0.014.

Claim (Appendix C, Fig. 7: "the original models and their corresponding NQFs exhibit
indistinguishable trajectories in both training loss and test accuracy"), revised criterion: the
train-loss gap over the NQF's learning phase <= 0.05 (`GAP_BOUND`), per model at eps = 0.01.

Outcome of the full run (1000 Adam steps; ~2 min with the sensitivity row):

    model      L_LS    NQF phase ends  gap over phase  whole-run gap (step)  horizon  final train loss  test accuracy
    MLP        0.290   step 250        0.012           0.189 (1000)          530      0.101 / 0.290     0.972 / 0.899
    CNN        0.447   step 970        0.169           0.171 (1000)          480      0.295 / 0.465     0.923 / 0.834
    attention  0.545   not by 1000     0.031           0.031 (1000)          1000     0.750 / 0.719     0.734 / 0.757

(final loss and accuracy: module / NQF.) MLP: reproduced. The NQF reaches its least-squares floor
by step 250 with the module within 0.012; afterwards the module keeps learning past that plateau
(the weights reach the scale at which tanh is nonlinear, and the module fits what no linear model
can), and the gap grows to 0.189. This is not specific to Adam: under plain GD (lr 0.03) the
MLP's NQF phase ends at step 500 with gap 0.014, and the gap is 0.058 / 0.155 / 0.215 at steps
2000 / 5000 / 10000. CNN: not reproduced. Its NQF is still in a slow tail when the module departs
(L_NQF 0.494 at step 100, 0.477 at 500, 0.465 at 1000; the gap passes 0.05 at step ~490), so the
phase reaches step 970 and includes the departure. Attention: reproduced, the NQF is still
learning at step 1000 (L_NQF 0.719 vs L_LS 0.545). At eps = 0.1 (no claim): MLP gap over its
phase 0.024, whole run 0.212; the CNN is off already at step 0 (gap 0.33, initial MSE 10.6: its
25 patch sums of uncentered pixels make the init output large); attention 0.037.

Sensitivity, the paper's widths on these 8x8 images (CNN 50 channels, attention d_k = 32): the
CNN's gap over its NQF's phase (to step 860) is 0.019 (whole run 0.044), the attention's 0.027:
both reproduced: with 50 channels the CNN stays within 0.05 of its NQF for the whole run.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from ..data.modules import CNN, MLP, QKAttention
from ._common import COLORS, chosen, phase_end, sensitivity
from ._pair import init_gap_order, least_squares_loss, train_pair
from ._table import Check, Claim, Reproduction, reproduce

NAME = "digits"
TITLE = (
    "Fig. 7 idea on sklearn 8x8 digits (odd vs even): MLP, CNN, attention vs their NQFs, Adam full "
    "batch from eps = 0.01 / 0.1; train-loss gap and test accuracy"
)

EPS = (0.01, 0.1)
LR = 1e-3
GAP_BOUND = 0.05
PHASE_FRAC = 0.02  # the NQF's learning phase ends when L_NQF <= L_LS + PHASE_FRAC L(0)
ORDER_BOUND = 0.2  # |measured order - 4| of the module - NQF output gap at init
LS_TOL = 1e-9  # the NQF's loss never goes below its least-squares optimum (relative, rounding)
GD_LR, GD_STEPS, GD_STEPS_QUICK = 0.03, 10000, 1000
GD_REPORT_STEPS = (1000, 2000, 5000, 10000)
# held-out prediction (issue 35): nqf.predict / nqf.record of the MLP with x_test, GD lr GD_LR, eps 0.01
HELDOUT_STEPS, HELDOUT_SAVE = 1000, 50  # t = 30, past the NQF's learning phase (t ~ 13)
TEST_ACC_BOUND = 0.02  # within 2 points (12 of the 597 test images); set after one exploratory run (0.0034)
EXACT_TOL = 1e-10  # the held-out outputs against train_pair's (W-space GD of the NQF / the module)
CLAIM_TEST = (
    "The original models and their corresponding NQFs exhibit indistinguishable trajectories in ... test "
    "accuracy (here: the MLP under full-batch GD, where nqf.predict's exact map applies)."
)
SECTION = "Appendix C (NQF approximation on real data), Fig. 7"
CLAIM = (
    "The original models and their corresponding NQFs exhibit indistinguishable trajectories in both "
    "training loss and test accuracy (Adam lr 1e-3, full batch, eps = 0.01)."
)
N_TRAIN = 1200
SPLIT_SEED = 0
HEADS = 10
MODEL_NAMES = ("MLP", "CNN", "attention")
PIXEL_MAX = 16.0  # sklearn's gray levels 0..16; pixels x / 16 lie in [0, 1] like MNIST's
# rms norm of an image row (a token, 8 pixels) of the 1200 training images at pixels in [0, 1]
# (measured; tests/test_fig6_digits.py checks it): the readout scale is c ~ N(0, I / (HEADS ROW_RMS)^2)
ROW_RMS = 1.3694
SETTINGS = {
    "MLP": "64 -> 20 tanh -> 1, no bias",
    "CNN": "8x8 input, 20 kernels 4x4, stride 1, no padding, tanh, global sum pool",
    "attention": (
        "QK heads (Proposition 3), 10 heads, tokens = 8 rows (D = 8, N = 8), d_k = 8, "
        "query = last row, readout c ~ N(0, I/(10 * 1.3694)^2)"
    ),
}


def load_data(n_train: int = N_TRAIN, seed: int = SPLIT_SEED):
    """scikit-learn's digits: pixels in [0, 1] (gray level / 16), shape (m, 64), and labels (m, 1)
    (+1 odd, -1 even),
    split by a fixed permutation; returns ``(x_train, y_train, x_test, y_test)``.

    **Raises:** `ImportError` telling to install the ``digits`` extra if scikit-learn is missing."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise ImportError(
            "The 'digits' experiment needs scikit-learn, which ships the 8x8 digits "
            'data set: pip install "nqf[digits]" (or pip install scikit-learn).'
        ) from err
    X, t = load_digits(return_X_y=True)
    y = np.where(t % 2 == 1, 1.0, -1.0)[:, None]
    perm = np.random.default_rng(seed).permutation(len(X))
    tr, te = perm[:n_train], perm[n_train:]
    Z = X / PIXEL_MAX
    return Z[tr], y[tr], Z[te], y[te]


def model_inputs(name: str, x):
    """The (m, 64) pixels as the input of model `name` (see the module docstring)."""
    img = np.asarray(x).reshape(-1, 8, 8)
    if name == "MLP":
        return np.asarray(x)
    if name == "CNN":
        return img
    if name == "attention":
        X = np.swapaxes(img, 1, 2).copy()  # X[:, :, n] = row n: tokens are rows
        return (X[:, :, -1].copy(), X)
    raise ValueError(f"unknown model {name!r}; expected one of {MODEL_NAMES}.")


def build(name: str, width: int | None = None):
    """The module and its width d for model `name`; `width` overrides the package's CNN channel
    count (20) or the attention's d_k (8) (the sensitivity row uses the paper's 50 and 32)."""
    if name == "MLP":
        return MLP(64, 1), 20
    if name == "CNN":
        return CNN((8, 8), (4, 4), n_out=1), width or 20
    if name == "attention":
        c = np.random.default_rng(1).standard_normal((8, 1)) / (HEADS * ROW_RMS)
        return QKAttention(8, width or 8, c, heads=True), HEADS
    raise ValueError(f"unknown model {name!r}; expected one of {MODEL_NAMES}.")


def train_loss_gap(loss_module, loss_nqf) -> np.ndarray:
    """|L_module(t) - L_NQF(t)| / L_module(0) at every saved step."""
    return np.abs(np.asarray(loss_module) - np.asarray(loss_nqf)) / float(loss_module[0])


def tracking_horizon(steps, gap, bound=GAP_BOUND) -> int:
    """The last saved step up to which `gap` <= `bound` at every saved step (-1 if not even at 0)."""
    bad = np.flatnonzero(np.asarray(gap) > bound)
    if bad.size == 0:
        return int(steps[-1])
    return int(steps[bad[0] - 1]) if bad[0] > 0 else -1


def accuracy(F, y) -> np.ndarray:
    """Fraction of inputs with sign(F) = y, per saved step: F (n, m, 1), y (m, 1)."""
    return np.mean(np.sign(F) == np.asarray(y)[None], axis=(1, 2))


def run_model(
    name: str,
    eps: float,
    split,
    *,
    steps: int,
    save_every: int,
    optimizer: str = "adam",
    lr: float = LR,
    width: int | None = None,
    L_ls: float | None = None,
    init_gap: bool = False,
) -> dict:
    """Train model `name` and its NQF from W0 = eps N(0, 1) (rng 3); the losses, test accuracies,
    the NQF's least-squares floor L_LS (computed unless given) and learning phase, the gaps
    (module docstring) and, with `init_gap`, the order of the module - NQF gap at init.

    `split` = ``(xs, y_tr, xs_te, y_te)``: the model's training inputs (`model_inputs`) and labels
    (m, 1), and its test inputs and labels (both None: no test accuracies)."""
    xs, y_tr, xs_te, y_te = split
    mod, d = build(name, width)
    W0 = eps * np.random.default_rng(3).standard_normal((mod.p, d))
    t0 = time.perf_counter()
    r = train_pair(
        mod,
        xs,
        y_tr,
        W0,
        optimizer=optimizer,
        lr=lr,
        steps=steps,
        save_every=save_every,
        eval_xs=None if xs_te is None else xs_te,
    )
    steps_saved, Lm, Ln = r["steps"], r["loss_module"], r["loss_nqf"]
    gap = train_loss_gap(Lm, Ln)
    L_ls = least_squares_loss(mod, d, xs, y_tr) if L_ls is None else L_ls
    end = phase_end(steps_saved, Ln, L_ls, PHASE_FRAC)
    in_phase = steps_saved <= (steps_saved[-1] if end is None else end)
    res = {
        "model": name,
        "eps": eps,
        "width": d,
        "p": mod.p,
        "optimizer": optimizer,
        "lr": lr,
        "least_squares_loss": L_ls,
        "nqf_phase_end_step": end,
        "max_train_loss_gap_nqf_phase": float(gap[in_phase].max()),
        "max_train_loss_gap": float(gap.max()),
        "step_of_max_gap": int(steps_saved[np.argmax(gap)]),
        "tracking_horizon_step": tracking_horizon(steps_saved, gap),
        "initial_train_loss": float(Lm[0]),
        "final_train_loss_module": float(Lm[-1]),
        "final_train_loss_nqf": float(Ln[-1]),
        "nqf_loss_minus_least_squares_min": float(np.min(Ln - L_ls)),
        "curve": {"step": steps_saved, "train_loss_module": Lm, "train_loss_nqf": Ln},
    }
    if xs_te is not None:
        acc_m, acc_n = accuracy(r["F_module_eval"], y_te), accuracy(r["F_nqf_eval"], y_te)
        res.update(
            {
                "final_test_accuracy_module": float(acc_m[-1]),
                "final_test_accuracy_nqf": float(acc_n[-1]),
                "max_test_accuracy_gap": float(np.max(np.abs(acc_m - acc_n))),
                "max_test_accuracy_gap_nqf_phase": float(np.max(np.abs(acc_m - acc_n)[in_phase])),
            }
        )
        res["curve"].update({"test_accuracy_module": acc_m, "test_accuracy_nqf": acc_n})
    if init_gap:
        res["init_gap"] = init_gap_order(mod, d, xs, float(np.linalg.norm(y_tr)), eps)
    res["wall_time_s"] = time.perf_counter() - t0
    return res


def _claim(key: str, r: dict) -> Claim:
    """The claim "indistinguishable train loss" for one model at eps = 0.01 (revised criterion)."""
    end = r["nqf_phase_end_step"]
    why = (
        f"NQF learning phase: steps 0..{end if end is not None else str(r['curve']['step'][-1]) + ' (not ended)'}"
        f" (L_NQF <= L_LS + {PHASE_FRAC:g} L(0), L_LS = {r['least_squares_loss']:.3g}); tracking horizon "
        f"(gap <= {GAP_BOUND:g}) step {r['tracking_horizon_step']}; whole-run gap {r['max_train_loss_gap']:.3g} "
        f"at step {r['step_of_max_gap']}; final train loss module / NQF {r['final_train_loss_module']:.3g} / "
        f"{r['final_train_loss_nqf']:.3g}; final test accuracy {r['final_test_accuracy_module']:.3f} / "
        f"{r['final_test_accuracy_nqf']:.3f}"
    )
    return Claim(
        f"digits {key}: indistinguishable train loss",
        CLAIM,
        SECTION,
        metric=(
            "max over the NQF's learning phase (saved steps until L_NQF <= L_LS + 0.02 L(0), L_LS the "
            "least-squares optimum of the NQF's linear feature model) of |L_module - L_NQF| / L(0)"
        ),
        value=r["max_train_loss_gap_nqf_phase"],
        criterion=f"<= {GAP_BOUND:g}",
        holds=r["max_train_loss_gap_nqf_phase"] <= GAP_BOUND,
        setting="package-chosen",
        why=why,
        revised=True,
    )


def _gd_mlp(xs, y_tr, steps: int, L_ls: float) -> dict:
    """Not a claim: the MLP and its NQF under plain full-batch GD (lr `GD_LR`, eps = 0.01), to
    test whether the departure after the NQF's phase is specific to Adam; the train-loss gap
    at `GD_REPORT_STEPS` (those inside the run)."""
    save_every = 50
    r = run_model(
        "MLP", EPS[0], (xs, y_tr, None, None), steps=steps, save_every=save_every, optimizer="gd", lr=GD_LR, L_ls=L_ls
    )
    cur = r.pop("curve")
    gap = train_loss_gap(cur["train_loss_module"], cur["train_loss_nqf"])
    r["train_loss_gap_at_step"] = {str(s): float(gap[s // save_every]) for s in GD_REPORT_STEPS if s <= steps}
    r["curve"] = {"step": cur["step"], "train_loss_gap": gap}
    return r


def _heldout_mlp(x_tr, y_tr, x_te, y_te) -> dict:
    """The MLP (eps = 0.01, W0 as `run_model`'s) predicted by `nqf.predict(x_test=, y_test=)` and
    measured by `nqf.record(x_test=, y_test=)` under full-batch GD (lr `GD_LR`, `HELDOUT_STEPS`),
    and both against the NQF's / the module's own GD loop (`train_pair`, an independent loop):
    ``{"summary": compare(...).summary(), "rel_predicted", "rel_recorded"}`` (max relative
    differences of the test outputs). Rows: `_heldout_checks`, `_heldout_claim`."""
    from ..data import Network
    from ..dynamics import SGD
    from ..network import compare, predict

    mod, d = build("MLP")
    W0 = EPS[0] * np.random.default_rng(3).standard_normal((mod.p, d))
    gd = SGD(GD_LR, steps=HELDOUT_STEPS)
    net = Network(mod, W0=W0)
    pred = predict(net, x_tr, y_tr, gd, save_every=HELDOUT_SAVE, x_test=x_te, y_test=y_te, estimate_departure=False)
    rec = pred.record(save_every=HELDOUT_SAVE)
    ref = train_pair(
        mod, x_tr, y_tr, W0, optimizer="gd", lr=GD_LR, steps=HELDOUT_STEPS, save_every=HELDOUT_SAVE, eval_xs=x_te
    )
    rel = lambda a, b: float(np.abs(a - b[:, :, 0]).max() / np.abs(b).max())  # noqa: E731
    return {
        "summary": compare(pred, rec).summary(),
        "rel_predicted": rel(pred.test_outputs, ref["F_nqf_eval"]),
        "rel_recorded": rel(rec.test_outputs, ref["F_module_eval"]),
    }


def _heldout_report(h: dict) -> dict:
    """The JSON's ``heldout_mlp`` block of a `_heldout_mlp` measurement."""
    s = h["summary"]
    return {
        "optimizer": f"GD lr {GD_LR:g}, full batch, {HELDOUT_STEPS} steps (t = {GD_LR * HELDOUT_STEPS:g})",
        "phase_end_t": s["phase_end"],
        "train_phase_gap": s["phase_gap"],
        "test": s["test"],
        "wall_time_s": s["wall_time_s"],
    }


def _heldout_claim(h: dict) -> Claim:
    """Claim (issue 35): the predicted and measured test accuracies differ by <= `TEST_ACC_BOUND`
    over the NQF's phase."""
    s = h["summary"]
    test = s["test"]
    diff, acc = test["test_accuracy_difference"], test["final_test_accuracy"]
    why = (
        f"over the NQF's phase (t <= {s['phase_end']:.3g}) the test accuracies differ by at most "
        f"{diff['max_over_phase']:.3g}, at t = {GD_LR * HELDOUT_STEPS:g} by {diff['at_end']:.3g} (predicted / measured "
        f"{acc['predicted']:.3f} / {acc['measured']:.3f}); test-loss gap over the phase {test['test_loss_gap']:.3g} "
        f"(train {s['phase_gap']:.3g}). Adam (the paper's optimizer) is not closed on (M, mu): nqf.predict does not "
        "cover it (the Adam rows compare the module with its NQF trained by Adam in weight space)."
    )
    return Claim(
        "digits MLP | eps=0.01 | GD: held-out test accuracy predicted",
        CLAIM_TEST,
        SECTION,
        metric=(
            "max over the NQF's learning phase (t <= the prediction's phase_end) of |test accuracy measured - "
            "predicted| on the 597 held-out images, sign(f) = y (nqf.predict vs nqf.record with x_test, y_test)"
        ),
        value=diff["max_over_phase"],
        criterion=f"<= {TEST_ACC_BOUND:g}",
        holds=diff["max_over_phase"] <= TEST_ACC_BOUND,
        setting="package-chosen",
        why=why,
    )


def run(out_dir, quick: bool = False, progress=None) -> dict:
    """Write out_dir/digits.png (rows: train loss, test accuracy; columns: MLP, CNN, attention;
    module solid, NQF dashed; one color per eps; the NQF's least-squares floor and the end of its
    learning phase marked) and out_dir/digits.json.

    JSON keys: ``settings``, ``chosen_settings``, ``results`` (per "model | eps": L_LS, the NQF's
    phase end, gaps over the phase and the whole run, tracking horizon, final losses and test
    accuracies, init-gap order, curves), ``gd_mlp`` (the GD run), ``heldout_mlp`` (the held-out
    prediction: `_heldout_mlp`), ``wall_time_s``, ``sensitivity`` (full run: the paper's widths),
    ``checks``, ``claims``. `quick`: 100 Adam steps (GD 1000) and no sensitivity rows.
    `progress(stage, info)`, if given, is called after each model x eps run (the CLI's progress
    line)."""
    measure = functools.partial(_measure, progress=progress)
    return reproduce(Reproduction(NAME, TITLE, measure, _report, _checks, _claims, _figure), out_dir, quick)


def _measure(quick: bool, progress=None) -> dict:
    """Every model x eps under Adam, the MLP under GD, the held-out prediction and (full run) the
    paper's widths."""
    t_start = time.perf_counter()
    x_tr, y_tr, x_te, y_te = load_data()
    steps = 100 if quick else 1000
    save_every = 5 if quick else 10
    results, L_ls = {}, {}
    for name in MODEL_NAMES:
        split = (model_inputs(name, x_tr), y_tr, model_inputs(name, x_te), y_te)
        L_ls[name] = least_squares_loss(*build(name), split[0], y_tr)
        for eps in EPS:
            key = f"{name} | eps={eps:g}"
            r = results[key] = run_model(
                name, eps, split, steps=steps, save_every=save_every, L_ls=L_ls[name], init_gap=eps == EPS[0]
            )
            if progress is not None:
                info = {
                    "gap_nqf_phase": r["max_train_loss_gap_nqf_phase"],
                    "test_accuracy": (r["final_test_accuracy_module"], r["final_test_accuracy_nqf"]),
                }
                progress(key, info)
    x_mlp, x_mlp_te = model_inputs("MLP", x_tr), model_inputs("MLP", x_te)
    gd = _gd_mlp(x_mlp, y_tr, GD_STEPS_QUICK if quick else GD_STEPS, L_ls["MLP"])
    heldout = _heldout_mlp(x_mlp, y_tr, x_mlp_te, y_te)
    widths = {}  # the sensitivity row: the paper's widths (full run only)
    for name, width in () if quick else (("CNN", 50), ("attention", 32)):
        split = (model_inputs(name, x_tr), y_tr, model_inputs(name, x_te), y_te)
        widths[f"{name} | eps={EPS[0]:g} | width {width}"] = run_model(
            name, EPS[0], split, steps=steps, save_every=save_every, width=width, L_ls=L_ls[name]
        )
    return {
        "quick": quick,
        "t_start": t_start,
        "n_train": int(len(y_tr)),
        "n_test": int(len(y_te)),
        "steps": steps,
        "save_every": save_every,
        "results": results,
        "gd": gd,
        "heldout": heldout,
        "widths": widths,
    }


def _checks(q: dict) -> list[Check]:
    """Per model at eps = 0.01: the init gap's order and the least-squares floor; then the held-out outputs."""
    rows = []
    for name in MODEL_NAMES:
        key = f"{name} | eps={EPS[0]:g}"
        r = q["results"][key]
        rows += [
            Check(
                f"digits {key}: module - NQF output gap at init is O(eps^4), |measured order - 4|",
                abs(r["init_gap"]["order"] - 4.0),
                ORDER_BOUND,
            ),
            Check(
                f"digits {key}: NQF loss never below its least-squares optimum L_LS, max (L_LS - L_NQF) / L_LS",
                -r["nqf_loss_minus_least_squares_min"] / r["least_squares_loss"],
                LS_TOL,
            ),
        ]
    h = q["heldout"]
    return rows + [
        Check(
            "digits MLP held-out: predicted test outputs = the NQF's W-space GD on the test images, max rel. diff",
            h["rel_predicted"],
            EXACT_TOL,
        ),
        Check(
            "digits MLP held-out: recorded test outputs = the module's GD loop (train_pair), max rel. diff",
            h["rel_recorded"],
            EXACT_TOL,
        ),
    ]


def _claims(q: dict) -> list[Claim]:
    """Per model at eps = 0.01: indistinguishable train loss; then the held-out test accuracy."""
    rows = [_claim(f"{name} | eps={EPS[0]:g}", q["results"][f"{name} | eps={EPS[0]:g}"]) for name in MODEL_NAMES]
    return rows + [_heldout_claim(q["heldout"])]


def _report(q: dict) -> dict:
    if q["quick"]:
        sens = sensitivity(quick=True)
    else:
        row = {
            "setting": "the paper's widths on the 8x8 digits: CNN 50 channels (4x4 kernels), "
            "attention d_k = 32 (10 heads)",
            "claims": [_claim(key, r).record() for key, r in q["widths"].items()],
            "results": {key: {k: v for k, v in r.items() if k != "curve"} for key, r in q["widths"].items()},
        }
        sens = sensitivity([row], quick=False)
    return {
        "settings": {
            "data": (
                "sklearn.datasets.load_digits, y = +1 odd / -1 even, pixels gray level / 16 in [0, 1] "
                f"(as MNIST's), {N_TRAIN} train / {q['n_test']} test (rng {SPLIT_SEED} permutation)"
            ),
            "n_train": q["n_train"],
            "n_test": q["n_test"],
            "optimizer": "Adam (b1 0.9, b2 0.999, 1e-8), full batch, MSE",
            "lr": LR,
            "steps": q["steps"],
            "save_every": q["save_every"],
            "eps": EPS,
            "init": "W0 ~ N(0, eps^2), rng 3",
            "models": SETTINGS,
            "gap_bound": GAP_BOUND,
            "phase_frac": PHASE_FRAC,
            "max_train_loss_gap": "max over saved steps of |L_module - L_NQF| / L_module(0)",
            "nqf_phase_end_step": f"first saved step with L_NQF <= L_LS + {PHASE_FRAC:g} L(0)",
            "tracking_horizon_step": f"last saved step up to which the gap stayed <= {GAP_BOUND:g}",
            "test_accuracy": "fraction of test images with sign(F) = y",
        },
        "chosen_settings": CHOSEN_SETTINGS,
        "results": q["results"],
        "gd_mlp": q["gd"],
        "heldout_mlp": _heldout_report(q["heldout"]),
        "wall_time_s": time.perf_counter() - q["t_start"],
        "sensitivity": sens,
    }


def _figure(q: dict):
    return _plot(q["results"], q["quick"])


CHOSEN_SETTINGS = {
    "data": chosen(
        "sklearn 8x8 digits, 1200 train / 597 test, odd vs even, pixels / 16 in [0, 1]",
        "MNIST, 4000 samples (28 x 28)",
        "nothing can be downloaded at run time; scikit-learn ships it",
    ),
    "cnn": chosen(
        "20 channels, 4x4 kernels",
        "50 channels, 15x15 kernels on 28x28",
        "kernel ~ half the image as in the paper; 20 channels keep the run ~1 min (sensitivity: 50)",
    ),
    "attention": chosen(
        "tokens = 8 rows (D = 8), d_k = 8, 10 heads, readout c ~ N(0, I/(10 * 1.3694)^2)",
        '28 tokens of dimension 28, d_k = 32, 10 heads, "a fixed readout vector"',
        "the rows of an 8x8 image; output range of the heads O(1) (sensitivity: d_k = 32)",
    ),
    "steps": chosen(1000, "not stated", "past the MLP's and CNN's NQF learning phases"),
    "eps_contrast": chosen(0.1, "only eps = 0.01", "a larger init for contrast (no claim)"),
    "gd_mlp": chosen({"lr": GD_LR, "steps": GD_STEPS}, "Adam only", "issue 15: is the departure specific to Adam?"),
    "heldout_mlp": chosen(
        {"lr": GD_LR, "steps": HELDOUT_STEPS, "save_every": HELDOUT_SAVE},
        "Adam only",
        "nqf.predict's exact map covers GD, not Adam (issue 35: the test-accuracy claim graded by the prediction)",
    ),
}


def _plot(results, quick):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 8), layout="constrained")
    axes = fig.subplots(2, len(MODEL_NAMES))
    for j, name in enumerate(MODEL_NAMES):
        for i, eps in enumerate(EPS):
            r = results[f"{name} | eps={eps:g}"]
            c = r["curve"]
            nqf_color = "k" if i == 0 else COLORS[i]
            axes[0, j].semilogy(
                c["step"], c["train_loss_module"], color=COLORS[i], lw=1.8, label=f"module, $\\epsilon={eps:g}$"
            )
            axes[0, j].semilogy(
                c["step"], c["train_loss_nqf"], color=nqf_color, lw=1.0, ls="--", label=f"NQF, $\\epsilon={eps:g}$"
            )
            axes[1, j].plot(
                c["step"], c["test_accuracy_module"], color=COLORS[i], lw=1.8, label=f"module, $\\epsilon={eps:g}$"
            )
            axes[1, j].plot(
                c["step"], c["test_accuracy_nqf"], color=nqf_color, lw=1.0, ls="--", label=f"NQF, $\\epsilon={eps:g}$"
            )
            if i == 0:
                axes[0, j].axhline(
                    r["least_squares_loss"], color="0.5", lw=0.8, ls=":", label="NQF least-squares optimum $L_{LS}$"
                )
                if r["nqf_phase_end_step"] is not None:
                    for ax in axes[:, j]:
                        ax.axvline(
                            r["nqf_phase_end_step"],
                            color="k",
                            lw=0.8,
                            ls=":",
                            label="end of the NQF's learning phase" if ax is axes[0, j] else None,
                        )
                axes[0, j].set_title(
                    f"{name}: gap over the NQF's phase {r['max_train_loss_gap_nqf_phase']:.3f}, "
                    f"whole run {r['max_train_loss_gap']:.3f} ($\\epsilon = {eps:g}$)",
                    fontsize=9,
                )
        axes[0, j].set_ylabel("train MSE")
        axes[1, j].set_ylabel("test accuracy")
        axes[1, j].set_xlabel("Adam step")
        axes[0, j].legend(fontsize=7)
    fig.suptitle(
        "8x8 digits, odd vs even: module (solid) vs its NQF (dashed), Adam lr 1e-3 full batch"
        + (" [quick]" if quick else "")
    )
    return fig
