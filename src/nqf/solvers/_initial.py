"""Checks of a flow solve's inputs at the boundary (host, numpy): the initial condition of each
form (M0 (p, p), W0 (p, d), z0 (p,), or (M0, mu0, d) for the "M-mu" form), the time grid
(gradient-flow times), and the memory estimate of a solve (`nqf.memory`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._core._checks import (
    any_traced,
    as_array,
    as_weights,
    check_psd,
    check_symmetric,
    check_width,
    is_traced,
    shape_str,
)
from .._core.memory import check as check_memory
from ..data._operators import AbstractCommutingData, AbstractData, FeedForwardData, LowRankData, check_initial_loss
from ..dynamics._flow import check_form
from ._defaults import is_shared_default
from ._forms import FORMS, plain_method
from .stiff import is_stiff


def _state_size(form: str, x0, data: AbstractData) -> int:
    """Number of float64 values in the integrated state of `form` started from `x0`."""
    return plain_method(FORMS[form], "state_size")(x0, data)


def solve_bytes(
    form: str,
    x0,
    data: AbstractData,
    n_saved: int,
    save: str,
    solver,
    reduced: bool,
    dense: bool,
    max_steps: int,
    members: int = 1,
) -> tuple[float, str]:
    """Estimated bytes of one solve (times `members` for a sweep) and what dominates them:
    saved states (n x state), ~20 stage vectors, a stiff solver's dense Jacobian and LU
    (state^2, or m^2 in the reduced GLV form) and, with `dense`, diffrax's interpolant reserved
    for `max_steps` steps (~9 state vectors per step); plus `DATA_COPIES` copies of the data's
    arrays (shared by the members)."""
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
    copies = DATA_COPIES * _data_bytes(data)  # shared by the members
    if copies > total:
        return total + copies, "the solver's copies of the data's arrays (A)"
    return total + copies, max(parts, key=lambda k: parts[k])


# Copies of the data's arrays that a solve holds besides the user's own (measured on DenseData,
# m = 400 and 800, p = 300, issue 36: the process grew by 2.4 and 2.7 times A beyond the rest of
# the estimate): its transfer into the compiled program and the reshaped and transposed
# operands of the traces and of sum_mu c_mu A_mu.
DATA_COPIES = 3


def _data_bytes(data: AbstractData) -> float:
    """Bytes of the data's (m, p, p)-like array leaves (a dense A; 3-d or more): the copies
    measured above; vectors and factors of structured data are left out (not measured)."""
    return float(sum(leaf.nbytes for leaf in jax.tree.leaves(data) if getattr(leaf, "ndim", 0) >= 3))


def _check_solve_memory(
    form, x0, data, n_saved, save, solver, reduced, dense, max_steps, memory_budget, members: int = 1
) -> None:
    key = _estimate_key(form, x0, data, n_saved, save, solver, reduced, dense, max_steps, members)
    estimate = _ESTIMATES.get(key) if key is not None else None
    if estimate is None:
        estimate = _memory_estimate(form, x0, data, n_saved, save, solver, reduced, dense, max_steps, members)
        if key is not None and len(_ESTIMATES) < 4096:
            _ESTIMATES[key] = estimate
    nbytes, what, ways_out = estimate
    check_memory(nbytes, what, ways_out, memory_budget)


def _memory_estimate(
    form, x0, data, n_saved, save, solver, reduced, dense, max_steps, members
) -> tuple[float, str, str]:
    """(bytes, what, ways out) of `solve_bytes` and its error message (`nqf.memory.check`)."""
    nbytes, main = solve_bytes(form, x0, data, n_saved, save, solver, reduced, dense, max_steps, members)
    ways = ["fewer saved times `ts`"]
    if save == "state":
        ways.append("save='loss' (only the loss is kept)")
    if dense:
        ways.append("dense=None (dense output built lazily for the steps actually taken) or dense=False")
    if form == "M":
        ways.append(
            "a structured data class (CommutingData, DiagonalData, LowRankData, FeedForwardData) "
            "or the factor form from a low-rank W0"
        )
    if "copies of the data" in main:
        ways.append(
            "data with structure (nqf.structure, DiagonalData, LowRankData, FeedForwardData) instead of dense A"
        )
    if "Jacobian" in main and not reduced:
        ways.append("a non-stiff solver, or data whose stiff solve is structured (nqf.stiff)")
    what = f"This flow solve ({main} dominate)" if members == 1 else f"This {members}-member sweep ({main} dominate)"
    return nbytes, what, "; ".join(ways) + "."


# (form, shapes, data type, sizes, solver, options) -> `_memory_estimate` (bytes, message): it
# depends on shapes and static arguments only, so a repeated solve reuses it (issue 34); the
# budget (argument, NQF_MEMORY_BUDGET, available memory) is still read on every call
_ESTIMATES: dict = {}


def _estimate_key(form, x0, data, n_saved, save, solver, reduced, dense, max_steps, members):
    """The key of `_memory_estimate` in `_ESTIMATES`, or None (not cached) for a solver other
    than None or a shared default instance (`_defaults._default_instance`: immutable)."""
    if solver is not None and not is_shared_default(solver):
        return None
    shapes = tuple(np.shape(x) for x in (x0 if isinstance(x0, tuple) else (x0,)))
    sizes = (data.p, data.m, _data_bytes(data))
    return (form, shapes, type(data), sizes, n_saved, save, type(solver), reduced, dense, max_steps, members)


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
            "Give exactly one initial condition: `M0` (p, p), `W0` (p, d) or, for commuting data, `z0` (p,)."
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
        check_initial_loss(data, z0, "z0", "z")
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
    check_initial_loss(data, init, "W0" if is_factor else "M0", "W" if is_factor else "M")
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
                "`mu0` and `d` are derived from `W0` (mu0 = W0 1, d = W0.shape[1]); give them only with `M0`."
            )
        W0 = as_weights(W0, p)
        check_initial_loss(data, W0, "W0", "W")
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
    check_initial_loss(data, M0, "M0")
    mu0 = as_array(mu0, "mu0", shape=(p,))
    d = check_width(d)
    # Realizability by some W (p, d): M0 - mu0 mu0^T / d = W (I - 1 1^T / d) W^T is PSD.
    if not is_traced((M0, mu0)):
        check_psd(np.asarray(M0) - np.outer(mu0, mu0) / d, "M0 - mu0 mu0^T / d")
    return (M0, mu0), M0, False, d


def _time_value(t, name: str) -> float:
    """A concrete time t0 or t1 as a finite float (`as_array`'s checks and errors; a finite
    Python float or int passes without building an array)."""
    if type(t) in (float, int) and math.isfinite(t):
        return float(t)
    if isinstance(t, (bool, np.bool_)):  # as_array reads a bool as 0 or 1
        raise TypeError(f"`{name}` must be a real number (a time); found bool {t!r}.")
    return float(as_array(t, name, ndim=0, host=True))


def _time_grid(t0, t1, ts):
    """Checked (t0, t1, ts) of a solve; ts defaults to 201 equally spaced times. Traced values
    (inside jit, vmap, grad) are shape-checked only."""
    if any_traced((t0, t1, ts)):
        t0 = as_array(t0, "t0", ndim=0, host=True)
        t1 = as_array(t1, "t1", ndim=0, host=True)
        ts = jnp.linspace(t0, t1, 201) if ts is None else as_array(ts, "ts", ndim=1, host=True)
        return t0, t1, ts
    t0, t1 = _time_value(t0, "t0"), _time_value(t1, "t1")
    if not t1 > t0:
        raise ValueError(f"`t1` must be greater than `t0` = {t0}; found t1 = {t1}.")
    if ts is None:
        return t0, t1, np.linspace(t0, t1, 201)
    if type(ts) is np.ndarray and ts.dtype == np.float64 and ts.ndim == 1 and ts.size:
        # fast path (issue 34): non-decreasing and inside the finite [t0, t1] implies finite (NaN
        # fails every comparison); anything else takes the checks below, which name the fault
        if ts[0] >= t0 and ts[-1] <= t1 and (ts[1:] >= ts[:-1]).all():
            return t0, t1, ts
    ts = as_array(ts, "ts", ndim=1, host=True)
    if ts.size == 0:
        raise ValueError("`ts` must be a non-empty array of save times; found an empty array.")
    if np.any(np.diff(ts) < 0):
        i = int(np.argmax(np.diff(ts) < 0))
        raise ValueError(f"`ts` must be non-decreasing; found ts[{i}] = {ts[i]} > ts[{i + 1}] = {ts[i + 1]}.")
    if ts[0] < t0 or ts[-1] > t1:
        raise ValueError(f"`ts` must lie inside [t0, t1] = [{t0}, {t1}]; found range [{ts.min()}, {ts.max()}].")
    return t0, t1, ts
