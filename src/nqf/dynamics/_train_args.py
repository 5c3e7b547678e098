"""Argument handling shared by the closed training maps (`nqf.closed_sgd`, `nqf.closed_sgd_sweep`) and the
W-space reference (`nqf.train_w`): the same inputs are validated the same way, with the same error
messages.

**Under tracing** (an argument is a JAX tracer: the call sits inside `jax.jit`, `jax.vmap`,
`jax.grad`, ...) a value is unknown when the Python code runs. The real-valued hyperparameters
(`lr`, `momentum`, `weight_decay`, Adam's constants) and batch indices are then checked at run
time with `equinox.error_if` (same condition, the message says it was checked at run time; with
``EQX_ON_ERROR=nan`` the outputs become NaN instead), and `any_traced` tells the simulators to
take their traced path. Arguments that fix shapes or the program (`steps`, `save_every`,
`batch_size`, `d`, `form`, `nesterov`, `optimizer`, `loss`) must stay concrete Python values.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._core import memory
from .._core._checks import (
    RUN_TIME,
    any_traced,  # noqa: F401 (re-exported for the simulators)
    check_positive,
    is_traced,
    real_scalar,
    shape_str,
)
from ._batches import batch_indices as draw_batches
from ._batches import check_batch_indices

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam")
DEFAULT_MOMENTUM = {"sgd": 0.0, "momentum": 0.9, "nesterov": 0.9}


def check_count(x, name: str) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"`{name}` must be an integer >= 1; found {x!r}.")
    return int(x)


def guard(x, bad, message: str):
    """`x` (any pytree), raising `message` at run time where the traced predicate `bad` holds
    (`equinox.error_if`; the check runs only if the returned value is used)."""
    return eqx.error_if(x, bad, message + RUN_TIME)


def _traced_real(x, name: str, ok, condition: str):
    """A traced scalar hyperparameter as float64, with `ok(x)` checked at run time."""
    x = jnp.asarray(x, dtype=jnp.float64)
    if x.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar; found shape {shape_str(x.shape)}.")
    return guard(x, ~(jnp.isfinite(x) & ok(x)), f"`{name}` must be {condition}")


def check_hyper(x, name: str, *, allow_zero: bool = False):
    """`x` as float, finite and > 0 (>= 0 with `allow_zero`); or, traced, as a float64 scalar
    with that condition checked at run time."""
    if is_traced(x):
        ok = (lambda v: v >= 0) if allow_zero else (lambda v: v > 0)
        return _traced_real(x, name, ok, "finite and " + (">= 0" if allow_zero else "> 0"))
    return check_positive(x, name, allow_zero=allow_zero)


def check_lr(lr):
    return check_hyper(lr, "lr")


def check_rates(values, steps: int | None):
    """Per-step learning rates (steps,) (a schedule's values): finite, >= 0, not all zero, one per
    step; or, traced, of shape (steps,) with those conditions checked at run time."""
    if is_traced(values):
        values = jnp.asarray(values, dtype=jnp.float64)
        if values.ndim != 1 or (steps is not None and values.shape[0] != steps):
            raise ValueError(f"`lr` per-step rates must have shape (steps,) = ({steps},); found {values.shape}.")
        ok = jnp.all(jnp.isfinite(values) & (values >= 0)) & (jnp.sum(values) > 0)
        return guard(values, ~ok, "`lr` must be finite and >= 0 at every step, not all zero")
    values = np.asarray(values, dtype=float)
    if values.ndim != 1:
        raise ValueError(f"`lr` must be a scalar, a schedule or a per-step array (steps,); found shape {values.shape}.")
    if steps is not None and values.shape[0] != steps:
        raise ValueError(
            f"`lr` has {values.shape[0]} per-step values but `steps` = {steps}: give one learning rate per step."
        )
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0.0))
    if bad.size:
        raise ValueError(
            f"`lr` must be finite and >= 0 at every step; found {float(values[bad[0]])!r} at step {int(bad[0])}."
        )
    if not values.sum() > 0.0:
        raise ValueError("`lr` is zero at every step: the run would not move.")
    return values


def check_lr_or_rates(lr, steps: int):
    """`lr` of the map: a scalar > 0 (`check_lr`) or per-step rates (steps,) (`check_rates`)."""
    if jnp.ndim(lr) == 0:
        return check_lr(lr)
    return check_rates(lr, steps)


def check_weight_decay(gamma):
    return check_hyper(gamma, "weight_decay", allow_zero=True)


def check_unit_interval(x, name: str):
    """`x` as float in [0, 1) (momentum, Adam's decay rates), or, traced, checked at run time."""
    if is_traced(x):
        return _traced_real(x, name, lambda v: (v >= 0) & (v < 1), "in [0, 1)")
    v = real_scalar(x, name, "in [0, 1)")
    if not (np.isfinite(v) and 0.0 <= v < 1.0):
        raise ValueError(f"`{name}` must lie in [0, 1); found {v!r}.")
    return v


def check_momentum(beta):
    """`momentum` beta in [0, 1) (a float, or a traced scalar checked at run time)."""
    return check_unit_interval(beta, "momentum")


def check_nesterov(nesterov, beta, where: str = "") -> bool:
    """`nesterov` as bool: TypeError unless a bool; ValueError for Nesterov with a concrete
    momentum beta = 0 (then there is no look-ahead: it is plain SGD, so the flag is a mistake).
    `beta` may be a float, an array of member values, or traced (not checked)."""
    if not isinstance(nesterov, (bool, np.bool_)):
        raise TypeError(f"`nesterov` must be True or False; found {nesterov!r}.")
    if nesterov and not is_traced(beta) and np.any(np.asarray(beta) == 0.0):
        raise ValueError(
            f"`nesterov=True` needs a momentum beta in (0, 1){where}; found momentum = 0 (Nesterov "
            "with beta = 0 is plain SGD). Pass e.g. momentum=0.9, or drop `nesterov`."
        )
    return bool(nesterov)


def parse_optimizer(optimizer: str, momentum, nesterov: bool, *, optax_ok: bool = False) -> tuple[str, object, bool]:
    """Resolve (`optimizer`, `momentum`, `nesterov`) to (name, beta, nesterov).

    ``"sgd"``: momentum defaults to 0 (any beta in [0, 1) gives heavy-ball momentum, as in
    `torch.optim.SGD`); ``"momentum"``: heavy ball, beta default 0.9; ``"nesterov"``: Nesterov
    momentum, beta default 0.9; ``"adam"``: `momentum` must be None (Adam uses `adam_b1`).
    beta is a float, or the traced scalar (checked at run time) for a traced `momentum`.
    Nesterov (the flag or the name) with beta = 0 raises `ValueError`; an unknown name
    `ValueError`; anything but a str (an optax transformation included: it has no closed map)
    `TypeError` (`nqf.train_w` takes optax transformations before calling this; its `optax_ok`
    adds that hint to the unknown-name message).
    """
    if not isinstance(optimizer, str):  # an optax transformation or a wrong type: TypeError
        optax_transformation(optimizer, closed=True)
    if optimizer.lower() not in OPTIMIZERS:
        hint = " (or pass an optax.GradientTransformation, e.g. optax.rmsprop(1e-3))" if optax_ok else ""
        raise ValueError(f"`optimizer` must be one of {OPTIMIZERS}; found {optimizer!r}{hint}.")
    name = optimizer.lower()
    if not isinstance(nesterov, (bool, np.bool_)):
        raise TypeError(f"`nesterov` must be True or False; found {nesterov!r}.")
    if name == "adam":
        if momentum is not None or nesterov:
            raise ValueError(
                "`momentum`/`nesterov` do not apply to optimizer='adam'; set its moment decay "
                "rates with `adam_b1`, `adam_b2`."
            )
        return name, 0.0, False
    beta = check_momentum(DEFAULT_MOMENTUM[name] if momentum is None else momentum)
    return name, beta, check_nesterov(bool(nesterov or name == "nesterov"), beta)


def _optax():
    """The optax module, imported on first use (so that `import nqf` does not import it), or
    None if it is not installed."""
    try:
        import optax
    except ImportError:  # pragma: no cover - optax is a dependency
        return None
    return optax


def optax_transformation(optimizer, *, closed: bool = False):
    """None for an optimizer name (a str, checked by `parse_optimizer`); `optimizer` itself for an
    `optax.GradientTransformation` (any, e.g. ``optax.adam(1e-3)``, ``optax.chain(...)``); else
    `TypeError` naming what was expected and found. optax is imported only for a non-string.

    With `closed` (the closed maps, `nqf.closed_sgd` / `nqf.closed_map`) an optax transformation
    is refused too (`TypeError`): Theorem 2 / Corollary 2 close (M, mu) only for SGD and momentum;
    `nqf.train_w` runs any optax transformation in weight space.
    """
    if isinstance(optimizer, str):
        return None
    optax = _optax()
    is_optax = optax is not None and isinstance(optimizer, optax.GradientTransformation)
    if is_optax and not closed:
        return optimizer
    if is_optax:
        raise TypeError(
            "`optimizer` of a closed map must be one of ('sgd', 'momentum', 'nesterov'); found an "
            "optax.GradientTransformation, which has no closed map on (M, mu) (Theorem 2 / "
            "Corollary 2 cover SGD and momentum only). Train W itself with "
            "`nqf.train_w(model, W0, lr=..., steps=..., optimizer=<the optax transformation>)`."
        )
    expected = OPTIMIZERS if not closed else OPTIMIZERS[:3]
    also = "" if closed else " or an optax.GradientTransformation (e.g. optax.adam(1e-3))"
    raise TypeError(
        f"`optimizer` must be one of {expected}{also}; found {optimizer!r} of type {type(optimizer).__name__}."
    )


def check_optax_args(momentum, nesterov, adam: dict) -> None:
    """With an optax `optimizer`, the string optimizers' settings (`momentum`, `nesterov`, Adam's
    constants; `adam` maps each name to (value, default)) must be left at their defaults: they
    belong in the optax transformation. `ValueError` names the ones that were set."""
    set_ = ["momentum"] if momentum is not None else []
    if not isinstance(nesterov, (bool, np.bool_)) or nesterov:
        set_.append("nesterov")
    for name, (value, default) in adam.items():
        if is_traced(value) or value != default:
            set_.append(name)
    if set_:
        names = ", ".join(f"`{n}`" for n in set_)
        raise ValueError(
            f"{names} do not apply to an optax `optimizer` (found set; leave them at their "
            "defaults): configure the optax transformation itself, e.g. optax.sgd(lr, "
            "momentum=0.9, nesterov=True) or optax.adam(lr, b1, b2, eps)."
        )


def resolve_batches(batch_indices, batch_size, key, m: int, steps: int):
    """The batch schedule (steps, b) as a JAX int array, or None for full batch.

    Give either `batch_indices` (steps, b) or `batch_size` (with `key`, default seed 0).
    """
    if batch_indices is not None:
        if batch_size is not None or key is not None:
            raise ValueError(
                "Give either `batch_indices` or (`batch_size`, `key`), not both: the batch "
                "schedule is drawn from (`key`, `batch_size`) only when no indices are given."
            )
        return check_batch_indices(batch_indices, m, steps)
    if batch_size is None:
        if key is not None:
            raise ValueError("`key` draws minibatches and needs `batch_size`.")
        return None
    return draw_batches(0 if key is None else key, m, batch_size, steps)


def loss_inputs(loss, m: int) -> int:
    """The number of inputs m / k of `m` data rows for a loss that couples k outputs per input
    (`PerSampleLoss.k`; m for k = 1).

    **Raises:** `ValueError` naming `loss` if m is not a multiple of k."""
    k = loss.k
    if m % k:
        raise ValueError(
            f"`loss` ({loss.name}) couples k = {k} outputs per input, but the model has m = {m} data rows, "
            f"not a multiple of k (rows mu k + o, Corollary 1)."
        )
    return m // k


def resolve_loss_batches(loss, batch_indices, batch_size, key, m: int, steps: int):
    """`resolve_batches` over the loss's samples: for a loss that couples k > 1 outputs the
    schedule (steps, b) selects inputs (0 <= index < m / k), expanded to their b k data rows
    (`expand_rows`: all k rows of an input together); for k = 1 the rows themselves."""
    from ._losses import expand_rows

    return expand_rows(resolve_batches(batch_indices, batch_size, key, loss_inputs(loss, m), steps), loss.k)


def save_schedule(steps: int, save_every: int):
    """(saved step numbers (n,), number of full save blocks, remainder steps)."""
    n_saves, remainder = divmod(steps, save_every)
    saved = np.arange(n_saves + 1) * save_every
    if remainder:
        saved = np.append(saved, steps)
    return saved, n_saves, remainder


def check_saves_memory(where: str, steps: int, save_every: int, floats: int, members: int = 1, ways: str = "") -> None:
    """Raise `nqf.memory.MemoryBudgetError` before a run of `steps` steps that saves every
    `save_every` steps (`save_schedule`: steps // save_every + 2 saves at most) `floats` float64
    values per save, for each of `members` members, allocates them over the memory budget."""
    n = steps // save_every + 2
    count = f"{members} members x " if members > 1 else ""
    memory.check(
        8.0 * members * n * floats,
        f"{where}: the saved states ({count}{n - 1} saves for steps={steps}, save_every={save_every}, "
        f"{floats} values each)",
        f"a larger `save_every` (fewer saved states), fewer `steps`{ways}.",
    )


def first_nonfinite_step(saved, values) -> int | None:
    """The first saved step whose value is not finite, or None."""
    ok = np.isfinite(values).reshape(values.shape[0], -1).all(axis=1)
    if ok.all():
        return None
    return int(saved[np.argmax(~ok)])


def check_finite(tree, values, saved, what: str, lr):
    """Return `tree` if the saved `values` (n, ...) are all finite; else raise
    ``FloatingPointError("{what} by step {k} (lr=...). Reduce `lr` (or `weight_decay`).")``. Traced `values`: the
    same check at run time (`guard`) on every leaf of `tree`."""
    if is_traced(values):
        return guard(tree, ~jnp.all(jnp.isfinite(values)), f"{what}; reduce `lr` (or `weight_decay`)")
    bad = first_nonfinite_step(saved, values)
    if bad is not None:
        raise FloatingPointError(f"{what} by step {bad} (lr={_rate_label(lr, bad)}). Reduce `lr` (or `weight_decay`).")
    return tree


def _rate_label(lr, step: int) -> str:
    """The learning rate as printed in a message: the scalar, or a schedule's rate near `step`."""
    if np.ndim(lr) == 0:
        return f"{float(lr):g}"
    rates = np.asarray(lr)
    return f"schedule, {float(rates[min(max(step - 1, 0), rates.size - 1)]):g} at step {step}"


def loop_counts(save_every: int, remainder: int, static: bool = False):
    """(save_every, remainder, remainder > 0) for the compiled loop: traced int32 scalars (and
    the static flag), so that runs that differ only in `steps`/`save_every` (same number of
    saves) share one compilation; or, with `static`, Python ints, which make the loops fixed-
    length scans that reverse-mode autodiff (`jax.grad`) can differentiate."""
    if static:
        return save_every, remainder, remainder > 0
    return jnp.asarray(save_every, jnp.int32), jnp.asarray(remainder, jnp.int32), remainder > 0
