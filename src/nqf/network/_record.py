"""Train a user's own module with an optax optimizer and record its order parameters.

`record` is the measured side of `nqf.predict`: it trains the module itself (its own call, its
own parameter arrays, any `optax.GradientTransformation`) on the same loss, inputs, initial
weights and minibatches as the prediction, and saves M = W W^T, mu = W 1 and the training loss at
the saved steps, where W (p, d) is read from the module by its `nqf.Network` layout. The result
is a `Recording`: times `t`, `M`, `mu`, `loss`, so every measurement that takes a trajectory
(`nqf.measure_ignition_times`, `nqf.drop_times`, `nqf.compare`) takes it too.

Time is gradient-flow time t = lr * steps, with `lr` the learning rate that sets the time unit
(optax transformations do not expose their learning rate, so it is passed).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, Int, PRNGKeyArray, PyTree

from .._core import memory
from .._core._checks import check_positive
from .._core.io import Saveable
from ..data import Network
from ..dynamics import batch_indices as draw_batches
from ..dynamics._losses import as_loss
from ..dynamics._maps import eigenvalues_in_program
from ._inputs import as_network, check_data, check_optimizer, check_steps, resolve_step_values

if TYPE_CHECKING:
    import optax

__all__ = ["Recording", "record"]


@dataclasses.dataclass(frozen=True, eq=False)
class Recording(Saveable):
    """A module's measured training run (`nqf.record`); `n` is the number of saved steps.

    **Attributes:** `steps` (n,) int; `t` = lr * steps (n,) (gradient-flow time); `M` = W W^T
    (n, p, p) and `mu` = W 1 (n, p) of the module's neurons (its `nqf.Network` layout); `loss`
    (n,): the training loss (1/(m k)) sum (f - y)^2 over all m inputs and k outputs (or the
    mean over inputs of the `loss` it was recorded with); `W_final`
    (p, d): the neuron parameters after the last step; `lr`; `optimizer`: a label; `trained`:
    ``"neurons"`` or ``"all"`` (what the optimizer updated).
    """

    steps: np.ndarray
    t: np.ndarray
    M: np.ndarray
    mu: np.ndarray
    loss: np.ndarray
    W_final: np.ndarray
    lr: float
    optimizer: str
    trained: str
    step_loss: np.ndarray | None = None
    step_eigenvalues: np.ndarray | None = None

    @property
    def step_times(self) -> np.ndarray | None:
        """Times t = lr j of the per-step values, j = 0..steps, (steps + 1,); None without them."""
        return None if self.step_loss is None else self.lr * np.arange(len(self.step_loss))

    @property
    def eigenvalues(self) -> np.ndarray:
        """Eigenvalues of M at the saved steps in decreasing order, (n, p)."""
        return np.linalg.eigvalsh(self.M)[:, ::-1]


def record(
    network: Network | eqx.Module | Any,
    x: PyTree[Float[ArrayLike, "m ..."]],
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"],
    optimizer: optax.GradientTransformation,
    *,
    lr: float,
    steps: int,
    save_every: int | None = None,
    W0: Float[ArrayLike, "p d"] | None = None,
    batch_size: int | None = None,
    batch_indices: Int[ArrayLike, "steps b"] | None = None,
    key: PRNGKeyArray | int = 0,
    train: str = "neurons",
    label: str | None = None,
    memory_budget: float | None = None,
    step_values: str = "auto",
    loss: str | Any = "mse",
) -> Recording:
    """Train the module with `optimizer` on the MSE loss (or `loss`) and record (M, mu, loss) at saved steps.

    Step n minimizes L_n = (1/(b k)) sum over the b inputs of its batch and the k outputs of
    (f(x) - y)^2 (full batch: b = m), the loss whose gradient flow `nqf.predict` integrates
    (Eq. E8); the update is ``optimizer.update`` / ``optax.apply_updates`` on the module's own
    parameter arrays, so Adam, gradient clipping, schedules or any optax chain act as they would
    in the user's own loop.

    **Arguments:**

    - `network`: an `nqf.Network`, or a module (equinox / flax.nnx; its neurons located by
      ``neurons="auto"``).
    - `x`: m inputs (an array or a pytree with leading axis m); `y`: labels (m,) or (m, k).
    - `optimizer`: an `optax.GradientTransformation`.
    - `lr`: the learning rate that sets the time unit: step n is t = lr * n (> 0).
    - `steps`: number of steps (>= 1); `save_every`: save every this many steps (default: about
      200 saves; step 0 and the last step are always saved).
    - `W0`: initial neuron parameters (p, d) (default: the module's own, `network.W`).
    - Batches: full batch by default; `batch_size` b with `key` (an int seed or PRNG key) draws
      the batches `nqf.batch_indices` draws (the same as `nqf.predict` with the same arguments),
      or `batch_indices` (steps, b) over the m inputs.
    - `train`: ``"neurons"`` (default: only the neuron arrays are trained, the frozen arrays keep
      their values, as in the prediction) or ``"all"`` (every floating array of the module).
    - `label`: a name for the optimizer in tables and plots (default ``"optax"``).
    - `memory_budget`: bytes for the saved (n, p, p) states (`nqf.memory`).
    - `loss`: the training loss, as in `nqf.predict` (``"mse"``, ``"cross_entropy"`` with integer
      classes y (m,), ``"logistic"``, or a callable ell(f_x, y_x) of one input): the mean over
      the batch's inputs of ell (`nqf.dynamics._losses`, the definition the NQF's map and flow
      use); `Recording.loss` is that loss over all m inputs.
    - `step_values`: values after every step (`step_loss`, `step_eigenvalues`), so that event
      times (`nqf.compare`) have one step's resolution instead of the save grid's:
      ``"auto"`` (default: ``"all"`` for full batch and p <= 128, ``"loss"`` for larger p,
      ``"none"`` with minibatches), ``"all"`` (the loss and the eigenvalues of W W^T),
      ``"loss"``, ``"none"``. Cost: for a full batch
      the loss is the step's own `value` (free); with minibatches it is one more forward pass
      over all m inputs per step; the eigenvalues one O(p^3) `eigvalsh` per step.

    **Returns:** a `Recording`.

    **Raises:** `TypeError` if `optimizer` is not an optax transformation or `network` is not a
    module; `ValueError` for mismatched `x`/`y`, a `W0` of the wrong shape, `lr` <= 0 or not
    finite, `steps`/`save_every` not integers >= 1, bad batches, an unknown `train` or `step_values`;
    `FloatingPointError` if the training diverges (the loss becomes non-finite; the message gives
    the step); `nqf.memory.MemoryBudgetError` if the saved states exceed the budget.
    """
    net = as_network(network)
    optimizer = check_optimizer(optimizer)
    lr = check_positive(lr, "lr")
    steps, save_every = check_steps(steps, save_every)
    if train not in ("neurons", "all"):
        raise ValueError(f"`train` must be 'neurons' or 'all'; found {train!r}.")
    x, y2, m, k = check_data(net, x, y, loss)
    loss = as_loss(loss, k)
    W0 = net.W if W0 is None else W0
    params = net.with_params_W(net.params, _check_W0(W0, net))
    if batch_indices is not None or batch_size is not None:
        idx = _batches(batch_indices, batch_size, key, m, steps)
    else:
        idx = None
    n_blocks = -(-steps // save_every)
    n_saves = n_blocks + 1
    step_values = resolve_step_values(step_values, idx is None, net.p)
    per_step = {"none": 0, "loss": 1, "all": net.p + 1}[step_values] * (n_blocks * save_every + 1)
    memory.check(
        8.0 * (n_saves * net.p * (net.p + 1) + per_step),
        f"record: {n_saves} saved states M (p, p) = ({net.p}, {net.p}) and the per-step values",
        "a larger `save_every`, or NQF_MEMORY_BUDGET / memory_budget=.",
        memory_budget,
    )
    mask = (
        net.neuron_mask()
        if train == "neurons"
        else jax.tree_util.tree_map(lambda a: hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating), params)
    )
    trainable, fixed = eqx.partition(params, mask)
    opt_state = optimizer.init(trainable)
    run = _compiled(net, optimizer, save_every, step_values, loss)
    # pad the batch schedule to whole blocks; the padded steps of the last block are not taken
    sched = None
    if idx is not None:
        pad = n_blocks * save_every - steps
        sched = jnp.concatenate([idx, jnp.zeros((pad, idx.shape[1]), idx.dtype)]).reshape(
            n_blocks, save_every, idx.shape[1]
        )
    counts = np.full(n_blocks, save_every)
    counts[-1] = steps - save_every * (n_blocks - 1)
    M, mu, loss, final, per = run(trainable, fixed, opt_state, x, y2, sched, jnp.asarray(counts))
    loss = np.asarray(loss)
    per = {k: np.concatenate([np.asarray(v)[:steps], np.asarray(v)[-1:]]) for k, v in per.items()}
    bad = np.flatnonzero(~np.isfinite(loss))
    step_numbers = np.concatenate([[0], np.cumsum(counts)])
    if bad.size:
        raise FloatingPointError(
            f"record: the training loss is not finite at step {int(step_numbers[bad[0]])} (saved steps every "
            f"{save_every}; last finite loss {loss[bad[0] - 1] if bad[0] else float('nan'):.4g}): the optimizer "
            "diverged (learning rate too large for this module?)."
        )
    return Recording(
        steps=step_numbers,
        t=lr * step_numbers,
        M=np.asarray(M),
        mu=np.asarray(mu),
        loss=loss,
        W_final=np.asarray(net.to_W(eqx.combine(final, fixed))),
        lr=lr,
        optimizer=label or "optax",
        trained=train,
        step_loss=per.get("loss"),
        step_eigenvalues=per.get("eigenvalues"),
    )


def _check_W0(W0, net: Network):
    W0 = np.asarray(W0, dtype=float)
    if W0.shape != (net.p, net.d):
        raise ValueError(f"`W0` must have shape (p, d) = ({net.p}, {net.d}) (the module's neurons); found {W0.shape}.")
    if not np.all(np.isfinite(W0)):
        raise ValueError("`W0` must be finite.")
    return jnp.asarray(W0)


def _batches(batch_indices, batch_size, key, m: int, steps: int):
    from ..dynamics._batches import check_batch_indices

    if batch_indices is not None:
        if batch_size is not None:
            raise ValueError("Give `batch_indices` or `batch_size`, not both.")
        return jnp.asarray(check_batch_indices(batch_indices, m, steps))
    return draw_batches(key, m, batch_size, steps)


def _compiled(net: Network, optimizer, save_every: int, step_values: str, loss):
    """`_program` cached on the network (one per optimizer, block length, `step_values` and loss)."""
    key = ("record", optimizer, save_every, step_values, loss)
    return net._compiled(key, lambda: _program(net, optimizer, save_every, step_values, loss))


def _program(net: Network, optimizer, save_every: int, step_values: str, loss):
    """One compiled program: a scan over save blocks, each a scan of `save_every` optimizer steps
    (steps past a block's count are computed and discarded: only the last block is short). With
    `step_values` the inner scan also returns, before each step, the loss over all m inputs (the
    step's own `value` for a full batch) and the eigenvalues of W W^T; the values after the last
    step come last: (n_blocks save_every + 1, ...) of which `record` keeps the first `steps`
    and the last. `loss`: a `PerSampleLoss`; y its label rows (m, k)."""
    import optax

    def loss_of(params, x, y):
        out = jax.vmap(lambda xx: jnp.atleast_1d(net.apply(params, xx)))(x)
        return loss.mean(out.reshape(y.shape), y)

    def step_loss(trainable, fixed, x, y, idx):
        if idx is not None:
            x, y = jax.tree_util.tree_map(lambda a: a[idx], x), y[idx]
        return loss_of(eqx.combine(trainable, fixed), x, y)

    def observe(trainable, fixed, x, y):
        params = eqx.combine(trainable, fixed)
        W = net.to_W(params)
        return W @ W.T, jnp.sum(W, axis=1), loss_of(params, x, y)

    def per_step(trainable, fixed, x, y, value, batched: bool):
        """{"loss": L(W_j) over all m inputs, "eigenvalues": of W_j W_j^T} (as `step_values` asks)."""
        if step_values == "none":
            return {}
        params = eqx.combine(trainable, fixed)
        out = {"loss": loss_of(params, x, y) if batched else value}
        if step_values == "all":  # W W^T; its eigenvalues once per block (`eigenvalues`)
            W = net.to_W(params)
            out["M"] = W @ W.T
        return out

    def eigenvalues(values: dict) -> dict:
        """`values` with "M" (n, p, p) replaced by its eigenvalues (n, p): one host call."""
        if "M" not in values:
            return values
        return {"loss": values["loss"], "eigenvalues": eigenvalues_in_program(values["M"])}

    @jax.jit
    def run(trainable, fixed, opt_state, x, y, sched, counts):
        def step(carry, inp):
            trainable, opt_state = carry
            j, count, idx = inp
            value, grads = jax.value_and_grad(step_loss)(trainable, fixed, x, y, idx)
            extra = {}
            if isinstance(optimizer, optax.GradientTransformationExtraArgs):  # optax's convention (line
                # searches, reduce_on_plateau): the loss, its gradient and the loss as a function
                extra = dict(value=value, grad=grads, value_fn=lambda t: step_loss(t, fixed, x, y, idx))
            updates, new_state = optimizer.update(grads, opt_state, trainable, **extra)
            new = (optax.apply_updates(trainable, updates), new_state)
            values = per_step(trainable, fixed, x, y, value, idx is not None)
            return jax.tree_util.tree_map(lambda a, b: jnp.where(j < count, a, b), new, carry), values

        def block(carry, inp):
            count, idx_block = inp
            js = jnp.arange(save_every)
            carry, values = jax.lax.scan(step, carry, (js, jnp.full(save_every, count), idx_block))
            return carry, (observe(carry[0], fixed, x, y), eigenvalues(values))

        first = observe(trainable, fixed, x, y)
        (final, _), (saved, values) = jax.lax.scan(block, (trainable, opt_state), (counts, sched))
        saved = tuple(jnp.concatenate([a[None], b]) for a, b in zip(first, saved))
        last = jax.tree_util.tree_map(lambda a: a[None], per_step(final, fixed, x, y, saved[2][-1], False))
        last = eigenvalues(last)  # after the last step: its saved loss
        values = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a.reshape(-1, *a.shape[2:]), b]), values, last)
        return (*saved, final, values)

    return run
