"""One encoding of arguments for hashing (`nqf.solvers._checkpoint`'s fingerprints and the
cross-process argument check of `nqf.solvers._distributed`): array bytes, dtypes and shapes,
pytree structures, Python functions by their code, defaults, closure values and the data they read
from global names (recursively), other values by their repr without memory addresses. The
checkpoint fingerprint (`feed_by_value`) encodes real numbers by value instead (see
`_real_values`)."""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import re
import types

import jax
import numpy as np

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


_BY_VALUE: contextvars.ContextVar[bool] = contextvars.ContextVar("nqf_digest_by_value", default=False)


def feed_by_value(h, x) -> None:
    """`_feed` with real numbers encoded by value (`_real_values`): the checkpoint fingerprint,
    for which t1 = 20 and 20.0, or eps as a list and as an array, are the same sweep. (The
    jax.distributed same-arguments check keeps the strict `_feed`: dtypes and containers too.)"""
    token = _BY_VALUE.set(True)
    try:
        _feed(h, x)
    finally:
        _BY_VALUE.reset(token)


def _feed(h, x, seen: set | None = None) -> None:
    """Feed a canonical encoding of x into the hash h: arrays by dtype, shape and bytes; lists,
    tuples, dicts, pytrees and dataclasses by structure and entries; callables by their code
    (`_feed_callable`); anything else by its repr without memory addresses. The one encoding of
    both the checkpoint fingerprint and the jax.distributed same-arguments check."""
    if seen is None:
        seen = set()
    real = _real_values(x) if _BY_VALUE.get() else None
    if real is not None:  # numbers: by value (20 == 20.0, a list == the array of its values)
        h.update(f"real:{real.shape};".encode())
        h.update(real.tobytes())
        return
    if x is None or isinstance(x, (bool, str, int, float, complex)):
        h.update(f"{type(x).__name__}:{x!r};".encode())
        return
    if isinstance(x, jax.Array) and jax.numpy.issubdtype(x.dtype, jax.dtypes.prng_key):
        h.update(f"key<{jax.random.key_impl(x)}>".encode())
        x = jax.random.key_data(x)
    if isinstance(x, (np.ndarray, np.generic, jax.Array)):
        a = np.ascontiguousarray(np.asarray(x))
        h.update(f"array:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
        return
    if isinstance(x, (list, tuple)):
        h.update(f"{type(x).__name__}[{len(x)}](".encode())
        for v in x:
            _feed(h, v, seen)
        h.update(b");")
        return
    if isinstance(x, dict):
        h.update(f"dict[{len(x)}](".encode())
        for k in sorted(x, key=str):
            h.update(f"{k!s}=".encode())
            _feed(h, x[k], seen)
        h.update(b");")
        return
    if isinstance(x, jax.Device):
        h.update(f"device:{x.id};".encode())
        return
    leaves, treedef = jax.tree_util.tree_flatten(x)
    if not (len(leaves) == 1 and leaves[0] is x):  # a pytree (data sets, models, solvers): structure + leaves
        h.update(f"{type(x).__module__}.{type(x).__qualname__}:".encode())
        h.update(_ADDRESS.sub("", str(treedef)).encode())
        for v in leaves:
            _feed(h, v, seen)
        return
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        h.update(f"{type(x).__qualname__}(".encode())
        for f in dataclasses.fields(x):
            h.update(f"{f.name}=".encode())
            _feed(h, getattr(x, f.name), seen)
        h.update(b");")
        return
    if callable(x) and _feed_callable(h, x, seen):
        return
    h.update(f"{type(x).__qualname__}:{_ADDRESS.sub('', repr(x))};".encode())


_REAL = (int, float, np.integer, np.floating)


def _is_real_leaf(x) -> bool:
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, _REAL):
        return True
    if isinstance(x, (np.ndarray, jax.Array)):
        return np.dtype(x.dtype).kind in "iuf" and not jax.numpy.issubdtype(x.dtype, jax.dtypes.prng_key)
    if isinstance(x, (list, tuple)):
        return all(_is_real_leaf(v) for v in x)
    return False


def _real_values(x) -> np.ndarray | None:
    """Real numbers (Python / NumPy / JAX ints and floats, numeric arrays, rectangular lists and
    tuples of them; not bools) as a contiguous float64 array when that conversion is exact, else
    None. Equal values then encode equally whatever their container or dtype (t1 = 20 or 20.0,
    eps as a list or an array, float32 values widened exactly); -0.0 is 0.0. Sweeps convert their
    numeric arguments to float64, so such arguments give the same numbers; different values (or
    shapes) still encode differently, and an int that float64 cannot hold keeps its own encoding."""
    if (isinstance(x, (list, tuple)) and not x) or not _is_real_leaf(x):  # () / []: by structure
        return None
    try:
        a = np.asarray(x)
    except (ValueError, OverflowError, TypeError):  # ragged lists, ints beyond int64, tracers
        return None
    if a.dtype.kind not in "iuf":
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        b = a.astype(np.float64)
        exact = np.array_equal(b.astype(a.dtype), a, equal_nan=a.dtype.kind == "f")
    if not exact:  # an int beyond 2**53, a long double
        return None
    return np.array(b + 0.0, dtype=np.float64, order="C")  # + 0.0: -0.0 -> 0.0; np.array keeps 0-d


_DATA_GLOBAL = (type(None), bool, int, float, complex, str, bytes, np.ndarray, np.generic, jax.Array)


def _feed_code(h, code: types.CodeType, seen: set) -> None:
    """A code object: its bytecode, names and constants (nested code objects recursively)."""
    h.update(f"code:{code.co_qualname if hasattr(code, 'co_qualname') else code.co_name}:".encode())
    h.update(code.co_code)
    h.update(f"names{code.co_names!r}args{code.co_argcount},{code.co_kwonlyargcount};".encode())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _feed_code(h, c, seen)
        elif isinstance(c, frozenset):  # set literals: order by repr (hash order varies per process)
            h.update(f"frozenset{sorted(map(repr, c))!r};".encode())
        else:
            h.update(f"const:{type(c).__name__}:{c!r};".encode())


def _feed_callable(h, f, seen: set) -> bool:
    """Fingerprint a callable by what it computes: a Python function by its qualified name, code
    (bytecode, names, constants, nested code), defaults, closure cells and the data globals its
    code names (numbers, strings, arrays; each value fingerprinted recursively); a
    `functools.partial` by its function, arguments and keywords; a bound method by its function
    and instance; a wrapper (``jax.jit`` etc.) by the function it wraps. False for a callable
    with none of these (a builtin, a ufunc, a C extension): the caller falls back to its repr
    without addresses (e.g. ``<ufunc 'square'>``), which names it but not its code."""
    if id(f) in seen:  # a recursive closure: already being fed
        h.update(b"<recursive>;")
        return True
    if isinstance(f, functools.partial):
        seen.add(id(f))
        h.update(b"partial(")
        _feed(h, f.func, seen)
        _feed(h, tuple(f.args), seen)
        _feed(h, dict(f.keywords), seen)
        h.update(b");")
        return True
    if isinstance(f, types.MethodType):
        seen.add(id(f))
        h.update(b"method(")
        _feed(h, f.__func__, seen)
        _feed(h, f.__self__, seen)
        h.update(b");")
        return True
    if isinstance(f, types.FunctionType):
        seen.add(id(f))
        h.update(f"function:{f.__module__}.{f.__qualname__}(".encode())
        _feed_code(h, f.__code__, seen)
        _feed(h, f.__defaults__, seen)
        _feed(h, f.__kwdefaults__, seen)
        for cell in f.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                h.update(b"cell:empty;")
                continue
            _feed(h, value, seen)
        g = f.__globals__
        for name in f.__code__.co_names:
            if name in g and isinstance(g[name], _DATA_GLOBAL):
                h.update(f"global:{name}=".encode())
                _feed(h, g[name], seen)
        h.update(b");")
        return True
    wrapped = getattr(f, "__wrapped__", None)
    if wrapped is not None and wrapped is not f and callable(wrapped):
        seen.add(id(f))
        h.update(f"wrapper:{type(f).__qualname__}(".encode())
        ok = _feed_callable(h, wrapped, seen)
        if not ok:
            h.update(f"{_ADDRESS.sub('', repr(wrapped))}".encode())
        h.update(b");")
        return True
    return False
