"""Per-sample losses ell(f, y) for the discrete training maps (THEORY sec. 3, Theorem 2).

Training minimizes L = sum_x w_x ell(f_x, y_x) over a batch, with w_x = (count of x in the batch)
/ b (so full batch is the plain mean over the m training inputs). Theorem 2 needs only the
derivative l'_x = dL/df_x = w_x ell'(f_x, y_x), whatever ell is.

- ``"mse"`` (the default): ell(f, y) = (f - y)^2, ell' = 2 (f - y). Full-batch gradient descent
  on it is the MSE dynamics of THEORY sec. 4, with H = (4/m) sum_mu Delta_mu A_mu (Eq. E8).
- any differentiable callable ``ell(f, y) -> scalar`` on one sample (JAX-traceable, scalar float
  arguments); its derivative in f is taken with `jax.grad` and vmapped over samples.

A new Python function object (e.g. a fresh lambda per call) is a new static argument and makes the
training maps recompile; define the loss once and reuse it.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

__all__ = ["PerSampleLoss", "mse", "as_loss", "mean_loss"]


def mse(f: Float[Array, "*shape"], y: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """Squared error (f - y)^2 of one sample (the default loss)."""
    return (f - y) ** 2


class PerSampleLoss(eqx.Module):
    """A per-sample loss ell(f, y) with its f-derivative, both vectorized over samples.

    **Arguments:** `fn`: a callable ``ell(f, y) -> scalar`` for one sample (static: a Python
    function, hashed by identity).
    """

    fn: Callable = eqx.field(static=True)

    def value(self, f: Float[Array, " m"], y: Float[Array, " m"]) -> Float[Array, " m"]:
        """ell(f_mu, y_mu) for every sample, shape (m,)."""
        if self.fn is mse:
            return (f - y) ** 2
        return jax.vmap(self.fn)(f, y)

    def grad(self, f: Float[Array, " m"], y: Float[Array, " m"]) -> Float[Array, " m"]:
        """ell'(f_mu, y_mu) = d ell / d f at every sample, shape (m,)."""
        if self.fn is mse:
            return 2.0 * (f - y)
        return jax.vmap(jax.grad(self.fn))(f, y)


def as_loss(loss: str | Callable[[Array, Array], Array] | PerSampleLoss | None) -> PerSampleLoss:
    """Resolve `loss` (None or ``"mse"``: squared error; a callable ell(f, y); a `PerSampleLoss`).

    **Raises:** `ValueError` for an unknown name; `TypeError` if a callable does not return a
    real scalar for scalar float64 arguments.
    """
    if isinstance(loss, PerSampleLoss):
        return loss
    if loss is None or (isinstance(loss, str) and loss.lower() == "mse"):
        return PerSampleLoss(mse)
    if isinstance(loss, str):
        raise ValueError(f"`loss` must be 'mse' or a callable ell(f, y) -> scalar; found {loss!r}.")
    if not callable(loss):
        raise TypeError(f"`loss` must be 'mse' or a callable ell(f, y) -> scalar; found {type(loss).__name__}.")
    x = jax.ShapeDtypeStruct((), jnp.float64)
    try:
        out = jax.eval_shape(loss, x, x)
    except Exception as e:  # noqa: BLE001  (report any tracing failure as a bad loss)
        raise TypeError(
            f"`loss` must be a JAX-traceable callable ell(f, y) -> scalar for scalar f, y; calling "
            f"it on two float64 scalars failed with {type(e).__name__}: {e}"
        ) from e
    if not hasattr(out, "shape") or out.shape != () or not np.issubdtype(out.dtype, np.floating):
        raise TypeError(
            "`loss` must return a real scalar for one sample (ell(f, y) with scalar f, y); found "
            f"{getattr(out, 'shape', out)!r} of dtype {getattr(out, 'dtype', type(out))}."
        )
    return PerSampleLoss(loss)


def mean_loss(
    loss: str | Callable[[Array, Array], Array] | PerSampleLoss | None,
    f: Float[Array, "m k"] | Float[Array, " m"],
    y: Float[Array, "m k"] | Float[Array, " m"],
) -> Float[Array, ""]:
    """The training loss's definition on any inputs: the mean over the m inputs and k outputs of
    ell(f, y), here for the MSE only: (1/(m k)) sum (f - y)^2 (Eq. E8; `nqf.record`'s loss).

    **Arguments:** `loss`: None, ``"mse"`` or the MSE `PerSampleLoss`; `f` (m, k) or (m,): the
    outputs; `y`: the labels as given, of f's shape, or (m,) for f of shape (m, 1).

    **Returns:** the scalar mean loss (a JAX array; traceable).

    **Raises:** `ValueError` for a loss other than the MSE, or labels of another shape."""
    if as_loss(loss).fn is not mse:
        raise ValueError(f"`loss`: mean_loss supports the MSE only here; found {loss!r}.")
    f, y = jnp.asarray(f), jnp.asarray(y)
    if y.shape != f.shape and not (f.ndim == 2 and f.shape[1] == 1 and y.shape == f.shape[:1]):
        raise ValueError(
            f"`y` must have the outputs' shape {f.shape} (or ({f.shape[0]},) for one output); found {y.shape}."
        )
    return jnp.mean((f - y.reshape(f.shape)) ** 2)
