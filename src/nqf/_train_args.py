"""Argument handling shared by the closed training maps (`nqf.maps`) and the W-space reference
(`nqf.wspace`): the same inputs are validated the same way, with the same error messages."""

from __future__ import annotations

import numpy as np

from ._checks import check_positive
from .batches import batch_indices as draw_batches
from .batches import check_batch_indices
from .data import AbstractData
from .model import NQFModel

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam")
DEFAULT_MOMENTUM = {"sgd": 0.0, "momentum": 0.9, "nesterov": 0.9}


def as_model(model) -> NQFModel:
    """An `NQFModel`, wrapping a bare data set as the plain model (g = B = f0 = 0)."""
    if isinstance(model, NQFModel):
        return model
    if isinstance(model, AbstractData):
        return NQFModel(model)
    raise TypeError(
        f"`model` must be an `nqf.NQFModel` or an nqf data set; found {type(model).__name__}."
    )


def check_count(x, name: str) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"`{name}` must be an integer >= 1; found {x!r}.")
    return int(x)


def check_lr(lr) -> float:
    return check_positive(lr, "lr")


def check_weight_decay(gamma) -> float:
    return check_positive(gamma, "weight_decay", allow_zero=True)


def check_momentum(beta) -> float:
    try:
        b = float(beta)
    except (TypeError, ValueError):
        raise TypeError(f"`momentum` must be a real number in [0, 1); found {beta!r}.") from None
    if not (np.isfinite(b) and 0.0 <= b < 1.0):
        raise ValueError(f"`momentum` must lie in [0, 1); found {b!r}.")
    return b


def parse_optimizer(optimizer: str, momentum, nesterov: bool) -> tuple[str, float, bool]:
    """Resolve (`optimizer`, `momentum`, `nesterov`) to (name, beta, nesterov).

    ``"sgd"``: momentum defaults to 0 (any beta in [0, 1) gives heavy-ball momentum, as in
    `torch.optim.SGD`); ``"momentum"``: heavy ball, beta default 0.9; ``"nesterov"``: Nesterov
    momentum, beta default 0.9; ``"adam"``: `momentum` must be None (Adam uses `adam_b1`).
    """
    if not isinstance(optimizer, str) or optimizer.lower() not in OPTIMIZERS:
        raise ValueError(f"`optimizer` must be one of {OPTIMIZERS}; found {optimizer!r}.")
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
    return name, beta, bool(nesterov or name == "nesterov")


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


def save_schedule(steps: int, save_every: int):
    """(saved step numbers (n,), number of full save blocks, remainder steps)."""
    n_saves, remainder = divmod(steps, save_every)
    saved = np.arange(n_saves + 1) * save_every
    if remainder:
        saved = np.append(saved, steps)
    return saved, n_saves, remainder


def first_nonfinite_step(saved, values) -> int | None:
    """The first saved step whose value is not finite, or None."""
    ok = np.isfinite(values).reshape(values.shape[0], -1).all(axis=1)
    if ok.all():
        return None
    return int(saved[np.argmax(~ok)])


def loop_counts(save_every: int, remainder: int):
    """(save_every, remainder) as traced int32 scalars and the static flag remainder > 0, so that
    runs that differ only in `steps`/`save_every` (same number of saves) share one compilation."""
    import jax.numpy as jnp

    return jnp.asarray(save_every, jnp.int32), jnp.asarray(remainder, jnp.int32), remainder > 0
