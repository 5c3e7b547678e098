"""Predict a network's training before running it: its NQF solved in advance (Theorems 1, 2).

`predict` takes a user's module (an `nqf.Network`: equinox, flax.nnx or a plain JAX function),
its inputs and labels, the initial weights and the optimizer settings, and returns a
`Prediction`:

1. the NQF of the module at its initial weights: `nqf.extract` on the module's neurons (the
   structured feed-forward form where it exists, Eq. E3; g, B, f0 where ZGZ fails, Theorem 12);
2. its training: the gradient flow (`nqf.solve_flow`, Eq. E9/E10) for a horizon `t1`, or, with a
   learning rate, the exact discrete map (`nqf.closed_sgd`, Theorem 2: full batch or the same
   minibatches as `nqf.record`, momentum, weight decay);
3. what a user reads off it: the loss curve, the eigenvalues of M(t), the NQF's asymptote
   (`nqf.asymptote`: the t -> inf limit, its loss and eigenvalues), the ignition times of the
   modes that grow (targets: by default the eigenvalues at the end of the learning phase, or at
   the horizon when the phase outlasts it; `Prediction.with_targets` changes them without solving
   again), the plateau levels and the drop times between them, the end of the learning phase,
   each at the trajectory's own resolution (`_events`: dense output, or every step of the map);
4. an a-priori estimate of when the network leaves its NQF (Theorem 13 / the paper's Limitation 3):
   along the predicted weights W(t), the next terms of the module's symmetric expansion,
   T3(W) + T4(W) with T_n(W) = (1/n!) d^n/ds^n f(s W)|_{s=0} (autodiff: nested forward-mode
   derivatives), give the outputs f_NQF + T3 + T4; the estimated departure is the first time the
   loss with them differs from the NQF's loss by more than `gap_tol` L(0). The module itself at
   W(t) gives a second estimate (`module_gap`).

**What the NQF does not predict** (see the guide 'Predict your network before you train it'):
the final loss of the network after it leaves the NQF (the NQF's asymptote is the linear limit of
its feature model: a network keeps learning past it once its weights reach the scale where the
nonlinearity matters); Adam and other per-coordinate optimizers (not closed on (M, mu): only the
weight-space simulation is exact for them, `nqf.train_w`); a logistic or cross-entropy loss late
in training (the prediction is for the MSE loss); anything outside the expansion's radius
(ReLU, a normalisation across neurons: `nqf.extract` refuses those).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PyTree

from .._core import memory
from .._core._checks import check_positive, keyword_options
from .._core._errors import AssumptionError, NQFWarning
from .._core.io import Saveable
from ..data import AbstractCommutingData, DeepNetwork, DegenerateWarning, FeedForwardData, Network, NQFModel, extract
from ..dynamics import batch_indices as draw_batches
from ..dynamics import closed_sgd
from ..dynamics._losses import as_loss
from ..dynamics._training import SGD, Flow, from_keywords, split_legacy
from ..solvers import FlowSolution, solve_flow
from ..theory import asymptote
from . import _heldout as heldout
from ._departure import InitScaleWarning, check_init, check_neurons, departure_on, remainder, weights_along
from ._events import HorizonWarning, check_target, curves_of, events
from ._inputs import (
    as_network,
    check_data,
    check_extract_options,
    check_steps,
    initial_weights,
    resolve_step_values,
)
from ._stability import edge_along_path, warn_past_edge_at_init

if TYPE_CHECKING:
    import matplotlib.axes
    import matplotlib.figure
    import optax

    from ._record import Recording

__all__ = ["Prediction", "predict", "FrozenParameterWarning", "HorizonWarning", "InitScaleWarning"]


_DEEP_PREDICT: list = []  # [`nqf.network._deep.predict_deep`], registered there (no import cycle)


class FrozenParameterWarning(NQFWarning):
    """An array of the module that is not a neuron parameter (so frozen in the NQF) has a nonzero
    loss gradient at the initial weights: training it would change the run the NQF predicts."""


@dataclasses.dataclass(frozen=True, eq=False)
class Prediction(Saveable):
    """The predicted training of a network (`nqf.predict`). `n` saved times, p parameters per
    neuron; times are gradient-flow times t = lr * steps.

    **Attributes:**

    - `t` (n,), `loss` (n,): the NQF's training loss (1/(m k)) sum (f - y)^2 (Eq. E8), or the
      mean over inputs of ell for ``settings["loss"]`` (the description's `loss`; `y` then holds
      the loss's label rows (m, k): one-hot classes for cross-entropy, signs for logistic);
      `eigenvalues` (n, p): eigenvalues of M(t) in decreasing order.
    - `model`: the extracted NQF (a data set or `nqf.NQFModel`); `W0` (p, d): initial weights;
      `trajectory`: the `FlowSolution` or `MapTrajectory` behind the curves.
    - `asymptote`: the NQF's t -> inf limit (`nqf.asymptote`; None with weight decay, or when
      it cannot certify the limit and `target` is not ``"asymptote"``); `final_loss`: its loss,
      the NQF's final loss L_inf (without an asymptote: the loss at the horizon;
      ``settings["final_loss"]`` says which).
    - `targets` (p,): the values of the ignition criterion (`target` of `predict`);
      `targets_from`: where they come from, ``"phase_end"``, ``"asymptote"``, ``"given"`` or
      ``"horizon"`` (asked for, or the fallback of ``"phase_end"`` when the learning phase does
      not end within the horizon); `growing` (p,) bool: the modes that grow (start below rho
      times their target); `ignition_times` (p,): when each growing mode first reaches rho x
      its target (nan for the others, and for growing modes that do not get there within the
      horizon).
    - `plateau_levels` (K + 1,): the loss on each plateau (before the first ignition, between
      consecutive ignitions) and the asymptotic loss; `drop_times` (K,): when the loss falls
      half-way from one plateau to the next (`nqf.drop_times`); `half_drop_time`: when it falls
      half-way from L(0) to the asymptotic loss.
    - `phase_end`: end of the learning phase, the first time L(t) - L_inf <= `phase_tol`
      (L(0) - L_inf), L_inf = `final_loss` (nan if not within the horizon).
    - Resolution of these times: a flow's by its dense output (Brent's method, 1e-12 in time); a
      map's by its values after every step (`MapTrajectory.step_loss`, `step_eigenvalues`: linear
      interpolation between consecutive steps), or between saved steps without them
      (`step_values="none"`, minibatches by default); ``settings["resolution"]`` says which
      (``"dense"``, ``"step"``, ``"loss-step"``: the loss per step, the eigenvalues saved, or
      ``"saved"``).
    - `departure_estimate`: the a-priori estimate of when the network leaves the NQF (module
      docstring; inf if not within the horizon, nan if W(t) is not available);
      `remainder_t` (n_r,), `remainder_gap` (n_r,): |L(f_NQF + T3 + T4) - L_NQF| / L(0) at those
      times; `module_gap` (n_r,): |L(module at W(t)) - L_NQF| / L(0). From `departure_neurons`
      random neurons (``settings["departure"]``: s, groups, sampling): `remainder_gap_se` (n_r,)
      the gap's standard error (delete-one-group jackknife; 0 at s = d), `departure_interval`
      (2,) the first times gap + 2 se and gap - 2 se exceed `gap_tol`. Its cost: the module's next
      expansion terms and their gradient at 24 saved times, from 64 neurons 0.36 s warm at width 256
      or 1024 on the digits MLP, 11-18 % of `predict`, against 3.6-12 s at the full width; but linear
      in m k p: 60-75 % of `predict` at m k p = 1e6 to 5e6; its first call compiles, about 8 s.
    - A loss other than MSE (``settings["loss"]``) has no asymptote (`final_loss` is the loss at the
      horizon; for a separable cross-entropy problem L_inf = 0 and the loss falls like a logarithm,
      so the learning phase and the half-drop time, defined against the horizon's loss as for MSE,
      depend on the horizon), no stability edge (nan) and no departure estimate (the next expansion
      terms are compared in MSE); the ignition times and the drop times between plateaus are defined
      as for MSE, on this loss's curve (for cross-entropy L(0) is about log k at small init).
    - `init_gap` (2,): |L_module - L_NQF| / L(0) at W0 and at the first saved time after 5 % of
      the horizon (``settings["init_gap_t"]``) on the NQF's path; above 0.01 an
      `InitScaleWarning` says the initialization is not small.
    - Held-out data (`predict(x_test=, y_test=)`; all None without `x_test`; definitions in
      `nqf.network._heldout`): `test_outputs` (n, m_test, k), or (n, m_test) for one output:
      the NQF's f_x(t) = f_x(0) + mu(t)^T g(x) + mu^T B(x) mu + Tr[M(t) A(x)] on the test inputs
      (their NQF extracted as the training inputs'); `test_loss` (n,): the training loss's
      definition (mean over inputs and outputs of (f - y)^2) on them (None without `y_test`);
      `test_accuracy` (n,): argmax over k > 1 outputs for class or one-hot labels, sign(f) for
      labels in {-1, +1}, f > 0.5 for {0, 1}, None for real-valued targets
      (``settings["test"]["accuracy"]`` names the rule); `x_test`, `y_test`: the data.
    - `wall_time_s`: the seconds `predict` took.
    - `settings`: the call's settings (lr, steps, t1, batches, momentum, weight decay, rho,
      phase_tol, gap_tol) and, for a map, ``"stability_edge_init"`` / ``"stability_edge"``: the
      largest stable lr 2 (1 + momentum) / S at W0 and along the predicted path; `x`, `y`: the data; `network`: the `nqf.Network` (not kept by `save`
      or pickling, which keep the numbers; `record` needs it).

    **Methods:** `record(optimizer, ...)`: train the module on the same data, initial weights,
    batches and horizon (`nqf.record`); `with_targets(target, rho=...)`: the same prediction with
    other ignition targets, without solving again; `plot()`: loss and eigenvalues (a matplotlib
    Figure).
    """

    _unsaved_fields = ("network",)

    t: np.ndarray
    loss: np.ndarray
    eigenvalues: np.ndarray
    model: object
    W0: np.ndarray
    trajectory: object
    asymptote: object
    final_loss: float
    targets: np.ndarray
    targets_from: str
    growing: np.ndarray
    ignition_times: np.ndarray
    plateau_levels: np.ndarray
    drop_times: np.ndarray
    half_drop_time: float
    phase_end: float
    departure_estimate: float
    remainder_t: np.ndarray
    remainder_gap: np.ndarray
    module_gap: np.ndarray
    settings: dict
    x: object
    y: np.ndarray
    network: Network | None = None
    departure_interval: np.ndarray = dataclasses.field(default_factory=lambda: np.full(2, np.nan))
    remainder_gap_se: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    init_gap: np.ndarray = dataclasses.field(default_factory=lambda: np.full(2, np.nan))
    test_outputs: np.ndarray | None = None
    test_loss: np.ndarray | None = None
    test_accuracy: np.ndarray | None = None
    x_test: object = None
    y_test: np.ndarray | None = None
    wall_time_s: float = float("nan")

    @property
    def flags(self) -> list[str]:
        """What makes this prediction special, each announced by a warning when predicted:
        ``"flat"`` (the NQF does not learn: no mode grows, the loss falls by < 1e-3 L(0)),
        ``"unstable"`` (the map is at or past its stability edge, or its full-batch loss rises: a
        catapult). Event times that do not exist there are nan, never an error."""
        return list(self.settings.get("flags", []))

    def _after_load(self) -> None:
        object.__setattr__(self, "network", None)

    def __getstate__(self):  # the module may hold functions that do not pickle: keep the numbers
        return {**super().__getstate__(), "network": None}

    def record(
        self,
        training: SGD | optax.GradientTransformation | None = None,
        *,
        optimizer: optax.GradientTransformation | None = None,
        network: Network | None = None,
        **kwargs: Any,
    ) -> Recording:
        """Train the module as this prediction describes: `nqf.record` on its data and initial
        weights with its `nqf.SGD` description (its learning rate or schedule, steps, momentum,
        weight decay and the very batches), so the recording is the predicted run.

        **Arguments:** `training`: another `nqf.SGD` (required for a flow prediction: the
        learning rate of the run that the flow approximates; its horizon is at most the
        prediction's); `optimizer`: an optax optimizer that replaces the update (see
        `nqf.record`); `network`: the `nqf.Network` (default: the prediction's; needed after
        `nqf.load`); other keywords go to `nqf.record` (`save_every`, `train`, `label`, ...).
        An optax optimizer as `training` with ``lr=`` is the deprecated form of earlier
        versions (a `DeprecationWarning`).

        **Raises:** `ValueError` without a network, without `training` for a flow prediction, or for
        a `training` whose horizon passes the prediction's."""
        from ._record import record

        network = self.network if network is None else network
        if network is None:
            raise ValueError(
                "This prediction has no `network` (it was loaded from disk or unpickled): pass "
                "network=nqf.Network(module) (the module it was predicted for)."
            )
        options: dict[str, Any] = dict(W0=self.W0)
        if self.x_test is not None and "x_test" not in kwargs:  # the same held-out inputs
            options.update(x_test=self.x_test, y_test=self.y_test)
        options |= kwargs
        if training is not None and not isinstance(training, SGD):  # deprecated: record(optax_optimizer, lr=...)
            lr = options.pop("lr", self.settings["lr"])
            if lr is None:
                raise ValueError("A flow prediction has no learning rate: pass nqf.SGD(lr, steps=...).")
            lr = check_positive(lr, "lr")
            if "steps" not in options:
                same = np.ndim(self.settings["lr"]) == 0 and self.settings["lr"] == lr
                options["steps"] = self.settings["steps"] if same else max(1, int(round(self.t[-1] / lr)))
            if self.settings["batch_indices"] is not None and "batch_size" not in options:
                options.setdefault("batch_indices", self.settings["batch_indices"])
            return record(network, self.x, self.y, training, lr=lr, optimizer=optimizer, **options)
        if training is None:
            training = self.training()
        if float(training.t_final) > self.t[-1] * (1 + 1e-9):
            raise ValueError(
                f"{training.label()} runs to t = {float(training.t_final):g}, past the prediction's horizon "
                f"t = {self.t[-1]:g}."
            )
        return record(network, self.x, self.y, training, optimizer=optimizer, **options)

    def training(self) -> SGD:
        """The `nqf.SGD` description this map prediction ran (with its batch schedule), rebuilt
        from `settings`. **Raises:** `ValueError` for a flow prediction (it has no learning rate)."""
        s = self.settings
        if s["lr"] is None:
            raise ValueError(
                "A flow prediction has no learning rate: pass nqf.SGD(lr, steps=...) for the run it approximates."
            )
        if s.get("loss", "mse") == "callable":
            raise ValueError(
                "This prediction was made with a callable loss: pass the same function in the description, "
                "pred.record(nqf.SGD(..., loss=fn))."
            )
        return SGD(
            s["lr"],
            steps=s["steps"] if np.ndim(s["lr"]) == 0 else None,
            momentum=s["momentum"],
            nesterov=s.get("nesterov", False),
            weight_decay=s["weight_decay"],
            batch_indices=s["batch_indices"],
            loss=s.get("loss", "mse"),
        )

    def with_targets(
        self, target: str | Float[ArrayLike, " p"] | None = None, *, rho: float | None = None
    ) -> Prediction:
        """This prediction with other ignition targets or fraction, from the stored trajectory
        (no second solve): `targets`, `targets_from`, `growing`, `ignition_times`,
        `plateau_levels`, `drop_times`, `half_drop_time` recomputed as `predict` computes them.

        **Arguments:** `target`: ``"phase_end"``, ``"horizon"``, ``"asymptote"`` (as in
        `predict`; ``"asymptote"`` computes the NQF's limit if this prediction has none, and its
        loss becomes `final_loss`) or values (p,) (``targets_from="given"``); default: this
        prediction's. `rho`: the ignition fraction in (0, 1) (default: this prediction's).

        **Returns:** a new `Prediction` (this one is unchanged; `settings` records the new
        `target` and `rho`). A prediction loaded from disk rebuilds a flow's dense output once.

        **Raises:** `ValueError` for an unknown `target`, values of the wrong shape or not
        finite, `rho` outside (0, 1), ``"asymptote"`` with weight decay; `RuntimeError` when the
        limit is not available (as `predict`). Warns `HorizonWarning` as `predict` does."""
        s = self.settings
        target = check_target(s["target"] if target is None else target, self.eigenvalues.shape[1])
        label = target if isinstance(target, str) else "given"
        rho = s["rho"] if rho is None else rho
        if not (isinstance(rho, (int, float, np.floating)) and 0.0 < rho < 1.0):
            raise ValueError(f"`rho` must lie in (0, 1); found {rho!r}.")
        asym, final_loss, final_from = self.asymptote, self.final_loss, s["final_loss"]
        if label == "asymptote" and asym is None:
            if s["weight_decay"]:
                raise ValueError("target='asymptote' needs weight_decay = 0 (nqf.asymptote is the plain flow's limit).")
            asym = _asymptote(self.model, self.W0, "asymptote", float(self.t[-1]))
            assert asym is not None  # target="asymptote" raises rather than return None
            final_loss, final_from = float(asym.loss), "asymptote"
        ev = events(
            curves_of(self.trajectory, eigenvalues=self.eigenvalues),
            target=target,
            rho=float(rho),
            phase_tol=s["phase_tol"],
            final_loss=final_loss,
            asym=asym,
        )
        settings = {**s, "target": label, "rho": float(rho), "final_loss": final_from}
        return dataclasses.replace(self, asymptote=asym, final_loss=final_loss, settings=settings, **ev)

    def plot(
        self,
        *,
        ax: Sequence[matplotlib.axes.Axes] | None = None,
        logx: bool = False,
        logy: bool = False,
        top: int = 8,
    ) -> matplotlib.figure.Figure:
        """The predicted loss (ignition and half-drop times marked; the test loss with held-out
        data) and the eigenvalues of M(t) by mode (the top `top`, one colour each, with a legend),
        titled with the training; `logx` / `logy`: log time / loss axes; `ax`: two Axes to draw on.
        Returns a matplotlib Figure (no pyplot state; `nqf.network._plot.plot_prediction`)."""
        from ._plot import plot_prediction

        return plot_prediction(self, None, ax=ax, logx=logx, logy=logy, top=top)


def predict(
    network: Network | eqx.Module | Any,
    x: PyTree[Float[ArrayLike, "m ..."]],
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"],
    training: SGD | Flow | None = None,
    *,
    ts: Float[np.ndarray, " n"] | Float[Array, " n"] | Sequence[float] | None = None,
    save_every: int | None = None,
    W0: Float[ArrayLike, "p d"] | None = None,
    init_scale: float | None = None,
    target: str | Float[ArrayLike, " p"] = "phase_end",
    x_test: PyTree[Float[ArrayLike, "m_test ..."]] | None = None,
    y_test: Float[ArrayLike, " m_test"] | Float[ArrayLike, "m_test k"] | None = None,
    **options: Any,
) -> Prediction:
    """Predict the training of `network` on (x, y) from its NQF, before training it.

    `training` says which training: ``nqf.Flow(t1)``, the **gradient flow** (`nqf.solve_flow` to `t1`), the limit of
    small learning rates; or ``nqf.SGD(lr, steps=...)``, the **exact discrete map** of SGD (`nqf.closed_sgd`, Theorem
    2), full batch or minibatch, with momentum, Nesterov, weight decay and a learning-rate schedule, which is exact
    for any width. The same description given to `nqf.record` trains the module itself, so both describe one run. The
    loss is the description's `loss`: the MSE (1/(b k)) sum (f - y)^2 of `nqf.record` (b inputs per batch, k outputs)
    by default, or the mean over the batch's inputs of a per-input loss. See the module docstring for what is computed
    and what the NQF does not predict.

    **Arguments** (`rho`, `phase_tol`, `gap_tol`, `estimate_departure`, `departure_neurons`, `step_values`,
    `extract_options` and the deprecated keywords are read from ``**options``; an unknown keyword: `TypeError`):

    - `network`: an `nqf.Network`, or an equinox / flax.nnx module (neurons ``"auto"``). A `nqf.data.DeepNetwork` (a
      depth-2/3 MLP) is predicted by the multi-layer NQF (Theorem 14, `nqf.network._deep`: a `DeepPrediction`; an
      `nqf.SGD` with a constant lr, no momentum).
    - `x`: m inputs (an array or a pytree with leading axis m); `y`: labels (m,) or (m, k).
    - `training`: an `nqf.Flow` or `nqf.SGD` (lr a scalar, an optax schedule or per-step rates; time t = sum of the
      rates). The keywords of earlier versions (`t1`, `lr`, `steps`, `batch_size`, `batch_indices`, `key`, `momentum`,
      `weight_decay`) still build one, with a `DeprecationWarning`, for this release. `ts`: saved times of a flow
      (default 401 equally spaced); `save_every`: saved steps of a map (default: about 400 saves).
    - `W0` (p, d): initial neuron parameters (default: the module's own, `network.W`), scaled by `init_scale` if given
      (the module's initialization times `init_scale`).
    - Batches (`SGD(batch_size=, key=)`) are the ones `nqf.batch_indices` draws, identical to `nqf.record`'s;
      `SGD(batch_indices=)` (steps, b) are over the m inputs.
    - `rho`: the ignition fraction. `target`: the values whose fraction rho a mode reaches at its ignition time:
      ``"phase_end"`` (default: the eigenvalues of M at the end of the learning phase; independent of the horizon once
      it covers the phase, and defined for every module; a `HorizonWarning` says when the phase does not end within
      the horizon), ``"asymptote"`` (the NQF's limit t -> inf, `nqf.asymptote`: exact for Eq. E19; for ill-conditioned
      inputs such as image pixels the least-squares limit puts weight on directions learned only at very late times,
      and no mode reaches half of it in a practical run; data without a closed-form limit, or a model with g, B, need
      the limit's numerical flow, certified within 20 horizons or refused with a `RuntimeError`), ``"horizon"`` (the
      values at the last saved time), or values (p,) of your own. When the learning phase does not end within the
      horizon, ``"phase_end"`` falls back to the values at the horizon (`targets_from` = ``"horizon"``, with a
      `HorizonWarning`); `Prediction.with_targets` re-targets without solving again.
    - `phase_tol`: the learning phase ends when L(t) - L_inf <= phase_tol (L(0) - L_inf); `gap_tol`: the loss-gap
      tolerance (fraction of L(0)) of the departure estimate.
    - `estimate_departure`: compute the a-priori departure estimate (default None: when the m k p data entries are at
      most 2e5, ``settings["departure"]["off"]`` says why not; its cost: `Prediction`); False leaves
      `departure_estimate` nan, True computes it at any size. `departure_neurons`: the s neurons (random, of the d) it evaluates (default min(d, 64); d: the full
      width), at a cost that does not grow with d (`nqf.network._departure`: an unbiased neuron subsample with a
      jackknife error bar; a module that is not a sum over its neurons falls back to the full width).
    - `step_values`: for the map, the loss and eigenvalues of M after every step (`closed_sgd(step_values=...)`),
      which give the event times one step's resolution: ``"auto"`` (default: ``"all"`` for full batch and p <= 128,
      ``"loss"`` for larger p, ``"none"`` with minibatches, where the full-data loss costs all m inputs per step),
      ``"all"``, ``"loss"`` or ``"none"`` (times interpolated between saved steps). Unused by the flow (its dense
      output is exact).
    - `x_test`, `y_test`: held-out inputs (a pytree of `x`'s structure and per-input shape, m_test inputs) and
      optionally their labels (of `y`'s form: (m_test,) or (m_test, k)): the prediction then holds the NQF's outputs,
      loss and accuracy on them at the saved times (`Prediction.test_outputs`, `test_loss`, `test_accuracy`), at the
      cost of extracting their NQF and one trace per saved state and test input; `Prediction.record` measures the
      same.
    - The loss (``training.loss``): ``"mse"`` (default), ``"cross_entropy"`` (integer classes y (m,) in [0, k), one
      module output per class), ``"logistic"`` (one output, y in {0, 1} or {-1, +1}) or a JAX-traceable ell(f_x, y_x)
      of one input (`nqf.dynamics._losses`): the mean over inputs of ell, in the flow (the "M-mu" form, Eq. E10 with
      l' = ell') and in the map alike. The NQF's labels (`model.y`, the data rows mu k + o) are then the loss's label
      rows: the one-hot classes for cross-entropy, the signs s = +-1 for logistic. What another loss changes in the
      result: `Prediction` ("A loss other than MSE").
    - `extract_options`: keywords for `nqf.extract` (e.g. ``{"structure": "dense"}``, or ``{"normalization": "mean"}``
      for a layer that averages its units: the extracted sum form is scaled by c(d) = 1/d or 1/sqrt(d) back to the
      module at its width d).

    **Returns:** a `Prediction`.

    **Raises:** `ValueError` for mismatched or non-finite `x`/`y`, an `x_test` of another structure or per-input shape
    than `x`, a `y_test` of another length or k, or without `x_test`, a `W0` of the wrong shape, no horizon, `t1`
    inconsistent with `lr` x `steps`, `ts` with `lr` or not starting at 0, map options without `lr`, bad tolerances,
    `departure_neurons` outside [2, d]; `nqf.memory.MemoryBudgetError` if the saved states exceed the memory budget;
    the `nqf.ExtractionError`s of `nqf.extract` (not permutation-symmetric, not C^3 such as ReLU, a normalisation
    across neurons), naming the module; `TypeError` for a `network` that is not a module, a complex or non-numeric
    `W0`, or an `extract_options` key that `nqf.extract` does not take (raised before the extraction). Warns
    `FrozenParameterWarning` when a frozen array has a nonzero loss gradient at W0, `nqf.data.PrecisionWarning` when
    float32 parameters or inputs were cast, `InitScaleWarning` when the initialization is not small (`init_gap`),
    `HorizonWarning` when the learning phase does not end within the horizon (the ``"phase_end"`` targets are then the
    values at the horizon), when `lr` is past the map's stability edge 2 (1 + momentum) / S at W0 (before the map
    runs; S the sharpness, `nqf.sharpness`), or when the full-batch map's loss rises or lr is past the edge along the
    predicted path (``settings["stability_edge"]``, at 5 saved states: what follows is the map's instability, not the
    NQF's learning).
    """
    legacy, options = split_legacy("predict", options)
    opts = _Options(*keyword_options("predict", options, **_Options._field_defaults))
    training = from_keywords("predict", training, legacy)
    if training is None:
        raise ValueError(
            "predict needs a training description: nqf.Flow(t1) (gradient flow to time t1) or "
            "nqf.SGD(lr, steps=...) (the exact SGD map), e.g. nqf.predict(net, x, y, nqf.SGD(0.1, steps=500))."
        )
    t_start = time.perf_counter()
    net = as_network(network)
    opts = opts._replace(extract_options=check_extract_options(opts.extract_options))
    if isinstance(net, DeepNetwork):  # a deep chain: the multi-layer NQF (Theorem 14, `_deep`)
        (predict_deep,) = _DEEP_PREDICT  # registered by `nqf.network._deep` (imported with nqf.network)
        deep = {**opts._asdict(), "ts": ts, "x_test": x_test, "target": target}
        return predict_deep(net, x, y, training, save_every=save_every, W0=W0, init_scale=init_scale, options=deep)
    run = _checked(net, (x, y, x_test, y_test), training, opts, (W0, init_scale), target, (ts, save_every))
    _warn_frozen(net, run.x, run.y2, run.W0, run.ell)
    model = _extract(net, run.x, run.y2, run.k, opts.extract_options)
    traj, settings = _trajectory(run, model)
    curves = _curves(run, model, traj, settings)
    departure = _departure(run, model, traj, settings, curves["t"], curves["loss"])
    held = _held_out(run, traj, settings)
    saved = dict(x=jax.tree_util.tree_map(np.asarray, run.x), y=np.asarray(run.y2), network=net, settings=settings)
    wall = time.perf_counter() - t_start
    return Prediction(model=model, W0=run.W0, trajectory=traj, **saved, **curves, **departure, **held, wall_time_s=wall)


class _Options(NamedTuple):
    """`predict`'s keywords read from ``**options`` (with their defaults)."""

    rho: float = 0.5
    phase_tol: float = 0.02
    gap_tol: float = 0.05
    estimate_departure: bool | None = None
    departure_neurons: int | None = None
    extract_options: dict[str, Any] | None = None
    step_values: str = "auto"


class _Run(NamedTuple):
    """A `predict` call's checked inputs: the network, its data (m inputs, k outputs), the loss
    `ell`, the held-out data `test`, W0 (p, d), the training description, the ignition target and
    its label, the saves, the departure neurons `s_dep` and the options."""

    net: Network
    x: Any
    y2: Any  # (m, k), as `check_data` returns it
    m: int
    k: int
    ell: Any
    test: Any
    W0: np.ndarray
    training: SGD | Flow
    target: Any
    label: str
    ts: Any
    save_every: Any
    s_dep: int | None
    opts: _Options


def _checked(net: Network, data, training: SGD | Flow, opts: _Options, init, target, saves) -> _Run:
    """`predict`'s inputs checked before any work: `data` = (x, y, x_test, y_test), `init` = (W0,
    init_scale), `saves` = (ts, save_every); the memory of the saved states estimated."""
    x, y, x_test, y_test = data
    (W0, init_scale), (ts, save_every) = init, saves
    x, y2, m, k = check_data(net, x, y, training.loss)
    ell = as_loss(training.loss, k)
    test = heldout.check_test(net, x, y, y2, x_test, y_test, ell)
    W0 = initial_weights(net, W0, init_scale)
    for name, v in (("rho", opts.rho), ("phase_tol", opts.phase_tol), ("gap_tol", opts.gap_tol)):
        if not (isinstance(v, (int, float, np.floating)) and 0.0 < v < 1.0):
            raise ValueError(f"`{name}` must lie in (0, 1); found {v!r}.")
    target = check_target(target, net.p)
    resolve_step_values(opts.step_values, True, net.p)  # checked before any work
    label = target if isinstance(target, str) else "given"
    if label == "asymptote" and not ell.is_mse:
        raise ValueError(
            f"target='asymptote' is the MSE flow's limit; found loss={ell.name!r}: use 'phase_end' or 'horizon'."
        )
    if label == "asymptote" and float(training.weight_decay):
        raise ValueError(
            "target='asymptote' needs weight_decay = 0 (nqf.asymptote is the limit of the plain "
            "flow); use target='phase_end' or 'horizon'."
        )
    _check_saves(training, ts, save_every)
    s_dep = check_neurons(opts.departure_neurons, net.d)
    _check_saves_memory(net.p, training, ts, save_every)
    return _Run(net, x, y2, m, k, ell, test, W0, training, target, label, ts, save_every, s_dep, opts)


def _check_saves_memory(p: int, training: SGD | Flow, ts, save_every) -> None:
    """`nqf.memory.MemoryBudgetError` when `predict`'s saved states (M, a factor, eigenvalues of
    p x p) exceed the memory budget: 401 or len(ts) for a flow, every `save_every` steps of a map
    (about 400 by default)."""
    if ts is not None or isinstance(training, Flow):
        n_saves = len(ts) if ts is not None else 401
    else:  # the map's saves (`_map`): every `save_every` steps, about 400 by default
        valid = isinstance(save_every, (int, np.integer)) and not isinstance(save_every, bool) and save_every >= 1
        n_saves = (
            training.steps // int(cast(Any, save_every)) if valid else min(training.steps, 400)
        ) + 2  # bad: `_map` says
    memory.check(
        8.0 * 3 * n_saves * p**2,
        f"predict: {n_saves} saved states (M, a factor, eigenvalues) of p = {p}",
        "fewer saves (`save_every`, `ts`), or NQF_MEMORY_BUDGET.",
    )


def _trajectory(run: _Run, model):
    """(the predicted trajectory, `Prediction.settings` so far): the gradient flow of an
    `nqf.Flow` (`solve_flow`, 401 saves or `ts`), the exact map of an `nqf.SGD` (`_map`, with the
    stability edge at W0)."""
    training, ell, opts = run.training, run.ell, run.opts
    flow = isinstance(training, Flow)
    weight_decay = float(training.weight_decay)
    settings: dict[str, Any] = dict(
        training=training.label(),
        lr=None,
        steps=None,
        t1=None,
        batch_size=None if flow else training.batch_size,
        batch_indices=None,
        key=None if flow or training.full_batch else training.key,
        momentum=0.0 if flow else float(training.momentum),
        nesterov=False if flow else training.nesterov,
        weight_decay=weight_decay,
        loss=ell.name,
        rho=float(opts.rho),
        target=run.label,
        phase_tol=float(opts.phase_tol),
        gap_tol=float(opts.gap_tol),
    )
    if isinstance(training, Flow):
        t1 = training.t1
        traj = solve_flow(
            model,
            W0=_flow_factor(model, run.W0) if ell.is_mse else run.W0,
            t1=t1,
            ts=np.linspace(0.0, t1, 401) if run.ts is None else run.ts,
            weight_decay=weight_decay,
            loss=None if ell.is_mse else ell,
        )
        settings["t1"] = t1
        return traj, settings
    beta = float(training.momentum)
    settings["stability_edge_init"] = (  # the edge 2 (1 + momentum) / S is the MSE sharpness's
        warn_past_edge_at_init(model, run.W0, training.lr_max, beta, weight_decay) if ell.is_mse else float("nan")
    )
    traj, rows = _map(model, run.W0, run.m, run.k, training, ell, run.save_every, opts.step_values)
    lr = traj.lr if not training.scheduled else np.asarray(training.lr)
    settings.update(lr=lr, steps=int(traj.steps[-1]), t1=float(traj.t[-1]), batch_indices=rows)
    return traj, settings


def _curves(run: _Run, model, traj, settings: dict) -> dict[str, Any]:
    """The `Prediction` fields read off the trajectory: t, loss, eigenvalues, the asymptote, the
    final loss and the events (`_events`); `settings` gets the stability edge along the path,
    the final loss's source, the resolution and the flags ("unstable", "flat")."""
    training, ell = run.training, run.ell
    weight_decay = float(training.weight_decay)
    t = np.asarray(traj.ts if isinstance(traj, FlowSolution) else traj.t, dtype=float)
    loss = np.asarray(traj.loss, dtype=float)
    flags = []
    settings["stability_edge"] = float("nan")
    if isinstance(training, SGD) and ell.is_mse:
        settings["stability_edge"], unstable = edge_along_path(
            model, traj, run.W0, training.lr_max, float(training.momentum), weight_decay, training.full_batch
        )
        flags += ["unstable"] if unstable else []
    eig = np.linalg.eigvalsh(np.asarray(traj.M))[:, ::-1]
    asym = None if weight_decay or not ell.is_mse else _asymptote(model, run.W0, run.label, float(t[-1]))
    final_loss = float(loss[-1]) if asym is None else float(asym.loss)
    settings["final_loss"] = "horizon" if asym is None else "asymptote"
    curves = curves_of(traj, eigenvalues=eig)
    settings["resolution"] = curves.resolution
    rho, phase_tol = run.opts.rho, run.opts.phase_tol
    ev = events(curves, target=run.target, rho=rho, phase_tol=phase_tol, final_loss=final_loss, asym=asym)
    flags += _flat(loss, ev["growing"], eig)
    if "flat" in flags:  # no drop happens: its time does not exist (not the rounding-level crossing)
        ev.update(half_drop_time=float("nan"), drop_times=np.full_like(ev["drop_times"], np.nan))
    settings["flags"] = flags
    return dict(t=t, loss=loss, eigenvalues=eig, asymptote=asym, final_loss=final_loss, **ev)


def _held_out(run: _Run, traj, settings: dict) -> dict[str, Any]:
    """The `Prediction` fields of the held-out data (`nqf.network._heldout`: their NQF extracted
    as the training inputs'); `settings` gets ``test``."""
    settings["test"] = heldout.settings_of(run.test)
    extract_test = lambda xt, yt: _extract(run.net, xt, yt, run.k, run.opts.extract_options)  # noqa: E731
    return heldout.predicted(run.test, extract_test, traj, run.W0, run.k)


def _departure(run: _Run, model, traj, settings: dict, t: np.ndarray, loss: np.ndarray) -> dict[str, Any]:
    """The `Prediction` fields of the departure estimate (`nqf.network._departure`) and the
    initialization gap along the predicted weights; `settings` gets ``init_gap_t`` and
    ``departure`` (its settings, or why it is off)."""
    net, ell, x, y2 = run.net, run.ell, run.x, run.y2
    path = weights_along(traj, run.W0)
    gap0, settings["init_gap_t"] = check_init(net, model, x, y2, run.W0, path, t, None if ell.is_mse else ell)
    on, why = departure_on(run.opts.estimate_departure, run.m * run.k * net.p)
    if not ell.is_mse:
        on, why = False, f"the departure estimate compares the expansion's next terms in MSE; loss={ell.name!r}"
    dep = remainder(net, model, x, y2, t, loss, path if on else None, run.opts.gap_tol, neurons=run.s_dep)
    settings["departure"] = dep.settings if on else {"off": why}
    return dict(
        departure_estimate=dep.estimate,
        remainder_t=dep.t,
        remainder_gap=dep.gap,
        module_gap=dep.module_gap,
        departure_interval=dep.interval,
        remainder_gap_se=dep.gap_se,
        init_gap=gap0,
    )


FLAT_DROP = 1e-3  # a predicted loss that falls by less than this fraction of L(0): a flat NQF


FLAT_MOVE = 1e-8  # M's eigenvalues change by less than this (relative): M does not move


def _flat(loss: np.ndarray, growing: np.ndarray, eig: np.ndarray) -> list[str]:
    """["flat"] with a `DegenerateWarning` when no mode grows, the eigenvalues of M (n, p) do not
    move (relative change < `FLAT_MOVE`: not merely a short horizon) and the predicted loss falls
    by less than `FLAT_DROP` L(0) (a layer whose leading term at W = 0 is not quadratic, e.g. a
    cubic activation: its NQF does not learn), else []."""
    drop = (loss[0] - np.min(loss)) / loss[0] if loss[0] > 0 else 0.0
    scale = max(float(np.abs(eig[0]).max()), np.finfo(float).tiny)
    moved = float(np.abs(eig - eig[0]).max()) / scale
    if growing.any() or drop >= FLAT_DROP or moved >= FLAT_MOVE:
        return []
    warnings.warn(
        f"The NQF is flat: no mode grows and the predicted loss falls by {drop:.2g} L(0) within the horizon "
        "(settings['flags'] has 'flat'). A layer whose leading term at W = 0 is not quadratic (a cubic or square "
        "activation, a linear readout with fixed weights) has an NQF that does not learn; the network itself may "
        "still learn through higher orders, which the NQF does not predict.",
        DegenerateWarning,
        stacklevel=4,  # the caller of `predict` (via `_curves`)
    )
    return ["flat"]


def _check_saves(training, ts, save_every) -> None:
    """The save arguments of `predict` fit the training description (each names what it found)."""
    if isinstance(training, SGD):
        if ts is not None:
            raise ValueError("`ts` gives the saved times of a flow; the map (nqf.SGD) saves every `save_every` steps.")
        return
    if save_every is not None:
        raise ValueError("`save_every` gives the saved steps of the map (nqf.SGD); a flow saves at `ts`.")
    if ts is not None:
        tsa = np.asarray(ts, dtype=float)
        if tsa.ndim != 1 or tsa.size < 2 or tsa[0] != 0.0 or np.any(np.diff(tsa) <= 0):
            raise ValueError(
                "`ts` must be increasing saved times starting at 0 (L(0) is the loss at t = 0); found "
                f"{tsa[:3]}{'...' if tsa.size > 3 else ''}."
            )


def _extract(net, x, y2, k: int, options):
    """`nqf.extract` of the network; with a declared ``normalization`` the sum form scaled back to
    the module at its width d (all of A, g, B, f0 scale with c(d))."""
    options = dict(options or {})
    model = extract(net, x, net.p, y=np.asarray(y2) if k > 1 else np.asarray(y2[:, 0]), **options)
    kind = options.get("normalization")
    if kind is None:
        return model
    c = 1.0 / net.d if kind == "mean" else 1.0 / np.sqrt(net.d)
    if not isinstance(model, NQFModel):
        return model.scaled(c)
    scale = lambda v: None if v is None else c * v  # noqa: E731
    return NQFModel(model.data.scaled(c), g=scale(model.g), B=scale(model.B), f0=scale(model.f0))


def _map(model, W0, m: int, k: int, training: SGD, ell, save_every, step_values):
    """Theorem 2's exact map (`nqf.closed_sgd`) of the description `training` with the resolved
    loss `ell` for `predict`: (MapTrajectory, the (steps, b) batch schedule over the m inputs or
    None). The schedule is drawn as `nqf.record` draws it and expanded to the m k data rows of a
    k-output module (Corollary 1: rows mu k + o; `closed_sgd` expands it itself for a loss that
    couples the k outputs). `step_values` as in `predict` ("auto" resolved here)."""
    from ..dynamics._batches import check_batch_indices

    steps = training.steps
    steps, save_every = check_steps(steps, save_every if save_every is not None else max(1, steps // 400))
    rows = None
    if not training.full_batch:
        rows = training.batch_indices
        if rows is None:
            rows = draw_batches(training.key, m, int(cast(int, training.batch_size)), steps)
        rows = np.asarray(check_batch_indices(rows, m, steps))
    data_rows = None if rows is None else (rows[:, :, None] * k + np.arange(k)).reshape(steps, -1)
    batches = rows if ell.k > 1 else data_rows
    keywords = training.map_keywords() | dict(batch_indices=batches, batch_size=None, key=None, loss=ell)
    traj = closed_sgd(
        model,
        W0=W0,
        save_every=save_every,
        step_values=resolve_step_values(step_values, rows is None, model.p),
        **keywords,
    )
    return traj, rows


def _asymptote(model, W0, target: str, horizon: float):
    """`nqf.asymptote` of the NQF from W0. For ``target="asymptote"`` any method (the numerical
    flow for data without a closed-form limit, within 20 horizons; a `RuntimeError` that says
    what failed and what to do otherwise). For the
    other targets only the closed forms (commuting data: the GLV limit; feed-forward data: the
    least-squares limit), else None: the last predicted loss then stands in for the final loss
    (``settings["final_loss"]`` says which), so the cost of a prediction stays that of its
    horizon."""
    if target == "asymptote":
        try:
            return asymptote(model, W0=W0, max_time=20.0 * horizon, solve_options={"max_steps": 20_000})
        except (RuntimeError, AssumptionError) as err:
            raise RuntimeError(
                f"predict(target='asymptote'): the NQF's limit t -> inf is not available: {err} "
                "Use target='phase_end' (the default) or 'horizon'."
            ) from err
    data = model.data if isinstance(model, NQFModel) else model
    if isinstance(model, NQFModel) and model.has_mean_field:
        return None
    method = (
        "glv"
        if isinstance(data, AbstractCommutingData)
        else "feedforward"
        if isinstance(data, FeedForwardData)
        else None
    )
    try:
        return None if method is None else asymptote(model, W0=W0, method=method)
    except (AssumptionError, ValueError):  # the closed form's assumption fails (e.g. a non-unique limit)
        return None


def _warn_frozen(net: Network, x, y, W0, ell) -> None:
    """Warn `FrozenParameterWarning` for frozen arrays with a nonzero loss gradient at W0."""
    if not net.frozen:
        return
    params = net.with_params_W(net.params, jnp.asarray(W0))
    frozen_mask = jax.tree_util.tree_map(  # neither neurons nor declared `constants`
        lambda is_neuron, is_constant, a: (
            not (is_neuron or is_constant) and hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating)
        ),
        net.neuron_mask(),
        net.constant_mask(),
        params,
    )
    import equinox as eqx

    frozen, rest = eqx.partition(params, frozen_mask)

    def loss(frozen):
        p = eqx.combine(frozen, rest)
        out = jax.vmap(lambda xx: jnp.atleast_1d(net.apply(p, xx)))(x)
        return ell.mean(out.reshape(y.shape), y)

    grads = jax.grad(loss)(frozen)
    flat = jax.tree_util.tree_flatten_with_path(grads)[0]
    from ..data._network import _path_name

    big = [(_path_name(kp), float(jnp.max(jnp.abs(g)))) for kp, g in flat if g is not None and jnp.size(g)]
    scale = float(loss(frozen)) + np.finfo(float).tiny
    big = [(n, g) for n, g in big if g > 1e-8 * scale]
    if big:
        warnings.warn(
            "Frozen arrays (not neuron parameters, so constant in the NQF) have a nonzero loss gradient at "
            "the initial weights: "
            + ", ".join(f"{n} (max |dL/d.| = {g:.3g})" for n, g in big)
            + ". A training run that updates them is not the run this prediction describes; nqf.record "
            "trains the neuron arrays only (train='neurons'), or name them as neuron parameters.",
            FrozenParameterWarning,
            stacklevel=3,
        )


def _flow_factor(model, W0):
    """The initial factor of the flow: W0 itself, or, for a plain model with d > p, the (p, p)
    factor L0 = R^T of W0^T = Q R. The factor flow F' = -H(F F^T) F from any factor of M0 is
    F(t) = U(t) F0 with the same propagator U(t) (H depends on M only), so W(t) = U(t) W0 =
    F(t) Q^T exactly (`weights_along` in `_departure`), at the cost of a (p, p) state instead of (p, d)."""
    p, d = W0.shape
    if d <= p or (isinstance(model, NQFModel) and model.has_mean_field):
        return W0
    return np.linalg.qr(W0.T, mode="r").T
