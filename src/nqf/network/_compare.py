"""Predicted vs measured training: agreement, drop and ignition times, departure from the NQF.

`compare(prediction, recording)` puts a `nqf.Prediction` beside a measured run (`nqf.record`, or
any trajectory with times `t`, `loss` and `M`) on the measured run's saved times.

**Measurements** (each with the criterion it is judged by, fixed here, before any run):

- `gap` (n,): |L_measured(t) - L_predicted(t)| / L(0), L(0) the predicted initial loss (the
  predicted curve is interpolated linearly in t at the measured times);
- `phase_gap`: max of `gap` over the NQF's learning phase (t <= `Prediction.phase_end`, or the
  whole horizon if the phase does not end within it). Criterion: <= `gap_tol` (default the
  prediction's, 0.05).
- `departure_time`: the first measured time at which `gap` exceeds `gap_tol`: when the network
  leaves its NQF (inf if never within the run); beside it the prediction's a-priori
  `departure_estimate` (from the next terms of the expansion) and the estimate from the module at
  the NQF's weights.
- `half_drop_time` and `drop_times`: when the loss falls half-way from L(0) to the asymptotic
  loss, and from each predicted plateau to the next (`nqf.drop_times` with the prediction's
  `plateau_levels` for both curves). Criterion: relative difference <= `time_rtol` (default 5 %).
- `ignition_times`: of the prediction's growing modes, on the eigenvalues of the measured M(t)
  with the same targets (`Prediction.targets`, also after `Prediction.with_targets`).
  Criterion: every mode that ignites in the prediction ignites in the run, within `time_rtol`.
- `phase_end_measured`: the measured curve's end of the learning phase (the prediction's final
  loss and `phase_tol`), beside the predicted `phase_end` (no criterion: reported).

Every time is read at the run's own resolution (`nqf.network._events`): the measured loss and
eigenvalues after every step where the recording has them (`Recording.step_loss`,
`step_eigenvalues`: full batch by default), else its saved steps, linearly interpolated; the
prediction's by its dense output (flow) or per-step values (map). Both sides at step resolution,
the times differ by the model's error, not by an interpolation between different save grids.

`verdicts` holds one boolean per criterion, or None where it is not tested (no predicted drop or
growing mode, a recording that stops before the learning phase ends). A relative error is nan
where nothing was predicted and inf where the predicted event never happened in the run. `gap`
and `loss_predicted` are nan at measured times past the prediction's horizon. Times are
gradient-flow times t = lr * steps. `compare` warns when the recording does not start at the
prediction's W0 W0^T or trained the frozen arrays.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .._core._errors import NQFWarning
from .._core.io import Saveable
from . import _events, _heldout

if TYPE_CHECKING:
    import matplotlib.axes
    import matplotlib.figure

    from ..dynamics import MapTrajectory, WTrajectory
    from ._predict import Prediction
    from ._record import Recording

__all__ = ["Comparison", "compare"]


@dataclasses.dataclass(frozen=True, eq=False)
class Comparison(Saveable):
    """The result of `nqf.compare` (see `nqf.network` for each criterion).

    **Attributes:** `t` (n,) measured times; `loss_predicted`, `loss_measured`, `gap` (n,);
    `phase_end` (predicted), `phase_end_measured`, `phase_gap`; `departure_time` (measured), `departure_estimate` (next terms of
    the expansion), `departure_estimate_module` (module at the NQF's weights);
    `half_drop_time` (predicted, measured); `drop_times` (2, K) predicted / measured;
    `ignition_times` (2, p) predicted / measured (nan for modes that do not grow);
    `gap_tol`, `time_rtol`; `verdicts` {criterion: bool}; `prediction`, `recording`;
    `test_gap` (n,): |test L_meas - test L_pred| / test L_pred(0) and `test` (the summary's
    "test" entry), None without held-out data on both sides.

    **Methods:** `summary()` (a dict of plain numbers), `plot()` (a matplotlib Figure).
    """

    t: np.ndarray
    loss_predicted: np.ndarray
    loss_measured: np.ndarray
    gap: np.ndarray
    phase_end: float
    phase_end_measured: float
    phase_gap: float
    departure_time: float
    departure_estimate: float
    departure_estimate_module: float
    half_drop_time: np.ndarray
    drop_times: np.ndarray
    ignition_times: np.ndarray
    gap_tol: float
    time_rtol: float
    verdicts: dict
    prediction: object
    recording: object
    test_gap: np.ndarray | None = None
    test: dict | None = None

    def summary(self) -> dict:
        """Plain numbers: predicted and measured times, relative errors, gaps and verdicts;
        ``L0`` (the predicted L(0)), ``final_loss`` (predicted and measured at the last measured
        time inside the horizon, and the NQF's final loss L_inf), ``growing_modes`` (how many
        modes the prediction has growing), ``wall_time_s`` (predict and record, seconds; nan where
        not recorded), ``test`` (held-out data, `nqf.network._heldout.compare_test`; None without)."""
        ign = self.ignition_times
        grow = np.isfinite(ign[0])
        pred, rec = self.prediction, self.recording
        last = np.flatnonzero(np.isfinite(self.loss_predicted))
        last = int(last[-1]) if last.size else -1
        return {
            "L0": float(getattr(pred, "loss", [np.nan])[0]),
            "final_loss": {
                "predicted": float(self.loss_predicted[last]),
                "measured": float(self.loss_measured[last]),
                "nqf_final_loss": float(getattr(pred, "final_loss", np.nan)),
            },
            "growing_modes": int(np.sum(getattr(pred, "growing", grow))),
            "wall_time_s": {
                "predict": float(getattr(pred, "wall_time_s", np.nan)),
                "record": float(getattr(rec, "wall_time_s", np.nan)),
            },
            "test": None if self.test is None else dict(self.test),
            "half_drop_time": {
                "predicted": float(self.half_drop_time[0]),
                "measured": float(self.half_drop_time[1]),
                "relative_error": _rel(*self.half_drop_time),
            },
            "drop_times": {"predicted": self.drop_times[0].tolist(), "measured": self.drop_times[1].tolist()},
            "ignition_times": {
                "predicted": ign[0][grow].tolist(),
                "measured": ign[1][grow].tolist(),
                "max_relative_error": _max_rel(ign[0][grow], ign[1][grow]),
            },
            "phase_end": self.phase_end,
            "phase_end_measured": self.phase_end_measured,
            "phase_end_relative_error": _rel(self.phase_end, self.phase_end_measured),
            "phase_gap": self.phase_gap,
            "departure_time": self.departure_time,
            "departure_estimate": self.departure_estimate,
            "departure_estimate_module": self.departure_estimate_module,
            "gap_tol": self.gap_tol,
            "time_rtol": self.time_rtol,
            "verdicts": dict(self.verdicts),
            **_layers(self.prediction, self.recording),
        }

    def plot(
        self,
        *,
        ax: Sequence[matplotlib.axes.Axes] | None = None,
        logx: bool = False,
        logy: bool = False,
        gap: bool = True,
        top: int = 8,
    ) -> matplotlib.figure.Figure:
        """Predicted vs measured loss (predicted and measured ignition and half-drop times, phase
        end and departure marked; test losses with held-out data), eigenvalues of M(t) by mode
        (the top `top`, one colour each, with a legend) and, with `gap`, the gap panel
        |L_measured - L_predicted| / L(0); titled with the prediction's training and the run's
        optimizer. `logx` / `logy`: log time / loss axes; `ax`: the Axes to draw on (3, or 2
        without `gap`). Returns a matplotlib Figure (no pyplot state)."""
        from ._plot import plot_prediction

        return plot_prediction(self.prediction, self, ax=ax, logx=logx, logy=logy, gap=gap, top=top)


def _layers(prediction, recording) -> dict:
    """{"layers": per-layer ignition times} for a deep network's prediction (`DeepPrediction`)."""
    summary = getattr(prediction, "layer_summary", None)
    return {} if summary is None else {"layers": summary(recording)}


def _rel(a, b) -> float:
    """|b - a| / |a|: nan when the prediction `a` is not finite (nothing to test), inf when the
    measurement `b` is not (the predicted event never happened in the run)."""
    if not np.isfinite(a) or a == 0:
        return float("nan")
    return float(abs(b - a) / abs(a)) if np.isfinite(b) else float("inf")


def _within(a, b, rtol) -> bool | None:
    """The verdict |b - a| <= rtol |a|, or None (not tested) when nothing was predicted."""
    r = _rel(a, b)
    return None if np.isnan(r) else bool(r <= rtol)


def _warn_other_run(prediction, recording, M) -> None:
    """Warn when the recording is not the run the prediction describes: another start, or frozen
    arrays trained."""
    M0 = prediction.W0 @ prediction.W0.T
    err = float(np.abs(M[0] - M0).max() / max(np.abs(M0).max(), np.finfo(float).tiny))
    if err > 1e-8:
        warnings.warn(
            f"The recording does not start at the prediction's M0 = W0 W0^T (relative difference {err:.3g}): "
            "it is not the run the prediction describes.",
            NQFWarning,
            stacklevel=3,
        )
    if (
        getattr(recording, "trained", "neurons") == "all"
        and prediction.network is not None
        and prediction.network.frozen
    ):
        warnings.warn(
            "The recording trained the frozen arrays too (train='all'): the NQF keeps them fixed, so a gap "
            f"may come from them ({', '.join(prediction.network.frozen)}).",
            NQFWarning,
            stacklevel=3,
        )


class _Saved(NamedTuple):
    """A run known only by its saved arrays (any object with `t`, `loss`, `M`)."""

    t: np.ndarray
    loss: np.ndarray
    M: np.ndarray


def _has_curves(recording) -> bool:
    """True for the runs `_events.curves_of` reads itself (a `Recording` or `MapTrajectory`, with
    their per-step values where recorded)."""
    from ..dynamics import MapTrajectory
    from ._record import Recording

    return isinstance(recording, (Recording, MapTrajectory))


def _max_rel(a, b) -> float:
    """max `_rel` over the entries (nan for none)."""
    return max((_rel(u, v) for u, v in zip(a, b)), default=float("nan"))


def compare(
    prediction: Prediction,
    recording: Recording | MapTrajectory | WTrajectory,
    *,
    gap_tol: float | None = None,
    time_rtol: float = 0.05,
) -> Comparison:
    """Compare a `nqf.Prediction` with a measured run (see `nqf.network` for the criteria).

    **Arguments:** `prediction` (`nqf.predict`); `recording`: a `nqf.Recording` or any
    trajectory with times `t`, `loss` (n,) and `M` (n, p, p) (a `nqf.MapTrajectory`,
    `nqf.WTrajectory`) of the same p; `gap_tol`: loss-gap tolerance as a fraction of L(0)
    (default: the prediction's); `time_rtol`: relative tolerance on drop and ignition times.

    **Returns:** a `Comparison`.

    **Raises:** `TypeError` for arguments of the wrong kind; `ValueError` if the recording's M
    does not have the prediction's p, or the tolerances are not in (0, 1).
    """
    from ._predict import Prediction

    if not isinstance(prediction, Prediction):
        raise TypeError(f"`prediction` must be an nqf.Prediction (nqf.predict); found {type(prediction).__name__}.")
    if not all(hasattr(recording, a) for a in ("t", "loss", "M")):
        raise TypeError(
            "`recording` must have saved times `t`, `loss` and `M` (an nqf.Recording from nqf.record); "
            f"found {type(recording).__name__}."
        )
    gap_tol = prediction.settings["gap_tol"] if gap_tol is None else gap_tol
    for name, v in (("gap_tol", gap_tol), ("time_rtol", time_rtol)):
        if not (isinstance(v, (int, float, np.floating)) and 0.0 < v < 1.0):
            raise ValueError(f"`{name}` must lie in (0, 1); found {v!r}.")
    p = prediction.eigenvalues.shape[1]
    M = np.asarray(recording.M)
    if M.ndim != 3 or M.shape[1:] != (p, p):
        raise ValueError(f"The recording's `M` must have shape (n, {p}, {p}) like the prediction's; found {M.shape}.")
    t = np.asarray(recording.t, dtype=float)
    lm = np.asarray(recording.loss, dtype=float)
    if t.ndim != 1 or lm.shape != t.shape or M.shape[0] != t.size:
        raise ValueError(
            f"The recording's `t` {t.shape}, `loss` {lm.shape} and `M` {M.shape} must have one entry per saved step."
        )
    _warn_other_run(prediction, recording, M)
    tp, lp_all = prediction.t, prediction.loss
    inside = t <= tp[-1] * (1 + 1e-12)
    lp = np.where(inside, np.interp(t, tp, lp_all), np.nan)
    L0 = float(lp_all[0])
    gap = np.abs(lm - lp) / L0
    end = prediction.phase_end
    covers = t[-1] >= (end if np.isfinite(end) else tp[-1]) * (1 - 1e-9)  # the run covers the learning phase
    in_phase = inside & (t <= end if np.isfinite(end) else inside)
    phase_gap = float(np.max(gap[in_phase])) if in_phase.any() else float("nan")
    over = np.flatnonzero(inside & (gap > gap_tol))
    departure = float(t[over[0]]) if over.size else float("inf")
    measured = _events.curves_of(recording) if _has_curves(recording) else _events.curves_of(_Saved(t, lm, M))
    levels = prediction.plateau_levels
    drops = np.stack([prediction.drop_times, _events.drops(measured, levels)])
    half_levels = np.array([lp_all[0], prediction.final_loss])
    half = np.array([prediction.half_drop_time, _events.drops(measured, half_levels)[0]])
    end_m = _events.phase_end(measured, prediction.final_loss, prediction.settings["phase_tol"])
    if np.all(np.isfinite(prediction.targets)):
        ign_m = _events.ignition(measured, prediction.targets, prediction.settings["rho"], prediction.growing)
    else:  # no targets
        ign_m = np.full(p, np.nan)
    ign = np.stack([prediction.ignition_times, np.asarray(ign_m, dtype=float)])
    ignited = np.isfinite(ign[0])
    module_est = prediction.module_gap
    over_m = np.flatnonzero(module_est > gap_tol)
    est_module = (
        float(prediction.remainder_t[over_m[0]]) if over_m.size else (float("inf") if module_est.size else float("nan"))
    )
    predicted_drops = np.isfinite(drops[0])
    test_gap, test = _heldout.compare_test(prediction, recording, t, inside, in_phase)
    verdicts = {  # None: not tested (module docstring)
        "phase_gap": bool(phase_gap <= gap_tol) if covers else (False if phase_gap > gap_tol else None),
        "half_drop_time": _within(*half, time_rtol),
        "drop_times": (
            all(_within(a, b, time_rtol) for a, b in zip(*drops[:, predicted_drops])) if predicted_drops.any() else None
        ),
        "ignition_times": (bool(_max_rel(ign[0][ignited], ign[1][ignited]) <= time_rtol) if ignited.any() else None),
    }
    return Comparison(
        t=t,
        loss_predicted=lp,
        loss_measured=lm,
        gap=gap,
        phase_end=float(end),
        phase_end_measured=float(end_m),
        phase_gap=phase_gap,
        departure_time=departure,
        departure_estimate=float(prediction.departure_estimate),
        departure_estimate_module=est_module,
        half_drop_time=half,
        drop_times=drops,
        ignition_times=ign,
        gap_tol=float(gap_tol),
        time_rtol=float(time_rtol),
        verdicts=verdicts,
        prediction=prediction,
        recording=recording,
        test_gap=test_gap,
        test=test,
    )
