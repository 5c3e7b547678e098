"""Argument checks shared by `nqf.predict`, `nqf.record` and `nqf.compare`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._core._checks import any_traced, as_array, shape_str
from ..data import Network
from ..dynamics._losses import as_loss


def as_network(network) -> Network:
    """`network` as an `nqf.Network` (a module gets ``neurons="auto"``).

    **Raises:** `TypeError` for a plain function (it needs ``nqf.Network(f, W0=...)``) or another
    object; `nqf.data.NeuronError` when ``"auto"`` does not recognise the module."""
    if isinstance(network, Network):
        return network
    import equinox as eqx

    from ..data._network import _is_nnx

    if isinstance(network, eqx.Module) or _is_nnx(network):
        return Network(network)
    if callable(network):
        raise TypeError(
            "`network` is a plain function: wrap it with its initial weights, "
            "nqf.Network(f, W0=W0) (W0 of shape (p, d))."
        )
    raise TypeError(
        f"`network` must be an nqf.Network, an equinox Module or a flax.nnx Module; found {type(network).__name__}."
    )


def check_data(net: Network, x, y, loss=None):
    """(x, y (m, k), m, k): inputs in float64 (one `PrecisionWarning` if cast), labels checked
    against the number of inputs m and of module outputs k. With a `loss` other than MSE (a
    name, callable or `PerSampleLoss`) y is that loss's label rows (m, k)
    (`PerSampleLoss.targets`: the one-hot classes for cross-entropy, the signs for logistic).

    **Raises:** `ValueError` naming `x` or `y` for mismatched or non-finite data; `TypeError` naming
    them for complex or non-numeric values."""
    leaves = jax.tree_util.tree_leaves(x)
    if not leaves or any(np.ndim(a) == 0 for a in leaves):
        raise ValueError("`x` must be an array or a pytree of arrays with a leading batch axis m.")
    ms = {int(np.shape(a)[0]) for a in leaves}
    if len(ms) != 1 or 0 in ms:
        raise ValueError(f"Every leaf of `x` must have the same leading batch axis m >= 1; found {sorted(ms)}.")
    m = ms.pop()
    if any_traced(leaves):
        raise TypeError(
            "`x` is traced (inside jax.jit / vmap / grad): nqf.predict and nqf.record run on concrete "
            "inputs (they extract, solve and measure on the host); call them outside the transformation."
        )
    for i, a in enumerate(leaves):
        a = np.asarray(a)
        if a.dtype.kind not in "biuf":  # complex, strings, objects: the module would see them as they are
            raise TypeError(f"`x` must hold real numbers; leaf {i} has dtype {a.dtype}.")
        if np.issubdtype(a.dtype, np.number) and not np.all(np.isfinite(a)):
            raise ValueError(f"`x` must be finite; leaf {i} has {int(np.sum(~np.isfinite(a)))} non-finite entries.")
    x = net.check_inputs(x)
    out = jax.eval_shape(lambda xx: net.apply(net.params, xx), jax.tree_util.tree_map(lambda a: a[0], x))
    k = int(np.prod(out.shape, dtype=int)) if out.shape else 1
    if loss is not None and not as_loss(loss, k).is_mse:
        return x, as_loss(loss, k).targets(y, m, k), m, k
    y = as_array(y, "y", finite=False, host=True)  # a TypeError naming `y` for complex or non-numeric labels
    if y.shape == (m,) and k == 1:
        y = y[:, None]
    if y.shape != (m, k):
        raise ValueError(
            f"`y` must have shape ({m},) or ({m}, {k}) (m = {m} inputs in `x`, k = {k} module "
            f"outputs); found {shape_str(y.shape)}."
        )
    if not np.all(np.isfinite(y)):
        raise ValueError("`y` must be finite.")
    return x, jnp.asarray(y), m, k


def check_optimizer(optimizer):
    """`optimizer` if it is an `optax.GradientTransformation` (an `optax.MultiSteps` wrapper: its
    `gradient_transformation()`).

    **Raises:** `TypeError` naming `optimizer`, what was expected and what was found."""
    import optax

    if isinstance(optimizer, optax.MultiSteps):
        optimizer = optimizer.gradient_transformation()
    if isinstance(optimizer, optax.GradientTransformation):
        return optimizer
    hint = f" (e.g. optax.sgd(lr) for {optimizer!r})" if isinstance(optimizer, str) else ""
    raise TypeError(f"`optimizer` must be an optax.GradientTransformation{hint}; found {type(optimizer).__name__}.")


def check_steps(steps, save_every):
    """(steps, save_every): integers >= 1; save_every defaults to about 200 saves."""
    for name, v in (("steps", steps), ("save_every", save_every)):
        if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1):
            raise ValueError(f"`{name}` must be an integer >= 1; found {v!r}.")
    if steps is None:
        raise ValueError("`steps` must be an integer >= 1; found None.")
    return int(steps), int(save_every) if save_every is not None else max(1, int(steps) // 200)


STEP_VALUES = ("auto", "all", "loss", "none")
AUTO_EIGENVALUES_P = 128  # "auto" records per-step eigenvalues up to this p (one O(p^3) eigvalsh a step)


def resolve_step_values(step_values, full_batch: bool, p: int) -> str:
    """`step_values` of `predict` / `record` checked, ``"auto"`` resolved: ``"all"`` for a full
    batch with p <= 128 (measured for p = 65: ~0.3-0.5 ms a step, the map's own step ~0.1 ms and
    the module's ~4 ms), ``"loss"`` for a full batch with larger p (the eigenvalues' p^3 grows past
    the step's m p^2), ``"none"`` with minibatches (the full-data loss costs all m inputs a step).

    **Raises:** `ValueError` for a value not in ('auto', 'all', 'loss', 'none')."""
    if not isinstance(step_values, str) or step_values not in STEP_VALUES:
        raise ValueError(f"`step_values` must be one of {STEP_VALUES}; found {step_values!r}.")
    if step_values != "auto":
        return step_values
    if not full_batch:
        return "none"
    return "all" if p <= AUTO_EIGENVALUES_P else "loss"


def initial_weights(net: Network, W0, init_scale) -> np.ndarray:
    """The initial neuron parameters W0 (p, d) (default: the module's own, `net.W`), times
    `init_scale` if given.

    **Raises:** `ValueError` naming `W0` (shape, finiteness; with `constants` a W0 that is not
    lifted, `Network.check_lifted`) or `init_scale` (not > 0); `TypeError` naming `W0` for a
    complex or non-numeric array (not cast: that dropped the imaginary part)."""
    from .._core._checks import as_array, check_positive

    W0 = net.W if W0 is None else np.asarray(as_array(W0, "W0", finite=False, host=True), dtype=float)
    if W0.shape != (net.p, net.d) or not np.all(np.isfinite(W0)):
        raise ValueError(f"`W0` must be a finite array of shape (p, d) = ({net.p}, {net.d}); found {W0.shape}.")
    net.check_lifted(W0)  # with `constants`: zero outside each column's block
    return W0 if init_scale is None else check_positive(init_scale, "init_scale") * W0


def check_extract_options(options) -> dict:
    """`extract_options` of `predict` / `plan` as a dict of `nqf.extract`'s keyword options,
    checked before any extraction runs.

    **Raises:** `TypeError` for a value that is not a dict (or None), or for a key that is not a
    keyword option of `nqf.extract` (naming it and listing the valid ones)."""
    import dataclasses

    from ..data._extract import ExtractOptions

    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"`extract_options` must be a dict of nqf.extract options; found {type(options).__name__}.")
    valid = [field.name for field in dataclasses.fields(ExtractOptions)]
    bad = [key for key in options if key not in valid]
    if bad:
        raise TypeError(
            f"`extract_options` has {len(bad)} unknown option(s) {bad}: nqf.extract takes {', '.join(valid)}."
        )
    return dict(options)
