"""Stopping a flow at an event: `solve_flow(..., stop=Stop...)`.

A `Stop` describes a condition on the flow; `solve_flow` ends the solve at the first time it
holds, located by diffrax's event handling with a Newton root find on the dense output (so the
time is accurate to the solver tolerance and differentiable: `jax.grad` of the stop time with
respect to eps, labels or data works under the default reverse-mode adjoint). The solution records
`stop_time` (gradient-flow time; inf when the condition never held before t1) and `stop_reason`
(the `Stop`'s name, or None).

Conditions:

- `Stop.loss_below(value)`: the MSE loss (1/m) sum (f_x - y_x)^2 falls to `value`.
- `Stop.ignition(k, rho=0.5)`: mode k ignites, z_k(t) = rho z_k(inf) (commuting data, GLV form;
  z(inf) is the GLV equilibrium `nqf.glv_equilibrium`, Eq. E19's definition of the ignition time).
- `Stop.when(fn, name=...)`: fn(t, state) crosses zero from below (a float), or becomes True (a
  bool: the end of the step where it first holds, no root find). `state` is the order parameter
  in natural coordinates: the mode strengths z (p,) in the GLV form, M (p, p) in the M form, the
  factor F (p, r) (M = F F^T) in the factor form, and (M, mu) in the ``"M-mu"`` form.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp

__all__ = ["Stop"]

KINDS = ("loss_below", "ignition", "when")


class Stop(eqx.Module):
    """A stopping condition for `solve_flow` (build it with `loss_below`, `ignition` or
    `when`). `value` is the threshold (loss_below), rho (ignition) or unused (when)."""

    kind: str = eqx.field(static=True)
    value: float | None = None
    k: int = eqx.field(static=True, default=-1)
    fn: Callable | None = eqx.field(static=True, default=None)
    name: str = eqx.field(static=True, default="")

    def __check_init__(self):
        """Refuse an unknown `kind` (or a ``"when"`` without a function) at construction: it
        failed later, inside the solve, as ``'NoneType' object is not callable``."""
        if self.kind not in KINDS:
            raise ValueError(
                f"`kind` of an nqf.Stop must be one of {KINDS}; found {self.kind!r}. Build it with "
                "Stop.loss_below(value), Stop.ignition(k, rho) or Stop.when(fn)."
            )
        if self.kind == "when" and not callable(self.fn):
            raise TypeError(f"Stop('when') needs `fn`, a function of (t, state); found {type(self.fn).__name__}.")

    @classmethod
    def loss_below(cls, value) -> Stop:
        """Stop when the loss reaches `value` (> 0). The threshold is a dynamic value: solves with
        different thresholds share one compiled program."""
        return cls("loss_below", value, name="loss_below")

    @property
    def label(self) -> str:
        """The condition's name for `FlowSolution.stop_reason`, with a concrete loss threshold
        (`loss_below(0.05)`); the static `name` leaves the threshold out so that it is not part of
        the compile key."""
        if self.kind == "loss_below" and isinstance(self.value, (int, float)):
            return f"loss_below({self.value:g})"
        return self.name

    @classmethod
    def ignition(cls, k: int, rho: float = 0.5) -> Stop:
        """Stop when mode k reaches rho times its equilibrium value, z_k = rho z_k(inf), rho in
        (0, 1) (commuting data)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"`k` (the mode) must be an integer >= 0; found {k!r}.")
        if isinstance(rho, (int, float)) and not 0.0 < rho < 1.0:
            raise ValueError(f"`rho` must lie in (0, 1); found {rho!r}.")
        return cls("ignition", rho, k=k, name=f"ignition({k})")

    @classmethod
    def when(cls, fn: Callable, name: str = "when") -> Stop:
        """Stop when fn(t, state) crosses zero from below (float) or becomes True (bool); `state`
        as in the module docstring."""
        if not callable(fn):
            raise TypeError(f"`fn` must be a function of (t, state); found {type(fn).__name__}.")
        return cls("when", None, fn=fn, name=name)


def natural_state(form: str, y, args):
    """The order parameter in the coordinates `Stop.when` documents, from the raw state y of
    `form` (args as in `nqf.dynamics.RHS`)."""
    from ..dynamics._flow import glv_z

    return glv_z(y, args[2]) if form == "glv" else y


def condition(stop: Stop, form: str, target) -> Callable:
    """The diffrax event condition f(t, y, args) of `stop` on the raw state of `form`; `target`
    is the dynamic threshold (the loss value, or rho z_k(inf))."""
    from ..dynamics._flow import _saved_losses, glv_z

    def cond(t, y, args, **kwargs):
        if stop.kind == "loss_below":
            return _saved_losses(t, y, args, form=form, z_star=None, grad=None)["loss"] - target
        if stop.kind == "ignition":
            return glv_z(y, args[2])[stop.k] - target
        assert stop.fn is not None  # Stop("when") requires a callable fn (checked at construction)
        return stop.fn(t, natural_state(form, y, args))

    return cond


def met_at_start(cond: Callable, up: bool, t0) -> Callable:
    """A boolean diffrax condition that holds at the initial time t0 exactly when the float
    condition `cond` (a crossing event, `up` for up-crossings) is already met there (loss below
    the threshold, mode already ignited, fn already > 0): diffrax then stops at t0. A crossing
    event alone needs a sign change within a step and would miss a condition met at t0. False for
    a boolean `cond` (diffrax already stops at t0 when it holds there) and at every t > t0."""

    def start(t, y, args, **kwargs):
        c = cond(t, y, args, **kwargs)
        if jnp.issubdtype(jnp.result_type(c), jnp.bool_):
            return jnp.asarray(False)
        return (t <= t0) & ((c > 0) if up else (c <= 0))

    return start


def direction(stop: Stop):
    """Down-crossings for the loss, up-crossings for ignition and user conditions."""
    return False if stop.kind == "loss_below" else True
