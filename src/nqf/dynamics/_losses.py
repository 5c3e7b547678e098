"""Losses ell(f, y) for the training maps, the flow and `nqf.record` (THEORY sec. 3, Theorem 2).

**One definition everywhere.** The training loss is the MEAN over the inputs of the batch of the
per-input loss ell(f_mu, y_mu), f_mu the module's k outputs on input mu:

- ``"mse"`` (the default): ell = (1/k) sum_o (f_{mu,o} - y_{mu,o})^2 (the mean over inputs and
  outputs). Full-batch gradient descent on it is the MSE dynamics of THEORY sec. 4, with
  H = (4/m) sum Delta A (Eq. E8).
- ``"cross_entropy"``: integer class labels y_mu in [0, k) and one output per class (k >= 2):
  ell = logsumexp(f_mu) - f_{mu, y_mu}; d ell / d f_{mu,o} = softmax(f_mu)_o - [o == y_mu].
- ``"logistic"``: one output, labels in {0, 1} or {-1, +1} (s = +1 for the positive class):
  ell = softplus(-s f) = log(1 + exp(-s f)); d ell / d f = -s sigmoid(-s f).
- a JAX-traceable callable ``ell(f, y) -> scalar`` for one input: f, y scalars for k = 1, arrays
  (k,) for k outputs (its derivative is taken with `jax.grad`). Without k (`as_loss(fn)`, the
  old contract) it is applied to every data row separately, like MSE.

Theorem 2 needs only the derivative l'_x = dL/df_x of the batch loss, whatever ell is (the
closure on (M, mu) holds for any loss: the gradient is l' times the MSE one).

**Rows and labels of the NQF.** A module with k outputs has the data rows mu k + o (Corollary 1:
`nqf.extract`, `network/_predict.py::_map`). The NQF's labels `model.y` (m k,) are the rows of the
label matrix Y (m, k) of `PerSampleLoss.targets`: the labels themselves for MSE (and callables),
the ONE-HOT matrix of the classes for cross-entropy (so ell = logsumexp(f_mu) - Y_mu . f_mu and
its gradient is softmax(f_mu) - Y_mu: the loss needs only f and the one-hot rows) and the signs
s in {-1, +1} for the logistic loss. `PerSampleLoss.value` / `grad` act on these rows: `value`
gives per-row values whose mean over the k rows of an input is ell(f_mu, y_mu) (a loss that
couples the outputs repeats ell_mu on its k rows), and `grad` the derivative of the SUM of the
row values, so that with row weights w_r = (1/b) / k (b inputs in the batch, `batch_weights` of
the expanded rows) l'_r = w_r grad_r = (1/b) d ell_mu / d f_{mu,o}. A minibatch of a loss that
couples the outputs (k > 1) selects inputs: all k rows of an input together (`expand_rows`).

A new Python function object (e.g. a fresh lambda per call) is a new static argument and makes the
compiled maps recompile; define the loss once and reuse it.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core._checks import is_traced, shape_str

__all__ = ["PerSampleLoss", "mse", "cross_entropy", "logistic", "as_loss", "mean_loss", "expand_rows", "LOSSES"]

LOSSES = ("mse", "cross_entropy", "logistic")


def mse(f: Float[Array, "*shape"], y: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """Squared error (f - y)^2 of one sample (the default loss)."""
    return (f - y) ** 2


def cross_entropy(f: Float[Array, " k"], y: Float[Array, " k"]) -> Float[Array, ""]:
    """Softmax cross-entropy logsumexp(f) - y . f of one input: f (k,) the outputs (logits), y (k,)
    the one-hot class (the NQF's label rows; `PerSampleLoss.targets` builds them from classes)."""
    return jax.nn.logsumexp(f) - jnp.dot(y, f)


def logistic(f: Float[Array, ""], s: Float[Array, ""]) -> Float[Array, ""]:
    """Logistic loss softplus(-s f) = log(1 + exp(-s f)) of one input, s in {-1, +1}."""
    return jax.nn.softplus(-s * f)


_NAMED = {"mse": mse, "cross_entropy": cross_entropy, "logistic": logistic}


class PerSampleLoss(eqx.Module):
    """A loss ell(f, y) per input, with its derivative, vectorized over the NQF's data rows.

    **Arguments:** `fn`: ``ell(f, y) -> scalar`` for one input (static: a Python function,
    hashed by identity): `mse`, `cross_entropy`, `logistic` or the user's; `k`: the outputs per
    input it couples (1: every row is its own sample; k >= 2: rows mu k .. mu k + k - 1 are one
    input, f and y passed to `fn` as (k,) arrays). Build it with `as_loss`.
    """

    fn: Callable = eqx.field(static=True)
    k: int = eqx.field(static=True, default=1)

    @property
    def name(self) -> str:
        """``"mse"``, ``"cross_entropy"``, ``"logistic"`` or ``"callable"``."""
        return next((n for n, f in _NAMED.items() if f is self.fn), "callable")

    @property
    def is_mse(self) -> bool:
        return self.fn is mse

    def per_input(self, F: Float[Array, "n k"], Y: Float[Array, "n k"]) -> Float[Array, " n"]:
        """ell(f_mu, y_mu) of every input from the outputs F (n, k) and label rows Y (n, k)
        (`targets`): for MSE the mean over the k outputs, shape (n,)."""
        if self.is_mse:
            return jnp.mean((F - Y) ** 2, axis=-1)
        if self.k == 1:
            return jax.vmap(self.fn)(F.reshape(-1), Y.reshape(-1))
        return jax.vmap(self.fn)(F, Y)

    def value(self, f: Float[Array, " m"], y: Float[Array, " m"]) -> Float[Array, " m"]:
        """Per-row values (m,) on the NQF's rows (module docstring): their mean over an input's k
        rows is ell(f_mu, y_mu), so their plain mean is the training loss."""
        if self.is_mse:
            return (f - y) ** 2
        if self.k == 1:
            return jax.vmap(self.fn)(f, y)
        return jnp.repeat(self.per_input(f.reshape(-1, self.k), y.reshape(-1, self.k)), self.k)

    def grad(self, f: Float[Array, " m"], y: Float[Array, " m"]) -> Float[Array, " m"]:
        """The derivative (m,) of the sum of the row values (`value`) in each row's f: 2 (f - y)
        for MSE; k (softmax(f_mu) - Y_mu) for cross-entropy; -s sigmoid(-s f) for logistic."""
        if self.is_mse:
            return 2.0 * (f - y)
        if self.fn is logistic:
            return -y * jax.nn.sigmoid(-y * f)
        if self.k == 1:
            return jax.vmap(jax.grad(self.fn))(f, y)
        F, Y = f.reshape(-1, self.k), y.reshape(-1, self.k)
        G = jax.nn.softmax(F, axis=-1) - Y if self.fn is cross_entropy else jax.vmap(jax.grad(self.fn))(F, Y)
        return self.k * G.reshape(-1)

    def mean(self, F: Float[Array, "n k"], Y: Float[Array, "n k"]) -> Float[Array, ""]:
        """The training loss: the mean over inputs of ell, from outputs F (n, k) and label rows Y."""
        if self.is_mse:  # the mean over inputs and outputs, in one sum
            return jnp.mean((F - Y) ** 2)
        return jnp.mean(self.per_input(F, Y))

    def targets(self, y: ArrayLike, m: int, k: int, name: str = "y") -> Float[Array, "m k"]:
        """The label rows Y (m, k) float64 of the labels `y` as the user gives them (module
        docstring): MSE and callables y (m,) (k = 1) or (m, k); cross-entropy integer classes
        (m,) in [0, k) (or their one-hot (m, k)); logistic (m,) or (m, 1) in {0, 1} or {-1, +1}.
        Traced labels are converted without the value checks.

        **Raises:** `ValueError` naming `name` for a shape that does not fit (m, k), non-finite
        labels, non-integer or out-of-range classes, logistic labels outside {0,1} / {-1,1}."""
        what = self.name
        traced = is_traced(y)
        ya = jnp.asarray(y) if traced else np.asarray(y)
        if self.fn is cross_entropy:
            return _class_rows(ya, m, k, name, traced)
        if self.fn is logistic:
            return _signs(ya, m, k, name, traced)
        if ya.shape == (m,) and k == 1:
            ya = ya[:, None]
        if ya.shape != (m, k):
            raise ValueError(
                f"`{name}` must have shape ({m},) or ({m}, {k}) for loss={what!r} (m = {m} inputs, k = {k} "
                f"outputs); found {shape_str(ya.shape)}."
            )
        if not traced and not np.all(np.isfinite(ya.astype(float))):
            raise ValueError(f"`{name}` must be finite.")
        return jnp.asarray(ya, dtype=jnp.float64)


def _class_rows(y, m: int, k: int, name: str, traced: bool):
    """The one-hot rows (m, k) of class labels y (m,) (or y itself if it is one-hot (m, k))."""
    xp = jnp if traced else np
    if y.shape == (m, k) and k >= 2:
        if not traced and not (np.all((y == 0) | (y == 1)) and np.all(y.sum(axis=1) == 1)):
            raise ValueError(
                f"`{name}` of shape ({m}, {k}) for loss='cross_entropy' must be one-hot (one 1 per row); "
                f"found values {np.unique(y)[:5]} and row sums {np.unique(y.sum(axis=1))[:5]}. Give the "
                "integer classes (m,) instead."
            )
        return jnp.asarray(y, dtype=jnp.float64)
    if y.shape != (m,):
        raise ValueError(
            f"`{name}` for loss='cross_entropy' must be the integer class labels of shape ({m},) (one per "
            f"input, in [0, {k})); found shape {shape_str(y.shape)}."
        )
    if not traced:
        if not (np.issubdtype(y.dtype, np.integer) or (np.all(np.isfinite(y)) and np.all(y == np.round(y)))):
            bad = y[~(np.isfinite(y) & (y == np.round(y)))]
            raise ValueError(
                f"`{name}` for loss='cross_entropy' must be integer class labels in [0, {k}); found "
                f"non-integer values such as {bad[:3]} (dtype {y.dtype})."
            )
        if y.size and (y.min() < 0 or y.max() >= k):
            raise ValueError(
                f"`{name}` for loss='cross_entropy' must lie in [0, k) = [0, {k}) (k = {k} module outputs, "
                f"one per class); found labels in [{int(y.min())}, {int(y.max())}]."
            )
    return jnp.asarray(xp.arange(k)[None, :] == xp.asarray(y).astype(int)[:, None], dtype=jnp.float64)


def _signs(y, m: int, k: int, name: str, traced: bool):
    """The signs s (m, 1) in {-1, +1} of logistic labels in {0, 1} or {-1, +1}."""
    if y.shape == (m, 1):
        y = y[:, 0]
    if k != 1 or y.shape != (m,):
        raise ValueError(
            f"`{name}` for loss='logistic' must have shape ({m},) for a module with one output; found "
            f"{shape_str(y.shape)} with k = {k} outputs."
        )
    if not traced:
        vals = np.unique(y)
        if not (set(vals.tolist()) <= {0.0, 1.0} or set(vals.tolist()) <= {-1.0, 1.0}):
            raise ValueError(
                f"`{name}` for loss='logistic' must be binary labels in {{0, 1}} or {{-1, +1}}; found the "
                f"values {vals[:6]}."
            )
    s = jnp.where(jnp.asarray(y) > 0, 1.0, -1.0)
    return s[:, None].astype(jnp.float64)


def as_loss(loss: str | Callable[[Array, Array], Array] | PerSampleLoss | None, k: int | None = None) -> PerSampleLoss:
    """Resolve `loss` to a `PerSampleLoss` for a module with `k` outputs per input.

    **Arguments:** `loss`: None or ``"mse"``, ``"cross_entropy"``, ``"logistic"``, a callable
    ``ell(f, y) -> scalar`` for one input, or a `PerSampleLoss`. `k`: the outputs per input
    (None: unknown; a callable then acts on each data row, scalar f and y). MSE is per row for
    every k (its mean over rows is the mean over inputs and outputs).

    **Raises:** `ValueError` for an unknown name, cross-entropy without `k` or with k < 2 (it
    needs one output per class), logistic with k > 1, a `PerSampleLoss` whose k disagrees with
    `k`; `TypeError` for a callable that is not JAX-traceable or does not return a real scalar
    for f, y of shape () (k = 1) or (k,).
    """
    if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
        raise ValueError(f"`k` (outputs per input) must be an integer >= 1; found {k!r}.")
    if isinstance(loss, PerSampleLoss):
        if k is not None and (loss.k not in (1, k) or (k > 1 and loss.fn is logistic)):
            raise ValueError(
                f"`loss` ({loss.name}) takes k = {loss.k} output(s) per input, but the module has k = {k}."
            )
        return loss
    if loss is None or (isinstance(loss, str) and loss.lower() == "mse"):
        return PerSampleLoss(mse)
    if isinstance(loss, str):
        name = loss.lower().replace("-", "_")
        if name == "cross_entropy":
            if k is None:
                raise ValueError(
                    "loss='cross_entropy' couples the k outputs of one input (one per class): give the "
                    "number of classes, as_loss('cross_entropy', k=K) (nqf.predict and nqf.record take it "
                    "from the module)."
                )
            if k < 2:
                raise ValueError(
                    f"loss='cross_entropy' needs a module with one output per class (k >= 2); found k = {k} "
                    "output. For two classes with one output use loss='logistic'."
                )
            return PerSampleLoss(cross_entropy, int(k))
        if name == "logistic":
            if k is not None and k != 1:
                raise ValueError(
                    f"loss='logistic' takes a module with one output (k = 1); found k = {k}. For k classes "
                    "use loss='cross_entropy'."
                )
            return PerSampleLoss(logistic)
        raise ValueError(f"`loss` must be one of {LOSSES} or a callable ell(f, y) -> scalar; found {loss!r}.")
    if not callable(loss):
        raise TypeError(
            f"`loss` must be one of {LOSSES} or a callable ell(f, y) -> scalar; found {type(loss).__name__}."
        )
    kk = 1 if k is None else int(k)
    _check_traceable(loss, kk)
    return PerSampleLoss(loss, kk)


def _check_traceable(fn, k: int) -> None:
    """Raise `TypeError` unless fn(f, y) traces to a real scalar for f, y of shape () or (k,)."""
    shape = () if k == 1 else (k,)
    x = jax.ShapeDtypeStruct(shape, jnp.float64)
    what = "two float64 scalars" if k == 1 else f"two float64 arrays of shape ({k},) (one input's outputs and labels)"
    try:
        out = jax.eval_shape(fn, x, x)
    except Exception as e:  # noqa: BLE001  (report any tracing failure as a bad loss)
        raise TypeError(
            f"`loss` must be a JAX-traceable callable ell(f, y) -> scalar; calling it on {what} failed with "
            f"{type(e).__name__}: {e}"
        ) from e
    if not hasattr(out, "shape") or out.shape != () or not np.issubdtype(out.dtype, np.floating):
        raise TypeError(
            f"`loss` must return a real scalar for one input (ell(f, y) with f, y of shape {shape}); found "
            f"{getattr(out, 'shape', out)!r} of dtype {getattr(out, 'dtype', type(out))}."
        )


def mean_loss(
    loss: str | Callable | PerSampleLoss | None, f: Float[ArrayLike, "m k"] | Float[ArrayLike, " m"], y: ArrayLike
) -> Float[Array, ""]:
    """The mean loss (1/m) sum_mu ell(f_mu, y_mu) of outputs `f` (m, k) or (m,) and the labels `y`
    as the user gives them (integer classes (m,) for cross-entropy; {0,1} / {-1,1} for logistic;
    (m,) or (m, k) targets for MSE: then the mean over inputs and outputs). A scalar (JAX).

    **Raises:** what `as_loss` and `PerSampleLoss.targets` raise (naming `loss`, `y`)."""
    F = jnp.asarray(f, dtype=jnp.float64)
    if F.ndim == 1:
        F = F[:, None]
    if F.ndim != 2:
        raise ValueError(f"`f` must have shape (m,) or (m, k); found {shape_str(F.shape)}.")
    m, k = F.shape
    resolved = as_loss(loss, k)
    return resolved.mean(F, resolved.targets(y, m, k))


def expand_rows(idx, k: int) -> Array | None:
    """The data rows (..., b k) of the inputs `idx` (..., b) of a module with k outputs: input mu
    becomes rows mu k + o, o = 0..k-1 (Corollary 1), in that order. `idx` unchanged for k = 1."""
    if idx is None:
        return None
    if k == 1:
        return jnp.asarray(idx)
    rows = jnp.asarray(idx)[..., None] * k + jnp.arange(k, dtype=jnp.asarray(idx).dtype)
    return rows.reshape(*rows.shape[:-2], -1)
