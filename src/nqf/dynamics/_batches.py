"""Minibatch sampling shared by the closed maps (`nqf.closed_sgd`) and the W-space reference
(`nqf.train_w`), so that both see identical batches (Theorem 2 holds batch by batch).

A batch schedule is an integer array of shape (steps, b): row n lists the b training inputs of
step n. Step n then minimizes L_n = (1/b) sum_{j < b} ell(f_{idx[n, j]}, y_{idx[n, j]}), i.e. the
per-sample weights w_mu = (count of mu in row n) / b (`batch_weights`); full batch is w = 1/m.
The simulators evaluate only the b rows of a step (`restrict`), so a minibatch step costs O(b)
data operations, not O(m).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from .._core import memory
from .._core._checks import is_traced

if TYPE_CHECKING:
    from ..data._model import NQFModel

__all__ = ["batch_indices", "batch_weights", "check_batch_indices", "restrict"]


def _as_key(key):
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        if not -(2**63) <= int(key) < 2**63:  # jax.random.key's OverflowError said nothing of `key`
            raise ValueError(f"`key` as an integer seed must lie in [-2**63, 2**63) (int64); found {int(key)}.")
        return jax.random.key(int(key))
    if (
        is_traced(key) and isinstance(key, jax.Array) and key.shape == () and jnp.issubdtype(key.dtype, jnp.integer)
    ):  # a traced integer seed (e.g. vmapped)
        return jax.random.key(key)
    if isinstance(key, jax.Array) and (
        jnp.issubdtype(key.dtype, jax.dtypes.prng_key) or (key.dtype == jnp.uint32 and key.shape == (2,))
    ):
        return key
    raise TypeError(f"`key` must be a JAX PRNG key or an integer seed; found {key!r}.")


def _check_count(x, name: str) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"`{name}` must be an integer >= 1; found {x!r}.")
    return int(x)


def batch_indices(key: PRNGKeyArray | int, m: int, batch_size: int, steps: int) -> Int[Array, "steps b"]:
    """Draw `steps` minibatches of `batch_size` distinct training inputs out of `m`.

    Each row is the first `batch_size` entries of an independent uniformly random permutation
    of 0..m-1 (the argsort of m uniform draws): sampling without replacement within a step,
    independently across steps.

    **Arguments:** `key`: a JAX PRNG key or an integer seed; `m`: number of training inputs;
    `batch_size`: b with 1 <= b <= m; `steps`: number of rows.

    **Returns:** an int32 array of shape (steps, batch_size).

    **Raises:** `ValueError` if `batch_size` is not in [1, m] or `m`, `steps` are not integers
    >= 1; `TypeError` for a bad key; `nqf.memory.MemoryBudgetError` before drawing a schedule
    over the memory budget (`check_schedule_memory`).
    """
    m = _check_count(m, "m")
    steps = _check_count(steps, "steps")
    if isinstance(batch_size, (bool, np.bool_)) or not isinstance(batch_size, (int, np.integer)):
        raise ValueError(f"`batch_size` must be an integer in [1, m={m}]; found {batch_size!r}.")
    if not 1 <= batch_size <= m:
        raise ValueError(
            f"`batch_size` must be an integer in [1, m={m}] (a batch draws distinct training "
            f"inputs); found {batch_size}."
        )
    check_schedule_memory(m, int(batch_size), steps)
    return _draw(_as_key(key), m, batch_size, steps)


def check_schedule_memory(m: int, batch_size: int, steps: int, members: int = 1) -> None:
    """Raise `nqf.memory.MemoryBudgetError` before `_draw` builds `members` schedules over the
    budget: per step m uniform float64 draws and their int64 argsort, then b int32 indices."""
    nbytes = 8.0 * members * steps * (2 * m + batch_size / 2)
    count = f"{members} members x " if members > 1 else ""
    memory.check(
        nbytes,
        f"The batch schedule ({count}steps={steps} rows of batch_size={batch_size} out of m={m} "
        "inputs, drawn from steps x m uniform draws)",
        "fewer `steps` per call (continue from the last state), or your own `batch_indices`.",
    )


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _draw(key, m: int, batch_size: int, steps: int):
    u = jax.random.uniform(key, (steps, m))
    return jnp.argsort(u, axis=1)[:, :batch_size].astype(jnp.int32)


def check_batch_indices(
    idx: Int[Array, "steps b"] | Int[np.ndarray, "steps b"], m: int, steps: int
) -> Int[Array, "steps b"]:
    """Validate a batch schedule: integer array of shape (steps, b), 1 <= b <= m, entries in
    [0, m). Repeated entries within a row are allowed (they count twice in the weights).

    A traced schedule (inside jit/vmap) is checked for dtype and shape when traced and for the
    range of its entries at run time (`equinox.error_if`).

    **Raises:** `ValueError` naming the violated condition.
    """
    traced = is_traced(idx)
    arr = idx if traced else np.asarray(idx)
    if not jnp.issubdtype(arr.dtype, jnp.integer):
        raise ValueError(f"`batch_indices` must be an integer array; found dtype {arr.dtype}.")
    if arr.ndim != 2 or arr.shape[0] != steps:
        raise ValueError(
            f"`batch_indices` must have shape (steps={steps}, batch_size) (one row per step); found {arr.shape}."
        )
    if not 1 <= arr.shape[1] <= m:
        raise ValueError(
            f"`batch_indices` rows must hold between 1 and m={m} indices (batch size); found {arr.shape[1]}."
        )
    bad = (arr < 0) | (arr >= m)
    if traced:
        return eqx.error_if(
            arr.astype(jnp.int32),
            jnp.any(bad),
            f"`batch_indices` entries must lie in [0, m={m}) (checked at run time: the value was traced)",
        )
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"`batch_indices` entries must lie in [0, m={m}); found {int(arr[pos])} at index {pos}.")
    return jnp.asarray(arr, dtype=jnp.int32)


def batch_weights(idx: Int[Array, " b"], m: int) -> Float[Array, " m"]:
    """Per-sample weights w_mu = (count of mu in `idx`) / b of one batch, shape (m,)."""
    return jnp.zeros(m).at[idx].add(1.0 / idx.shape[0])


def restrict(model: NQFModel, idx: Int[Array, " b"]) -> NQFModel | None:
    """The model on the b training inputs `idx` only (rows gathered, repeats kept), or None for
    a data representation this function does not know (callers then weight all m samples).

    A minibatch step then costs O(b) data operations instead of O(m). Works inside `jit` (the
    constructors only shape-check traced arrays).
    """
    from ..data._model import NQFModel

    data = model.data
    sub = data.subset(idx)
    if sub is None:
        return None
    take = lambda x: None if x is None else x[idx]  # noqa: E731
    return NQFModel(sub, g=take(model.g), B=take(model.B), f0=take(model.f0))
