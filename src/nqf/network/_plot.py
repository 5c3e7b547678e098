"""Figures of a prediction and a comparison: loss with ignition times, eigenvalues of M(t).

matplotlib's object interface only (`matplotlib.figure.Figure`): no pyplot state is created or
changed, so the figures work in scripts, notebooks (they display when returned) and servers.
"""

from __future__ import annotations

import numpy as np

_TOP = 8  # eigenvalues drawn: the growing modes, at most this many


def plot_prediction(prediction, comparison=None, *, ax=None):
    """Two panels: (left) the predicted loss (line) and the measured loss (dots) against t with
    the predicted ignition times (dotted), the end of the learning phase and the departure
    (measured: dashed, estimated: dash-dotted); (right) the eigenvalues of M(t) of the growing
    modes (the top 8 when none grows), predicted (lines) and measured (dots), log scale. `ax`: two matplotlib Axes to draw
    on (default: a new Figure). Returns the Figure."""
    from matplotlib.figure import Figure

    if ax is None:
        fig = Figure(figsize=(10, 3.8), layout="constrained")
        ax = fig.subplots(1, 2)
    else:
        if not hasattr(ax, "__len__") or len(ax) != 2:
            raise ValueError(f"`ax` must be two matplotlib Axes (loss, eigenvalues); found {type(ax).__name__}.")
        fig = ax[0].figure
    a_loss, a_eig = ax
    t = prediction.t
    a_loss.plot(t, prediction.loss, color="C0", lw=1.8, label="NQF (predicted)")
    if comparison is not None:
        a_loss.plot(comparison.t, comparison.loss_measured, "o", ms=2.5, color="C1", label="network (measured)")
    a_loss.axhline(
        prediction.final_loss,
        color="0.5",
        lw=0.8,
        ls=":",
        label="NQF asymptote" if prediction.asymptote is not None else "NQF at the horizon",
    )
    for i, ti in enumerate(prediction.ignition_times[np.isfinite(prediction.ignition_times)]):
        a_loss.axvline(ti, color="C0", lw=0.8, ls=":", label="ignition (predicted)" if i == 0 else None)
    if np.isfinite(prediction.phase_end):
        a_loss.axvline(prediction.phase_end, color="C2", lw=1.0, ls="-", label="end of learning phase")
    if comparison is not None and np.isfinite(comparison.departure_time):
        a_loss.axvline(comparison.departure_time, color="C3", lw=1.2, ls="--", label="departure (measured)")
    if np.isfinite(prediction.departure_estimate):
        a_loss.axvline(prediction.departure_estimate, color="C3", lw=1.0, ls="-.", label="departure (estimate)")
    a_loss.set_xlabel("t = lr x steps")
    a_loss.set_ylabel("training loss")
    a_loss.legend(fontsize=7)
    modes = np.flatnonzero(prediction.growing)[:_TOP]
    if not len(modes):  # no mode grows into its target: the largest eigenvalues instead
        modes = np.arange(min(_TOP, prediction.eigenvalues.shape[1]))
    for j, k in enumerate(modes):
        a_eig.plot(t, prediction.eigenvalues[:, k], color=f"C{j % 10}", lw=1.5)
    if comparison is not None and len(modes):
        meas = np.linalg.eigvalsh(np.asarray(comparison.recording.M))[:, ::-1]
        for j, k in enumerate(modes):
            a_eig.plot(comparison.t, meas[:, k], "o", ms=2, color=f"C{j % 10}")
    a_eig.set_yscale("log")
    a_eig.set_xlabel("t = lr x steps")
    a_eig.set_ylabel(
        ("eigenvalues of M (lines: NQF, dots: network)" if comparison is not None else "eigenvalues of M")
        + (" (growing modes)" if prediction.growing.any() else f" (top {len(modes)})")
    )
    return fig
