"""Fixed per-neuron constants (a frozen readout sign a_i): the lifted NQF of `nqf.Network(constants=)`.

A layer f(W, x) = f_0(x) + sum_i phi(w_i, c_i, x) whose neurons carry fixed constants c_i (not
trained: e.g. the readout signs a_i = +-1 of an MLP whose last layer is frozen, shape (d,)) is
symmetric only under the permutations that keep the c_i, so Theorem 1 does not apply to W as it
is when the c_i differ. Group the neurons by the K distinct values v_1, ..., v_K of c and *lift*
neuron i to K p0 rows, w~_i = e_{k(i)} (x) w_i: block k(i) (the block of its value c_i = v_k(i))
holds w_i, the other blocks 0. The lifted function of W~ (K p0, d') at any width d',

    f~(W~, x) = the module with K d' neurons: the columns of W~'s block k, each with c = v_k,

is symmetric under every permutation of the columns of W~ (a column's K blocks move together),
and f~(lift(W), x) = f(W, x) (the other blocks are zero neurons, which contribute phi(0, c, x) = 0).
Its NQF is the block diagonal A~(x) = blockdiag(A_{v_1}(x), ..., A_{v_K}(x)), A_v the structure
matrix of the module with every constant equal to v (v A when f is linear in c: signs give
blockdiag(A, -A)); no cross-block terms, since a column's blocks are different neurons of the
module. So f~ = f_0 + Tr[W~ W~^T A~] + O(|W~|^3) and M~ = W~ W~^T = blockdiag(M_1, ..., M_K),
M_k = sum over the neurons with c_i = v_k of w_i w_i^T.

**Training is unchanged.** The loss is the same function of W and of lift(W). The gradient of f~
in block k(i) of column i is the gradient of f in w_i (the same neuron of the module, with the
same constant), so one gradient step (or flow) of lr on W~ is the lift of the step of lr on W, at
the same time t = lr x steps, as long as the other blocks stay 0: their gradient is
grad_w phi(0, v_k, x) = g(x), zero under ZGZ, and momentum buffers and weight decay of a zero
block stay zero. In the NQF the gradient 2 A~ W~ is block diagonal and keeps the blocks exactly.

**What the lift needs.** ZGZ (g = 0, B = 0): with a linear term g(x) != 0 (e.g. an activation
z + z^2 behind a frozen readout: g = a_i x) the zero blocks would move with gradient v_k g(x) and
the lifted training would differ from the module's, so `nqf.extract` refuses it (naming
`constants`); and a zero neuron must contribute nothing (checked on one input by
`Network.check_inputs`). Linearity in c is *not* needed (each block is the module at its value).
Cost: p = K p0 rows, K the number of distinct values (2 for signs).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from .._core._checks import shape_str
from ._network import NeuronError, _columns, _place, _Slot, _slots, _tokens

__all__ = ["Lift", "resolve"]


@dataclasses.dataclass(frozen=True, eq=False)
class Lift:
    """The lift of a `Network` with `constants`: the constant arrays, their distinct values and
    the rows p0 of one neuron before the lift. `leaves` below are the flat parameter leaves of
    the module (any width n)."""

    slots: tuple[_Slot, ...]  # the constant arrays (one value or slice per neuron along their axis)
    values: np.ndarray  # (K, c): the distinct per-neuron values, in lexicographic order (np.unique)
    p0: int  # parameters per neuron before the lift

    @property
    def K(self) -> int:
        """The number of distinct values: the blocks of W~."""
        return int(self.values.shape[0])

    def masks(self, leaves) -> jax.Array:
        """(K, n) float: 1 where neuron i's constant is value k (traceable)."""
        c = _columns(leaves, self.slots)
        return jnp.all(c[None, :, :] == jnp.asarray(self.values)[:, None, :], axis=-1).astype(jnp.float64)

    def lift(self, W: jax.Array, leaves) -> jax.Array:
        """W (p0, n) of the module's neurons -> W~ (K p0, n): column i in the block of its value."""
        masks = self.masks(leaves)
        return jnp.concatenate([W * masks[k] for k in range(self.K)], axis=0)

    def unlift(self, Wt: jax.Array, leaves, fold_width: int | None) -> tuple[jax.Array, list]:
        """W~ (K p0, n) -> (W, leaves) for the module. At n = `fold_width` (the module's own d):
        the fold W = sum_k mask_k W~_k onto the module's neurons, constants as they are (exact
        for a lifted W~, `check`). Otherwise the wide module f~: W (p0, K n), the blocks' columns
        side by side, and the constant arrays of K n neurons, v_k for block k."""
        p0, n = self.p0, Wt.shape[1]
        if n == fold_width:
            masks = self.masks(leaves)
            return sum(Wt[k * p0 : (k + 1) * p0] * masks[k] for k in range(self.K)), list(leaves)
        W = jnp.concatenate([Wt[k * p0 : (k + 1) * p0] for k in range(self.K)], axis=1)
        consts = jnp.repeat(jnp.asarray(self.values), n, axis=0)
        return W, _place(leaves, self.slots, consts)

    def check(self, Wt: np.ndarray, leaves, name: str) -> None:
        """W~ (K p0, d) must be zero outside each column's block.

        **Raises:** `ValueError` naming `name` and `constants`."""
        masks = np.asarray(self.masks(leaves))
        off = np.concatenate([Wt[k * self.p0 : (k + 1) * self.p0] * (1.0 - masks[k]) for k in range(self.K)])
        if np.any(off != 0.0):
            col = int(np.flatnonzero(np.any(off != 0.0, axis=0))[0])
            raise ValueError(
                f"`{name}` {shape_str(Wt.shape)} is not a lifted W: with `constants` ({self.K} distinct values, "
                f"p = {self.K} x {self.p0}), column i holds neuron i in the row block of its constant's value and 0 "
                f"in the other blocks; column {col} has max |entry| {np.abs(off[:, col]).max():.3g} outside its "
                "block. Build it from the module's layout with `net.lift(W)` (W of shape (p0, d))."
            )


def resolve(params, module, constants, neuron_slots, d: int) -> Lift:
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


def constant_names(params, module, constants) -> set[tuple[str, ...]]:
    """The paths of the arrays `constants` names (as `_tokens`), to leave out of an automatic
    layout (``neurons="auto"`` of an MLP whose readout is declared constant)."""
    return {_tokens(s.name) for s in _slots(params, module, constants, None, False, arg="constants")[0]}


def value_label(values: np.ndarray, k: int) -> str:
    """'c=-1' for a scalar constant, 'c=value k' for a slice."""
    return f"c={values[k, 0]:g}" if values.shape[1] == 1 else f"c=value {k}"
