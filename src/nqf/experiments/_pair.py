"""Train a W-space module and its NQF side by side from the same initial weights.

The NQF of a module is evaluated in its feed-forward form f0 + a^T E(W) b (`nqf.modules`, equal to
f0 + Tr[W W^T A(x)] with the closed-form A of `nqf.structure`). Both are trained on the MSE
L(W) = mean over (input, output) pairs of (F - y)^2 with the optimizers of `nqf.train_w`
(identical update formulas; tests/test_fig_experiments.py checks the NQF trajectory against
`nqf.train_w` on the closed-form data):

- ``"gd"``: W <- W - lr grad;
- ``"momentum"``: V <- beta V + grad, W <- W - lr V (heavy ball, beta = 0.9);
- ``"adam"``: b1 = 0.9, b2 = 0.999, eps = 1e-8, bias-corrected.

Batches: `train_pair` is full batch; online SGD with fresh inputs is `train_online`, to which the
caller passes a step -> (inputs, labels) function (module and NQF take each step on the same batch).
"""

from __future__ import annotations

import functools

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


def _check_args(optimizer, steps, save_every):
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"`optimizer` must be one of {OPTIMIZERS}; found {optimizer!r}.")
    if steps % save_every:
        raise ValueError(f"`steps` ({steps}) must be a multiple of `save_every` ({save_every}).")


def train_pair(module, xs, y, W0, *, optimizer: str, lr: float, steps: int, save_every: int, eval_xs=None):
    """Full-batch training of `module` and of its NQF from W0 (p, d) on inputs `xs`, labels
    y (m, k). Returns dict of numpy arrays: ``steps`` (n,), ``F_module``, ``F_nqf`` (n, m, k),
    ``E_module``, ``E_nqf`` (n, ...) effective maps, ``loss_module``, ``loss_nqf`` (n,).
    With `eval_xs` (held-out inputs, not trained on) also ``F_module_eval``, ``F_nqf_eval``
    (n, m_eval, k): both models' outputs on them at the saved steps."""
    _check_args(optimizer, steps, save_every)
    d = W0.shape[1]
    feats = module.nqf_features(xs, d)
    xs_j = jax.tree_util.tree_map(jnp.asarray, xs)
    y = jnp.asarray(y)
    if eval_xs is not None:
        feats_ev = module.nqf_features(eval_xs, d)
        ev_j = jax.tree_util.tree_map(jnp.asarray, eval_xs)

    def outputs(W1, W2):
        out = (F_mod(W1), F_nqf(W2), module.effective_map(W1), module.effective_map(W2))
        if eval_xs is not None:
            out += (module.apply(W1, ev_j), module.nqf_apply(W2, feats_ev))
        return out

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
                return (_update(optimizer, s1, g_mod(s1[0]), lr, k), _update(optimizer, s2, g_nqf(s2[0]), lr, k))

            k0, s1, s2 = carry
            s1, s2 = jax.lax.fori_loop(k0, k0 + save_every, body, (s1, s2))
            return (k0 + save_every, s1, s2), outputs(s1[0], s2[0])

        W0j = jnp.asarray(W0)
        carry = (jnp.asarray(0), _init(optimizer, W0j), _init(optimizer, W0j))
        _, outs = jax.lax.scan(block, carry, None, length=steps // save_every)
        first = outputs(W0j, W0j)
        return tuple(jnp.concatenate([f[None], o], axis=0) for f, o in zip(first, outs))

    Fm, Fn, Em, En, *ev = (np.asarray(v) for v in run(W0))
    if not (np.all(np.isfinite(Fm)) and np.all(np.isfinite(Fn))):
        raise FloatingPointError(f"{type(module).__name__} / {optimizer} diverged at lr = {lr:g}; reduce lr.")
    yn = np.asarray(y)
    res = {
        "steps": np.arange(0, steps + 1, save_every),
        "F_module": Fm,
        "F_nqf": Fn,
        "E_module": Em,
        "E_nqf": En,
        "loss_module": np.mean((Fm - yn) ** 2, axis=(1, 2)),
        "loss_nqf": np.mean((Fn - yn) ** 2, axis=(1, 2)),
    }
    if ev:
        res["F_module_eval"], res["F_nqf_eval"] = ev
    return res


def init_gap_order(module, d: int, xs, scale: float, sigma: float, seed: int = 3, max_inputs: int = 256) -> dict:
    """Measured order of the module - NQF output gap at init (a check of the NQF features at
    leading order): G(s) = |F_module(W0) - F_NQF(W0)|_F at W0 = s N(0, 1) (numpy rng `seed`,
    shape (p, d)) for s = sigma and sigma / 2, on the first `max_inputs` inputs;
    order = log2(G(sigma) / G(sigma / 2)).

    Theorem 1's remainder is O(|W|^3); for the modules of `nqf.modules` with tanh (odd) or softmax
    (logits quadratic in W, the NQF keeps their first order) it is O(|W|^4): order 4.

    Returns ``{"gap_sigma", "gap_half_sigma"`` (both divided by `scale`, e.g. |y - f0|_F, and by
    the square root of the fraction of inputs used), ``"order"}``."""
    n = jax.tree_util.tree_leaves(xs)[0].shape[0]
    xs = jax.tree_util.tree_map(lambda a: a[:max_inputs], xs)
    scale = scale * np.sqrt(min(n, max_inputs) / n)
    feats = module.nqf_features(xs, d)
    xs_j = jax.tree_util.tree_map(jnp.asarray, xs)
    G = []
    for s in (sigma, sigma / 2):
        W0 = jnp.asarray(s * np.random.default_rng(seed).standard_normal((module.p, d)))
        G.append(float(np.linalg.norm(np.asarray(module.apply(W0, xs_j)) - np.asarray(module.nqf_apply(W0, feats)))))
    return {"gap_sigma": G[0] / scale, "gap_half_sigma": G[1] / scale, "order": float(np.log2(G[0] / G[1]))}


def least_squares_loss(module, d: int, xs, y) -> float:
    """The least-squares optimum L_LS = min_E mean (f0 + a^T E b - y)^2 of the NQF's linear feature
    model (its feed-forward form, `nqf.modules`), over every E (n_a, n_b): a lower bound of the NQF's
    loss at every step, reached when E's rank (<= d and the neuron layout) does not bind (the
    digits models: MLP and CNN one output, attention E = D x D from 10 heads of d_k = D)."""
    feats = module.nqf_features(xs, d)
    a, b = np.asarray(feats.a), np.asarray(feats.b)  # (m, n_a), (m, n_b, k)
    r = np.asarray(y, float) - (0.0 if feats.f0 is None else np.asarray(feats.f0))  # (m, k)
    Phi = np.einsum("ma,mbk->mkab", a, b).reshape(a.shape[0] * r.shape[1], -1)
    coef = np.linalg.lstsq(Phi, r.reshape(-1), rcond=None)[0]
    return float(np.mean((Phi @ coef - r.reshape(-1)) ** 2))


def _stack_features(module, xs_list, d):
    """NQF features of a list of equally shaped input batches, stacked to leading axes
    (n_batches, batch, ...): computed once on the host for the concatenated inputs."""
    n, b = len(xs_list), jax.tree_util.tree_leaves(xs_list[0])[0].shape[0]
    flat = jax.tree_util.tree_map(lambda *a: np.concatenate(a, axis=0), *xs_list)
    feats = module.nqf_features(flat, d)
    split = lambda a: jnp.asarray(a).reshape((n, b) + tuple(a.shape[1:]))  # noqa: E731
    stacked = jax.tree_util.tree_map(lambda *a: jnp.asarray(np.stack(a)), *xs_list)
    return stacked, jax.tree_util.tree_map(split, feats)


@functools.lru_cache(maxsize=16)
def _online_chunk_fn(module, optimizer, save_every):
    """The compiled scan of `train_online` over one chunk of batches (cached per module, optimizer
    and save_every, so repeated runs, e.g. at several init scales, compile once)."""
    g_mod = jax.grad(lambda W, xs, y: jnp.mean((module.apply(W, xs) - y) ** 2))
    g_nqf = jax.grad(lambda W, feats, y: jnp.mean((module.nqf_apply(W, feats) - y) ** 2))

    @jax.jit
    def run_chunk(carry, xs, feats, ys, probe, feats_probe, lr):
        def step(c, j):
            k, s1, s2 = c
            b = lambda a: a[j]  # noqa: E731
            x, f, y = jax.tree_util.tree_map(b, xs), jax.tree_util.tree_map(b, feats), ys[j]
            ls = (jnp.mean((module.apply(s1[0], x) - y) ** 2), jnp.mean((module.nqf_apply(s2[0], f) - y) ** 2))
            s1 = _update(optimizer, s1, g_mod(s1[0], x, y), lr, k)
            s2 = _update(optimizer, s2, g_nqf(s2[0], f, y), lr, k)
            return (k + 1, s1, s2), ls

        def block(c, js):
            c, ls = jax.lax.scan(step, c, js)
            return c, (ls, module.apply(c[1][0], probe), module.nqf_apply(c[2][0], feats_probe))

        n = ys.shape[0]
        return jax.lax.scan(block, carry, jnp.arange(n).reshape(n // save_every, save_every))

    return run_chunk


def train_online(
    module, sample, W0, *, optimizer: str, lr: float, steps: int, probe, save_every: int = 1, chunk: int = 250
):
    """Online training of `module` and of its NQF from the same W0 (p, d): at step k = 0..steps-1
    both take one optimizer step (`OPTIMIZERS`) on the MSE of the same fresh batch
    ``sample(k) -> (xs, y)`` (numpy inputs of a fixed batch size b, labels y (b, k_out)).

    Batches are drawn on the host `chunk` steps at a time (their NQF features by
    `module.nqf_features`, which need not be traceable) and each chunk runs as one compiled scan.

    Returns dict of numpy arrays: ``steps`` (n,) = 0, save_every, ..., steps; ``F_module``,
    ``F_nqf`` (n, m_probe, k_out): both models' outputs on the fixed inputs `probe` at those steps;
    ``batch_loss_module``, ``batch_loss_nqf`` (steps,): the loss of step k's batch before step k's
    update (the online training loss).

    **Raises:** `ValueError` on a bad optimizer / steps not a multiple of save_every;
    `FloatingPointError` if either model diverges.
    """
    _check_args(optimizer, steps, save_every)
    d = W0.shape[1]
    n_chunks = -(-steps // max(chunk, 1))  # equal chunks where possible: one compilation
    chunk = -(-steps // (n_chunks * save_every)) * save_every
    probe_j = jax.tree_util.tree_map(jnp.asarray, probe)
    feats_probe = module.nqf_features(probe, d)
    run_chunk = _online_chunk_fn(module, optimizer, save_every)
    lr_j = jnp.asarray(lr, dtype=float)

    W0j = jnp.asarray(W0)
    carry = (jnp.asarray(0), _init(optimizer, W0j), _init(optimizer, W0j))
    Fm = [np.asarray(module.apply(W0j, probe_j))[None]]
    Fn = [np.asarray(module.nqf_apply(W0j, feats_probe))[None]]
    lm, ln = [], []
    for k0 in range(0, steps, chunk):
        batches = [sample(k) for k in range(k0, min(k0 + chunk, steps))]
        xs, feats = _stack_features(module, [b[0] for b in batches], d)
        ys = jnp.asarray(np.stack([np.asarray(b[1]) for b in batches]))
        carry, ((l1, l2), f1, f2) = run_chunk(carry, xs, feats, ys, probe_j, feats_probe, lr_j)
        lm.append(np.asarray(l1).ravel())
        ln.append(np.asarray(l2).ravel())
        Fm.append(np.asarray(f1))
        Fn.append(np.asarray(f2))
    Fm, Fn = np.concatenate(Fm), np.concatenate(Fn)
    lm, ln = np.concatenate(lm), np.concatenate(ln)
    if not all(np.all(np.isfinite(v)) for v in (Fm, Fn, lm, ln)):
        raise FloatingPointError(f"{type(module).__name__} / {optimizer} (online) diverged at lr = {lr:g}; reduce lr.")
    return {
        "steps": np.arange(0, steps + 1, save_every),
        "F_module": Fm,
        "F_nqf": Fn,
        "batch_loss_module": lm,
        "batch_loss_nqf": ln,
    }
