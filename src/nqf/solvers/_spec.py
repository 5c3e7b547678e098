"""The objects a flow solve takes, in diffrax's style (issue 25), and the keyword aliases.

`solve_flow` and `solve_sweep` take a few objects instead of many scalars:

- a step-size controller: `PID` (nqf's defaults: rtol 1e-10, atol relative to the initial
  state, PID coefficients by solver; optional first step `dt0`), or diffrax's own
  `diffrax.PIDController` (used as given: its rtol, atol, pcoeff, icoeff) or
  `diffrax.ConstantStepSize` (with `dt0`, the fixed step);
- a save specification `Save(ts, dense, what)` (or a `diffrax.SaveAt(ts=..., dense=...)`);
- an adjoint: ``"auto"``, ``"forward"``, ``"reverse"``, `diffrax.ForwardMode()` or
  `diffrax.RecursiveCheckpointAdjoint()`;
- a solver: a diffrax solver (or its name), or a backend object for the paths that are not a
  diffrax solve: `Exact()` (Theorem 6's closed form), `LSODA()`, `CVODE()` (the reduced GLV flow
  on the host).

**Keyword aliases.** The scalar keywords of nqf <= 0.2 keep working, with their old meaning:
``rtol``, ``atol``, ``pcoeff``, ``icoeff``, ``dt0`` (fold into the controller), ``ts``,
``dense``, ``save`` (into the save specification), ``method="exact"`` (the `Exact` backend),
``solver="lsoda" | "cvode"`` (the host backends), ``stiff=True`` (Rodas5P), ``d`` (the width of
the ``"M-mu"`` form), ``mu0``, ``progress`` and ``memory_budget``. An alias and the object it
folds into may not both be given (`ValueError` naming both); an unknown keyword raises
`TypeError` as Python would. No warnings: the aliases are a supported spelling.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import diffrax
import equinox as eqx

from ._backends import CVODE, LSODA, AbstractBackend, Exact

__all__ = ["PID", "Save", "Exact", "LSODA", "CVODE", "AbstractBackend"]


class PID(eqx.Module):
    """nqf's PID step-size controller (diffrax's `PIDController` with nqf's defaults).

    - `rtol`: relative tolerance (default 1e-10); `atol`: absolute tolerance (default None:
      ``rtol * max|state(0)|``, or ``rtol`` for the log-space GLV state; `solve_sweep` also takes
      one value per member, shape (B,)).
    - `pcoeff`, `icoeff`: PID coefficients (None: 0, 1 for explicit solvers; 0.3, 0.4 for stiff).
    - `dt0`: the first step in gradient-flow time (None: diffrax's automatic choice).
    """

    rtol: Any = 1e-10
    atol: Any = None
    pcoeff: Any = None
    icoeff: Any = None
    dt0: Any = None


class Save(eqx.Module):
    """What a flow solve saves.

    - `ts`: gradient-flow times to save, shape (n,) (None: 201 equally spaced times in [t0, t1]).
    - `dense`: diffrax's dense interpolant (None: built lazily on first use by solving again;
      True: from the start; False: never).
    - `what`: ``"state"`` (the state at `ts`) or ``"loss"`` (only the loss and, for commuting
      data, the excess loss: O(n) memory).
    """

    ts: Any = None
    dense: bool | None = None
    what: str = "state"


class Call(NamedTuple):
    """The resolved solver settings of one call (plain values; what the solve core reads)."""

    solver: Any  # a diffrax solver, its name, or None
    backend: str  # "ode", "exact", "lsoda" or "cvode"
    stiff: bool
    rtol: Any
    atol: Any
    pcoeff: Any
    icoeff: Any
    dt0: Any
    constant: bool  # diffrax.ConstantStepSize: fixed steps of dt0
    ts: Any
    dense: bool | None
    save: str
    adjoint: str
    progress: bool
    memory_budget: Any
    d: Any
    mu0: Any


_ALIASES = {  # keyword alias -> the object it folds into
    "rtol": "stepsize_controller",
    "atol": "stepsize_controller",
    "pcoeff": "stepsize_controller",
    "icoeff": "stepsize_controller",
    "dt0": "stepsize_controller",
    "ts": "saveat",
    "dense": "saveat",
    "save": "saveat",
    "method": "solver",
    "stiff": "solver",
    "d": "form",
    "mu0": None,
    "progress": None,
    "memory_budget": None,
}


def check_options(options: dict, allowed, func: str) -> None:
    """`TypeError` for a keyword that is neither a parameter nor an alias of `func`."""
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise TypeError(f"{func}() got an unexpected keyword argument {bad[0]!r}.")


def _conflict(alias: str, target: str) -> ValueError:
    return ValueError(
        f"`{alias}=` is an alias that folds into `{target}=`; give one of them, not both (put "
        f"`{alias}` into the `{target}` object)."
    )


def resolve_controller(controller, options: dict) -> dict:
    """rtol, atol, pcoeff, icoeff, dt0, constant from `stepsize_controller` or the aliases."""
    keys = ("rtol", "atol", "pcoeff", "icoeff", "dt0")
    given = {k: options[k] for k in keys if k in options}
    out = {"rtol": 1e-10, "atol": None, "pcoeff": None, "icoeff": None, "dt0": None, "constant": False}
    if controller is None:
        return {**out, **given}
    for k in given:
        if k != "dt0":
            raise _conflict(k, "stepsize_controller")
    if isinstance(controller, PID):
        if "dt0" in given and controller.dt0 is not None:
            raise _conflict("dt0", "stepsize_controller")
        return {
            **out,
            "rtol": controller.rtol,
            "atol": controller.atol,
            "pcoeff": controller.pcoeff,
            "icoeff": controller.icoeff,
            "dt0": given.get("dt0", controller.dt0),
        }
    if isinstance(controller, diffrax.PIDController):
        default = diffrax.PIDController(
            rtol=controller.rtol, atol=controller.atol, pcoeff=controller.pcoeff, icoeff=controller.icoeff
        )
        if not eqx.tree_equal(controller, default):
            raise NotImplementedError(
                "solve_flow uses a diffrax.PIDController's rtol, atol, pcoeff and icoeff; its other "
                "settings (norm, dcoeff, dtmin, dtmax, factormin/max, safety, ...) are not supported."
            )
        return {
            **out,
            "rtol": controller.rtol,
            "atol": controller.atol,
            "pcoeff": controller.pcoeff,
            "icoeff": controller.icoeff,
            "dt0": given.get("dt0"),
        }
    if isinstance(controller, diffrax.ConstantStepSize):
        if given.get("dt0") is None:
            raise ValueError("diffrax.ConstantStepSize needs the step: pass `dt0=` (gradient-flow time).")
        return {**out, "dt0": given["dt0"], "constant": True}
    raise TypeError(
        "`stepsize_controller` must be nqf.PID(...), diffrax.PIDController(...) or "
        f"diffrax.ConstantStepSize(); found {type(controller).__name__}."
    )


def resolve_save(saveat, options: dict) -> dict:
    """ts, dense, save from `saveat` (a `Save` or a `diffrax.SaveAt`) or the aliases."""
    keys = ("ts", "dense", "save")
    given = {k: options[k] for k in keys if k in options}
    if saveat is None:
        return {"ts": given.get("ts"), "dense": given.get("dense"), "save": given.get("save", "state")}
    if given:
        raise _conflict(next(iter(given)), "saveat")
    if isinstance(saveat, Save):
        return {"ts": saveat.ts, "dense": saveat.dense, "save": saveat.what}
    if isinstance(saveat, diffrax.SaveAt):
        subs = saveat.subs
        if (
            not isinstance(subs, diffrax.SubSaveAt)
            or subs.t0
            or subs.t1
            or subs.steps
            or subs.fn is not diffrax.SaveAt(ts=[0.0]).subs.fn
        ):
            raise NotImplementedError("solve_flow takes a diffrax.SaveAt(ts=..., dense=...) only; use nqf.Save.")
        return {"ts": subs.ts, "dense": bool(saveat.dense), "save": "state"}
    raise TypeError(f"`saveat` must be nqf.Save(...) or diffrax.SaveAt(...); found {type(saveat).__name__}.")


def resolve_solver(solver, options: dict) -> dict:
    """(solver, backend, stiff) from `solver` (a diffrax solver, a name, a backend object) and the
    ``method`` / ``stiff`` aliases."""
    stiff = bool(options.get("stiff", False))
    method = options.get("method", "ode")
    if isinstance(solver, AbstractBackend):
        if "method" in options:
            raise _conflict("method", "solver")
        backend = solver.name
        return {"solver": None if backend == "exact" else backend, "backend": backend, "stiff": stiff}
    if method not in ("ode", "exact"):
        raise ValueError(f"`method` must be 'ode' or 'exact'; found {method!r}.")
    backend = method
    if isinstance(solver, str) and solver.lower() in ("lsoda", "cvode") and method == "ode":
        backend = solver.lower()
    return {"solver": solver, "backend": backend, "stiff": stiff}


def resolve_adjoint(adjoint) -> str:
    """ "auto", "forward" or "reverse" from a string or a diffrax adjoint object."""
    if isinstance(adjoint, diffrax.ForwardMode):
        return "forward"
    if isinstance(adjoint, diffrax.RecursiveCheckpointAdjoint):
        if adjoint.checkpoints is not None:
            raise NotImplementedError("diffrax.RecursiveCheckpointAdjoint(checkpoints=...) is not supported.")
        return "reverse"
    if isinstance(adjoint, str):
        if adjoint not in ("auto", "forward", "reverse"):
            raise ValueError(f"`adjoint` must be 'auto', 'forward' or 'reverse'; found {adjoint!r}.")
        return adjoint
    raise TypeError(
        "`adjoint` must be 'auto', 'forward', 'reverse', diffrax.ForwardMode() or "
        f"diffrax.RecursiveCheckpointAdjoint(); found {type(adjoint).__name__}."
    )


def resolve_call(options: dict, *, solver, stepsize_controller, saveat, adjoint, d=None) -> Call:
    """The `Call` of `solve_flow` / `solve_sweep` from its objects and keyword aliases."""
    if "d" in options and d is not None:
        raise _conflict("d", "form")
    return Call(
        **resolve_solver(solver, options),
        **resolve_controller(stepsize_controller, options),
        **resolve_save(saveat, options),
        adjoint=resolve_adjoint(adjoint),
        progress=bool(options.get("progress", False)),
        memory_budget=options.get("memory_budget"),
        d=options.get("d", d),
        mu0=options.get("mu0"),
    )
