"""The stability edge of a prediction's gradient-descent map (`nqf.predict`, `nqf.plan`).

Full-batch GD on the NQF's loss with learning rate lr and heavy-ball momentum beta is linearly
stable at W iff lr < 2 (1 + beta) / S(W), S the sharpness (`nqf.sharpness`). `predict` checks a
learning rate against the edge at W0 before it runs the map (a warning, with the edge's value)
and along the map's own path after it (`settings["stability_edge"]`); `plan` along the flow.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ..data import NQFModel
from ..theory._sharpness import _sharpness_jit, stability_edge
from ._events import HorizonWarning

__all__ = ["path_sharpness", "warn_past_edge_at_init", "edge_along_path"]

LANCZOS_STEPS = 32  # converged to 6 digits in 16 steps on the digits MLP's NQF (p = 65)
PATH_POINTS = 5  # saved states of the map at which predict evaluates the edge


def path_sharpness(model, M, mu, d: int, weight_decay: float = 0.0) -> np.ndarray:
    """S (n,) at the states M (n, p, p) (with mu (n, p) for a mean-field model) of width d:
    `nqf.sharpness`'s compiled program called once per state (one compile for any n: predict's
    check at W0, its 5 path states and plan's path share it)."""
    full = model if isinstance(model, NQFModel) else NQFModel(model)
    mean_field = full.has_mean_field
    M = np.asarray(M)
    columns = None if d > M.shape[-1] + 1 else int(d)
    dd = jnp.asarray(float(d) if mean_field else 1.0)
    gamma, key = jnp.asarray(float(weight_decay)), jax.random.key(0)
    mus = np.asarray(mu) if mean_field else [None] * len(M)
    return np.array(
        [float(_sharpness_jit(full, Mi, mui, dd, gamma, LANCZOS_STEPS, columns, key)[0]) for Mi, mui in zip(M, mus)]
    )


def warn_past_edge_at_init(model, W0, lr: float, momentum: float, weight_decay: float) -> float:
    """The edge 2 (1 + beta) / S(W0) at the initial weights; warns `HorizonWarning` (before the
    map runs) when lr is at or past it."""
    S0 = path_sharpness(model, (W0 @ W0.T)[None], W0.sum(axis=1)[None], W0.shape[1], weight_decay)[0]
    edge = float(stability_edge(S0)) * (1.0 + momentum)
    if lr >= edge:
        warnings.warn(
            f"lr = {lr:g} is past the NQF map's stability edge 2(1+beta)/S = {edge:.4g} at the initial weights "
            f"(S = {S0:.4g}): gradient descent leaves the flow from the first steps. nqf.plan finds the edge "
            "along the whole path and suggests a stable lr.",
            HorizonWarning,
            stacklevel=4,  # the caller of `predict` (via `_trajectory` / `_curves`)
        )
    return edge


def edge_along_path(
    model, traj, W0, lr: float, momentum: float, weight_decay: float, full_batch: bool
) -> tuple[float, bool]:
    """The smallest edge 2 (1 + beta) / S over `PATH_POINTS` saved states of the map `traj`;
    warns `HorizonWarning` when the full-batch predicted loss rises between saved steps without
    momentum (a catapult) or when lr (a schedule's largest rate) is past that edge, with its value.
    Returns (the edge, whether it warned: the map is unstable there)."""
    n = len(traj.t)
    idx = np.unique(np.linspace(0, n - 1, PATH_POINTS).round().astype(int))
    mu = None if traj.mu is None else np.asarray(traj.mu)[idx]
    S = path_sharpness(model, np.asarray(traj.M)[idx], mu, W0.shape[1], weight_decay)
    edge = float(stability_edge(S.max())) * (1.0 + momentum)
    t_edge = float(np.asarray(traj.t)[idx][int(np.argmax(S))])
    loss = np.asarray(traj.loss, dtype=float)
    # heavy-ball momentum makes the loss oscillate at any stable lr: a rise is a catapult only without it
    rise = float(np.diff(loss).max() / loss[0]) if full_batch and not momentum and loss.size > 1 else 0.0
    unstable = rise > 0.01 or lr >= edge
    if unstable:
        what = (
            f"the predicted full-batch loss rises by up to {rise:.3g} L(0) between saved steps: " if rise > 0.01 else ""
        )
        warnings.warn(
            f"{what}lr = {lr:g} is {'near' if lr < edge else 'past'} the NQF map's stability edge 2(1+beta)/S = "
            f"{edge:.4g} along the predicted path (S = {S.max():.4g} at t = {t_edge:.4g}); what follows is the "
            "map's instability (a catapult), not the NQF's learning, and a departure measured there is not the "
            "network leaving the NQF. Use a smaller `lr` (nqf.plan suggests one).",
            HorizonWarning,
            stacklevel=4,  # the caller of `predict` (via `_trajectory` / `_curves`)
        )
    return edge, unstable
