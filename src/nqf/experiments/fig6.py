"""Fig. 6 of the paper (Appendix C): online SGD in a teacher-student setting; the NQF tracks the
module for the first steps, then the two trajectories separate (THEORY sec. 11).

Setting (paper values unless marked *chosen*):

- MLP: student and teacher are `nqf.modules.MLP` 20 -> 100 tanh -> 1, no bias (p = 21, d = 100);
  online SGD, lr 0.05, batch 64, 2000 steps. Inputs x ~ N(0, I_20 / 4) (*chosen*: the paper says
  only "Gaussian"; measured during development with the same seeds: at x ~ N(0, I_20) the NQF (a
  linear model of x) runs at the edge of stability at lr 0.05 and the two separate after ~10
  steps; at x ~ N(0, I_20 / 20) the teacher is 94% linear and the two never separate within 2000
  steps; at N(0, I / 4) the teacher's pre-activations have variance 5 and the run shows the
  paper's picture, agreement through the escape from the plateau, separation after ~150 steps).
- QK attention: `nqf.modules.QKAttention` with heads (Proposition 3), D = 16, N = 10, d_k = 8,
  4 heads (p = 2 d_k D = 256, d = 4), fixed readout c ~ N(0, I_16) (one output); online SGD,
  lr 0.02, batch 64, 2000 steps. Tokens ~ N(0, I_16) (*chosen*), query = the last token (as in
  `fig2`).
- Teacher: the same module with standard Gaussian weights W* ~ N(0, 1) (paper); labels y = f(W*, x)
  without noise. Student module and its NQF (feed-forward form, `nqf.modules`) start from the
  same W0 ~ N(0, eps^2) and see the same fresh batch at every step (`train_online`).
- Init scales eps = 1e-3 (the paper's), 1e-2 and 1e-1 (*chosen*, larger: the NQF's error is
  O(eps) relative at the start and the weights leave the small regime sooner).

Measured on a fixed probe set of 1000 inputs (300 with `quick`) drawn once from the input law:

- deviation(t) = |F_module(t) - F_NQF(t)|_F / |y - f0|_F over the probe set (the prediction gap
  relative to the scale of what is learned; f0 = outputs at W = 0), saved at every step;
- separation step = the first step t with deviation(t) > 0.1 (`THRESHOLD`, fig2's departure bound);
  null (and ``separated: false``) if the deviation stays <= 0.1 for the whole run;
- sustained separation step = the first step from which the deviation stays > 0.1 to the end of
  the run (null if it is <= 0.1 at the last step): robust to the batch noise, which makes the
  deviation fluctuate around its trend;
- learning onset = the first step at which the module's probe loss is <= 0.9 x its initial value
  (for context: a separation after the onset means the NQF tracked the start of learning).

Checks, per model: at eps = 1e-3 the module - NQF deviation at step 0 is <= 1e-8 (the NQF is
the module's expansion to O(|W|^4); measured 1.9e-11 MLP, 7.8e-11 QK); the smallest init
separates later than the largest, sep(eps = 1e-3) > sep(eps = 0.1), recorded as
sep(0.1) - sep(1e-3) <= -1 with a run that never separates counted as separating at steps + 1.

Claim, per model (Appendix C: the trajectories "match for the first 100 steps and then they
become different"; the NQF "tracks the attention model accurately for the first 100 steps"), at
eps = 1e-3: separation step >= 100 and a sustained separation within the run. Full run: MLP
separation at step 147, sustained from 381 (deviation 0.21 at the end); QK attention 148, from
160 (0.80): both reproduced at the package's input scale. Sensitivity, MLP inputs N(0, I_20) (the
literal "Gaussian"): separation at step 10 (the NQF, linear in x, runs at the edge of stability at
lr 0.05): not reproduced.

What the full run shows (seeds fixed; numbers in fig6.json): for the MLP the deviation is at
rounding level on the plateau, jumps to ~0.08 during the escape (steps ~15-25 at eps = 1e-3; the
NQF, linear in x, misses the teacher's cubic part the module starts to fit) and then grows slowly
with the batch noise on top; the first crossing of 0.1 (step 147 at eps = 1e-3 and 1e-2, 6 at
eps = 0.1, where the escape spike itself crosses) is a crossing of that noisy level, and after the
escape the three curves coincide. For QK attention the deviation grows smoothly through 0.1 at
steps ~150 / ~110 / ~55 for eps = 1e-3 / 1e-2 / 1e-1.
`quick` runs 300 steps on a 300-input probe set (the same batches and the same checks).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from ..data.modules import MLP, QKAttention
from ._common import COLORS, check, chosen, claim, prepare_out_dir, sensitivity, write_outputs
from ._pair import train_online

NAME = "fig6"
TITLE = (
    "Fig. 6: online SGD teacher-student, MLP 20-100-1 and QK attention vs their NQFs: the step "
    "at which they separate (eps 1e-3 / 1e-2 / 1e-1)"
)

EPS = (1e-3, 1e-2, 1e-1)
THRESHOLD = 0.1
BATCH = 64
ONSET = 0.9
PAPER_SEPARATION_STEP = 100
MLP_INPUT_STD = 0.5
INIT_DEV_BOUND = 1e-8  # module vs NQF at step 0, eps = 1e-3: the NQF is the module to O(|W|^4)
SECTION = "Appendix C (Additional experiments on NQF approximation), Fig. 6"
MODEL_NAMES = ("MLP", "QK attention")
LR = {"MLP": 0.05, "QK attention": 0.02}
SETTINGS = {
    "MLP": "20 -> 100 tanh -> 1, no bias; x ~ N(0, I_20 / 4); teacher W* ~ N(0, 1)",
    "QK attention": (
        "Proposition 3, 4 heads, D=16, N=10, d_k=8, readout c ~ N(0, I_16); tokens ~ N(0, I_16), "
        "query = last token; teacher W* ~ N(0, 1)"
    ),
}


CHOSEN_SETTINGS = {
    "mlp_inputs": chosen(
        "x ~ N(0, I_20 / 4)",
        '"sampled i.i.d. from a Gaussian distribution" (scale not stated)',
        "at N(0, I_20) the NQF (linear in x) runs at the edge of stability at lr 0.05 (sensitivity "
        "row); at N(0, I_20 / 20) the teacher is 94% linear and the two never separate",
    ),
    "attention": chosen(
        "tokens N(0, I_16), query = last token, readout c ~ N(0, I_16)",
        '"a fixed Gaussian readout vector", Gaussian inputs',
        "standard normal, as stated",
    ),
    "threshold": chosen(THRESHOLD, '"match" / "become different" (no number)', "fig2's departure bound"),
    "eps_contrast": chosen(EPS[1:], "only eps = 1e-3", "larger inits for the ordering check"),
}


def build(name: str, input_std: float | None = None):
    """Module, width d, teacher weights and an input sampler ``draw(rng, m)`` for one model; MLP
    inputs have entry std `input_std` (default 0.5, the package's N(0, I/4))."""
    rng = np.random.default_rng(0)
    if name == "MLP":
        mod, d = MLP(20, 1), 100
        std = MLP_INPUT_STD if input_std is None else float(input_std)

        def draw(r, m):
            return std * r.standard_normal((m, 20))
    elif name == "QK attention":
        D, N, d_k, heads = 16, 10, 8, 4
        mod, d = QKAttention(D, d_k, rng.standard_normal((D, 1)), heads=True), heads

        def draw(r, m):
            X = r.standard_normal((m, D, N))
            return (X[:, :, -1].copy(), X)
    else:
        raise ValueError(f"unknown model {name!r}; expected one of {MODEL_NAMES}.")
    W_teacher = rng.standard_normal((mod.p, d))
    return mod, d, W_teacher, draw


def deviation(F_module, F_nqf, y, f0) -> np.ndarray:
    """|F_module(t) - F_NQF(t)|_F / |y - f0|_F for every saved step t (axis 0)."""
    n = F_module.shape[0]
    return np.linalg.norm((F_module - F_nqf).reshape(n, -1), axis=1) / np.linalg.norm(np.asarray(y - f0))


def first_step_above(values, steps, threshold):
    """The first step whose value exceeds `threshold`, or None."""
    above = np.flatnonzero(np.asarray(values) > threshold)
    return int(steps[above[0]]) if above.size else None


def _curve_indices(n: int, extra=()) -> np.ndarray:
    """~150 log-spaced indices of 0..n-1 plus `extra` (and their predecessors), for the JSON."""
    idx = set(np.unique(np.round(np.geomspace(1, n, 150)).astype(int) - 1).tolist()) | {0, n - 1}
    for e in extra:
        if e is not None and 0 <= e < n:
            idx |= {e, max(e - 1, 0)}
    return np.array(sorted(idx))


def run_model(
    name: str, eps_values, steps: int, n_probe: int, *, input_std: float | None = None, progress=None
) -> tuple[dict, dict]:
    """Online SGD of model `name` and its NQF from W0 = eps N(0, 1) (rng 3) for each eps; inputs of
    entry std `input_std` (default: the package's, `build`). Returns (results keyed "name | eps=e",
    curves for the plot)."""
    results, curves = {}, {}
    mod, d, W_t, draw = build(name, input_std)
    teacher = jax.jit(lambda xs, mod=mod, W=jnp.asarray(W_t): mod.apply(W, xs))  # noqa: B008 (binds W_t now)

    def sample(k):
        xs = draw(np.random.default_rng([1, k]), BATCH)
        return xs, np.asarray(teacher(jax.tree_util.tree_map(jnp.asarray, xs)))

    probe = draw(np.random.default_rng(2), n_probe)
    y_probe = np.asarray(teacher(jax.tree_util.tree_map(jnp.asarray, probe)))
    feats = mod.nqf_features(probe, d)
    f0 = np.zeros_like(y_probe) if feats.f0 is None else np.asarray(feats.f0)
    for eps in eps_values:
        W0 = eps * np.random.default_rng(3).standard_normal((mod.p, d))
        t0 = time.perf_counter()
        r = train_online(mod, sample, W0, optimizer="gd", lr=LR[name], steps=steps, probe=probe)
        dev = deviation(r["F_module"], r["F_nqf"], y_probe, f0)
        loss_m = np.mean((r["F_module"] - y_probe) ** 2, axis=(1, 2))
        loss_n = np.mean((r["F_nqf"] - y_probe) ** 2, axis=(1, 2))
        sep = first_step_above(dev, r["steps"], THRESHOLD)
        below = np.flatnonzero(loss_m <= ONSET * loss_m[0])
        onset = int(r["steps"][below[0]]) if below.size else None
        ok = np.flatnonzero(dev <= THRESHOLD)
        sustained = (
            int(r["steps"][0]) if ok.size == 0 else int(r["steps"][ok[-1] + 1]) if ok[-1] + 1 < len(dev) else None
        )
        idx = _curve_indices(len(r["steps"]), (sep, onset, sustained))
        key = f"{name} | eps={eps:g}"
        results[key] = {
            "model": name,
            "eps": eps,
            "lr": LR[name],
            "width": d,
            "p": mod.p,
            "separation_step": sep,
            "separated": sep is not None,
            "sustained_separation_step": sustained,
            "learning_onset_step": onset,
            "deviation_at_step0": float(dev[0]),
            "deviation_at_end": float(dev[-1]),
            "max_deviation": float(dev.max()),
            "probe_loss_module_final": float(loss_m[-1]),
            "probe_loss_nqf_final": float(loss_n[-1]),
            "probe_loss_initial": float(loss_m[0]),
            "online_loss_module_last100": float(np.mean(r["batch_loss_module"][-100:])),
            "online_loss_nqf_last100": float(np.mean(r["batch_loss_nqf"][-100:])),
            "curve": {
                "step": r["steps"][idx],
                "deviation": dev[idx],
                "probe_loss_module": loss_m[idx],
                "probe_loss_nqf": loss_n[idx],
            },
            "wall_time_s": time.perf_counter() - t0,
        }
        curves[key] = (r["steps"], dev, loss_m / loss_m[0], loss_n / loss_m[0], sep)
        if progress is not None:
            progress(key, {"separation_step": sep, "learning_onset_step": onset})
    return results, curves


def _claim(name: str, r: dict, steps: int, setting: str, label: str = "") -> dict:
    """The paper's "the NQF tracks for the first 100 steps, then the trajectories separate" at eps = 1e-3."""
    sep, sus = r["separation_step"], r["sustained_separation_step"]
    text = {
        "MLP": "The trajectories of the two student models match for the first 100 steps and then they become "
        "different.",
        "QK attention": "The NQF tracks the attention model accurately for the first 100 steps.",
    }[name]
    return claim(
        f"fig6 {label}{name} eps=1e-3: tracks >= {PAPER_SEPARATION_STEP} steps, then separates",
        text,
        SECTION,
        metric=(
            f"separation step = first step with |F - F_NQF| / |y - f0| > {THRESHOLD:g} on the probe set; "
            "separated = the deviation stays above it from some step to the end"
        ),
        value={"separation_step": sep, "sustained_separation_step": sus},
        criterion=f"separation step >= {PAPER_SEPARATION_STEP} and separated within {steps} steps",
        holds=sep is not None and sep >= PAPER_SEPARATION_STEP and sus is not None,
        setting=setting,
        why=(
            f"learning onset (probe loss <= {ONSET:g} x initial) at step {r['learning_onset_step']}; "
            f"deviation at step 0 {r['deviation_at_step0']:.2g}, at the end {r['deviation_at_end']:.3g}"
        ),
    )


def run(out_dir, quick: bool = False, progress=None) -> dict:
    """Fig. 6: write out_dir/fig6.png (top: deviation vs step, log-log, one curve per eps, dotted
    threshold; bottom: probe loss of module (solid) and NQF (dashed)) and out_dir/fig6.json.
    `quick`: 300 steps on a 300-input probe set, no sensitivity row (every check and claim runs)."""
    t_start = time.perf_counter()
    out = prepare_out_dir(out_dir)
    steps = 300 if quick else 2000
    n_probe = 300 if quick else 1000
    results, curves, checks, claims = {}, {}, [], []
    for name in MODEL_NAMES:
        res, cur = run_model(name, EPS, steps, n_probe, progress=progress)
        results.update(res)
        curves.update(cur)
        seps = {eps: res[f"{name} | eps={eps:g}"]["separation_step"] for eps in EPS}
        r0 = res[f"{name} | eps={EPS[0]:g}"]
        checks.append(
            check(
                f"fig6 {name}: module - NQF deviation at step 0, eps={EPS[0]:g} (the NQF is the module's "
                "expansion to O(|W|^4): ~eps^4 of the labels' scale)",
                r0["deviation_at_step0"],
                INIT_DEV_BOUND,
            )
        )
        claims.append(_claim(name, r0, steps, "package-chosen"))
        small, large = EPS[0], EPS[-1]
        eff = lambda s: steps + 1 if s is None else s  # noqa: E731
        checks.append(
            check(
                f"fig6 {name}: separation step at eps={large:g} minus at eps={small:g} (<= -1 iff the small "
                f"init separates later; never separating counts as step {steps + 1})",
                eff(seps[large]) - eff(seps[small]),
                -1,
            )
        )
    if quick:
        sens = sensitivity(quick=True)
    else:
        res, _ = run_model("MLP", EPS[:1], steps, n_probe, input_std=1.0, progress=progress)
        r = res[f"MLP | eps={EPS[0]:g}"]
        r.pop("curve")
        sens = sensitivity(
            [
                {
                    "setting": 'MLP inputs x ~ N(0, I_20) ("Gaussian" read as standard normal)',
                    "claims": [_claim("MLP", r, steps, "paper", "std-normal inputs ")],
                    "result": r,
                }
            ],
            quick=False,
        )
    fig = _plot(curves, quick)
    summary = {
        "name": NAME,
        "title": TITLE,
        "quick": bool(quick),
        "settings": {
            "steps": steps,
            "batch": BATCH,
            "optimizer": "online SGD (fresh batch every step, no momentum)",
            "lr": LR,
            "eps": EPS,
            "n_probe": n_probe,
            "models": SETTINGS,
            "deviation": "|F_module - F_NQF|_F / |y - f0|_F on the fixed probe set, every step",
            "separation_step": f"first step with deviation > {THRESHOLD:g} (null: never)",
            "sustained_separation_step": f"first step from which deviation > {THRESHOLD:g} to the end (null: none)",
            "learning_onset_step": f"first step with module probe loss <= {ONSET:g} x initial",
            "threshold": THRESHOLD,
            "seeds": "teacher/readout rng 0, batch k rng [1, k], probe rng 2, W0 rng 3 (times eps)",
        },
        "paper_separation_step": PAPER_SEPARATION_STEP,
        "results": results,
        "wall_time_s": time.perf_counter() - t_start,
        "chosen_settings": CHOSEN_SETTINGS,
        "checks": checks,
        "claims": claims,
        "sensitivity": sens,
    }
    return write_outputs(out, NAME, fig, summary)


def _plot(curves, quick):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 8), layout="constrained")
    axes = fig.subplots(2, len(MODEL_NAMES))
    for j, name in enumerate(MODEL_NAMES):
        top, bot = axes[0, j], axes[1, j]
        for i, eps in enumerate(EPS):
            steps, dev, lm, ln, sep = curves[f"{name} | eps={eps:g}"]
            t = steps + 1
            top.loglog(t, np.maximum(dev, 1e-16), color=COLORS[i], lw=1.4, label=f"$\\epsilon={eps:g}$")
            if sep is not None:
                top.axvline(sep + 1, color=COLORS[i], ls=":", lw=1)
            bot.loglog(t, lm, color=COLORS[i], lw=1.6, label=f"module, $\\epsilon={eps:g}$")
            bot.loglog(t, ln, color=COLORS[i], lw=1.0, ls="--", label="NQF" if i == 0 else None)
        top.axhline(THRESHOLD, color="k", ls=":", lw=1, label=f"threshold {THRESHOLD:g}")
        top.set_title(f"{name}: relative deviation module vs NQF (probe set)", fontsize=10)
        top.set_ylabel("$|F - F_{NQF}| / |y - f_0|$")
        bot.set_ylabel("probe loss / initial")
        bot.set_xlabel("step + 1")
        top.legend(fontsize=8)
        bot.legend(fontsize=7)
    fig.suptitle(
        "Fig. 6: online SGD teacher-student, module vs its NQF from the same init" + (" [quick]" if quick else "")
    )
    return fig
