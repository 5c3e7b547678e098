"""`nqf.predict` of a deep network: the multi-layer NQF (Theorems 14, 15; THEORY sec. 10) of a
chain of Linear layers (`nqf.data.DeepNetwork`), with each layer's structure functions derived
from the module by autodiff.

**Structure functions (Theorem 12 per layer, Theorem 14 for the stack).** NQF layer l's output
for one input h = h^(l-1) (x for l = 1) is the module's own sub-module F_l(W^(l), h)
(`DeepNetwork.layer_output`). Its expansion at W^(l) = 0 is read off by forward- and
reverse-mode autodiff of F_l, at one input at a time (traceable, so it follows h^(l-1)(x) as
the lower layers train):

- C_l(h) = F_l(0, h) (the frozen output bias of a pair);
- a pair (L_a, L_b), neuron [u; o] (u: L_a's row and bias entry, o: L_b's column):
  r_l(h) = grad_u d F_{l,0} / d o_0 at W = 0 (for phi(z) = tanh: phi'(0) [z; 1], z = phi(h) for
  l >= 2), and A_{l,j}(h) = 1/2 [[0, r_l e_j^T], [e_j r_l^T, 0]], so Tr[M A_{l,j}] =
  (r_l^T M[:p_a, p_a:])_j and sum_{x,j} c_{xj} A_{l,j}(h_x) = 1/2 [[0, R^T c], [c^T R, 0]] (the
  structured paths of `nqf.multilayer.Layer`, never a dense (D, p, p) A per input);
- a readout (one neuron, d = 1, holding L_r's weight and bias): g_l(h) = dF_l/dw (D_l, p_l)
  (jacfwd), A = B = 0 (F_l is linear in its weights).

That this is F_l's whole expansion to second order (g = 0 and B = 0 for a pair, A = 0 for a
readout, A_j of exactly this form) is checked when the structure is built, by second
directional derivatives of F_l at W = 0 with d = 2 neurons along random directions on the first
training input and on a random h (`_check_layer`): a module whose layer is not of this form is
refused with an `nqf.ExtractionError` naming the layer.

**The prediction.** `closed_deep_sgd` (Theorem 14, exact for any widths) from the per-layer
W^(l)(0) with the learning rate, steps, batches and weight decay of the `nqf.SGD` given to
`predict` (a constant learning rate, no momentum, the MSE); the loss is the
MSE (1/(m k)) sum (f - y)^2 of `nqf.record`. The result is a `DeepPrediction` (a `Prediction`):
its `eigenvalues` are those of the block-diagonal M = diag(M^(1), ..., M^(L)) (what `nqf.record`
records for a `DeepNetwork`), so `nqf.compare` puts the loss curve, half-drop time, phase end and
ignition times beside a recording; `layer_*` give each layer's own eigenvalues, targets and
ignition times, and `compare(...).summary()["layers"]` the measured ones per layer.

**Small initialization.** The multi-layer NQF is the leading order of every layer's expansion:
`predict` refuses (ValueError naming `init_scale` / `W0`) a start where a layer's NQF output
differs from the module's layer output by more than `INIT_LAYER_TOL` = 0.1 (relative, RMS over
the training inputs, propagated through the NQF layers below). Not covered (a `ValueError`
naming the argument): `nqf.Flow`, momentum, a schedule, a loss other than the MSE, held-out data,
the a-priori departure estimate, `target="asymptote"`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core import memory
from .._core.io import Saveable
from ..data import DeepNetwork
from ..data._extract import ExtractionError
from ..dynamics import batch_indices as draw_batches
from ..dynamics import multilayer as ml
from ..dynamics._losses import as_loss
from ..dynamics._training import SGD, Flow
from . import _events
from ._events import Curves, check_target
from ._inputs import check_data, check_steps, initial_weights, resolve_step_values
from ._predict import _DEEP_PREDICT, Prediction, _warn_frozen

__all__ = ["DeepPrediction", "DeepPath", "predict_deep", "nqf_layers", "INIT_LAYER_TOL"]

INIT_LAYER_TOL = 0.1
_CHECK_RTOL = 1e-7  # second directional derivatives: structure vs the module (float64 autodiff)


@dataclasses.dataclass(frozen=True, eq=False)
class DeepPath(Saveable):
    """The saved states of the multi-layer NQF's map: `steps` (n,), `t` = lr steps (n,), `loss`
    (n,) (1/(m k)) sum (f - y)^2, per layer `M` (tuple of (n, p_l, p_l)) and `mu` (tuple of
    (n, p_l)), `outputs` (n, m, k) on the training inputs."""

    steps: np.ndarray
    t: np.ndarray
    loss: np.ndarray
    M: tuple
    mu: tuple
    outputs: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class DeepPrediction(Prediction):
    """A `Prediction` from the multi-layer NQF (module docstring): `eigenvalues` (n, p) are the
    union of the layers' eigenvalues (the block-diagonal M), `trajectory` a `DeepPath`, `model`
    the `nqf.multilayer.DeepNQF` (not saved). Per layer l (tuples of L entries):
    `layer_eigenvalues` (n, p_l), `layer_targets` (p_l,), `layer_growing` (p_l,) bool,
    `layer_ignition_times` (p_l,) (gradient-flow time); `layer_init_error` (L,): the relative RMS
    difference between each layer's NQF output and the module's at W0 on the training inputs.
    `departure_estimate` is nan (not computed for a deep network)."""

    _unsaved_fields = ("network", "model")

    layer_eigenvalues: tuple = ()
    layer_targets: tuple = ()
    layer_growing: tuple = ()
    layer_ignition_times: tuple = ()
    layer_init_error: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))

    def _after_load(self) -> None:
        object.__setattr__(self, "network", None)
        object.__setattr__(self, "model", None)

    def __getstate__(self):
        return {**super().__getstate__(), "model": None}

    def with_targets(self, target=None, *, rho=None) -> DeepPrediction:
        """This prediction with other ignition targets (``"phase_end"``, ``"horizon"``, or values
        (p,) for the union of the layers' eigenvalues; per layer: phase-end / horizon values) or
        fraction `rho`, without solving again."""
        s = self.settings
        target = s["target"] if target is None else target
        rho = s["rho"] if rho is None else rho
        if not (isinstance(rho, (int, float, np.floating)) and 0.0 < rho < 1.0):
            raise ValueError(f"`rho` must lie in (0, 1); found {rho!r}.")
        ev, layers = _all_events(self.t, self.loss, self.layer_eigenvalues, target, float(rho), s["phase_tol"])
        label = target if isinstance(target, str) else "given"
        return dataclasses.replace(self, settings={**s, "target": label, "rho": float(rho)}, **ev, **layers)

    def layer_summary(self, recording) -> list[dict]:
        """Per layer: the predicted and measured ignition times of the layer's growing modes (the
        recording's M (n, p, p) read block by block, the layer's own targets), and the largest
        relative error (nan where no mode grows, inf where a predicted ignition is not measured)."""
        from ._compare import _max_rel

        M = np.asarray(recording.M)
        t = np.asarray(recording.t, dtype=float)
        out, r0 = [], 0
        for l, (tg, grow, ign) in enumerate(zip(self.layer_targets, self.layer_growing, self.layer_ignition_times)):
            p = tg.shape[0]
            eig = np.linalg.eigvalsh(M[:, r0 : r0 + p, r0 : r0 + p])[:, ::-1]
            r0 += p
            c = Curves(t, np.asarray(recording.loss, float), t, eig, None, "saved")
            meas = (
                _events.ignition(c, tg, self.settings["rho"], grow) if np.all(np.isfinite(tg)) else np.full(p, np.nan)
            )
            out.append(
                {
                    "layer": l + 1,
                    "predicted": ign[grow].tolist(),
                    "measured": np.asarray(meas)[grow].tolist(),
                    "max_relative_error": _max_rel(ign[grow], np.asarray(meas)[grow]),
                }
            )
        return out


# --------------------------------------------------------------------------------------------
# structure functions by autodiff
# --------------------------------------------------------------------------------------------
def _pair_layer(net: DeepNetwork, l: int, D: int) -> ml.Layer:
    """A pair's `nqf.multilayer.Layer` with r_l, C_l derived by autodiff (module docstring)."""
    p = net.layers[l].p
    pa = p - D
    zero = jnp.zeros((p, 1))
    e0 = zero.at[pa, 0].set(1.0)

    def F(W, h):
        return jnp.atleast_1d(net.layer_output(l, W, h))

    def r(h):
        return jax.grad(lambda W: jax.jvp(lambda V: F(V, h)[0], (W,), (e0,))[1])(zero)[:pa, 0]

    def structure(h):
        blk = 0.5 * jnp.einsum("a,jb->jab", r(h), jnp.eye(D))
        A = jnp.zeros((D, p, p)).at[:, :pa, pa:].set(blk)
        return ml.Structure(A + jnp.swapaxes(A, 1, 2), F(zero, h))

    def traces(h, M):
        return r(h) @ M[:pa, pa:]

    def weighted(hb, c):
        blk = 0.5 * (jax.vmap(r)(hb).T @ c)
        return jnp.zeros((p, p)).at[:pa, pa:].set(blk).at[pa:, :pa].set(blk.T)

    return ml.Layer(structure, p, D, traces=traces, weighted=weighted)


def _readout_layer(net: DeepNetwork, l: int, D: int) -> ml.Layer:
    """A readout's `nqf.multilayer.Layer`: g_l = dF_l/dw (jacrev), C_l = F_l(0, h), A = 0."""
    p = net.layers[l].p

    def F(W, h):
        return jnp.atleast_1d(net.layer_output(l, W, h))

    def structure(h):
        g = jax.jacrev(lambda w: F(w[:, None], h))(jnp.zeros(p))  # D <= p: D backward passes
        return ml.Structure(jnp.zeros((D, p, p)), F(jnp.zeros((p, 1)), h), g)

    return ml.Layer(
        structure, p, D, traces=lambda h, M: jnp.zeros(D), weighted=lambda hb, c: jnp.zeros((p, p), dtype=c.dtype)
    )


def _check_layer(net: DeepNetwork, l: int, layer: ml.Layer, h) -> float:
    """Largest relative difference, over random directions U, V (p, d) (d = 2 neurons for a pair,
    1 for a readout), between F_l's first and second directional derivatives at W = 0 and the
    structure's (g^T (U 1) and 2 sum_i U_i^T A_j V_i: no B term, so no cross-neuron coupling);
    and F_l(0) against C."""
    rng = np.random.default_rng(l + 1)
    p, d = layer.p, (2 if net.kinds[l] == "pair" else 1)  # a readout is one neuron (d = 1)

    def F(W):
        return jnp.atleast_1d(net.layer_output(l, W, h))

    s = layer.components(h)
    zero = jnp.zeros((p, d))
    errs = [float(jnp.max(jnp.abs(F(zero) - (0.0 if s.C is None else s.C))))]
    scale = float(jnp.max(jnp.abs(F(zero)))) + 1e-300
    for _ in range(2):
        U, V = (jnp.asarray(rng.standard_normal((p, d))) for _ in range(2))
        first = jax.jvp(F, (zero,), (U,))[1]
        second = jax.jvp(lambda W, U=U: jax.jvp(F, (W,), (U,))[1], (zero,), (V,))[1]
        u1 = U.sum(axis=1)
        want1 = jnp.zeros_like(first) if s.g is None else s.g @ u1
        want2 = 2.0 * jnp.einsum("jab,ai,bi->j", s.A, U, V)
        scale = max(scale, float(jnp.max(jnp.abs(first))), float(jnp.max(jnp.abs(second))))
        errs += [float(jnp.max(jnp.abs(first - want1))), float(jnp.max(jnp.abs(second - want2)))]
    return max(errs) / max(scale, 1e-300)


def nqf_layers(net: DeepNetwork, x0) -> list[ml.Layer]:
    """The multi-layer NQF's layers of `net` (structure functions by autodiff, module docstring),
    checked on the input `x0` (one training input) and a random input of each upper layer.

    **Raises:** `ExtractionError` naming the layer when its expansion at W = 0 is not of the
    pair / readout form (e.g. an activation with phi(0) != 0 gives a gradient term g), or when a
    pair's A vanishes (phi'(0) = 0: a flat NQF)."""
    if not isinstance(net, DeepNetwork):
        raise TypeError(f"`net` must be an nqf.data.DeepNetwork; found {type(net).__name__}.")
    phi0 = float(net.activation(jnp.zeros(())))
    dphi0 = float(jax.grad(lambda z: net.activation(z))(0.0))
    if phi0 != 0.0 or dphi0 == 0.0:
        raise ExtractionError(
            f"The activation {net.activation_name} has phi(0) = {phi0:g}, phi'(0) = {dphi0:g}: the multi-layer NQF "
            "of a chain needs phi(0) = 0 (no gradient term at W = 0, Theorem 1) and phi'(0) != 0 (else every "
            "pair's A vanishes: a flat NQF). Name one layer's neurons with `neurons=` instead."
        )
    layers, h = [], jnp.asarray(x0, dtype=jnp.float64)
    rng = np.random.default_rng(0)
    for l, (kind, lay) in enumerate(zip(net.kinds, net.layers)):
        D = int(
            np.prod(jax.eval_shape(lambda h=h, l=l, lay=lay: net.layer_output(l, lay.to_W(), h)).shape, dtype=int) or 1
        )
        layer = (_pair_layer if kind == "pair" else _readout_layer)(net, l, D)
        probes = [h] if l == 0 else [h, jnp.asarray(rng.standard_normal(h.shape))]
        err = max(_check_layer(net, l, layer, hp) for hp in probes)
        if not err <= _CHECK_RTOL:
            raise ExtractionError(
                f"NQF layer {l + 1} ({kind}: {', '.join(lay.group_names)}): the module's expansion at W = 0 is not "
                f"the {kind} form the multi-layer NQF uses (relative difference {err:.3g} in its first/second "
                "derivatives). Name one layer's neurons with `neurons=` instead."
            )
        layers.append(layer)
        h = net.layer_output(l, lay.to_W(), h)
    return layers


# --------------------------------------------------------------------------------------------
# predict
# --------------------------------------------------------------------------------------------
_MSE_K: dict = {}


def _mse_mean(k: int):
    """ell(f, y) = (f - y)^2 / k: `nqf.multilayer` sums over outputs, `nqf.record` averages (one
    function per k, so compiled programs are reused)."""
    if k == 1:
        return "mse"
    if k not in _MSE_K:
        _MSE_K[k] = lambda f, y: (f - y) ** 2 / k
    return _MSE_K[k]


def _unsupported(training, options: dict) -> None:
    """ValueError naming the first `predict` argument the multi-layer NQF's map does not take."""
    why = {
        "ts": "saved times of a flow",
        "estimate_departure": "the a-priori departure estimate",
        "departure_neurons": "the a-priori departure estimate",
        "extract_options": "options of nqf.extract (the deep structure is derived by autodiff)",
        "x_test": "held-out inputs (not predicted for a deep network yet)",
    }
    given = lambda v: v is not None and v is not False and not (isinstance(v, dict) and not v)  # noqa: E731
    found = {name: options[name] for name in why if given(options.get(name))}
    if isinstance(training, Flow):
        found["training"], why["training"] = training.label(), "the gradient flow (give nqf.SGD(lr, steps=...))"
    elif isinstance(training, SGD):
        if training.scheduled:
            found["training"], why["training"] = "a learning-rate schedule", "a schedule (a constant lr only)"
        elif float(training.momentum) or training.nesterov:
            found["training"], why["training"] = f"momentum {float(training.momentum):g}", "momentum"
        elif not (isinstance(training.loss, str) and training.loss.lower() == "mse"):
            found["training"], why["training"] = f"loss {training.loss!r}", "a loss other than the MSE"
    for name, v in found.items():
        raise ValueError(
            f"`{name}` = {v!r:.60}: a deep network is predicted by the multi-layer NQF's map (Theorem 14), which "
            f"does not take {why[name]}. Leave it out, or name one layer's neurons (nqf.Network(module, "
            "neurons=...)) for the one-layer NQF with the other layers frozen."
        )


@eqx.filter_jit
def _init_outputs(net_call, deep: ml.DeepNQF, Ms, mus, X):
    nqf_h = jax.vmap(lambda x: deep.forward(Ms, mus, x))(X)
    exact = jax.vmap(net_call)(X)
    return nqf_h, exact


def _init_errors(net: DeepNetwork, deep: ml.DeepNQF, W0s, X) -> np.ndarray:
    """Per layer, ||h_NQF - h_module|| / ||h_module|| over the training inputs at W0."""
    params = net.with_params_W(net.params, jax.scipy.linalg.block_diag(*W0s))
    Ms = [jnp.asarray(W @ W.T) for W in W0s]
    mus = [jnp.asarray(W.sum(axis=1)) for W in W0s]
    nqf_h, exact = _init_outputs(lambda x: net.layer_inputs(params, x), deep, Ms, mus, X)
    errs = []
    for a, b in zip(nqf_h, exact):
        nb = float(jnp.linalg.norm(b))
        errs.append(float(jnp.linalg.norm(a - b)) / nb if nb > 0 else 0.0)
    return np.asarray(errs)


def _all_events(t, loss, layer_eig, target, rho: float, phase_tol: float) -> tuple[dict, dict]:
    """(the `Prediction` event fields on the union of the layers' eigenvalues, the `layer_*` fields)."""
    eig = np.sort(np.concatenate(layer_eig, axis=1), axis=1)[:, ::-1]
    curves = Curves(t, loss, t, eig, None, "saved")
    if isinstance(target, str) and target == "asymptote":
        raise ValueError(
            "`target` = 'asymptote': the multi-layer NQF has no closed-form limit here; use 'phase_end' "
            "(default) or 'horizon'."
        )
    target = check_target(target, eig.shape[1])
    ev = _events.events(curves, target=target, rho=rho, phase_tol=phase_tol, final_loss=float(loss[-1]))
    end = ev["phase_end"]
    tg, gr, ig = [], [], []
    for e in layer_eig:
        c = Curves(t, loss, t, e, None, "saved")
        if isinstance(target, str):
            targets = _events.eigenvalues_at(c, end) if target == "phase_end" and np.isfinite(end) else e[-1].copy()
        else:  # given for the union: each layer's values are its own eigenvalues' share, by rank
            targets = e[-1].copy()
        grow = _events.growing_modes(c, targets, rho)
        tg.append(targets)
        gr.append(grow)
        ig.append(np.asarray(_events.ignition(c, targets, rho, grow), dtype=float))
    layers = dict(
        layer_eigenvalues=tuple(layer_eig),
        layer_targets=tuple(tg),
        layer_growing=tuple(gr),
        layer_ignition_times=tuple(ig),
    )
    return dict(ev, eigenvalues=eig), layers


def _schedule(m: int, steps: int, batch_size: int | None, batch_indices: Any, key: Any) -> np.ndarray | None:
    from ..dynamics._batches import check_batch_indices

    if batch_indices is not None and batch_size is not None:
        raise ValueError("Give `batch_indices` or `batch_size`, not both.")
    if batch_size is not None:
        return np.asarray(check_batch_indices(draw_batches(key, m, batch_size, steps), m, steps))
    if batch_indices is not None:
        return np.asarray(check_batch_indices(np.asarray(batch_indices), m, steps))
    return None


def predict_deep(net: DeepNetwork, x, y, training, *, save_every, W0, init_scale, options) -> DeepPrediction:
    """`nqf.predict` for a `DeepNetwork` (module docstring): `training` an `nqf.SGD` (constant lr,
    no momentum, MSE; full batch or minibatches); `options`: the other keywords of `predict`
    (rho, target, phase_tol, gap_tol, step_values and the unsupported ones, refused by name)."""
    _unsupported(training, options)
    rho, phase_tol, gap_tol = options["rho"], options["phase_tol"], options["gap_tol"]
    for name, v in (("rho", rho), ("phase_tol", phase_tol), ("gap_tol", gap_tol)):
        if not (isinstance(v, (int, float, np.floating)) and 0.0 < v < 1.0):
            raise ValueError(f"`{name}` must lie in (0, 1); found {v!r}.")
    resolve_step_values(options["step_values"], True, net.p)
    weight_decay = float(training.weight_decay)
    lr, steps = float(training.lr), training.n_steps
    steps, save_every = check_steps(steps, save_every if save_every is not None else max(1, steps // 400))
    x, y2, m, k = check_data(net, x, y)
    if not hasattr(x, "shape") or np.ndim(x) != 2:
        raise ValueError(f"`x` of a deep chain must be an array (m, n_in); found {type(x).__name__}.")
    x = jnp.asarray(x)
    W0 = initial_weights(net, W0, init_scale)
    W0s = [np.asarray(W) for W in net.layer_W(W0)]
    n_saves = steps // save_every + 2
    memory.check(
        8.0 * n_saves * sum(lay.p**2 + lay.p for lay in net.layers),
        f"predict: {n_saves} saved states of the layers' M (p_l = {[lay.p for lay in net.layers]})",
        "a larger `save_every`, or NQF_MEMORY_BUDGET.",
    )
    _warn_frozen(net, x, y2, W0, as_loss("mse", k))
    deep = ml.DeepNQF(nqf_layers(net, x[0]), x, y2)
    init_err = _init_errors(net, deep, W0s, x)
    if np.max(init_err) > INIT_LAYER_TOL:
        bad = ", ".join(f"layer {l + 1}: {e:.3g}" for l, e in enumerate(init_err))
        raise ValueError(
            f"`init_scale` / `W0`: the layers do not all start small: the relative difference between each NQF "
            f"layer's output and the module's at W0 is {bad} (the multi-layer NQF needs every layer <= "
            f"{INIT_LAYER_TOL:g}). Use a smaller `init_scale`, or name one layer's neurons (nqf.Network(module, "
            "neurons=...)) for the one-layer NQF with the other layers frozen."
        )
    rows = _schedule(m, steps, training.batch_size, training.batch_indices, training.key)
    traj = ml.closed_deep_sgd(
        deep,
        W0s,
        lr=lr,
        steps=steps,
        batch_indices=rows,
        weight_decay=weight_decay,
        loss=_mse_mean(k),
        save_every=save_every,
    )
    t = lr * np.asarray(traj.steps, dtype=float)
    loss = np.asarray(traj.loss, dtype=float)
    layer_eig = [np.linalg.eigvalsh(M)[:, ::-1] for M in traj.M]
    ev, layers = _all_events(t, loss, layer_eig, options["target"], float(rho), float(phase_tol))
    L0m = float(jnp.mean((jax.vmap(lambda xx: jnp.atleast_1d(net(jnp.asarray(W0), xx)))(x) - y2) ** 2))
    init_gap = np.array([abs(L0m - loss[0]) / loss[0] if loss[0] > 0 else 0.0, np.nan])
    label = options["target"] if isinstance(options["target"], str) else "given"
    settings: dict[str, Any] = dict(
        training=training.label(),
        lr=lr,
        steps=int(steps),
        t1=float(t[-1]),
        batch_size=training.batch_size,
        batch_indices=rows,
        key=None if training.full_batch else training.key,
        momentum=0.0,
        nesterov=False,
        loss="mse",
        weight_decay=float(weight_decay),
        rho=float(rho),
        target=label,
        phase_tol=float(phase_tol),
        gap_tol=float(gap_tol),
        final_loss="horizon",
        resolution="saved",
        departure={"off": "not computed for a deep network (multi-layer NQF)"},
        multilayer=dict(
            kinds=net.kinds, widths=tuple(lay.d for lay in net.layers), p=tuple(lay.p for lay in net.layers)
        ),
    )
    empty = np.zeros(0)
    return DeepPrediction(
        t=t,
        loss=loss,
        model=deep,
        W0=np.asarray(W0),
        trajectory=DeepPath(np.asarray(traj.steps), t, loss, traj.M, traj.mu, np.asarray(traj.outputs)),
        asymptote=None,
        final_loss=float(loss[-1]),
        **ev,
        departure_estimate=float("nan"),
        remainder_t=empty,
        remainder_gap=empty,
        module_gap=empty,
        settings=settings,
        x=np.asarray(x),
        y=np.asarray(y2),
        network=net,
        init_gap=init_gap,
        layer_init_error=init_err,
        **layers,
    )


_DEEP_PREDICT.append(predict_deep)  # `nqf.predict` of a DeepNetwork
