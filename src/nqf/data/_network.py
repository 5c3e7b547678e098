"""A user's own module with its neurons located: the layout module <-> W (p, d) (Theorem 1).

Theorem 1 needs d interchangeable neurons: each neuron owns a slice of some of the module's
parameter arrays (a row of a hidden layer's weight, an entry of the readout, one head of an
attention layer), and the module is symmetric under permuting them. nqf's order parameter is
W of shape (p, d), one column per neuron: neuron i's slices flattened and stacked. `Network`
holds a module (an equinox Module, a flax.nnx Module, or a plain JAX function f(W, x)) together
with that layout, and maps both ways:

- ``net.W``: the module's neuron parameters as W (p, d) (float64);
- ``net.with_W(W)``: the module rebuilt around any W (p, d'), any width d';
- ``net(W, x)``: the module's output at W for one input x: the function `nqf.extract` takes;
- ``net.groups`` / ``net.group_names``: the row blocks of W, one per listed parameter array, which
  `extract` uses to find the feed-forward structure (Eq. E3) without dense Hessians.

Every array that is not a neuron parameter (the readout bias of an MLP, a layer outside the NQF)
is *frozen*: it keeps its value inside `with_W` and `__call__` (the NQF's f_x(0) includes it).
`nqf.predict` warns when a frozen array has a nonzero loss gradient at the initial weights (then
a training run that updates it leaves the NQF), and `nqf.record` trains the neurons only unless
told otherwise.

**Locating neurons.** ``neurons="auto"`` recognises the common one-hidden-layer layouts:

- an equinox `eqx.nn.MLP` of depth 1: rows of ``layers[0].weight`` (and ``layers[0].bias``)
  and columns of ``layers[1].weight``; ``layers[1].bias`` frozen;
- a module holding one `eqx.nn.MultiheadAttention`: its heads (the packed head axis of the
  query/key/value projections' rows and of the output projection's columns, and of the
  query/key/value biases); the output bias and every other array frozen;
- a module with exactly two weight layers (equinox ``Linear`` / ``Conv``, flax.nnx ``Linear`` /
  ``Conv``) where the second takes the first's outputs (e.g. Conv2d -> tanh -> sum pool ->
  Linear): the first layer's output units (weight and bias) and the second layer's inputs; the
  second layer's bias frozen.

A chain of 3 or 4 Linear layers (an `eqx.nn.MLP` of depth 2 or 3, or equinox / flax.nnx Linear
layers with one pointwise activation) is a `nqf.data.DeepNetwork` (`Network(module)` returns one):
the multi-layer NQF's layout, one `Network` per NQF layer (`nqf.data._deep_network`).

Anything else is named explicitly: ``neurons={"l1.kernel": 1, "l1.bias": 0, "l2.kernel": 0}``
(paths as written in Python, ``"layers[0].weight"`` or ``"layers.0.weight"``; or callables
``where(module) -> array`` as in `equinox.tree_at`), in the order their slices are stacked in
w_i. An axis packs several parameters per neuron when its length is a multiple of ``width``
(attention's ``num_heads * qk_size`` rows): neuron i owns the i-th block of that axis.

**Fixed per-neuron constants.** ``constants={path: axis}`` names arrays that hold one frozen
value per neuron (the readout signs a_i of ``f = sum_i a_i phi(w_i . x)`` with the last layer
frozen): neurons with different values are not interchangeable, so `Network` groups them by
value and presents the lifted W~ (K p0, d), neuron i's slice in the row block of its value (K the
number of distinct values; `nqf.data._constants` derives why predict and record stay exact). The
constants are never trained (`nqf.record` keeps them with ``train="all"`` too). A plain function
takes them as a third argument, ``f(W, x, c)`` with ``constants=c`` (d, ...).

**Precision.** nqf computes in float64 (`nqf._core._config`). Floating parameters in another
precision (flax.nnx's default float32) are cast to float64 once, with a single
`PrecisionWarning`; a module that still returns float32 (an explicit dtype inside) is refused.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PyTree

from .._core._checks import shape_str
from .._core._config import require_x64
from .._core._errors import NQFWarning
from ._constants import Lift, _columns, _place, value_label

__all__ = ["Network", "NeuronError", "PrecisionWarning"]


_DEEP_CHAIN: list = []  # [(is_deep, DeepNetwork)], registered by `nqf.data._deep_network` (no import cycle)


class NeuronError(ValueError):
    """The neurons of a module cannot be located: unknown names, bad axes, arrays that disagree on
    the number of neurons, or no layout recognised by ``neurons="auto"``."""


class PrecisionWarning(NQFWarning):
    """Parameters or inputs in a precision below float64 were cast to float64."""


@dataclasses.dataclass(frozen=True)
class _Slot:
    """One parameter array that holds a slice per neuron."""

    name: str  # its path, e.g. "layers[0].weight"
    index: int  # position among the flattened parameter leaves
    axis: int  # the neuron axis (non-negative)
    pack: int  # parameters per neuron along `axis` (1 = one index per neuron)
    other: tuple[int, ...]  # the array's shape without the neuron axis

    @property
    def size(self) -> int:
        """Parameters per neuron in this array (its rows of W)."""
        return self.pack * int(np.prod(self.other, dtype=int))


def _tokens(path: str) -> tuple[str, ...]:
    """'layers[0].weight', 'layers.0.weight', "['l1']['kernel'].value" -> ('layers', '0', 'weight')."""
    toks = tuple(re.findall(r"[A-Za-z_][A-Za-z0-9_]*|\d+", path))
    return toks[:-1] if toks and toks[-1] == "value" else toks


def _key_name(entry) -> str:
    for attr in ("name", "key", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def _path_name(keypath) -> str:
    """A readable path: 'layers[0].weight' (equinox), 'l1.kernel' (flax.nnx)."""
    out = ""
    for entry in keypath:
        name = _key_name(entry)
        if name == "value" and entry is keypath[-1] and out:
            break  # an nnx Variable's value
        out += f"[{name}]" if name.isdigit() else (f".{name}" if out else name)
    return out


# --- the three kinds of module: each gives (params, apply, rebuild) -----------------------------


def _is_nnx(module) -> bool:
    nnx = _nnx()
    return nnx is not None and isinstance(module, nnx.Module)


def _nnx():
    import sys

    if "flax" not in sys.modules and "flax.nnx" not in sys.modules:
        try:  # only when flax is installed; it is not a dependency of nqf
            import flax.nnx  # noqa: F401
        except ImportError:
            return None
    return sys.modules.get("flax.nnx")


def _split(module, apply):
    """(params, call, rebuild): `params` the pytree of arrays, `call(params, x)` the output for one
    input, `rebuild(params)` the module object."""
    import equinox as eqx

    if _is_nnx(module):
        nnx = _nnx()
        graphdef, state = nnx.split(module)

        def rebuild(params):
            return nnx.merge(graphdef, params)

        return state, (lambda params, x: apply(rebuild(params), x)), rebuild
    params, static = eqx.partition(module, eqx.is_array)

    def rebuild(params):
        return _fit_heads(eqx.combine(params, static))

    return params, (lambda params, x: apply(rebuild(params), x)), rebuild


def _fit_heads(module):
    """Every `eqx.nn.MultiheadAttention` inside `module` with its `num_heads` set from its arrays
    (the width changes when W has another number of columns; the field is static)."""
    import equinox as eqx

    def fit(node):
        if not isinstance(node, eqx.nn.MultiheadAttention):
            return node
        heads = node.query_proj.weight.shape[0] // node.qk_size
        if heads == node.num_heads:
            return node
        node = copy.copy(node)
        object.__setattr__(node, "num_heads", heads)  # a static field: not reachable by tree_at
        return node

    is_mha = lambda n: isinstance(n, eqx.nn.MultiheadAttention)  # noqa: E731
    return jax.tree_util.tree_map(fit, module, is_leaf=is_mha)


# --- automatic layouts ---------------------------------------------------------------------------


def _layers(module):
    """[(path, kind, layer)] of the weight layers inside `module`, in tree order; kind is
    'eqx-linear', 'eqx-conv', 'eqx-mha', 'eqx-mlp', 'nnx-linear', 'nnx-conv'."""
    import equinox as eqx

    if _is_nnx(module):
        nnx = _nnx()
        kinds = ((nnx.Linear, "nnx-linear"), (nnx.Conv, "nnx-conv"))
        found = []
        for path, node in nnx.iter_graph(module):
            for cls, kind in kinds:
                if isinstance(node, cls):
                    found.append((".".join(str(p) for p in path), kind, node))
        return found
    kinds = (
        (eqx.nn.MLP, "eqx-mlp"),
        (eqx.nn.MultiheadAttention, "eqx-mha"),
        (eqx.nn.Linear, "eqx-linear"),
        (eqx.nn.Conv, "eqx-conv"),
    )
    is_layer = lambda n: isinstance(n, tuple(c for c, _ in kinds))  # noqa: E731
    found = []
    for keypath, node in jax.tree_util.tree_flatten_with_path(module, is_leaf=is_layer)[0]:
        for cls, kind in kinds:
            if isinstance(node, cls):
                found.append((_path_name(keypath), kind, node))
                break
    return found


def _io(kind: str, layer) -> tuple[int, int]:
    """(inputs, outputs) of a Linear/Conv layer from its weight's shape."""
    if kind.startswith("eqx"):
        shape = layer.weight.shape  # (out, in, ...)
        return int(shape[1]), int(shape[0])
    shape = layer.kernel.shape  # (..., in, out)
    return int(shape[-2]), int(shape[-1])


def _feeding_order(a, b):
    """The two weight layers (path, kind, layer) ordered so that the first feeds the second (its
    outputs are the second's inputs), decided by their shapes; when both orders chain (e.g. a
    1-channel conv and a 1-output readout), by the order of the fields (a wrong guess cannot run
    at another width, which `Network.check_inputs` reports).

    **Raises:** `NeuronError` if the shapes do not chain."""
    (ia, oa), (ib, ob) = _io(a[1], a[2]), _io(b[1], b[2])
    forward, backward = oa == ib, ob == ia
    if forward:
        return a, b
    if backward:
        return b, a
    raise NeuronError(
        f"neurons='auto' found two weight layers of which neither feeds the other ({a[0]}: {ia} -> "
        f"{oa}, {b[0]}: {ib} -> {ob}). Name the neuron arrays with `neurons=` (the first layer's "
        "output axis, then the second layer's input axis)."
    )


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _auto(module) -> tuple[list[tuple[str, int]], int | None, str]:
    """(neurons, width, description) for the layouts that ``neurons="auto"`` recognises."""
    layers = _layers(module)
    kinds = [k for _, k, _ in layers]
    if kinds.count("eqx-mlp") == 1 and len(layers) == 1:
        path, _, mlp = layers[0]
        if mlp.depth != 1:
            raise NeuronError(
                f"neurons='auto' found an eqx.nn.MLP of depth {mlp.depth} at {path or 'the top'}: the "
                "NQF of one layer needs one hidden layer (depth=1). Name the neurons of the layer you "
                "want with `neurons=` (the other layers are then frozen), or see nqf.multilayer."
            )
        first, second = mlp.layers
        spec = [(_join(path, "layers[0].weight"), 0)]
        if first.bias is not None:
            spec.append((_join(path, "layers[0].bias"), 0))
        spec.append((_join(path, "layers[1].weight"), 1))
        return spec, None, "eqx.nn.MLP hidden units"
    if kinds.count("eqx-mha") == 1:
        path, _, mha = next(item for item in layers if item[1] == "eqx-mha")
        spec = []
        for proj in ("query_proj", "key_proj", "value_proj"):
            spec.append((_join(path, f"{proj}.weight"), 0))
            if getattr(mha, proj).bias is not None:
                spec.append((_join(path, f"{proj}.bias"), 0))
        spec.append((_join(path, "output_proj.weight"), 1))
        return spec, mha.num_heads, "eqx.nn.MultiheadAttention heads"
    weights = [(p, k, l) for p, k, l in layers if k in ("eqx-linear", "eqx-conv", "nnx-linear", "nnx-conv")]
    if len(weights) == 2 and len(layers) == 2:
        (p1, k1, l1), (p2, k2, l2) = _feeding_order(*weights)
        spec = []
        if k1.startswith("eqx"):  # weight (out, in, ...): units on axis 0
            spec.append((_join(p1, "weight"), 0))
        else:  # nnx kernel (..., in, out): units on the last axis
            spec.append((_join(p1, "kernel"), -1))
        if l1.bias is not None:
            spec.append((_join(p1, "bias"), 0))
        # the second layer's inputs: eqx weight (out, in, ...) axis 1; nnx kernel (..., in, out) axis -2
        spec.append((_join(p2, "weight"), 1) if k2.startswith("eqx") else (_join(p2, "kernel"), -2))
        return spec, None, f"the outputs of {p1 or 'the first layer'} and the inputs of {p2 or 'the second'}"
    found = ", ".join(f"{p or '(top)'} ({k})" for p, k, _ in layers) or "no Linear/Conv/MLP/attention layer"
    raise NeuronError(
        "neurons='auto' recognises an eqx.nn.MLP of depth 1, a module with one "
        "eqx.nn.MultiheadAttention, or exactly two weight layers (Linear/Conv) where the second reads "
        f"the first's units; found {found}. Name the neuron arrays with `neurons=`, e.g. "
        "neurons={'l1.kernel': 1, 'l2.kernel': 0}."
    )


# --- the Network ---------------------------------------------------------------------------------


class Network:
    """A module with its neurons located: module <-> W (p, d) (Theorem 1's neurons as columns).

    **Arguments:**

    - `module`: an equinox Module, a flax.nnx Module, or (with `W0`) a plain JAX function
      ``f(W, x)`` of W (p, d) and one input.
    - `neurons`: ``"auto"`` (see the module docstring), or the neuron arrays in stacking order:
      a mapping ``{path: axis}`` or a sequence of ``(path, axis)`` pairs, `path` a string
      (``"layers[0].weight"``) or a callable ``where(module) -> array``, `axis` the neuron axis.
    - `width`: the number of neurons d when an axis packs several parameters per neuron
      (attention heads: ``num_heads``); default: the common length of the neuron axes.
    - `apply`: ``apply(module, x) -> output`` for one input x (scalar or (k,)); default
      ``module(x)``. E.g. ``lambda m, X: m(X, X, X)[-1]`` for an attention layer.
    - `W0`: with a plain function `module` = f(W, x): the initial weights (p, d); `groups`:
      its row groups (sizes summing to p, e.g. ``(64, 1)`` for [u; v]), which let `nqf.extract`
      find the feed-forward structure without a Hessian per row.
    - `constants`: fixed per-neuron constants (never trained), ``{path: axis}`` or
      ``(path, axis)`` pairs as `neurons` (with ``neurons="auto"`` they are left out of the
      neurons): e.g. ``{"layers[1].weight": 1}``, an MLP's frozen readout. For a plain function
      f(W, x, c): the array c (d, ...), one value or slice per neuron. Then W is the lifted
      W~ (K p0, d) of the K distinct values (`nqf.data._constants`): column i holds neuron i's
      p0 parameters in the row block of its value (in ascending order of the values), zeros in
      the others; ``net(W~, x)`` is the module with the K blocks' columns as neurons of their
      block's value (any width), ``lift(W)`` builds W~ from the module's (p0, d) weights.

    **Attributes:** `p` (parameters per neuron), `d` (neurons), `W` (p, d) float64 numpy,
    `groups` (row counts of the neuron arrays, summing to p), `group_names` (their paths),
    `frozen` (paths of the other arrays but the constants), `constants` (paths of the constant
    arrays, ``()`` without), `module` (the module, float64), `layout` (a one-line description).

    **Raises:** `NeuronError` (a `ValueError`) for unknown paths, axes out of range, arrays that
    disagree on the number of neurons, a `width` that does not divide an axis, or a module that
    ``"auto"`` does not recognise (the message lists the layers found), or a bad `constants`
    (unknown paths, an array also in `neurons`, an axis whose length is not d; naming
    `constants`); `TypeError` for a module
    of another kind, or a plain function without `W0`; `ValueError` for a module that computes in
    float32 after its parameters were cast to float64.
    """

    _lift: Lift | None = None  # the lift of `constants` (`nqf.data._constants`), None without
    constants: tuple[str, ...] = ()

    def __new__(cls, module: Any = None, neurons: Any = "auto", *args: Any, **kwargs: Any):
        """A `nqf.data.DeepNetwork` for a deep chain of Linear layers with ``neurons="auto"``
        (`nqf.data._deep_network`), else a `Network`."""
        if cls is Network and module is not None and _DEEP_CHAIN and kwargs.get("constants") is None:
            is_deep, deep_network = _DEEP_CHAIN[0]
            if is_deep(module, neurons, kwargs.get("W0")):
                return object.__new__(deep_network)
        return object.__new__(cls)

    def __init__(
        self,
        module: Any,
        neurons: str | Mapping[Any, int] | Sequence[tuple[Any, int]] = "auto",
        *,
        width: int | None = None,
        apply: Callable | None = None,
        W0: Float[ArrayLike, "p d"] | None = None,
        groups: Sequence[int] | None = None,
        constants: Any = None,
    ):
        require_x64()
        if apply is not None and not callable(apply):
            raise TypeError(f"`apply` must be a callable apply(module, x); found {type(apply).__name__}.")
        import equinox as eqx

        self._function = not (isinstance(module, eqx.Module) or _is_nnx(module))
        if self._function:
            if not callable(module):
                raise TypeError(
                    "`module` must be an equinox Module, a flax.nnx Module, or a function f(W, x); "
                    f"found {type(module).__name__}."
                )
            if W0 is None:
                raise TypeError("A plain function f(W, x) needs the initial weights: pass `W0` (p, d).")
            W0 = np.asarray(W0, dtype=float)
            if W0.ndim != 2 or not np.all(np.isfinite(W0)):
                raise ValueError(f"`W0` must be a finite (p, d) array; found shape {shape_str(W0.shape)}.")
            if apply is not None:
                raise TypeError("`apply` is for a module; a plain function f(W, x) is called as it is.")
            self.module = module
            self._params, self._call, self._rebuild = jnp.asarray(W0), module, (lambda params: params)
            neurons, width, description = [("", 1)], None, "a function f(W, x), W (p, d)"
            if constants is not None:  # f(W, x, c): W and the per-neuron constants c (d, ...) as params
                self._params, self._call = (jnp.asarray(W0), _as_constants(constants)), _with_constants(module)
                constants, description = [("[1]", 0)], "a function f(W, x, c), W (p, d), constants c (d, ...)"
        else:
            if W0 is not None:
                raise TypeError("`W0` is for a plain function f(W, x); a module carries its own weights.")
            description = None
            if isinstance(neurons, str):
                if neurons != "auto":
                    raise NeuronError(
                        f"`neurons` must be 'auto', a mapping {{path: axis}} or (path, axis) pairs; found {neurons!r}."
                    )
                neurons, auto_width, description = _auto(module)
                width = auto_width if width is None else width
            self.module = _float64(module)
            apply = (lambda mod, x: mod(x)) if apply is None else apply
            self._params, self._call, self._rebuild = _split(self.module, apply)
            if description is not None and constants is not None:  # "auto": the constants are not neurons
                fixed = _constant_names(self._params, self.module, constants)
                neurons = [(path, axis) for path, axis in neurons if _tokens(path) not in fixed]
        self._leaves, self._treedef = jax.tree_util.tree_flatten(self._params)
        self._slots, self.d = _slots(self._params, self.module, neurons, width, self._function)
        self.groups = tuple(s.size for s in self._slots)
        self.group_names = tuple(s.name for s in self._slots)
        self.p = int(sum(self.groups))
        used = {s.index for s in self._slots}
        if constants is not None:
            self._lift = _resolve_constants(self._params, self.module, constants, self._slots, self.d)
            self.constants = tuple(s.name for s in self._lift.slots)
            used |= {s.index for s in self._lift.slots}
        paths = jax.tree_util.tree_flatten_with_path(self._params)[0]
        self.frozen = tuple(_path_name(kp) for i, (kp, _) in enumerate(paths) if i not in used)
        self._frozen_shapes = tuple(np.shape(leaf) for i, (_, leaf) in enumerate(paths) if i not in used)
        if groups is not None:
            if not self._function:
                raise TypeError("`groups` is for a plain function f(W, x); a module's groups are its neuron arrays.")
            groups = tuple(int(g) for g in groups)
            if sum(groups) != self.p or min(groups, default=0) < 1:
                raise NeuronError(f"`groups` must be positive row counts summing to p = {self.p}; found {groups}.")
            self.groups, self.group_names = groups, tuple(f"rows {i}" for i in range(len(groups)))
        self.layout = description or "neurons: " + ", ".join(
            f"{s.name} (axis {s.axis}{f', {s.pack} per neuron' if s.pack > 1 else ''})" for s in self._slots
        )
        if self._lift is not None:
            self._lift_layout()

    def _lift_layout(self) -> None:
        """p, groups, group names and layout of the lifted W~ (K p0, d) (`nqf.data._constants`)."""
        lift = self._lift
        assert lift is not None
        if self._function:  # f(W, x, c): name the two arrays of params (W, c) as the function's arguments
            lift = self._lift = dataclasses.replace(lift, slots=(dataclasses.replace(lift.slots[0], name="c"),))
            self._slots = [dataclasses.replace(self._slots[0], name="W")]
            self.constants, self.group_names = ("c",), ("W",)
        self.p = lift.K * self.p
        labels = [value_label(lift.values, k) for k in range(lift.K)]
        self.group_names = tuple(f"{n} [{c}]" for c in labels for n in self.group_names)
        self.groups = self.groups * lift.K
        self.layout += (
            f"; constants {', '.join(self.constants)}: {lift.K} distinct values ({', '.join(labels)}), "
            f"lifted to p = {lift.K} x {lift.p0}"
        )

    # -- the layout ---------------------------------------------------------------------------------
    def to_W(self, params: PyTree[Array] | None = None) -> Float[Array, "p d"]:
        """The neuron parameters of `params` (default: the module's) as W (p, d); JAX arrays in,
        JAX array out (traceable). With `constants`: the lifted W (K p0, d), neuron i's column
        in the row block of its constant's value (`nqf.data._constants`)."""
        leaves = self._leaves if params is None else jax.tree_util.tree_leaves(params)
        W = _columns(leaves, self._slots).T  # neuron-major: block i of a packed axis is neuron i
        return W if self._lift is None else self._lift.lift(W, leaves)

    def with_params_W(self, params: PyTree[Array], W: Float[ArrayLike, "p d_prime"]) -> PyTree[Array]:
        """`params` with the neuron arrays replaced from W (p, d') (any width d'). With
        `constants`: at the module's width d, W is a lifted W (`lift`) folded back onto the
        module's neurons (the constants kept); at another width d', the module of width K d'
        whose neurons are the K blocks' columns, each with its block's constant."""
        leaves = list(jax.tree_util.tree_leaves(params))
        W = jnp.asarray(W)
        if self._lift is not None:
            W, leaves = self._lift.unlift(W, leaves, self.d)
        leaves = _place(leaves, self._slots, W.T)  # neuron i's slice: rows of W, flattened in C order
        return jax.tree_util.tree_unflatten(self._treedef, leaves)

    def lift(self, W: Float[ArrayLike, "p0 d"]) -> Float[np.ndarray, "p d"]:
        """Module-layout weights W (p0, d) (the neuron arrays' slices, without `constants`) as this
        network's W (K p0, d): neuron i's column in the row block of its constant's value, zero
        in the others (the identity without `constants`). For a `W0=` of `nqf.predict`/`record`.

        **Raises:** `ValueError` if W is not (p0, d)."""
        W = np.asarray(W, dtype=float)
        p0 = self.p if self._lift is None else self._lift.p0
        if W.shape != (p0, self.d):
            raise ValueError(f"`W` must have shape (p0, d) = ({p0}, {self.d}); found {shape_str(W.shape)}.")
        return W if self._lift is None else np.asarray(self._lift.lift(jnp.asarray(W), self._leaves))

    def check_lifted(self, W: Float[ArrayLike, "p d"], name: str = "W0") -> None:
        """With `constants`: W (p, d) must be a lifted W (zero outside each column's block).

        **Raises:** `ValueError` naming `name` and `constants` (nothing without `constants`)."""
        if self._lift is not None:
            self._lift.check(np.asarray(W, dtype=float), self._leaves, name)

    @property
    def W(self) -> Float[np.ndarray, "p d"]:
        """The module's neuron parameters as W (p, d), float64."""
        return np.asarray(self.to_W())

    @property
    def params(self) -> PyTree[Array]:
        """The module's arrays as a pytree (what an optimizer trains)."""
        return self._params

    def with_W(self, W: Float[ArrayLike, "p d_prime"]) -> Any:
        """The module rebuilt with neuron parameters W (p, d') (any width d'); frozen arrays kept.
        With `constants`: W (p, d) a lifted W (`lift`; `ValueError` otherwise), or the module of
        width K d' at another width d' (`with_params_W`)."""
        W = self._check_W(W)
        if W.shape[1] == self.d and self._lift is not None:
            try:
                self.check_lifted(np.asarray(W), "W")
            except jax.errors.TracerArrayConversionError:  # under jit: not checked
                pass
        return self._rebuild(self.with_params_W(self._params, W))

    def apply(self, params: PyTree[Array], x: PyTree[ArrayLike]) -> Float[Array, "*k"]:
        """The output for one input x from a parameter pytree like `params` (traceable)."""
        return self._call(params, x)

    def __call__(self, W: Float[ArrayLike, "p d_prime"], x: PyTree[ArrayLike]) -> Float[Array, "*k"]:
        """The module's output at W (p, d') for one input x: f(W, x) for `nqf.extract`."""
        if jnp.ndim(W) != 2 or jnp.shape(W)[0] != self.p:
            raise ValueError(f"`W` must have shape (p, d') = ({self.p}, d'); found {shape_str(jnp.shape(W))}.")
        if self._lift is not None:
            return self._lifted_call(W, x)
        return self._call(self.with_params_W(self._params, W), x)

    def _lifted_call(self, W, x) -> Any:
        """The lifted f~(W~, x) of `constants`: the K blocks' columns as K d' neurons of the
        module, block k's with its value (any width d'; `nqf.data._constants`)."""
        assert self._lift is not None
        W, leaves = self._lift.unlift(jnp.asarray(W), list(self._leaves), None)
        return self._call(jax.tree_util.tree_unflatten(self._treedef, _place(leaves, self._slots, W.T)), x)

    def _compiled(self, key, build):
        """A compiled program of this network, built once per `key` (nqf.predict / nqf.record)."""
        cache = self.__dict__.setdefault("_programs", {})
        if key not in cache:
            if len(cache) >= 16:  # e.g. a new optax transformation per call: keep the newest
                cache.pop(next(iter(cache)))
            cache[key] = build()
        return cache[key]

    def neuron_mask(self) -> PyTree[bool]:
        """A pytree like `params` of bools: True on the neuron arrays."""
        used = {s.index for s in self._slots}
        return jax.tree_util.tree_unflatten(self._treedef, [i in used for i in range(len(self._leaves))])

    def constant_mask(self) -> PyTree[bool]:
        """A pytree like `params` of bools: True on the arrays of `constants` (never trained)."""
        used = set() if self._lift is None else {s.index for s in self._lift.slots}
        return jax.tree_util.tree_unflatten(self._treedef, [i in used for i in range(len(self._leaves))])

    def __repr__(self) -> str:
        extra = f", constants={list(self.constants)}" if self.constants else ""
        return (
            f"Network(p={self.p}, d={self.d}, groups={dict(zip(self.group_names, self.groups))}, "
            f"frozen={list(self.frozen)}{extra})"
        )

    # -- checks -------------------------------------------------------------------------------------
    def _check_W(self, W):
        shape = jnp.shape(W)
        if len(shape) != 2 or shape[0] != self.p or shape[1] < 1:
            raise ValueError(
                f"`W` must have shape (p, d') = ({self.p}, d') with d' >= 1 (one column per "
                f"neuron); found {shape_str(shape)}."
            )
        return jnp.asarray(W, dtype=jnp.float64)

    def check_inputs(self, x: PyTree[Float[ArrayLike, "m ..."]]) -> PyTree[Float[Array, "m ..."]]:
        """x with floating leaves in float64 (one `PrecisionWarning` if any was cast), and the
        output dtype of the module checked on the first input.

        **Raises:** `ValueError` if the module returns a non-float64 output (e.g. a dtype=float32
        inside), or cannot be called on one input of `x`; `NeuronError` if it cannot run at
        other widths, or (with `constants`) if the lifted module differs from it (a zero neuron
        that contributes)."""
        x, cast = _cast_tree(x)
        if cast:
            warnings.warn(
                f"Inputs `x` in {', '.join(sorted(cast))} were cast to float64 (nqf computes in float64).",
                PrecisionWarning,
                stacklevel=3,
            )
        first = jax.tree_util.tree_map(lambda a: a[0], x)
        try:
            out = jax.eval_shape(lambda xx: self._call(self._params, xx), first)
        except Exception as err:  # the user's module: any error, named
            raise ValueError(
                f"The module cannot be called on one input of `x` (apply(module, x[0])): {type(err).__name__}: {err}"
            ) from err
        if not hasattr(out, "dtype") or np.ndim(out) > 1:
            raise ValueError(
                f"The module must return a scalar or a vector (k,) for one input; found "
                f"{getattr(out, 'shape', type(out).__name__)}."
            )
        if out.dtype != jnp.float64:
            raise ValueError(
                f"The module returns {out.dtype} although its parameters and inputs are float64 (an explicit "
                "dtype or cast inside it, e.g. flax's dtype=jnp.float32): nqf compares the NQF with the "
                "module at relative 1e-8 and needs float64. Build the module with float64 computation."
            )
        self._check_widths(first)
        if self._lift is not None:
            self._check_lift(first)
        return x

    def _check_lift(self, x0) -> None:
        """With `constants`: the lifted f~ at the lifted W equals the module on one input (the
        other blocks are zero neurons, which must contribute nothing).

        **Raises:** `NeuronError` naming `constants`."""
        lifted = np.asarray(self(self.to_W(), x0))
        own = np.asarray(self._call(self._params, x0))
        scale = np.abs(own).max(initial=0.0) + np.abs(np.asarray(self(jnp.zeros((self.p, 1)), x0))).max(initial=0.0)
        gap = float(np.abs(lifted - own).max(initial=0.0))
        if not gap <= 1e-9 * scale + 1e-300:
            raise NeuronError(
                f"`constants`: the lifted module (each neuron in the block of its constant's value, zero neurons in "
                f"the other blocks) differs from the module by {gap:.3g} on x[0] (output scale {scale:.3g}): a neuron "
                "with zero weights must contribute nothing (f = f(0) + sum_i phi(w_i, c_i, x), phi(0, c, x) = 0), "
                "e.g. no fixed bias inside the activation."
            )

    def _check_widths(self, x0) -> None:
        """The module must run at other widths (the NQF is extracted at d = 2 and 4): else name the
        frozen arrays that have an axis of the width's length (they belong to the neurons) or the
        width-bound computation.

        **Raises:** `NeuronError`."""
        for width in (2, 4):
            W = jax.ShapeDtypeStruct((self.p, width), jnp.float64)
            try:
                jax.eval_shape(lambda W: self(W, x0), W)
            except Exception as err:  # the user's module at another width: any error, explained
                suspects = [
                    f"{n} {shape_str(s)}"
                    for n, s in zip(self.frozen, self._frozen_shapes)
                    if any(L % self.d == 0 and L >= self.d for L in s)
                ]
                cause = (
                    (
                        "frozen arrays with an axis of length d = " + str(self.d) + " (list them in `neurons`, "
                        "they belong to the neurons): " + ", ".join(suspects)
                    )
                    if suspects
                    else (
                        "a computation tied to the width (a normalisation across the units such as LayerNorm, a "
                        "static size; Theorem 1 needs f = sum_i phi(w_i, x)), or neurons='auto' paired the layers the "
                        "wrong way round (name them with `neurons=`)"
                    )
                )
                raise NeuronError(
                    f"The module cannot run with {width} neurons instead of {self.d}; it must, for its "
                    f"NQF to exist at every width. Likely cause: {cause}. ({type(err).__name__}: "
                    f"{str(err)[:200]})"
                ) from err


def _as_constants(constants) -> Array:
    """The per-neuron constants c of a plain function f(W, x, c): a finite array (d, ...).

    **Raises:** `NeuronError` naming `constants`."""
    try:
        c = np.asarray(constants, dtype=float)
    except (TypeError, ValueError):
        c = np.zeros(())
    if c.ndim < 1 or not np.all(np.isfinite(c)):
        raise NeuronError(
            "`constants` of a plain function f(W, x, c) must be a finite numeric array (d, ...), one value (or "
            f"slice) per neuron; found {type(constants).__name__} {shape_str(np.shape(constants))}."
        )
    return jnp.asarray(c)


def _with_constants(f):
    """call(params, x) for params (W, c): f(W, x, c)."""
    return lambda params, x: f(params[0], x, params[1])


def _cast_tree(tree):
    """Floating leaves below float64 cast to float64; returns (tree, set of the cast dtypes)."""
    cast = set()

    def up(a):
        if hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating) and a.dtype != jnp.float64:
            cast.add(str(a.dtype))
            return jnp.asarray(a, dtype=jnp.float64)
        return a

    return jax.tree_util.tree_map(up, tree), cast


def _float64(module):
    """The module with floating arrays in float64 (one `PrecisionWarning` naming what was cast)."""
    if _is_nnx(module):
        nnx = _nnx()
        graphdef, state = nnx.split(module)
        state, cast = _cast_tree(state)
        module = nnx.merge(graphdef, state)
    else:
        module, cast = _cast_tree(module)
    if cast:
        warnings.warn(
            f"The module's parameters in {', '.join(sorted(cast))} were cast to float64 (nqf "
            "computes in float64; the module you passed is unchanged).",
            PrecisionWarning,
            stacklevel=4,
        )
    return module


def _slots(params, module, neurons, width, function: bool, arg: str = "neurons") -> tuple[list[_Slot], int]:
    """The neuron arrays of `neurons` resolved against the parameter leaves; returns (slots, d).
    `arg`: the argument named in the errors (``"constants"`` for `nqf.data._constants`)."""
    paths = jax.tree_util.tree_flatten_with_path(params)[0]
    leaves = [leaf for _, leaf in paths]
    names = [_path_name(kp) for kp, _ in paths]
    toks = [_tokens(n) for n in names]
    items = (
        list(neurons.items())
        if isinstance(neurons, dict)
        else list(neurons)
        if isinstance(neurons, Sequence) and not isinstance(neurons, str)
        else None
    )
    if not items:
        raise NeuronError(
            f"`{arg}` must be " + ("'auto', " if arg == "neurons" else "") + "a mapping {path: axis} or a non-empty "
            f"sequence of (path, axis) pairs; found {neurons!r}."
        )
    if width is not None and (isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1):
        raise NeuronError(f"`width` must be an integer >= 1 (the number of neurons); found {width!r}.")
    resolved = []
    for j, item in enumerate(items):
        if not (isinstance(item, tuple) and len(item) == 2):
            raise NeuronError(f"`{arg}[{j}]` must be a pair (path, axis); found {item!r}.")
        where, axis = item
        if function:
            index = 0
        elif callable(where):
            target = where(module)
            target = getattr(target, "value", target)  # a flax.nnx Variable
            hits = [i for i, leaf in enumerate(leaves) if leaf is target] or [
                i for i, leaf in enumerate(leaves) if _same_leaf(leaf, target)
            ]
            if len(hits) != 1:
                raise NeuronError(
                    f"`{arg}[{j}]`: `where(module)` must return one of the module's parameter "
                    f"arrays; found {type(target).__name__}"
                    f"{' of shape ' + shape_str(target.shape) if hasattr(target, 'shape') else ''}."
                )
            index = hits[0]
        elif isinstance(where, str):
            hits = [i for i, t in enumerate(toks) if t == _tokens(where)]
            if not hits:
                raise NeuronError(
                    f"`{arg}`: no parameter array at {where!r}; the module's arrays are: "
                    + ", ".join(f"{n} {shape_str(leaf.shape)}" for n, leaf in zip(names, leaves))
                )
            index = hits[0]
        else:
            raise NeuronError(
                f"`{arg}[{j}]`: the path must be a string or a callable where(module); found {type(where).__name__}."
            )
        leaf = leaves[index]
        ndim = np.ndim(leaf)
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
            raise NeuronError(
                f"`{arg}`: the axis of {names[index] or 'W'} must be an integer axis of its shape "
                f"{shape_str(np.shape(leaf))}; found {axis!r}."
            )
        resolved.append((names[index] or "W", index, int(axis) % ndim, np.shape(leaf)))
    if len({r[1] for r in resolved}) != len(resolved):
        raise NeuronError(f"`{arg}` lists the same array twice.")
    lengths = [shape[axis] for _, _, axis, shape in resolved]
    d = int(width) if width is not None else lengths[0]
    bad = [(n, L) for (n, _, _, _), L in zip(resolved, lengths) if L % d]
    if width is None and len(set(lengths)) != 1:
        raise NeuronError(
            f"The arrays of `{arg}` disagree on the number of neurons along their axes: "
            + ", ".join(f"{n}: {L}" for (n, *_), L in zip(resolved, lengths))
            + (
                ". Pass `width=` (the number of neurons) when an axis packs several parameters per neuron (e.g. "
                "attention heads)."
                if arg == "neurons"
                else "."
            )
        )
    if bad:
        raise NeuronError(
            f"`width` = {d} does not divide the neuron axis of " + ", ".join(f"{n} (length {L})" for n, L in bad) + "."
        )
    slots = []
    for (name, index, axis, shape), L in zip(resolved, lengths):
        other = tuple(s for i, s in enumerate(shape) if i != axis)
        slots.append(_Slot(name, index, axis, L // d, other))
    return slots, d


def _resolve_constants(params, module, constants, neuron_slots, d: int) -> Lift:
    """The `Lift` of `constants` ({path: axis} or (path, axis) pairs, as `neurons`; for a plain
    function the pair that names its constant array) against the parameters `params`.

    **Raises:** `NeuronError` naming `constants`: unknown paths or axes, an array also listed in
    `neurons`, an axis whose length is not the number of neurons d."""
    cslots, dc = _slots(params, module, constants, None, False, arg="constants")
    both = {s.index for s in cslots} & {s.index for s in neuron_slots}
    if both:
        names = [s.name for s in cslots if s.index in both]
        raise NeuronError(
            f"`constants` lists {', '.join(names)}, which `neurons` also lists: an array is either trained "
            "(a neuron array) or a fixed per-neuron constant."
        )
    if dc != d:
        raise NeuronError(
            "`constants`: "
            + ", ".join(f"{s.name} (axis {s.axis})" for s in cslots)
            + f" has {dc} entries along its neuron axis, but the module has d = {d} neurons: a constant holds "
            "one value (or slice) per neuron along the axis named."
        )
    leaves = jax.tree_util.tree_leaves(params)
    values = np.unique(np.asarray(_columns(leaves, cslots)), axis=0)
    return Lift(tuple(cslots), values, int(sum(s.size for s in neuron_slots)))


def _constant_names(params, module, constants) -> set[tuple[str, ...]]:
    """The paths of the arrays `constants` names (as `_tokens`), to leave out of an automatic
    layout (``neurons="auto"`` of an MLP whose readout is declared constant)."""
    return {_tokens(s.name) for s in _slots(params, module, constants, None, False, arg="constants")[0]}


def _same_leaf(leaf, target) -> bool:
    """`target` is `leaf` up to the float64 cast (a callable `where` evaluated on the user's module)."""
    return (
        hasattr(target, "shape")
        and np.shape(target) == np.shape(leaf)
        and bool(np.array_equal(np.asarray(target, dtype=float), np.asarray(leaf, dtype=float)))
    )
