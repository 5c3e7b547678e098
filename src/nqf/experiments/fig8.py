"""Fig. 8 of the paper: deep models vs their 2-layer and 1-layer NQFs (Theorem 14).

Setting (paper Appendix C; THEORY sec. 11; choices the paper leaves open are marked *):

- Teacher-student regression, inputs N(0, I), 200 training / 1000 test samples, MSE
  L = mean (f - y)^2, full-batch gradient descent for STEPS = 2000* steps from the same initial
  weights, with the same learning rate for the three models at a given (model, init): LR* =
  0.05 at small init (flow time lr * steps = 100); 0.005 (MLP) and 1e-4 (attention) at large
  init, where 0.05 makes the original (attention: already 0.005) diverge. Teacher*: the same
  architecture with LeCun-normal weights N(0, 1/fan_in); targets divided by their training-set
  standard deviation. (The paper's Fig. 6 teachers are standard Gaussian; N(0, 1) here would
  saturate the tanh teacher, pre-activation std 2.8, and make its attention nearly hard.)
- 4-layer MLP x (8) -> 16 -> 16 -> 16 -> 1, tanh, no biases: f = w4^T tanh(W3 tanh(W2 tanh(W1 x))).
  Init N(0, 0.05) (small) vs N(0, 0.5) (large).
- 2-layer single-head attention*, model dim 8, length 10, d_k = d_v = 8: layer 1
  Y = softmax_rows(X W_Q1^T (X W_K1^T)^T / sqrt 8) X W_V1^T W_O1^T (tokens as rows); layer 2
  f = v^T W_V2 Y^T a, a = softmax(Y W_K2^T W_Q2 ybar / sqrt 8), ybar the mean token. Init N(0, 0.1)
  vs N(0, 1).

The NQFs (Props. 1 and 2 per module; Theorem 14 for the stack), trained by `closed_deep_sgd`:

- 2-layer NQF. MLP: module (W1, W2) -> layer 1 with neurons [W1[i, :]; W2[:, i]] (p = 24,
  d = 16), h1_j = Tr[M1 A_j(x)], A_j(x) = 1/2 [[0, x e_j^T], [e_j x^T, 0]]; module (W3, w4) ->
  layer 2 with neurons [W3[j, :]; w4_j] (p = 17, d = 16), f = Tr[M2 A(tanh h1)], A(z) =
  1/2 [[0, z], [z^T, 0]]: the tanh between the modules is kept. Attention: (W_V1, W_O1) -> layer 1
  on the token mean xbar (uniform attention at leading order; Q and K enter at 4th order and are
  absent), then (W_V2, v) -> layer 2 on h1 (p = 16 and 9, d = 8).
- 1-layer NQF*: the paper does not define it; here it is Theorem 1 applied to the LAST module's
  neurons with the earlier layers frozen at the common initialization: f = Tr[M A(z0(x))] with
  the exact features z0 of the initial network (MLP: tanh(W2(0) tanh(W1(0) x)); attention: the
  mean token of layer 1's output at init). It shares the initial weights and learning rate of
  the neurons it has; the earlier layers do not train.

Measured (each NQF against the original, train and test losses at the saved steps):

- ``gap_max`` = max_t |L_nqf(t) - L_orig(t)| / L_orig(0) over the whole run (and ``gap_final``
  at the last step, same normalization); ``log_gap_final`` = |ln(L_nqf / L_orig)| at the end;
- ``gap_max_early``: the same max over the first EARLY_STEPS steps (flow time 10, the initial
  learning phase);
- ``tracking_steps``: the last saved step before the train-loss gap first exceeds
  TRACK_REL = 10% of the original's current loss (the whole run if never);
- ``diverged_at``: first saved step with a non-finite loss (None if none).

- ``drop_step``: the first step with train loss <= L(0)/2 (interpolated between saved steps);
- the 2-layer NQF's learning phase: saved steps until its train loss is within PHASE_FRAC = 0.02
  L(0) of its final loss (``phase_end_step``), and ``gap_max_phase`` over it;
- ``init_output_rel_err`` = |f_nqf(0) - f(0)| / |f(0)| on the training set (step 0).

Checks (package correctness): the 2-layer NQF's output at the original's init differs from the
original's by O(variance) (Props. 1, 2): measured order in the variance 0.9995 (MLP), 1.0000
(attention) between variances 1e-4 and 1e-6 (bound |order - 1| <= 0.1).

Claims (Appendix C: "under small initialization, the training dynamics of both models are well
approximated by 2-layer NQFs but not 1-layer NQFs"), criteria fixed in issue 15 before measuring,
at the literal variances (small init): the paper's claim is comparative, so

- gap ratio: gap_max(2-layer) / gap_max(1-layer) <= GAP_RATIO_BOUND = 0.5, train and test;
- drop time: the 2-layer NQF's drop step within DROP_BOUND = 10% of the network's, the 1-layer's
  not (or never);
- absolute: gap_max_phase of the 2-layer NQF <= TRACK_BOUND = 0.1, train and test, with the
  whole-run gap, the final losses and (attention) the 2-layer NQF's ceiling beside it.

Construction verified against the paper (Props. 1, 2, Theorem 14): the layers pair as above,
the nonlinearity between the MLP's NQF layers is the tanh after W2 (the attention has none at
leading order); the NQFs' initial W are the original's initial weights in neuron layout, the
learning rate and the loss mean (f - y)^2 are the same (tests: at init variance 1e-4 / 1e-6 the
NQF's outputs match to O(variance), and one GD step of the original at lr changes each layer's
M = W W^T as one `closed_deep_sgd` step at the same lr does, relative error 1.2e-3 / 1.2e-5 (MLP),
6.5e-4 / 6.5e-6 (attention); with lr doubled on the NQF side it is 1.0). No bug was found.

Measured (full run, 2000 steps, ~16 s with the sensitivity row; ``--quick``: 500 steps). gap_max
train / test, 1-layer NQF in brackets:

- MLP small (0.05): 2-layer 0.131 / 0.125 (1-layer 0.190 / 0.261): ratios 0.69 (not reproduced)
  / 0.48; drop steps network 11.6, 2-layer 8.3 (-29%), 1-layer 14.8 (+27%): not reproduced; the
  2-layer gap over its learning phase (to step 830) is the whole-run gap, 0.131 / 0.125 at step
  10 (not reproduced); step-0 output error 0.284 (1-layer 0.109); final train loss original
  0.0086, 2-layer 0.0177, 1-layer 0.206.
- attention small (0.1): 2-layer 0.136 / 0.193 (1-layer 0.718 / 0.632): ratios 0.19 / 0.31
  (reproduced); drop steps 48.1, 43.1 (-10.5%), 472.5: not reproduced (the 2-layer NQF misses 10%
  by 0.5%); gap over its learning phase (to step 80) 0.127 / 0.137 (not reproduced); the
  whole-run gap 0.136 is at step 2000, where the 2-layer NQF, linear in the mean token, sits at
  its ceiling (least squares on the mean token: L/L(0) = 0.142) while the network goes on to
  L/L(0) = 0.0055; step-0 output error 0.323 (1-layer 0.080).
- MLP large (0.5): 2-layer 4.23 / 5.20 (1-layer 3.92 / 4.35); attention large (1): 0.94 / 0.95
  (0.91 / 0.92): both NQFs depart, as the paper shows (no claim).
- Sensitivity, the "std" reading (variance = scale^2: 0.0025, 0.01): gap ratios 0.34 / 0.35
  (MLP), 0.36 / 0.36 (attention); drop steps 275 vs 267 (2-layer, -3.0%) vs 1623 (1-layer),
  attention 423 vs 410 (-3.1%) vs never: both reproduced; the absolute gaps are larger, 0.28 /
  0.28 and 0.31 / 0.30 (not reproduced; step-0 output error 0.020 / 0.032).

Why the 2-layer NQF misses the 0.1 bound at the paper's small init (diagnostics, not used to
choose any setting). Both small inits have variance x fan_in = 0.8 (0.05 x 16, 0.1 x 8): a
per-layer gain of 0.89, just under LeCun's 1, so the leading-order error O(variance x fan_in) of
Props. 1 and 2 is not small: the 2-layer NQF's output is already 28% (MLP) / 32% (attention) off
at step 0, and it learns faster than the saturating original in the first tens of steps (the MLP's
max gap is at step 10, the attention's early gap is 0.127 at step ~40). This is a gradient-flow
property: with lr 0.01 instead of 0.05 (same flow time 20) the gaps are 0.138 / 0.126 (vs 0.137 /
0.128). The open teacher choice is not what limits it: a near-linear teacher (LeCun weights x 0.1,
pre-activations in the small-argument regime) removes the attention's late plateau but the early
gaps stay (0.195 MLP, 0.118 attention); a teacher drawn at the student's small-init variance
(targets not normalized) gives 0.227 / 0.124. Nor does a smaller init (the paper's variance / 4,
/ 16): with unit-scale targets the student's weights must grow to O(1), leaving the expansion's
regime, and the whole-run 2-layer gap grows (MLP 0.16, 0.27; attention 0.29, 0.31) while the
1-layer's grows faster (MLP 0.68, 0.80; attention 0.81, 0.94), so the 2-layer / 1-layer ratio
improves (MLP 0.24, 0.33). The absolute claim therefore tests the paper's "well approximated"
literally at the stated variances, where the leading order is only good to ~10-30%; the bounds
stay, and the comparative claims (ratio, drop time) carry the paper's point.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from ..dynamics import multilayer as ml
from ..theory.powerlaw import first_drop_time
from ._common import check, chosen, claim, phase_end, prepare_out_dir, sensitivity, write_outputs

NAME = "fig8"
TITLE = "Fig. 8: 4-layer MLP and 2-layer attention vs their 2-layer / 1-layer NQFs (Theorem 14)"

N_TRAIN, N_TEST = 200, 1000
D_IN, HID = 8, 16
N_TOK, DM = 10, 8
LR = {"mlp": {"small": 0.05, "large": 0.005}, "attention": {"small": 0.05, "large": 1e-4}}
STEPS, STEPS_QUICK = 2000, 500
N_SAVES, N_SAVES_QUICK = 200, 50
EARLY_STEPS = 200
TRACK_REL = 0.1
TRACK_BOUND = 0.1
GAP_RATIO_BOUND = 0.5
TRACK_RATIO_BOUND = 1.0 / 3.0
DROP_BOUND = 0.1  # the 2-layer NQF's drop time (first L <= L(0)/2) within 10% of the network's
PHASE_FRAC = 0.02  # the 2-layer NQF's learning phase: until its loss is within 0.02 L(0) of its final loss
ORDER_BOUND = 0.1  # |measured order - 1| of the 2-layer NQF's step-0 output error in the init variance
ORDER_VARIANCES = (1e-4, 1e-6)
SECTION = "Appendix C (Fig. 8)"
CLAIM = (
    "Under small initialization, the training dynamics of both models are well approximated by 2-layer NQFs "
    "but not 1-layer NQFs."
)
INITS = {"mlp": {"small": 0.05, "large": 0.5}, "attention": {"small": 0.1, "large": 1.0}}
SEED = 0

MLP_SHAPES = [(HID, D_IN), (HID, HID), (HID, HID), (HID,)]
ATT_SHAPES = [(DM, DM)] * 7 + [(DM,)]  # Q1, K1, V1, O1, Q2, K2, V2, v


# ------------------------------------------------------------------------------------------
# the original models
# ------------------------------------------------------------------------------------------
def mlp_forward(P, X):
    """4-layer tanh MLP, X (n, 8) -> (n,)."""
    W1, W2, W3, w4 = P
    return jnp.tanh(jnp.tanh(jnp.tanh(X @ W1.T) @ W2.T) @ W3.T) @ w4


def _attention_layer1(P, x):
    Q1, K1, V1, O1 = P[:4]
    S = jax.nn.softmax((x @ Q1.T) @ (x @ K1.T).T / jnp.sqrt(Q1.shape[0]), axis=1)
    return S @ (x @ V1.T @ O1.T)


def attention_forward(P, X):
    """2-layer single-head attention, X (n, 10, 8) -> (n,)."""
    Q2, K2, V2, v = P[4:]

    def one(x):
        Y = _attention_layer1(P, x)
        a = jax.nn.softmax((Y @ K2.T) @ (Q2 @ Y.mean(axis=0)) / jnp.sqrt(Q2.shape[0]))
        return v @ (V2 @ (a @ Y))

    return jax.vmap(one)(X)


FORWARD = {"mlp": mlp_forward, "attention": attention_forward}


@jax.jit
def _features_attention(P, X):
    """Mean token of layer 1's output, X (n, 10, 8) -> (n, 8) (the 1-layer NQF's frozen input)."""
    return jax.vmap(lambda x: _attention_layer1(P, x).mean(axis=0))(X)


@jax.jit
def _features_mlp(P, X):
    """tanh(W2 tanh(W1 x)), X (n, 8) -> (n, 16) (the 1-layer NQF's frozen input)."""
    return jnp.tanh(jnp.tanh(X @ P[0].T) @ P[1].T)


@functools.partial(jax.jit, static_argnames=("arch", "n_saves", "every"))
def _train_original(arch, P0, X, y, Xt, yt, lr, n_saves: int, every: int):
    """Full-batch GD on the original model; train and test loss at n_saves + 1 saved steps."""
    fwd = FORWARD[arch]
    loss = lambda P, X, y: jnp.mean((fwd(P, X) - y) ** 2)  # noqa: E731
    grad = jax.grad(loss)

    def block(P, _):
        P = jax.lax.fori_loop(0, every, lambda i, P: jax.tree.map(lambda a, g: a - lr * g, P, grad(P, X, y)), P)
        return P, (loss(P, X, y), loss(P, Xt, yt))

    _, (tr, te) = jax.lax.scan(block, P0, None, length=n_saves)
    return (jnp.concatenate([loss(P0, X, y)[None], tr]), jnp.concatenate([loss(P0, Xt, yt)[None], te]))


# ------------------------------------------------------------------------------------------
# data and the NQF layers (created once, so that compiled programs are reused)
# ------------------------------------------------------------------------------------------
@functools.cache
def _layers():
    return {
        "mlp": (
            ml.feedforward_layer(D_IN, HID),
            ml.feedforward_layer(HID, 1, transform=jnp.tanh),
            ml.feedforward_layer(HID, 1),
        ),
        "attention": (ml.feedforward_layer(DM, DM), ml.feedforward_layer(DM, 1), ml.feedforward_layer(DM, 1)),
    }


def _lecun(rng, shapes):
    return [rng.standard_normal(s) / np.sqrt(s[-1]) for s in shapes]


def make_data(arch: str, seed: int = SEED):
    """(X_train, y_train, X_test, y_test) of the teacher-student task (module docstring)."""
    rng = np.random.default_rng(seed)
    n = N_TRAIN + N_TEST
    if arch == "mlp":
        X = rng.standard_normal((n, D_IN))
        teacher = _lecun(rng, MLP_SHAPES)
    else:
        X = rng.standard_normal((n, N_TOK, DM))
        teacher = _lecun(rng, ATT_SHAPES)
    y = np.array(jax.jit(FORWARD[arch])([jnp.asarray(t) for t in teacher], jnp.asarray(X)))
    y /= y[:N_TRAIN].std()
    return X[:N_TRAIN], y[:N_TRAIN], X[N_TRAIN:], y[N_TRAIN:]


def nqf_models(arch: str, P0, Xtr, ytr, Xte):
    """The 2-layer and 1-layer NQFs of the original with initial weights P0 (module docstring):
    {name: (DeepNQF on the training set, W0 list, test inputs of its first layer)}."""
    lay1, lay2, lay_single = _layers()[arch]
    P = [np.asarray(p) for p in P0]
    if arch == "mlp":
        W1, W2, W3, w4 = P
        W0_2 = [np.vstack([W1.T, W2]), np.vstack([W3.T, w4[None]])]
        x_tr, x_te = Xtr, Xte
        z0 = lambda X: np.asarray(_features_mlp(P0, jnp.asarray(X)))  # noqa: E731
    else:
        _, _, V1, O1, _, _, V2, v = P
        W0_2 = [np.vstack([V1.T, O1]), np.vstack([V2.T, v[None]])]
        x_tr, x_te = Xtr.mean(axis=1), Xte.mean(axis=1)
        z0 = lambda X: np.asarray(_features_attention(P0, jnp.asarray(X)))  # noqa: E731
    return {
        "nqf2": (ml.DeepNQF([lay1, lay2], x_tr, ytr), W0_2, x_te),
        "nqf1": (ml.DeepNQF([lay_single], z0(Xtr), ytr), [W0_2[1]], z0(Xte)),
    }


# ------------------------------------------------------------------------------------------
# measurements
# ------------------------------------------------------------------------------------------
def _gaps(L, L_ref, steps) -> dict:
    L, L_ref = np.asarray(L, float), np.asarray(L_ref, float)
    finite = np.isfinite(L)
    diverged_at = None if finite.all() else int(steps[np.argmax(~finite)])
    diff = np.where(finite, np.abs(L - L_ref), np.inf)
    early = steps <= EARLY_STEPS
    with np.errstate(divide="ignore", invalid="ignore"):
        log_final = float(abs(np.log(L[-1] / L_ref[-1]))) if finite[-1] else float("inf")
    return {
        "gap_max": float(diff.max() / L_ref[0]),
        "gap_max_early": float(diff[early].max() / L_ref[0]),
        "gap_final": float(diff[-1] / L_ref[0]),
        "log_gap_final": log_final,
        "diverged_at": diverged_at,
    }


def _tracking_steps(L, L_ref, steps) -> int:
    off = ~(np.abs(np.asarray(L) - L_ref) <= TRACK_REL * L_ref)  # NaN counts as off
    if not off.any():
        return int(steps[-1])
    first = int(np.argmax(off))
    return int(steps[first - 1]) if first > 0 else 0


def run_case(arch: str, init: str, *, steps: int, n_saves: int, seed: int = SEED, var: float | None = None) -> dict:
    """Train the original, its 2-layer and its 1-layer NQF from the same init (variance `var`,
    default `INITS[arch][init]`); losses, gaps, drop times, the 2-layer NQF's learning phase."""
    Xtr, ytr, Xte, yte = make_data(arch, seed)
    var = INITS[arch][init] if var is None else var
    rng = np.random.default_rng(seed + 1)
    shapes = MLP_SHAPES if arch == "mlp" else ATT_SHAPES
    P0 = [jnp.asarray(np.sqrt(var) * rng.standard_normal(s)) for s in shapes]
    every = steps // n_saves
    saved = np.arange(n_saves + 1) * every
    t0 = time.perf_counter()
    lr = LR[arch][init]
    tr, te = _train_original(
        arch, P0, jnp.asarray(Xtr), jnp.asarray(ytr), jnp.asarray(Xte), jnp.asarray(yte), lr, n_saves, every
    )
    curves = {"original": {"train": np.asarray(tr), "test": np.asarray(te)}}
    wall = {"original": time.perf_counter() - t0}
    f0 = np.asarray(jax.jit(FORWARD[arch])(P0, jnp.asarray(Xtr)))
    init_err = {}
    for name, (deep, W0, x_te) in nqf_models(arch, P0, Xtr, ytr, Xte).items():
        t0 = time.perf_counter()
        traj = ml.closed_deep_sgd(deep, W0, lr=lr, steps=steps, save_every=every, allow_nonfinite=True)
        init_err[name] = float(np.linalg.norm(traj.outputs[0, :, 0] - f0) / np.linalg.norm(f0))
        with np.errstate(all="ignore"):
            out = ml.deep_outputs(deep, traj, x_te)[..., 0]
            test = np.mean((out - yte) ** 2, axis=1)
        curves[name] = {
            "train": np.where(np.isfinite(traj.loss), traj.loss, np.nan),
            "test": np.where(np.isfinite(test), test, np.nan),
        }
        wall[name] = time.perf_counter() - t0
    res = {
        "arch": arch,
        "init": init,
        "init_variance": var,
        "lr": lr,
        "steps": saved,
        "curves": curves,
        "wall_time_s": wall,
    }
    for name in ("nqf2", "nqf1"):
        res[name] = {split: _gaps(curves[name][split], curves["original"][split], saved) for split in ("train", "test")}
        res[name]["tracking_steps"] = _tracking_steps(curves[name]["train"], curves["original"]["train"], saved)
        res[name]["init_output_rel_err"] = init_err[name]
    res["final_loss"] = {n: {s: float(c[s][-1]) for s in c} for n, c in curves.items()}
    res["drop_step"] = {n: first_drop_time(saved, c["train"], 0.5) for n, c in curves.items()}
    L2 = curves["nqf2"]["train"]
    end = phase_end(saved, L2, float(L2[-1]), PHASE_FRAC) if np.all(np.isfinite(L2)) else None
    upto = saved <= (saved[-1] if end is None else end)
    res["nqf2"]["phase_end_step"] = end
    for split in ("train", "test"):
        diff = np.abs(curves["nqf2"][split] - curves["original"][split]) / curves["original"][split][0]
        res["nqf2"][split]["gap_max_phase"] = float(np.max(np.where(np.isfinite(diff), diff, np.inf)[upto]))
        res["nqf2"][split]["step_of_gap_max"] = int(saved[np.argmax(np.where(np.isfinite(diff), diff, np.inf))])
    if arch == "attention":  # the 2-layer NQF is linear in the mean token: its loss ceiling
        xbar = Xtr.mean(axis=1)
        coef = np.linalg.lstsq(xbar, ytr, rcond=None)[0]
        res["nqf2"]["ceiling_train_loss"] = float(np.mean((xbar @ coef - ytr) ** 2))
    return res


def init_error_order(arch: str, variances=ORDER_VARIANCES, seed: int = 1) -> dict:
    """Package check of the 2-layer NQF's construction: its output at the original's initial
    weights vs the original's output, |f_NQF - f| / |f| on the training set, at two tiny init
    variances; Props. 1 and 2 make it O(variance): order = log(err_1 / err_2) / log(v_1 / v_2) = 1."""
    Xtr, ytr, Xte, _ = make_data(arch)
    shapes = MLP_SHAPES if arch == "mlp" else ATT_SHAPES
    errs = []
    for var in variances:
        rng = np.random.default_rng(seed)
        P0 = [jnp.asarray(np.sqrt(var) * rng.standard_normal(s)) for s in shapes]
        f = np.asarray(jax.jit(FORWARD[arch])(P0, jnp.asarray(Xtr)))
        deep, W0, _ = nqf_models(arch, P0, Xtr, ytr, Xte)["nqf2"]
        g = np.asarray(deep.outputs([jnp.asarray(W @ W.T) for W in W0], [jnp.asarray(W.sum(axis=1)) for W in W0]))
        errs.append(float(np.linalg.norm(g[:, 0] - f) / np.linalg.norm(f)))
    return {
        "variances": list(variances),
        "rel_err": errs,
        "order": float(np.log(errs[0] / errs[1]) / np.log(variances[0] / variances[1])),
    }


def _rel_drop(t, ref) -> float:
    return abs(t - ref) / ref if np.isfinite(t) and np.isfinite(ref) else float("inf")


def _claims(cases: dict, setting: str, label: str = "") -> list:
    """The comparative and absolute claims of Fig. 8 for the small-init case of each architecture."""
    out = []
    for arch in INITS:
        c = cases[arch]
        tag = f"fig8 {label}{arch} small init"
        init = (
            f"variance {c['init_variance']:g}: step-0 output error of the 2-layer NQF "
            f"{c['nqf2']['init_output_rel_err']:.3g} (1-layer {c['nqf1']['init_output_rel_err']:.3g})"
        )
        for split in ("train", "test"):
            g2, g1 = c["nqf2"][split]["gap_max"], c["nqf1"][split]["gap_max"]
            ratio = g2 / g1 if g1 > 0 else float("inf")
            out.append(
                claim(
                    f"{tag}: {split} gap ratio 2-layer / 1-layer",
                    CLAIM,
                    SECTION,
                    metric=(
                        f"max_t |L_NQF2 - L| / L(0) divided by the same for the 1-layer NQF ({split} loss, whole run)"
                    ),
                    value=ratio,
                    criterion=f"<= {GAP_RATIO_BOUND:g}",
                    holds=ratio <= GAP_RATIO_BOUND,
                    setting=setting,
                    revised=True,
                    why=f"gaps {g2:.3g} / {g1:.3g}; {init}",
                )
            )
        d = c["drop_step"]
        e2, e1 = _rel_drop(d["nqf2"], d["original"]), _rel_drop(d["nqf1"], d["original"])
        out.append(
            claim(
                f"{tag}: drop time",
                CLAIM,
                SECTION,
                metric=(
                    "drop step (first step with train L <= L(0)/2, interpolated on the saved steps) of "
                    "each NQF vs the network's: |t_NQF - t_net| / t_net"
                ),
                value={
                    "network": d["original"],
                    "nqf2": d["nqf2"],
                    "nqf1": d["nqf1"],
                    "rel_err_nqf2": e2,
                    "rel_err_nqf1": e1,
                },
                criterion=f"2-layer <= {DROP_BOUND:g} and 1-layer > {DROP_BOUND:g} (or never drops)",
                holds=e2 <= DROP_BOUND < e1,
                setting=setting,
                revised=True,
                why=f"drop steps network / 2-layer / 1-layer {d['original']:.4g} / {d['nqf2']:.4g} / "
                f"{d['nqf1']:.4g} (nan: never)",
            )
        )
        end = c["nqf2"]["phase_end_step"]
        ceiling = c["nqf2"].get("ceiling_train_loss")
        for split in ("train", "test"):
            g = c["nqf2"][split]
            why = (
                f"phase: steps 0..{end} (L_NQF2 within {PHASE_FRAC:g} L(0) of its final loss); whole-run gap "
                f"{g['gap_max']:.3g} at step {g['step_of_gap_max']}; final train loss network / 2-layer "
                f"{c['final_loss']['original']['train']:.3g} / {c['final_loss']['nqf2']['train']:.3g}"
                + (
                    f" (ceiling of the 2-layer NQF, linear in the mean token: least squares on it {ceiling:.3g})"
                    if ceiling is not None
                    else ""
                )
                + f"; {init}"
            )
            out.append(
                claim(
                    f"{tag}: 2-layer NQF {split} gap over its learning phase",
                    CLAIM,
                    SECTION,
                    metric=f"max over the 2-layer NQF's learning phase of |L_NQF2 - L| / L(0) ({split} loss)",
                    value=g["gap_max_phase"],
                    criterion=f"<= {TRACK_BOUND:g}",
                    holds=g["gap_max_phase"] <= TRACK_BOUND,
                    setting=setting,
                    revised=True,
                    why=why,
                )
            )
    return out


def _plot(cases, quick: bool):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 8), layout="constrained")
    axes = fig.subplots(2, 2)
    colors = {"original": "k", "nqf2": "tab:blue", "nqf1": "tab:red"}
    labels = {"original": "original", "nqf2": "2-layer NQF", "nqf1": "1-layer NQF"}
    for i, arch in enumerate(INITS):
        for j, init in enumerate(("small", "large")):
            ax = axes[i, j]
            c = cases[(arch, init)]
            for name, curve in c["curves"].items():
                ax.semilogy(c["steps"], curve["train"], color=colors[name], lw=1.6, label=f"{labels[name]} train")
                ax.semilogy(
                    c["steps"], curve["test"], color=colors[name], lw=1.0, ls="--", label=f"{labels[name]} test"
                )
                t = c["drop_step"][name]
                if np.isfinite(t):
                    ax.axvline(
                        t,
                        color=colors[name],
                        ls=":",
                        lw=1.0,
                        label="drop step ($L \\leq L(0)/2$)" if name == "original" else None,
                    )
            note = []
            for name in ("nqf2", "nqf1"):
                g = c[name]
                dv = g["train"]["diverged_at"]
                note.append(
                    f"{labels[name]}: gap tr {g['train']['gap_max']:.3g}, te {g['test']['gap_max']:.3g}"
                    + (f", diverged @ {dv}" if dv is not None else "")
                )
            note.append(f"step-0 output error 2-layer {c['nqf2']['init_output_rel_err']:.2f}")
            ax.text(0.02, 0.02, "\n".join(note), transform=ax.transAxes, fontsize=7, va="bottom")
            ax.set_title(
                f"{'4-layer MLP' if arch == 'mlp' else '2-layer attention'}, init variance "
                f"{c['init_variance']:g} ({init})",
                fontsize=10,
            )
            ax.set_xlabel(f"GD step (lr {c['lr']:g}; flow time = lr x steps)")
            ax.set_ylabel("MSE loss")
            if i == 0 and j == 0:
                ax.legend(fontsize=7, ncol=3, loc="upper right")
    fig.suptitle(
        "Deep models vs their 2-layer and 1-layer NQFs (paper Fig. 8); dotted: drop steps"
        + (" [quick]" if quick else ""),
        fontsize=11,
    )
    return fig


def _headline(cases) -> dict:
    return {
        f"{a} {i}": {
            n: {
                "train_gap_max": c[n]["train"]["gap_max"],
                "test_gap_max": c[n]["test"]["gap_max"],
                "train_gap_final": c[n]["train"]["gap_final"],
                "test_gap_final": c[n]["test"]["gap_final"],
                "tracking_steps": c[n]["tracking_steps"],
                "init_output_rel_err": c[n]["init_output_rel_err"],
                "drop_step": c["drop_step"][n],
                "diverged_at": c[n]["train"]["diverged_at"],
            }
            for n in ("nqf2", "nqf1")
        }
        for (a, i), c in cases.items()
    }


def run(out_dir, quick: bool = False) -> dict:
    """Fig. 8: train a 4-layer MLP and a 2-layer attention at small and large init with their
    2-layer and 1-layer NQFs (module docstring), write `out_dir/fig8.png` (loss curves with the
    drop steps marked, 2 x 2 panels) and `out_dir/fig8.json`, return the JSON dict. `quick`: 500
    instead of 2000 steps, 50 instead of 200 saved steps, no sensitivity row; every check and claim
    still runs.

    JSON keys: ``settings``, ``chosen_settings``; ``cases``: one per (architecture, init) with
    ``steps``, ``curves`` {original, nqf2, nqf1: {train, test}}, per NQF {train, test: gap_max,
    gap_max_early, gap_final, log_gap_final, diverged_at (nqf2 also gap_max_phase,
    step_of_gap_max); tracking_steps, init_output_rel_err (nqf2 also phase_end_step and, for the
    attention, ceiling_train_loss)}, ``drop_step``, ``final_loss``; ``gaps`` (the headline
    numbers); ``init_error_order``; ``checks``, ``claims``, ``sensitivity``; ``wall_time_s``.
    """
    t_start = time.perf_counter()
    out = prepare_out_dir(out_dir)
    steps = STEPS_QUICK if quick else STEPS
    n_saves = N_SAVES_QUICK if quick else N_SAVES
    cases = {(a, i): run_case(a, i, steps=steps, n_saves=n_saves) for a in INITS for i in ("small", "large")}
    orders = {a: init_error_order(a) for a in INITS}
    checks = [
        check(
            f"fig8 {a}: 2-layer NQF output at the original's init is O(variance) (Props. 1, 2), "
            f"|measured order - 1| at variances {ORDER_VARIANCES[0]:g}, {ORDER_VARIANCES[1]:g}",
            abs(orders[a]["order"] - 1.0),
            ORDER_BOUND,
        )
        for a in INITS
    ]
    claims = _claims({a: cases[(a, "small")] for a in INITS}, "paper")
    if quick:
        sens = sensitivity(quick=True)
    else:
        std = {a: run_case(a, "small", steps=steps, n_saves=n_saves, var=INITS[a]["small"] ** 2) for a in INITS}
        sens = sensitivity(
            [
                {
                    "setting": 'the "std" reading of the small inits: variance = scale^2 (MLP 0.0025, attention 0.01)',
                    "claims": _claims(std, "package-chosen", "std reading "),
                    "gaps": _headline({(a, "small"): c for a, c in std.items()}),
                }
            ],
            quick=False,
        )
    fig = _plot(cases, quick)
    summary = {
        "name": NAME,
        "title": TITLE,
        "quick": bool(quick),
        "settings": {
            "n_train": N_TRAIN,
            "n_test": N_TEST,
            "lr": LR,
            "steps": steps,
            "n_saves": n_saves,
            "optimizer": "full-batch GD, MSE mean (f - y)^2",
            "init_variance": INITS,
            "mlp": "8-16-16-16-1 tanh, no biases",
            "attention": "2 layers, dim 8, length 10, d_k = d_v = 8",
            "teacher": "same architecture, LeCun-normal weights N(0, 1/fan_in); targets / train std",
            "early_steps": EARLY_STEPS,
            "track_rel": TRACK_REL,
            "seed": SEED,
            "phase_frac": PHASE_FRAC,
            "one_layer_nqf": "last module's NQF on the initial network's frozen features",
            "drop_step": "first step with train loss <= L(0)/2 (linear interpolation between saved steps)",
        },
        "chosen_settings": CHOSEN_SETTINGS,
        "gaps": _headline(cases),
        "init_error_order": orders,
        "cases": {f"{a} {i}": {k: v for k, v in c.items() if k not in ("arch", "init")} for (a, i), c in cases.items()},
        "wall_time_s": {"total": time.perf_counter() - t_start},
        "checks": checks,
        "claims": claims,
        "sensitivity": sens,
    }
    return write_outputs(out, NAME, fig, summary)


CHOSEN_SETTINGS = {
    "init_variance_reading": chosen(
        INITS,
        '"Gaussian with variance 0.05 / 0.5" (MLP), "0.1 / 1" (attention)',
        "read literally as variances (sensitivity: the std reading)",
    ),
    "teacher": chosen(
        "same architecture, LeCun-normal N(0, 1/fan_in), targets / train std",
        '"fixed Gaussian weights" (scale not stated)',
        "N(0, 1) would saturate the tanh teacher (pre-activation std 2.8)",
    ),
    "learning_rate": chosen(
        LR,
        'not stated ("the same learning rate" for the three models)',
        "small init 0.05 (flow time 100); large init the largest that does not diverge",
    ),
    "steps": chosen(STEPS, "not stated", "the networks reach L/L0 < 0.01 at small init"),
    "attention_architecture": chosen(
        "single head, d_k = d_v = 8, layer 2 reads the mean token",
        "dimension 8, length 10",
        "the simplest 2-layer stack of Prop. 2's modules",
    ),
    "one_layer_nqf": chosen(
        "the last module's NQF on the initial network's frozen features",
        "not defined",
        "Theorem 1 applied to the last module only",
    ),
}
