"""Compression of an NQF to few neurons (Theorem 3, Corollary 3; THEORY sec. 8, Eq. E24).

**The span and k_V.** For the general model f_x = f0(x) + g(x)^T mu + mu^T B(x) mu + Tr[M A(x)]
(Eq. E2, `nqf.NQFModel`'s convention) on the m training inputs,

    V = span U_x ( {g(x)} u Col A(x) u Col B(x) ),   k_V = dim V,

with V (p, k_V) an orthonormal basis (`data_span`). Every SGD update of mu and M lies in V
(v = sum l' (g + 2 B mu) and H = sum 2 l' A do), and the outputs see only V V^T mu and
V V^T M V V^T.

**Theorem 3** (`theorem3`). A width-d NQF with (M(0), mu(0)) and learning rate eta has the same
outputs on every training input at every SGD step as the width-d' = k_V + 1 NQF with

    A~ = (d'/d) A,  B~ = B,  g~ = g,  f0~ = f0,  eta~ = (d/d') eta,
    neurons w~_i = mu~(0)/d' + V L z_i,  mu~(0) = V V^T mu(0),
    L L^T = C_V = (d/d') (V^T M(0) V - V^T mu(0) mu(0)^T V / d),

z_i the columns of Z (k_V, d') with orthonormal rows and Z 1 = 0 (rows of a Helmert matrix).
Then mu~_t = V V^T mu_t and (d'/d) M~_t = V V^T M_t V V^T at every step. The same holds with
weight decay gamma if gamma~ = (d'/d) gamma, and with heavy-ball / Nesterov momentum beta (same
beta): every such update is linear in the gradients and weights (Corollary 2) and the rescaling
commutes with it. Adam is not covered (its update is not closed on (M, mu)).

**Corollary 3** (`corollary3`). For any 1 <= d' <= p keep the top d' - 1 eigenpairs
(lambda_k, q_k) of C = (d/d') (M(0) - mu(0) mu(0)^T / d): neurons mu(0)/d' + U z_i with
U U^T = sum_{k < d'} lambda_k q_k q_k^T (mu is not projected), A, B, g, eta rescaled as above.
With the scaled state s~ = ((d'/d) M~, mu~) (which follows the original's own update map, see
below) the error e_t = |(d'/d) M~_t - M_t|_F + |mu~_t - mu_t|_2 obeys Eq. E24:

    e_t <= sqrt(sum_{k >= d'} lambda_k^2) exp(eta L t),      t = number of SGD steps,

L a local Lipschitz constant of the update direction G (s_{t+1} = s_t + eta G_{B_t}(s_t)) in the
norm |(dM, dmu)| = |dM|_F + |dmu|_2. Two remarks, both checked numerically in the tests:

- e_0 = (d'/d) sqrt(sum_{k >= d'} lambda_k^2), not sqrt(sum lambda_k^2) as the paper's proof
  states (it drops the factor d'/d in E_M(0) = (d'/d)(C~ - C)), so E24 is loose by d/d' at
  t = 0 already. `Corollary3Bound.sharpened` is the bound the proof really gives:
  e_0 prod_{k < t} (1 + eta L_k) <= e_0 exp(eta L t).
- L (`lipschitz_along`): at every step k, L_k is the largest of the operator norm of the
  Jacobian of G_{B_k} (batch B_k) at s_k, at s~_k and at their midpoint, and of the realized
  secant ratio |G(s~_k) - G(s_k)| / |s~_k - s_k|; E24 uses L = max_k L_k over the horizon. The
  operator norm in the sum norm is bounded by max(|J_MM| + |J_muM|, |J_Mmu| + |J_mumu|) of the
  blocks' spectral norms, with M restricted to symmetric matrices (Frobenius-orthonormal
  coordinates). This is an estimate along the trajectory (sampled points of each segment), not
  a certified global constant.

Why (d'/d) M~ follows the original map: with A~ = (d'/d) A and eta~ = (d/d') eta, H~ = (d'/d) H,
v~ = v (same outputs), and E5-E6 of the compressed model multiplied by d'/d are E5-E6 of the
original evaluated at ((d'/d) M~, mu~) (THEORY sec. 8).

Time: the discrete maps count SGD steps n; gradient-flow time is t = eta * n of the ORIGINAL
model (the compressed model's eta~ n is d/d' times larger, but it is the same trajectory).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from .._core._checks import as_array, check_positive, check_width, keyword_options
from ..data._model import NQFModel, as_model
from ..data._operators import AbstractData
from ..data._span import DEFAULT_RTOL, Span, data_span, helmert_rows, k_V, span_from_rows
from ..dynamics._batches import batch_weights, restrict
from ..dynamics._losses import PerSampleLoss, as_loss
from ..dynamics._maps import _initial_order_params, gradient_terms
from ..dynamics._train_args import check_lr, check_weight_decay

__all__ = [
    "DEFAULT_RTOL",
    "Span",
    "data_span",
    "k_V",
    "span_from_rows",
    "Compression",
    "theorem3",
    "corollary3",
    "compress",
    "scale_data",
    "helmert_rows",
    "compression_error",
    "lipschitz_along",
    "Corollary3Bound",
    "corollary3_bound",
    "compression_report",
]


# --------------------------------------------------------------------------------------------
# constructions
# --------------------------------------------------------------------------------------------


def scale_data(data: AbstractData, c: float) -> AbstractData:
    """The data set with every A_mu multiplied by c, in the same representation (labels kept;
    `AbstractData.scaled`)."""
    return data.scaled(float(c))


@dataclasses.dataclass(frozen=True, eq=False)
class Compression:
    """A compressed NQF (Theorem 3 or Corollary 3): an ordinary model plus its initial weights
    and hyper-parameters, trainable with `nqf.closed_sgd` / `nqf.train_w` as usual.

    **Attributes:**

    - `model`: the compressed `NQFModel` (A~ = (d'/d) A; g, B, f0, labels unchanged).
    - `W0`: initial neurons, shape (p, d'); `M0` = W0 W0^T (p, p); `mu0` = W0 1 (p,).
    - `d`, `d_prime`: original and compressed widths; `scale` = d'/d.
    - `lr` = (d/d') lr_original; `weight_decay` = (d'/d) weight_decay_original (momentum is
      unchanged); `lr_original`, `weight_decay_original`.
    - `kind`: ``"theorem3"`` (exact) or ``"corollary3"`` (truncated).
    - `span`: the `Span` V (Theorem 3; None for Corollary 3).
    - `eigenvalues`: Corollary 3's lambda_1 >= ... >= lambda_p of C = (d/d')(M0 - mu0 mu0^T/d)
      (None for Theorem 3).
    - `tail`: sqrt(sum_{k >= d'} lambda_k^2), E24's prefactor (0.0 for Theorem 3).

    `lift(M~, mu~)` maps compressed order parameters (any leading axes) to the scale of the
    original, ((d'/d) M~, mu~), to compare with (M, mu) (Theorem 3: = (V V^T M V V^T, V V^T mu)).
    """

    model: NQFModel
    W0: Float[np.ndarray, "p d_prime"]
    M0: Float[np.ndarray, "p p"]
    mu0: Float[np.ndarray, " p"]
    d: int
    d_prime: int
    lr: float
    weight_decay: float
    lr_original: float
    weight_decay_original: float
    kind: str
    span: Span | None
    eigenvalues: Float[np.ndarray, " p"] | None
    tail: float

    @property
    def scale(self) -> float:
        return self.d_prime / self.d

    def lift(
        self, M: Float[ArrayLike, "*batch p p"], mu: Float[ArrayLike, "*batch p"] | None
    ) -> tuple[Float[np.ndarray, "*batch p p"], Float[np.ndarray, "*batch p"] | None]:
        return self.scale * np.asarray(M), None if mu is None else np.asarray(mu)


def _compressed_model(model: NQFModel, c: float) -> NQFModel:
    return NQFModel(scale_data(model.data, c), g=model.g, B=model.B, f0=model.f0)


def _setup(model, W0, M0, mu0, d, lr, weight_decay):
    model = as_model(model)
    lr = check_lr(lr)
    gamma = check_weight_decay(weight_decay)
    M0, mu0, d, L0 = _initial_order_params(model, M0, mu0, d, W0)
    if d is None:
        raise ValueError(
            "Compression needs the original width: give `W0` (p, d), or `M0` with `d` "
            "(and `mu0` when the model has g or B)."
        )
    return model, lr, gamma, np.asarray(M0), None if mu0 is None else np.asarray(mu0), d, np.asarray(L0)


def _check_d_prime(d_prime, lo: int, hi: int | None, what: str) -> int:
    if isinstance(d_prime, (bool, np.bool_)) or not isinstance(d_prime, (int, np.integer)):
        raise ValueError(f"`d_prime` must be an integer; found {d_prime!r}.")
    d_prime = int(d_prime)
    if d_prime < lo or (hi is not None and d_prime > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"`d_prime` must be {rng} ({what}); found {d_prime}.")
    return d_prime


def theorem3(
    model: NQFModel | AbstractData,
    *,
    lr: float,
    W0: Float[ArrayLike, "p d"] | None = None,
    M0: Float[ArrayLike, "p p"] | None = None,
    mu0: Float[ArrayLike, " p"] | None = None,
    d: int | None = None,
    d_prime: int | None = None,
    weight_decay: float = 0.0,
    rtol: float = DEFAULT_RTOL,
    span: Span | None = None,
) -> Compression:
    """Theorem 3: the exact width-(k_V + 1) NQF of a width-d NQF (module docstring).

    **Arguments:**

    - `model`: an `nqf.NQFModel` (g, B, f0 optional) or a data set (plain model).
    - Initial condition: `W0` (p, d), or `M0` (p, p), `mu0` (p,) and `d`. For a plain model
      (g = B = 0) `mu0` may be omitted (mu does not affect outputs; mu~ = 0 is used then).
    - `lr`: the original learning rate eta > 0 (steps n correspond to flow time eta n).
    - `d_prime`: compressed width, default k_V + 1; any value >= k_V + 1 works.
    - `weight_decay`: the original gamma >= 0 (the compressed one is (d'/d) gamma).
    - `rtol`: rank tolerance of `data_span`; or give a precomputed `span`.

    **Returns:** a `Compression` (model with A scaled by d'/d, W0 (p, d'), lr (d/d') eta, ...).
    Train it with the same batches (same `batch_size`/`key` or `batch_indices`): its outputs
    equal the original's at every step, and `lift` of its (M~, mu~) equals
    (V V^T M V V^T, V V^T mu) of the original.

    **Raises:** `ValueError` for a `d_prime` below k_V + 1 (use `corollary3`), bad shapes or an
    initial condition not realizable with d neurons (as `nqf.closed_sgd`), lr <= 0.
    """
    model, lr, gamma, M0, mu0, d, L0 = _setup(model, W0, M0, mu0, d, lr, weight_decay)
    if span is None:
        span = data_span(model, rtol=rtol)
    elif not isinstance(span, Span) or span.V.shape[0] != model.p:
        raise ValueError(f"`span` must be a `Span` with V of shape ({model.p}, k); found {span!r}.")
    k = span.k
    if d_prime is None:
        d_prime = k + 1
    d_prime = _check_d_prime(
        d_prime, k + 1, None, f"Theorem 3 needs d' >= k_V + 1 = {k + 1}; use `corollary3` below that"
    )
    V = span.V
    c = d / d_prime
    # L L^T = C_V = (d/d') V^T (M0 - mu0 mu0^T/d) V, from the centered factor L0 (L0 L0^T = C0).
    B = (V.T @ L0).T  # (p, k)
    Lk = np.zeros((k, k))
    if k:
        r = np.linalg.qr(B, mode="r")  # (min(p, k), k)
        Lk[:, : r.shape[0]] = math.sqrt(c) * r.T
    mu_t = np.zeros(model.p) if mu0 is None else V @ (V.T @ mu0)
    Wt = mu_t[:, None] / d_prime + V @ Lk @ helmert_rows(k, d_prime)
    return Compression(
        model=_compressed_model(model, 1.0 / c),
        W0=Wt,
        M0=Wt @ Wt.T,
        mu0=Wt.sum(axis=1),
        d=d,
        d_prime=d_prime,
        lr=c * lr,
        weight_decay=gamma / c,
        lr_original=lr,
        weight_decay_original=gamma,
        kind="theorem3",
        span=span,
        eigenvalues=None,
        tail=0.0,
    )


def corollary3(
    model: NQFModel | AbstractData,
    *,
    lr: float,
    d_prime: int,
    W0: Float[ArrayLike, "p d"] | None = None,
    M0: Float[ArrayLike, "p p"] | None = None,
    mu0: Float[ArrayLike, " p"] | None = None,
    d: int | None = None,
    weight_decay: float = 0.0,
) -> Compression:
    """Corollary 3: compression to any width 1 <= d' <= p by keeping the top d' - 1 eigenpairs of
    C = (d/d') (M(0) - mu(0) mu(0)^T / d) (module docstring; error bound `corollary3_bound`).

    The eigenpairs come from the SVD of the centered factor L0 (L0 L0^T = M0 - mu0 mu0^T/d; from
    a QR of the centered W0 when W0 is given), so small eigenvalues keep their relative accuracy.
    mu~(0) = mu(0) (not projected); for a plain model without `mu0`, mu~(0) = 0 and C uses M0.

    **Arguments:** as `theorem3`, with `d_prime` required.

    **Returns:** a `Compression` with `eigenvalues` (p,) and `tail` = sqrt(sum_{k >= d'}
    lambda_k^2).

    **Raises:** `ValueError` for `d_prime` outside [1, p], and as `theorem3`.
    """
    model, lr, gamma, M0, mu0, d, L0 = _setup(model, W0, M0, mu0, d, lr, weight_decay)
    p = model.p
    d_prime = _check_d_prime(d_prime, 1, p, f"Corollary 3 compresses to 1 <= d' <= p = {p}")
    c = d / d_prime
    Q, S, _ = np.linalg.svd(L0)
    lam = c * S**2  # eigenvalues of C, descending
    keep = d_prime - 1
    U = math.sqrt(c) * Q[:, :keep] * S[:keep]
    mu_t = np.zeros(p) if mu0 is None else mu0
    Wt = mu_t[:, None] / d_prime + U @ helmert_rows(keep, d_prime)
    return Compression(
        model=_compressed_model(model, 1.0 / c),
        W0=Wt,
        M0=Wt @ Wt.T,
        mu0=Wt.sum(axis=1),
        d=d,
        d_prime=d_prime,
        lr=c * lr,
        weight_decay=gamma / c,
        lr_original=lr,
        weight_decay_original=gamma,
        kind="corollary3",
        span=None,
        eigenvalues=lam,
        tail=float(np.sqrt(np.sum(lam[keep:] ** 2))),
    )


def compress(
    model: NQFModel | AbstractData, *, lr: float, d_prime: int | None = None, rtol: float = DEFAULT_RTOL, **init: Any
) -> Compression:
    """Theorem 3 if `d_prime` is None or >= k_V + 1, else Corollary 3 (`theorem3`,
    `corollary3`; `init`: W0, or M0, mu0, d; weight_decay)."""
    span = data_span(model, rtol=rtol)
    if d_prime is None or d_prime >= span.k + 1:
        return theorem3(model, lr=lr, d_prime=d_prime, span=span, **init)
    return corollary3(model, lr=lr, d_prime=d_prime, **init)


# --------------------------------------------------------------------------------------------
# error, Lipschitz constant, bound (Eq. E24)
# --------------------------------------------------------------------------------------------
def compression_error(
    M: Float[ArrayLike, "n p p"],
    mu: Float[ArrayLike, "n p"] | None,
    M_c: Float[ArrayLike, "n p p"],
    mu_c: Float[ArrayLike, "n p"] | None,
    scale: float,
) -> Float[np.ndarray, " n"]:
    """e_t = |scale * M~_t - M_t|_F + |mu~_t - mu_t|_2 for stacks M, M_c (n, p, p), mu, mu_c
    (n, p) (mu terms dropped if either is None); shape (n,). scale = d'/d (Corollary 3)."""
    M, M_c = np.asarray(M), np.asarray(M_c)
    e = np.linalg.norm((scale * M_c - M).reshape(M.shape[0], -1), axis=1)
    if mu is not None and mu_c is not None:
        e = e + np.linalg.norm(np.asarray(mu_c) - np.asarray(mu), axis=1)
    return e


def _sym_coords(p: int):
    iu = np.triu_indices(p)
    w = np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))
    return iu, w


class _Direction(eqx.Module):
    """G(M, mu) = (Phi(M, mu) - (M, mu)) / eta for one batch: E5-E6 divided by eta."""

    model: NQFModel
    lr: jax.Array
    d: jax.Array
    gamma: jax.Array
    loss: object

    def __call__(self, sub, w, M, mu):
        v, H = gradient_terms(sub, w, self.loss, M, mu, self.gamma)
        HM, Hmu = H @ M, H @ mu
        vmu, vHmu = jnp.outer(v, mu), jnp.outer(v, Hmu)
        GM = -(vmu + vmu.T + HM + HM.T) + self.lr * (self.d * jnp.outer(v, v) + vHmu + vHmu.T + HM @ H)
        return 0.5 * (GM + GM.T), -(self.d * v + Hmu)


def _power_norm(fwd, bwd, n_in: int, n_iter: int, key):
    """sigma_max of a linear map given as (fwd, its transpose bwd) by n_iter power iterations on
    bwd o fwd from a random start (a lower estimate that converges to sigma_max)."""
    v = jax.random.normal(key, (n_in,))
    v = v / jnp.linalg.norm(v)

    def body(_, v):
        w = bwd(fwd(v))
        nw = jnp.linalg.norm(w)
        return jnp.where(nw > 0, w / jnp.where(nw > 0, nw, 1.0), v)

    v = jax.lax.fori_loop(0, n_iter, body, v)
    return jnp.linalg.norm(fwd(v))


@eqx.filter_jit
def _lipschitz_run(G: _Direction, Ma, mua, Mb, mub, idx, iu, w, method: str, n_iter: int):
    model = G.model
    m = model.m
    p = model.p
    iu0, iu1 = iu
    n_sym = iu0.shape[0]

    def batch(k):
        if idx is None:
            return model, jnp.full(m, 1.0 / m)
        rows = jax.lax.dynamic_index_in_dim(idx, k, keepdims=False)
        sub = restrict(model, rows)
        if sub is None:
            return model, batch_weights(rows, m)
        return sub, jnp.full(rows.shape[0], 1.0 / rows.shape[0])

    def to_M(c):
        U = jnp.zeros((p, p)).at[iu0, iu1].set(c / w)
        return U + jnp.triu(U, 1).T

    def coords(M):
        return M[iu0, iu1] * w

    def one(k):
        sub, wt = batch(k)
        eta = G.lr

        def F(c, mu):
            GM, Gmu = G(sub, wt, to_M(c), mu)
            return coords(GM), Gmu

        def combine(nMM, nMmu, nmuM, nmumu, nMM_phi, nmumu_phi):
            g = jnp.maximum(nMM + nmuM, nMmu + nmumu)
            phi = jnp.maximum(nMM_phi + eta * nmuM, eta * nMmu + nmumu_phi)
            return jnp.stack([g, phi])

        def opnorms_dense(M, mu):
            """Sum-norm operator bounds of dG and of dPhi = I + eta dG at (M, mu) (exact block
            spectral norms from the dense Jacobian)."""
            (JMM, JMmu), (JmuM, Jmumu) = jax.jacfwd(F, argnums=(0, 1))(coords(M), mu)
            n2 = lambda J: jnp.linalg.norm(J, ord=2)  # noqa: E731
            return combine(
                n2(JMM), n2(JMmu), n2(JmuM), n2(Jmumu), n2(jnp.eye(n_sym) + eta * JMM), n2(jnp.eye(p) + eta * Jmumu)
            )

        def opnorms_power(M, mu):
            """The same bounds with block norms by power iteration on jvp / transposed jvp."""
            x = (coords(M), mu)
            _, lin = jax.linearize(F, *x)
            lin_t = jax.linear_transpose(lin, *x)
            zM, zmu = jnp.zeros(n_sym), jnp.zeros(p)
            keys = jax.random.split(jax.random.fold_in(jax.random.key(0), k), 6)
            MM = (lambda v: lin(v, zmu)[0], lambda u: lin_t((u, zmu))[0])
            Mmu = (lambda v: lin(zM, v)[0], lambda u: lin_t((u, zmu))[1])
            muM = (lambda v: lin(v, zmu)[1], lambda u: lin_t((zM, u))[0])
            mumu = (lambda v: lin(zM, v)[1], lambda u: lin_t((zM, u))[1])

            def phi(block):
                f, b = block
                return (lambda v: v + eta * f(v), lambda u: u + eta * b(u))

            return combine(
                _power_norm(*MM, n_sym, n_iter, keys[0]),
                _power_norm(*Mmu, p, n_iter, keys[1]),
                _power_norm(*muM, n_sym, n_iter, keys[2]),
                _power_norm(*mumu, p, n_iter, keys[3]),
                _power_norm(*phi(MM), n_sym, n_iter, keys[4]),
                _power_norm(*phi(mumu), p, n_iter, keys[5]),
            )

        opnorms = opnorms_dense if method == "dense" else opnorms_power
        a = (Ma[k], mua[k])
        b = (Mb[k], mub[k])
        mid = (0.5 * (a[0] + b[0]), 0.5 * (a[1] + b[1]))
        jac = jnp.maximum(jnp.maximum(opnorms(*a), opnorms(*b)), opnorms(*mid))
        GaM, Gamu = G(sub, wt, *a)
        GbM, Gbmu = G(sub, wt, *b)
        num = jnp.linalg.norm(GbM - GaM) + jnp.linalg.norm(Gbmu - Gamu)
        den = jnp.linalg.norm(b[0] - a[0]) + jnp.linalg.norm(b[1] - a[1])
        ratio = jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)
        return jac[0], ratio, jac[1]

    return jax.lax.map(one, jnp.arange(Ma.shape[0]))


DENSE_JACOBIAN_MAX = 400
"""`lipschitz_along(method="auto")` uses dense Jacobians while p (p + 1) / 2 + p <= this."""


def lipschitz_along(
    model: NQFModel | AbstractData,
    *,
    lr: float,
    d: int,
    M: Float[ArrayLike, "n p p"],
    mu: Float[ArrayLike, "n p"] | None,
    M_c: Float[ArrayLike, "n p p"],
    mu_c: Float[ArrayLike, "n p"] | None,
    batch_indices: Int[ArrayLike, "n-1 b"] | None = None,
    loss: str | Callable[[Array, Array], Array] | PerSampleLoss | None = None,
    weight_decay: float = 0.0,
    method: str = "auto",
    n_iter: int = 50,
) -> dict[str, Any]:
    """Local Lipschitz estimates of the SGD update along two trajectories (E24's L).

    G_B(M, mu) = (Phi_B(M, mu) - (M, mu)) / eta, Phi_B the exact step E5-E6 of the width-d model
    on batch B (loss and weight decay as in `nqf.closed_sgd`). Norm: |(dM, dmu)| = |dM|_F +
    |dmu|_2, M over symmetric matrices (Frobenius-orthonormal coordinates); the operator norm of
    a block Jacobian is bounded by max(|J_MM| + |J_muM|, |J_Mmu| + |J_mumu|) (spectral norms).
    For every step k < n - 1, with batch row k of `batch_indices` (full batch if None):

    - `L[k]` (the estimate E24 uses): the largest operator norm of dG_{B_k} at s_k = (M_k, mu_k),
      at s~_k = (M_c[k], mu_c[k]) and at their midpoint;
    - `realized[k]` = |G(s~_k) - G(s_k)| / |s~_k - s_k|, the secant slope on the segment (a lower
      bound of the true local constant; `L[k] >= realized[k]` is the consistency check of the
      estimate; 0 where the states coincide);
    - `map_L[k]`: the same three-point estimate for the step map Phi = I + eta G (|I + eta dG|),
      which can be < 1 where the dynamics contracts (a sharper, still Jacobian-based, bound).

    Block spectral norms: ``method="dense"`` forms the (n, n) Jacobian, n = p (p + 1)/2 + p, by
    forward-mode autodiff and takes exact spectral norms (cost O(n) evaluations of G plus SVDs of
    n x n blocks per point); ``"power"`` runs `n_iter` power iterations per block on
    jvp / transposed-jvp products (cost O(n_iter) evaluations; each norm is a lower estimate that
    converges to the exact one); ``"auto"``: dense while n <= `DENSE_JACOBIAN_MAX`.

    **Arguments:** `model` (original, width `d`), `lr` = eta, stacks `M`, `M_c` (n, p, p) and
    `mu`, `mu_c` (n, p) saved at EVERY step 0..n-1 (the compressed one lifted to the original's
    scale, `Compression.lift`), `batch_indices` (>= n - 1, b) or None.

    **Returns:** dict with `L`, `realized`, `map_L`, each of shape (n - 1,).

    **Raises:** `ValueError` for inconsistent shapes.
    """
    model = as_model(model)
    lr = check_lr(lr)
    d = check_width(d)
    gamma = check_weight_decay(weight_decay)
    M, M_c = np.asarray(M, float), np.asarray(M_c, float)
    p = model.p
    if M.ndim != 3 or M.shape[1:] != (p, p) or M_c.shape != M.shape:
        raise ValueError(f"`M` and `M_c` must both have shape (n, {p}, {p}); found {M.shape} and {M_c.shape}.")
    n = M.shape[0]
    mu = np.zeros((n, p)) if mu is None else np.asarray(mu, float)
    mu_c = np.zeros((n, p)) if mu_c is None else np.asarray(mu_c, float)
    if mu.shape != (n, p) or mu_c.shape != (n, p):
        raise ValueError(f"`mu` and `mu_c` must have shape ({n}, {p}); found {mu.shape}, {mu_c.shape}.")
    idx = None
    if batch_indices is not None:
        idx = np.asarray(batch_indices)
        if idx.ndim != 2 or idx.shape[0] < n - 1:
            raise ValueError(f"`batch_indices` must have shape (>= {n - 1}, b) (one row per step); found {idx.shape}.")
        idx = jnp.asarray(idx[: n - 1], dtype=jnp.int32)
    f64 = lambda x: jnp.asarray(x, dtype=jnp.float64)  # noqa: E731
    G = _Direction(model, f64(lr), f64(d), f64(gamma), as_loss(loss))
    iu, w = _sym_coords(p)
    if method not in ("auto", "dense", "power"):
        raise ValueError(f"`method` must be 'auto', 'dense' or 'power'; found {method!r}.")
    if method == "auto":
        method = "dense" if iu[0].size + p <= DENSE_JACOBIAN_MAX else "power"
    if isinstance(n_iter, (bool, np.bool_)) or not isinstance(n_iter, (int, np.integer)) or n_iter < 1:
        raise ValueError(f"`n_iter` must be an integer >= 1; found {n_iter!r}.")
    sl = slice(0, n - 1)
    Lj, ratio, Lphi = _lipschitz_run(
        G,
        f64(M[sl]),
        f64(mu[sl]),
        f64(M_c[sl]),
        f64(mu_c[sl]),
        idx,
        (jnp.asarray(iu[0]), jnp.asarray(iu[1])),
        f64(w),
        method,
        int(n_iter),
    )
    return {"L": np.asarray(Lj), "realized": np.asarray(ratio), "map_L": np.asarray(Lphi)}


@dataclasses.dataclass(frozen=True)
class Corollary3Bound:
    """Eq. E24 evaluated along a trajectory (steps t = 0..n-1).

    **Attributes:**

    - `steps` (n,); `measured` e_t (n,); `lr`: eta of the original; `tail`; `e0` = measured[0].
    - `bound` = tail exp(eta L t), L = max_k L_k: E24 as stated (n,).
    - `sharpened` = e_0 prod_{k<t} (1 + eta L_k): what the proof gives (e_0 = (d'/d) tail
      exactly, and the per-step L_k instead of their max) (n,).
    - `stepwise` = e_0 prod_{k<t} map_L_k: the step map's own local constant (n,).
    - `L` = max_k L_k; `L_steps` (n - 1,); `map_L_steps` (n - 1,) or None.
    - `holds`, `holds_sharpened`, `holds_stepwise`: measured <= that bound at every step (to
      1e-12 relative rounding); `tightness(which)`: bound / measured (min, median, max, final)
      over the steps with measured > 0.
    """

    steps: np.ndarray
    measured: np.ndarray
    bound: np.ndarray
    sharpened: np.ndarray
    stepwise: np.ndarray | None
    L: float
    L_steps: np.ndarray
    map_L_steps: np.ndarray | None
    tail: float
    e0: float
    lr: float

    def _holds(self, b) -> bool:
        return bool(np.all(self.measured <= b * (1.0 + 1e-12)))

    @property
    def holds(self) -> bool:
        return self._holds(self.bound)

    @property
    def holds_sharpened(self) -> bool:
        return self._holds(self.sharpened)

    @property
    def holds_stepwise(self) -> bool:
        return self.stepwise is None or self._holds(self.stepwise)

    def tightness(self, which: str = "bound") -> dict:
        b = {"bound": self.bound, "sharpened": self.sharpened, "stepwise": self.stepwise}[which]
        ok = self.measured > 0
        with np.errstate(over="ignore"):
            r = b[ok] / self.measured[ok]
        if r.size == 0:
            return {"min": math.inf, "median": math.inf, "max": math.inf, "final": math.inf}
        return {"min": float(r.min()), "median": float(np.median(r)), "max": float(r.max()), "final": float(r[-1])}


def corollary3_bound(
    measured: Float[ArrayLike, " n"],
    L_steps: Float[ArrayLike, " n-1"],
    *,
    tail: float,
    lr: float,
    map_L_steps: Float[ArrayLike, " n-1"] | None = None,
) -> Corollary3Bound:
    """Evaluate E24 for a measured error trajectory e_0..e_{n-1} (one entry per SGD step) and
    per-step Lipschitz estimates L_0..L_{n-2} (`lipschitz_along`): bound_t = tail exp(lr L t)
    with L = max L_k (overflow gives inf); sharpened_t = e_0 prod_{k<t} (1 + lr L_k); with
    `map_L_steps`, stepwise_t = e_0 prod_{k<t} map_L_k.

    **Raises:** `ValueError` for an empty or negative `measured`, a negative or non-finite
    `tail`, `lr` <= 0, `L_steps` (or `map_L_steps`) of a shape other than (n - 1,) or negative."""
    tail = check_positive(tail, "tail", allow_zero=True)
    lr = check_positive(lr, "lr")
    e = np.asarray(as_array(measured, "measured", ndim=1))
    if e.size == 0 or np.any(e < 0):
        raise ValueError(
            "`measured` must be a non-empty 1-d array of errors >= 0 (one per step); found "
            + ("an empty array." if e.size == 0 else f"minimum {e.min():.3g}.")
        )
    Ls = np.asarray(as_array(L_steps, "L_steps", finite=False))
    if Ls.shape != (e.size - 1,):
        raise ValueError(f"`L_steps` must have shape ({e.size - 1},) (one per step); found {Ls.shape}.")
    if np.any(Ls < 0) or np.any(np.isnan(Ls)):
        raise ValueError(
            f"`L_steps` must be Lipschitz estimates >= 0; found minimum {np.nanmin(Ls, initial=np.nan):.3g}"
            + (" and NaN" if np.any(np.isnan(Ls)) else "")
            + "."
        )
    if map_L_steps is not None:
        mL = np.asarray(as_array(map_L_steps, "map_L_steps", finite=False))
        if mL.shape != Ls.shape or np.any(~(mL >= 0)):
            raise ValueError(f"`map_L_steps` must have shape {Ls.shape} and entries >= 0; found shape {mL.shape}.")
    steps = np.arange(e.size)
    L = float(Ls.max(initial=0.0))
    with np.errstate(over="ignore"):
        bound = tail * np.exp(lr * L * steps)
        sharp = e[0] * np.concatenate([[1.0], np.cumprod(1.0 + lr * Ls)])
        step = None
        if map_L_steps is not None:
            mL = np.asarray(map_L_steps, float)
            step = e[0] * np.concatenate([[1.0], np.cumprod(mL)])
    return Corollary3Bound(
        steps,
        e,
        bound,
        sharp,
        step,
        L,
        Ls,
        None if map_L_steps is None else np.asarray(map_L_steps, float),
        float(tail),
        float(e[0]),
        float(lr),
    )


def compression_report(
    model: NQFModel | AbstractData,
    *,
    lr: float,
    steps: int,
    W0: Float[ArrayLike, "p d"] | None = None,
    M0: Float[ArrayLike, "p p"] | None = None,
    mu0: Float[ArrayLike, " p"] | None = None,
    d: int | None = None,
    d_prime: int | None = None,
    rtol: float = DEFAULT_RTOL,
    **options,
) -> dict[str, Any]:
    """k_V, d' and the measured error / E24 bound of compressing a given model (library call
    behind ``nqf compress``).

    Trains the original (width d) and the compressed model (`compress`: Theorem 3 for d' >= k_V +
    1, default, else Corollary 3) with `nqf.closed_sgd` for `steps` SGD steps on the same batches,
    and reports, with t counted in steps (flow time lr * t):

    - ``k_V``, ``d``, ``d_prime``, ``kind``, ``span_singular_values``, ``span_gap``;
    - ``max_output_rel_error``: max_t max_x |f~ - f| / max_x |f| over the training inputs;
    - ``error``: e_t = |(d'/d) M~_t - M_t|_F + |mu~_t - mu_t| (Corollary 3) or the same against
      the projection (V V^T M V V^T, V V^T mu) (Theorem 3), max over steps;
    - Corollary 3 only: ``tail``, ``L``, ``bound_final``, ``holds`` (every step), ``tightness``
      (bound / measured: min, median, max, final), ``holds_sharpened``, ``tightness_sharpened``.

    **Arguments:** `lr`, `steps`, the initial condition (`W0`, or `M0`, `mu0`, `d`) as in
    `nqf.closed_sgd`; `d_prime` and `rtol` as in `compress`; keyword options (``**options``):
    batches `batch_size` (with `key`, default seed 0) or `batch_indices` (steps, b), and `loss`,
    as in `nqf.closed_sgd`.

    **Raises:** as `compress` and `nqf.closed_sgd`; `TypeError` for an unknown keyword.
    """
    from ..dynamics._batches import batch_indices as draw
    from ..dynamics._maps import closed_sgd

    batch_size, key, batch_indices, loss = keyword_options(
        "compression_report", options, batch_size=None, key=None, batch_indices=None, loss=None
    )
    model = as_model(model)
    if batch_indices is None and batch_size is not None:
        batch_indices = draw(0 if key is None else key, model.m, batch_size, steps)
        key = None
    init: dict[str, Any] = dict(W0=W0) if W0 is not None else dict(M0=M0, mu0=mu0, d=d)
    comp = compress(model, lr=lr, d_prime=d_prime, rtol=rtol, **init)
    kw: dict[str, Any] = dict(steps=steps, batch_indices=batch_indices, loss=loss)
    orig = closed_sgd(model, lr=lr, **({"W0": W0} if W0 is not None else init), **kw)
    small = closed_sgd(comp.model, lr=comp.lr, W0=comp.W0, **kw)
    Mc, muc = comp.lift(small.M, small.mu)
    ref_M, ref_mu = orig.M, orig.mu
    out = {
        "k_V": comp.span.k if comp.span is not None else data_span(model, rtol=rtol).k,
        "d": comp.d,
        "d_prime": comp.d_prime,
        "kind": comp.kind,
        "steps": steps,
        "lr": lr,
        "lr_compressed": comp.lr,
    }
    span = comp.span if comp.span is not None else data_span(model, rtol=rtol)
    out["span_singular_values"] = span.singular_values
    out["span_gap"] = span.gap
    out["max_output_rel_error"] = float(
        np.max(np.abs(small.outputs - orig.outputs).max(axis=1) / np.abs(orig.outputs).max(axis=1))
    )
    if comp.kind == "theorem3":
        P = span.V @ span.V.T
        ref_M = np.einsum("ij,njk,kl->nil", P, orig.M, P)
        ref_mu = None if orig.mu is None else orig.mu @ P
        e = compression_error(ref_M, ref_mu, small.M, muc, comp.scale)
        out["error"] = float(e.max())
        out["error_rel"] = float(e.max() / np.abs(ref_M).max())
        return out
    e = compression_error(ref_M, ref_mu, small.M, muc, comp.scale)
    lip = lipschitz_along(
        model, lr=lr, d=comp.d, M=ref_M, mu=ref_mu, M_c=Mc, mu_c=muc, batch_indices=batch_indices, loss=loss
    )
    b = corollary3_bound(e, lip["L"], tail=comp.tail, lr=lr, map_L_steps=lip["map_L"])
    out.update(
        error=float(e.max()),
        error_final=float(e[-1]),
        e0=b.e0,
        tail=comp.tail,
        L=b.L,
        bound_final=float(b.bound[-1]),
        holds=b.holds,
        tightness=b.tightness(),
        holds_sharpened=b.holds_sharpened,
        tightness_sharpened=b.tightness("sharpened"),
        holds_stepwise=b.holds_stepwise,
        tightness_stepwise=b.tightness("stepwise"),
        L_covers_realized=float(np.mean(lip["L"] >= lip["realized"] * (1 - 1e-12))),
    )
    return out
