"""The neural tangent kernel of an NQF in the order parameters (Proposition 8, THEORY Eq. E25).

For f_x(W) = f0(x) + g(x)^T mu + mu^T B(x) mu + Tr[M A(x)] (Eq. E2, `nqf.NQFModel`'s convention)
the weight gradient is grad_W f_x = u(x) 1^T + 2 A(x) W with u(x) = g(x) + 2 B(x) mu (Eq. E4), so

    Theta(x, x') = <grad_W f_x, grad_W f_x'>_F
                 = d u(x)^T u(x') + 2 u(x)^T A(x') mu + 2 mu^T A(x) u(x') + 4 Tr(A(x) A(x') M)   (E25)

depends on W only through (M, mu) and the width d.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core._checks import as_array, check_psd, check_symmetric, check_width, is_traced
from ..data._model import NQFModel
from ..data._operators import AbstractData

__all__ = ["ntk"]

# Columns b of Theta computed together (vectorized) bound the intermediates A'_b [M | mu], of
# (chunk, p, p + 1) elements, and the data set's own per-sample work inside `apply`, about
# (chunk, m2, p + 1) elements for low-rank data: chunk * (p + 1) * max(p, m2) <= _CHUNK_ELEMENTS.
_CHUNK_ELEMENTS = 2**22


def _as_model(obj, name: str) -> NQFModel:
    if isinstance(obj, NQFModel):
        return obj
    if isinstance(obj, AbstractData):
        return NQFModel(obj)
    raise TypeError(f"`{name}` must be an `NQFModel` or an nqf data set; found {type(obj).__name__}.")


@eqx.filter_jit
def _ntk(model1: NQFModel, model2: NQFModel, M, mu, d, chunk: int):
    p = M.shape[0]
    U1 = model1.u(mu)  # (m1, p)
    U2 = model2.u(mu)  # (m2, p)
    Mmu = jnp.concatenate([M, mu[:, None]], axis=1)  # (p, p + 1)
    eye2 = jnp.eye(model2.m)

    def column(b):
        # A'_b [M | mu] through the data set's own `apply` with one-hot weights (no (m, p, p)).
        AM = model2.data.apply(eye2[b], Mmu)
        A2M, A2mu = AM[:, :p], AM[:, p]
        # 2 mu^T A_a u'_b + 4 Tr(A_a A'_b M) = Tr[A_a (2 u'_b mu^T + 4 A'_b M)]  (A_a symmetric)
        t34 = model1.data.traces(2.0 * jnp.outer(U2[b], mu) + 4.0 * A2M)
        return t34 + 2.0 * U1 @ A2mu  # (m1,)

    cols = jax.lax.map(column, jnp.arange(model2.m), batch_size=chunk)  # (m2, m1)
    return d * U1 @ U2.T + cols.T


def ntk(
    model_x: NQFModel | AbstractData,
    model_xp: NQFModel | AbstractData | None = None,
    *,
    M: Float[ArrayLike, "p p"],
    mu: Float[ArrayLike, " p"],
    d: int,
) -> Float[Array, "m1 m2"]:
    """The NTK Theta(x, x') of Proposition 8 (THEORY Eq. E25) for all pairs of inputs.

        Theta(x, x') = d u(x)^T u(x') + 2 u(x)^T A(x') mu + 2 mu^T A(x) u(x')
                       + 4 Tr(A(x) A(x') M),        u(x) = g(x) + 2 B(x) mu,

    equal to grad_W f_x . grad_W f_x' (Frobenius) at any W (p, d) with W W^T = M and W 1 = mu,
    for the model f_x = f0 + g^T mu + mu^T B mu + Tr[M A] (B convention of `nqf.NQFModel`).

    **Arguments:**

    - `model_x`: the inputs x: an `NQFModel` or a bare data set (g = B = 0), m1 inputs.
    - `model_xp`: the inputs x' (default: `model_x`), m2 inputs, same p.
    - `M`: order parameter M = W W^T, shape (p, p), symmetric.
    - `mu`: order parameter mu = W 1, shape (p,).
    - `d`: width (number of neurons), an integer >= 1.

    Labels and f0 do not enter. The data sets are used only through `apply` and `traces`: column b
    of Theta needs A'_b [M | mu] (one-hot weights in `model_xp.data.apply`) and one call of
    `model_x.data.traces`. Columns are computed in chunks of bounded memory (about 2^22
    elements), so the data tensor (m, p, p) is never formed for structured data; the cost is about
    m2 * (cost of `apply` + cost of `traces`).

    **Returns:** Theta, shape (m1, m2), float64.

    **Raises:** `TypeError` if a model is neither an `NQFModel` nor a data set; `ValueError` if
    the two models have different p, `M` is not a finite symmetric positive semi-definite (p, p)
    array, `mu` is not a finite (p,) array, `d` is not an integer >= 1, or no W (p, d) realises
    (M, mu): M - mu mu^T / d must be PSD of rank <= d - 1 (as in `nqf.closed_sgd`; not checked
    for traced M, mu).
    """
    model1 = _as_model(model_x, "model_x")
    model2 = model1 if model_xp is None else _as_model(model_xp, "model_xp")
    p = model1.p
    if model2.p != p:
        raise ValueError(
            f"`model_x` and `model_xp` must have the same neuron dimension p; found p = {p} and p = {model2.p}."
        )
    M = as_array(M, "M", shape=(p, p))
    check_symmetric(M, "M")
    mu = as_array(mu, "mu", shape=(p,))
    d = check_width(d)
    if not (is_traced(M) or is_traced(mu)):  # (M, mu, d) must come from some W (p, d)
        from ..dynamics._maps import _check_realizable

        check_psd(M, "M")
        _check_realizable(np.asarray(M), np.asarray(mu), d, names=("M", "mu"))
    chunk = max(1, min(model2.m, _CHUNK_ELEMENTS // ((p + 1) * max(p, model2.m))))
    return _ntk(model1, model2, M, mu, jnp.asarray(d, dtype=jnp.float64), chunk)
