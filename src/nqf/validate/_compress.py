"""`nqf validate` checks for compression and multi-layer NQFs (Theorems 3, 14, 15, Corollary 3).

Each check registers itself in `CHECKS` when `nqf.validate` imports this module; each returns records
``{"name", "value", "bound", "passed"}`` and ignores the eps values (the settings are fixed).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..data import datasets
from ..dynamics import multilayer as ml
from ..dynamics._batches import batch_indices
from ..dynamics._maps import closed_sgd
from ..dynamics._wspace import train_w
from ..theory import compress as C
from ._common import record, register

THEOREM3_BOUND = 1e-10
"""Relative bound on compressed vs original outputs (Theorem 3, Theorem 15)."""

THEOREM14_BOUND = 1e-12
"""Relative bound on the closed deep map vs W-space (Theorem 14)."""


def _rel_outputs(a, b) -> float:
    return float(np.max(np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)))


@register
def check_theorem3(eps_values):
    """Theorem 3 on low-rank data (k_V < p): width 200 in W-space vs width k_V + 1 (W-space),
    300 minibatch SGD steps; max relative output error on the training inputs."""
    out = []
    rng = np.random.default_rng(0)
    for name, data, lr in [
        ("MLP", datasets.mlp_data(60, 8, rank=3), 0.05),
        ("phase retrieval", datasets.phase_retrieval_data(60, 9, rank=4), 1.0),
    ]:
        W0 = 0.3 * rng.standard_normal((data.p, 200)) / np.sqrt(200)
        comp = C.theorem3(data, lr=lr, W0=W0)
        ref = train_w(data, W0, lr=lr, steps=300, batch_size=10, key=1)
        small = train_w(comp.model, comp.W0, lr=comp.lr, steps=300, batch_size=10, key=1)
        out.append(
            record(
                f"theorem3 {name} (k_V={comp.span.k}, d 200 -> {comp.d_prime}): max rel output error",
                _rel_outputs(small.outputs, ref.outputs),
                THEOREM3_BOUND,
            )
        )
    return out


@register
def check_corollary3(eps_values):
    """Corollary 3 (Eq. E24) for d' = 2 and 4 < k_V + 1 = 8 on MLP data, width 200, 200 SGD
    steps: max over steps of measured error / bound (passes if <= 1 at every step), for E24 as
    stated and for the sharpened bound e_0 prod (1 + eta L_k)."""
    data = datasets.mlp_data(60, 6, seed=3)
    rng = np.random.default_rng(1)
    p, d, steps = data.p, 200, 200
    Q = np.linalg.qr(rng.standard_normal((p, p)))[0]
    W0 = Q @ (0.5 * 2.0 ** -np.arange(p)[:, None] * rng.standard_normal((p, d))) / np.sqrt(d)
    idx = batch_indices(2, data.m, 10, steps)
    out = []
    for dp in (2, 4):
        comp = C.corollary3(data, lr=0.02, W0=W0, d_prime=dp)
        ref = closed_sgd(data, W0=W0, lr=0.02, steps=steps, batch_indices=idx)
        small = closed_sgd(comp.model, W0=comp.W0, lr=comp.lr, steps=steps, batch_indices=idx)
        Mc, muc = comp.lift(small.M, small.mu)
        e = C.compression_error(ref.M, ref.mu, Mc, muc, 1.0)
        lip = C.lipschitz_along(data, lr=0.02, d=d, M=ref.M, mu=ref.mu, M_c=Mc, mu_c=muc, batch_indices=idx)
        b = C.corollary3_bound(e, lip["L"], tail=comp.tail, lr=0.02, map_L_steps=lip["map_L"])
        with np.errstate(over="ignore", invalid="ignore"):
            out.append(record(f"corollary3 d'={dp}: max_t measured / E24 bound", float(np.max(e / b.bound)), 1.0))
            # steps t >= 1: at t = 0 the sharpened bound is e_0 itself (ratio 1 by definition)
            out.append(
                record(
                    f"corollary3 d'={dp}: max_(t>=1) measured / sharpened bound",
                    float(np.max(e[1:] / b.sharpened[1:])),
                    1.0 + 1e-12,
                )
            )
    return out


_RNG = np.random.default_rng(5)
_S1 = jnp.asarray(_RNG.standard_normal((2, 4, 4, 4)))
_S1 = 0.125 * (_S1 + jnp.swapaxes(_S1, 2, 3))
_G2 = jnp.asarray(0.1 * _RNG.standard_normal((2, 4)))


def _structure1(x):
    return ml.Structure(jnp.einsum("j,kjab->kab", x, _S1), g=jnp.outer(x[:2], jnp.ones(4)) * 0.05)


def _structure2(h):
    z = jnp.tanh(h)
    A = 0.5 * jnp.zeros((1, 3, 3)).at[0, :2, 2].set(z).at[0, 2, :2].set(z)
    return ml.Structure(A, C=jnp.sum(h)[None] * 0.1, g=(z @ jnp.eye(2, 3))[None] * 0.1)


@register
def check_theorem14(eps_values):
    """Theorem 14: a 2-layer NQF with g, C and structure depending on the previous layer, widths
    (5, 40), 100 minibatch SGD steps: closed per-layer (mu, M) dynamics vs W-space (autodiff);
    max relative error of M, mu (each layer) and outputs."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((20, 4))
    deep = ml.DeepNQF([ml.Layer(_structure1, 4, 2), ml.Layer(_structure2, 3, 1)], X, np.sin(X[:, 0]))
    W0 = [0.5 * rng.standard_normal((4, 5)) / np.sqrt(5), 0.5 * rng.standard_normal((3, 40)) / np.sqrt(40)]
    kw = dict(lr=0.05, steps=100, batch_size=6, key=4)
    a = ml.closed_deep_sgd(deep, W0, **kw)
    b = ml.train_deep_w(deep, W0, **kw)
    rel = lambda x, r: float(np.abs(x - r).max() / np.abs(r).max())  # noqa: E731
    err = max(
        [rel(a.M[l], b.M[l]) for l in range(2)]
        + [rel(a.mu[l], b.mu[l]) for l in range(2)]
        + [rel(a.outputs, b.outputs)]
    )
    return [record("theorem14: closed deep map vs W-space, max rel error (M, mu, outputs)", err, THEOREM14_BOUND)]


@register
def check_theorem15(eps_values):
    """Theorem 15: a 2-layer feed-forward NQF on inputs in a 2-d subspace, widths (120, 80),
    compressed layer by layer to (k_l + 1) with spans over the trajectory; 150 SGD steps in
    W-space; max relative output error."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((25, 2)) @ rng.standard_normal((2, 6))
    deep = ml.DeepNQF(
        [ml.feedforward_layer(6, 2), ml.feedforward_layer(2, 1, transform=jnp.tanh)], X, np.tanh(X[:, 0] - X[:, 1])
    )
    W0 = [0.3 * rng.standard_normal((lay.p, w)) / np.sqrt(w) for lay, w in zip(deep.layers, (120, 80))]
    kw = dict(steps=150, batch_size=8, key=5)
    ref = ml.train_deep_w(deep, W0, lr=0.1, **kw)
    comp = ml.compress_deep(deep, W0, lr=0.1, spans=ml.layer_spans(deep, ref))
    small = ml.train_deep_w(comp.deep, comp.W0, lr=comp.lr, **kw)
    return [
        record(
            f"theorem15: widths (120, 80) -> {comp.widths_compressed}, max rel output error",
            _rel_outputs(small.outputs[..., 0], ref.outputs[..., 0]),
            THEOREM3_BOUND,
        )
    ]
