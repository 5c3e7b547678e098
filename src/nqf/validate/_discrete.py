"""`nqf validate` checks of discrete training as diffrax problems (issue 24): the exact map as a
diffrax solver, the finite-learning-rate modified flow, and minibatch SGD as a closed SDE.

- `check_exact_map_solver`: `diffeqsolve(map_term(...), ExactMap(), dt0=lr)` against
  `nqf.closed_sgd` on Theorem 2's test bed (`nqf.validate._theorem2`: general model p = 5,
  m = 8, d = 7; minibatches of 3, weight decay 0.1, Nesterov momentum 0.9, 200 steps at lr 0.02):
  max over saved steps of |M_solver - M_map| / |M_map| (max norms), bound `EXACT_MAP_BOUND`; and a
  diffrax `Event` (loss below half its initial value, Fig. 3 data, lr 0.01) stopping at the step
  where `closed_sgd`'s losses first cross (bound 0 steps).
- `check_modified_flow`: on Fig. 3 data (M0 = 1e-3 I, time T = 5) the relative Frobenius error of
  M(T) of the plain flow (`nqf.solve_flow`, form "M") and of the modified flow
  (`nqf.solve_modified_flow`) against the exact GD map (`nqf.closed_sgd`, T / eta steps) for
  eta in (0.1, 0.02, 0.005, 0.001); the fitted orders in eta must be 1 and 2 within
  `ORDER_BOUND` = 0.1 (backward error analysis: the flow is O(eta), the modified flow O(eta^2)).
- `check_sgd_sde_moments`: one step of the exact minibatch map, every batch of 2 out of m = 4
  enumerated (dense data, p = 3), against the SDE's coefficients (`nqf.dynamics.sde_coefficients`):
  the map's mean increment equals eta * drift + eta^2 Hbar M Hbar exactly (bound `MEAN_BOUND`,
  relative), and the relative error of the SDE's one-step covariance falls as O(eta): the ratio of
  the errors at eta and eta / 2 is 2 within `RATIO_BOUND` = 0.2.

All criteria were fixed before measuring (the issue's targets: 1e-13 per step, exact event steps,
orders within 0.1).
"""

from __future__ import annotations

import itertools

import diffrax
import jax.numpy as jnp
import numpy as np

from ..data import datasets
from ..data._operators import DenseData
from ..dynamics._batches import batch_indices
from ..dynamics._map_solver import map_term
from ..dynamics._maps import closed_sgd
from ..dynamics._modified import solve_modified_flow
from ..dynamics._sde import sde_coefficients
from ..solvers._solve import solve_flow
from ._common import record, register
from ._theorem2 import _BATCH, _LR, _M, _STEPS, _models

EXACT_MAP_BOUND = 1e-13
"""Bound on the relative error per saved step of `ExactMap` against `nqf.closed_sgd`."""
ORDER_BOUND = 0.1
"""Bound on |fitted order - expected order| of the flow (1) and the modified flow (2)."""
MEAN_BOUND = 1e-12
"""Bound on the relative error of the SDE's one-step mean against the enumerated exact map."""
RATIO_BOUND = 0.2
"""Bound on |covariance error ratio (eta vs eta / 2) - 2| of the SDE's one-step covariance."""


def _rel_per_step(Ms, ref) -> float:
    Ms, ref = np.asarray(Ms), np.asarray(ref)
    n = ref.shape[0]
    return float(np.max(np.abs(Ms - ref).reshape(n, -1).max(1) / np.abs(ref).reshape(n, -1).max(1)))


@register
def check_exact_map_solver(eps_values):
    """ExactMap vs closed_sgd on every saved step; a Stop event at closed_sgd's first crossing."""
    _, general, W0 = _models()
    kw = dict(
        W0=W0, lr=_LR, batch_indices=batch_indices(1, _M, _BATCH, _STEPS), weight_decay=0.1, momentum=0.9, nesterov=True
    )
    ref = closed_sgd(general, steps=_STEPS, **kw)
    term = map_term(general, **kw)
    sol = term.solve(_STEPS)
    out = [
        record(
            f"ExactMap (diffrax) vs closed_sgd, minibatches + weight decay + Nesterov ({_STEPS} steps): "
            "max rel err of M per step",
            _rel_per_step(sol.ys, ref.M),
            EXACT_MAP_BOUND,
        )
    ]
    data, lr, steps = datasets.fig3_data(), 0.01, 2000
    M0 = 1e-5 * np.eye(data.p)
    losses = closed_sgd(data, M0=M0, lr=lr, steps=steps).loss
    threshold = 0.5 * float(losses[0])
    expected = int(np.argmax(losses < threshold))
    term = map_term(data, M0=M0, lr=lr)
    event = diffrax.Event(lambda t, y, args, **kw: term.loss(y) < threshold)
    sol = term.solve(steps, saveat=diffrax.SaveAt(t1=True), event=event)
    found = round(float(sol.ts[-1]) / lr)
    out.append(
        record(
            "ExactMap Stop event (loss < loss(0) / 2, Fig. 3 data): |step - closed_sgd's step|",
            abs(found - expected),
            0.0,
        )
    )
    return out


@register
def check_modified_flow(eps_values):
    """Orders in eta of the plain flow (1) and the modified flow (2) against the exact GD map."""
    data, T = datasets.fig3_data(), 5.0
    M0 = 1e-3 * np.eye(data.p)
    plain = np.asarray(solve_flow(data, M0=M0, t1=T, form="M", rtol=1e-12, atol=1e-15).M[-1])
    etas, err_flow, err_mod = (0.1, 0.02, 0.005, 0.001), [], []
    for eta in etas:
        n = round(T / eta)
        gd = np.asarray(closed_sgd(data, M0=M0, lr=eta, steps=n, save_every=n, form="M").M[-1])
        mod = np.asarray(solve_modified_flow(data, M0=M0, lr=eta, t1=T, rtol=1e-12, atol=1e-15).ys[-1])
        scale = np.linalg.norm(gd)
        err_flow.append(np.linalg.norm(plain - gd) / scale)
        err_mod.append(np.linalg.norm(mod - gd) / scale)
    order_flow = np.polyfit(np.log(etas), np.log(err_flow), 1)[0]
    order_mod = np.polyfit(np.log(etas), np.log(err_mod), 1)[0]
    return [
        record(
            "flow vs exact GD map (Fig. 3 data, T = 5, eta 1e-3..0.1): |order - 1|", abs(order_flow - 1.0), ORDER_BOUND
        ),
        record("modified flow vs exact GD map (same): |order - 2|", abs(order_mod - 2.0), ORDER_BOUND),
    ]


@register
def check_sgd_sde_moments(eps_values):
    """One-step mean (exact) and covariance (O(eta)) of the SGD SDE vs the enumerated minibatch map."""
    rng = np.random.default_rng(0)
    p, m, b = 3, 4, 2
    A = rng.standard_normal((m, p, p))
    data = DenseData(0.5 * (A + A.transpose(0, 2, 1)), rng.standard_normal(m))
    X = rng.standard_normal((p, p))
    M = 0.3 * X @ X.T
    Hbar = np.asarray(data.H(jnp.asarray(M)))
    batches = np.array(list(itertools.combinations(range(m), b)))
    mean_err, cov_err = 0.0, []
    for lr in (1e-3, 5e-4):
        dM = np.array(
            [closed_sgd(data, M0=M, lr=lr, steps=1, batch_indices=bi[None, :], form="M").M[-1] - M for bi in batches]
        )
        drift, diffusion = sde_coefficients(data, lr=lr, batch_size=b)
        mean = lr * np.asarray(drift(jnp.asarray(M))) + lr**2 * Hbar @ M @ Hbar
        mean_err = max(mean_err, float(np.abs(dM.mean(0) - mean).max() / np.abs(dM.mean(0)).max()))
        G = np.array([np.asarray(diffusion(jnp.asarray(M), e)).ravel() for e in np.eye(m)])
        cov_map = np.cov(dM.reshape(len(dM), -1).T, bias=True)
        cov_err.append(np.abs(cov_map - lr * G.T @ G).max() / np.abs(cov_map).max())
    return [
        record(
            "SGD SDE one-step mean vs enumerated minibatch map (exact up to eta^2 H M H): rel err", mean_err, MEAN_BOUND
        ),
        record(
            "SGD SDE one-step covariance error ratio (eta vs eta / 2; O(eta): 2): |ratio - 2|",
            abs(cov_err[0] / cov_err[1] - 2.0),
            RATIO_BOUND,
        ),
    ]
