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

Also here: `_columns` / `_place`, the per-neuron slices of parameter arrays and their inverse
(`Network.to_W` / `with_params_W` use them; the constants are slices of the same kind).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .._core._checks import shape_str

__all__ = ["Lift"]


def _columns(leaves, slots) -> Array:
    """The per-neuron slices of the arrays `slots` in `leaves`, one row per neuron: (n, sum of sizes)."""
    cols = []
    for s in slots:
        a = jnp.moveaxis(jnp.asarray(leaves[s.index]), s.axis, 0)
        cols.append(a.reshape((a.shape[0] // s.pack, -1)))
    return jnp.concatenate(cols, axis=1)


def _place(leaves, slots, cols) -> list:
    """`leaves` with the arrays `slots` replaced from `cols` (n, sum of sizes), one row per neuron
    (any n; the inverse of `_columns`)."""
    leaves, n, start = list(leaves), cols.shape[0], 0
    for s in slots:
        block = cols[:, start : start + s.size].reshape((n * s.pack,) + s.other)
        leaves[s.index] = jnp.moveaxis(block, 0, s.axis).astype(jnp.result_type(leaves[s.index]))
        start += s.size
    return leaves


@dataclasses.dataclass(frozen=True, eq=False)
class Lift:
    """The lift of a `Network` with `constants`: the constant arrays, their distinct values and
    the rows p0 of one neuron before the lift. `leaves` below are the flat parameter leaves of
    the module (any width n)."""

    slots: tuple[
        Any, ...
    ]  # the constant arrays (`nqf.data._network._Slot`) (one value or slice per neuron along their axis)
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
            return jnp.einsum("kpn,kn->pn", Wt.reshape(self.K, p0, n), self.masks(leaves)), list(leaves)
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


def value_label(values: np.ndarray, k: int) -> str:
    """'c=-1' for a scalar constant, 'c=value k' for a slice."""
    return f"c={values[k, 0]:g}" if values.shape[1] == 1 else f"c=value {k}"
