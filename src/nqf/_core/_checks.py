"""Input validation shared by the public entry points: clear errors, never silent NaNs."""

import jax
import jax.numpy as jnp
import numpy as np

from ._config import require_x64


def is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def shape_str(shape) -> str:
    """A shape as Python writes it: (5,) for one axis, (2, 3) for two."""
    parts = [str(s) for s in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def as_weights(W0, p: int, name: str = "W0", *, host: bool = False, finite: bool = True):
    """`W0` as a (p, d) array of weights with d >= 1 columns (one per neuron), checked as
    `as_array` does. **Raises:** `ValueError` naming `name` for a wrong rank, a first axis other
    than p, no columns (width d = 0) or non-finite entries; `TypeError` for non-numeric input."""
    W0 = as_array(W0, name, ndim=2, host=host, finite=finite)
    if W0.shape[0] != p:
        raise ValueError(
            f"`{name}` must have shape ({p}, d) (one column per neuron) to match the data; found "
            f"{shape_str(W0.shape)}."
        )
    if W0.shape[1] == 0:
        raise ValueError(
            f"`{name}` must have at least one column (width d >= 1 neurons); found shape "
            f"{shape_str(W0.shape)}."
        )
    return W0


def as_array(x, name: str, *, ndim: int | None = None, shape=None, finite: bool = True,
             host: bool = False):
    """Convert `x` to a float64 JAX array (a numpy array with `host=True`), checking rank, shape
    and finiteness.

    `shape` may hold None for free axes, e.g. ``(None, p, p)``. Traced values (inside jit/vmap)
    are shape-checked only and returned as they are with `host=True`.
    """
    require_x64()
    if not is_traced(x):
        try:
            arr = np.asarray(x)
        except ValueError as err:  # ragged nested sequences
            raise ValueError(f"`{name}` must be a rectangular numeric array; {err}") from None
        kind = arr.dtype.kind
        if kind == "c":
            raise TypeError(f"`{name}` must be real; found complex dtype {arr.dtype}.")
        if kind not in "biuf":  # bool, signed, unsigned, float
            raise TypeError(f"`{name}` must be a numeric array; found dtype {arr.dtype}.")
        x = arr
    if ndim is not None and x.ndim != ndim:
        raise ValueError(
            f"`{name}` must be a {ndim}-d array"
            + (f" of shape {shape_str(('*' if s is None else s) for s in shape)}" if shape else "")
            + f"; found shape {shape_str(x.shape)}."
        )
    if shape is not None:
        found = x.shape
        if len(found) != len(shape) or any(s is not None and s != f for s, f in zip(shape, found)):
            want = shape_str("*" if s is None else s for s in shape)
            raise ValueError(f"`{name}` must have shape {want}; found {shape_str(found)}.")
    if finite and not is_traced(x) and not np.isfinite(x).all():
        bad = ~np.isfinite(x)
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"`{name}` must be finite; found {int(bad.sum())} non-finite entries "
            f"(first at index {idx}: {x[idx]})."
        )
    if host:
        return x if is_traced(x) else np.asarray(x, dtype=np.float64)
    return jnp.asarray(x, dtype=jnp.float64)


def check_symmetric(x, name: str, rtol: float = 1e-10) -> None:
    """Raise if the trailing two axes of `x` are not symmetric to relative `rtol`."""
    if is_traced(x):
        return
    x = np.asarray(x)
    asym = np.abs(x - np.swapaxes(x, -1, -2))
    scale = max(float(np.abs(x).max(initial=0.0)), np.finfo(float).tiny)
    worst = float(asym.max(initial=0.0))
    if worst > rtol * scale:
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(asym), asym.shape))
        raise ValueError(
            f"`{name}` must be symmetric (A = A^T); found |A - A^T| = {worst:.3g} at index {idx} "
            f"(relative {worst / scale:.3g} > {rtol:g})."
        )


def check_psd(M, name: str, rtol: float = 1e-10) -> None:
    """Raise if the symmetric matrix `M` has an eigenvalue below -rtol * max|eig|."""
    if is_traced(M):
        return
    ev = np.linalg.eigvalsh(np.asarray(M))
    scale = max(float(np.abs(ev).max(initial=0.0)), np.finfo(float).tiny)
    if ev.size and ev[0] < -rtol * scale:
        raise ValueError(
            f"`{name}` must be positive semi-definite (an order parameter M = W W^T); found "
            f"smallest eigenvalue {ev[0]:.3g} (largest |eigenvalue| {scale:.3g})."
        )


def check_positive(x, name: str, *, allow_zero: bool = False) -> float:
    """Return `x` as float, raising unless it is finite and > 0 (>= 0 with `allow_zero`).
    A traced scalar (inside jit, vmap, grad) is returned unchecked."""
    if is_traced(x):
        if jnp.ndim(x) != 0:
            raise ValueError(f"`{name}` must be a scalar; found shape {shape_str(jnp.shape(x))}.")
        return x
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a real number; found {x!r}.") from None
    ok = np.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if not ok:
        cond = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"`{name}` must be finite and {cond}; found {v!r}.")
    return v


def check_width(d) -> int:
    """Return the width d (number of neurons) as int, raising unless it is an integer >= 1."""
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"`d` (the number of neurons) must be an integer >= 1; found {d!r}.")
    return int(d)
