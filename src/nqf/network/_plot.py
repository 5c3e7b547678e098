"""Figures of a prediction and a comparison: loss with ignition and half-drop times, eigenvalues
of M(t) by mode, and the comparison's gap.

matplotlib's object interface only (`matplotlib.figure.Figure`): no pyplot state is created or
changed, so the figures work in scripts, notebooks (they display when returned) and servers.
"""

from __future__ import annotations

import numpy as np

_TOP = 8  # eigenvalues drawn: the growing modes, at most this many


def plot_prediction(prediction, comparison=None, *, ax=None, logx=False, logy=False, gap=None, top=_TOP):
    """Panels of a prediction (and a comparison with a measured run):

    - loss: the predicted training loss (line), the measured one (dots), the held-out test loss
      where the prediction has one (predicted line, measured dots); the predicted (dotted) and
      measured (dashed) ignition times in each mode's colour; the half-drop times (x: predicted,
      +: measured) at the half-way level (L(0) + L_inf) / 2; the end of the learning phase and
      the departure (measured: dashed, estimated: dash-dotted);
    - eigenvalues of M(t) of the growing modes (the top `top` when none grows), one colour per
      mode with a legend, predicted (lines) and measured (dots), log scale; the ignition points
      rho x target (v: predicted, ^: measured);
    - gap (with `gap`, default: when there is a comparison): |L_measured - L_predicted| / L(0)
      over t (and the test loss's gap), `gap_tol` and the departure marked, log scale.

    The title names the training (the map's lr, steps, momentum, batches, weight decay or the
    flow's horizon) and the measured run's optimizer. `logx` / `logy`: log time axis (t = 0 is
    not drawn) / log loss axis (for power-law tails). `ax`: as many matplotlib Axes as panels to
    draw on (default: a new Figure). Returns the Figure.

    **Raises:** `ValueError` for `ax` of another length, `gap` without a comparison, `top` < 1."""
    from matplotlib.figure import Figure

    gap = comparison is not None if gap is None else bool(gap)
    if gap and comparison is None:
        raise ValueError("`gap`: the gap panel needs a comparison (nqf.compare(prediction, recording).plot()).")
    if not (isinstance(top, (int, np.integer)) and top >= 1):
        raise ValueError(f"`top` must be an integer >= 1 (the modes drawn); found {top!r}.")
    n_panels = 3 if gap else 2
    if ax is None:
        fig = Figure(figsize=(5 * n_panels, 3.8), layout="constrained")
        ax = fig.subplots(1, n_panels)
        fig.suptitle(_title(prediction, comparison), fontsize=10)
    else:
        if not hasattr(ax, "__len__") or len(ax) != n_panels:
            raise ValueError(
                f"`ax` must be {n_panels} matplotlib Axes (loss, eigenvalues{', gap' if gap else ''}); "
                f"found {type(ax).__name__}{f' of length {len(ax)}' if hasattr(ax, '__len__') else ''}."
            )
        fig = ax[0].figure
        ax[0].set_title(_title(prediction, comparison), fontsize=8)
    modes = np.flatnonzero(prediction.growing)[:top]
    if not len(modes):  # no mode grows into its target: the largest eigenvalues instead
        modes = np.arange(min(top, prediction.eigenvalues.shape[1]))
    _loss_panel(ax[0], prediction, comparison, modes)
    _eig_panel(ax[1], prediction, comparison, modes)
    if gap:
        _gap_panel(ax[2], comparison)
    for a in ax:
        a.set_xlabel("t = lr x steps")
        if logx:
            a.set_xscale("log")
    if logy:
        ax[0].set_yscale("log")
    return fig


def _colour(j: int) -> str:
    return f"C{j % 10}"


def _loss_panel(a, prediction, comparison, modes) -> None:
    t = prediction.t
    a.plot(t, prediction.loss, color="k", lw=1.8, label="NQF (predicted)")
    if comparison is not None:
        a.plot(comparison.t, comparison.loss_measured, "o", ms=2.5, color="0.45", label="network (measured)")
    test = getattr(prediction, "test_loss", None)
    if test is not None:
        a.plot(t, test, color="C9", lw=1.4, ls="--", label="test loss (predicted)")
        measured = None if comparison is None else getattr(comparison.recording, "test_loss", None)
        if comparison is not None and measured is not None:
            a.plot(comparison.t, measured, "s", ms=2, color="C9", label="test loss (measured)")
    a.axhline(
        prediction.final_loss,
        color="0.5",
        lw=0.8,
        ls=":",
        label="NQF asymptote" if prediction.asymptote is not None else "NQF at the horizon",
    )
    measured_ign = None if comparison is None else comparison.ignition_times[1]
    for j, k in enumerate(modes):
        ti = prediction.ignition_times[k]
        if np.isfinite(ti):
            a.axvline(ti, color=_colour(j), lw=0.9, ls=":", label="ignition (predicted)" if j == 0 else None)
        if measured_ign is not None and np.isfinite(measured_ign[k]):
            a.axvline(
                measured_ign[k], color=_colour(j), lw=0.9, ls="--", label="ignition (measured)" if j == 0 else None
            )
    level = 0.5 * (float(prediction.loss[0]) + float(prediction.final_loss))
    if np.isfinite(prediction.half_drop_time):
        a.plot([prediction.half_drop_time], [level], "x", ms=8, mew=2, color="k", label="half-drop (predicted)")
    if comparison is not None and np.isfinite(comparison.half_drop_time[1]):
        a.plot([comparison.half_drop_time[1]], [level], "+", ms=10, mew=2, color="0.45", label="half-drop (measured)")
    if np.isfinite(prediction.phase_end):
        a.axvline(prediction.phase_end, color="C2", lw=1.0, ls="-", label="end of learning phase")
    if comparison is not None and np.isfinite(comparison.departure_time):
        a.axvline(comparison.departure_time, color="C3", lw=1.2, ls="--", label="departure (measured)")
    if np.isfinite(prediction.departure_estimate):
        a.axvline(prediction.departure_estimate, color="C3", lw=1.0, ls="-.", label="departure (estimate)")
    a.set_ylabel("loss")
    a.legend(fontsize=6)


def _eig_panel(a, prediction, comparison, modes) -> None:
    t = prediction.t
    meas = None if comparison is None else np.linalg.eigvalsh(np.asarray(comparison.recording.M))[:, ::-1]
    rho = prediction.settings.get("rho", 0.5)
    for j, k in enumerate(modes):
        a.plot(t, prediction.eigenvalues[:, k], color=_colour(j), lw=1.5, label=f"mode {k + 1}")
        if comparison is not None and meas is not None:
            a.plot(comparison.t, meas[:, k], "o", ms=2, color=_colour(j))
        target = prediction.targets[k] if np.isfinite(prediction.targets[k]) else np.nan
        if np.isfinite(prediction.ignition_times[k]):
            a.plot([prediction.ignition_times[k]], [rho * target], "v", ms=6, color=_colour(j))
        if comparison is not None and np.isfinite(comparison.ignition_times[1][k]):
            a.plot([comparison.ignition_times[1][k]], [rho * target], "^", ms=6, color=_colour(j), mfc="none")
    a.set_yscale("log")
    a.set_ylabel("eigenvalues of M" + (" (growing modes)" if prediction.growing.any() else f" (top {len(modes)})"))
    title = "lines: NQF, dots: network; v / ^: ignition" if comparison is not None else "v: ignition"
    a.legend(fontsize=6, ncol=2, title=title, title_fontsize=6)


def _gap_panel(a, comparison) -> None:
    tiny = np.finfo(float).tiny
    a.plot(comparison.t, np.maximum(comparison.gap, tiny), color="C3", lw=1.4, label="train-loss gap")
    test_gap = getattr(comparison, "test_gap", None)
    if test_gap is not None:
        a.plot(comparison.t, np.maximum(test_gap, tiny), color="C9", lw=1.2, ls="--", label="test-loss gap")
    a.axhline(comparison.gap_tol, color="0.5", lw=0.8, ls=":", label=f"gap_tol = {comparison.gap_tol:g}")
    if np.isfinite(comparison.departure_time):
        a.axvline(comparison.departure_time, color="C3", lw=1.0, ls="--", label="departure (measured)")
    if np.isfinite(comparison.phase_end):
        a.axvline(comparison.phase_end, color="C2", lw=1.0, label="end of learning phase")
    a.set_yscale("log")
    a.set_ylabel("|L_measured - L_predicted| / L(0)")
    a.legend(fontsize=6)


def _title(prediction, comparison) -> str:
    """The training in words: 'NQF: SGD lr 0.05, 1500 steps, momentum 0.9, batches of 100 | network: adam'."""
    s = prediction.settings
    if s.get("lr") is None:
        text = f"NQF: gradient flow to t = {s.get('t1', prediction.t[-1]):g}"
    else:
        text = f"NQF: SGD lr {s['lr']:g}, {s['steps']} steps"
        if s.get("momentum"):
            text += f", momentum {s['momentum']:g}"
        if s.get("batch_indices") is not None:
            text += f", batches of {np.shape(s['batch_indices'])[1]}"
    if s.get("weight_decay"):
        text += f", weight decay {s['weight_decay']:g}"
    if comparison is not None:
        rec = comparison.recording
        text += f" | network: {getattr(rec, 'optimizer', type(rec).__name__)}"
        if getattr(rec, "lr", None) is not None:
            text += f" (time unit lr = {rec.lr:g})"
    return text
