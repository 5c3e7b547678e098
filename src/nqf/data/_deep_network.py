"""A deep chain of Linear layers as a multi-layer NQF's layout (Theorem 14; THEORY sec. 10).

``nqf.Network(module)`` (``neurons="auto"``) returns a `DeepNetwork` for a module that is a chain
of 3 or 4 Linear layers with one pointwise activation phi between them: an `eqx.nn.MLP` of depth
2 or 3 (identity final activation), or an equinox / flax.nnx module holding only Linear layers
whose shapes chain and whose output is L_n(phi(... phi(L_1 x))) for one phi (checked on a random
input; the activation is the MLP's own, the module's ``activation`` attribute, or one of the
common ones). The chain is cut into NQF layers (Theorem 14):

- a *pair* (L_a, L_b): neuron i is [row i of L_a's weight; L_a's bias entry i; column i of L_b's
  weight] (the single-layer MLP layout, Prop. 1), p = n_in (+1) + n_out, d = L_a's outputs; its
  output h = L_b(phi(L_a z)), L_b's bias a frozen constant C of the layer (except the final one);
- a *readout* L_r: one neuron (d = 1) holding its whole weight (row-major) and bias: h = L_r z is
  linear in it (structure component g only).

- a *bias*: at depth 3 the final Linear layer's bias, one neuron (d = 1): h + b (its own layer, so
  that it trains as in the module rather than being frozen in the last pair's constant).

Depth 3 (4 Linear layers) is two pairs (and a bias); depth 2 (3 Linear layers) a pair and a
readout. The
input z of every NQF layer after the first is phi(h) of the previous one's output. Each NQF
layer's W^(l) (p_l, d_l) is read and written by an ordinary `Network` over the same module
(`DeepNetwork.layers`); the DeepNetwork's own W is their block diagonal

    W = diag(W^(1), ..., W^(L)) (sum p_l, sum d_l),  so  M = W W^T = diag(M^(1), ..., M^(L)),

and `nqf.record` (which reads W through this layout) records every layer's M^(l) as a diagonal
block, and the eigenvalues of M are the union of the layers' eigenvalues.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PyTree

from .._core._checks import shape_str
from .._core._config import require_x64
from ._network import _DEEP_CHAIN, Network, NeuronError, _float64, _is_nnx, _join, _layers, _path_name, _split

__all__ = ["DeepNetwork", "DEPTHS"]

DEPTHS = (2, 3)  # hidden layers of the chains the multi-layer NQF path covers (3 or 4 Linear layers)
_LINEAR = ("eqx-linear", "nnx-linear")


def _identity(z):
    return z


def _candidates(module, mlp) -> list[tuple[str, Callable]]:
    """(name, phi) to try as the chain's activation: the MLP's own, the module's ``activation``
    attribute, then the common ones."""
    out = []
    if mlp is not None:
        out.append(("the MLP's activation", mlp.activation))
    act = getattr(module, "activation", None)
    if callable(act) and not isinstance(act, type):
        out.append(("module.activation", act))
    out += [
        ("tanh", jnp.tanh),
        ("gelu", jax.nn.gelu),
        ("gelu (exact)", lambda z: jax.nn.gelu(z, approximate=False)),
        ("sin", jnp.sin),
        ("silu", jax.nn.silu),
        ("sigmoid", jax.nn.sigmoid),
        ("softplus", jax.nn.softplus),
        ("relu", jax.nn.relu),
        ("elu", jax.nn.elu),
        ("identity", _identity),
    ]
    return out


def _chain_layers(module) -> tuple[list[tuple[str, str]], Any] | None:
    """[(path, kind)] of the Linear layers of `module` in chain order and the eqx MLP (or None),
    or None when the module is not a candidate chain (fewer than 3 Linear layers, or other layer
    kinds: the one-layer layouts of `Network` decide).

    **Raises:** `NeuronError` for an `eqx.nn.MLP` of a depth the multi-layer path does not cover,
    or Linear layers whose shapes do not chain."""
    found = _layers(module)
    kinds = [k for _, k, _ in found]
    if kinds == ["eqx-mlp"]:
        path, _, mlp = found[0]
        if mlp.depth <= 1:
            return None
        if mlp.depth not in DEPTHS:
            raise NeuronError(
                f"`module`: neurons='auto' found an eqx.nn.MLP of depth {mlp.depth} at {path or 'the top'}; the "
                f"multi-layer NQF path covers depth {' and '.join(map(str, DEPTHS))} (3 or 4 Linear layers). Name "
                "the neurons of one layer with `neurons=` (the other layers are then frozen), or build the deep NQF "
                "yourself (nqf.multilayer)."
            )
        return [(_join(path, f"layers[{j}]"), "eqx-linear") for j in range(mlp.depth + 1)], mlp
    if len(found) < 3 or any(k not in _LINEAR for k in kinds):
        return None
    if len(found) - 1 not in DEPTHS:
        raise NeuronError(
            f"`module`: neurons='auto' found {len(found)} Linear layers; the multi-layer NQF path covers chains of "
            f"{' or '.join(str(d + 1) for d in DEPTHS)} Linear layers (depth {' or '.join(map(str, DEPTHS))}). Name "
            "the neurons of one layer with `neurons=`, or build the deep NQF yourself (nqf.multilayer)."
        )
    return _order_chain(found), None


def _io(kind, layer) -> tuple[int, int]:
    if kind.startswith("eqx"):
        return int(layer.weight.shape[1]), int(layer.weight.shape[0])
    return int(layer.kernel.shape[-2]), int(layer.kernel.shape[-1])


def _order_chain(found) -> list[tuple[str, str]]:
    """The Linear layers in the order where each one's outputs are the next one's inputs (tree
    order when several orders chain).

    **Raises:** `NeuronError` if no order chains."""
    import itertools

    ios = [_io(k, lay) for _, k, lay in found]
    for perm in itertools.permutations(range(len(found))):
        if all(ios[a][1] == ios[b][0] for a, b in zip(perm, perm[1:])):
            return [(found[i][0], found[i][1]) for i in perm]
    shapes = ", ".join(f"{p or '(top)'}: {i} -> {o}" for (p, _, _), (i, o) in zip(found, ios))
    raise NeuronError(
        f"`module`: neurons='auto' found {len(found)} Linear layers that do not form a chain ({shapes}): the "
        "multi-layer NQF path needs each layer's outputs to be the next one's inputs. Name the neurons of one "
        "layer with `neurons=`."
    )


def is_deep(module, neurons, W0) -> bool:
    """Whether ``Network(module, neurons, W0=W0)`` is a `DeepNetwork` (raises `NeuronError` for a
    deep module the path does not cover)."""
    import equinox as eqx

    if W0 is not None or not (isinstance(neurons, str) and neurons == "auto"):
        return False
    if not (isinstance(module, eqx.Module) or _is_nnx(module)):
        return False
    return _chain_layers(module) is not None


def _get(module, path: str):
    """The layer object at `path` (as `_layers` names it) inside `module`."""
    for p, _, lay in _layers(module):
        if p == path:
            return lay
    for p, _, lay in _layers(module):  # an eqx MLP: its layers by index
        if p and path.startswith(p + ".") or (not p and path.startswith("layers[")):
            j = int(path.rsplit("[", 1)[1].rstrip("]"))
            return lay.layers[j]
    raise KeyError(path)  # not reachable for paths `_chain_layers` produced


def _call_linear(kind, layer, z):
    return layer(z)


class DeepNetwork(Network):
    """A chain of 3 or 4 Linear layers with a pointwise activation, located as a multi-layer NQF
    (module docstring). Built by ``nqf.Network(module)`` (``neurons="auto"``); name one layer's
    neurons (``nqf.Network(module, neurons=...)``) for the one-layer NQF with the other layers
    frozen.

    **Attributes:** `layers`: one `Network` per NQF layer (same module; its W^(l) (p_l, d_l));
    `kinds`: ``"pair"`` / ``"readout"`` / ``"bias"`` per layer; `linears`: the Linear layers' paths in chain
    order; `activation`: phi; `activation_name`; `depth` (hidden layers); `p` = sum p_l,
    `d` = sum d_l; `W` (p, d): the block diagonal of the layers' W^(l); `frozen`: the arrays in no
    layer's neurons (a hidden pair's output bias: that pair's constant C).

    **Raises:** `NeuronError` (a `ValueError`) for a depth outside (2, 3), Linear layers that do
    not chain, or a module whose output is not the chain with one of the tried activations.
    """

    def __init__(
        self,
        module: Any,
        neurons: str = "auto",
        *,
        width: int | None = None,
        apply: Callable | None = None,
        W0: Any = None,
        groups: Any = None,
    ):
        require_x64()
        if width is not None or groups is not None or W0 is not None:
            raise TypeError("`width`, `groups` and `W0` are for one layer's neurons; a deep chain has none of them.")
        if apply is not None and not callable(apply):
            raise TypeError(f"`apply` must be a callable apply(module, x); found {type(apply).__name__}.")
        chain = _chain_layers(module)
        if chain is None:  # not reachable through Network(...): `is_deep` decided
            raise NeuronError("`module` is not a chain of 3 or 4 Linear layers.")
        linears, mlp = chain
        self._function = False
        self.module = _float64(module)
        self._apply = (lambda mod, x: mod(x)) if apply is None else apply
        self._params, self._call, self._rebuild = _split(self.module, self._apply)
        self._leaves, self._treedef = jax.tree_util.tree_flatten(self._params)
        self.linears = tuple(p for p, _ in linears)
        self._kinds_lin = tuple(k for _, k in linears)
        self.depth = len(linears) - 1
        cuts: list[tuple] = [(0, 1), (2, 3)] if len(linears) == 4 else [(0, 1), (2,)]
        if len(linears) == 4 and getattr(_get(self.module, self.linears[3]), "bias", None) is not None:
            cuts.append(("bias", 3))  # the final bias: its own one-neuron layer h + b (trained, not frozen)
        self.kinds = tuple("bias" if c[0] == "bias" else "pair" if len(c) == 2 else "readout" for c in cuts)
        self._cuts = tuple(cuts)
        self.layers = tuple(self._layer_network(c) for c in cuts)
        self._base = self._params  # the parameters the pairs are evaluated in: the final bias zeroed
        if self.kinds[-1] == "bias":
            self._base = self.layers[-1].with_params_W(self._params, jnp.zeros((self.layers[-1].p, 1)))
        self.activation_name, self.activation = self._find_activation(module, mlp)
        ps = [lay.p for lay in self.layers]
        ds = [lay.d for lay in self.layers]
        self._row0 = tuple(int(v) for v in np.cumsum([0] + ps))
        self._col0 = tuple(int(v) for v in np.cumsum([0] + ds))
        self.p, self.d = int(sum(ps)), int(sum(ds))
        self.groups = tuple(ps)
        self.group_names = tuple(f"layer {l + 1}" for l in range(len(self.layers)))
        used = {s.index for lay in self.layers for s in lay._slots}
        paths = jax.tree_util.tree_flatten_with_path(self._params)[0]
        self.frozen = tuple(_path_name(kp) for i, (kp, _) in enumerate(paths) if i not in used)
        self._frozen_shapes = tuple(np.shape(leaf) for i, (_, leaf) in enumerate(paths) if i not in used)
        self._slots = [s for lay in self.layers for s in lay._slots]
        self.layout = (
            f"a depth-{self.depth} chain of Linear layers ({self.activation_name}) as a {len(self.layers)}-layer NQF: "
            + "; ".join(f"layer {l + 1} ({k}) {lay.layout}" for l, (k, lay) in enumerate(zip(self.kinds, self.layers)))
        )

    # -- construction ------------------------------------------------------------------------------
    def _weight_spec(self, j: int, role: str) -> list[tuple[str, int]]:
        """Neuron arrays of Linear layer j: role "out" (its output units), "in" (its inputs), "all"."""
        path, kind = self.linears[j], self._kinds_lin[j]
        lay = _get(self.module, path)
        eqx_kind = kind.startswith("eqx")
        w = _join(path, "weight" if eqx_kind else "kernel")
        b = _join(path, "bias") if getattr(lay, "bias", None) is not None else None
        if role == "in":
            return [(w, 1 if eqx_kind else -2)]
        spec = [(w, 0 if eqx_kind else -1)] if role == "out" else [(w, 0 if eqx_kind else 0)]
        return spec + ([(b, 0)] if b is not None else [])

    def _layer_network(self, cut) -> Network:
        if cut[0] == "bias":
            return Network(self.module, neurons=[(_join(self.linears[cut[1]], "bias"), 0)], width=1, apply=self._apply)
        if len(cut) == 2:
            spec = self._weight_spec(cut[0], "out") + self._weight_spec(cut[1], "in")
            return Network(self.module, neurons=spec, apply=self._apply)
        return Network(self.module, neurons=self._weight_spec(cut[0], "all"), width=1, apply=self._apply)

    def _find_activation(self, module, mlp) -> tuple[str, Callable]:
        """The activation phi for which the module's output is the chain, on a random input and at
        the module's weights scaled so that the pre-activations are O(1).

        **Raises:** `NeuronError` if no candidate reproduces the module."""
        n_in = _io(self._kinds_lin[0], _get(self.module, self.linears[0]))[0]
        x = jnp.asarray(np.random.default_rng(0).standard_normal(n_in))
        if mlp is not None:
            fa = mlp.final_activation
            z = jnp.linspace(-2.0, 2.0, 7)
            if not np.allclose(np.asarray(jax.vmap(fa)(z)), np.asarray(z), rtol=0, atol=1e-12):
                raise NeuronError(
                    "`module`: the eqx.nn.MLP has a final activation that is not the identity; the multi-layer NQF "
                    "path needs a linear readout (final_activation=lambda z: z)."
                )
        try:
            want = np.asarray(self._call(self._params, x))
        except Exception as err:  # the user's module on one input of the chain's input size
            raise NeuronError(f"`module` cannot be called on one input of size {n_in}: {err}") from err
        for name, phi in _candidates(module, mlp):
            got = np.asarray(self._chain(self._params, x, phi))
            if got.shape == want.shape and np.allclose(
                got, want, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(want).max())
            ):
                return name, phi
        raise NeuronError(
            f"`module`: its Linear layers chain ({' -> '.join(self.linears)}), but its output is not "
            "L_n(phi(... phi(L_1 x))) for one pointwise phi among the MLP's / module's `activation`, tanh, gelu, "
            "sin, silu, sigmoid, softplus, relu, elu, identity (found output "
            f"{shape_str(np.shape(want))}). Give the module an `activation` attribute, or name one layer's neurons "
            "with `neurons=`."
        )

    def _chain(self, params, x, phi):
        mod = self._rebuild(params)
        z = x
        for j, (path, kind) in enumerate(zip(self.linears, self._kinds_lin)):
            z = _call_linear(kind, _get(mod, path), phi(z) if j else z)
        return z

    # -- the NQF layers' sub-modules -------------------------------------------------------------------
    def layer_output(self, l: int, W: Float[ArrayLike, "p d_prime"], h: Float[Array, " n"]) -> Float[Array, " D"]:
        """NQF layer l's output for one input h (the previous NQF layer's output, or x for l = 0)
        with its neurons W (p_l, d') (any width d'): the module's own Linear layers of that layer,
        the activation phi before them (l >= 1) and between them (a pair); traceable."""
        lay = self.layers[l]
        mod = self._rebuild(lay.with_params_W(self._base, W))
        cut = self._cuts[l]
        if cut[0] == "bias":  # h + b: no activation
            return h + jnp.asarray(_get(mod, self.linears[cut[1]]).bias[...])
        z = h if l == 0 else self.activation(h)
        z = _call_linear(self._kinds_lin[cut[0]], _get(mod, self.linears[cut[0]]), z)
        if len(cut) == 2:
            z = _call_linear(self._kinds_lin[cut[1]], _get(mod, self.linears[cut[1]]), self.activation(z))
        return z

    def layer_inputs(self, params: PyTree[Array], x: Float[Array, " n"]) -> list[Float[Array, " D"]]:
        """Every NQF layer's exact output h^(l) for one input x at the module's parameters `params`."""
        hs, h = [], x
        for l, lay in enumerate(self.layers):
            h = self.layer_output(l, lay.to_W(params), h)
            hs.append(h)
        return hs

    def layer_W(self, W: Float[ArrayLike, "p d"]) -> list[Float[Array, "p_l d_l"]]:
        """The layers' W^(l) (p_l, d_l): the diagonal blocks of W (p, d)."""
        W = jnp.asarray(W)
        return [W[r0:r1, c0:c1] for r0, r1, c0, c1 in zip(self._row0, self._row0[1:], self._col0, self._col0[1:])]

    # -- the block-diagonal layout ------------------------------------------------------------------------
    def to_W(self, params: PyTree[Array] | None = None) -> Float[Array, "p d"]:
        """The block diagonal diag(W^(1), ..., W^(L)) (p, d) of `params` (default: the module's)."""
        params = self._params if params is None else params
        return jax.scipy.linalg.block_diag(*[lay.to_W(params) for lay in self.layers])

    def with_params_W(self, params: PyTree[Array], W: Float[ArrayLike, "p d"]) -> PyTree[Array]:
        """`params` with every layer's neurons replaced from the diagonal blocks of W (p, d) (the
        off-diagonal blocks are not read)."""
        self._check_W(W)
        for lay, Wl in zip(self.layers, self.layer_W(W)):
            params = lay.with_params_W(params, Wl)
        return params

    def with_W(self, W: Float[ArrayLike, "p d"]) -> Any:
        return self._rebuild(self.with_params_W(self._params, W))

    def __call__(self, W: Float[ArrayLike, "p d"], x: PyTree[ArrayLike]) -> Float[Array, "*k"]:
        return self._call(self.with_params_W(self._params, W), x)

    def neuron_mask(self) -> PyTree[bool]:
        used = {s.index for s in self._slots}
        return jax.tree_util.tree_unflatten(self._treedef, [i in used for i in range(len(self._leaves))])

    def _check_W(self, W):
        shape = jnp.shape(W)
        if tuple(shape) != (self.p, self.d):
            raise ValueError(
                f"`W` of a deep network must have shape (p, d) = ({self.p}, {self.d}) (the block diagonal of the "
                f"layers' W^(l), shapes {[(lay.p, lay.d) for lay in self.layers]}); found {shape_str(shape)}."
            )
        return jnp.asarray(W, dtype=jnp.float64)

    def _check_widths(self, x0) -> None:
        """Every NQF layer's sub-module runs at widths 1 and 2 (a readout: 1), where its structure
        is derived and checked."""
        h = jax.ShapeDtypeStruct(jnp.shape(x0), jnp.float64)
        for l, lay in enumerate(self.layers):
            for width in (1, 2) if self.kinds[l] == "pair" else (1,):  # a readout is one neuron
                W = jax.ShapeDtypeStruct((lay.p, width), jnp.float64)
                try:
                    jax.eval_shape(lambda W, h, l=l: self.layer_output(l, W, h), W, h)
                except Exception as err:  # the user's layers at another width
                    raise NeuronError(
                        f"NQF layer {l + 1} of the module cannot run with {width} neurons: "
                        f"({type(err).__name__}: {str(err)[:200]})"
                    ) from err
            h = jax.eval_shape(lambda h, l=l, lay=lay: self.layer_output(l, lay.to_W(), h), h)

    def __repr__(self) -> str:
        return (
            f"DeepNetwork(depth={self.depth}, layers={[(k, lay.p, lay.d) for k, lay in zip(self.kinds, self.layers)]}, "
            f"activation={self.activation_name}, frozen={list(self.frozen)})"
        )


_DEEP_CHAIN.append((is_deep, DeepNetwork))  # `Network(module)` returns a DeepNetwork for a deep chain
