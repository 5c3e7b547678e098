"""Solve the closed MSE gradient flow (THEORY Eqs. E8, E9, E10, E13) with diffrax.

`solve_flow` is the one front end: it picks the exact form of the flow that suits the data (a form
object, `nqf.solvers._forms`), integrates it with an adaptive explicit or stiff diffrax solver under
PID step-size control (or a backend: `Exact`, `LSODA`, `CVODE`, `nqf.solvers._backends`), and
returns a `FlowSolution` (`nqf.solvers._solution`). Repeated solves with new values of the same
shapes reuse the compiled program (the data set is a pytree argument, not a constant): the compiled
core is `nqf.solvers._core._solve_core`.

The general model with a linear and mean-field term (`nqf.NQFModel` with g or B, Eq. E2) is solved
in the ``"M-mu"`` form on the pair (M, mu) (Eq. E10); the width d enters its mu equation.

Cost per right-hand side of the ``"M-mu"`` form: the data's `traces` and one `apply` to p + 1
columns (use a structured data class: `DenseData` reads all m p^2 entries twice), plus the g and B
terms. A g of rank r <= 8 (e.g. the constant g = phi(0) [0; 1] of a bias-free MLP with
phi(0) != 0) is factored on the host once per call (`nqf.dynamics._flow.factor_linear_term`, exact
to rounding, only when concrete), so its terms cost O((m + p) r) instead of two passes over the
(m, p) array; models whose g differ in rank compile separately. Explicit solvers on this flow are
limited by stability, not accuracy, once d |g|^2 is large: the linear term's NTK eigenvalue
(2 d / m) * eig(G^T G) (Eq. E25; d/2 for the sigmoid MLP) sets the step size, so the step count
grows in proportion to d (benchmarks/bench_flow_general.py).

This module also re-exports the names that lived here before the split (issue 25), so that
``nqf.solvers._solve.FlowSolution`` and old code keep resolving.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import numpy as np

from .._core._checks import any_traced, check_int, check_positive
from ..data._model import NQFModel, as_model
from ..data._operators import AbstractData, CommutingData
from ..dynamics._flow import WithLoss, check_form, factor_linear_term
from ..dynamics._losses import as_loss
from ..dynamics._train_args import loss_inputs
from . import _distributed as _dist
from ._accuracy import with_accuracy
from ._backends import BACKENDS, CVODE, LSODA, AbstractBackend, Exact, Problem  # noqa: F401  (Exact, ...: old home)
from ._core import (  # noqa: F401  (re-exported: the names of this module before the split)
    SOLVERS,
    TRACE_COUNT,
    ReducedInterpolation,
    _default_instance,
    _excess_loss_anchor,
    _FlowArgs,
    _FlowConfig,
    _is_implicit_name,
    _make_solver,
    _params,
    _partition_solver,
    _redo_dense,
    _reduced_stiff,
    _solve_core,
    _solve_jit,
    _stop_target,
    _time_only,
    _with_saved_losses,
)
from ._events import Stop
from ._forms import (  # noqa: F401
    FORMS,
    AbstractForm,
    FactorForm,
    GLVForm,
    MForm,
    MMuForm,
    ReducedGLVForm,
    _reduced_saver,
    as_form,
)
from ._initial import (  # noqa: F401
    _check_mode_strengths,
    _check_solve_memory,
    _host_mask,
    _initial_state,
    _initial_state_mu,
    _state_size,
    _time_grid,
    solve_bytes,
)
from ._solution import (  # noqa: F401
    _CODE_OF,
    _FRONT_END,
    _MAX_STEPS_CODE,
    _NO_DENSE,
    _RESULT_STR,
    _STAT_NAMES,
    _SUCCESS_CODE,
    FlowSolution,
    MaxStepsReached,
    _dense_by_resolving,
    _evaluate,
    _host,
    _resolve_interp,
    _settings,
)
from ._spec import PID, Call, Save, check_options, resolve_call
from .rosenbrock import Rodas5P
from .stiff import is_stiff

__all__ = ["solve_flow", "FlowSolution", "MaxStepsReached", "SOLVERS"]

# the keyword aliases of `solve_flow` (nqf.solvers._spec): old scalar keywords, still supported
KEYWORD_DEFAULTS = {"loss": None, "max_steps": 100_000, "weight_decay": 0.0}  # solve_flow's keywords in **options

FLOW_OPTIONS = (
    "rtol",
    "atol",
    "pcoeff",
    "icoeff",
    "dt0",
    "ts",
    "dense",
    "save",
    "method",
    "stiff",
    "d",
    "mu0",
    "progress",
    "memory_budget",
)


@with_accuracy
def solve_flow(
    data: AbstractData | NQFModel,
    *,
    M0=None,
    W0=None,
    z0=None,
    t1,
    t0: float = 0.0,
    form: str | AbstractForm = "auto",
    solver=None,
    stepsize_controller: PID | None = None,
    saveat: Save | None = None,
    adjoint="auto",
    stop: Stop | None = None,
    **options,
) -> FlowSolution:
    """Integrate the MSE gradient flow M' = Y M + M Y - K(M) M - M K(M) (Eq. E9), or for a
    general model the (M, mu) flow of Eq. E10 (mu' = -(d v + H mu), M' = -(v mu^T + mu v^T +
    H M + M H), v = sum_x l'_x u(x), u(x) = g(x) + 2 B(x) mu, H = sum_x 2 l'_x A(x) + gamma I,
    l'_x = (2/m)(f_x - y_x); cost notes in the module docstring).

    Time is gradient-flow time t = eta * (GD steps); the loss is L = (1/m) sum_x (f_x - y_x)^2,
    or with `loss` (``"logistic"``, a callable, or ``as_loss("cross_entropy", k)``, see
    `nqf.dynamics._losses`) the mean over inputs of ell: then the (M, mu) flow of Eq. E10 with
    l'_x = (1/m) ell'(f_x, y_x) (`WithLoss`; ``form="auto"`` goes to ``"M-mu"``, the MSE-only
    forms ``"M"``, ``"factor"``, ``"glv"`` raise), `FlowSolution.loss` and the dense loss of
    `nqf.drop_times` are that loss. MSE (None, the default) is unchanged.
    Weight decay gamma (penalty gamma/2 |W|^2) adds -2 gamma M (H -> H + gamma I, THEORY sec. 4;
    in Eq. E10 also mu' gets -gamma mu); the paper's "-gamma M" (Sec. 4, Appendix B.3) and its
    threshold r_k - gamma (Sec. 9) use a gamma twice as large (here: -2 gamma M, r_k - 2 gamma;
    the oracles take the same `weight_decay`). In diffrax's style the solve takes objects: a form, a
    solver or backend, a step-size controller, a save specification and an adjoint; the scalar
    keywords of earlier versions are aliases of them (`**options`).

    **Arguments:**

    - `data`: an NQF data set (`DenseData`, `CommutingData`, `LowRankData`) or an `NQFModel`. A
      model without g, B is solved exactly as its data set (with labels y - f0 if it has f0).
    - `M0` (p, p) symmetric PSD, or `W0` (p, d) with M0 = W0 W0^T, or (commuting data, GLV form)
      `z0` (p,) >= 0, i.e. M0 = P diag(z0) P^T: the initial condition (exactly one). `z0` never
      forms a p x p matrix, so the GLV form runs at any p. For the ``"M-mu"`` form from `M0`
      also `mu0` (p,) and the width `d` (options; derived from `W0` as W0 1 and W0.shape[1]);
      M0 - mu0 mu0^T / d must be PSD.
    - `t1`, `t0`: the time interval (gradient-flow time).
    - `form`: a form object (`MForm()`, `FactorForm()`, `GLVForm()` (commuting data),
      `MMuForm(d)` (Eq. E10; any data or model)), its name ``"M"``, ``"factor"``, ``"glv"``,
      ``"M-mu"``, or ``"auto"`` (``"M-mu"`` for a model with g or B; otherwise GLV for commuting
      data, the factor form for low-rank data or a W0, else M).
    - `solver`: a diffrax solver, or one of ``"tsit5"`` (default), ``"dopri5"``, ``"dopri8"``,
      ``"rodas5p"`` (`nqf.rosenbrock.Rodas5P`; option ``stiff=True`` picks it), ``"kvaerno3"``,
      ``"kvaerno5"``. Stiff solvers given by name solve the GLV form's linear systems with its
      structure (`nqf.stiff`); for `CommutingData` with 2 m < p Rodas5P integrates the GLV flow
      in m coordinates. Or a backend: `Exact()` (option ``method="exact"``: Theorem 6's closed
      form, Eq. E16, for commuting data with orthogonal features; no steps, exact dense output),
      `LSODA()` / `CVODE()` (``"lsoda"`` / ``"cvode"``: the reduced GLV flow of CommutingData
      with m < p on the host; docs/large-p.md; not traceable).
    - `stepsize_controller`: `PID(rtol=1e-10, atol=None, pcoeff=None, icoeff=None, dt0=None)`
      (the default; options ``rtol``, ``atol``, ``pcoeff``, ``icoeff``, ``dt0``): the default
      atol is ``rtol * max|state(0)|`` (``rtol`` for the log-space GLV form), the PID
      coefficients 0, 1 (explicit) or 0.3, 0.4 (stiff); or `diffrax.PIDController` (used as
      given) or `diffrax.ConstantStepSize()` (with option ``dt0``, the step).
    - `saveat`: `Save(ts=None, dense=None, what="state")` (options ``ts``, ``dense``, ``save``):
      `ts` the saved times (default 201 equally spaced); `dense` diffrax's interpolant (None:
      rebuilt by solving again on first use of `evaluate`, `z_at`, `M_at`; True: from the
      start; False: never); `what` ``"state"`` or ``"loss"`` (only the loss and, for commuting
      data without g, B, f0, the excess loss: O(n) memory; `M`, `W`, `z` then raise). A
      `diffrax.SaveAt(ts=..., dense=...)` is accepted too.
    - `adjoint`: how derivatives flow through the solve: ``"auto"`` (``"forward"`` for a
      concrete call, ``"reverse"`` under tracing), ``"forward"`` / `diffrax.ForwardMode()` (jvp,
      `jax.jacfwd`) or ``"reverse"`` / `diffrax.RecursiveCheckpointAdjoint()` (`jax.grad`,
      memory O(state x log(max_steps))). The host backends refuse it.
    - `stop`: an `nqf.Stop` (`Stop.loss_below(value)`, `Stop.ignition(k, rho)`, `Stop.when(fn)`):
      the solve ends when it first holds (a root find; `stop_time`, `stop_reason`).
    - `max_steps` (default 100_000): solver step budget; `weight_decay` (default 0): gamma >= 0.
    - `**options`: `loss`, `max_steps`, `weight_decay`, the keyword aliases above, ``progress`` (diffrax's text progress meter)
      and ``memory_budget`` (bytes this call may allocate; `nqf.memory`: the saved states, stage
      vectors, a stiff solver's dense matrices and a dense output are estimated first).
    - ``accuracy`` (option, in [1e-13, 1)): the global relative error to reach (max over saved
      times of |x - x_true| / |x_true|, x = z or, for other data, M): solves at decreasing rtol
      until a two-tolerance estimate is <= accuracy / 4 (`nqf.solvers._accuracy`,
      docs/numerics.md); `stats` gains ``global_error``, ``rtol``, ``accuracy_solves``. Not
      with rtol / atol / `stepsize_controller`, save="loss", the exact backend, under jit.

    **Returns:** a `FlowSolution`.

    **Raises:** `TypeError` if `data` is neither a data set nor an `NQFModel`, or for an unknown
    keyword; `ValueError` for inconsistent shapes, non-finite or non-PSD initial conditions, a
    model with g or B solved in a form other than ``"M-mu"``, ``"M-mu"`` from `M0` without `mu0`
    and `d` (or `mu0`/`d` with `W0` or another form), `d` not an integer >= 1, non-positive
    tolerances, bad `ts`, an alias given with the object it folds into, a non-MSE `loss` with a
    form other than ``"M-mu"`` / ``"auto"``, a bad or unreached ``accuracy``, labels `y` whose mean
    square overflows float64 (|y| ~ 1e154 and beyond); `MaxStepsReached` if `max_steps` is used up
    before `t1`; `nqf.AssumptionError` (with the residual) for the exact
    backend on data whose features are not orthogonal.
    """
    loss, max_steps, weight_decay = (options.pop(k, v) for k, v in KEYWORD_DEFAULTS.items())  # keywords read here
    check_options(options, FLOW_OPTIONS, "solve_flow")
    source, form = _with_loss(data, loss, form)
    form, form_d = as_form(form)
    call = resolve_call(
        options, solver=solver, stepsize_controller=stepsize_controller, saveat=saveat, adjoint=adjoint, d=form_d
    )
    settings = _settings(form, call, t0, t1, max_steps, weight_decay, stop)
    problem = _problem(source, (M0, W0, z0), form, call)._replace(
        t0=t0, t1=t1, weight_decay=weight_decay, max_steps=max_steps, stop=stop, settings=settings
    )
    _check_label_scale(problem.data)
    if call.backend == "exact":
        return BACKENDS["exact"].solve(problem, call)
    if stop is not None and call.backend != "ode":
        raise ValueError("`stop` needs method='ode' with a diffrax solver (not method='exact' or a host solver).")
    if call.backend != "ode":
        if call.adjoint != "auto":  # it was silently ignored
            raise ValueError(
                f"`adjoint` sets how derivatives flow through a diffrax solve; solver={call.backend!r} runs "
                f"on the host and is not differentiable (found adjoint={call.adjoint!r}). Use a diffrax solver "
                "(e.g. stiff=True) to differentiate, or drop `adjoint`."
            )
        return BACKENDS[call.backend].solve(problem, call)
    return _solve_ode(problem, call)


_FRONT_END["solve_flow"] = solve_flow  # a loaded FlowSolution rebuilds its dense output through it


def _with_loss(data, loss, form):
    """(data, form) of a solve with `loss`: for a loss other than MSE the model wrapped with it
    (`WithLoss`) in the "M-mu" form (Eq. E10 with l'_x = (1/m) ell'(f_x, y_x); ``"auto"`` routes
    there); unchanged for MSE. **Raises:** `ValueError` for another form with a non-MSE loss,
    or data rows that are not whole inputs of the loss."""
    if loss is None:
        return data, form
    resolved = as_loss(loss)
    if resolved.is_mse:
        return data, form
    if (isinstance(form, str) and form not in ("auto", "M-mu")) or not isinstance(form, (str, MMuForm)):
        raise ValueError(
            f"`form={form!r}` integrates the MSE flow (Eq. E9); loss={resolved.name!r} runs in the general "
            "(M, mu) form: use form='M-mu' or 'auto'."
        )
    if isinstance(data, WithLoss):
        raise ValueError("`data` carries its loss already (a WithLoss model): drop `loss`.")
    model = as_model(data)
    loss_inputs(resolved, model.m)
    return WithLoss.of(model, resolved), ("M-mu" if form == "auto" else form)


def _check_label_scale(data) -> None:
    """Refuse labels whose mean square overflows float64 (|y| near 1e154 and beyond): the loss
    is then infinite from t = 0 and the solve ran into max_steps without a word about it (issue
    36 B11). Concrete labels only.

    **Raises:** `ValueError` naming `y`, its largest magnitude and the way out."""
    if any_traced(data.y):
        return
    y = np.abs(np.asarray(data.y, dtype=float))
    with np.errstate(over="ignore"):
        square = float(np.mean(y * y)) if y.size else 0.0
    if not np.isfinite(square):
        raise ValueError(
            f"`y` reaches {y.max():.3g}: the loss (1/m) sum_x (f_x - y_x)^2 overflows float64 at M = 0 (its "
            "mean square is inf; |y| must stay well below 1.3e154). Rescale the labels (and the data): the flow "
            "is covariant under y -> c y, M -> c M, t -> t / c."
        )


def _problem(data, inits: tuple, form: str, call: Call) -> Problem:
    """The checked problem of `solve_flow` (data, form, initial state); the time interval and
    the rest are filled in by the caller."""
    M0, W0, z0 = inits
    model = None
    if isinstance(data, (NQFModel, WithLoss)):
        model, data = data, data.data
        if isinstance(model, WithLoss) and form == "auto":
            form = "M-mu"
    elif not isinstance(data, AbstractData):
        raise TypeError(
            f"`data` must be an nqf data set (e.g. `DenseData`) or an `NQFModel`; found {type(data).__name__}."
        )
    if form != "auto":
        check_form(form, data)
    elif model is not None and model.has_mean_field:
        form = "M-mu"
    width = None
    if form == "M-mu":
        if z0 is not None:
            raise ValueError("`z0` is the initial state of the GLV form; form='M-mu' needs `M0` or `W0`.")
        x0, init, is_factor, width = _initial_state_mu(data, M0, W0, call.mu0, call.d)
        kind = "M-mu"
    else:
        if model is not None and model.has_mean_field:
            raise ValueError(
                f"`form={form!r}` tracks M only and ignores the model's g and B; use form='M-mu' "
                "(or 'auto') for a model with g or B (Eq. E10)."
            )
        if call.mu0 is not None or call.d is not None:
            raise ValueError(
                "`mu0` and `d` are used only by form='M-mu' (Eq. E10); pass form='M-mu' to track "
                f"mu, or drop them (form={form!r})."
            )
        if model is not None and model.f0 is not None:  # f0 shifts the labels: same flow
            data = eqx.tree_at(lambda x: x.y, data, data.y - model.f0)
        form, kind, x0, is_factor = _initial_state(data, M0, W0, form, z0)
        init = x0
    return Problem(
        data, model, form, kind, x0, init, is_factor, z0 is not None, width, None, None, None, None, None, ()
    )


def _ode_solver(problem: Problem, call: Call, traced: bool):
    """(solver, reduced): the diffrax solver of an ODE solve, and whether the GLV flow runs in
    m coordinates (`nqf.dynamics.rhs_glv_reduced`)."""
    data, form, solver, stiff = problem.data, problem.form, call.solver, call.stiff
    reduced = form == "glv" and _reduced_stiff(data, solver, stiff)
    host_mask = None
    if (
        form == "glv"
        and not reduced
        and _is_implicit_name(solver, stiff)
        and type(data) is CommutingData
        and 2 * data.m < data.p
    ):  # the Woodbury basis of the Newton solve needs the live modes
        if traced:
            raise ValueError(
                "Under jit / vmap / grad the stiff GLV solve of CommutingData with 2 m < p runs in m "
                "coordinates: use stiff=True or solver='rodas5p' (the Kvaerno Woodbury solve needs "
                "the live modes on the host)."
            )
        host_mask = _host_mask(data, problem.kind, problem.x0)
    solver = _default_instance(Rodas5P) if reduced else _make_solver(solver, stiff, data, form, host_mask)
    return solver, reduced


def _checked_controller(call: Call, traced: bool) -> Call:
    """The call with its controller settings checked (rtol, atol, dt0 > 0; rtol < 1; PID
    coefficients finite >= 0)."""
    rtol = check_positive(call.rtol, "rtol")
    atol = None if call.atol is None else check_positive(call.atol, "atol")
    dt0 = None if call.dt0 is None else check_positive(call.dt0, "dt0")  # the first step, forward in time
    if not traced and rtol >= 1.0:
        raise ValueError(f"`rtol` must be < 1 (a relative tolerance); found {rtol!r}.")
    for name, v in (("pcoeff", call.pcoeff), ("icoeff", call.icoeff)):
        if v is not None and not traced and not (np.isfinite(float(v)) and float(v) >= 0):
            raise ValueError(f"`{name}` (a PID coefficient) must be finite and >= 0; found {v!r}.")
    return call._replace(rtol=rtol, atol=atol, dt0=dt0)


def _ode_inputs(problem: Problem, call: Call):
    """(cfg, dyn, call, problem, implicit, traced) of a diffrax solve: the compiled core's static
    configuration and dynamic arguments, after the checks at the boundary."""
    data, model, form, x0, width = problem.data, problem.model, problem.form, problem.x0, problem.width
    traced = any_traced(
        (data, model, x0, problem.t0, problem.t1, call.ts, call.rtol, call.atol, call.dt0, problem.weight_decay)
    )
    solver, reduced = _ode_solver(problem, call, traced)
    call = _checked_controller(call, traced)
    t0, t1, ts = _time_grid(problem.t0, problem.t1, call.ts)
    gamma = check_positive(problem.weight_decay, "weight_decay", allow_zero=True)
    max_steps = problem.max_steps
    check_int(max_steps, "max_steps", expected="a positive integer")
    call = call._replace(ts=ts)
    implicit = is_stiff(solver)
    pcoeff = (0.3 if implicit else 0.0) if call.pcoeff is None else call.pcoeff
    icoeff = (0.4 if implicit else 1.0) if call.icoeff is None else call.icoeff
    f64 = (lambda x: x) if traced else np.float64
    solver_dyn, solver_static = _partition_solver(solver)
    # the "M-mu" form of a model whose g has low rank runs on its factors (exact to rounding)
    flow_data = data if model is None or form != "M-mu" else factor_linear_term(model)
    dyn = _FlowArgs(
        flow_data,
        x0,
        _params(t0, t1, call.rtol, gamma),
        ts,
        None if call.dt0 is None else f64(call.dt0),
        None if call.atol is None else f64(call.atol),
        None if width is None else f64(width),
        solver_dyn,
    )
    _check_solve_memory(
        form, x0, data, len(ts), call.save, solver, reduced, call.dense is True, max_steps, call.memory_budget
    )
    dyn, excess = _with_saved_losses(dyn, call.save, form, data, model)
    stop = problem.stop
    if stop is not None:
        stop, target = _stop_target(stop, form, data, model, gamma)
        dyn = dyn._replace(stop_target=target)
    adjoint = ("reverse" if traced else "forward") if call.adjoint == "auto" else call.adjoint
    cfg = _FlowConfig(
        form,
        problem.kind,
        solver_static,
        int(max_steps),
        call.dense is True,
        call.save,
        call.progress,
        excess,
        float(pcoeff),
        float(icoeff),
        reduced,
        (not traced) and gamma == 0.0,
        adjoint,
        stop,
        call.constant,
    )
    return cfg, dyn, call, problem._replace(t0=t0, t1=t1), implicit, traced


def _solve_ode(problem: Problem, call: Call) -> FlowSolution:
    """A diffrax solve of `problem` by the compiled core (`_solve_core`)."""
    cfg, dyn, call, problem, implicit, traced = _ode_inputs(problem, call)
    out = _solve_jit(cfg, dyn)
    fields = dict(
        form=problem.form,
        data=problem.data,
        init=problem.init,
        init_is_factor=problem.is_factor,
        max_steps=int(problem.max_steps),
        _y0=out["y0"],
        _mask=out["mask"],
        model=problem.model,
        d=problem.width,
        init_is_z=problem.init_is_z,
        saved=call.save,
        settings=problem.settings,
    )
    stop_name = None if problem.stop is None else problem.stop.label
    if traced:  # inside jit / vmap / grad: no host checks; failures raise through eqx.error_if
        ok = (out["info"][0] == _SUCCESS_CODE) & (out["info"][4] != 0)
        ys = eqx.error_if(
            out["ys"],
            ~ok,
            "solve_flow: the solver did not reach t1 with finite values "
            "(max_steps reached, or the flow blew up); check `successful` and `result`.",
        )
        return FlowSolution(
            ts=call.ts,
            ys=ys,
            _info=out["info"],
            _dfx=out["dense"],
            stop_time=out["stop_time"],
            _stop_name=stop_name,
            **fields,
        )
    info = _dist.host(out["info"])  # one small transfer; y0 and mask stay on the device
    _check_result(info, out, call.ts, problem, fields, implicit)
    ts = call.ts
    ys = out["ys"]  # gathered from every process if sharded across processes
    ys = _dist.host(ys) if isinstance(ys, jax.Array) else jax.tree.map(_dist.host, ys)
    stop_time = None
    if problem.stop is not None:  # keep the saved times reached before the stop
        stop_time = float(out["stop_time"])
        keep = ts <= stop_time
        ts, ys = ts[keep], jax.tree.map(lambda x: x[keep], ys)
    redo = None
    if call.dense is None:  # same solve, dense, with room for the steps actually taken
        room = 1 << int(info[1] + 1).bit_length()
        redo = functools.partial(_redo_dense, cfg._replace(max_steps=room, dense=True, progress=False), dyn)
    return FlowSolution(
        ts=ts, ys=ys, _info=info, _dfx=out["dense"], _redo=redo, stop_time=stop_time, _stop_name=stop_name, **fields
    )


def _check_result(info, out: dict, ts, problem: Problem, fields: dict, implicit: bool) -> None:
    """Raise `MaxStepsReached` (with the partial solution), `RuntimeError` or
    `FloatingPointError` for a concrete solve that did not reach t1 with finite values."""
    if info[0] == _MAX_STEPS_CODE:
        t_end = float(out["t_end"])
        keep = ts <= t_end
        partial = FlowSolution(
            ts=ts[keep], ys=jax.tree.map(lambda x: np.asarray(x)[keep], out["ys"]), _info=info, **fields
        )
        raise MaxStepsReached(
            f"The solver used all max_steps={problem.max_steps} steps before reaching t1={problem.t1:g}: it got to "
            f"t={t_end:.6g} ({int(keep.sum())} of {ts.size} saved times; the partial solution is "
            "`err.solution`, the time `err.t_reached`). Increase `max_steps` or loosen `rtol`/`atol`"
            + ("." if implicit else ", or, if the problem is stiff (rates spanning many decades), pass `stiff=True`."),
            t_end,
            partial,
        )
    if info[0] != _SUCCESS_CODE:
        raise RuntimeError(f"The flow solve failed: {_RESULT_STR.get(int(info[0]), info[0])}")
    if not info[4]:
        raise FloatingPointError(
            "The flow produced non-finite values (the solution blew up); check the sign of the "
            "labels and the scale of the data, or reduce t1."
        )
