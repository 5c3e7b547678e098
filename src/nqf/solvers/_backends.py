"""Backends: the solve paths of `solve_flow` that are not a diffrax solve (issue 25).

`solve_flow(solver=Exact())` (alias ``method="exact"``) evaluates Theorem 6's closed form;
`solve_flow(solver=LSODA())` / `CVODE()` (aliases ``solver="lsoda"`` / ``"cvode"``) integrate
the reduced GLV flow on the host. Each backend owns its solve (`AbstractBackend.solve`), which
takes the checked problem (`Problem`: data, form, initial state, time interval) and the call's
resolved settings (`nqf.solvers._spec.Call`) and returns a `FlowSolution`. Times are
gradient-flow times t = eta * steps.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import numpy as np

from .._core._checks import any_traced, check_int, check_positive
from .._core._errors import AssumptionError
from ..data._operators import CommutingData
from ..dynamics._flow import _initial_y0
from ..dynamics._glv import _THM6_COND
from ._initial import _check_solve_memory, _time_grid
from ._solution import _SUCCESS_CODE, FlowSolution, _host

__all__ = ["AbstractBackend", "Exact", "LSODA", "CVODE", "Problem"]


class Problem(NamedTuple):
    """A checked flow problem (what every solve path starts from).

    `data` (the data set, labels y - f0 for a model with f0 only), `model` (the `NQFModel` or
    None), `form` (its name), `kind` ("M", "W", "z" or "M-mu") and `x0` (the checked initial
    condition of that kind), `init` (what the solution records as its initial condition),
    `is_factor`, `init_is_z`, `width` (the "M-mu" form's d, else None), `t0`, `t1` (gradient-flow
    times), `weight_decay`, `max_steps`, `stop` and `settings` (the call's recorded settings)."""

    data: Any
    model: Any
    form: str
    kind: str
    x0: Any
    init: Any
    is_factor: bool
    init_is_z: bool
    width: Any
    t0: Any
    t1: Any
    weight_decay: Any
    max_steps: Any
    stop: Any
    settings: tuple


class AbstractBackend(eqx.Module):
    """A solve path that is not a diffrax solve (`solve_flow(solver=backend)`)."""

    name: ClassVar[str] = ""

    def solve(self, problem: Problem, call) -> FlowSolution:
        """Solve `problem` with the call's settings; returns a `FlowSolution`."""
        raise NotImplementedError


class Exact(AbstractBackend):
    """Theorem 6's closed form (Eq. E16, `nqf.exact`) at the saved times, for commuting data with
    orthogonal features (every `DiagonalData`), GLV form: O(p) per saved time, no steps, exact
    dense output. Alias: ``method="exact"``.

    **Raises** (from `solve`): `ValueError` for another form or with an ODE solver / `stiff`;
    `nqf.AssumptionError` (with the residual) for data whose features are not orthogonal."""

    name: ClassVar[str] = "exact"

    def solve(self, problem: Problem, call) -> FlowSolution:
        return _solve_exact(problem, call)


class LSODA(AbstractBackend):
    """scipy's LSODA on the reduced GLV flow in m coordinates (`CommutingData` with m < p), on
    the host: not traceable, not differentiable. Alias: ``solver="lsoda"``.

    **Raises** (from `solve`): `ValueError` for other data or forms; `TypeError` under tracing."""

    name: ClassVar[str] = "lsoda"

    def solve(self, problem: Problem, call) -> FlowSolution:
        return _solve_reduced_host(self.name, problem, call)


class CVODE(LSODA):
    """SUNDIALS CVODE (BDF, dense m x m solve) on the reduced GLV flow, on the host (``pip
    install 'nqf[sundials]'``); about half LSODA's right-hand sides. Alias: ``solver="cvode"``."""

    name: ClassVar[str] = "cvode"


BACKENDS = {"exact": Exact(), "lsoda": LSODA(), "cvode": CVODE()}


def _solve_exact(problem: Problem, call) -> FlowSolution:
    """``solve_flow(..., method="exact")``: Theorem 6's closed form at the saved times."""
    from ..dynamics._glv import orthogonal_features_residual
    from ._core import _FlowArgs, _params, _with_saved_losses
    from .exact import _exact_jit, _ExactConfig

    data, form = problem.data, problem.form
    if form != "glv":
        raise ValueError(
            "method='exact' evaluates Theorem 6 (Eq. E16), which needs commuting data with "
            f"orthogonal features in the GLV form; found {type(data).__name__} with form={form!r}."
        )
    if call.solver is not None or call.stiff:
        raise ValueError(
            "`solver` and `stiff` choose an ODE solver; method='exact' evaluates Theorem 6's "
            "closed form (drop them, or use method='ode')."
        )
    tol = 1e-10
    res, (k, j) = (0.0, (0, 0)) if any_traced(data) else orthogonal_features_residual(data)  # traced: unchecked
    if res > tol:
        raise AssumptionError(
            "Theorem 6",
            _THM6_COND,
            res,
            tol,
            where=f"(k, j) = ({k}, {j})",
            detail="method='exact' needs it; use method='ode' (the default) for these data.",
        )
    t0, t1, ts = _time_grid(problem.t0, problem.t1, call.ts)
    gamma = check_positive(problem.weight_decay, "weight_decay", allow_zero=True)
    save = call.save
    _check_solve_memory(form, problem.x0, data, len(ts), save, None, False, False, 0, call.memory_budget)
    dyn, excess = _with_saved_losses(
        _FlowArgs(data, problem.x0, _params(t0, t1, 0.0, gamma), ts), save, form, data, problem.model
    )
    out = _exact_jit(_ExactConfig(problem.kind, save, excess), dyn)
    traced = any_traced(out)
    if not traced and not np.asarray(out["info"])[4]:
        raise FloatingPointError("Theorem 6's closed form produced non-finite values; check the data's scale.")
    return FlowSolution(
        ts=ts,
        form=form,
        ys=_host(out["ys"]),
        data=data,
        init=problem.init,
        init_is_factor=problem.is_factor,
        _info=out["info"],
        _y0=out["y0"],
        _dfx=out["dense"],
        _mask=out["mask"],
        model=problem.model,
        init_is_z=problem.init_is_z,
        saved=save,
        method="exact",
        settings=problem.settings,
    )


def _check_host(method: str, problem: Problem, call) -> None:
    """The reduced host solve's preconditions (data, form, concrete values)."""
    data, form = problem.data, problem.form
    if form != "glv" or type(data) is not CommutingData or not data.m < data.p:
        raise ValueError(
            f"solver={method!r} integrates the GLV flow of CommutingData with m < p in m coordinates "
            f"(`nqf.dynamics.rhs_glv_reduced`); found {type(data).__name__} (m = {data.m}, p = {data.p}) with form={form!r}. "
            "Use stiff=True (Rodas5P) otherwise."
        )
    if any_traced(
        (data, problem.model, problem.x0, problem.t0, problem.t1, call.ts, call.rtol, call.atol, problem.weight_decay)
    ):
        raise TypeError(
            f"solver={method!r} runs in numpy on the host and is not traceable (jit / vmap / grad); "
            "use stiff=True (Rodas5P, the same m-coordinate flow in JAX) inside transformations."
        )


def _solve_reduced_host(method: str, problem: Problem, call) -> FlowSolution:
    """``solve_flow(..., solver="lsoda" | "cvode")``: the reduced GLV flow on the host (`nqf.solvers._lsoda`)."""
    from ._core import _excess_loss_anchor
    from ._lsoda import saved_outputs, solve_reduced

    _check_host(method, problem, call)
    data, save, max_steps = problem.data, call.save, problem.max_steps
    rtol = check_positive(call.rtol, "rtol")
    if rtol >= 1.0:
        raise ValueError(f"`rtol` must be < 1 (a relative tolerance); found {rtol!r}.")
    atol = None if call.atol is None else check_positive(call.atol, "atol")
    check_int(max_steps, "max_steps", expected="a positive integer")
    t0, t1, ts = _time_grid(problem.t0, problem.t1, call.ts)
    gamma = check_positive(problem.weight_decay, "weight_decay", allow_zero=True)
    if save not in ("state", "loss"):
        raise ValueError(f"`save` must be 'state' or 'loss'; found {save!r}.")
    _check_solve_memory(problem.form, problem.x0, data, len(ts), save, None, False, False, 0, call.memory_budget)
    u0, mask = (
        np.asarray(v) for v in jax.jit(_initial_y0, static_argnums=(0, 1))("glv", problem.kind, data, problem.x0)
    )
    G, prob, interp, stats = solve_reduced(
        data, u0, mask, method=method, t0=t0, t1=t1, ts=ts, rtol=rtol, atol=atol, gamma=gamma, max_steps=max_steps
    )
    z_star, grad = _excess_loss_anchor(problem.form, data, problem.model) if save == "loss" else (None, None)
    ys = saved_outputs(prob, data, ts, G, save, z_star, grad)
    info = np.array([_SUCCESS_CODE, stats["num_steps"], stats["num_accepted_steps"], 0, 1])
    return FlowSolution(
        ts=ts,
        form=problem.form,
        ys=ys,
        data=data,
        init=problem.init,
        init_is_factor=problem.is_factor,
        _info=info,
        max_steps=int(max_steps),
        _y0=u0,
        _dfx=interp,
        _mask=mask,
        model=problem.model,
        init_is_z=problem.init_is_z,
        saved=save,
        _extra_stats=(("nfev", stats["nfev"]), ("njev", stats["njev"])),
        settings=problem.settings,
    )
