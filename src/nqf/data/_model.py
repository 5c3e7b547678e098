"""The general NQF model with a linear and a mean-field term (THEORY Eq. E2, Theorem 12).

    f_x(W) = f0(x) + g(x)^T mu + mu^T B(x) mu + Tr[M A(x)],   mu = W 1,  M = W W^T.

**Convention for B.** This is the function of W written exactly as above: the term mu^T B mu
includes the i = j pairs, so the Hessian blocks at W = 0 are H_ii = 2 (A + B) and H_ij = 2 B
(i != j). A module whose Hessian has diagonal blocks 2 A_H and off-diagonal blocks 2 B therefore
has A = A_H - B here (the paper's "absorb -B into A"; THEORY sec. 1).

With g = B = 0 (the ZGZ case of Theorem 1) the model is the plain NQF f = f0 + Tr[M A(x)] and only
M matters; otherwise the dynamics close on (M, mu) (Theorem 2).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._core._checks import as_array, check_symmetric
from .._core.io import register
from ._operators import AbstractData

__all__ = ["NQFModel"]


@register  # nqf.save / nqf.load
class NQFModel(eqx.Module):
    """An NQF model on m training inputs: structure matrices, labels, and optional g, B, f0.

    **Arguments:**

    - `data`: the data set (A_mu and labels y_mu), any `AbstractData`.
    - `g`: linear coefficients g(x_mu), shape (m, p), or None (zero).
    - `B`: mean-field matrices B(x_mu), shape (m, p, p), symmetric, or None (zero).
    - `f0`: outputs at W = 0, shape (m,), or None (zero).

    **Raises:** `ValueError` on shapes inconsistent with `data` (m, p), non-finite values, or a
    non-symmetric `B`.
    """

    data: AbstractData
    g: Float[Array, "m p"] | None
    B: Float[Array, "m p p"] | None
    f0: Float[Array, " m"] | None

    def __init__(
        self,
        data: AbstractData,
        g: Float[ArrayLike, "m p"] | None = None,
        B: Float[ArrayLike, "m p p"] | None = None,
        f0: Float[ArrayLike, " m"] | None = None,
    ):
        if not isinstance(data, AbstractData):
            raise TypeError(f"`data` must be an nqf data set; found {type(data).__name__}.")
        m, p = data.m, data.p
        self.data = data
        self.g = None if g is None else as_array(g, "g", shape=(m, p))
        if B is not None:
            B = as_array(B, "B", shape=(m, p, p))
            check_symmetric(B, "B")
        self.B = B
        self.f0 = None if f0 is None else as_array(f0, "f0", shape=(m,))

    @property
    def m(self) -> int:
        return self.data.m

    @property
    def p(self) -> int:
        return self.data.p

    @property
    def y(self) -> Float[Array, " m"]:
        return self.data.y

    @property
    def has_mean_field(self) -> bool:
        """True if g or B is present, so that mu enters the dynamics."""
        return self.g is not None or self.B is not None

    def outputs(self, M: Float[Array, "p p"], mu: Float[Array, " p"]) -> Float[Array, " m"]:
        """f_x for every training input from the order parameters (M, mu) (Eq. E2), shape (m,)."""
        return self._add_mean_field(self.data.traces(M), mu)

    def outputs_factor(self, F: Float[Array, "p r"], mu: Float[Array, " p"]) -> Float[Array, " m"]:
        """f_x for every training input with M = F F^T given by a factor F (Eq. E2), shape (m,):
        the data's `traces_factor`, never forming M (the cost of the data structure)."""
        return self._add_mean_field(self.data.traces_factor(F), mu)

    def _add_mean_field(self, f, mu):
        if self.g is not None:
            f = f + self.g @ mu
        if self.B is not None:
            f = f + jnp.einsum("i,mij,j->m", mu, self.B, mu)
        if self.f0 is not None:
            f = f + self.f0
        return f

    def u(self, mu: Float[Array, " p"]) -> Float[Array, "m p"]:
        """u(x) = g(x) + 2 B(x) mu = d f_x / d mu, shape (m, p) (Eq. E4)."""
        u = jnp.zeros((self.m, self.p)) if self.g is None else self.g
        if self.B is not None:
            u = u + 2.0 * jnp.einsum("mij,j->mi", self.B, mu)
        return u


def as_model(model: NQFModel | AbstractData) -> NQFModel:
    """An `NQFModel`, wrapping a bare data set as the plain model (g = B = f0 = 0)."""
    if isinstance(model, NQFModel):
        return model
    if isinstance(model, AbstractData):
        return NQFModel(model)
    raise TypeError(f"`model` must be an `nqf.NQFModel` or an nqf data set; found {type(model).__name__}.")
