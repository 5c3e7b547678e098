"""Solve the closed MSE gradient flow (THEORY Eqs. E8, E9, E10, E13) with diffrax.

`solve_flow` is the one front end: it picks the exact form of the flow that suits the data (see
`nqf.dynamics.RHS`), integrates it with an adaptive explicit or stiff diffrax solver under PID step-size
control, and returns a `FlowSolution`. Repeated solves with new values of the same shapes reuse the
compiled program (the data set is a pytree argument, not a constant).

The general model with a linear and mean-field term (`nqf.NQFModel` with g or B, Eq. E2) is solved
in the ``"M-mu"`` form on the pair (M, mu) (Eq. E10); the width d enters its mu equation.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._core._checks import (
    as_array,
    as_weights,
    check_positive,
    check_psd,
    check_symmetric,
    check_width,
    is_traced,
    shape_str,
)
from .._core._config import require_x64
from .._core._errors import AssumptionError
from .._core.io import Saveable
from ..data._model import NQFModel
from ..data._operators import AbstractCommutingData, AbstractData, CommutingData, FeedForwardData, LowRankData
from ..dynamics._flow import (
    RHS,
    _initial_y0,
    _saved_losses,
    check_form,
    factor_linear_term,
    is_model,
    glv_z,
    jac_glv_reduced,
    reduced_log_z,
    rhs_glv_reduced,
)
from ..dynamics._glv import _THM6_COND, glv_equilibrium
from ..dynamics._glv import excess_loss as _excess_loss
from ._events import Stop, condition
from ._events import direction as event_direction
from .rosenbrock import Rodas5P
from .stiff import glv_linear_solver, glv_root_finder, is_stiff

__all__ = ["solve_flow", "FlowSolution", "MaxStepsReached", "SOLVERS"]

SOLVERS = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "kvaerno3": diffrax.Kvaerno3,
    "kvaerno5": diffrax.Kvaerno5,
    "rodas5p": Rodas5P,
}


_NO_DENSE = "This solution has no dense output: it was solved with `dense=False`."


class MaxStepsReached(RuntimeError):
    """The solver used up `max_steps` before reaching `t1`.

    **Attributes:** `t_reached` (the gradient-flow time it got to) and `solution` (a
    `FlowSolution` with the saved times up to `t_reached`, or None)."""

    def __init__(self, message: str, t_reached: float | None = None, solution=None):
        super().__init__(message)
        self.t_reached, self.solution = t_reached, solution


def _make_solver(solver, stiff: bool, data=None, form=None, mask=None):
    """A diffrax solver from a name (None: Tsit5, or Rodas5P if `stiff`). Stiff solvers named
    here get the structured linear solve of `nqf.stiff` for the GLV form."""
    if solver is None:
        solver = "rodas5p" if stiff else "tsit5"
    if isinstance(solver, str):
        try:
            cls = SOLVERS[solver.lower()]
        except KeyError:
            raise ValueError(
                f"`solver` must be a diffrax solver or one of {sorted(SOLVERS) + ['cvode', 'lsoda']}; found {solver!r}."
            ) from None
        if cls is Rodas5P and form == "glv":
            return cls(linear_solver=glv_linear_solver(data, mask))
        if issubclass(cls, diffrax.AbstractImplicitSolver) and form == "glv":
            return cls(root_finder=glv_root_finder(data, mask))
        return _default_instance(cls)
    if not isinstance(solver, diffrax.AbstractSolver):
        raise TypeError(f"`solver` must be a diffrax solver or a name; found {type(solver)}.")
    return solver


_DEFAULT_SOLVERS: dict = {}  # class -> (shared default instance, its eqx.partition)


def _default_instance(cls) -> diffrax.AbstractSolver:
    """One shared default instance per solver class (solvers are immutable), so that its
    partition into arrays and static parts is computed once (`_partition_solver`)."""
    if cls not in _DEFAULT_SOLVERS:
        solver = cls()
        _DEFAULT_SOLVERS[cls] = (solver, eqx.partition(solver, eqx.is_array))
    return _DEFAULT_SOLVERS[cls][0]


def _partition_solver(solver) -> tuple:
    """(arrays, static) halves of `solver` (cached for the shared default instances)."""
    default = _DEFAULT_SOLVERS.get(type(solver))
    if default is not None and default[0] is solver:
        return default[1]
    return eqx.partition(solver, eqx.is_array)


# Counts traces of the compiled integrator; tests use it to assert that new values of the same
# shapes do not recompile.
TRACE_COUNT = [0]


@eqx.filter_jit
def _integrate(rhs, solver, controller, data, y0, args, t0, t1, ts, dt0, max_steps, dense, meter,
               saver=None):
    TRACE_COUNT[0] += 1
    saveat = diffrax.SaveAt(ts=ts, dense=dense, fn=saver) if saver is not None else \
        diffrax.SaveAt(ts=ts, dense=dense)
    return diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        solver,
        t0,
        t1,
        dt0,
        y0,
        args=args,
        saveat=saveat,
        stepsize_controller=controller,
        max_steps=max_steps,
        throw=False,
        progress_meter=meter,
        adjoint=diffrax.ForwardMode(),  # plain while loops: no checkpoint copies of the state
    )


_RESULT_STR = {int(item._value): str(item) for item in diffrax.RESULTS._name_to_item.values()}
_CODE_OF = {v: k for k, v in _RESULT_STR.items()}
_MAX_STEPS_CODE = int(diffrax.RESULTS.max_steps_reached._value)
_SUCCESS_CODE = int(diffrax.RESULTS.successful._value)


class _FlowArgs(NamedTuple):
    """The dynamic half of a flow solve: arrays (and pytrees of arrays), None where unused."""

    data: Any  # a data set, an NQFModel, or its FactoredG form ("M-mu" with a low-rank g)
    init: Any  # the initial condition of kind `_FlowConfig.init`
    params: Any  # [t0, t1, rtol, gamma]: one array, one transfer
    ts: Any
    dt0: Any = None
    atol: Any = None  # None: the default rtol * max|state(0)| (rtol for the log-space GLV state)
    width: Any = None  # the "M-mu" form's d
    solver: Any = None  # the solver's arrays (eqx.partition)
    z_star: Any = None  # save="loss" with the excess loss: the equilibrium and the gradient there
    grad: Any = None
    stop_target: Any = None  # the threshold of `_FlowConfig.stop` (loss value, or rho z_k(inf))


class _FlowConfig(NamedTuple):
    """The static (hashable) half of a flow solve: everything that decides the compiled program.
    The dynamic half is a dict of arrays (see `_solve_core`)."""

    form: str  # "M", "factor", "glv" or "M-mu"
    init: str  # what `dyn.init` holds: "W" (p, d), "M" (p, p), "z" (p,) or "M-mu" (M, mu)
    solver: Any  # the solver with its arrays partitioned out (eqx.partition)
    max_steps: int
    dense: bool
    save: str  # "state" or "loss"
    progress: bool
    excess: bool  # save="loss" also saves the excess loss (dyn.z_star, dyn.grad)
    pcoeff: float  # PID coefficients: static, so that zero terms compile away
    icoeff: float
    reduced: bool = False  # GLV form in m coordinates (`nqf.dynamics.rhs_glv_reduced`; stiff, m < p / 2)
    autonomous: bool = True  # False: the reduced form with weight decay depends on t
    adjoint: str = "forward"  # "forward": diffrax.ForwardMode (jvp, jacfwd); "reverse": checkpointed (grad)
    stop: Any = None  # an `nqf.Stop` without its value (static), or None


def _solve_core(cfg: _FlowConfig, dyn: dict):
    """One flow solve as a pure function of arrays (traceable: jit, vmap, grad).

    `dyn` holds ``data`` (a data set, an `NQFModel` or its `FactoredG` form), ``init`` (the initial condition of kind
    ``cfg.init``), ``params`` = [t0, t1, rtol, gamma] (one array: one transfer), ``ts``, ``dt0``
    (or None), ``atol`` (None: the default rtol * max|state(0)|, rtol for the log-space GLV
    state), ``width`` (the "M-mu" form's d, else None), ``solver`` (the solver's arrays) and,
    for save="loss" with the excess loss, ``z_star`` and ``grad``. Returns a dict: ``ts``,
    ``ys`` (the saved states or losses), ``y0``, ``mask``, ``info`` = [result code, num_steps,
    accepted, rejected, all saved values finite] and ``dense`` (the diffrax solution, with its
    interpolant, if ``cfg.dense``; else None).
    """
    TRACE_COUNT[0] += 1
    data = dyn.data
    plain = data.data if is_model(data) else data
    y0, mask = _initial_y0(cfg.form, cfg.init, plain, dyn.init)
    t0, t1, rtol, gamma = dyn.params
    atol = dyn.atol
    if atol is None:
        if cfg.form == "glv":
            atol = rtol
        else:
            scale = functools.reduce(jnp.maximum, [jnp.max(jnp.abs(x)) for x in jax.tree.leaves(y0)])
            atol = rtol * jnp.where(scale > 0, scale, 1.0)
    third = dyn.width if cfg.form == "M-mu" else mask
    args = (data, gamma, third)
    saver = None
    if cfg.save == "loss":
        saver = functools.partial(_saved_losses, form=cfg.form, z_star=dyn.z_star, grad=dyn.grad)
    rhs, state0, solver = RHS[cfg.form], y0, eqx.combine(dyn.solver, cfg.solver)
    if cfg.reduced:  # the GLV flow in m coordinates (`nqf.dynamics.rhs_glv_reduced`)
        rhs, state0, args = rhs_glv_reduced, jnp.zeros(plain.m), (plain, gamma, mask, y0, t0)
        # |du| <= max_k |lambda_k| |dG|: the same absolute accuracy on u = log z
        atol = atol / jnp.sqrt(jnp.max(plain.feature_norms()))
        solver = Rodas5P(jacobian=jac_glv_reduced, autonomous=cfg.autonomous)
        saver = _reduced_saver(saver)
    controller = diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=cfg.pcoeff, icoeff=cfg.icoeff)
    event = None
    if cfg.stop is not None:  # terminate at the event; its time by a Newton root find (differentiable)
        cond = condition(cfg.stop, cfg.form, dyn.stop_target)
        if cfg.reduced:
            base = cond
            cond = lambda t, G, args, **kw: base(t, reduced_log_z(t, G, args), args[:3], **kw)  # noqa: E731
        event = diffrax.Event(cond, root_finder=optx.Newton(rtol=1e-12, atol=1e-12),
                              direction=event_direction(cfg.stop))
    fn = {} if saver is None else {"fn": saver}
    # the saved times, and where the solve ended (an event, max_steps, or t1)
    saveat = diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=dyn.ts, **fn), diffrax.SubSaveAt(t1=True, fn=_time_only)],
                            dense=cfg.dense)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        solver,
        t0,
        t1,
        dyn.dt0,
        state0,
        args=args,
        saveat=saveat,
        stepsize_controller=controller,
        max_steps=cfg.max_steps,
        event=event,
        throw=False,
        progress_meter=diffrax.TextProgressMeter() if cfg.progress else diffrax.NoProgressMeter(),
        # forward: plain while loops, no checkpoint copies of the state (and forward-mode AD);
        # reverse: binomially checkpointed loops, for jax.grad
        adjoint=diffrax.ForwardMode() if cfg.adjoint == "forward" else diffrax.RecursiveCheckpointAdjoint(),
    )
    ys, stop_time = sol.ys[0], None
    t_end = sol.ts[1][0]  # the time the solve reached
    reached = dyn.ts <= t_end
    if cfg.stop is not None:
        stopped = jnp.any(jnp.asarray(jax.tree.leaves(sol.event_mask)))
        stop_time = jnp.where(stopped, t_end, jnp.inf)
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x) | ~reached.reshape((-1,) + (1,) * (x.ndim - 1)))
                                for x in jax.tree.leaves(ys)]))
    code = jnp.where(sol.result == diffrax.RESULTS.event_occurred, _SUCCESS_CODE, sol.result._value)
    info = jnp.stack([code, sol.stats["num_steps"], sol.stats["num_accepted_steps"],
                      sol.stats["num_rejected_steps"], finite]).astype(jnp.int64)
    dense = None
    if cfg.dense:
        dense = ReducedInterpolation(sol, args) if cfg.reduced else sol
    return {"ts": dyn.ts, "ys": ys, "y0": y0, "mask": mask, "info": info, "dense": dense, "stop_time": stop_time,
            "t_end": t_end}


def _time_only(t, y, args):
    """SaveAt function of the end point: only its time is needed (`sol.ts`), not a state copy."""
    return jnp.zeros(())


def _reduced_saver(saver):
    """SaveAt function of the reduced GLV form: the saved quantity of the GLV form (log z, or
    the losses through `saver`) at the state u = `reduced_log_z`."""
    def fn(t, G, args):
        u = reduced_log_z(t, G, args)
        return u if saver is None else saver(t, u, args[:3])

    return fn


class ReducedInterpolation(eqx.Module):
    """Dense output of the reduced GLV form in the GLV form's coordinates: log z(t) (p,) from
    the interpolated integrated residuals G(t) (m,)."""

    sol: diffrax.Solution
    args: tuple

    @property
    def t0(self):
        return self.sol.t0

    @property
    def t1(self):
        return self.sol.t1

    @property
    def interpolation(self):
        return self.sol.interpolation

    def evaluate(self, t):
        return reduced_log_z(t, self.sol.evaluate(t), self.args)


_solve_jit = jax.jit(_solve_core, static_argnums=0)


@eqx.filter_jit
def _evaluate(sol, t):
    return jax.vmap(sol.evaluate)(t)


def _is_traced(tree) -> bool:
    """True if any leaf of `tree` is a JAX tracer (inside jit, vmap, grad)."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


def _host(x):
    """`x` as numpy arrays on the host, unless it is traced (then as it is)."""
    if x is None or _is_traced(x):
        return x
    return jax.tree.map(np.asarray, x)


_STAT_NAMES = ("num_steps", "num_accepted_steps", "num_rejected_steps")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["ts", "ys", "data", "init", "_info", "_y0", "_dfx", "_mask", "model", "stop_time"],
    meta_fields=["form", "init_is_factor", "max_steps", "_redo", "d", "init_is_z", "saved", "method",
                 "_extra_stats", "_stop_name", "settings"],
)
@dataclasses.dataclass(frozen=True, eq=False)
class FlowSolution(Saveable):
    """Result of `solve_flow`: a JAX pytree (its arrays are the leaves), so a solve inside
    `jax.jit` / `jax.vmap` can return it, and it pickles.

    Times are gradient-flow times (t = eta * GD steps). `n` below is the number of saved times.

    **Attributes:**

    - `ts`: saved times, shape (n,).
    - `form`: the form that was integrated (``"M"``, ``"factor"``, ``"glv"`` or ``"M-mu"``).
    - `ys`: the raw saved state: M (n, p, p), F (n, p, r), log z (n, p) for ``"glv"``, or the
      pair (M (n, p, p), mu (n, p)) for ``"M-mu"``; with ``save="loss"`` a dict of (n,) arrays;
      `saved`: ``"state"`` or ``"loss"`` (the `save` argument).
    - `save(path)`: write the solution to disk (`nqf.io`; read it back with `nqf.load`).
    - `data`: the data set whose flow was integrated (for an `NQFModel` with f0 but no g, B solved
      in another form: its data with labels y - f0, the same flow).
    - `stats`: solver statistics {num_steps, num_accepted_steps, num_rejected_steps, max_steps}
      (plus nfev, njev for ``solver="lsoda"`` and ``"cvode"``; CVODE's step counts are -1, its
      step times `step_times`); `result`: diffrax's result message (under
      tracing: its integer code); `successful`: True if the solve reached t1.
    - `model`: the `NQFModel` that was passed (None for a bare data set); `d`: the width used by
      the ``"M-mu"`` form (None for the other forms); `method`: ``"ode"`` or ``"exact"``.
    - `settings`: the solver settings of the call ((name, value) pairs: form, solver, stiff,
      tolerances, t0, t1, ...), kept by `save`/`nqf.load` so that a loaded solution can rebuild
      its dense output by solving again.
    - `stop_time`, `stop_reason`: with `stop=`, the time the condition first held (inf if never
      before t1) and its name (None if it never held); then `ts` and the saved quantities keep
      only the saved times up to `stop_time` (under tracing all n entries are kept, those after
      `stop_time` being inf). None without `stop`.

    Derived (computed on access; numpy arrays, or JAX arrays inside a transformation): `M`
    (n, p, p), `mu` (n, p) (``"M-mu"`` only, else None), `W` (n, p, r), `z` (n, p) for
    commuting data, `loss` (n,) (from the model outputs f_x), `z_inf` (p,) and `excess_loss`
    (n,) for commuting data without g, B, f0 (None otherwise).
    """

    _unsaved_fields = ("_dfx", "_redo")  # dense output: rebuilt on first use after `nqf.load`

    def _after_load(self) -> None:
        object.__setattr__(self, "_dfx", None)
        object.__setattr__(self, "_redo", _dense_by_resolving(self))

    ts: Any
    form: str
    ys: Any
    data: AbstractData
    init: Any
    init_is_factor: bool
    _info: Any  # int (5,): result code, num_steps, accepted, rejected, all saved values finite
    max_steps: int = 0
    _y0: Any = dataclasses.field(repr=False, default=None)
    _dfx: Any = dataclasses.field(repr=False, default=None)
    _redo: Any = dataclasses.field(repr=False, default=None)
    _mask: Any = dataclasses.field(repr=False, default=None)
    model: NQFModel | None = None
    d: int | None = None
    init_is_z: bool = False
    saved: str = "state"
    method: str = "ode"
    _extra_stats: tuple = dataclasses.field(repr=False, default=())
    stop_time: Any = None
    _stop_name: str | None = dataclasses.field(repr=False, default=None)
    settings: tuple = dataclasses.field(repr=False, default=())

    @property
    def stop_reason(self) -> str | None:
        """The name of the `stop` condition that ended the solve, or None (no `stop`, or it never
        held before t1). Under tracing: the condition's name whenever one was given."""
        if self.stop_time is None or self._stop_name is None:
            return None
        if _is_traced(self.stop_time):
            return self._stop_name
        return self._stop_name if np.isfinite(self.stop_time) else None

    @property
    def stats(self) -> dict:
        """{num_steps, num_accepted_steps, num_rejected_steps, max_steps} (ints; arrays under
        tracing)."""
        info = self._info if _is_traced(self._info) else np.asarray(self._info)
        out = {k: (v if _is_traced(v) else int(v)) for k, v in zip(_STAT_NAMES, info[1:4])}
        out["max_steps"] = self.max_steps
        out.update(self._extra_stats)
        return out

    @property
    def result(self):
        """diffrax's result message (a string; the integer result code under tracing)."""
        code = self._info[0]
        return code if _is_traced(code) else _RESULT_STR[int(code)]

    @property
    def successful(self):
        """True if the solver reached t1 with finite saved values (a bool array under tracing)."""
        ok = (self._info[0] == _SUCCESS_CODE) & (self._info[4] != 0)
        return ok if _is_traced(ok) else bool(ok)

    def _state(self):
        require_x64()
        if self.saved != "state":
            dense = self._dfx is not None or self._redo is not None
            raise ValueError(
                f"This solution was solved with save={self.saved!r}: only `loss` and "
                "`excess_loss` were saved. Solve with save='state' for the state"
                + (", or use the dense output (`evaluate`, `z_at`, `M_at`)." if dense else
                   " (it was also solved with dense=False, so it has no dense output).")
            )
        return self.ys

    @property
    def _general(self) -> bool:
        """True if the outputs are not Tr[M A] alone (M-mu form of a model with g, B or f0)."""
        m = self.model
        return self.form == "M-mu" and m is not None and (m.has_mean_field or m.f0 is not None)

    def _P(self):
        return None if self.data.P is None else jnp.asarray(self.data.P)

    # -- state transforms (JAX: they run on saved states, dense output, and under tracing) --
    def _glv_scale(self, logz):
        """s(t) = sqrt(z(t)/z(0)); M(t) = Q M0 Q and W(t) = Q W0 with Q = P diag(s) P^T
        (the off-diagonal slaving of Proposition 7), shape (n, p)."""
        z = glv_z(jnp.atleast_2d(jnp.asarray(logz)), self._mask)
        z0 = glv_z(jnp.asarray(self._y0), self._mask)
        return jnp.sqrt(jnp.where(z0 > 0, z / jnp.where(z0 > 0, z0, 1.0), 0.0))

    def _W_from(self, y):
        if self.form == "M-mu":
            raise ValueError(
                "`W` is not available for form='M-mu': the closed flow (Eq. E10) tracks only "
                "M = W W^T and mu = W 1; use `M` and `mu`, or simulate in weight space."
            )
        if self.form == "factor":
            return jnp.asarray(y)
        P = self._P()
        if self.form == "glv" and self.init_is_z:  # W = P diag(sqrt(z)): a factor of M
            W = jnp.sqrt(self._z_from(y))[:, None, :] * jnp.eye(self.data.p)
            return W if P is None else jnp.einsum("ij,njr->nir", P, W)
        if self.form == "glv" and self.init_is_factor:
            Wb = jnp.asarray(self.init) if P is None else P.T @ self.init
            out = self._glv_scale(y)[:, :, None] * Wb[None]
            return out if P is None else jnp.einsum("ij,njr->nir", P, out)
        raise ValueError(
            f"`W` is not available for form={self.form!r} started from M0; use `M`, or solve "
            "from a factor `W0`."
        )

    def _M_from(self, y):
        if self.form == "M":
            return jnp.asarray(y)
        if self.form == "M-mu":
            return jnp.asarray(y[0])
        if self.form == "factor" or self.init_is_factor or self.init_is_z:
            W = self._W_from(y)
            return jnp.einsum("...ir,...jr->...ij", W, W)
        P = self._P()
        Mb = jnp.asarray(self.init) if P is None else P.T @ self.init @ P
        s = self._glv_scale(y)
        out = s[:, :, None] * Mb[None] * s[:, None, :]
        return out if P is None else jnp.einsum("ik,nkl,jl->nij", P, out, P)

    def _z_from(self, y):
        if self.form == "glv":
            return glv_z(jnp.asarray(y), self._mask)
        if self.form == "factor":
            return jax.vmap(self.data.z_factor)(jnp.asarray(y))
        return jax.vmap(self.data.z)(self._M_from(y))

    @functools.cached_property
    def M(self):
        """Order parameter M(t) = W W^T at the saved times, shape (n, p, p)."""
        return _host(self._M_from(self._state()))

    @functools.cached_property
    def mu(self):
        """Order parameter mu(t) = W 1 at the saved times, shape (n, p) (``"M-mu"`` form only;
        None for the other forms)."""
        return _host(self._state()[1]) if self.form == "M-mu" else None

    @functools.cached_property
    def W(self):
        """A factor W(t) with W W^T = M(t), shape (n, p, r). Available for the factor form and,
        when the initial condition was a factor W0, for the GLV form (W(t) = Q(t) W0)."""
        return _host(self._W_from(self._state()))

    @functools.cached_property
    def z(self):
        """Mode strengths z_k(t) = (P^T M(t) P)_kk for commuting data, shape (n, p); else None."""
        if not isinstance(self.data, AbstractCommutingData):
            return None
        return _host(self._z_from(self._state()))

    @functools.cached_property
    def loss(self):
        """MSE loss (1/m) sum_x (f_x - y_x)^2 at the saved times, shape (n,); f_x = Tr[M A_x]
        or, for the ``"M-mu"`` form of a model, the model outputs (Eq. E2)."""
        require_x64()
        d = self.data
        if self.saved == "loss":
            return _host(self.ys["loss"])
        ys = self.ys
        if self._general:
            f = jax.vmap(self.model.outputs)(jnp.asarray(ys[0]), jnp.asarray(ys[1]))
        elif self.form == "M-mu":
            f = jax.vmap(d.traces)(jnp.asarray(ys[0]))
        elif self.form == "glv":
            f = d.outputs_z(self._z_from(ys))
        elif self.form == "factor":
            f = jax.vmap(d.traces_factor)(jnp.asarray(ys))
        else:
            f = jax.vmap(d.traces)(jnp.asarray(ys))
        return _host(jnp.mean((f - d.y) ** 2, axis=-1))

    @functools.cached_property
    def z_inf(self):
        """z(inf), the GLV equilibrium (`nqf.glv_equilibrium`), for commuting data without g, B,
        f0; else None."""
        if not isinstance(self.data, AbstractCommutingData) or self._general:
            return None
        return glv_equilibrium(self.data)

    @functools.cached_property
    def excess_loss(self):
        """L(t) - L(z_inf) without cancellation (`nqf.excess_loss`), shape (n,); commuting data
        only, else None (the infimum of the loss over PSD M is not known in closed form)."""
        if self.saved == "loss":
            return _host(self.ys.get("excess_loss"))
        if self.z is None or self.z_inf is None:
            return None
        return _excess_loss(self.data, self.z, self.z_inf)

    # -- dense output -----------------------------------------------------------------------
    def evaluate(self, t):
        """Raw state at time(s) t by the dense interpolation; shape (len(t), ...).

        **Raises:** `ValueError` for times outside [t0, t1] (checked for concrete t; under
        tracing the interpolant extrapolates) or a solution without dense output; `RuntimeError`
        if JAX's float64 was turned off after importing nqf."""
        require_x64()
        interp = self._interp
        if _is_traced(t) or _is_traced(interp):
            return jax.vmap(interp.evaluate)(jnp.atleast_1d(jnp.asarray(t, dtype=jnp.float64)))
        tn = np.atleast_1d(np.asarray(t, dtype=np.float64))
        t0, t1 = float(interp.t0), float(interp.t1)
        if not np.all((tn >= t0) & (tn <= t1)):
            raise ValueError(
                f"`t` must lie in the solved interval [t0, t1] = [{t0:g}, {t1:g}]; found range "
                f"[{tn.min():g}, {tn.max():g}] (dense output does not extrapolate)."
            )
        if getattr(interp, "host", False):
            return interp.evaluate(tn)
        return jax.tree.map(np.asarray, _evaluate(interp, jnp.asarray(tn)))

    def z_at(self, t):
        """z(t) from dense interpolation for commuting data, shape (len(t), p)."""
        require_x64()
        if not isinstance(self.data, AbstractCommutingData):
            raise ValueError("`z_at` needs commuting data (a `CommutingData`).")
        return _host(self._z_from(self.evaluate(t)))

    def M_at(self, t):
        """M(t) from dense interpolation, shape (len(t), p, p)."""
        require_x64()
        return _host(self._M_from(self.evaluate(t)))

    def mu_at(self, t):
        """mu(t) from dense interpolation, shape (len(t), p) (``"M-mu"`` form only)."""
        require_x64()
        if self.form != "M-mu":
            raise ValueError(f"`mu_at` needs the 'M-mu' form; this solution is form={self.form!r}.")
        return _host(self.evaluate(t)[1])

    @functools.cached_property
    def _interp(self):
        if self._dfx is not None:
            return self._dfx
        if self._redo is None:
            raise ValueError(_NO_DENSE)
        return self._redo()

    @property
    def step_times(self) -> np.ndarray:
        """Times of the accepted solver steps (from the dense interpolation), shape (steps + 1,).
        For ``method="exact"`` the dense output is one closed-form piece: [t0, t1]."""
        if self.method == "exact":
            return np.array([float(self._dfx.t0), float(self._dfx.t1)])
        if getattr(self._interp, "host", False):
            return self._interp.step_ts
        ts = np.asarray(self._interp.interpolation.ts)
        return ts[np.isfinite(ts)]


def _excess_loss_anchor(form: str, data: AbstractData, model):
    """(z_star, grad) for the saved excess loss: the GLV equilibrium z(inf) and the loss gradient
    there, for commuting data without g, B, f0 (else (None, None))."""
    general = model is not None and (model.has_mean_field or model.f0 is not None) and form == "M-mu"
    if not isinstance(data, AbstractCommutingData) or general or form == "M-mu":
        return None, None
    z_star = glv_equilibrium(data)
    grad = 2.0 / data.m * data.pullback(data.outputs_z(z_star) - data.y)
    return _host(z_star), _host(grad)


def _settings(form, solver, stiff, t0, t1, rtol, atol, pcoeff, icoeff, dt0, max_steps, weight_decay, save,
              method, adjoint, stop) -> tuple:
    """The call's solver settings as (name, value) pairs of plain values (what `save` keeps to
    rebuild dense output by solving again); a solver instance or a user `Stop.when` function is
    recorded as unavailable."""
    def plain(x):
        if _is_traced(x):
            return None
        if x is None or isinstance(x, (bool, str, int)):
            return x
        try:
            return float(x)
        except (TypeError, ValueError):
            return None
    stop_rec = None
    if isinstance(stop, Stop):
        stop_rec = ("unavailable",) if stop.fn is not None else (stop.kind, plain(stop.value), stop.k)
    return (("form", form), ("solver", solver if solver is None or isinstance(solver, str) else "unavailable"),
            ("stiff", bool(stiff)), ("t0", plain(t0)), ("t1", plain(t1)), ("rtol", plain(rtol)),
            ("atol", plain(atol)), ("pcoeff", plain(pcoeff)), ("icoeff", plain(icoeff)), ("dt0", plain(dt0)),
            ("max_steps", plain(max_steps)), ("weight_decay", plain(weight_decay)), ("save", save),
            ("method", method), ("adjoint", adjoint), ("stop", stop_rec))


def _dense_by_resolving(sol: "FlowSolution"):
    """The `_redo` of a loaded solution: solve again with its recorded settings, dense output on,
    and return the interpolant (None-safe: raises a clear error if the settings are incomplete)."""
    return functools.partial(_resolve_interp, sol)


def _resolve_interp(sol: "FlowSolution"):
    kw = dict(sol.settings)
    if not kw or kw.get("solver") == "unavailable" or kw.get("stop") == ("unavailable",):
        raise ValueError(
            "This loaded solution cannot rebuild its dense output: it was solved with a solver instance "
            "or a user stop function, which are not saved. Its saved arrays are complete; solve again "
            "with solve_flow for dense output."
        )
    stop = kw.pop("stop")
    if stop is not None:
        kind, value, k = stop
        stop = Stop(kind, value, k=k, name=sol._stop_name or "")
    if kw["form"] == "M-mu":
        init = {"W0": sol.init} if sol.init_is_factor else {"M0": sol.init, "mu0": sol._y0[1], "d": sol.d}
    elif sol.init_is_z:
        init = {"z0": sol.init}
    else:
        init = {"W0" if sol.init_is_factor else "M0": sol.init}
    data = sol.data if sol.model is None else sol.model
    again = solve_flow(data, **init, ts=sol.ts, dense=True, stop=stop, **kw)
    return again._interp


def _state_size(form: str, x0, data: AbstractData) -> int:
    """Number of float64 values in the integrated state of `form` started from `x0`."""
    p = data.p
    if form == "M":
        return p * p
    if form == "M-mu":
        return p * p + p
    if form == "factor":
        return p * (x0.shape[1] if x0.ndim == 2 and x0.shape[0] == p and x0.shape[1] != p else p)
    return p


def solve_bytes(form: str, x0, data: AbstractData, n_saved: int, save: str, solver, reduced: bool,
                dense: bool, max_steps: int, members: int = 1) -> tuple[float, str]:
    """Estimated bytes of one solve (times `members` for a sweep) and what dominates them:
    saved states (n x state), ~20 stage vectors, a stiff solver's dense Jacobian and LU
    (state^2, or m^2 in the reduced GLV form) and, with `dense`, diffrax's interpolant reserved
    for `max_steps` steps (~9 state vectors per step)."""
    n = _state_size(form, x0, data)
    saved_state = data.p if form == "glv" else n
    parts = {
        "the saved states": n_saved * (saved_state if save == "state" else 2) * 8.0,
        "the solver's stage vectors": 20 * n * 8.0,
    }
    if is_stiff(solver):
        from .stiff import is_structured

        if reduced:
            parts["the m x m Jacobian"] = 3.0 * data.m**2 * 8
        elif not is_structured(solver):
            parts["the stiff solver's dense Jacobian and LU (state x state)"] = 2.0 * n * n * 8
    if dense:
        parts["the dense output reserved for max_steps steps"] = 9.0 * n * max_steps * 8
    total = members * sum(parts.values())
    return total, max(parts, key=parts.get)


def _check_solve_memory(form, x0, data, n_saved, save, solver, reduced, dense, max_steps, memory_budget,
                        members: int = 1) -> None:
    from .._core.memory import check

    nbytes, main = solve_bytes(form, x0, data, n_saved, save, solver, reduced, dense, max_steps, members)
    ways = ["fewer saved times `ts`"]
    if save == "state":
        ways.append("save='loss' (only the loss is kept)")
    if dense:
        ways.append("dense=None (dense output built lazily for the steps actually taken) or dense=False")
    if form == "M":
        ways.append("a structured data class (CommutingData, DiagonalData, LowRankData, FeedForwardData) "
                    "or the factor form from a low-rank W0")
    if "Jacobian" in main and not reduced:
        ways.append("a non-stiff solver, or data whose stiff solve is structured (nqf.stiff)")
    check(nbytes, f"This flow solve ({main} dominate)" if members == 1 else
          f"This {members}-member sweep ({main} dominate)", "; ".join(ways) + ".", memory_budget)


def _params(t0, t1, rtol, gamma):
    """[t0, t1, rtol, gamma] as one array (numpy for concrete values: one transfer)."""
    if _is_traced((t0, t1, rtol, gamma)):
        return jnp.stack([jnp.asarray(v, dtype=jnp.float64) for v in (t0, t1, rtol, gamma)])
    return np.array([t0, t1, rtol, gamma], dtype=np.float64)


def _with_saved_losses(dyn: _FlowArgs, save: str, form: str, data, model) -> tuple[_FlowArgs, bool]:
    """Check `save`; for save="loss" on commuting data add the excess loss's anchor (z_star,
    grad) to the dynamic arguments. Returns (dyn, whether the excess loss is saved)."""
    if save == "state":
        return dyn, False
    if save != "loss":
        raise ValueError(f"`save` must be 'state' or 'loss'; found {save!r}.")
    z_star, grad = _excess_loss_anchor(form, data, model)
    if z_star is None:
        return dyn, False
    return dyn._replace(z_star=z_star, grad=grad), True


def _stop_target(stop: Stop, form: str, data: AbstractData, model):
    """Check a `stop` condition against the problem; return (its static part, its threshold)."""
    if not isinstance(stop, Stop):
        raise TypeError(
            "`stop` must be an `nqf.Stop` (Stop.loss_below(value), Stop.ignition(k), Stop.when(fn)); "
            f"found {type(stop).__name__}."
        )
    static = eqx.tree_at(lambda s: s.value, stop, None, is_leaf=lambda x: x is None)
    if stop.kind == "loss_below":
        if not _is_traced(stop.value):
            check_positive(stop.value, "Stop.loss_below value")
        return static, stop.value
    if stop.kind == "ignition":
        if form != "glv" or (model is not None and model.has_mean_field):
            raise ValueError(
                "Stop.ignition needs commuting data in the GLV form (mode strengths z_k); found "
                f"{type(data).__name__} with form={form!r}. Use Stop.when(fn) for other conditions."
            )
        if stop.k >= data.p:
            raise ValueError(f"Stop.ignition: mode k = {stop.k} out of range for p = {data.p}.")
        z_inf = glv_equilibrium(data)
        if not _is_traced(z_inf) and not z_inf[stop.k] > 0:
            raise ValueError(
                f"Stop.ignition({stop.k}): the mode's equilibrium z_inf = {z_inf[stop.k]:.3g} is not "
                "positive, so it never ignites (Eq. E19 needs r_k > 0)."
            )
        return static, stop.value * z_inf[stop.k]
    return static, None


def _redo_dense(cfg: _FlowConfig, dyn: _FlowArgs):
    """The same solve with dense output (and room for `cfg.max_steps` steps): the interpolant.
    Checks the interpolant's memory (`nqf.memory`, default budget) first."""
    from .._core.memory import check

    plain = dyn.data.data if is_model(dyn.data) else dyn.data
    n = _state_size(cfg.form, dyn.init if cfg.form != "M-mu" else dyn.init[0], plain)
    check(9.0 * n * cfg.max_steps * 8, f"The dense output of this solution ({cfg.max_steps} steps of a "
          f"state of {n} values)", "evaluate at fewer times through a solve with `ts` instead, or "
          "use a structured form with a smaller state.")
    return _solve_jit(cfg, dyn)["dense"]


def _reduced_stiff(data: AbstractData, solver, stiff: bool) -> bool:
    """True if the stiff GLV solve runs in m coordinates (`nqf.dynamics.rhs_glv_reduced`): Rodas5P
    chosen by name (or `stiff=True`) on `CommutingData` with 2 m < p."""
    rodas = (solver is None and stiff) or (isinstance(solver, str) and solver.lower() == "rodas5p")
    return rodas and type(data) is CommutingData and 2 * data.m < data.p


def _is_implicit_name(solver, stiff: bool) -> bool:
    """True if `solver` (a name, None or an instance) resolves to a stiff solver."""
    if solver is None:
        return bool(stiff)
    if isinstance(solver, str):
        cls = SOLVERS.get(solver.lower())
        return cls is not None and (cls is Rodas5P or issubclass(cls, diffrax.AbstractImplicitSolver))
    return is_stiff(solver)


def _check_mode_strengths(z0: np.ndarray) -> np.ndarray:
    """Raise unless every mode strength in `z0` (any shape) is >= 0; return `z0`."""
    if np.any(z0 < 0):
        idx = np.unravel_index(int(np.argmin(z0)), z0.shape)
        where = ", ".join(str(int(j)) for j in idx)
        raise ValueError(f"`z0` must be >= 0 (z_k = (P^T M P)_kk); found z0[{where}] = {z0[idx]:.3g}.")
    return z0


def _initial_state(data: AbstractData, M0, W0, form: str, z0=None):
    """Check the initial condition of the M, factor or GLV form at the boundary (host, numpy)
    and resolve ``form="auto"``. Returns (form, kind, init, is_factor): kind "M", "W" or "z" and
    init the checked float64 array of that kind (the state itself is built by `_initial_y0`)."""
    p = data.p
    if sum(x is not None for x in (M0, W0, z0)) != 1:
        raise ValueError(
            "Give exactly one initial condition: `M0` (p, p), `W0` (p, d) or, for commuting data, "
            "`z0` (p,)."
        )
    if z0 is not None:
        if not isinstance(data, AbstractCommutingData):
            raise ValueError(
                "`z0` (mode strengths) needs commuting data (`CommutingData` or `DiagonalData`); "
                f"found {type(data).__name__}. Give `M0` or `W0`."
            )
        if form not in ("auto", "glv"):
            raise ValueError(f"`z0` is the initial state of the GLV form; found form={form!r}.")
        z0 = as_array(z0, "z0", shape=(p,), host=True)
        if not is_traced(z0):
            _check_mode_strengths(z0)
        return "glv", "z", z0, False
    if M0 is not None:
        M0 = as_array(M0, "M0", ndim=2, host=True)
        if M0.shape != (p, p):
            raise ValueError(f"`M0` must have shape ({p}, {p}) to match the data; found {shape_str(M0.shape)}.")
        check_symmetric(M0, "M0")
        check_psd(M0, "M0")
        init, is_factor = M0, False
    else:
        W0 = as_weights(W0, p, host=True)
        init, is_factor = W0, True
    if form == "auto":
        if isinstance(data, AbstractCommutingData):
            form = "glv"
        elif is_factor or isinstance(data, (LowRankData, FeedForwardData)):
            form = "factor"
        else:
            form = "M"
    check_form(form, data)
    return form, "W" if is_factor else "M", init, is_factor


def _host_mask(data: AbstractCommutingData, kind: str, init) -> np.ndarray:
    """Live modes z_k(0) > 0 of the GLV form, on the host (the structured Newton solve of
    `nqf.stiff` builds its basis from them)."""
    if kind == "z":
        return np.asarray(init) > 0
    x = jnp.asarray(init)
    return np.asarray(data.z_factor(x) if kind == "W" else data.z(x)) > 0


def _initial_state_mu(data: AbstractData, M0, W0, mu0, d):
    """Initial (M, mu) and width d of the "M-mu" form: from W0 (mu0 = W0 1, d = W0.shape[1]) or
    from M0 with explicit mu0 and d."""
    p = data.p
    if (M0 is None) == (W0 is None):
        raise ValueError("Give exactly one initial condition: `M0` (p, p) with `mu0` and `d`, or `W0` (p, d).")
    if W0 is not None:
        if mu0 is not None or d is not None:
            raise ValueError(
                "`mu0` and `d` are derived from `W0` (mu0 = W0 1, d = W0.shape[1]); give them only "
                "with `M0`."
            )
        W0 = as_weights(W0, p)
        return (W0 @ W0.T, W0.sum(axis=1)), W0, True, W0.shape[1]
    if mu0 is None or d is None:
        raise ValueError(
            "The 'M-mu' form (Eq. E10; 'auto' for a model with g or B) needs `mu0` (p,) and the width `d` "
            "together with `M0`, or a factor `W0` (p, d) from which both are derived; found "
            f"mu0={'given' if mu0 is not None else 'None'}, d={d!r}."
        )
    M0 = as_array(M0, "M0", ndim=2)
    if M0.shape != (p, p):
        raise ValueError(f"`M0` must have shape ({p}, {p}) to match the data; found {shape_str(M0.shape)}.")
    check_symmetric(M0, "M0")
    check_psd(M0, "M0")
    mu0 = as_array(mu0, "mu0", shape=(p,))
    d = check_width(d)
    # Realizability by some W (p, d): M0 - mu0 mu0^T / d = W (I - 1 1^T / d) W^T is PSD.
    if not is_traced((M0, mu0)):
        check_psd(np.asarray(M0) - np.outer(mu0, mu0) / d, "M0 - mu0 mu0^T / d")
    return (M0, mu0), M0, False, d


def _time_grid(t0, t1, ts):
    """Checked (t0, t1, ts) of a solve; ts defaults to 201 equally spaced times. Traced values
    (inside jit, vmap, grad) are shape-checked only."""
    if _is_traced((t0, t1, ts)):
        t0 = as_array(t0, "t0", ndim=0, host=True)
        t1 = as_array(t1, "t1", ndim=0, host=True)
        ts = jnp.linspace(t0, t1, 201) if ts is None else as_array(ts, "ts", ndim=1, host=True)
        return t0, t1, ts
    t0 = float(as_array(t0, "t0", ndim=0, host=True))
    t1 = float(as_array(t1, "t1", ndim=0, host=True))
    if not t1 > t0:
        raise ValueError(f"`t1` must be greater than `t0` = {t0}; found t1 = {t1}.")
    if ts is None:
        return t0, t1, np.linspace(t0, t1, 201)
    ts = as_array(ts, "ts", ndim=1, host=True)
    if ts.size == 0:
        raise ValueError("`ts` must be a non-empty array of save times; found an empty array.")
    if np.any(np.diff(ts) < 0):
        i = int(np.argmax(np.diff(ts) < 0))
        raise ValueError(f"`ts` must be non-decreasing; found ts[{i}] = {ts[i]} > ts[{i + 1}] = {ts[i + 1]}.")
    if ts[0] < t0 or ts[-1] > t1:
        raise ValueError(f"`ts` must lie inside [t0, t1] = [{t0}, {t1}]; found range [{ts.min()}, {ts.max()}].")
    return t0, t1, ts


def _solve_exact(data, model, form, kind, x0, init, is_factor, init_is_z, solver, stiff, t0, t1, ts,
                 weight_decay, save, settings=(), memory_budget=None) -> FlowSolution:
    """``solve_flow(..., method="exact")``: Theorem 6's closed form at the saved times."""
    from ..dynamics._glv import orthogonal_features_residual
    from .exact import _exact_jit, _ExactConfig

    if form != "glv":
        raise ValueError(
            "method='exact' evaluates Theorem 6 (Eq. E16), which needs commuting data with "
            f"orthogonal features in the GLV form; found {type(data).__name__} with form={form!r}."
        )
    if solver is not None or stiff:
        raise ValueError(
            "`solver` and `stiff` choose an ODE solver; method='exact' evaluates Theorem 6's "
            "closed form (drop them, or use method='ode')."
        )
    tol = 1e-10
    res, (k, j) = (0.0, (0, 0)) if _is_traced(data) else orthogonal_features_residual(data)  # traced: unchecked
    if res > tol:
        raise AssumptionError(
            "Theorem 6", _THM6_COND, res, tol, where=f"(k, j) = ({k}, {j})",
            detail="method='exact' needs it; use method='ode' (the default) for these data.",
        )
    t0, t1, ts = _time_grid(t0, t1, ts)
    gamma = check_positive(weight_decay, "weight_decay", allow_zero=True)
    _check_solve_memory(form, x0, data, len(ts), save, None, False, False, 0, memory_budget)
    dyn, excess = _with_saved_losses(_FlowArgs(data, x0, _params(t0, t1, 0.0, gamma), ts), save, form,
                                     data, model)
    out = _exact_jit(_ExactConfig(kind, save, excess), dyn)
    traced = _is_traced(out)
    if not traced and not np.asarray(out["info"])[4]:
        raise FloatingPointError("Theorem 6's closed form produced non-finite values; check the data's scale.")
    return FlowSolution(
        ts=ts, form=form, ys=_host(out["ys"]), data=data, init=init, init_is_factor=is_factor,
        _info=out["info"], _y0=out["y0"], _dfx=out["dense"], _mask=out["mask"], model=model,
        init_is_z=init_is_z, saved=save, method="exact", settings=settings,
    )


def _solve_reduced_host(method, data, model, form, kind, x0, init, is_factor, init_is_z, t0, t1, ts, rtol,
                        atol, weight_decay, save, max_steps, settings=(), memory_budget=None) -> FlowSolution:
    """``solve_flow(..., solver="lsoda" | "cvode")``: the reduced GLV flow on the host (`nqf.solvers._lsoda`)."""
    from ._lsoda import saved_outputs, solve_reduced

    if form != "glv" or type(data) is not CommutingData or not data.m < data.p:
        raise ValueError(
            f"solver={method!r} integrates the GLV flow of CommutingData with m < p in m coordinates "
            f"(`nqf.dynamics.rhs_glv_reduced`); found {type(data).__name__} (m = {data.m}, p = {data.p}) with form={form!r}. "
            "Use stiff=True (Rodas5P) otherwise."
        )
    if _is_traced((data, model, x0, t0, t1, ts, rtol, atol, weight_decay)):
        raise TypeError(
            f"solver={method!r} runs in numpy on the host and is not traceable (jit / vmap / grad); "
            "use stiff=True (Rodas5P, the same m-coordinate flow in JAX) inside transformations."
        )
    rtol = check_positive(rtol, "rtol")
    if rtol >= 1.0:
        raise ValueError(f"`rtol` must be < 1 (a relative tolerance); found {rtol!r}.")
    atol = None if atol is None else check_positive(atol, "atol")
    if not isinstance(max_steps, (int, np.integer)) or max_steps <= 0:
        raise ValueError(f"`max_steps` must be a positive integer; found {max_steps!r}.")
    t0, t1, ts = _time_grid(t0, t1, ts)
    gamma = check_positive(weight_decay, "weight_decay", allow_zero=True)
    if save not in ("state", "loss"):
        raise ValueError(f"`save` must be 'state' or 'loss'; found {save!r}.")
    _check_solve_memory(form, x0, data, len(ts), save, None, False, False, 0, memory_budget)
    u0, mask = (np.asarray(v) for v in jax.jit(_initial_y0, static_argnums=(0, 1))("glv", kind, data, x0))
    G, prob, interp, stats = solve_reduced(data, u0, mask, method=method, t0=t0, t1=t1, ts=ts, rtol=rtol,
                                           atol=atol, gamma=gamma, max_steps=max_steps)
    z_star, grad = _excess_loss_anchor(form, data, model) if save == "loss" else (None, None)
    ys = saved_outputs(prob, data, ts, G, save, z_star, grad)
    info = np.array([_SUCCESS_CODE, stats["num_steps"], stats["num_accepted_steps"], 0, 1])
    return FlowSolution(
        ts=ts, form=form, ys=ys, data=data, init=init, init_is_factor=is_factor, _info=info,
        max_steps=int(max_steps), _y0=u0, _dfx=interp, _mask=mask, model=model, init_is_z=init_is_z,
        saved=save, _extra_stats=(("nfev", stats["nfev"]), ("njev", stats["njev"])), settings=settings,
    )


def solve_flow(
    data: AbstractData | NQFModel,
    *,
    M0=None,
    W0=None,
    z0=None,
    mu0=None,
    d: int | None = None,
    t1,
    t0: float = 0.0,
    ts=None,
    form: str = "auto",
    solver=None,
    stiff: bool = False,
    rtol: float = 1e-10,
    atol: float | None = None,
    pcoeff: float | None = None,
    icoeff: float | None = None,
    dt0: float | None = None,
    max_steps: int = 100_000,
    weight_decay: float = 0.0,
    dense: bool | None = None,
    save: str = "state",
    progress: bool = False,
    method: str = "ode",
    adjoint: str = "auto",
    stop: Stop | None = None,
    memory_budget: float | None = None,
) -> FlowSolution:
    """Integrate the MSE gradient flow M' = Y M + M Y - K(M) M - M K(M) (Eq. E9), or for a
    general model the (M, mu) flow of Eq. E10.

    Time is gradient-flow time t = eta * (GD steps); the loss is L = (1/m) sum_x (f_x - y_x)^2.
    Weight decay gamma (penalty gamma/2 |W|^2) adds -2 gamma M (H -> H + gamma I, THEORY sec. 4;
    in Eq. E10 also mu' gets -gamma mu).

    With an `NQFModel` f = f0 + g^T mu + mu^T B mu + Tr[M A] that has g or B, the state is
    (M, mu) and (Eq. E10, l'_x = (2/m)(f_x - y_x))

        mu' = -(d v + H mu),  M' = -(v mu^T + mu v^T + H M + M H),
        v = sum_x l'_x u(x),  u(x) = g(x) + 2 B(x) mu,  H = sum_x 2 l'_x A(x) + gamma I.

    Cost per right-hand side: the data's `traces` and one `apply` to p + 1 columns (use a
    structured data class: `DenseData` reads all m p^2 entries twice), plus the g and B terms. A g
    of rank r <= 8 (e.g. the constant g = phi(0) [0; 1] of a bias-free MLP with phi(0) != 0) is
    factored on the host once per call (`nqf.dynamics._flow.factor_linear_term`, exact to
    rounding, only when concrete), so its terms cost O((m + p) r) instead of two passes over the
    (m, p) array; models whose g differ in rank compile separately. Explicit solvers on this flow
    are limited by stability, not accuracy, once d |g|^2 is large: the linear term's NTK
    eigenvalue (2 d / m) * eig(G^T G) (Eq. E25; d/2 for the sigmoid MLP) sets the step size, so
    the step count grows in proportion to d (benchmarks/bench_flow_general.py).

    **Arguments:**

    - `data`: an NQF data set (`DenseData`, `CommutingData`, `LowRankData`) or an `NQFModel`. A
      model without g, B is solved exactly as its data set (with labels y - f0 if it has f0).
    - `M0` (p, p) symmetric PSD, or `W0` (p, d) with M0 = W0 W0^T, or (commuting data, GLV form)
      `z0` (p,) >= 0, i.e. M0 = P diag(z0) P^T: the initial condition (exactly one). Small
      initialization W0 = sqrt(eps) I is M0 = eps I (z0 = eps). `z0` never forms a p x p matrix,
      so the GLV form runs at any p (e.g. `DiagonalData` with p = 10^6).
    - `mu0` (p,) and `d` (integer >= 1, the width): with `M0`, the rest of the initial state of
      the ``"M-mu"`` form (required there; derived from `W0` as mu0 = W0 1, d = W0.shape[1]).
      M0 - mu0 mu0^T / d must be PSD (necessary for some W (p, d) to realize them).
    - `t1`, `t0`: time interval; `ts`: times to save (default 201 equally spaced times).
    - `form`: ``"M"``, ``"factor"``, ``"glv"`` (commuting data), ``"M-mu"`` (Eq. E10; any data
      or model) or ``"auto"`` (``"M-mu"`` for a model with g or B; otherwise GLV for commuting
      data, the factor form for low-rank data or a W0, else M).
    - `solver`: a diffrax solver or one of ``"tsit5"`` (default), ``"dopri5"``, ``"dopri8"``,
      ``"rodas5p"`` (`nqf.rosenbrock.Rodas5P`, the default when `stiff=True`), ``"kvaerno3"``,
      ``"kvaerno5"``. Stiff solvers given by name solve the GLV form's linear systems with its
      structure (`nqf.stiff`: diagonal for `DiagonalData`, identity + rank m (Woodbury) for
      `CommutingData` with m < p/2), never a dense p x p Jacobian; a solver instance is used as
      given. Rodas5P needs one Jacobian and 8 right-hand sides per step where Kvaerno5's Newton
      iterations take 60-100 (docs/performance.md). For `CommutingData` with 2 m < p the
      stiff default integrates the GLV flow in m coordinates (`nqf.dynamics.rhs_glv_reduced`).
      ``"lsoda"`` runs that reduced flow with scipy's LSODA on the host instead (docs/large-p.md;
      CommutingData with m < p; not traceable, CPU): it reuses the m x m Jacobian over many
      steps, the fastest path for coupled data at very large p; ``"cvode"`` does the same with
      SUNDIALS CVODE (BDF, dense m x m solve; ``pip install 'nqf[sundials]'``), which takes about
      half LSODA's right-hand sides.
    - `rtol`, `atol`: tolerances of the PID controller. The default `atol` is
      ``rtol * max|state(0)|`` (``rtol`` for the log-space GLV form; max over M and mu for
      ``"M-mu"``), so accuracy is relative to the initial scale while z ~ eps, for eps down to
      1e-12.
    - `pcoeff`, `icoeff`: PID coefficients (default 0, 1 for explicit; 0.3, 0.4 for stiff).
    - `max_steps`: solver step budget; `weight_decay`: gamma >= 0.
    - `dense`: diffrax's dense interpolant (needed by `evaluate`, `z_at`, `M_at` and ignition
      times). diffrax reserves it for all `max_steps` steps up front, which costs memory and time,
      so by default (None) the solve runs without it and the first use of dense output repeats
      the same solve (same steps) with room for just the steps taken (one extra compile). True
      keeps it from the start; False never builds it.
    - `save`: ``"state"`` (default) saves the state at `ts`; ``"loss"`` saves only the loss and,
      for commuting data without g, B, f0, the excess loss (n,) each, computed inside the solve:
      O(n) memory instead of O(n p) (use it at p = 10^6). `M`, `W`, `z` then raise; dense output
      still works.
    - `progress`: show diffrax's text progress meter.
    - `stop`: an `nqf.Stop` condition (`Stop.loss_below(value)`, `Stop.ignition(k, rho)`,
      `Stop.when(fn)`; `nqf.Stop`): the solve ends when it first holds, located by a root find
      (differentiable); the solution records `stop_time` and `stop_reason`.
    - `adjoint`: how derivatives flow through the solve when it runs inside a JAX
      transformation: ``"auto"`` (default: ``"forward"`` for a concrete call, ``"reverse"``
      under tracing), ``"forward"`` (`diffrax.ForwardMode`: jvp / `jax.jacfwd`, plain while
      loops) or ``"reverse"`` (`diffrax.RecursiveCheckpointAdjoint`: `jax.grad` / vjp, with
      binomial checkpointing: memory O(state x log(max_steps)) and about twice the forward
      work). The host solvers (``"lsoda"``, ``"cvode"``) are not differentiable and refuse it.
    - `memory_budget`: bytes this call may allocate (default: ``NQF_MEMORY_BUDGET`` or half the
      available memory; `nqf.memory`). The saved states, the solver's stage vectors, a stiff
      solver's dense matrices and a dense output reserved for `max_steps` steps are estimated
      before anything is allocated, and `nqf.memory.MemoryBudgetError` names the size, the
      budget and the ways out.
    - `method`: ``"ode"`` (default) integrates the flow; ``"exact"`` evaluates Theorem 6's
      closed form (Eq. E16, `nqf.exact`) for commuting data with orthogonal features (every
      `DiagonalData`): O(p) per saved time, no steps, exact dense output, same `FlowSolution`
      (GLV form). The assumption is checked structurally; `solver`, `stiff`, tolerances and
      `max_steps` do not apply.

    **Returns:** a `FlowSolution`.

    **Raises:** `TypeError` if `data` is neither a data set nor an `NQFModel`; `ValueError` for
    inconsistent shapes, non-finite or non-PSD initial conditions, a model with g or B solved in
    a form other than ``"M-mu"``, ``"M-mu"`` from `M0` without `mu0` and `d` (or `mu0`/`d`
    with `W0` or with another form), `d` not an integer >= 1, non-positive tolerances, bad `ts`;
    `MaxStepsReached` if `max_steps` is used up before `t1`; `nqf.AssumptionError` (with the
    residual) for ``method="exact"`` on data whose features are not orthogonal.
    """
    settings = _settings(form, solver, stiff, t0, t1, rtol, atol, pcoeff, icoeff, dt0, max_steps,
                         weight_decay, save, method, adjoint, stop)
    model = data if isinstance(data, NQFModel) else None
    if model is not None:
        data = model.data
    elif not isinstance(data, AbstractData):
        raise TypeError(
            "`data` must be an nqf data set (e.g. `DenseData`) or an `NQFModel`; found "
            f"{type(data).__name__}."
        )
    if form != "auto":
        check_form(form, data)
    elif model is not None and model.has_mean_field:
        form = "M-mu"
    width = None
    if form == "M-mu":
        if z0 is not None:
            raise ValueError("`z0` is the initial state of the GLV form; form='M-mu' needs `M0` or `W0`.")
        x0, init, is_factor, width = _initial_state_mu(data, M0, W0, mu0, d)
        kind = "M-mu"
    else:
        if model is not None and model.has_mean_field:
            raise ValueError(
                f"`form={form!r}` tracks M only and ignores the model's g and B; use form='M-mu' "
                "(or 'auto') for a model with g or B (Eq. E10)."
            )
        if mu0 is not None or d is not None:
            raise ValueError(
                "`mu0` and `d` are used only by form='M-mu' (Eq. E10); pass form='M-mu' to track "
                f"mu, or drop them (form={form!r})."
            )
        if model is not None and model.f0 is not None:  # f0 shifts the labels: same flow
            data = eqx.tree_at(lambda x: x.y, data, data.y - model.f0)
        form, kind, x0, is_factor = _initial_state(data, M0, W0, form, z0)
        init = x0
    if method == "exact":
        return _solve_exact(data, model, form, kind, x0, init, is_factor, z0 is not None, solver, stiff,
                            t0, t1, ts, weight_decay, save, settings, memory_budget)
    if method != "ode":
        raise ValueError(f"`method` must be 'ode' or 'exact'; found {method!r}.")
    if stop is not None and (method != "ode" or (isinstance(solver, str) and solver.lower() in ("lsoda", "cvode"))):
        raise ValueError("`stop` needs method='ode' with a diffrax solver (not method='exact' or a host solver).")
    if isinstance(solver, str) and solver.lower() in ("lsoda", "cvode"):
        if adjoint != "auto":  # it was silently ignored
            raise ValueError(
                f"`adjoint` sets how derivatives flow through a diffrax solve; solver={solver.lower()!r} runs "
                f"on the host and is not differentiable (found adjoint={adjoint!r}). Use a diffrax solver "
                "(e.g. stiff=True) to differentiate, or drop `adjoint`."
            )
        return _solve_reduced_host(solver.lower(), data, model, form, kind, x0, init, is_factor, z0 is not None,
                                   t0, t1, ts, rtol, atol, weight_decay, save, max_steps, settings, memory_budget)
    traced = _is_traced((data, model, x0, t0, t1, ts, rtol, atol, dt0, weight_decay))
    reduced = form == "glv" and _reduced_stiff(data, solver, stiff)
    host_mask = None
    if form == "glv" and not reduced and _is_implicit_name(solver, stiff) and type(data) is CommutingData \
            and 2 * data.m < data.p:  # the Woodbury basis of the Newton solve needs the live modes
        if traced:
            raise ValueError(
                "Under jit / vmap / grad the stiff GLV solve of CommutingData with 2 m < p runs in m "
                "coordinates: use stiff=True or solver='rodas5p' (the Kvaerno Woodbury solve needs "
                "the live modes on the host)."
            )
        host_mask = _host_mask(data, kind, x0)
    solver = _default_instance(Rodas5P) if reduced else _make_solver(solver, stiff, data, form, host_mask)
    rtol = check_positive(rtol, "rtol")
    t0, t1, ts = _time_grid(t0, t1, ts)
    gamma = check_positive(weight_decay, "weight_decay", allow_zero=True)
    if not isinstance(max_steps, (int, np.integer)) or max_steps <= 0:
        raise ValueError(f"`max_steps` must be a positive integer; found {max_steps!r}.")
    if atol is not None:
        atol = check_positive(atol, "atol")
    if dt0 is not None:
        dt0 = check_positive(dt0, "dt0")  # the first step, forward in time
    if not traced and rtol >= 1.0:
        raise ValueError(f"`rtol` must be < 1 (a relative tolerance); found {rtol!r}.")
    for name, v in (("pcoeff", pcoeff), ("icoeff", icoeff)):
        if v is not None and not traced and not (np.isfinite(float(v)) and float(v) >= 0):
            raise ValueError(f"`{name}` (a PID coefficient) must be finite and >= 0; found {v!r}.")
    implicit = is_stiff(solver)
    pcoeff = (0.3 if implicit else 0.0) if pcoeff is None else pcoeff
    icoeff = (0.4 if implicit else 1.0) if icoeff is None else icoeff
    f64 = (lambda x: x) if traced else np.float64
    solver_dyn, solver_static = _partition_solver(solver)
    # the "M-mu" form of a model whose g has low rank runs on its factors (exact to rounding)
    flow_data = data if model is None or form != "M-mu" else factor_linear_term(model)
    dyn = _FlowArgs(flow_data, x0, _params(t0, t1, rtol, gamma), ts,
                    None if dt0 is None else f64(dt0), None if atol is None else f64(atol),
                    None if width is None else f64(width), solver_dyn)
    _check_solve_memory(form, x0, data, len(ts), save, solver, reduced, dense is True, max_steps, memory_budget)
    dyn, excess = _with_saved_losses(dyn, save, form, data, model)
    if stop is not None:
        stop, target = _stop_target(stop, form, data, model)
        dyn = dyn._replace(stop_target=target)
    if adjoint not in ("auto", "forward", "reverse"):
        raise ValueError(f"`adjoint` must be 'auto', 'forward' or 'reverse'; found {adjoint!r}.")
    if adjoint == "auto":
        adjoint = "reverse" if traced else "forward"
    cfg = _FlowConfig(form, kind, solver_static, int(max_steps), dense is True, save, bool(progress), excess,
                      float(pcoeff), float(icoeff), reduced, (not traced) and gamma == 0.0, adjoint, stop)
    out = _solve_jit(cfg, dyn)
    if traced:  # inside jit / vmap / grad: no host checks; failures raise through eqx.error_if
        ok = (out["info"][0] == _SUCCESS_CODE) & (out["info"][4] != 0)
        ys = eqx.error_if(out["ys"], ~ok, "solve_flow: the solver did not reach t1 with finite values "
                          "(max_steps reached, or the flow blew up); check `successful` and `result`.")
        return FlowSolution(
            ts=ts, form=form, ys=ys, data=data, init=init, init_is_factor=is_factor, _info=out["info"],
            max_steps=int(max_steps), _y0=out["y0"], _dfx=out["dense"], _mask=out["mask"], model=model,
            d=width, init_is_z=z0 is not None, saved=save, stop_time=out["stop_time"],
            _stop_name=None if stop is None else stop.name, settings=settings,
        )
    info = np.asarray(out["info"])  # one small transfer; y0 and mask stay on the device
    if info[0] == _MAX_STEPS_CODE:
        t_end = float(out["t_end"])
        keep = ts <= t_end
        partial = FlowSolution(
            ts=ts[keep], form=form, ys=jax.tree.map(lambda x: np.asarray(x)[keep], out["ys"]), data=data,
            init=init, init_is_factor=is_factor, _info=info, max_steps=int(max_steps), _y0=out["y0"],
            _mask=out["mask"], model=model, d=width, init_is_z=z0 is not None, saved=save, settings=settings,
        )
        raise MaxStepsReached(
            f"The solver used all max_steps={max_steps} steps before reaching t1={t1:g}: it got to "
            f"t={t_end:.6g} ({int(keep.sum())} of {ts.size} saved times; the partial solution is "
            "`err.solution`, the time `err.t_reached`). Increase `max_steps` or loosen `rtol`/`atol`"
            + ("." if implicit else
               ", or, if the problem is stiff (rates spanning many decades), pass `stiff=True`."),
            t_end, partial,
        )
    if info[0] != _SUCCESS_CODE:
        raise RuntimeError(f"The flow solve failed: {_RESULT_STR.get(int(info[0]), info[0])}")
    if not info[4]:
        raise FloatingPointError(
            "The flow produced non-finite values (the solution blew up); check the sign of the "
            "labels and the scale of the data, or reduce t1."
        )
    ys = np.asarray(out["ys"]) if isinstance(out["ys"], jax.Array) else jax.tree.map(np.asarray, out["ys"])
    stop_time = None
    if stop is not None:  # keep the saved times reached before the stop
        stop_time = float(out["stop_time"])
        keep = ts <= stop_time
        ts, ys = ts[keep], jax.tree.map(lambda x: x[keep], ys)
    redo = None
    if dense is None:  # same solve, dense, with room for the steps actually taken
        room = 1 << int(info[1] + 1).bit_length()
        redo = functools.partial(_redo_dense, cfg._replace(max_steps=room, dense=True, progress=False), dyn)
    return FlowSolution(
        ts=ts, form=form, ys=ys, data=data, init=init, init_is_factor=is_factor, _info=info,
        max_steps=int(max_steps), _y0=out["y0"], _dfx=out["dense"], _redo=redo, _mask=out["mask"],
        model=model, d=width, init_is_z=z0 is not None, saved=save, stop_time=stop_time,
        _stop_name=None if stop is None else stop.name, settings=settings,
    )
