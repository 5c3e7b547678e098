"""The compiled core of a flow solve: one pure function of arrays (`_solve_core`, traceable:
jit, vmap, grad) that `solve_flow` calls, its static configuration (`_FlowConfig`) and dynamic
arguments (`_FlowArgs`) and the diffrax solvers by name; `solve_sweep` vmaps the same core. The form's behaviour (vector field, initial state, reduced GLV coordinates) comes
from its form object (`nqf.solvers._forms`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._core._checks import any_traced, check_positive
from ..data._operators import AbstractCommutingData, AbstractData, CommutingData
from ..dynamics._flow import _saved_losses, is_model, reduced_log_z
from ..dynamics._glv import glv_equilibrium
from ._defaults import _DEFAULT_SOLVERS, _default_instance, _partition_solver  # noqa: F401  (their old home)
from ._events import Stop, condition, met_at_start
from ._events import direction as event_direction
from ._forms import FORMS, ReducedGLVForm
from ._initial import _state_size
from ._solution import _SUCCESS_CODE, _host
from .rosenbrock import Rodas5P
from .stiff import glv_linear_solver, glv_root_finder, is_stiff

SOLVERS = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "kvaerno3": diffrax.Kvaerno3,
    "kvaerno5": diffrax.Kvaerno5,
    "rodas5p": Rodas5P,
}


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


# Counts traces of the compiled integrator; tests use it to assert that new values of the same
# shapes do not recompile.
TRACE_COUNT = [0]


class _FlowArgs(NamedTuple):
    """The dynamic half of a flow solve: arrays (and pytrees of arrays), None where unused."""

    data: Any  # a data set, an NQFModel, or its FactoredG form ("M-mu" with a low-rank g)
    init: Any  # the initial condition of kind `_FlowConfig.init`
    params: Any  # [t0, t1, rtol, gamma]: one array, one transfer
    ts: Any
    dt0: Any = None
    atol: Any = None  # None: the default rtol * max|state(0)| (rtol for the log-space GLV state)
    width: Any = None  # the "M-mu" form's d (a joint sweep: the members' scales, `JointForm`)
    solver: Any = None  # the solver's arrays (eqx.partition)
    z_star: Any = None  # save="loss" with the excess loss: the equilibrium and the gradient there
    grad: Any = None
    stop_target: Any = None  # the threshold of `_FlowConfig.stop` (loss value, or rho z_k(inf))


class _FlowConfig(NamedTuple):
    """The static (hashable) half of a flow solve: everything that decides the compiled program.
    The dynamic half is a dict of arrays (see `_solve_core`)."""

    form: Any  # "M", "factor", "glv" or "M-mu" (or a form object: a joint sweep's `JointForm`)
    init: str  # what `dyn.init` holds: "W" (p, d), "M" (p, p), "z" (p,), "M-mu" (M, mu) or "state" (y0, mask)
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
    constant: bool = False  # diffrax.ConstantStepSize (steps of dt0) instead of the PID controller


def _solve_core(cfg: _FlowConfig, dyn: _FlowArgs):
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
    rhs, state0, args, solver, controller, saver, event, y0, mask = _setup(cfg, dyn)
    fn = {} if saver is None else {"fn": saver}
    # the saved times, and where the solve ended (an event, max_steps, or t1)
    saveat = diffrax.SaveAt(
        subs=[diffrax.SubSaveAt(ts=dyn.ts, **fn), diffrax.SubSaveAt(t1=True, fn=_time_only)], dense=cfg.dense
    )
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        solver,
        dyn.params[0],
        dyn.params[1],
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
    if event is not None:
        sol = _saved_at_start(sol, dyn, saver, state0, args)
    return _outputs(cfg, dyn, sol, args, y0, mask)


def _saved_at_start(sol, dyn, saver, state0, args):
    """`sol` with the saved times ts <= t0 filled with the initial state when a stop condition
    already held at t0: diffrax then ends the solve before its first step and saves nothing.
    `dyn`: the `_FlowArgs` of the solve (its `ts` and t0 = params[0])."""
    ts, t0 = dyn.ts, dyn.params[0]
    first = state0 if saver is None else saver(t0, state0, args)
    at_start = (sol.ts[1][0] <= t0) & (ts <= t0)

    def fill(y, y_first):
        return jnp.where(at_start.reshape((-1,) + (1,) * (y.ndim - 1)), jnp.expand_dims(y_first, 0), y)

    return eqx.tree_at(lambda s: s.ys[0], sol, jax.tree.map(fill, sol.ys[0], first))


def _setup(cfg: _FlowConfig, dyn: _FlowArgs) -> tuple:
    """(vector field, state0, args, solver, controller, saver, event, y0, mask) of `_solve_core`:
    the form object's initial state and vector field (the reduced GLV form's m coordinates when
    `cfg.reduced`), the default atol, the saved-loss function and the stop event."""
    form = FORMS[cfg.form] if isinstance(cfg.form, str) else cfg.form  # a name, or a form object (a sweep's)
    data = dyn.data
    plain = data.data if is_model(data) else data
    y0, mask = form.initial(cfg.init, plain, dyn.init)
    t0, _, rtol, gamma = dyn.params
    atol = form.default_atol(rtol, y0) if dyn.atol is None else dyn.atol
    args = form.args(data, gamma, dyn.width, mask)
    saver = None
    if cfg.save == "loss":
        saver = functools.partial(_saved_losses, form=cfg.form, z_star=dyn.z_star, grad=dyn.grad)
    rhs, state0, solver = form.vector_field, y0, eqx.combine(dyn.solver, cfg.solver)
    if cfg.reduced:  # the GLV flow in m coordinates (`nqf.dynamics.rhs_glv_reduced`)
        form = ReducedGLVForm()
        rhs, state0, args, atol, solver, saver = form.integrand(plain, gamma, mask, y0, t0, atol, saver, cfg.autonomous)
    if cfg.constant:
        controller = diffrax.ConstantStepSize()
    else:
        controller = diffrax.PIDController(
            rtol=rtol, atol=atol, pcoeff=cfg.pcoeff, icoeff=cfg.icoeff, **form.controller_options()
        )
    event = None
    if cfg.stop is not None:  # terminate at the event; its time by a Newton root find (differentiable)
        cond = condition(cfg.stop, cfg.form, dyn.stop_target)
        if cfg.reduced:
            cond = form.condition(cond)
        up = event_direction(cfg.stop)
        event = diffrax.Event(  # the crossing, and the condition already met at t0 (then stop at t0)
            (cond, met_at_start(cond, up, t0)),
            root_finder=optx.Newton(rtol=1e-12, atol=1e-12),
            direction=(up, None),
        )
    return rhs, state0, args, solver, controller, saver, event, y0, mask


def _outputs(cfg: _FlowConfig, dyn: _FlowArgs, sol, args, y0, mask) -> dict:
    """The dict `_solve_core` returns, from diffrax's solution `sol`."""
    ys, stop_time = sol.ys[0], None
    t_end = sol.ts[1][0]  # the time the solve reached
    reached = dyn.ts <= t_end
    if cfg.stop is not None:
        stopped = jnp.any(jnp.asarray(jax.tree.leaves(sol.event_mask)))
        stop_time = jnp.where(stopped, t_end, jnp.inf)
    finite = jnp.all(
        jnp.stack(
            [jnp.all(jnp.isfinite(x) | ~reached.reshape((-1,) + (1,) * (x.ndim - 1))) for x in jax.tree.leaves(ys)]
        )
    )
    code = jnp.where(sol.result == diffrax.RESULTS.event_occurred, _SUCCESS_CODE, sol.result._value)
    info = jnp.stack(
        [code, sol.stats["num_steps"], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"], finite]
    ).astype(jnp.int64)
    dense = None
    if cfg.dense:
        dense = ReducedInterpolation(sol, args) if cfg.reduced else sol
    return {
        "ts": dyn.ts,
        "ys": ys,
        "y0": y0,
        "mask": mask,
        "info": info,
        "dense": dense,
        "stop_time": stop_time,
        "t_end": t_end,
    }


def _time_only(t, y, args):
    """SaveAt function of the end point: only its time is needed (`sol.ts`), not a state copy."""
    return jnp.zeros(())


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
# the same core with every array of `cfg` traced too (a sweep's PID coefficients as arrays)
_solve_filter_jit = eqx.filter_jit(_solve_core)


def _excess_loss_anchor(form: str, data: AbstractData, model):
    """(z_star, grad) for the saved excess loss: the GLV equilibrium z(inf) and the loss gradient
    there, for commuting data without g, B, f0 (else (None, None))."""
    general = model is not None and (model.has_mean_field or model.f0 is not None) and form == "M-mu"
    if not isinstance(data, AbstractCommutingData) or general or form == "M-mu":
        return None, None
    z_star = glv_equilibrium(data)
    grad = 2.0 / data.m * data.pullback(data.outputs_z(z_star) - data.y)
    return _host(z_star), _host(grad)


def _params(t0, t1, rtol, gamma):
    """[t0, t1, rtol, gamma] as one array (numpy for concrete values: one transfer)."""
    if any_traced((t0, t1, rtol, gamma)):
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


def _stop_target(stop: Stop, form: str, data: AbstractData, model, gamma=0.0):
    """Check a `stop` condition against the problem; return (its static part, its threshold)."""
    if not isinstance(stop, Stop):
        raise TypeError(
            "`stop` must be an `nqf.Stop` (Stop.loss_below(value), Stop.ignition(k), Stop.when(fn)); "
            f"found {type(stop).__name__}."
        )
    static = eqx.tree_at(lambda s: s.value, stop, None, is_leaf=lambda x: x is None)
    if stop.kind == "loss_below":
        if not any_traced(stop.value):
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
        if any_traced(gamma) or float(gamma) > 0.0:  # weight decay moves the equilibrium
            from ._solution import _decayed_equilibrium

            z_inf = None
            if isinstance(data, AbstractCommutingData) and not (any_traced(gamma) or any_traced(data)):
                z_inf = _decayed_equilibrium(data, float(gamma))
            if z_inf is None:
                raise ValueError(
                    "Stop.ignition with weight decay needs concrete orthogonal features (DiagonalData, or "
                    "CommutingData with a diagonal Lambda^T Lambda) and a concrete `weight_decay`: the equilibrium "
                    "max((r_k - 2 gamma) / C_kk, 0) is not known otherwise. Use Stop.when(fn)."
                )
        if not any_traced(z_inf) and not z_inf[stop.k] > 0:
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
    check(
        9.0 * n * cfg.max_steps * 8,
        f"The dense output of this solution ({cfg.max_steps} steps of a state of {n} values)",
        "evaluate at fewer times through a solve with `ts` instead, or use a structured form with a smaller state.",
    )
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
