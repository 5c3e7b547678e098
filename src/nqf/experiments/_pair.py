"""Train a W-space module and its NQF side by side from the same initial weights.

The NQF of a module is evaluated in its feed-forward form f0 + a^T E(W) b (`nqf.modules`, equal to
f0 + Tr[W W^T A(x)] with the closed-form A of `nqf.structure`). Both are trained on the MSE
L(W) = mean over (input, output) pairs of (F - y)^2 with the optimizers of `nqf.train_w`
(identical update formulas; tests/test_fig_experiments.py checks the NQF trajectory against
`nqf.train_w` on the closed-form data):

- ``"gd"``: W <- W - lr grad;
- ``"momentum"``: V <- beta V + grad, W <- W - lr V (heavy ball, beta = 0.9);
- ``"adam"``: b1 = 0.9, b2 = 0.999, eps = 1e-8, bias-corrected.

Batches: full batch (`batch=None`) or a list of index arrays per step (online SGD with fresh
inputs is handled by the caller passing a step -> (inputs, labels) function to `train_online`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

OPTIMIZERS = ("gd", "momentum", "adam")


def _init(kind, W):
    if kind == "gd":
        return (W,)
    if kind == "adam":
        return (W, jnp.zeros_like(W), jnp.zeros_like(W))
    return (W, jnp.zeros_like(W))


def _update(kind, state, grad, lr, k, beta=0.9, b1=0.9, b2=0.999, eps=1e-8):
    W = state[0]
    if kind == "gd":
        return (W - lr * grad,)
    if kind == "momentum":
        V = beta * state[1] + grad
        return (W - lr * V, V)
    m1 = b1 * state[1] + (1.0 - b1) * grad
    m2 = b2 * state[2] + (1.0 - b2) * grad**2
    n = (k + 1).astype(W.dtype)
    step = (m1 / (1.0 - b1**n)) / (jnp.sqrt(m2 / (1.0 - b2**n)) + eps)
    return (W - lr * step, m1, m2)


def train_pair(module, xs, y, W0, *, optimizer: str, lr: float, steps: int, save_every: int):
    """Full-batch training of `module` and of its NQF from W0 (p, d) on inputs `xs`, labels
    y (m, k). Returns dict of numpy arrays: ``steps`` (n,), ``F_module``, ``F_nqf`` (n, m, k),
    ``E_module``, ``E_nqf`` (n, ...) effective maps, ``loss_module``, ``loss_nqf`` (n,)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"`optimizer` must be one of {OPTIMIZERS}; found {optimizer!r}.")
    if steps % save_every:
        raise ValueError(f"`steps` ({steps}) must be a multiple of `save_every` ({save_every}).")
    d = W0.shape[1]
    feats = module.nqf_features(xs, d)
    xs_j = jax.tree_util.tree_map(jnp.asarray, xs)
    y = jnp.asarray(y)

    def F_mod(W):
        return module.apply(W, xs_j)

    def F_nqf(W):
        return module.nqf_apply(W, feats)

    L_mod = lambda W: jnp.mean((F_mod(W) - y) ** 2)  # noqa: E731
    L_nqf = lambda W: jnp.mean((F_nqf(W) - y) ** 2)  # noqa: E731
    g_mod, g_nqf = jax.grad(L_mod), jax.grad(L_nqf)

    @jax.jit
    def run(W0):
        def block(carry, _):
            def body(k, c):
                s1, s2 = c
                return (_update(optimizer, s1, g_mod(s1[0]), lr, k),
                        _update(optimizer, s2, g_nqf(s2[0]), lr, k))

            k0, s1, s2 = carry
            s1, s2 = jax.lax.fori_loop(k0, k0 + save_every, body, (s1, s2))
            out = (F_mod(s1[0]), F_nqf(s2[0]), module.effective_map(s1[0]), module.effective_map(s2[0]))
            return (k0 + save_every, s1, s2), out

        W0j = jnp.asarray(W0)
        carry = (jnp.asarray(0), _init(optimizer, W0j), _init(optimizer, W0j))
        _, outs = jax.lax.scan(block, carry, None, length=steps // save_every)
        first = (F_mod(W0j), F_nqf(W0j), module.effective_map(W0j), module.effective_map(W0j))
        return tuple(jnp.concatenate([f[None], o], axis=0) for f, o in zip(first, outs))

    Fm, Fn, Em, En = (np.asarray(v) for v in run(W0))
    if not (np.all(np.isfinite(Fm)) and np.all(np.isfinite(Fn))):
        raise FloatingPointError(f"{type(module).__name__} / {optimizer} diverged at lr = {lr:g}; reduce lr.")
    yn = np.asarray(y)
    return {
        "steps": np.arange(0, steps + 1, save_every),
        "F_module": Fm, "F_nqf": Fn, "E_module": Em, "E_nqf": En,
        "loss_module": np.mean((Fm - yn) ** 2, axis=(1, 2)),
        "loss_nqf": np.mean((Fn - yn) ** 2, axis=(1, 2)),
    }
