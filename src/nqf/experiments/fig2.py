"""Fig. 2 of the paper: the NQF tracks the module at small initialization (THEORY sec. 11).

Setting: output dimension k = 8, MSE, n = 600 training inputs, full batch. Modules (`nqf.modules`):

- MLP 20 -> 64 tanh -> 8, no bias (p = 28, d = 64), x ~ N(0, I_20 / 20);
- CNN on a 5 x 7 single-channel input, 64 kernels 4 x 5, stride 1, no padding, global sum pool,
  tanh (p = 28, d = 64); pixels ~ N(0, 1/20) (each 4 x 5 patch has E|x_P|^2 = 1; the patch sum s
  of the 6 patches has E|s|^2 = 6);
- QK attention: single head, input D = 20, d_k = 8 (the rows of W^Q, W^K are the d = 8 neurons,
  p = 40), length N = 16, tokens ~ N(0, beta^2 I/20) with beta^2 = 0.2455 (`QK_TOKEN_SCALE`,
  below), fixed readout c (20 x 8) ~ N(0, 20 / beta^4) (so that |u_o| = |Sigma_X c_o| ~ 1);
- MHA: 4 heads (d = 4), D = 20, d_k = 8, d_v = 20, N = 16 (p = 880), tokens ~ N(0, I/20).
Query x = the last token. The paper says only "Gaussian inputs". Rule for the scale: the vector each
neuron's nonlinearity reads (the MLP's x, a CNN patch x_P, an attention token) has norm ~1, i.e.
entries N(0, 1/dim). The labels are generated on the module's own NQF features and the GD /
momentum rates are divided by the feature variance (`LR`), so the input scale leaves the NQF's
W-trajectory exactly unchanged (tests/test_fig2_pair.py) and only sets how far the module is from
its NQF: the learned weights are set by the teacher, not by sigma, so the learned pre-activations /
logits scale with the inputs (with x ~ N(0, I_20) the learned MLP / QK pre-activations are O(1) and
the MLP / QK gaps are 4-9% / ~40% even at sigma = 0.01, measured during development).

Single-head QK attention needs a smaller scale. tanh is odd, so the MLP / CNN NQF neglects a term
of relative size ~z^2 in the pre-activation z; the softmax is not, and the NQF (its first order in
the logits l) neglects the second order, of relative size ~l/sqrt(2) for Gaussian logits. The
learned logits are fixed by the teacher, rms l* = beta^2 |s| / D (|s| = 1.152 the norm of the
teacher's singular values): at beta = 1 (unit tokens), l* = 0.058 predicts a 4.1% gap, and the
full run measured 4.12% (GD) / 5.19% (momentum) / 4.32% (Adam) at sigma = 0.01 and about the
same at sigma = 0.2 (the module cannot represent the teacher: its final loss is that gap squared).
beta is set so that the predicted gap is 1% (a fifth of `TRACK_BOUND`): beta^2 = sqrt(2) 0.01 D/|s|
= 0.2455, l* = 0.0141; measured 1.01 / 1.28 / 1.06%.

Teacher: a low-rank NQF on each module's own structure matrices, F*(x) = f0(x) + a(x)^T T b(x)
(the feed-forward form, Eq. E3) with T = P diag(1, 1/2, 1/4, 1/8) Q^T (P, Q random orthonormal
columns): the labels are exactly realizable by the NQF. Student module and its NQF start from the
same W0 ~ N(0, sigma^2) and are trained with GD, heavy-ball momentum 0.9 and Adam at
sigma = 0.01 and 0.2. Learning rates are set per module (see `LR`), equal for module and NQF.

Measured per module x optimizer x sigma:

- ``max_rel_deviation``: max over the saved steps of |F_module - F_NQF|_F / |y - f0|_F on the
  training set (the prediction gap relative to the scale of what is learned);
- ``sv_max_abs_deviation``: max over steps and k of |s_k(E_module) - s_k(E_NQF)| / s_k^teacher,
  the gap of the recovered singular values s_hat_k / s_k that the figure plots.

Checks: at sigma = 0.01 max_rel_deviation <= 0.05 for every module and optimizer; at sigma = 0.2
it is >= 0.1 (recorded as 0.1 / deviation <= 1: the NQF visibly departs).

Outcome of the full run (n = 600, 600 steps; seeds fixed; ~100 s on 2 CPU cores), max_rel_deviation
in % for GD / momentum / Adam:

    module         sigma = 0.01           sigma = 0.2
    MLP            0.24 / 0.61 / 0.37     19.0 / 20.6 / 15.9
    CNN            0.14 / 0.15 / 2.26     16.1 / 16.8 / 16.1
    QK attention   1.01 / 1.28 / 1.06     1.00 / 1.19 / 1.02   (FAIL: no departure)
    MHA            0.01 / 0.01 / 0.50     19.6 / 19.6 / 19.6

21 of 24 checks pass; the 3 QK checks at sigma = 0.2 FAIL, for a reason of the setting, not of the
implementation: the gap of single-head QK attention is set by its logits, and the init logits
(rms ~ sigma^2 beta^2, E(W0) having i.i.d. entries of size sigma^2) compare with the learned ones
as sigma^2 D / |s| = 0.69 at sigma = 0.2, whatever the input scale beta. So at sigma = 0.2 the QK
module is no farther from its NQF than at the teacher, and no beta gives both a tracking gap <= 5%
at sigma = 0.01 and >= 10% at sigma = 0.2 (the latter would need l* >= 0.2 / 0.69 ~ 0.3). With this
teacher the QK attention departs only at larger init: at sigma = 0.5 (ratio 4.3) the gap is 18.9%
for all three optimizers (measured). The MLP, CNN and MHA have d = 64 / 64 / 4 neurons whose init
weights, not the teacher, dominate at sigma = 0.2, and depart by 16-21%.

The first version had CNN pixels N(0, 1/120) (|s| = 1, patches of norm 0.41), QK tokens N(0, I/20)
(beta = 1) and MHA tokens N(0, I) (|x_avg| ~ 1), with the same NQF trajectories; its full run gave
(same table; 16 of 24 checks passed): MLP identical; CNN 0.02 / 0.03 / 1.69 and 2.95 / 3.05 / 2.95
(FAIL: at sigma = 0.2 the init pre-activations sigma |x_P| = 0.08 keep tanh linear); QK 4.12 / 5.19
/ 4.32 (momentum FAIL) and 4.07 / 4.83 / 4.13 (FAIL); MHA 0.13 / 0.13 / 9.55 (Adam FAIL) and 396
(at step 0). The MHA Adam gap came from the Q/K
weights, which the NQF does not contain (they enter at quartic order, their gradients are
O(sigma^2) relative to V's): Adam moves every coordinate by ~lr per step whatever its gradient, so
within 5 steps their rms grew from 0.01 to 0.03, giving logits of std 0.04 on tokens of norm 4.5;
a logit l changes the attention average by ~l sqrt(N) relative to the NQF's x_avg (a token is
sqrt(N) larger than the average of N), i.e. 9.6%. With unit-norm tokens the same weights give 20x
smaller logits: 0.50%.
"""

from __future__ import annotations

import time

import numpy as np

from ..modules import CNN, MHA, MLP, QKAttention
from ._common import COLORS, check, prepare_out_dir, write_outputs
from ._pair import OPTIMIZERS, train_pair

NAME = "fig2"
TITLE = "Fig. 2: module vs its NQF (MLP, CNN, QK attention, MHA) x (GD, momentum, Adam) at sigma 0.01 / 0.2"

S_TEACHER = np.array([1.0, 0.5, 0.25, 0.125])
SIGMAS = (0.01, 0.2)
K_OUT = 8
TRACK_BOUND = 0.05
DEPART_BOUND = 0.1
MODULE_NAMES = ("MLP", "CNN", "QK attention", "MHA")
D_ATT, N_TOKENS = 20, 16
# QK attention: token scale beta (tokens ~ N(0, beta^2 I / D)) chosen so that the leading term the NQF
# neglects, the softmax's second order, ~ l*/sqrt(2) relative with l* = beta^2 |s| / D the rms teacher
# logit, is QK_PREDICTED_ERROR = 1% (a fifth of TRACK_BOUND): beta^2 = sqrt(2) 0.01 D / |s| = 0.2455.
QK_PREDICTED_ERROR = 0.01
QK_TOKEN_SCALE = float(np.sqrt(np.sqrt(2.0) * QK_PREDICTED_ERROR * D_ATT / np.linalg.norm(S_TEACHER)))
# Learning rates (module and NQF share them): GD, momentum (lr / 10, same effective step), Adam. The
# GD / momentum rates are those of the first version (CNN pixels N(0, 1/120), QK tokens N(0, I/20),
# MHA tokens N(0, I)) divided by the change of the NQF feature variance (CNN |s|^2: x 6; QK |x_q|^2:
# x beta^2; MHA |x_avg|^2: x 1/20); this leaves the NQF's W-trajectory exactly unchanged (its loss
# scales with the feature variance; Adam's step is invariant to it), only the module moves.
LR = {
    "MLP": {"gd": 20.0, "momentum": 2.0, "adam": 0.01},
    "CNN": {"gd": 4.0 / 6.0, "momentum": 0.4 / 6.0, "adam": 0.01},
    "QK attention": {"gd": 80.0 / QK_TOKEN_SCALE**2, "momentum": 8.0 / QK_TOKEN_SCALE**2, "adam": 0.01},
    "MHA": {"gd": 8.0 * D_ATT, "momentum": 0.8 * D_ATT, "adam": 0.01},
}


def _orthonormal(rng, n, r):
    Q, R = np.linalg.qr(rng.standard_normal((n, r)))
    return Q * np.sign(np.diag(R))


def build(name: str, n: int, rng):
    """Module, width d, inputs, features and teacher labels y (n, 8) for one column of Fig. 2."""
    D, N = D_ATT, N_TOKENS
    if name == "MLP":
        mod, d = MLP(20, K_OUT), 64
        xs = rng.standard_normal((n, 20)) / np.sqrt(20.0)
    elif name == "CNN":  # pixels N(0, 1/20): every 4 x 5 patch (a neuron's tanh input) has norm ~1
        mod, d = CNN((5, 7), (4, 5), n_out=K_OUT), 64
        xs = rng.standard_normal((n, 5, 7)) / np.sqrt(20.0)
    elif name == "QK attention":  # tokens N(0, beta^2 I / D); c ~ N(0, D / beta^4) keeps |u_o| ~ 1
        b = QK_TOKEN_SCALE
        X = b * rng.standard_normal((n, D, N)) / np.sqrt(D)
        xs = (X[:, :, -1].copy(), X)
        mod, d = QKAttention(D, 8, rng.standard_normal((D, K_OUT)) * np.sqrt(D) / b**2), 8
    else:  # tokens N(0, I / D), norm ~1 like every other module's neuron inputs
        X = rng.standard_normal((n, D, N)) / np.sqrt(D)
        xs = (X[:, :, -1].copy(), X)
        mod, d = MHA(D, 8, 20, n_out=K_OUT), 4
    feats = mod.nqf_features(xs, d)
    na, nb = feats.a.shape[1], feats.b.shape[1]
    T = _orthonormal(rng, na, 4) @ np.diag(S_TEACHER) @ _orthonormal(rng, nb, 4).T
    y = np.einsum("ma,ab,mbk->mk", np.asarray(feats.a), T, np.asarray(feats.b))
    f0 = np.zeros_like(y) if feats.f0 is None else np.asarray(feats.f0)
    return mod, d, xs, y + f0, f0


def _singular_values(E):
    return np.linalg.svd(E, compute_uv=False)[..., :4]


def run(out_dir, quick: bool = False, progress=None) -> dict:
    """Fig. 2: write out_dir/fig2.png (recovered singular values s_hat_k / s_k vs step; module
    colored solid, NQF black dashed; rows = optimizers, columns = modules, left block sigma = 0.01,
    right block sigma = 0.2) and out_dir/fig2.json. `quick` uses n = 100 inputs and 150 instead
    of 600 steps (every check still runs; ~24 compilations dominate its run time)."""
    t_start = time.perf_counter()
    out = prepare_out_dir(out_dir)
    n = 100 if quick else 600
    steps = 150 if quick else 600
    save_every = 5
    results, curves, checks = {}, {}, []
    for name in MODULE_NAMES:
        rng = np.random.default_rng(2)
        mod, d, xs, y, f0 = build(name, n, rng)
        scale = float(np.linalg.norm(y - f0))
        for sigma in SIGMAS:
            W0 = sigma * np.random.default_rng(3).standard_normal((mod.p, d))
            for opt in OPTIMIZERS:
                lr = LR[name][opt]
                t0 = time.perf_counter()
                r = train_pair(mod, xs, y, W0, optimizer=opt, lr=lr, steps=steps, save_every=save_every)
                dev = np.linalg.norm((r["F_module"] - r["F_nqf"]).reshape(len(r["steps"]), -1), axis=1) / scale
                sv_m, sv_n = _singular_values(r["E_module"]), _singular_values(r["E_nqf"])
                key = f"{name} | {opt} | sigma={sigma:g}"
                results[key] = {
                    "module": name, "optimizer": opt, "sigma": sigma, "lr": lr, "width": d, "p": mod.p,
                    "max_rel_deviation": float(dev.max()),
                    "final_rel_deviation": float(dev[-1]),
                    "sv_max_abs_deviation": float(np.max(np.abs(sv_m - sv_n) / S_TEACHER)),
                    "final_recovered_sv_module": sv_m[-1] / S_TEACHER,
                    "final_recovered_sv_nqf": sv_n[-1] / S_TEACHER,
                    "final_loss_module": float(r["loss_module"][-1]),
                    "final_loss_nqf": float(r["loss_nqf"][-1]),
                    "initial_loss": float(r["loss_nqf"][0]),
                    "wall_time_s": time.perf_counter() - t0,
                }
                curves[key] = (r["steps"], sv_m / S_TEACHER, sv_n / S_TEACHER)
                if progress is not None:
                    progress(key, results[key])
                if sigma == SIGMAS[0]:
                    checks.append(check(f"fig2 {key}: max rel deviation module vs NQF", dev.max(), TRACK_BOUND))
                else:
                    checks.append(check(f"fig2 {key}: NQF departs, 0.1 / max rel deviation (<= 1 iff "
                                        f"deviation >= {DEPART_BOUND:g})", DEPART_BOUND / dev.max(), 1.0))
    fig = _plot(curves, quick)
    summary = {
        "name": NAME, "title": TITLE, "quick": bool(quick),
        "settings": {
            "n_train": n, "steps": steps, "save_every": save_every, "outputs": K_OUT,
            "teacher_singular_values": S_TEACHER, "sigmas": SIGMAS, "lr": LR,
            "qk_token_scale": QK_TOKEN_SCALE,
            "deviation": "max over saved steps of |F_module - F_NQF|_F / |y - f0|_F (training set)",
            "sv_deviation": "max over steps, k of |s_k(E_module) - s_k(E_NQF)| / s_k (teacher)",
            "modules": {
                "MLP": "20 -> 64 tanh -> 8, no bias, x ~ N(0, I/20)",
                "CNN": "5x7 input (pixels N(0, 1/20)), 64 kernels 4x5, stride 1, no padding, sum pool, tanh",
                "QK attention": (f"single head, D=20, d_k=8 (neurons = rows of W^Q, W^K), N=16, tokens "
                                 f"N(0, beta^2 I/20), beta^2 = {QK_TOKEN_SCALE**2:.4f}, c ~ N(0, 20 / beta^4)"),
                "MHA": "4 heads, D=20, d_k=8, d_v=20, N=16, tokens N(0, I/20)",
            },
        },
        "results": results,
        "wall_time_s": time.perf_counter() - t_start,
        "checks": checks,
    }
    return write_outputs(out, NAME, fig, summary)


def _plot(curves, quick):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(22, 8), layout="constrained")
    axes = fig.subplots(len(OPTIMIZERS), 2 * len(MODULE_NAMES), sharey=True)
    for b, sigma in enumerate(SIGMAS):
        for j, name in enumerate(MODULE_NAMES):
            for i, opt in enumerate(OPTIMIZERS):
                ax = axes[i, b * len(MODULE_NAMES) + j]
                steps, sm, sn = curves[f"{name} | {opt} | sigma={sigma:g}"]
                for k in range(4):
                    ax.plot(steps, sm[:, k], color=COLORS[k], lw=1.6, label=f"$k={k + 1}$" if (i, j) == (0, 0) else None)
                    ax.plot(steps, sn[:, k], color="k", lw=1.0, ls="--", label="NQF" if (i, j, k) == (0, 0, 0) else None)
                ax.set_ylim(-0.05, 1.4)
                if i == 0:
                    ax.set_title(f"{name}, $\\sigma={sigma:g}$", fontsize=9)
                if j == 0 and b == 0:
                    ax.set_ylabel(f"{opt}\n$\\hat s_k / s_k$")
                if i == len(OPTIMIZERS) - 1:
                    ax.set_xlabel("step")
                ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Module (color) vs its NQF (black dashed): recovered singular values; left: "
                 "$\\sigma = 0.01$, right: $\\sigma = 0.2$" + (" [quick]" if quick else ""))
    return fig
