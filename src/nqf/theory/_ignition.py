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

Loss curves: `drop_times` (the time of each plateau-to-plateau drop), `plateau_levels` (the
plateaus of a curve from its ignition times) and `learning_phase_end` (when the loss is within a
fraction of its asymptote), located the same way.

Times are gradient-flow times t = eta * (number of GD steps) throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from jaxtyping import ArrayLike, Bool, Float

from .._core._checks import as_array, check_positive, shape_str
from .._core._config import require_x64
from ..data._operators import AbstractCommutingData
from ..dynamics._flow import _saved_losses
from ..dynamics._maps import MapTrajectory
from ..dynamics._wspace import WTrajectory
from ..solvers._solve import FlowSolution
from ..solvers._sweep import SweepSolution
from ._asymptote import Asymptote, check_no_weight_decay, of_flow

__all__ = ["predicted_ignition_times", "measure_ignition_times", "drop_times", "plateau_levels", "learning_phase_end"]

QUANTITIES = ("auto", "z", "eigenvalues")
REFINES = ("auto", "brent", "linear", "step")
MODES = ("all", "growing")


def predicted_ignition_times(
    zeta: Float[ArrayLike, " p"],
    C: Float[ArrayLike, " p"],
    z0: Float[ArrayLike, " p"],
    *,
    rho: float = 0.5,
    a: float = 1.0,
    weight_decay: float = 0.0,
) -> Float[np.ndarray, " p"]:
    """t*_k = 1/(a zeta_k) ln( (zeta_k - C_k z_k(0)) rho / (C_k z_k(0) (1 - rho)) ) (Eq. E19).

    With z_k(0) = c_k eps this is E19's (1/(a zeta)) ln(1/eps) - (1/(a zeta)) ln(C c /(zeta - C c
    eps) (1 - rho)/rho). Exact for the logistic solutions of Theorems 6, 7 and 16 (the mode
    z' = a (zeta z - C z^2) reaches rho z(inf), z(inf) = zeta / C).

    Weight decay gamma (penalty gamma/2 |W|^2, nqf's convention, as in `nqf.solve_flow`) adds
    -2 gamma z to z', i.e. zeta_k -> zeta_k - 2 gamma / a in the formula above and in z(inf):
    r_k - 2 gamma for Theorem 6 (a = 1), g_k - gamma for Theorem 7 (a = 2). Modes with
    a zeta_k <= 2 gamma never ignite (`inf`). The paper's "-gamma M" (Sec. 4, Appendix B.3) and
    its threshold r_k - gamma (Sec. 9) are -2 gamma M and r_k - 2 gamma here: its gamma is twice
    nqf's.

    **Arguments:** `zeta` (p,) growth rates, `C` (p,) self-competition, `z0` (p,) initial mode
    strengths (broadcastable); `rho` in (0, 1); `a` = 1 (Theorem 6) or 2 (Theorem 7);
    `weight_decay` gamma >= 0.

    **Returns:** times of shape (p,) in gradient-flow time: `inf` for modes that never ignite
    (zeta - 2 gamma / a <= 0 or C = 0, or z0 = 0) and 0 for modes already at or above rho z(inf).

    **Raises:** `ValueError` for rho outside (0, 1), a <= 0, negative C, z0 or `weight_decay`,
    non-finite input, or shapes of `zeta`, `C`, `z0` that do not broadcast (naming them).
    """
    args = [np.asarray(as_array(v, n)) for v, n in ((zeta, "zeta"), (C, "C"), (z0, "z0"))]
    try:
        zeta, C, z0 = np.broadcast_arrays(*args)
    except ValueError:
        shapes = ", ".join(f"{n} {v.shape}" for n, v in zip(("zeta", "C", "z0"), args))
        raise ValueError(
            f"`zeta`, `C` and `z0` must have the same shape (p,) (or broadcast to it, e.g. a scalar); found {shapes}."
        ) from None
    _check_rho(rho)
    if not a > 0:
        raise ValueError(f"`a` must be > 0 (1 for Theorem 6, 2 for Theorem 7); found {a!r}.")
    gamma = check_positive(weight_decay, "weight_decay", allow_zero=True)
    zeta = zeta - 2.0 * gamma / a  # weight decay: z' = (a zeta - 2 gamma) z - a C z^2
    for v, n, what in ((C, "C", "self-competition"), (z0, "z0", "initial mode strength")):
        if np.any(v < 0):
            raise ValueError(f"`{n}` ({what}) must be >= 0; found minimum {v.min():.3g}.")
    ignites = (zeta > 0) & (C > 0) & (z0 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        arg = (zeta - C * z0) * rho / (C * z0 * (1.0 - rho))
        t = np.log(arg) / (a * zeta)
    return np.where(ignites, np.where(arg > 1.0, t, 0.0), np.inf)


def measure_ignition_times(
    trajectory: FlowSolution | SweepSolution | MapTrajectory | WTrajectory | Any,
    *,
    rho: float = 0.5,
    target: Float[ArrayLike, "*batch p"] | Asymptote | str | None = None,
    quantity: str = "auto",
    refine: str = "auto",
    xtol: float = 1e-12,
    z_inf: Float[ArrayLike, "*batch p"] | None = None,
    modes: str | Bool[ArrayLike, "*batch p"] = "all",
) -> Float[np.ndarray, "*batch p"]:
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
    - `target`: the final values whose fraction rho is crossed: an array (p,), or (B, p) for a
      batch (one row per member; (p,) is shared); an `nqf.Asymptote` (`nqf.asymptote`: its `z`
      for ``"z"``, its `eigenvalues` for ``"eigenvalues"``; shared by a batch); or the string
      ``"asymptote"``: the flow's own limit t -> inf, `nqf.asymptote` of its model and initial
      condition (flows and sweep members only; each member its own), which does not depend on
      the horizon. Default (None): for ``"z"`` on a flow the GLV equilibrium z(inf)
      (`FlowSolution.z_inf`, the convention of E19: `nqf.glv_equilibrium`, which is the flow's
      limit when the minimizer of the loss over z >= 0 is unique, e.g. with orthogonal
      features; ``"asymptote"`` is the flow's limit in every case); otherwise (and where z(inf)
      is not defined, e.g. a model with g, B) the values at the last saved time `ts[-1]` (flows)
      or the last saved step (discrete). That default depends on the horizon: a mode still
      growing at `ts[-1]` has a smaller target, hence an earlier time, with a shorter horizon
      (use ``target="asymptote"`` or an `Asymptote` for a horizon-independent target).
      `z_inf`: the same argument under its former name (give one).
    - `modes`: which modes get a time. ``"all"`` (default): every mode (a mode already at or
      above rho x target at the first time gets that time, t0). ``"growing"``: only the modes
      that grow into their target, i.e. whose value at the first time is below rho x target
      (and whose target is above the rounding level); the others get `nan` (so a mode that
      never grows is `nan`, not t0). A boolean mask (p,), or (B, p) for a batch: the modes
      where it is True; the others get `nan`.
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
    trajectory, or that `modes` leaves out; with ``modes="all"`` the first time (t0) for modes
    that start at or above it (e.g. a decaying mode with the default target), as
    `predicted_ignition_times` gives 0 (``modes="growing"`` gives `nan` there).

    **Raises:** `ValueError` for rho outside (0, 1), an unknown `quantity`, `refine` or
    `modes`, a `modes` mask that is not boolean or of the wrong shape, ``quantity="z"`` without
    mode strengths (non-commuting data, `MapTrajectory`), ``refine="brent"`` without dense
    output, a `target` of the wrong shape (the message names the expected and found shapes),
    non-finite `target`, ``target="asymptote"`` on a trajectory that is not a flow (pass
    ``target=nqf.asymptote(model, ...)``) or on a flow with weight decay, an `Asymptote` target
    without `z` for ``"z"``, both `target` and `z_inf`, xtol <= 0; `TypeError` for an
    unsupported `trajectory`; those of `nqf.asymptote` for ``target="asymptote"``;
    `RuntimeError` if JAX's float64 was turned off after importing nqf
    (`nqf._core._config.require_x64`).
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
    if isinstance(trajectory, SweepSolution) and isinstance(target, str) and target == "asymptote":
        check_no_weight_decay(trajectory.settings)  # (its members do not record the sweep's settings)
    series, batched = _series_of(trajectory, quantity, refine)
    keep = _mode_mask(modes, series, batched)  # (B, p) or None; checked before any asymptote is computed
    levels = _targets(target, name, series, batched)
    out = np.stack(
        [
            _first_crossings(
                s.t, s.values, rho * lvl, direction=(lvl > s.floor).astype(float), at=s.at, how=s.how, xtol=xtol
            )
            for s, lvl in zip(series, levels)
        ]
    )
    if isinstance(modes, str) and modes == "growing":
        keep = np.stack([s.values[0] < rho * lvl for s, lvl in zip(series, levels)])
    if keep is not None:
        out = np.where(keep, out, np.nan)
    return out if batched else out[0]


class _Series(NamedTuple):
    """The mode values of one trajectory at its sample times, and its dense output (or None)."""

    t: np.ndarray  # (n,) sample times (gradient-flow time), non-decreasing
    values: np.ndarray  # (n, p) mode values at t
    final: np.ndarray  # (p,) the default target
    at: Callable | None  # t (k,) -> (k, p) mode values by dense output; None: samples only
    how: str  # how crossings are located (`_first_crossings`): "brent", "linear" or "step"
    floor: float = 0.0  # targets at or below this rounding level count as 0 (never ignite)
    quantity: str = "eigenvalues"  # what `values` are: "z" or "eigenvalues"
    flow: Any = None  # the FlowSolution the series comes from (target="asymptote"), or None


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
        _ = sol.step_times
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
    return _Series(
        t,
        values,
        final if z_inf is None else z_inf,
        at,
        how,
        0.0 if quantity == "z" else _rounding_level(values),
        quantity,
        sol,
    )


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
    return [
        _Series(tb, vb, vb[-1], None, how, _rounding_level(vb) if from_M else 0.0, quantity)
        for tb, vb in zip(t, values)
    ], batched


def _targets(target, name: str, series: list[_Series], batched: bool) -> np.ndarray:
    """The target of each series, (B, p): the given `target` checked, or each series' default."""
    B, p = len(series), series[0].values.shape[1]
    if target is None:
        return np.stack([s.final for s in series])
    if isinstance(target, str):
        if target != "asymptote":
            raise ValueError(f"`{name}` must be an array, an nqf.Asymptote or 'asymptote'; found {target!r}.")
        return np.stack([_asymptote_values(_flow_asymptote(s), s.quantity, name) for s in series])
    if isinstance(target, Asymptote):
        return np.stack([_asymptote_values(target, s.quantity, name) for s in series])
    arr = np.asarray(as_array(target, name, host=True))
    if arr.shape == (p,) or (batched and arr.shape == (B, p)):
        return np.broadcast_to(arr, (B, p))
    want = f"({p},) (one final value per mode)" + (f" or ({B}, {p}) (one row per member)" if batched else "")
    raise ValueError(f"`{name}` must have shape {want}; found {shape_str(arr.shape)}.")


def _flow_asymptote(s: _Series) -> Asymptote:
    if s.flow is None:
        raise ValueError(
            "target='asymptote' needs a flow (FlowSolution, or the members of a SweepSolution), whose model "
            "and initial condition define the limit; for a discrete trajectory pass "
            "target=nqf.asymptote(model, M0=...) (the limit of the flow from the same start)."
        )
    return of_flow(s.flow)


def _asymptote_values(asy: Asymptote, quantity: str, name: str) -> np.ndarray:
    """The final values of `quantity` ("z" or "eigenvalues") in an `Asymptote`."""
    if quantity == "z":
        if asy.z is None:
            raise ValueError(
                f"`{name}` is an Asymptote without mode strengths z (method={asy.method!r}: data that are not "
                "commuting); use quantity='eigenvalues'."
            )
        return np.asarray(asy.z, float)
    return np.asarray(asy.eigenvalues, float)


def _mode_mask(modes, series: list[_Series], batched: bool):
    """The `modes` argument checked: None ("all", "growing": decided later) or a (B, p) mask."""
    if isinstance(modes, str):
        _check_choice(modes, "modes", MODES)
        return None
    B, p = len(series), series[0].values.shape[1]
    arr = np.asarray(modes)
    want = f"({p},)" + (f" or ({B}, {p})" if batched else "")
    if arr.dtype != bool:
        raise ValueError(
            f"`modes` must be 'all', 'growing' or a boolean mask of shape {want}; found an array of dtype "
            f"{arr.dtype} (a mask selects modes with True; use np.isin for a list of mode indices)."
        )
    if arr.shape == (p,) or (batched and arr.shape == (B, p)):
        return np.broadcast_to(arr, (B, p))
    raise ValueError(f"`modes` (a boolean mask) must have shape {want}; found {shape_str(arr.shape)}.")


def _first_crossings(
    t, values, level, *, direction=1.0, at=None, how: str = "linear", xtol: float = 1e-12
) -> np.ndarray:
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
        import scipy.optimize  # on first use: ~0.3 s at import

        if at is None:
            raise ValueError("how='brent' needs `at`, the dense output that produced the samples.")

        for j in np.flatnonzero(hit & (i > 0)):
            fj = lambda s, j=j: float((at(np.array([s]))[0, j] - level[j]) * sgn[j])  # noqa: E731
            out[j] = scipy.optimize.brentq(fj, t[lo[j]], t[i[j]], xtol=xtol, rtol=4 * np.finfo(float).eps)
    return np.where(hit, out, np.nan)


# --------------------------------------------------------------------------------------------
# loss curves: drops between plateaus, plateau levels, the end of the learning phase
# --------------------------------------------------------------------------------------------


class _Curve(NamedTuple):
    """A loss curve: samples (t (n,), loss (n,)) and, for a flow with dense output, the loss at
    any time (t (k,) -> (k,)) and how crossings are located."""

    t: np.ndarray
    loss: np.ndarray
    at: Callable | None
    how: str


def _flow_loss_at(sol: FlowSolution) -> Callable:
    """t (k,) -> the loss (k,) of a flow by its dense output (the state of its form at t)."""
    general = sol.form == "M-mu" and sol.model is not None
    args = (sol.model if general else sol.data, 0.0, sol.d if sol.form == "M-mu" else sol._mask)
    one = lambda y: _saved_losses(0.0, y, args, form=sol.form, z_star=None, grad=None)["loss"]  # noqa: E731
    return lambda t: np.asarray(jax.vmap(one)(sol.evaluate(t)))


def _loss_curve(trajectory, loss, refine: str) -> _Curve:
    """The loss curve of `trajectory` (a flow, a discrete trajectory with `t`/`ts` and `loss`)
    or of the arrays (`trajectory` = t, `loss`), checked."""
    _check_choice(refine, "refine", REFINES)
    if loss is not None:
        t, values = trajectory, loss
    elif isinstance(trajectory, SweepSolution):
        raise TypeError(
            "A SweepSolution holds B loss curves: measure each member, e.g. "
            "[nqf.drop_times(member, levels=...) for member in sweep]."
        )
    elif isinstance(trajectory, FlowSolution):
        dense = refine in ("auto", "brent") and _has_dense(trajectory)
        if refine == "brent" and not dense:
            raise ValueError(
                "refine='brent' needs the dense output of the flow; this solution was solved with "
                "dense=False. Solve with dense=None (default) or True, or use refine='linear'."
            )
        if dense:
            at = _flow_loss_at(trajectory)
            t = trajectory.step_times
            return _Curve(t, _checked_curve(t, at(t))[1], at, "brent")
        t, values = np.asarray(trajectory.ts), trajectory.loss
    else:
        t = getattr(trajectory, "t", getattr(trajectory, "ts", None))
        values = getattr(trajectory, "loss", None)
        if t is None or values is None:
            raise TypeError(
                "`trajectory` must be a FlowSolution, an object with times `t` or `ts` and `loss` (MapTrajectory, "
                f"WTrajectory, GLVTrajectory), or the times with `loss` given; found {type(trajectory).__name__}."
            )
    if refine == "brent":
        raise ValueError("refine='brent' needs a flow with dense output; use refine='linear' (default) or 'step'.")
    t, values = _checked_curve(t, values)
    return _Curve(t, values, None, "linear" if refine == "auto" else refine)


def _checked_curve(t, loss) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(as_array(t, "t", ndim=1, host=True))
    loss = np.asarray(as_array(loss, "loss", ndim=1, host=True))
    if t.size == 0 or loss.shape != t.shape:
        raise ValueError(
            f"`t` and `loss` must be non-empty 1-d arrays of the same length; found shapes "
            f"{shape_str(t.shape)} and {shape_str(loss.shape)}."
        )
    if np.any(np.diff(t) < 0):
        i = int(np.argmax(np.diff(t) < 0))
        raise ValueError(f"`t` must be non-decreasing; found t[{i}] = {t[i]} > t[{i + 1}] = {t[i + 1]}.")
    return t, loss


def _down_crossings(curve: _Curve, levels, xtol: float) -> np.ndarray:
    """First times (k,) at which the loss falls to each level (k,) (nan if never)."""
    levels = np.atleast_1d(np.asarray(levels, float))
    k = levels.size
    cols = np.repeat(curve.loss[:, None], k, axis=1)
    curve_at = curve.at
    at = None if curve_at is None else (lambda s: np.repeat(curve_at(s)[:, None], k, axis=1))
    return _first_crossings(curve.t, cols, levels, direction=-1.0, at=at, how=curve.how, xtol=xtol)


def _final_loss(final, name: str) -> float:
    value = final.loss if isinstance(final, Asymptote) else final
    value = np.asarray(as_array(value, name, host=True))
    if value.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar loss or an nqf.Asymptote; found shape {shape_str(value.shape)}.")
    return float(value)


def drop_times(
    trajectory: FlowSolution | MapTrajectory | WTrajectory | Float[ArrayLike, " nt"] | Any,
    loss: Float[ArrayLike, " nt"] | None = None,
    *,
    levels: Float[ArrayLike, " k+1"],
    refine: str = "auto",
    xtol: float = 1e-12,
) -> Float[np.ndarray, " k"]:
    """Times of the plateau-to-plateau drops of a loss curve.

    Given plateau levels L_0 > L_1 > ... > L_n (e.g. from a prediction: the loss on each
    plateau, `plateau_levels`, and the asymptotic loss, `nqf.asymptote`), drop k (k = 0..n-1)
    happens at the first time the loss falls to the midpoint (L_k + L_{k+1}) / 2. The loss of a
    gradient flow never increases, so "first" is unambiguous there.

    **Arguments:**

    - `trajectory`: a `FlowSolution` (`solve_flow`), a trajectory with times `t` or `ts` and
      `loss` (`MapTrajectory`, `WTrajectory`, `GLVTrajectory`), or the times t (n,) with the
      loss curve given as `loss` (n,).
    - `levels` (n + 1,): the plateau levels, strictly decreasing, finite, n >= 1.
    - `refine`: ``"brent"`` (a flow with dense output: bracketed on the solver's accepted steps
      and refined by Brent's method on the loss of the dense state, to absolute time tolerance
      `xtol`), ``"linear"`` (linear interpolation between samples), ``"step"`` (the first sample
      at or below), ``"auto"`` (default: ``"brent"`` where there is dense output, else
      ``"linear"``).

    **Returns:** the n drop times, shape (n,), in gradient-flow time t = eta * steps (a discrete
    trajectory's `t`); `nan` for a drop the curve never reaches; t[0] if the curve starts at or
    below the midpoint.

    **Raises:** `ValueError` for levels that are not strictly decreasing, fewer than 2 levels,
    non-finite levels, times or losses, times not non-decreasing, `t` and `loss` of different
    lengths, ``refine="brent"`` without dense output, an unknown `refine`, xtol <= 0;
    `TypeError` for an unsupported `trajectory` (a `SweepSolution`: measure each member).
    """
    require_x64()
    xtol = check_positive(xtol, "xtol")
    lv = np.asarray(as_array(levels, "levels", ndim=1, host=True))
    if lv.size < 2:
        raise ValueError(f"`levels` must hold at least 2 plateau levels (one drop); found {lv.size}.")
    if np.any(np.diff(lv) >= 0):
        i = int(np.argmax(np.diff(lv) >= 0))
        raise ValueError(
            f"`levels` must be strictly decreasing (L_0 > L_1 > ...); found levels[{i}] = {lv[i]} <= "
            f"levels[{i + 1}] = {lv[i + 1]}."
        )
    curve = _loss_curve(trajectory, loss, refine)
    return _down_crossings(curve, 0.5 * (lv[:-1] + lv[1:]), xtol)


def plateau_levels(
    trajectory: FlowSolution | MapTrajectory | WTrajectory | Float[ArrayLike, " nt"] | Any,
    loss: Float[ArrayLike, " nt"] | None = None,
    ignition_times: Float[ArrayLike, " k"] | None = None,
    final: float | Asymptote | None = None,
) -> Float[np.ndarray, " k+1"]:
    """The plateau levels of a loss curve with known ignition times: the loss before the first
    ignition, on each plateau between consecutive ignitions, and the asymptote.

    With ignition times t_1 < ... < t_n (measured from the curve's start t_0), the plateau between
    t_k and t_{k+1} is read at their harmonic mean h_k = 2 / (1/t_k + 1/t_{k+1}). Why the harmonic
    mean: after drop k the loss relaxes like exp(-zeta_k (t - t_k)), before drop k + 1 it departs
    like exp(zeta_{k+1} (t - t_{k+1})), and the ignition times are t_k = ln(1/eps) / (a zeta_k) to
    leading order (Eq. E19); the time where both deviations are equally small (the minimax
    point) is (zeta_k t_k + zeta_{k+1} t_{k+1}) / (zeta_k + zeta_{k+1}) = h_k. The geometric mean
    (midpoint on a log-time plot) lies later, closer to the next drop.

    **Arguments:**

    - `trajectory`, `loss`: the curve, as in `drop_times` (a flow with dense output is read by
      its dense output, samples by linear interpolation).
    - `ignition_times` (n,): e.g. `predicted_ignition_times` or `measure_ignition_times`;
      non-finite entries (modes that never ignite) are left out, equal ones count once. The
      finite ones must lie in (t_0, t_end] of the curve.
    - `final`: the asymptotic loss (a number, or an `nqf.Asymptote`: its `loss`).

    **Returns:** the levels [L(t_0), L(h_1), ..., L(h_{n-1}), final], shape (n + 1,) for n
    distinct finite ignition times (not checked to decrease: `drop_times` checks).

    **Raises:** `ValueError` for missing `ignition_times` or `final`, ignition times outside
    (t_0, t_end], non-finite or non-scalar `final`, and the curve errors of `drop_times`.
    """
    require_x64()
    if ignition_times is None or final is None:
        raise ValueError("`ignition_times` (n,) and `final` (the asymptotic loss) are required.")
    curve = _loss_curve(trajectory, loss, "auto")
    times = np.asarray(as_array(ignition_times, "ignition_times", ndim=1, finite=False, host=True))
    tk = np.unique(times[np.isfinite(times)])
    t0, t_end = curve.t[0], curve.t[-1]
    if tk.size and (tk[0] <= t0 or tk[-1] > t_end):
        raise ValueError(
            f"`ignition_times` must lie in (t_0, t_end] = ({t0:g}, {t_end:g}] of the curve; found range "
            f"[{tk[0]:g}, {tk[-1]:g}]."
        )
    rel = tk - t0
    h = t0 + 2.0 * rel[:-1] * rel[1:] / (rel[:-1] + rel[1:])
    inside = curve.at(h) if curve.at is not None and h.size else np.interp(h, curve.t, curve.loss)
    return np.concatenate([[curve.loss[0]], inside, [_final_loss(final, "final")]])


def learning_phase_end(
    trajectory: FlowSolution | MapTrajectory | WTrajectory | Float[ArrayLike, " nt"] | Any,
    loss: Float[ArrayLike, " nt"] | None = None,
    final_loss: float | Asymptote | None = None,
    tol: float = 0.02,
    *,
    refine: str = "auto",
    xtol: float = 1e-12,
) -> float:
    """The end of the learning phase: the first time t with L(t) - L_inf <= tol (L(t_0) - L_inf).

    **Arguments:** `trajectory`, `loss` as in `drop_times`; `final_loss` L_inf (a number, or an
    `nqf.Asymptote`: its `loss`; required); `tol` in (0, 1); `refine`, `xtol` as in
    `drop_times`.

    **Returns:** the time (gradient-flow time t = eta * steps), a float; `nan` if the curve never
    gets there; t_0 if L(t_0) = L_inf.

    **Raises:** `ValueError` for a missing or non-finite `final_loss`, one above the initial loss
    L(t_0) (a gradient flow's loss never rises, so it cannot be that curve's limit), tol outside
    (0, 1), and the curve errors of `drop_times`.
    """
    require_x64()
    if final_loss is None:
        raise ValueError("`final_loss` (the asymptotic loss L_inf, e.g. nqf.asymptote(...).loss) is required.")
    L_inf = _final_loss(final_loss, "final_loss")
    if not 0.0 < tol < 1.0:
        raise ValueError(f"`tol` must lie in (0, 1); found {tol!r}.")
    xtol = check_positive(xtol, "xtol")
    curve = _loss_curve(trajectory, loss, refine)
    L0 = float(curve.loss[0])
    if L_inf > L0:
        raise ValueError(
            f"`final_loss` = {L_inf:.6g} lies above the initial loss L(t_0) = {L0:.6g}: it is not the "
            "limit of this (non-increasing) loss curve."
        )
    return float(_down_crossings(curve, L_inf + tol * (L0 - L_inf), xtol)[0])
