"""Ignition times of sudden learning (THEORY sec. 7, Eq. E19).

A mode k "ignites" when it first reaches a fraction rho of its final value. For a logistic mode
z' = a zeta z (1 - C z / zeta) (Theorem 6: a = 1, zeta = r_k, C = C_kk; Theorem 7: a = 2,
zeta = g_k, C = 4c) the time is exact in closed form (`predicted_ignition_times`, Eq. E19). On
any trajectory it is measured (`measure_ignition_times`): on a solved flow (`FlowSolution`,
each member of a `SweepSolution`) by Brent's method on the solver's dense output, on a
discrete trajectory (`MapTrajectory`, `WTrajectory`, `GLVTrajectory`) by linear interpolation
between saved steps.

The mode values are either the mode strengths z_k(t) = (P^T M(t) P)_kk of commuting data
(mode k of the data's eigenbasis P) or, for any data, the eigenvalues of M(t) in decreasing
order (mode k = the k-th largest eigenvalue). For commuting data started from M0 = eps I the
two coincide up to labels: M(t) = P diag(z(t)) P^T.

Times are gradient-flow times t = eta * (number of GD steps) throughout.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import scipy.optimize

from .._core._checks import as_array, check_positive, shape_str
from .._core._config import require_x64
from ..data._operators import AbstractCommutingData
from ..solvers._solve import FlowSolution
from ..solvers._sweep import SweepSolution

__all__ = ["predicted_ignition_times", "measure_ignition_times"]

QUANTITIES = ("auto", "z", "eigenvalues")
REFINES = ("auto", "brent", "linear", "step")


def predicted_ignition_times(zeta, C, z0, *, rho: float = 0.5, a: float = 1.0) -> np.ndarray:
    """t*_k = 1/(a zeta_k) ln( (zeta_k - C_k z_k(0)) rho / (C_k z_k(0) (1 - rho)) ) (Eq. E19).

    With z_k(0) = c_k eps this is E19's (1/(a zeta)) ln(1/eps) - (1/(a zeta)) ln(C c /(zeta - C c
    eps) (1 - rho)/rho). Exact for the logistic solutions of Theorems 6, 7 and 16.

    **Arguments:** `zeta` (p,) growth rates, `C` (p,) self-competition, `z0` (p,) initial mode
    strengths (broadcastable); `rho` in (0, 1); `a` = 1 (Theorem 6) or 2 (Theorem 7).

    **Returns:** times of shape (p,) in gradient-flow time: `inf` for modes that never ignite
    (zeta <= 0 or C = 0, or z0 = 0) and 0 for modes already at or above rho z(inf).

    **Raises:** `ValueError` for rho outside (0, 1), a <= 0, negative C or z0, non-finite input.
    """
    zeta, C, z0 = np.broadcast_arrays(
        *(np.asarray(as_array(v, n)) for v, n in ((zeta, "zeta"), (C, "C"), (z0, "z0")))
    )
    _check_rho(rho)
    if not a > 0:
        raise ValueError(f"`a` must be > 0 (1 for Theorem 6, 2 for Theorem 7); found {a!r}.")
    for v, n, what in ((C, "C", "self-competition"), (z0, "z0", "initial mode strength")):
        if np.any(v < 0):
            raise ValueError(f"`{n}` ({what}) must be >= 0; found minimum {v.min():.3g}.")
    ignites = (zeta > 0) & (C > 0) & (z0 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        arg = (zeta - C * z0) * rho / (C * z0 * (1.0 - rho))
        t = np.log(arg) / (a * zeta)
    return np.where(ignites, np.where(arg > 1.0, t, 0.0), np.inf)


def measure_ignition_times(trajectory, *, rho: float = 0.5, target=None, quantity: str = "auto",
                           refine: str = "auto", xtol: float = 1e-12, z_inf=None) -> np.ndarray:
    """Times at which each mode first reaches rho times its final value, measured on a trajectory.

    The measured counterpart of Eq. E19 (`predicted_ignition_times`), for flows and discrete
    training of any data.

    **Arguments:**

    - `trajectory`: a `FlowSolution` (`solve_flow`), a `SweepSolution` (`solve_sweep`; each
      member is measured as a `FlowSolution`), or a discrete trajectory: `MapTrajectory`
      (`closed_sgd`, `closed_map`), `WTrajectory` (`train_w`), `GLVTrajectory` (`glv_gd`), or
      any object with saved times `t` or `ts` ((n,) or (B, n)) and `M` (..., n, p, p) or `z`
      (..., n, p), e.g. an `OracleSolution`; a leading batch axis B of the arrays is a batch of
      B trajectories.
    - `rho`: the fraction, in (0, 1).
    - `quantity`: the mode values. ``"z"``: the mode strengths z_k(t) = (P^T M(t) P)_kk of
      commuting data (flows of `CommutingData` / `DiagonalData`, `GLVTrajectory`), indexed like
      the data's modes. ``"eigenvalues"``: the eigenvalues of M(t) in decreasing order (any data;
      mode k is the k-th largest; for a `GLVTrajectory` the sorted z, which are M's eigenvalues).
      ``"auto"`` (default): ``"z"`` where mode strengths exist, else ``"eigenvalues"``.
    - `target` (p,), or (B, p) for a batch (one row per member; (p,) is shared): the final
      values whose fraction rho is crossed. Default: for ``"z"`` on a flow the GLV equilibrium
      z(inf) (`FlowSolution.z_inf`, the convention of E19); otherwise (and where z(inf) is not
      defined, e.g. a model with g, B) the values at the last saved time `ts[-1]` (flows) or the
      last saved step (discrete). `z_inf`: the same argument under its former name (give one).
    - `refine`: how a crossing is located between two samples. ``"brent"``: bracketed on the
      solver's accepted steps (`FlowSolution.step_times`) and refined by Brent's method on the
      dense output (`z_at`, or the eigenvalues of `M_at`) to absolute time tolerance `xtol`
      (flows only). ``"linear"``: linear interpolation of the mode values between the saved
      times (`ts` of a flow, and the saved arrays of a `SweepSolution`'s members, without
      re-solving; saved steps of a discrete trajectory: one saved step is lr * save_every of
      time, and between them the map is interpolated linearly in t).
      ``"step"``: the first saved time at which the value is at or above rho times its target
      (for a discrete trajectory: lr * the first saved step count, no interpolation).
      ``"auto"`` (default): ``"brent"`` for a flow with dense output (the default
      `solve_flow(dense=None)` re-solves once for it), ``"linear"`` otherwise.
    - `xtol`: Brent's absolute time tolerance (> 0).

    **Returns:** gradient-flow times t = eta * steps, shape (p,), or (B, p) for a
    `SweepSolution` or batched trajectory. `nan` for modes whose target is <= 0 (e.g.
    z_k(inf) = 0; for eigenvalues computed from M, <= 16 p eps_mach max|eigenvalue|, the
    rounding level of a zero eigenvalue) or that do not reach rho x target within the
    trajectory; the first time (t0) for modes that start at or above it (e.g. a decaying mode
    with the default target), as `predicted_ignition_times` gives 0.

    **Raises:** `ValueError` for rho outside (0, 1), an unknown `quantity` or `refine`,
    ``quantity="z"`` without mode strengths (non-commuting data, `MapTrajectory`), ``refine=
    "brent"`` without dense output, a `target` of the wrong shape (the message names the
    expected and found shapes), non-finite `target`, both `target` and `z_inf`, xtol <= 0;
    `TypeError` for an unsupported `trajectory`; `RuntimeError` if JAX's float64 was turned off
    after importing nqf (`nqf._core._config.require_x64`).
    """
    require_x64()
    _check_rho(rho)
    _check_choice(quantity, "quantity", QUANTITIES)
    _check_choice(refine, "refine", REFINES)
    xtol = check_positive(xtol, "xtol")
    if target is not None and z_inf is not None:
        raise ValueError("Give the final values as `target` or as `z_inf` (its former name), not both.")
    name = "z_inf" if z_inf is not None else "target"
    target = z_inf if z_inf is not None else target
    series, batched = _series_of(trajectory, quantity, refine)
    levels = _targets(target, name, series, batched)
    out = np.stack([
        _first_crossings(s.t, s.values, rho * lvl, direction=(lvl > s.floor).astype(float), at=s.at,
                         how=s.how, xtol=xtol)
        for s, lvl in zip(series, levels)
    ])
    return out if batched else out[0]


class _Series(NamedTuple):
    """The mode values of one trajectory at its sample times, and its dense output (or None)."""

    t: np.ndarray  # (n,) sample times (gradient-flow time), non-decreasing
    values: np.ndarray  # (n, p) mode values at t
    final: np.ndarray  # (p,) the default target
    at: Callable | None  # t (k,) -> (k, p) mode values by dense output; None: samples only
    how: str  # how crossings are located (`_first_crossings`): "brent", "linear" or "step"
    floor: float = 0.0  # targets at or below this rounding level count as 0 (never ignite)


def _check_rho(rho) -> None:
    if not 0.0 < rho < 1.0:
        raise ValueError(f"`rho` must lie in (0, 1); found {rho!r}.")


def _check_choice(value, name: str, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}; found {value!r}.")


def _descending_eigenvalues(M) -> np.ndarray:
    """Eigenvalues of the symmetric matrices M (..., p, p) in decreasing order, (..., p)."""
    return np.linalg.eigvalsh(np.asarray(M))[..., ::-1]


def _rounding_level(eigenvalues) -> float:
    """16 p eps_mach max|eigenvalue| over a series (n, p): below it a computed eigenvalue of M
    cannot be told from 0 (eigvalsh's backward error is O(p eps_mach |M|)), so a mode whose
    target is there never ignites (a zero mode of a rank-deficient M, say)."""
    return 16 * eigenvalues.shape[-1] * np.finfo(float).eps * float(np.abs(eigenvalues).max(initial=0.0))


def _series_of(trajectory, quantity: str, refine: str) -> tuple[list[_Series], bool]:
    """The series of each trajectory in `trajectory` and whether it is a batch."""
    if isinstance(trajectory, SweepSolution):
        return [_flow_series(m, quantity, refine) for m in trajectory], True
    if isinstance(trajectory, FlowSolution):
        return [_flow_series(trajectory, quantity, refine)], False
    times = getattr(trajectory, "t", getattr(trajectory, "ts", None))
    if times is not None and (hasattr(trajectory, "M") or hasattr(trajectory, "z")):
        return _discrete_series(trajectory, times, quantity, refine)
    raise TypeError(
        "`trajectory` must be a FlowSolution, SweepSolution, MapTrajectory, WTrajectory or "
        "GLVTrajectory (or have times `t` or `ts` and `M` or `z`); found "
        f"{type(trajectory).__name__}."
    )


def _has_dense(sol: FlowSolution) -> bool:
    """True if `sol` has dense output (`solve_flow(dense=True)`, or the default dense=None)."""
    try:
        sol.step_times
    except ValueError:  # solved with dense=False
        return False
    return True


def _flow_quantity(sol: FlowSolution, quantity: str) -> str:
    """`quantity` of a flow resolved: "z" (commuting data) or "eigenvalues"."""
    commuting = isinstance(sol.data, AbstractCommutingData)
    if quantity == "z" and not commuting:
        raise ValueError(
            "quantity='z' (mode strengths z_k) needs commuting data (`CommutingData`, "
            f"`DiagonalData`); found {type(sol.data).__name__}. Use quantity='eigenvalues' "
            "(the eigenvalues of M(t))."
        )
    return ("z" if commuting else "eigenvalues") if quantity == "auto" else quantity


def _flow_series(sol: FlowSolution, quantity: str, refine: str) -> _Series:
    quantity = _flow_quantity(sol, quantity)
    dense = refine in ("auto", "brent") and _has_dense(sol)  # (builds the dense output if needed)
    if refine == "brent" and not dense:
        raise ValueError(
            "refine='brent' needs the dense output of the flow; this solution was solved with "
            "dense=False. Solve with dense=None (default) or True, or use refine='linear'."
        )
    if dense:
        at = sol.z_at if quantity == "z" else (lambda t: _descending_eigenvalues(sol.M_at(t)))
        t, how = sol.step_times, "brent"
        values, final = at(t), at(np.asarray(sol.ts)[-1:])[0]
    else:
        at, how = None, "linear" if refine == "auto" else refine
        t, values = np.asarray(sol.ts), (sol.z if quantity == "z" else _descending_eigenvalues(sol.M))
        final = values[-1]
    z_inf = sol.z_inf if quantity == "z" else None
    return _Series(t, values, final if z_inf is None else z_inf, at, how,
                   0.0 if quantity == "z" else _rounding_level(values))


def _discrete_series(traj, times, quantity: str, refine: str) -> tuple[list[_Series], bool]:
    """Series of a trajectory saved at discrete times `times` (`t` = lr * steps of a discrete
    map, or `ts` of a sampled solution) with `M` or `z`, batched or not."""
    kind = type(traj).__name__
    if refine == "brent":
        raise ValueError(
            f"refine='brent' needs dense output, which a {kind} (saved at discrete times) does not "
            "have; use refine='linear' (default) or 'step'."
        )
    z = getattr(traj, "z", None)
    if quantity == "auto":
        quantity = "z" if z is not None else "eigenvalues"
    from_M = quantity == "eigenvalues" and getattr(traj, "M", None) is not None
    if quantity == "z":
        if z is None:
            raise ValueError(
                f"quantity='z' (mode strengths z_k) needs a trajectory of commuting data that "
                f"records z (a GLVTrajectory); this {kind} has M only. Use quantity='eigenvalues'."
            )
        values = np.asarray(z, dtype=float)
    elif from_M:
        values = _descending_eigenvalues(np.asarray(traj.M, dtype=float))
    else:  # M = P diag(z) P^T: its eigenvalues are the sorted z
        values = -np.sort(-np.asarray(z, dtype=float), axis=-1)
    batched = values.ndim == 3
    values = values if batched else values[None]
    t = np.asarray(times, dtype=float)
    t = np.broadcast_to(t, values.shape[:2]) if t.shape == values.shape[1:2] else t
    if t.shape != values.shape[:2]:
        raise ValueError(
            f"The {kind}'s saved times must have shape {shape_str(values.shape[1:2])} or "
            f"{shape_str(values.shape[:2])} to match its saved states; found {shape_str(t.shape)}."
        )
    how = "linear" if refine == "auto" else refine
    return [_Series(tb, vb, vb[-1], None, how, _rounding_level(vb) if from_M else 0.0)
            for tb, vb in zip(t, values)], batched


def _targets(target, name: str, series: list[_Series], batched: bool) -> np.ndarray:
    """The target of each series, (B, p): the given `target` checked, or each series' default."""
    B, p = len(series), series[0].values.shape[1]
    if target is None:
        return np.stack([s.final for s in series])
    arr = np.asarray(as_array(target, name, host=True))
    if arr.shape == (p,) or (batched and arr.shape == (B, p)):
        return np.broadcast_to(arr, (B, p))
    want = f"({p},) (one final value per mode)" + (f" or ({B}, {p}) (one row per member)" if batched else "")
    raise ValueError(f"`{name}` must have shape {want}; found {shape_str(arr.shape)}.")


def _first_crossings(t, values, level, *, direction=1.0, at=None, how: str = "linear",
                     xtol: float = 1e-12) -> np.ndarray:
    """First times at which the columns of `values` (n, k), sampled at times `t` (n,), reach
    `level` (k,) (upward for `direction` +1, downward for -1, never for 0; (k,) or scalar).

    The crossing is bracketed between the last sample below and the first at or above the level
    and located by `how`: ``"linear"`` interpolation of the samples, ``"step"`` the first sample
    at or above, or ``"brent"``: Brent's method on `at` (t (1,) -> (1, k), the dense output that
    produced the samples) to absolute tolerance `xtol`. A column already at or above the level
    at t[0] gives t[0]; one that never reaches it, or has direction 0, gives nan. Returns (k,).
    """
    t = np.asarray(t, float)
    f = np.asarray(values, float)
    f = f[:, None] if f.ndim == 1 else f
    level = np.broadcast_to(np.asarray(level, float), f.shape[1:])
    sgn = np.broadcast_to(np.asarray(direction, float), f.shape[1:])
    g = (f - level) * sgn
    above = g >= 0
    hit = above.any(axis=0) & (sgn != 0)
    i = np.argmax(above, axis=0)
    lo = np.maximum(i - 1, 0)
    cols = np.arange(f.shape[1])
    g0, g1 = g[lo, cols], g[i, cols]
    if how == "step":
        out = t[i]
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(i > 0, t[lo] + (t[i] - t[lo]) * (-g0) / (g1 - g0), t[0])
    if how == "brent":
        for j in np.flatnonzero(hit & (i > 0)):
            fj = lambda s, j=j: float((at(np.array([s]))[0, j] - level[j]) * sgn[j])  # noqa: E731
            out[j] = scipy.optimize.brentq(fj, t[lo[j]], t[i[j]], xtol=xtol, rtol=4 * np.finfo(float).eps)
    return np.where(hit, out, np.nan)
