"""The exact discrete training maps (Theorem 2, Corollary 2) as a diffrax solver.

`closed_sgd` iterates Theorem 2's map in a `lax` loop. Here the same map is one step of a
diffrax solver, so discrete training is an ordinary `diffrax.diffeqsolve` problem and `SaveAt`,
`Event` (e.g. stop when the loss falls below a threshold), progress meters, `jax.vmap` and
`jax.grad` work on it as on the flow:

    term = nqf.dynamics.map_term(data, W0=W0, lr=lr)
    sol = diffrax.diffeqsolve(term, nqf.dynamics.ExactMap(), t0=0.0, t1=lr * steps, dt0=lr,
                              y0=term.y0, stepsize_controller=diffrax.ConstantStepSize(),
                              saveat=diffrax.SaveAt(steps=True, fn=term.save_M),
                              max_steps=steps)

Time is gradient-flow time t = lr * (number of steps): a step of size dt = lr is one training
step, and step n of the schedule is the step that starts at t = lr * n. The term (`MapTerm`)
holds the problem (model, loss, lr, weight decay, momentum, batch schedule, form) and the solver
(`ExactMap`) applies its map: the very stepper objects of `closed_sgd` (`_maps._stepper`, one
`step` per call, batches by `_maps.step_batch`), so both give the same numbers.

The state y is the stepper's state: ``form="factor"`` (default) (L, mu) with
M = L L^T + mu mu^T / d, plus the velocities (VL, Vmu) with momentum; ``form="M"`` (M, mu), or
(P, Q, VP, VQ) with momentum (Corollary 2, E7). `MapTerm.M`, `mu`, `outputs`, `loss` convert
it; `MapTerm.y0` is the initial state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar, cast

import diffrax
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree

from .._core._checks import is_traced, keyword_options
from .._core._config import require_x64
from .._core._errors import raised_in_callback
from ..data._model import NQFModel, as_model
from ..data._operators import AbstractData
from ._batches import check_batch_indices
from ._losses import as_loss, expand_rows
from ._maps import FORMS, SGD_KEYWORDS, _initial_order_params, _numeric, _stepper, step_batch
from ._train_args import (
    check_lr,
    check_momentum,
    check_nesterov,
    check_saves_memory,
    check_weight_decay,
    loss_inputs,
    resolve_loss_batches,
)
from ._training import accepts_training

__all__ = ["MapTerm", "ExactMap", "map_term"]

# |dt - lr| allowed, relative to lr: t accumulates one rounding per step (t_n = t_{n-1} + dt0),
# so dt = t_{n+1} - t_n differs from lr by ~ n eps; 1e-8 allows 10^7 steps and refuses any
# step size that is really different.
DT_RTOL = 1e-8


def _report(k, diverged, bad_dt, dt, past_rows, lr, rows) -> None:
    """Host side of `ExactMap.step`'s run-time checks (called only when one fails; arrays carry a
    batch axis under `jax.vmap`): raise `ValueError` for a step dt that is not `lr` or a step past
    the batch schedule, `FloatingPointError` naming the first step whose M is not finite."""
    k, diverged, bad_dt, dt, past_rows, lr = np.broadcast_arrays(
        *map(np.asarray, (k, diverged, bad_dt, dt, past_rows, lr))
    )
    if bad_dt.any():
        i = np.argmax(bad_dt.ravel())
        raise ValueError(
            f"ExactMap: every step dt must equal the term's learning rate `lr` = {lr.flat[i]:g}; step {k.flat[i]} "
            f"has dt = {dt.flat[i]:g}. Use dt0=lr, diffrax.ConstantStepSize() and t1 - t0 a whole number of steps "
            "times lr."
        )
    if past_rows.any():
        raise ValueError(
            f"ExactMap: the batch schedule `batch_indices` has {rows} rows (steps) but the solve asked for step "
            f"{int(k[past_rows].min())}; use t1 <= t0 + {rows} * lr."
        )
    if diverged.any():
        first = int(k[diverged].min())
        eta = float(lr[diverged].flat[0])
        raise FloatingPointError(
            f"The exact map diverged: non-finite M by step {first + 1} (t = {(first + 1) * eta:g}, lr={eta:g}). "
            "Gradient descent is stable only for lr < 2 / lambda_max of the loss Hessian (a `weight_decay` adds to every "
            "eigenvalue); reduce `lr` (or `weight_decay`)."
        )


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _checked(y1, fail, info, rows):
    """`y1`, or (when `fail` holds) a host callback that raises `_report`'s error, in the manner
    of `equinox.error_if`: the predicate is reduced over any vmapped axis (`unvmap_any`) so the
    branch stays a branch under `jax.vmap`; the callback is a `pure_callback` whose output the
    result depends on (not optimised out); AD sees the identity (custom JVP)."""
    struct = jax.eval_shape(lambda: y1)

    def raise_(info):
        k, diverged, bad_dt, dt, past_rows, lr = np.asarray(info)
        _report(int(k), bool(diverged), bool(bad_dt), dt, bool(past_rows), lr, rows=rows)  # raises if a check failed
        return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), struct)

    def handle():
        return jax.pure_callback(raise_, struct, info, vmap_method="sequential")

    return jax.lax.cond(eqxi.unvmap_any(fail), handle, lambda: y1)


@_checked.defjvp
def _checked_jvp(rows, primals, tangents):
    y1, fail, info = primals
    return _checked(y1, fail, info, rows), tangents[0]


class MapTerm(diffrax.AbstractTerm):
    """One discrete training problem on the order parameters: model, loss, learning rate, weight
    decay, momentum, batch schedule and form (Theorem 2; Corollary 2 for momentum). Build it with
    `map_term`; solve it with `ExactMap` (dt0 = `lr`).

    As a diffrax term its vector field is the map's difference quotient
    (map(y) - y) / lr at step round(t / lr), so any diffrax solver of one explicit Euler step
    would reproduce the map up to rounding; `ExactMap` applies the map itself.

    **Attributes:** `stepper` (the map of `closed_sgd`, with `lr`, `d`, weight decay and momentum),
    `batches` ((steps, b) int32 schedule or None: full batch), `y0` (the initial state), `form`
    (``"factor"`` or ``"M"``), `momentum` (whether the state carries velocities).
    """

    stepper: Any  # an eqx.Module: the map of `closed_sgd` (_maps._stepper)
    batches: Int[Array, "steps b"] | None
    y0: PyTree
    form: str = eqx.field(static=True)
    momentum: bool = eqx.field(static=True)

    @property
    def lr(self) -> Float[Array, ""]:
        """The learning rate eta (the step size dt of the solve)."""
        return self.stepper.lr

    @property
    def model(self) -> NQFModel:
        return self.stepper.model

    def step_number(self, t: Float[ArrayLike, ""]) -> Int[Array, ""]:
        """The step that starts at gradient-flow time t: round(t / lr) (int32)."""
        return jnp.round(t / self.lr).astype(jnp.int32)

    def apply(self, y: PyTree, k: Int[ArrayLike, ""]) -> PyTree:
        """Step k of the map (Theorem 2 / Corollary 2) applied to the state y, on row k of the
        batch schedule (full batch without one). Exact; no checks (`ExactMap.step` checks)."""
        return self.stepper.step(y, step_batch(self.model, self.batches, k))[0]  # (state, outputs at y)

    # -- diffrax.AbstractTerm --------------------------------------------------------------
    def vf(self, t, y, args):
        y1 = self.apply(y, self.step_number(t))
        return jax.tree.map(lambda a, b: (a - b) / self.lr, y1, y)

    def contr(self, t0, t1, **kwargs):
        return t1 - t0

    def prod(self, vf, control):
        return jax.tree.map(lambda v: control * v, vf)

    # -- observables of a state ------------------------------------------------------------
    def M(self, y: PyTree) -> Float[Array, "p p"]:
        """M = W W^T (p, p) of the state y."""
        return self.stepper.order_params(y)[0]

    def mu(self, y: PyTree) -> Float[Array, " p"]:
        """mu = W 1 (p,) of the state y (zeros for a plain model started without `mu0`)."""
        return self.stepper.order_params(y)[1]

    def outputs(self, y: PyTree) -> Float[Array, " m"]:
        """f_x on all m training inputs (m,) (Eq. E2)."""
        return self.model.outputs(*self.stepper.order_params(y))

    def loss(self, y: PyTree) -> Float[Array, ""]:
        """Full-training-set loss (1/m) sum_x ell(f_x, y_x) of the state y, without the
        weight-decay penalty (as `MapTrajectory.loss`)."""
        return jnp.mean(self.stepper.loss.value(self.outputs(y), self.model.y))

    def finite(self, y: PyTree) -> Bool[Array, ""]:
        """Whether M of the state y is finite (the divergence test of `closed_sgd`). Factor form:
        from the diagonal M_ii = |L_i|^2 + mu_i^2 / d alone (O(p^2): M is PSD, so
        |M_ij| <= sqrt(M_ii M_jj)), not M itself (a p x p product)."""
        if self.form == "factor":
            L, mu = y[0], y[1]
            return jnp.all(jnp.isfinite(jnp.sum(L * L, axis=1) + mu * mu / self.stepper.d))
        return jnp.all(jnp.isfinite(self.M(y)))

    def save_M(self, t, y, args) -> Float[Array, "p p"]:
        """`diffrax.SaveAt(fn=term.save_M)`: save M (p, p) instead of the raw state."""
        return self.M(y)

    def save_loss(self, t, y, args) -> Float[Array, ""]:
        """`diffrax.SaveAt(fn=term.save_loss)`: save the loss (scalar)."""
        return self.loss(y)

    # -- the solve -------------------------------------------------------------------------
    def solve(
        self,
        steps: int,
        *,
        saveat: diffrax.SaveAt | None = None,
        event: diffrax.Event | None = None,
        **kwargs: Any,
    ) -> diffrax.Solution:
        """`steps` steps of the map: the `diffrax.diffeqsolve` call of `ExactMap` from t0 = 0 to
        t1 = lr x steps with dt0 = lr, `y0`, constant steps and max_steps = steps.

        **Arguments:** `steps` (a positive int); `saveat` (default: M (p, p) at t0 and after every
        step, `SaveAt(t0=True, steps=True, fn=term.save_M)`); `event` (e.g. a `diffrax.Event` that
        stops at a loss level); other keywords go to `diffeqsolve` (e.g. `throw`).

        **Returns:** the `diffrax.Solution` (times in gradient-flow time t = lr x steps).

        A `saveat` at times between steps (``SaveAt(ts=...)`` off the grid lr x k) gets diffrax's
        linear interpolation of the state between two steps, which the discrete map never takes:
        save at ``t0``, ``steps`` or ``t1``, or at ``ts`` on the grid. A `saveat` without ``fn``
        saves the raw state (the factor (L, mu) in the factor form), not M.

        **Raises:** `ValueError` when `steps` is not a positive int or exceeds the rows of the
        term's batch schedule; at run time (`ExactMap`'s checks, raised here as these types with
        JAX's `JaxRuntimeError` chained): `FloatingPointError` naming the step where the map
        diverged (M not finite: lr past the stability edge), `ValueError` for a step past the
        batch schedule. Under your own `jax.jit` around `solve` they stay JAX's
        `jax.errors.JaxRuntimeError` with nqf's message inside (docs/numerics.md).
        """
        if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1:
            raise ValueError(f"`steps` must be a positive int; found {steps!r}.")
        if self.batches is not None and steps > self.batches.shape[0]:
            raise ValueError(
                f"`steps` = {steps} is more than the batch schedule's {self.batches.shape[0]} rows; build the term "
                f"with steps >= {steps} (or a longer `batch_indices`)."
            )
        if saveat is None:
            saveat = diffrax.SaveAt(t0=True, steps=True, fn=self.save_M)
        _check_saveat_memory(saveat, self.y0, int(steps), kwargs.get("args"))
        try:
            return self._diffeqsolve(steps, saveat, event, kwargs)
        except jax.errors.JaxRuntimeError as err:  # a run-time check of `ExactMap.step` (host callback)
            documented = raised_in_callback(err, "MapTerm.solve: ")
            if documented is None:
                raise
            raise documented from err

    def _diffeqsolve(self, steps: int, saveat, event, kwargs: dict) -> diffrax.Solution:
        """`solve`'s `diffrax.diffeqsolve` call (after its checks)."""
        return diffrax.diffeqsolve(
            self,
            ExactMap(),
            t0=0.0,
            t1=self.lr * int(steps),
            dt0=self.lr,
            y0=self.y0,
            stepsize_controller=diffrax.ConstantStepSize(),
            saveat=saveat,
            event=event,
            max_steps=int(steps),
            **kwargs,
        )


def _check_saveat_memory(saveat: diffrax.SaveAt, y0, steps: int, args) -> None:
    """Raise `nqf.memory.MemoryBudgetError` before `MapTerm.solve` saves, for each `SubSaveAt`
    with ``steps=True``, one value of its ``fn`` (shapes from `jax.eval_shape`) per step: diffrax
    reserves that buffer for max_steps = `steps` steps up front."""
    subs = jax.tree.leaves(saveat.subs, is_leaf=lambda x: isinstance(x, diffrax.SubSaveAt))
    floats = 0
    for sub in subs:
        if sub.steps:
            fn = sub.fn if sub.fn is not None else (lambda t, y, args: y)
            out = jax.eval_shape(fn, 0.0, y0, args)
            floats += sum(int(np.prod(x.shape)) for x in jax.tree.leaves(out))
    if floats:
        check_saves_memory("MapTerm.solve", steps, 1, floats, ways=" per call (solve again from the last state)")


def _map_term(terms) -> MapTerm:
    """The `MapTerm` inside diffrax's wrappers (`diffeqsolve` wraps terms for the time direction)."""
    while not isinstance(terms, MapTerm) and hasattr(terms, "term"):
        terms = terms.term
    if not isinstance(terms, MapTerm):
        raise TypeError(f"`ExactMap` solves a `MapTerm` (from `nqf.dynamics.map_term`); found {type(terms).__name__}.")
    return terms


class ExactMap(diffrax.AbstractSolver):
    """Theorem 2's exact SGD map (Corollary 2 with momentum) as a diffrax solver.

    One step of size dt = lr from (t0, y0) applies the training step round(t0 / lr) of the
    `MapTerm` to the state y0: E5-E6 with H -> H + gamma I for (minibatch) SGD with weight decay
    gamma, E7 for heavy-ball or Nesterov momentum, in the term's form (centered factor (L, mu) or
    (M, mu)). Exact for every width d (the width enters only as a number); the same numbers as
    `nqf.closed_sgd` (it calls the same step function). Use it with
    ``diffrax.diffeqsolve(term, ExactMap(), t0=0, t1=lr * steps, dt0=lr, y0=term.y0,
    stepsize_controller=diffrax.ConstantStepSize(), max_steps=>= steps)``.

    Time is gradient-flow time t = lr * steps, so t1 = lr * steps runs `steps` steps and
    `SaveAt(steps=True)` or `SaveAt(ts=lr * n)` saves the states after whole steps. Between
    steps the dense output interpolates linearly (it is not a training state). Events: a boolean
    `diffrax.Event` condition stops at the first step after which it holds (an exact integer
    step: round(sol.ts[-1] / lr)); a real-valued one is root-found on the linear interpolant.

    **Raises** (at trace time): `RuntimeError` if JAX's x64 mode is off (nqf needs float64);
    `TypeError` if the time (t0, t1) is not float64 (step numbers are round(t / lr)) or the terms
    are not a `MapTerm`; `ValueError` if `y0` does not have the structure of `term.y0` (diffrax
    itself promotes a float32 `y0` to the float64 time dtype). At run time, from a host callback
    (`jax.pure_callback`, run only when a check fails; `MapTerm.solve` raises it as its own type,
    while in your own `diffrax.diffeqsolve` or `jax.jit` it surfaces as a
    `jax.errors.JaxRuntimeError` whose message contains it: catch that; docs/numerics.md,
    "Errors raised inside compiled code"): `ValueError` for a step dt that is
    not the term's `lr` (relative 1e-8: a step-size controller other than `ConstantStepSize`,
    dt0 != lr, or t1 - t0 not a multiple of lr) or a step beyond the rows of the batch schedule;
    `FloatingPointError` naming the step for divergence (M not finite, e.g. lr above
    2 / lambda_max of the loss Hessian), the step `closed_sgd` reports.
    """

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable[..., diffrax.LocalLinearInterpolation]] = diffrax.LocalLinearInterpolation

    def order(self, terms):
        return 1  # as an integrator of the gradient flow (E10), the map is first order in lr

    def init(self, terms, t0, t1, y0, args):
        require_x64()
        terms = _map_term(terms)
        ref = jax.tree.structure(terms.y0)
        if jax.tree.structure(y0) != ref:
            raise ValueError(f"`y0` must have the structure of `term.y0` ({ref}); found {jax.tree.structure(y0)}.")
        for name, t in (("t0", t0), ("t1", t1)):
            if jnp.result_type(t) != jnp.float64:
                raise TypeError(f"`{name}` must be float64 (gradient-flow time); found dtype {jnp.result_type(t)}.")
        return None

    def step(self, terms: MapTerm, t0, t1, y0, args, solver_state, made_jump):
        del args, solver_state, made_jump
        terms = _map_term(terms)
        lr = terms.lr
        k = terms.step_number(t0)
        y1 = terms.apply(y0, k)
        # All run-time checks in ONE branch per step (a host callback only when one fails): the
        # map of a small problem costs < 1 us per step, so the checks' cost matters.
        diverged = jnp.logical_not(terms.finite(y1))
        dt = t1 - t0
        bad_dt = jnp.abs(dt - lr) > DT_RTOL * lr
        rows = None if terms.batches is None else terms.batches.shape[0]
        past_rows = jnp.asarray(False) if rows is None else k >= rows
        fail = diverged | bad_dt | past_rows
        info = jnp.stack([k, diverged, bad_dt, dt, past_rows, lr], dtype=jnp.float64)  # one callback operand
        y1 = _checked(y1, fail, info, rows)
        dense_info = dict(y0=y0, y1=y1)
        return y1, None, dense_info, None, diffrax.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return _map_term(terms).vf(t0, y0, args)


@accepts_training(schedules=False)
def map_term(
    model: NQFModel | AbstractData,
    *,
    W0: Float[ArrayLike, "p d"] | None = None,
    M0: Float[ArrayLike, "p p"] | None = None,
    mu0: Float[ArrayLike, " p"] | None = None,
    d: int | None = None,
    form: str = "factor",
    **sgd,
) -> MapTerm:
    """The discrete training problem of `nqf.closed_sgd` as a diffrax term for `ExactMap`.

    Validates its arguments as `closed_sgd` does (same checks, same messages) and builds the map
    (Theorem 2: E5-E6 with weight decay; Corollary 2 / E7 with momentum) and the initial state
    `MapTerm.y0`. Solve with ``diffrax.diffeqsolve(term, ExactMap(), t0=0.0, t1=lr * steps,
    dt0=lr, y0=term.y0, stepsize_controller=diffrax.ConstantStepSize(), max_steps=steps)``.

    **Arguments:** as `closed_sgd`: `model` (an `nqf.NQFModel` or a data set); the initial
    condition `W0` (p, d), or `M0` (p, p) with `mu0` (p,) and `d`; `lr` > 0 (time t = lr * steps;
    the solve's dt0 must be this lr); batches: full batch by default, or `batch_indices`
    (steps, b) integer (step n uses row n), or `batch_size` with `key` and `steps` (the schedule
    `nqf.batch_indices(key, m, batch_size, steps)`); `weight_decay` gamma >= 0; `momentum` beta in
    [0, 1) and `nesterov`; `loss` (default ``"mse"``); `form` ``"factor"`` (default, the state
    (L, mu)) or ``"M"`` (the state (M, mu); (P, Q, VP, VQ) with momentum). The training keywords
    (`lr`, `steps`, batches, `weight_decay`, `momentum`, `nesterov`, `loss`: ``**sgd``) are those
    of an `nqf.SGD`, given one by one or as the description (second positional argument).

    **Returns:** a `MapTerm` (a pytree: it may be built inside `jax.jit`, `jax.vmap`, `jax.grad`
    with traced `lr`, `W0`, `M0`, `mu0`, weight decay, momentum, labels; checks then move to run
    time as in `closed_sgd`).

    **Raises:** `ValueError` for lr <= 0 or not finite (naming `lr`), a `batch_indices` that is not
    a 2-d integer array (steps, b) with 1 <= b <= m and entries in [0, m) (naming
    `batch_indices`), `batch_size` without `steps`, and everything `closed_sgd` raises for the
    initial condition, weight decay, momentum, form; `TypeError` for a bad model or loss.
    """
    lr, steps, batch_indices, batch_size, key, weight_decay, momentum, nesterov, loss = keyword_options(
        "map_term",
        sgd,
        **(SGD_KEYWORDS | {"steps": None}),  # closed_sgd's keywords; steps optional here
    )
    model = as_model(model)
    lr = check_lr(lr)
    gamma = check_weight_decay(weight_decay)
    beta = check_momentum(momentum)
    nesterov = check_nesterov(nesterov, beta)
    if form not in FORMS:
        raise ValueError(f"`form` must be one of {FORMS}; found {form!r}.")
    loss = as_loss(loss)
    M0, mu0, d, L0 = _initial_order_params(model, M0, mu0, d, W0)
    if batch_indices is not None:
        shape = np.shape(batch_indices)
        if len(shape) != 2:
            raise ValueError(
                f"`batch_indices` must be a 2-d integer array of shape (steps, batch_size) (row n: the "
                f"inputs of step n); found shape {shape}."
            )
        if steps is not None and steps != shape[0]:
            raise ValueError(f"`batch_indices` has {shape[0]} rows but `steps` = {steps}; they must agree.")
        idx = expand_rows(check_batch_indices(cast(Any, batch_indices), loss_inputs(loss, model.m), shape[0]), loss.k)
        if batch_size is not None or key is not None:
            raise ValueError("Give either `batch_indices` or (`batch_size`, `key`, `steps`), not both.")
    elif batch_size is not None:
        if steps is None:
            raise ValueError("`batch_size` draws a batch schedule of `steps` rows: give `steps` too.")
        idx = resolve_loss_batches(loss, None, batch_size, key, model.m, steps)
    else:
        idx = resolve_loss_batches(loss, None, None, key, model.m, 1)
    config = (form, is_traced(beta) or beta > 0.0, bool(nesterov))
    params, init = _numeric(True, lr, d, gamma, beta, M0, mu0, L0)
    stepper = _stepper(model, loss, config, params, init)
    return MapTerm(stepper=stepper, batches=idx, y0=stepper.init(*init), form=form, momentum=config[1])
