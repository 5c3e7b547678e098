"""Full-batch gradient descent in weight space (THEORY sec. 4): the paper's reference simulation.

The MSE loss of an NQF is L(W) = (1/m) sum_mu (Tr[W W^T A_mu] - y_mu)^2, with gradient
grad_W L = H W, H = (4/m) sum_mu Delta_mu A_mu and Delta_mu = Tr[W W^T A_mu] - y_mu (Eq. E8).
`gradient_descent` iterates W <- W - lr * H W with a jitted `lax.scan`, using the structure of the
data set (`traces_factor`, `apply`), so no (m, p, p) tensor is formed for structured data.

Time: GD step n corresponds to gradient-flow time t = lr * n, the time axis of `nqf.solve_flow`.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, Int

from .._core._checks import as_weights, check_positive
from ..data._operators import AbstractData

__all__ = ["gradient_descent"]


def _gd_step(data: AbstractData, lr, W):
    delta = data.traces_factor(W) - data.y
    return W - lr * data.apply(4.0 / data.m * delta, W)


@eqx.filter_jit
def _run(data, W0, lr, n_saves: int, save_every: int, remainder: int):
    def block(W, n):
        return jax.lax.fori_loop(0, n, lambda _, W: _gd_step(data, lr, W), W)

    def body(W, _):
        W = block(W, save_every)
        return W, W

    W_last, Ws = jax.lax.scan(body, W0, None, length=n_saves)
    Ws = jnp.concatenate([W0[None], Ws], axis=0)
    if remainder:
        Ws = jnp.concatenate([Ws, block(W_last, remainder)[None]], axis=0)
    return Ws


def _check_count(x, name: str) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"`{name}` must be an integer >= 1; found {x!r}.")
    return int(x)


def gradient_descent(
    data: AbstractData, W0: Float[ArrayLike, "p d"], *, lr: float, steps: int, save_every: int = 1
) -> tuple[Int[np.ndarray, " n"], Float[np.ndarray, "n p d"]]:
    """Full-batch gradient descent W <- W - lr * grad L(W) on the NQF MSE loss.

    L(W) = (1/m) sum_mu (Tr[W W^T A_mu] - y_mu)^2 and grad L = H W with
    H = (4/m) sum_mu Delta_mu A_mu (THEORY Eq. E8). Runs as one compiled `lax.scan`; new values
    of the same shapes (data, W0, lr) reuse the compiled program.

    **Arguments:**

    - `data`: an NQF data set (`DenseData`, `CommutingData`, `LowRankData`).
    - `W0`: initial weights, shape (p, d) (one column per neuron).
    - `lr`: learning rate eta > 0.
    - `steps`: number of GD steps, an integer >= 1.
    - `save_every`: save W every this many steps (integer >= 1). Step 0 is always saved, and so
      is the last step when `steps` is not a multiple of `save_every`.

    **Returns:** `(steps_saved, W)`: the step numbers, integer array of shape (n,), and the
    weights after those steps, shape (n, p, d). The matching gradient-flow times are
    `lr * steps_saved`.

    **Raises:** `ValueError` for a `W0` whose shape does not match the data, a non-positive or
    non-finite `lr`, or `steps`/`save_every` that are not integers >= 1; `FloatingPointError`
    if the iteration diverges (non-finite weights: reduce `lr`).
    """
    if not isinstance(data, AbstractData):
        raise TypeError(f"`data` must be an nqf data set (e.g. `DenseData`); found {type(data).__name__}.")
    lr = check_positive(lr, "lr")
    steps = _check_count(steps, "steps")
    save_every = _check_count(save_every, "save_every")
    W0 = as_weights(W0, data.p)
    n_saves, remainder = divmod(steps, save_every)
    saved = np.arange(n_saves + 1) * save_every
    if remainder:
        saved = np.append(saved, steps)
    Ws = np.asarray(_run(data, W0, jnp.asarray(lr, dtype=jnp.float64), n_saves, save_every, remainder))
    if not np.all(np.isfinite(Ws)):
        first = int(saved[np.argmax(~np.isfinite(Ws).all(axis=(1, 2)))])
        raise FloatingPointError(
            f"Gradient descent diverged: non-finite weights by step {first} (lr={lr:g}). Reduce "
            "`lr` (GD on this loss is stable only for lr below ~1/|H| near the solution)."
        )
    return saved, Ws
