"""`nqf validate` checks of Theorem 2 and Corollary 2: the closed discrete maps on (M, mu) against
weight-space training.

Theorem 2 (THEORY sec. 3, Eqs. E5-E6): one SGD step W+ = W - eta grad of the general NQF
f_x(W) = f0(x) + g(x)^T mu + mu^T B(x) mu + Tr[W W^T A(x)] maps (M, mu) = (W W^T, W 1) to
(M+, mu+) exactly, for any width d, minibatch and weight decay (H -> H + gamma I). Corollary 2
(E7): heavy-ball and Nesterov momentum keep W_t = P_t W_0 + Q_t 1^T and are closed as well.

Each record runs `nqf.closed_map` (the closed map; centered-factor form unless marked "E5-E6
literal", which iterates E5-E6 / E7 on (M, mu) themselves) and `nqf.train_w` (weight space,
autodiff gradients) from the same W0 with the same learning rate, batches, weight decay and
momentum, and records

    max( max_n |M_closed(n) - M_w(n)| / max_n |M_w(n)|,  the same for mu )

over every step n of the run (entrywise max), bound `THEOREM2_BOUND` = 1e-10 (float64).

Test bed (fixed, independent of the eps values): dense symmetric A (m = 8, p = 5), labels
N(0, 1), a general model with g (m, p), symmetric B (m, p, p) and f0 (m,) (Eq. E2) except in the
plain-model record, width d = 7 (> p: C = M - mu mu^T / d has full rank, so the literal E5-E6 /
E7 form is well conditioned too), W0 = 0.3 N(0, 1) / sqrt(d), 200 steps at lr 0.02 (time
t = 0.02 n); minibatches of 3 drawn once by `nqf.batch_indices` and passed to both as the same
index array (shared indices).
"""

from __future__ import annotations

import numpy as np

from ..data._model import NQFModel
from ..data._operators import DenseData
from ..dynamics._batches import batch_indices
from ..dynamics._maps import closed_map
from ..dynamics._wspace import train_w
from ._common import record, register

THEOREM2_BOUND = 1e-10
"""Bound on the relative error of the closed map against W-space training (Theorem 2, Cor. 2)."""

_P, _M, _D, _BATCH, _STEPS, _LR = 5, 8, 7, 3, 200, 0.02

# (label, general model?, optimizer, keyword arguments shared by both sides, closed-map form)
_CASES = (
    ("full batch, plain model Tr[M A]", False, "sgd", {}, "factor"),
    ("full batch, general model (g, B, f0)", True, "sgd", {}, "factor"),
    ("full batch, general model, E5-E6 literal", True, "sgd", {}, "M"),
    ("minibatches (shared indices, b = 3), general model", True, "sgd", {"batches": True}, "factor"),
    ("weight decay 0.1 + minibatches, general model", True, "sgd", {"batches": True, "weight_decay": 0.1}, "factor"),
    ("heavy-ball momentum 0.9 (Cor. 2), general model", True, "momentum", {}, "factor"),
    ("heavy-ball momentum 0.9, E7 literal (P, Q)", True, "momentum", {}, "M"),
    (
        "Nesterov momentum 0.9 + minibatches + weight decay 0.1 (Cor. 2)",
        True,
        "nesterov",
        {"batches": True, "weight_decay": 0.1},
        "factor",
    ),
)


def _models(seed: int = 0):
    """(plain model, general model, W0) of the test bed (module docstring)."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((_M, _P, _P)) / np.sqrt(_P)
    data = DenseData(0.5 * (A + A.transpose(0, 2, 1)), rng.standard_normal(_M))
    B = rng.standard_normal((_M, _P, _P)) / (2 * _D * _P)
    general = NQFModel(
        data,
        g=0.5 * rng.standard_normal((_M, _P)) / np.sqrt(_D),
        B=0.5 * (B + B.transpose(0, 2, 1)),
        f0=0.1 * rng.standard_normal(_M),
    )
    W0 = 0.3 * rng.standard_normal((_P, _D)) / np.sqrt(_D)
    return NQFModel(data), general, W0


def _rel(a, ref) -> float:
    a, ref = np.asarray(a, float), np.asarray(ref, float)
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def closed_vs_wspace_error(model, W0, *, optimizer: str, form: str = "factor", **kwargs) -> float:
    """max of the relative errors of M and mu (module docstring) between `nqf.closed_map` and
    `nqf.train_w` run with the same arguments (`kwargs`: lr, steps, batch_indices, weight_decay)."""
    closed = closed_map(model, W0=W0, optimizer=optimizer, form=form, **kwargs)
    ref = train_w(model, W0, optimizer=optimizer, **kwargs)
    return max(_rel(closed.M, ref.M), _rel(closed.mu, ref.mu))


@register
def check_theorem2(eps_values):
    """Theorem 2 / Corollary 2: closed map vs W-space for full batch, shared minibatches, weight
    decay, heavy ball and Nesterov, plain and general (g, B) models (independent of eps)."""
    plain, general, W0 = _models()
    idx = batch_indices(1, _M, _BATCH, _STEPS)
    out = []
    for label, is_general, optimizer, opts, form in _CASES:
        kw = {"lr": _LR, "steps": _STEPS, "weight_decay": opts.get("weight_decay", 0.0)}
        if opts.get("batches"):
            kw["batch_indices"] = idx
        err = closed_vs_wspace_error(general if is_general else plain, W0, optimizer=optimizer, form=form, **kw)
        out.append(
            record(
                f"theorem2 closed map vs W-space, {label} (d={_D}, {_STEPS} steps): max rel err M, mu",
                err,
                THEOREM2_BOUND,
            )
        )
    return out
