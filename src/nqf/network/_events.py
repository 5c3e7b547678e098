"""Event times of a training run for `nqf.predict`, `Prediction.with_targets` and `nqf.compare`:
the ignition targets, the modes that grow, their ignition times, the plateau levels, the drop and
half-drop times and the end of the learning phase, each read at the run's own resolution.

A run's curves (`Curves`, from `curves_of`) are, by what the trajectory holds:

- ``"dense"``: a flow (`FlowSolution`) with dense output: every time is located by Brent's
  method on the dense state (`nqf.drop_times`, `nqf.measure_ignition_times` with
  ``refine="brent"``), to 1e-12 in time;
- ``"step"``: a discrete run with values after every step (`MapTrajectory.step_loss`,
  `step_eigenvalues` of `closed_sgd(step_values=...)`, the same on a `Recording`): linear
  interpolation between consecutive steps (t = lr j), the map's own resolution;
- ``"loss-step"``: the loss after every step, the eigenvalues at the saved steps (``"auto"`` for
  p > 128): loss times at one step's resolution, ignition times between saved steps;
- ``"saved"``: only the saved steps (minibatch runs by default, or a trajectory without per-step
  values): linear interpolation between saved steps, whose spacing then bounds the time error.

Times are gradient-flow times t = lr * steps.

**Any loss.** Nothing here assumes MSE: the events are read off the run's own loss curve (the
mean over inputs of its ell, `nqf.dynamics._losses`) and eigenvalues of M. For cross-entropy
the loss starts near log k at small init (f ~ 0) and, on separable data, tends to L_inf = 0
with the weights growing without bound (no asymptote: `nqf.predict` uses the horizon's loss as
L_inf); the half-drop time is when L falls half-way from L(0) to that horizon loss, the phase
end when L - L_inf <= phase_tol (L(0) - L_inf), both nan while the curve is `still_falling` at
the horizon (a slowly decaying cross-entropy tail often is: lengthen the horizon); ignition
targets and times are defined on M exactly as for MSE.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np

from .._core._errors import NQFWarning
from ..solvers import FlowSolution
from ..theory import drop_times, learning_phase_end, measure_ignition_times, plateau_levels
from ..theory._ignition import _first_crossings, _has_dense, _rounding_level

TARGETS = ("phase_end", "asymptote", "horizon")


class HorizonWarning(NQFWarning):
    """A prediction's horizon does not cover what was asked: the learning phase does not end
    within it, or the map's learning rate is at its stability edge."""


class Curves(NamedTuple):
    """The curves events are read from: the loss at `t_loss` (n,), the eigenvalues of M in
    decreasing order at `t_eig` (n', p), the flow whose dense output locates events (or None:
    linear interpolation between the samples) and the `resolution` (module docstring)."""

    t_loss: np.ndarray
    loss: np.ndarray
    t_eig: np.ndarray
    eigenvalues: np.ndarray
    flow: FlowSolution | None
    resolution: str


def _descending(M) -> np.ndarray:
    return np.linalg.eigvalsh(np.asarray(M, dtype=float))[..., ::-1]


def curves_of(trajectory: Any, eigenvalues: np.ndarray | None = None) -> Curves:
    """The `Curves` of a `FlowSolution` (dense output where it has one), or of a discrete run with
    saved `t`, `loss`, `M` (`MapTrajectory`, `Recording`, `WTrajectory`) and, where present, the
    per-step `step_loss` / `step_eigenvalues` with their `step_times`. `eigenvalues` (n, p): the
    saved states' eigenvalues in decreasing order when the caller has them (one eigvalsh per
    saved state, O(n p^3), not done twice)."""
    if isinstance(trajectory, FlowSolution):
        eig = _descending(trajectory.M) if eigenvalues is None else eigenvalues
        t, loss = np.asarray(trajectory.ts, float), np.asarray(trajectory.loss, float)
        dense = _has_dense(trajectory)
        return Curves(t, loss, t, eig, trajectory if dense else None, "dense" if dense else "saved")
    t, loss = np.asarray(trajectory.t, float), np.asarray(trajectory.loss, float)
    t_eig, eig = t, None
    step_loss = getattr(trajectory, "step_loss", None)
    step_eig = getattr(trajectory, "step_eigenvalues", None)
    if step_loss is not None:
        t, loss = np.asarray(trajectory.step_times, float), np.asarray(step_loss, float)
    if step_eig is not None:
        t_eig, eig = np.asarray(trajectory.step_times, float), np.asarray(step_eig, float)
    if eig is None:
        eig = getattr(trajectory, "eigenvalues", None) if eigenvalues is None else eigenvalues
        eig = _descending(trajectory.M) if eig is None or not isinstance(eig, np.ndarray) else eig
    resolution = "step" if step_eig is not None else "loss-step" if step_loss is not None else "saved"
    return Curves(t, loss, t_eig, eig, None, resolution)


def _loss_curve(c: Curves) -> tuple:
    """The positional arguments of the `nqf.theory` loss-curve functions for `c`."""
    return (c.flow, None) if c.flow is not None else (c.t_loss, c.loss)


def drops(c: Curves, levels) -> np.ndarray:
    """`nqf.drop_times` of the loss curve of `c` between the plateau `levels` (K + 1,), (K,).
    A drop between levels that do not decrease (a flat NQF, a loss that oscillates with momentum
    or rises in a catapult) or that are not finite has no time: nan there, the others measured."""
    levels = np.asarray(levels, dtype=float)
    ok = np.isfinite(levels[:-1]) & np.isfinite(levels[1:]) & (np.diff(levels) < 0)
    if ok.all():
        return np.asarray(drop_times(*_loss_curve(c), levels=levels), dtype=float)
    out = np.full(levels.size - 1, np.nan)
    for i in np.flatnonzero(ok):
        out[i] = float(np.asarray(drop_times(*_loss_curve(c), levels=levels[i : i + 2]))[0])
    return out


def phase_end(c: Curves, final_loss: float, tol: float) -> float:
    """`nqf.learning_phase_end` of the loss curve of `c` (L_inf = min(`final_loss`, L(0)))."""
    return learning_phase_end(*_loss_curve(c), final_loss=min(final_loss, float(c.loss[0])), tol=tol)


def still_falling(c: Curves, tol: float) -> bool:
    """Without the NQF's limit the loss at the horizon T stands in for L_inf; it may do so only
    where the curve has flattened: L(T/2) - L(T) <= tol (L(0) - L(T)). True where it has not (the
    learning phase is not over, so its end, the half-drop time and the phase-end targets are not
    defined by this run)."""
    t, loss = np.asarray(c.t_loss, dtype=float), np.asarray(c.loss, dtype=float)
    L0, LT = float(loss[0]), float(loss[-1])
    mid = float(np.interp(0.5 * (t[0] + t[-1]), t, loss))
    return bool(mid - LT > tol * max(L0 - LT, 0.0))


def eigenvalues_at(c: Curves, time: float) -> np.ndarray:
    """The eigenvalues (p,) of M at `time`: the dense state of a flow, else linear interpolation."""
    if c.flow is not None:
        return _descending(c.flow.M_at(np.array([time])))[0]
    return np.array([np.interp(time, c.t_eig, col) for col in c.eigenvalues.T])


def growing_modes(c: Curves, targets: np.ndarray, rho: float) -> np.ndarray:
    """The modes (p,) bool that start below rho x their target, a target above the rounding level
    of a zero eigenvalue (16 p eps max|eigenvalue|)."""
    return (c.eigenvalues[0] < rho * targets) & (targets > _rounding_level(c.eigenvalues))


def ignition(c: Curves, targets: np.ndarray, rho: float, growing: np.ndarray) -> np.ndarray:
    """When each mode in `growing` first reaches rho x its target (nan for the others and for a
    mode that does not get there within the run), (p,)."""
    if c.flow is not None:
        times = measure_ignition_times(c.flow, rho=rho, target=targets, quantity="eigenvalues", modes=growing)
        return np.asarray(times, dtype=float)
    up = (targets > _rounding_level(c.eigenvalues)).astype(float)
    times = _first_crossings(c.t_eig, c.eigenvalues, rho * targets, direction=up, how="linear")  # pyright: ignore[reportArgumentType]
    return np.where(growing, times, np.nan)


def check_target(target, p: int):
    """`target` checked: one of `TARGETS`, or finite values (p,) returned as a float array."""
    if isinstance(target, str):
        if target not in TARGETS:
            raise ValueError(f"`target` must be one of {TARGETS} or an array of {p} values; found {target!r}.")
        return target
    values = np.array(target, dtype=float)
    if values.shape != (p,) or not np.all(np.isfinite(values)):
        raise ValueError(
            f"`target` given as values must be a finite array of shape ({p},) (one per eigenvalue of M); found "
            f"shape {values.shape}{'' if values.shape != (p,) else ' with non-finite entries'}."
        )
    return values


def _targets(target, asym, c: Curves, end: float) -> tuple[np.ndarray, str]:
    """(the ignition targets (p,), where they come from: "phase_end", "horizon", "asymptote" or
    "given")."""
    target = check_target(target, c.eigenvalues.shape[1])
    if not isinstance(target, str):
        return target, "given"
    if target == "asymptote":
        return np.asarray(asym.eigenvalues, dtype=float), "asymptote"
    if target == "phase_end" and np.isfinite(end):
        return eigenvalues_at(c, end), "phase_end"
    return c.eigenvalues[-1].copy(), "horizon"


def events(c: Curves, *, target, rho: float, phase_tol: float, final_loss: float, asym=None) -> dict:
    """The event fields of a `Prediction` from its curves: ``targets``, ``targets_from``,
    ``growing``, ``ignition_times``, ``plateau_levels``, ``drop_times``, ``half_drop_time`` and
    ``phase_end`` (see `Prediction`). With ``target="phase_end"`` and a learning phase that does
    not end within the horizon the targets are the values at the horizon (``targets_from`` =
    ``"horizon"``), with a `HorizonWarning` that says so. Without `asym` (no limit: `final_loss`
    is the loss at the horizon) a curve that is `still_falling` has no phase end and no
    half-drop time (nan): the horizon's loss is not its final loss."""
    unfinished = asym is None and still_falling(c, phase_tol)
    end = float("nan") if unfinished else phase_end(c, final_loss, phase_tol)
    targets, source = _targets(target, asym, c, end)
    if isinstance(target, str) and source != target:
        warnings.warn(
            f"The NQF's learning phase (L - L_inf <= {phase_tol:g} (L(0) - L_inf), L_inf = {final_loss:.4g}) does "
            f"not end within the horizon t = {c.t_loss[-1]:g}: the ignition targets are the eigenvalues at the "
            "horizon (targets_from='horizon'), so the ignition times are those of a run cut there. Extend the "
            "horizon for targets that do not depend on it, or re-target (Prediction.with_targets).",
            HorizonWarning,
            stacklevel=3,
        )
    growing = growing_modes(c, targets, rho)
    ign = ignition(c, targets, rho, growing)
    levels = plateau_levels(*_loss_curve(c), ignition_times=ign[growing], final=final_loss)
    half = float("nan") if unfinished else drops(c, np.array([c.loss[0], final_loss]))[0]
    return dict(
        targets=targets,
        targets_from=source,
        growing=growing,
        ignition_times=ign,
        plateau_levels=levels,
        drop_times=drops(c, levels),
        half_drop_time=float(half),
        phase_end=float(end),
    )
