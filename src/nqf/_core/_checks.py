"""Input validation shared by the public entry points: clear errors, never silent NaNs.

**One check mechanism for concrete and traced values** (`check`, `check_assumption`), in
diffrax's style: the failure condition is computed in JAX under `jax.ensure_compile_time_eval()`,
so whatever is concrete (also inside someone's `jax.jit`) is evaluated eagerly and a failing check
raises its exception at once, with the measured values in the message; a condition that depends
on a traced value (inside jit / vmap / grad) becomes `equinox.error_if`, checked at run time (with
``EQX_ON_ERROR=nan`` the outputs become NaN instead). `is_traced` / `any_traced` are the package's
one test for traced input.
"""

import math
import numbers
from collections.abc import Callable
from typing import Literal, overload

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.core import Tracer

from ._config import require_x64
from ._errors import AssumptionError

_TINY = np.finfo(float).tiny
RUN_TIME = " (checked at run time: the value was traced)"


def is_traced(x) -> bool:
    """True if `x` is a JAX tracer (inside jit, vmap, grad, ...); pytrees: `any_traced`."""
    return isinstance(x, Tracer)


def any_traced(*trees) -> bool:
    """True if any leaf of `trees` is a JAX tracer (inside jit, vmap, grad, ...)."""
    return any(is_traced(x) for x in jax.tree.leaves(trees))


def check(x, bad, error: Callable[[], Exception] | None, message: str):
    """`x` (any pytree) with the failure condition `bad` enforced, for concrete and traced input.

    `bad` is a boolean (scalar or array: any entry fails), best computed under
    `jax.ensure_compile_time_eval()` so that it stays concrete when its inputs are. Concrete: if
    it holds, `error()` (a callable that builds the exception from the measured values) is raised
    now, and `x` is returned unchanged. Traced: `equinox.error_if(x, bad, message + RUN_TIME)`,
    so the check runs when the returned value is used (use it!). `error` None (for a `bad` that is
    always traced): a concrete failure raises `ValueError(message)`.
    """
    if is_traced(bad):
        return eqx.error_if(x, jnp.any(bad), message + RUN_TIME)
    if bool(np.any(np.asarray(bad))):
        raise error() if error is not None else ValueError(message)
    return x


def check_assumption(
    x, theorem: str, condition: str, residuals, tol, *, where="", detail: str | Callable[[], str] = ""
):
    """`x`, refusing with `AssumptionError(theorem, condition, ...)` when the largest of
    `residuals` (relative residuals, any shape; computed under `jax.ensure_compile_time_eval()`)
    exceeds `tol` (NaN residuals pass, as `res > tol` does). Concrete residuals: raised now, with
    the worst residual, `where` (a format string filled with the index of the worst residual, or a
    callable taking that index tuple) and `detail` (a string or a callable). Traced residuals (or
    tol): `check`'s run-time error, whose message names the theorem and the condition."""
    res = residuals
    if not any_traced(res, tol):
        res = np.asarray(res, dtype=float).reshape(np.shape(res))
        if res.size and bool(res.max() > tol):  # NaN residuals pass (as `res > tol` does)
            idx = tuple(int(i) for i in np.unravel_index(np.argmax(res), res.shape))
            w = where(idx) if callable(where) else where.format(*idx)
            raise AssumptionError(
                theorem, condition, float(res[idx]), tol, where=w, detail=detail() if callable(detail) else detail
            )
        return x
    t = f" {tol:.3g}" if not is_traced(tol) else ""
    return check(
        x,
        jnp.max(jnp.asarray(res)) > tol,
        None,
        f"{theorem} does not apply to this data: its assumption '{condition}' fails; relative residual > tol{t}",
    )


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
            f"`{name}` must have shape ({p}, d) (one column per neuron) to match the data; found {shape_str(W0.shape)}."
        )
    if W0.shape[1] == 0:
        raise ValueError(
            f"`{name}` must have at least one column (width d >= 1 neurons); found shape {shape_str(W0.shape)}."
        )
    return W0


@overload
def as_array(
    x, name: str, *, ndim: int | None = None, shape=None, finite: bool = True, host: Literal[False] = False
) -> Array: ...
@overload
def as_array(
    x, name: str, *, ndim: int | None = None, shape=None, finite: bool = True, host: bool
) -> np.ndarray | Array: ...
def as_array(
    x, name: str, *, ndim: int | None = None, shape=None, finite: bool = True, host: bool = False
) -> np.ndarray | Array:
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
            f"`{name}` must be finite; found {int(bad.sum())} non-finite entries (first at index {idx}: {x[idx]})."
        )
    if host:
        return x if is_traced(x) else np.asarray(x, dtype=np.float64)
    return jnp.asarray(x, dtype=jnp.float64)


def check_symmetric(x, name: str, rtol: float = 1e-10):
    """`x`, raising if its trailing two axes are not symmetric to relative `rtol` (traced `x`:
    checked at run time, through `check`, in the returned value)."""
    xp = jnp if is_traced(x) else np
    with jax.ensure_compile_time_eval():
        x_ = jax.lax.stop_gradient(x) if xp is jnp else np.asarray(x)  # the check is not differentiated
        asym = xp.abs(x_ - xp.swapaxes(x_, -1, -2))
        scale = xp.maximum(xp.abs(x_).max(initial=0.0), _TINY)
        worst = asym.max(initial=0.0)
        bad = worst > rtol * scale

    def error():
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(asym), asym.shape))
        return ValueError(
            f"`{name}` must be symmetric (A = A^T); found |A - A^T| = {float(worst):.3g} at index {idx} "
            f"(relative {float(worst / scale):.3g} > {rtol:g})."
        )

    return check(x, bad, error, f"`{name}` must be symmetric (A = A^T)")


def check_psd(M, name: str, rtol: float = 1e-10):
    """`M`, raising if the symmetric matrix has an eigenvalue below -rtol * max|eig| (traced `M`:
    checked at run time, through `check`, in the returned value)."""
    xp = jnp if is_traced(M) else np
    with jax.ensure_compile_time_eval():
        ev = xp.linalg.eigvalsh(jax.lax.stop_gradient(M) if xp is jnp else np.asarray(M))
        scale = xp.maximum(xp.abs(ev).max(initial=0.0), _TINY)
        bad = (ev[0] < -rtol * scale) if ev.size else False

    def error():
        return ValueError(
            f"`{name}` must be positive semi-definite (an order parameter M = W W^T); found "
            f"smallest eigenvalue {float(ev[0]):.3g} (largest |eigenvalue| {float(scale):.3g})."
        )

    return check(M, bad, error, f"`{name}` must be positive semi-definite (an order parameter M = W W^T)")


def check_positive(x, name: str, *, allow_zero: bool = False) -> float:
    """Return `x` as float, raising unless it is finite and > 0 (>= 0 with `allow_zero`).
    A traced scalar (inside jit, vmap, grad) is returned unchecked."""
    cond = ">= 0" if allow_zero else "> 0"
    if type(x) is float or type(x) is int:  # a Python number (not a bool): no array round trip
        v = float(x)
    elif is_traced(x):
        if jnp.ndim(x) != 0:
            raise ValueError(f"`{name}` must be a scalar; found shape {shape_str(jnp.shape(x))}.")
        return x
    else:
        v = real_scalar(x, name, cond)
    if not (math.isfinite(v) and (v >= 0 if allow_zero else v > 0)):
        raise ValueError(f"`{name}` must be finite and {cond}; found {v!r}.")
    return v


def real_scalar(x, name: str, condition: str = "") -> float:
    """Concrete `x` as float if it is a real number: a Python or NumPy int / float (not bool) or a
    one-element NumPy / JAX array of integer or float dtype. **Raises:** `TypeError` naming `name`,
    the expected type (with `condition`, e.g. ">= 0") and the type and value found: strings such
    as "0.1" (which `float` would parse), bools, complex numbers, None, other objects."""
    want = f"a real number{' ' + condition if condition else ''} (an int, a float or a JAX scalar)"
    if isinstance(x, (bool, np.bool_)):
        ok = False
    elif isinstance(x, numbers.Real):
        ok = True
    elif isinstance(x, (np.ndarray, np.generic, jax.Array)):
        ok = np.dtype(x.dtype).kind in "iuf" and int(np.size(x)) == 1
    else:
        ok = False
    if not ok:
        dtype, shape = getattr(x, "dtype", None), getattr(x, "shape", None)
        if isinstance(x, np.generic):  # a NumPy scalar (e.g. an entry of a list of member values)
            found = f"{x.item()!r} (dtype {dtype})"
        elif dtype is None or shape is None:
            found = repr(x)
        else:
            found = f"dtype {dtype}, shape {shape_str(shape)}"
        raise TypeError(f"`{name}` must be {want}; found {type(x).__name__} {found}.")
    return float(np.asarray(x).reshape(()))


def check_int(x, name: str, *, minimum: int = 1, what: str = "", expected: str | None = None) -> int:
    """`x` as int: `TypeError` naming `name` unless it is a Python or NumPy integer (a bool, a
    float such as 2.0 or a string such as '2' is refused: wrong type), `ValueError` if it is below
    `minimum` (right type, bad value). `what` (e.g. "members per chunk") explains the option;
    `expected` replaces the default "an integer >= minimum" in the messages."""
    want = f"`{name}`{f' ({what})' if what else ''} must be {expected or f'an integer >= {minimum}'}"
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{want}; found {type(x).__name__} {x!r}.")
    if x < minimum:
        raise ValueError(f"{want}; found {int(x)}.")
    return int(x)


def check_flag(x, name: str) -> bool:
    """`x` as bool, raising `TypeError` naming `name` unless it is True or False (a Python or
    NumPy bool): a string such as 'no' or an int is refused rather than read by its truth value."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be True or False (a bool); found {type(x).__name__} {x!r}.")
    return bool(x)


def check_width(d) -> int:
    """Return the width d (number of neurons) as int, raising unless it is an integer >= 1."""
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"`d` (the number of neurons) must be an integer >= 1; found {d!r}.")
    return int(d)


REQUIRED = object()  # `keyword_options`: an option without a default


def keyword_options(where: str, given: dict, **spec) -> tuple:
    """The keyword options of `where` read from its ``**options`` catch-all `given`: one value per
    name of `spec` (name=default, or name=REQUIRED), in the order of `spec`, the default where not
    given. It lets a public function take many documented keywords without listing them all in
    its signature; the keywords keep their names. **Raises:** `TypeError`, with Python's own
    messages, for an unknown keyword or a missing required one."""
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
    missing = [k for k, v in spec.items() if v is REQUIRED and k not in given]
    if missing:
        raise TypeError(f"{where}() missing required keyword-only argument: {missing[0]!r}")
    return tuple(given.get(k, v) for k, v in spec.items())
