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
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, PyTree

from .._core import memory
from .._core._checks import keyword_options
from .._core.io import Saveable
from ..data import Network
from ..dynamics import batch_indices as draw_batches
from ..dynamics._losses import as_loss
from ..dynamics._maps import eigenvalues_in_program
from ..dynamics._training import SGD, Flow, from_keywords, split_legacy, step_times
from . import _heldout as heldout
from ._inputs import as_network, check_data, check_optimizer, check_steps, initial_weights, resolve_step_values

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
    ``"neurons"`` or ``"all"`` (what the optimizer updated); `step_loss`, `step_eigenvalues`: the
    per-step values (`step_values`); with held-out data (`record(x_test=, y_test=)`, else None)
    `test_outputs` (n, m_test, k), or (n, m_test) for one output: the module's own outputs on the
    test inputs at the saved steps, `test_loss` (n,) and `test_accuracy` (n,) (the definitions of
    `Prediction`'s, `nqf.network._heldout`); `wall_time_s`: the seconds `record` took.
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
    test_outputs: np.ndarray | None = None
    test_loss: np.ndarray | None = None
    test_accuracy: np.ndarray | None = None
    wall_time_s: float = float("nan")

    @property
    def step_times(self) -> np.ndarray | None:
        """Times t = lr j of the per-step values, j = 0..steps, (steps + 1,); None without them."""
        return None if self.step_loss is None else np.asarray(step_times(self.lr, len(self.step_loss) - 1))

    @property
    def eigenvalues(self) -> np.ndarray:
        """Eigenvalues of M at the saved steps in decreasing order, (n, p)."""
        return np.linalg.eigvalsh(self.M)[:, ::-1]


def record(
    network: Network | eqx.Module | Any,
    x: PyTree[Float[ArrayLike, "m ..."]],
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"],
    training: SGD | optax.GradientTransformation | None = None,
    *,
    optimizer: optax.GradientTransformation | None = None,
    save_every: int | None = None,
    W0: Float[ArrayLike, "p d"] | None = None,
    init_scale: float | None = None,
    train: str = "neurons",
    x_test: PyTree[Float[ArrayLike, "m_test ..."]] | None = None,
    y_test: Float[ArrayLike, " m_test"] | Float[ArrayLike, "m_test k"] | None = None,
    **options: Any,
) -> Recording:
    """Train the module as `training` describes (its loss, `nqf.SGD(loss=)`) and record (M, mu, loss) at saved
    steps.

    `training` is the `nqf.SGD` description `nqf.predict` takes: `record` builds its optax optimizer from it
    (``optax.sgd`` with its learning rate or schedule, momentum and Nesterov, after ``optax.add_decayed_weights``
    for weight decay) and draws the same batches, so the prediction and the measurement describe one run. Step n
    minimizes L_n = (1/(b k)) sum over the b inputs of its batch and the k outputs of (f(x) - y)^2 (full batch: b =
    m), the loss whose gradient flow `nqf.predict` integrates (Eq. E8); the update is ``optimizer.update`` /
    ``optax.apply_updates`` on the module's own parameter arrays.

    **Arguments:**

    - `network`: an `nqf.Network`, or a module (equinox / flax.nnx; its neurons located by ``neurons="auto"``).
    - `x`: m inputs (an array or a pytree with leading axis m); `y`: labels (m,) or (m, k).
    - `training`: an `nqf.SGD` (steps, learning rate or schedule, momentum, weight decay, batches). Time is
      gradient-flow time: step n at t = lr_0 + ... + lr_{n-1} (lr * n).
    - `optimizer`: an `optax.GradientTransformation` that replaces the SGD update, for a deliberate comparison
      outside the NQF's maps (Adam, clipping, any chain); `training` still gives the steps, batches and the time
      axis (its lr is the time unit, stated in `Recording.optimizer`), and must then have no momentum or weight
      decay of its own. An optimizer whose first step is a plain multiple c of the gradient (``optax.sgd(c)``) with
      c different from the SGD's lr is refused: its time axis would be wrong.
    - The keywords of earlier versions (`lr`, `steps`, `batch_size`, `batch_indices`, `key`, and an optax optimizer
      as the fourth argument) still work for this release, with a `DeprecationWarning`.
    - `save_every`: save every this many steps (default: about 200 saves; step 0 and the last step are always
      saved).
    - `W0`: initial neuron parameters (p, d) (default: the module's own, `network.W`), scaled by `init_scale` if
      given (as in `nqf.predict`).
    - `train`: ``"neurons"`` (default: only the neuron arrays are trained, the frozen arrays keep their values, as
      in the prediction) or ``"all"`` (every floating array of the module but the network's `constants`, which are
      never trained).
    - Read from ``**options`` (an unknown keyword: `TypeError`): `label`, a name for the optimizer in tables and
      plots (default: the description's label); `memory_budget`, bytes for the saved (n, p, p) states
      (`nqf.memory`); `step_values` (below).
    - The loss is the description's (``training.loss``, as in `nqf.predict`: ``"mse"``, ``"cross_entropy"`` with
      integer classes y (m,), ``"logistic"``, or a callable ell(f_x, y_x) of one input): the mean over the batch's
      inputs of ell (`nqf.dynamics._losses`, the definition the NQF's map and flow use); `Recording.loss` is that
      loss over all m inputs.
    - `step_values`: values after every step (`step_loss`, `step_eigenvalues`), so that event times (`nqf.compare`)
      have one step's resolution instead of the save grid's: ``"auto"`` (default: ``"all"`` for full batch and p <=
      128, ``"loss"`` for larger p, ``"none"`` with minibatches), ``"all"`` (the loss and the eigenvalues of W W^T),
      ``"loss"``, ``"none"``. Cost: for a full batch the loss is the step's own `value` (free); with minibatches one
      more forward pass over all m inputs per step; the eigenvalues one O(p^3) `eigvalsh` per step.
    - `x_test`, `y_test`: held-out inputs (`x`'s structure and per-input shape) and optional labels (`y`'s form):
      the module's outputs on them at the saved steps, inside the compiled program, and their loss and accuracy
      (`Recording.test_outputs`, `test_loss`, `test_accuracy`).

    **Returns:** a `Recording`.

    **Raises:** `TypeError` if `training` is not an `nqf.SGD` (an `nqf.Flow` has no steps to run), `optimizer` is
    not an optax transformation or `network` is not a module; `ValueError` for no training description, mismatched
    `x`/`y`, a `W0` of the wrong shape, `save_every` not an integer >= 1, bad batches, an unknown `train` or
    `step_values`, an `x_test` / `y_test` that does not fit `x` / `y` (or `y_test` without `x_test`), an `optimizer`
    with an SGD that has momentum or weight decay, or whose step disagrees with the time unit, a loss that is not
    finite at the initial weights; `FloatingPointError` if the training diverges (the loss becomes non-finite; the
    message gives the step); `nqf.memory.MemoryBudgetError` if the saved states exceed the budget.
    """
    t_start = time.perf_counter()
    legacy, options = split_legacy("record", options)
    label, memory_budget, step_values = keyword_options("record", options, **_OPTIONS)
    training, optimizer = _training_and_optimizer(training, optimizer, legacy)
    net = as_network(network)
    steps, save_every = check_steps(training.steps, save_every)
    if train not in ("neurons", "all"):
        raise ValueError(f"`train` must be 'neurons' or 'all'; found {train!r}.")
    x, y2, m, k = check_data(net, x, y, training.loss)
    ell = as_loss(training.loss, k)
    test = heldout.check_test(net, x, y, y2, x_test, y_test, ell)
    W0 = initial_weights(net, W0, init_scale)
    idx = None if training.full_batch else _batches(training.batch_indices, training.batch_size, training.key, m, steps)
    n_blocks = -(-steps // save_every)
    step_values = resolve_step_values(step_values, idx is None, net.p)
    _check_memory(net.p, n_blocks, save_every, step_values, heldout.record_bytes(test, n_blocks + 1, k), memory_budget)
    trainable, fixed = _partition(net, jnp.asarray(W0), train)
    if optimizer is not None:
        _check_time_unit(optimizer, trainable, training)
    program = optimizer if optimizer is not None else _SGDProgram(training.nesterov)
    run = _compiled(net, program, save_every, step_values, ell)
    sched, counts = _blocks(idx, steps, save_every, n_blocks)
    hyper = tuple(jnp.asarray(v, float) for v in (training.lr, training.momentum, training.weight_decay))
    out = run(trainable, fixed, x, y2, sched, jnp.asarray(counts), hyper, None if test is None else test.x)
    (M, mu, loss), (final, per) = out[:3], out[-2:]
    held = heldout.recorded(test, out[3:-2])
    step_numbers = _finite_run(np.asarray(loss), counts, save_every)
    per = {k: np.concatenate([np.asarray(v)[:steps], np.asarray(v)[-1:]]) for k, v in per.items()}
    name = training.label() if optimizer is None else f"{label or 'optax'} (time axis of {training.label()})"
    return Recording(
        steps=step_numbers,
        t=np.asarray(training.times)[step_numbers],
        M=np.asarray(M),
        mu=np.asarray(mu),
        loss=np.asarray(loss),
        W_final=np.asarray(net.to_W(eqx.combine(final, fixed))),
        lr=training.lr if training.scheduled else float(training.lr),
        optimizer=label if label is not None and optimizer is None else name,
        trained=train,
        step_loss=per.get("loss"),
        step_eigenvalues=per.get("eigenvalues"),
        **held,
        wall_time_s=time.perf_counter() - t_start,
    )


_OPTIONS = dict(label=None, memory_budget=None, step_values="auto")  # `record`'s keywords read from **options


def _check_memory(p: int, n_blocks: int, save_every: int, step_values: str, test_bytes: float, budget) -> None:
    """`nqf.memory.MemoryBudgetError` before `record` runs when its n_blocks + 1 saved states (M
    (p, p), mu (p,)), the per-step values of `step_values` and the held-out outputs
    (`test_bytes`) exceed the memory budget (`budget`, else NQF_MEMORY_BUDGET)."""
    n_saves = n_blocks + 1
    per_step = {"none": 0, "loss": 1, "all": p + 1}[step_values] * (n_blocks * save_every + 1)
    memory.check(
        8.0 * (n_saves * p * (p + 1) + per_step) + test_bytes,
        f"record: {n_saves} saved states M (p, p) = ({p}, {p}) and the per-step values",
        "a larger `save_every`, or NQF_MEMORY_BUDGET / memory_budget=.",
        budget,
    )


def _partition(net: Network, W0, train: str):
    """(trainable, fixed) parameters of the module at neuron weights W0: the neuron arrays
    (``train="neurons"``) or every floating array but the declared `constants` (``"all"``)."""
    params = net.with_params_W(net.params, W0)
    mask = (
        net.neuron_mask()
        if train == "neurons"
        else jax.tree_util.tree_map(  # every floating array but the declared `constants`
            lambda a, c: hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating) and not c,
            params,
            net.constant_mask(),
        )
    )
    return eqx.partition(params, mask)


def _blocks(idx, steps: int, save_every: int, n_blocks: int):
    """(the batch schedule (n_blocks, save_every, b) or None, the steps taken per block
    (n_blocks,)): the schedule is padded to whole blocks; the padded steps of the last block
    are not taken."""
    sched = None
    if idx is not None:
        pad = n_blocks * save_every - steps
        sched = jnp.concatenate([idx, jnp.zeros((pad, idx.shape[1]), idx.dtype)]).reshape(
            n_blocks, save_every, idx.shape[1]
        )
    counts = np.full(n_blocks, save_every)
    counts[-1] = steps - save_every * (n_blocks - 1)
    return sched, counts


def _finite_run(loss: np.ndarray, counts: np.ndarray, save_every: int) -> np.ndarray:
    """The saved step numbers (n,) of `record`'s blocks; `ValueError` for a non-finite loss at the
    initial weights, `FloatingPointError` naming the first saved step with a non-finite training
    loss (the optimizer diverged)."""
    bad = np.flatnonzero(~np.isfinite(loss))
    step_numbers = np.concatenate([[0], np.cumsum(counts)])
    if bad.size and bad[0] == 0:  # before any update: the initial weights themselves (issue 36)
        raise ValueError(
            "record: the training loss at the initial weights (step 0) is not finite: `W0` (or `init_scale`) "
            "overflows float64 in the module's outputs. Start from smaller weights."
        )
    if bad.size:
        raise FloatingPointError(
            f"record: the training loss is not finite at step {int(step_numbers[bad[0]])} (saved steps every "
            f"{save_every}; last finite loss {loss[bad[0] - 1] if bad[0] else float('nan'):.4g}): the optimizer "
            "diverged (learning rate too large for this module?)."
        )
    return step_numbers


def _training_and_optimizer(training, optimizer, deprecated):
    """(the SGD description, the user's optax optimizer or None) of `record`'s arguments; an
    optax optimizer as the fourth argument and the keywords lr=, steps=, ... are the deprecated
    form (a `DeprecationWarning`)."""
    import warnings

    if training is not None and not isinstance(training, (SGD, Flow)):
        if optimizer is not None:
            raise ValueError("Give the optax optimizer once: as `optimizer=`.")
        optimizer = check_optimizer(training)
        training = None
        warnings.warn(
            "record(net, x, y, optimizer, lr=..., steps=...) is deprecated: pass nqf.SGD(lr, steps=...) as the "
            "fourth argument (record builds optax.sgd from it), or optimizer=... with it for another update rule.",
            DeprecationWarning,
            stacklevel=4,
        )
    elif optimizer is not None:
        optimizer = check_optimizer(optimizer)
    training = from_keywords("record", training, deprecated, stacklevel=4)
    if training is None:
        raise ValueError(
            "record needs a training description: nqf.record(net, x, y, nqf.SGD(lr, steps=...)) (the same one "
            "nqf.predict takes)."
        )
    if isinstance(training, Flow):
        raise TypeError(
            f"record trains the module step by step: `training` must be an nqf.SGD (a learning rate and steps); found {training.label()} "
            "(a flow is the limit lr -> 0: record it with a small lr, e.g. nqf.SGD(lr, t1=...))."
        )
    if optimizer is not None and (float(training.momentum) or float(training.weight_decay)):
        raise ValueError(
            f"With `optimizer=` the optimizer is the update rule; {training.label()} also has momentum or weight decay: "
            "put them in the optax chain, and give the SGD only the steps, batches and time unit lr."
        )
    return training, optimizer


def _check_time_unit(optimizer, trainable, training: SGD) -> None:
    """Refuse an optimizer whose first step is -c x gradient with c != the time unit lr (e.g.
    ``optax.sgd(0.2)`` with lr = 0.1): probed on a gradient with distinct entries."""
    leaves = [a for a in jax.tree_util.tree_leaves(trainable) if hasattr(a, "shape")]
    probe_vals = jnp.linspace(0.5, 1.5, sum(a.size for a in leaves))
    offsets = np.cumsum([0] + [a.size for a in leaves])
    it = iter(range(len(leaves)))
    probe = jax.tree_util.tree_map(
        lambda a: (lambda i: probe_vals[offsets[i] : offsets[i + 1]].reshape(a.shape).astype(a.dtype))(next(it)),
        trainable,
    )
    try:
        updates, _ = optimizer.update(probe, optimizer.init(trainable), trainable)
    except TypeError:  # an optimizer that needs extra arguments (value, value_fn): not probed
        return
    ratio = np.concatenate(
        [
            np.ravel(-np.asarray(u) / np.asarray(g))
            for u, g in zip(jax.tree_util.tree_leaves(updates), jax.tree_util.tree_leaves(probe))
        ]
    )
    c = float(ratio[0])
    lr0 = float(np.ravel(training.lr)[0])
    if c > 0 and np.allclose(ratio, c, rtol=1e-6, atol=0) and not np.isclose(c, lr0, rtol=1e-6):
        raise ValueError(
            f"`optimizer`'s first step is -{c:g} x gradient, but the time unit is lr = {lr0:g} ({training.label()}): "
            f"the run would be labelled on a wrong time axis. Pass nqf.SGD({c:g}, steps=...), or drop `optimizer` "
            "(record builds optax.sgd from the description)."
        )


def _batches(batch_indices, batch_size, key, m: int, steps: int):
    from ..dynamics._batches import check_batch_indices

    if batch_indices is not None:
        if batch_size is not None:
            raise ValueError("Give `batch_indices` or `batch_size`, not both.")
        return jnp.asarray(check_batch_indices(batch_indices, m, steps))
    return draw_batches(key, m, batch_size, steps)


class _SGDProgram(NamedTuple):
    """`record`'s own SGD (`nqf.SGD.optax`'s update with traced hyperparameters): the program
    key of `_compiled` (an optax transformation is a NamedTuple too: told apart by this type)."""

    nesterov: bool


def _compiled(net: Network, optimizer, save_every: int, step_values: str, loss):
    """`_program` cached on the network (one per optimizer, block length and `step_values`;
    `optimizer` a `_SGDProgram`: SGD with traced hyperparameters, one program for any
    learning rate, schedule length, momentum and weight decay; one per loss)."""
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

    def observe(trainable, fixed, x, y, x_test):
        params = eqx.combine(trainable, fixed)
        W = net.to_W(params)
        test = () if x_test is None else (heldout.module_outputs(net, params, x_test),)
        return W @ W.T, jnp.sum(W, axis=1), loss_of(params, x, y), *test

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

    def make(hyper):
        """The optax optimizer: the user's, or SGD from the traced (lr or rates, beta, gamma)."""
        if not isinstance(optimizer, _SGDProgram):
            return optimizer
        rates, beta, gamma = hyper
        rate = (lambda n: rates) if rates.ndim == 0 else (lambda n: rates[jnp.minimum(n, rates.shape[0] - 1)])
        sgd = optax.sgd(rate, momentum=beta, nesterov=optimizer.nesterov)
        return optax.chain(optax.add_decayed_weights(gamma), sgd)

    @jax.jit
    def run(trainable, fixed, x, y, sched, counts, hyper, x_test):
        opt = make(hyper)
        opt_state = opt.init(trainable)

        def step(carry, inp):
            trainable, opt_state = carry
            j, count, idx = inp
            value, grads = jax.value_and_grad(step_loss)(trainable, fixed, x, y, idx)
            extra = {}
            if isinstance(opt, optax.GradientTransformationExtraArgs):  # optax's convention (line
                # searches, reduce_on_plateau): the loss, its gradient and the loss as a function
                extra = dict(value=value, grad=grads, value_fn=lambda t: step_loss(t, fixed, x, y, idx))
            updates, new_state = opt.update(grads, opt_state, trainable, **extra)
            new = (optax.apply_updates(trainable, updates), new_state)
            values = per_step(trainable, fixed, x, y, value, idx is not None)
            return jax.tree_util.tree_map(lambda a, b: jnp.where(j < count, a, b), new, carry), values

        def block(carry, inp):
            count, idx_block = inp
            js = jnp.arange(save_every)
            carry, values = jax.lax.scan(step, carry, (js, jnp.full(save_every, count), idx_block))
            return carry, (observe(carry[0], fixed, x, y, x_test), eigenvalues(values))

        first = observe(trainable, fixed, x, y, x_test)
        (final, _), (saved, values) = jax.lax.scan(block, (trainable, opt_state), (counts, sched))
        saved = tuple(jnp.concatenate([a[None], b]) for a, b in zip(first, saved))
        last = jax.tree_util.tree_map(lambda a: a[None], per_step(final, fixed, x, y, saved[2][-1], False))
        last = eigenvalues(last)  # after the last step: its saved loss
        values = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a.reshape(-1, *a.shape[2:]), b]), values, last)
        return (*saved, final, values)

    return run
