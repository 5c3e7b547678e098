"""Weight-space reference simulators: train the p x d weight matrix W itself (Theorem 2's
left-hand side), for the same models, losses, batches and optimizers as the closed maps.

The model is the function of W of Eq. E2, f_x(W) = f0(x) + g(x)^T (W 1) + (W 1)^T B(x) (W 1)
+ Tr[A(x) W W^T] (`NQFModel.outputs` at M = W W^T, mu = W 1), and the gradient of the step loss
L(W) = (1/b) sum_{j < b} ell(f_{idx_j}(W), y_{idx_j}) + gamma/2 |W|_F^2 is taken by `jax.grad`:
nothing here uses Theorem 2's update formulas (E4-E7), so agreement with `nqf.closed_sgd` is an
independent check of them.

Optimizers (one compiled `lax.scan` each; grad = the gradient above):

- ``"sgd"`` / ``"momentum"`` / ``"nesterov"``: the `torch.optim.SGD` form V <- beta V + grad,
  W <- W - eta V (heavy ball), or W <- W - eta (grad + beta V) (Nesterov); beta = 0 is plain SGD.
- ``"adam"``: m <- b1 m + (1 - b1) grad, s <- b2 s + (1 - b2) grad^2 (elementwise),
  W <- W - eta m_hat / (sqrt(s_hat) + eps) with bias corrections m_hat = m / (1 - b1^k),
  s_hat = s / (1 - b2^k) at step k = 1, 2, ...; weight decay is the coupled L2 term in grad (as in
  `torch.optim.Adam`). Adam has no closed map on (M, mu) (see `nqf.closed_sgd`): this is its only exact
  simulation.
- an ``optax.GradientTransformation`` (any: ``optax.adam(1e-3)``, ``optax.chain(...)``): state
  ``optimizer.init(W0)``, then updates, state <- optimizer.update(grad, state, W) and
  W <- W + updates (`optax.apply_updates`), with the same grad (coupled weight decay included).
  Its learning rate lives inside the transformation; `lr` is then only the time unit t = lr * n.
  optax is imported only when such an object is passed.

Cost per step: O(p^2 d) for W W^T and the gradient through it, plus the data operations over the
m inputs and, for Adam, O(p d) elementwise work. Time: step n is t = eta * n.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from .._core._checks import REQUIRED, as_weights, check_positive, is_traced, keyword_options
from .._core.io import Saveable
from ..data._model import NQFModel, as_model
from ..data._operators import AbstractData
from ._batches import restrict
from ._losses import PerSampleLoss, as_loss
from ._train_args import (
    any_traced,
    check_count,
    check_finite,
    check_hyper,
    check_lr,
    check_optax_args,
    check_saves_memory,
    check_unit_interval,
    check_weight_decay,
    guard,
    loop_counts,
    optax_transformation,
    parse_optimizer,
    resolve_loss_batches,
    save_schedule,
)

if TYPE_CHECKING:
    import optax

__all__ = ["WTrajectory", "train_w", "w_objective"]

TRACE_COUNT = [0]
ADAM_DEFAULTS = {"adam_b1": 0.9, "adam_b2": 0.999, "adam_eps": 1e-8}  # train_w's, as torch.optim.Adam


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["steps", "t", "W", "M", "mu", "outputs", "loss", "lr"],
    meta_fields=["optimizer"],
)
@dataclasses.dataclass(frozen=True, eq=False)
class WTrajectory(Saveable):
    """Result of `train_w`. `n` is the number of saved steps.

    **Attributes:** `steps` (n,) int; `t` = lr * steps (n,); `W` (n, p, d); `M` = W W^T
    (n, p, p); `mu` = W 1 (n, p); `outputs` f_x on all m training inputs (n, m); `loss`
    (1/m) sum_mu ell(f_mu, y_mu) without the weight-decay penalty (n,); `optimizer` (the name,
    or ``"optax"`` for an optax transformation), `lr`.

    A plain frozen dataclass (it pickles) registered as a JAX pytree (arrays and `lr` are
    leaves, `optimizer` static), like `nqf.MapTrajectory`: numpy arrays from a plain call, JAX
    arrays (batched under vmap) when `train_w` runs under tracing.
    """

    steps: np.ndarray
    t: np.ndarray
    W: np.ndarray
    M: np.ndarray
    mu: np.ndarray
    outputs: np.ndarray
    loss: np.ndarray
    optimizer: str
    lr: float


def w_objective(
    model: NQFModel,
    loss: PerSampleLoss,
    W: Float[Array, "p d"],
    idx: Int[Array, " b"] | None = None,
    gamma: float | Float[Array, ""] = 0.0,
) -> Float[Array, ""]:
    """The training objective L(W) of one step, a scalar.

    L = mean over the batch `idx` (b,) (all m inputs if None) of ell(f_x(W), y_x), plus
    gamma/2 |W|_F^2; f_x(W) is Eq. E2 evaluated at M = W W^T, mu = W 1.
    """
    sub = None if idx is None else restrict(model, idx)
    if sub is not None:  # evaluate the b batch rows only
        model, idx = sub, None
    f = model.outputs(W @ W.T, jnp.sum(W, axis=1))
    y = model.y
    if idx is not None:
        f, y = f[idx], y[idx]
    return jnp.mean(loss.value(f, y)) + 0.5 * gamma * jnp.sum(W**2)


class _Optimizer(eqx.Module):
    model: NQFModel
    loss: PerSampleLoss
    lr: jax.Array
    gamma: jax.Array
    beta: jax.Array
    b1: jax.Array
    b2: jax.Array
    eps: jax.Array
    kind: str = eqx.field(static=True)  # "sgd", "heavy", "nesterov", "adam", "optax"
    transform: object = eqx.field(static=True, default=None)  # the optax transformation

    def init(self, W):
        if self.kind == "optax":
            return (W, self.transform.init(W))
        if self.kind == "sgd":
            return (W,)
        if self.kind == "adam":
            return (W, jnp.zeros_like(W), jnp.zeros_like(W))
        return (W, jnp.zeros_like(W))

    def step(self, state, idx, k):
        W = state[0]
        grad = jax.grad(w_objective, argnums=2)(self.model, self.loss, W, idx, self.gamma)
        if self.kind == "optax":  # as optax.apply_updates (without importing optax here)
            updates, opt_state = self.transform.update(grad, state[1], W)
            return (jnp.asarray(W + updates).astype(W.dtype), opt_state)
        if self.kind == "sgd":
            return (W - self.lr * grad,)
        if self.kind == "adam":
            _, m1, m2 = state
            m1 = self.b1 * m1 + (1.0 - self.b1) * grad
            m2 = self.b2 * m2 + (1.0 - self.b2) * grad**2
            n = (k + 1).astype(W.dtype)
            m_hat = m1 / (1.0 - self.b1**n)
            s_hat = m2 / (1.0 - self.b2**n)
            return (W - self.lr * m_hat / (jnp.sqrt(s_hat) + self.eps), m1, m2)
        V = self.beta * state[1] + grad
        direction = grad + self.beta * V if self.kind == "nesterov" else V
        return (W - self.lr * direction, V)


def _simulate(opt, W0, idx, n_saves: int, save_every, remainder, has_remainder: bool):
    """The traceable core of `train_w`: pure JAX, so it runs under jit, vmap and grad.
    `save_every`, `remainder` as in `nqf.dynamics._maps._simulate` (int32 arrays, or Python ints for
    fixed-length loops that reverse-mode autodiff can differentiate)."""
    TRACE_COUNT[0] += 1
    model = opt.model

    def block(carry, n):
        def body(_, carry):
            state, k = carry
            batch = None if idx is None else jax.lax.dynamic_index_in_dim(idx, k, keepdims=False)
            return opt.step(state, batch, k), k + 1

        return jax.lax.fori_loop(0, n, body, carry)

    def scan_body(carry, _):
        carry = block(carry, save_every)
        return carry, carry[0][0]

    carry0 = (opt.init(W0), jnp.asarray(0, dtype=jnp.int32))
    carry, Ws = jax.lax.scan(scan_body, carry0, None, length=n_saves)
    parts = [W0[None], Ws]
    if has_remainder:
        parts.append(block(carry, remainder)[0][0][None])
    Ws = jnp.concatenate(parts, axis=0)
    Ms = jnp.einsum("nid,njd->nij", Ws, Ws)
    mus = jnp.sum(Ws, axis=2)
    outputs = jax.vmap(model.outputs)(Ms, mus)
    losses = jnp.mean(jax.vmap(opt.loss.value, in_axes=(0, None))(outputs, model.y), axis=1)
    return Ws, Ms, mus, outputs, losses


_run = eqx.filter_jit(_simulate)


_TRAIN_W_KEYWORDS = dict(
    lr=REQUIRED,
    steps=REQUIRED,
    momentum=None,
    nesterov=False,
    weight_decay=0.0,
    batch_indices=None,
    batch_size=None,
    key=None,
    loss=None,
    **ADAM_DEFAULTS,
)  # the keyword options of `train_w`, in the order it reads them


def _check_adam(adam_b1, adam_b2, adam_eps):
    """Adam's constants (b1, b2, eps) of `train_w`, checked: b1, b2 in [0, 1), eps > 0 (at run
    time when traced)."""
    if any_traced(adam_b1, adam_b2):
        b1, b2 = check_unit_interval(adam_b1, "adam_b1"), check_unit_interval(adam_b2, "adam_b2")
    else:
        b1 = check_positive(adam_b1, "adam_b1", allow_zero=True)
        b2 = check_positive(adam_b2, "adam_b2", allow_zero=True)
        if b1 >= 1.0 or b2 >= 1.0:
            raise ValueError(f"`adam_b1` and `adam_b2` must lie in [0, 1); found {b1!r}, {b2!r}.")
    return b1, b2, check_hyper(adam_eps, "adam_eps")


def _kind(name: str, beta, nesterov: bool) -> str:
    """The update program of `train_w`: "adam", "optax", "sgd", "heavy" or "nesterov"."""
    if name in ("adam", "optax"):
        return name
    if not is_traced(beta) and beta == 0.0:
        return "sgd"
    return "nesterov" if nesterov else "heavy"  # a traced beta runs the momentum program (beta = 0: SGD's numbers)


def train_w(
    model: NQFModel | AbstractData,
    W0: Float[ArrayLike, "p d"],
    *,
    optimizer: str | optax.GradientTransformation = "sgd",
    save_every: int = 1,
    **options,
) -> WTrajectory:
    """Train the weights W (p, d) of an NQF directly, with autodiff gradients.

    The reference for `nqf.closed_sgd` / `nqf.closed_map` (same arguments, same batches from the
    same `batch_indices` or `key`), and the only exact simulator for Adam and for any optax
    optimizer.

    **Arguments:**

    - `model`: an `nqf.NQFModel` or a bare data set (plain model).
    - `W0`: initial weights, shape (p, d), one column per neuron.
    - `lr`: eta > 0, the step size of the string optimizers and the time unit (step n is at
      t = lr * n); with an optax `optimizer` only the time unit (still required, > 0: the step
      size is the transformation's own). `steps`: integer >= 1; `save_every`: integer >= 1 (step
      0 and the last step are always saved).
    - `optimizer`: ``"sgd"`` (momentum default 0), ``"momentum"`` (heavy ball, default 0.9),
      ``"nesterov"`` (default 0.9) or ``"adam"``; `momentum`: beta in [0, 1) or None for the
      default; `nesterov`: Nesterov form for "sgd"/"momentum". Or an `optax.GradientTransformation`
      (e.g. ``optax.adam(1e-3)``, ``optax.chain(optax.clip(1.0), optax.sgd(0.01))``): state
      ``optimizer.init(W0)``, each step ``updates, state = optimizer.update(grad, state, W)``,
      W <- W + updates; `momentum`, `nesterov` and Adam's constants must then stay at their
      defaults (they belong in the transformation). ``optax.sgd(lr)``, ``optax.sgd(lr,
      momentum=beta[, nesterov=True])`` and ``optax.adam(lr, b1, b2, eps)`` give the numbers of
      "sgd", "momentum"/"nesterov" and "adam" (same formulas; optax's trace is the torch form
      V <- beta V + grad, and its Adam puts eps outside the square root, eps_root = 0). The
      update is called as update(grad, state, params): transformations that need extra
      arguments (a loss value, ...) are not supported. Compiled once per optax object and shape:
      reuse the object to reuse the compilation.
    - `weight_decay`: gamma >= 0 (penalty gamma/2 |W|^2, added to the gradient: coupled L2, for
      every optimizer including optax ones; the paper's "-gamma M", Sec. 4, is -2 gamma M with this
      gamma). Decoupled decay (AdamW) belongs in the optax chain,
      e.g. ``optax.adamw(1e-3, weight_decay=1e-4)`` or ``optax.add_decayed_weights``.
    - Batches: `batch_indices` (steps, b), or `batch_size` with `key` (default seed 0) drawn by
      `nqf.batch_indices`; full batch if neither.
    - `loss`: ``"mse"`` (default), ``"logistic"``, a callable ell(f, y) -> scalar, or a
      `nqf.PerSampleLoss` over k outputs (``as_loss("cross_entropy", k)``; batches then select
      inputs, as in `closed_sgd`).
    - `adam_b1`, `adam_b2` in [0, 1), `adam_eps` > 0: Adam's constants.
    - The keywords besides `optimizer` and `save_every` (`lr`, `steps`, `momentum`, `nesterov`,
      `weight_decay`, batches, `loss`, Adam's constants) are read from ``**options`` by name
      (an unknown one is a `TypeError`).

    **Returns:** a `WTrajectory` (W (n, p, d), M, mu, outputs, loss); step n is at t = lr * n
    (gradient-flow time for SGD; just a step count for Adam and optax transformations). Cost per step O(p^2 d) plus the
    data operations over m inputs; compiled once per shape (and optimizer kind).

    **Under jit, vmap and grad** (as `nqf.closed_sgd`): `W0`, `lr`, `momentum`,
    `weight_decay`, Adam's constants, `batch_indices`, `key` and the model's arrays may be
    traced; the result is then a `WTrajectory` of JAX arrays (batched under vmap). `steps`,
    `save_every`, `batch_size`, `optimizer`, `nesterov` and `loss` must be concrete. The value
    checks (lr > 0, momentum and Adam's rates in [0, 1), weight_decay >= 0, adam_eps > 0, finite
    W0, batch indices in range, divergence) run at run time with `equinox.error_if`; a traced
    `momentum` runs the momentum program (beta = 0 gives SGD's numbers). The loops become
    fixed-length scans: `jax.grad` stores one state per step (memory O(steps p d)). With an optax
    `optimizer`, values it closes over (its learning rate, ...) may be traced too; its loops are
    always fixed-length scans (compiled per `steps`, `save_every`).

    **Raises:** `ValueError` for a `W0` not of shape (p, d) or not finite, lr <= 0 or not finite,
    momentum outside [0, 1), weight_decay < 0, bad Adam constants, an unknown optimizer name,
    `momentum`/`nesterov`/Adam's constants set with an optax optimizer, a bad
    batch schedule (shape, range, batch size outside [1, m]), steps/save_every not integers
    >= 1; `TypeError` for a bad model or loss, or an `optimizer` that is neither a str nor an
    `optax.GradientTransformation`; `FloatingPointError` on divergence.
    """
    lr, steps, momentum, nesterov, weight_decay, batch_indices, batch_size, key, loss, adam_b1, adam_b2, adam_eps = (
        keyword_options("train_w", options, **_TRAIN_W_KEYWORDS)
    )
    model = as_model(model)
    transform = optax_transformation(optimizer)  # None for a name; TypeError for other types
    if transform is None:
        name, beta, nesterov = parse_optimizer(optimizer, momentum, nesterov, optax_ok=True)
    else:
        adam = {"adam_b1": adam_b1, "adam_b2": adam_b2, "adam_eps": adam_eps}
        check_optax_args(momentum, nesterov, {k: (v, ADAM_DEFAULTS[k]) for k, v in adam.items()})
        name, beta = "optax", 0.0
    lr = check_lr(lr)
    steps = check_count(steps, "steps")
    save_every = check_count(save_every, "save_every")
    gamma = check_weight_decay(weight_decay)
    b1, b2, eps = _check_adam(adam_b1, adam_b2, adam_eps)
    loss = as_loss(loss)
    W0 = as_weights(W0, model.p)
    if is_traced(W0):
        W0 = guard(W0, ~jnp.all(jnp.isfinite(W0)), "`W0` must be finite")
    p = model.p
    check_saves_memory(
        "train_w", steps, save_every, int(np.size(W0)) + p * p + p + model.m + 1
    )  # W, M, mu, outputs, loss
    idx = resolve_loss_batches(loss, batch_indices, batch_size, key, model.m, steps)
    saved, n_saves, remainder = save_schedule(steps, save_every)
    kind = _kind(name, beta, nesterov)
    traced = any_traced(model, lr, gamma, beta, b1, b2, eps, W0, idx)
    hyper = dict(lr=lr, gamma=gamma, beta=beta, b1=b1, b2=b2, eps=eps)
    hyper = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in hyper.items()}
    opt = _Optimizer(model=model, loss=loss, kind=kind, transform=transform, **hyper)
    # optax: the transformation may close over tracers nqf cannot see, so fixed-length loops
    # (differentiable), and the result's tracedness decides the conversion to numpy
    static = traced or transform is not None
    out = _run(opt, W0, idx, n_saves, *loop_counts(save_every, remainder, static=static))
    traced = traced or is_traced(out[0])
    if not traced:
        out = jax.tree.map(np.asarray, out)
    Ws, Ms, mus, outputs, losses = check_finite(out, out[0], saved, "W-space training diverged: non-finite weights", lr)
    return WTrajectory(
        steps=saved, t=lr * saved, W=Ws, M=Ms, mu=mus, outputs=outputs, loss=losses, optimizer=name, lr=lr
    )
