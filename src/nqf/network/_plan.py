"""A plan before the long run: a stable learning rate and a horizon, from the NQF in seconds.

`nqf.plan(network, x, y, lr=...)` extracts the module's NQF (as `nqf.predict` does) and, before
any training, solves its gradient flow (Eq. E9 / E10) to the end of the learning phase:

1. **the end of the learning phase**: the first time L(t) - L_inf <= `phase_tol` (L(0) - L_inf),
   found as the stopping event of one flow solve (`nqf.Stop.loss_below`, a root find on the dense
   output), with L_inf the NQF's asymptotic loss (`nqf.asymptote`: the closed forms of commuting
   and feed-forward data, else its certified numerical limit within `t_max`); the suggested
   horizon is (1 + `horizon_margin`) times it;
2. **the stability edge** of the gradient-descent map along the predicted path: the sharpness
   S(t) (`nqf.sharpness`, the top Hessian eigenvalue of the NQF's loss in W, width-independent) at
   `n_points` times in [0, horizon]; full-batch GD with learning rate lr is linearly stable
   where lr < 2 (1 + beta) / S(t) (heavy-ball momentum beta; beta = 0: plain GD). The edge of
   the run is the smallest of these, `lr_edge`; the suggested lr is `lr_margin` x `lr_edge`;
3. **the init-size check** (`nqf.network._departure.init_gap`, as in `nqf.predict`): the
   module-vs-NQF loss gap at W0 and at the first saved time after 5 % of the horizon on the
   predicted path, relative to L(0) (an `nqf.InitScaleWarning` above 1 %: the initialization is
   not small enough for the NQF to describe the start).

The flow is the lr -> 0 limit of the map: the map's own path (and its sharpness) differs by
O(lr) and, near the edge, by the catapult the edge announces; `nqf.predict` with the lr checks
the map's path itself. Minibatch noise lowers the practical edge further (not modelled here).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, PyTree

from .._core._checks import check_positive, keyword_options
from .._core.io import Saveable
from ..data import Network, NQFModel
from ..dynamics._training import SGD
from ..solvers import MaxStepsReached, Stop, solve_flow
from ..theory._sharpness import stability_edge
from ._departure import INIT_GAP_TOL, check_init, weights_along
from ._inputs import as_network, check_data, check_extract_options, initial_weights
from ._predict import HorizonWarning, _asymptote, _extract, _flow_factor
from ._stability import path_sharpness

__all__ = ["Plan", "plan"]


@dataclasses.dataclass(frozen=True, eq=False)
class Plan(Saveable):
    """The result of `nqf.plan`: what to run, before running it. Times are gradient-flow times
    t = lr * steps.

    **Attributes:**

    - `t` (n,), `loss` (n,): the NQF's predicted flow loss on [0, `horizon`];
      `sharpness` (n,): the sharpness S(t) of the NQF's loss at those times (`nqf.sharpness`).
    - `phase_end`: the end of the learning phase (nan if not within `t_max`); `final_loss`
      L_inf and `final_loss_from` (``"asymptote"``: the NQF's t -> inf limit; ``"horizon"``:
      none was available, the loss at `t_max` stands in).
    - `horizon`: the suggested horizon, (1 + horizon_margin) `phase_end` (`t_max` if the phase
      does not end within it).
    - `sharpness_init`: S at W0; `lr_edge_init` = 2 (1 + momentum) / S(0); `lr_edge`: the
      smallest edge along the path, 2 (1 + momentum) / max_t S(t), reached at `t_edge`.
    - `lr`: the learning rate asked about (None if not given) and `stable`: lr < lr_edge (None
      without lr); `suggested_lr` = lr_margin x lr_edge; `steps`: ceil(horizon / lr) for the
      given lr, else for the suggested one.
    - `init_gap` (2,): |L_module - L_NQF| / L(0) at W0 and at `init_gap_time` (5 % into the
      horizon); `init_small`: both at most 0.01 (`nqf.InitScaleWarning` otherwise).
    - `still_sharpening`: S is largest at the horizon and still rising there: the edge is
      certified on [0, horizon] only, and a longer run at a fixed lr meets a lower one.
    - `model`: the extracted NQF; `settings`: the call's settings.

    **Methods:** `suggestion()`: keywords for `nqf.predict` / `pred.record` (lr, steps);
    `summary()`: a dict of plain numbers; ``str(plan)``: a short report.
    """

    t: np.ndarray
    loss: np.ndarray
    sharpness: np.ndarray
    phase_end: float
    final_loss: float
    final_loss_from: str
    horizon: float
    sharpness_init: float
    lr_edge_init: float
    lr_edge: float
    t_edge: float
    lr: float | None
    stable: bool | None
    suggested_lr: float
    steps: int
    init_gap: np.ndarray
    init_gap_time: float
    init_small: bool
    model: object
    settings: dict
    still_sharpening: bool = False

    def suggestion(self) -> SGD:
        """The `nqf.SGD` to run: the given lr (if stable, else the suggested one), the plan's
        momentum and the steps that reach the suggested horizon, for
        ``nqf.predict(net, x, y, plan.suggestion())`` and ``nqf.record`` alike.

        **Raises:** `ValueError` when the plan found no end of the learning phase within `t_max`
        or no finite edge (then it has nothing to suggest)."""
        if not np.isfinite(self.phase_end) or not 0.0 < self.suggested_lr < np.inf:
            raise ValueError(
                f"This plan has no suggestion: the learning phase does not end within t_max = "
                f"{self.settings['t_max']:g} (phase_end = {self.phase_end}) or the path has no direction of positive "
                f"curvature (lr_edge = {self.lr_edge}). Plan again with a larger `t_max` or a smaller initialization."
            )
        lr = self.lr if self.lr is not None and self.stable else self.suggested_lr
        return SGD(float(lr), steps=max(1, math.ceil(self.horizon / lr)), momentum=self.settings["momentum"])

    def summary(self) -> dict:
        """Plain numbers: the times, edges, suggestion and init check."""
        keys = (
            "phase_end",
            "final_loss",
            "final_loss_from",
            "horizon",
            "sharpness_init",
            "lr_edge_init",
            "lr_edge",
            "t_edge",
            "lr",
            "stable",
            "suggested_lr",
            "steps",
            "init_gap_time",
            "init_small",
            "still_sharpening",
        )
        out: dict[str, Any] = {k: getattr(self, k) for k in keys}
        out["init_gap"] = [float(v) for v in self.init_gap]
        return out

    def __str__(self) -> str:
        lr_line = (
            f"lr = {self.lr:g}: {'stable' if self.stable else 'PAST the stability edge'}"
            if self.lr is not None
            else "no lr given"
        )
        head = (
            f"nqf.plan: learning phase ends at t = {self.phase_end:.4g} (L_inf = {self.final_loss:.4g}, from the "
            f"{self.final_loss_from}); suggested horizon t = {self.horizon:.4g}"
        )
        edge = (
            f"stability edge 2(1+beta)/S: {self.lr_edge_init:.4g} at init, {self.lr_edge:.4g} along the path "
            f"(t = {self.t_edge:.4g}{', still sharpening there' if self.still_sharpening else ''}); {lr_line}; "
            f"suggested lr = {self.suggested_lr:.4g}"
        )
        init = (
            f"init gap |L_module - L_NQF| / L(0): {self.init_gap[0]:.2e} at W0, {self.init_gap[1]:.2e} at "
            f"t = {self.init_gap_time:.4g} ({'small' if self.init_small else 'NOT small'})"
        )
        try:
            s = self.suggestion()
            run = f"run: lr = {float(s.lr):.4g}, steps = {s.steps} ({s.label()})"
        except ValueError:
            run = "run: no suggestion (the learning phase does not end within t_max)"
        return "\n".join([head, edge, init, run])


def plan(
    network: Network | Any,
    x: PyTree[Float[ArrayLike, "m ..."]],
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"],
    training: SGD | None = None,
    *,
    W0: Float[ArrayLike, "p d"] | None = None,
    init_scale: float | None = None,
    t_max: float = 1e5,
    phase_tol: float = 0.02,
    margins: tuple[float, float] = (0.5, 0.5),
    n_points: int = 17,
    extract_options: dict[str, Any] | None = None,
    **intended,
) -> Plan:
    """Plan a training run before it starts: the stability edge of the NQF's gradient-descent
    map along the predicted path (a stable lr), the end of the learning phase (a horizon) and
    the init-size check, from the module's NQF and its gradient flow (module docstring).

    **Arguments:**

    - `network`, `x`, `y`, `W0`, `init_scale`, `extract_options`: as in `nqf.predict`.
    - `training`: the `nqf.SGD` you intend to run (optional): its largest rate and momentum
      are checked, as `lr` and `momentum` are (give one or the other).
    - `lr`: the learning rate you intend to use (optional): checked against the edge (a
      `HorizonWarning` with the edge's value when it is past it). `momentum`: heavy-ball beta in
      [0, 1) (the edge is 2 (1 + beta) / S). Both are keywords read from ``**intended`` (an
      unknown keyword is a `TypeError`).
    - `t_max`: the longest horizon searched (gradient-flow time); `phase_tol`: the learning
      phase ends when L - L_inf <= phase_tol (L(0) - L_inf), as in `nqf.predict`.
    - `margins`: (lr_margin, horizon_margin): suggested lr = lr_margin x lr_edge, suggested
      horizon = (1 + horizon_margin) x phase end (each in (0, 1]).
    - `n_points`: times at which the sharpness is evaluated along [0, horizon] (>= 2).

    **Returns:** a `Plan`.

    **Raises:** the errors of `nqf.predict` for the shared arguments; `ValueError` for a
    non-positive `lr` or `t_max`, momentum outside [0, 1), margins outside (0, 1], `n_points`
    < 2, tolerances outside (0, 1). Warns `HorizonWarning` when the learning phase does not end
    within `t_max` (a horizon that cannot be reached: `phase_end` is nan and the suggested
    horizon is `t_max`) or when `lr` is past the stability edge; `nqf.InitScaleWarning` when the
    initialization is not small (a module-vs-NQF loss gap above 1 % of L(0)).
    """
    lr, momentum = _intended(training, intended)
    net = as_network(network)
    x, y2, m, k = check_data(net, x, y)
    W0 = initial_weights(net, W0, init_scale)
    extract_options = check_extract_options(extract_options)
    lr = None if lr is None else check_positive(lr, "lr")
    t_max = check_positive(t_max, "t_max")
    momentum = _check_unit(momentum, "momentum", closed_left=True)
    if not isinstance(margins, (tuple, list)) or len(margins) != 2:
        raise ValueError(f"`margins` must be a pair (lr_margin, horizon_margin), each in (0, 1]; found {margins!r}.")
    lr_margin, horizon_margin = (_check_unit(v, "margins", closed_right=True) for v in margins)
    phase_tol = _check_unit(phase_tol, "phase_tol")
    if isinstance(n_points, bool) or not isinstance(n_points, (int, np.integer)) or n_points < 2:
        raise ValueError(f"`n_points` must be an integer >= 2; found {n_points!r}.")
    model = _extract(net, x, y2, k, extract_options)
    F0 = _flow_factor(model, W0)
    L0 = float(np.mean((np.asarray(_outputs(model, W0)) - np.asarray(model.y)) ** 2))
    final, final_from = _final_loss(model, W0, F0, t_max)
    end = _phase_end(model, F0, L0, final, phase_tol, t_max) if final is not None else float("nan")
    if final is None:  # no closed-form limit: the loss where the curve has flattened stands in
        final, final_from = _flattened_loss(model, F0, phase_tol, t_max), "horizon"
        end = _phase_end(model, F0, L0, final, phase_tol, t_max) if np.isfinite(final) else float("nan")
    if not np.isfinite(end):
        warnings.warn(
            f"nqf.plan: the NQF's learning phase (L - L_inf <= {phase_tol:g} (L(0) - L_inf), L_inf = {final:.4g}) "
            f"does not end within t_max = {t_max:g}: no horizon and no lr can be suggested (the edge below is "
            "that of [0, t_max] only; `suggestion()` refuses). "
            "Increase `t_max`, or check the initialization scale.",
            HorizonWarning,
            stacklevel=2,
        )
    horizon = (1.0 + horizon_margin) * end if np.isfinite(end) else t_max
    sol = solve_flow(model, W0=F0, t1=horizon, ts=np.linspace(0.0, horizon, n_points))
    S = path_sharpness(model, sol.M, sol.mu if _mean_field(model) else None, W0.shape[1])
    edge = float(stability_edge(S.max()) * (1.0 + momentum))
    i_edge = int(np.argmax(S))
    stable = None if lr is None else bool(lr < edge)
    if stable is False:
        warnings.warn(
            f"nqf.plan: lr = {lr:g} is past the NQF map's stability edge 2(1+beta)/S = {edge:.4g} (S = {S.max():.4g} "
            f"at t = {sol.ts[i_edge]:.4g}; at init the edge is {stability_edge(S[0]) * (1 + momentum):.4g}): the map "
            f"leaves the gradient flow there (a catapult). Suggested lr: {lr_margin * edge:.4g}.",
            HorizonWarning,
            stacklevel=2,
        )
    gap, gap_time = check_init(net, model, x, y2, W0, weights_along(sol, W0), np.asarray(sol.ts))
    init_small = bool(np.nanmax(gap) <= INIT_GAP_TOL)
    suggested = lr_margin * edge
    return Plan(
        t=np.asarray(sol.ts, dtype=float),
        loss=np.asarray(sol.loss, dtype=float),
        sharpness=S,
        phase_end=float(end),
        final_loss=float(final),
        final_loss_from=final_from,
        horizon=float(horizon),
        sharpness_init=float(S[0]),
        lr_edge_init=float(stability_edge(S[0]) * (1.0 + momentum)),
        lr_edge=edge,
        t_edge=float(sol.ts[i_edge]),
        lr=lr,
        stable=stable,
        suggested_lr=float(suggested),
        steps=max(1, math.ceil(horizon / (lr if lr is not None else suggested))),
        init_gap=gap,
        init_gap_time=gap_time,
        init_small=init_small,
        model=model,
        still_sharpening=bool(i_edge == len(S) - 1 and S[-1] > S[-2]),
        settings=dict(
            momentum=momentum,
            t_max=t_max,
            phase_tol=phase_tol,
            margins=(lr_margin, horizon_margin),
            n_points=int(n_points),
        ),
    )


def _intended(training, intended: dict):
    """(lr, momentum) that `plan` checks: from the `training` description or the keywords `lr`,
    `momentum` (`intended`), not both. **Raises:** `TypeError` for a `training` that is not an
    `nqf.SGD` or an unknown keyword; `ValueError` for both."""
    lr, momentum = keyword_options("plan", intended, lr=None, momentum=0.0)
    if training is not None:
        if not isinstance(training, SGD):
            raise TypeError(f"plan: `training` must be an nqf.SGD (the run to check); found {type(training).__name__}.")
        if lr is not None or momentum:
            raise ValueError("plan: give `training` or `lr`/`momentum`, not both.")
        lr, momentum = training.lr_max, float(training.momentum)
    return lr, momentum


def _mean_field(model) -> bool:
    return isinstance(model, NQFModel) and model.has_mean_field


def _check_unit(v, name: str, *, closed_left: bool = False, closed_right: bool = False) -> float:
    """`v` as a float in (0, 1) (with 0 or 1 allowed as asked), else a ValueError naming `name`."""
    ok = isinstance(v, (int, float, np.floating)) and not isinstance(v, bool)
    if ok:
        v = float(v)
        ok = (0.0 <= v if closed_left else 0.0 < v) and (v <= 1.0 if closed_right else v < 1.0)
    if not ok:
        interval = ("[" if closed_left else "(") + "0, 1" + ("]" if closed_right else ")")
        raise ValueError(f"`{name}` must lie in {interval}; found {v!r}.")
    return float(v)


def _outputs(model, W):
    from ..data._model import as_model

    W = jnp.asarray(W)
    return as_model(model).outputs_factor(W, jnp.sum(W, axis=1))


def _final_loss(model, W0, F0, t_max: float) -> tuple[float | None, str]:
    """The NQF's asymptotic loss from its closed-form limit (`nqf.predict`'s: commuting and
    feed-forward data); (None, "horizon") where there is none."""
    asym = _asymptote(model, W0, "phase_end", t_max)
    return (None, "horizon") if asym is None else (float(asym.loss), "asymptote")


def _flattened_loss(model, F0, tol: float, t_max: float) -> float:
    """Without a closed-form limit: L(T) at the first T = 2^j min(1, t_max) <= t_max where the
    flow's loss has flattened, L(T/2) - L(T) <= tol (L(0) - L(T)) (`_events.still_falling`); nan if
    it does not within t_max or the solver's step budget."""
    T = min(1.0, t_max)
    while True:
        try:
            loss = np.asarray(solve_flow(model, W0=F0, t1=T, ts=np.array([0.0, 0.5 * T, T])).loss)
        except MaxStepsReached:
            return float("nan")
        if loss[1] - loss[2] <= tol * max(loss[0] - loss[2], 0.0):
            return float(loss[2])
        if T >= t_max:
            return float("nan")
        T = min(2.0 * T, t_max)


def _phase_end(model, F0, L0: float, final: float, tol: float, t_max: float) -> float:
    """The first time L - L_inf <= tol (L0 - L_inf): the stopping event of one flow solve."""
    level = final + tol * (L0 - final)
    if L0 <= level:
        return 0.0
    sol = solve_flow(model, W0=F0, t1=t_max, ts=np.array([0.0, t_max]), stop=Stop.loss_below(level))
    if sol.stop_time is None or not np.isfinite(sol.stop_time) or sol.stop_time >= t_max:
        return float("nan")
    return float(sol.stop_time)
