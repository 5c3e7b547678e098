"""Vector fields of the MSE gradient flow on the order parameters (THEORY sec. 4-5).

Time is gradient-flow time: t = eta * (number of GD steps). Four exact forms:

- ``"M"``: M' = -(H M + M H), H = (4/m) sum_mu Delta_mu A_mu + gamma I (Eqs. E8-E9).
- ``"factor"``: F' = -H F with F F^T = M (exact, PSD by construction; W' = -H W is the factor
  form with F = W).
- ``"glv"`` (commuting data only): u = log z, u_k' = -(8/m) sum_mu lambda_{mu,k} Delta_mu - 2 gamma
  (Eq. E13 in log space, which keeps relative accuracy while z ~ eps). Modes with z_k(0) = 0 stay
  at zero and are masked.
  For `CommutingData` with m < p the stiff path integrates the same flow in m coordinates
  (`rhs_glv_reduced`): the integrated residuals G_mu = -(8/m) int Delta_mu, from which
  u = u0 + D_mask (Lambda^T G - 2 gamma t) exactly.
- ``"M-mu"`` (the general model f = f0 + g^T mu + mu^T B mu + Tr[M A], `nqf.NQFModel`): state
  (M, mu), mu' = -(d v + H mu), M' = -(v mu^T + mu v^T + H M + M H) (Eq. E10, Theorem 2 in the
  flow limit), v = sum_x l'_x u(x), H = sum_x 2 l'_x A(x) + gamma I, l'_x = (2/m)(f_x - y_x);
  for a model wrapped with another loss (`WithLoss`, `solve_flow(loss=...)`) l'_x =
  (1/m) ell'(f_x, y_x) (`PerSampleLoss.grad` on the m data rows: cross-entropy couples the k
  rows of an input), the only change.
  Cost per evaluation: the data's `traces` and one `apply` to p + 1 columns, plus two passes over
  the model's g (m, p) (G mu and v) and, with B, over B (m, p, p). A g of low rank r (e.g. the
  constant g = phi(0) [0; 1] of a bias-free MLP with phi(0) != 0) can be passed as factors
  (`FactoredG`, built by `factor_linear_term`): the g passes then cost O((m + p) r).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from .._core._checks import is_traced
from .._core.io import register
from ..data._model import NQFModel
from ..data._operators import AbstractCommutingData, AbstractData
from ._losses import _NAMED, PerSampleLoss

__all__ = [
    "FORMS",
    "RHS",
    "rhs_M",
    "rhs_factor",
    "rhs_glv",
    "rhs_glv_reduced",
    "jac_glv_reduced",
    "rhs_M_mu",
    "reduced_log_z",
    "glv_z",
    "check_form",
    "WithLoss",
]

FORMS = ("M", "factor", "glv", "M-mu")


def rhs_M(t: Float[ArrayLike, ""], M: Float[Array, "p p"], args: tuple[Any, ...]) -> Float[Array, "p p"]:
    data, gamma, _ = args
    H_M = data.apply(4.0 / data.m * data.residual(M), M) + gamma * M
    return -(H_M + H_M.T)


def rhs_factor(t: Float[ArrayLike, ""], F: Float[Array, "p r"], args: tuple[Any, ...]) -> Float[Array, "p r"]:
    data, gamma, _ = args
    delta = data.traces_factor(F) - data.y
    return -(data.apply(4.0 / data.m * delta, F) + gamma * F)


def glv_z(u: Float[Array, "*batch p"], mask: Bool[Array, " p"]) -> Float[Array, "*batch p"]:
    """z = exp(u) on live modes, 0 on masked (z(0) = 0) modes."""
    return jnp.where(mask, jnp.exp(jnp.where(mask, u, 0.0)), 0.0)


def rhs_glv(t: Float[ArrayLike, ""], u: Float[Array, " p"], args: tuple[Any, ...]) -> Float[Array, " p"]:
    data, gamma, mask = args
    delta = data.outputs_z(glv_z(u, mask)) - data.y
    du = -(8.0 / data.m) * data.pullback(delta) - 2.0 * gamma
    return jnp.where(mask, du, 0.0)


def reduced_log_z(t: Float[ArrayLike, ""], G: Float[Array, " m"], args: tuple[Any, ...]) -> Float[Array, " p"]:
    """log z of the reduced GLV form: u(t) = u0 + D_mask (Lambda^T G - 2 gamma (t - t0)), shape
    (p,) (0 on masked modes)."""
    data, gamma, mask, u0, t0 = args
    return jnp.where(mask, u0 + data.pullback(G) - 2.0 * gamma * (t - t0), 0.0)


def rhs_glv_reduced(t: Float[ArrayLike, ""], G: Float[Array, " m"], args: tuple[Any, ...]) -> Float[Array, " m"]:
    """The GLV flow (Eq. E13) of commuting data with m < p in m coordinates. Its velocity
    u' = -(8/m) D_mask Lambda^T Delta - 2 gamma lies in the range of D_mask Lambda^T (plus a
    constant), so u(t) = u0 + D_mask (Lambda^T G(t) - 2 gamma t) exactly, with
    G_mu(t) = -(8/m) int_0^t Delta_mu, the integrated residuals (m values, not p):
    G' = -(8/m) (Lambda z - y), z = exp(u) on live modes. args = (data, gamma, mask, u0, t0)."""
    data = args[0]
    z = glv_z(reduced_log_z(t, G, args), args[2])
    return -(8.0 / data.m) * (data.outputs_z(z) - data.y)


def jac_glv_reduced(t: Float[ArrayLike, ""], G: Float[Array, " m"], args: tuple[Any, ...]) -> Float[Array, "m m"]:
    """Jacobian of `rhs_glv_reduced`: -(8/m) Lambda diag(z) Lambda^T (D_mask z = z), shape
    (m, m), one (m, p) x (p, m) product."""
    data = args[0]
    z = glv_z(reduced_log_z(t, G, args), args[2])
    return -(8.0 / data.m) * (data.Lambda * z) @ data.Lambda.T


class _ModelView(eqx.Module):
    """A wrapper of an `NQFModel` (`model`) that reads its data, labels, sizes and f0 from it
    (`FactoredG`, `WithLoss`)."""

    model: Any

    @property
    def data(self):
        return self.model.data

    @property
    def y(self):
        return self.model.y

    @property
    def m(self) -> int:
        return self.model.m

    @property
    def p(self) -> int:
        return self.model.p

    @property
    def f0(self):
        return self.model.f0


class FactoredG(_ModelView):
    """An `NQFModel` (Eq. E2) with its linear coefficients stored as factors: g(x_mu) = U_mu V,
    i.e. G = U V with U (m, r), V (r, p). The "M-mu" right-hand side then forms G mu = U (V mu)
    and sum_mu c_mu g(x_mu) = (c^T U) V in O((m + p) r) instead of two passes over the dense
    (m, p) array. Same outputs and flow as the model, to rounding. Built by `factor_linear_term`
    (`nqf.solve_flow` does it for the "M-mu" form); `model` is the model without g (B, f0 kept).
    """

    model: NQFModel
    U: Float[Array, "m r"]
    V: Float[Array, "r p"]

    @property
    def has_mean_field(self) -> bool:
        return True

    def outputs(self, M: Float[Array, "p p"], mu: Float[Array, " p"]) -> Float[Array, " m"]:
        """f_x for every training input (Eq. E2), shape (m,)."""
        return self.model.outputs(M, mu) + self.U @ (self.V @ mu)

    def pullback_u(self, c: Float[Array, " m"], mu: Float[Array, " p"]) -> Float[Array, " p"]:
        """sum_mu c_mu u(x_mu), u = g + 2 B mu (Eq. E4), shape (p,)."""
        out = (c @ self.U) @ self.V
        return out if self.model.B is None else out + c @ self.model.u(mu)


@register  # nqf.save / nqf.load (a FlowSolution of solve_flow(loss=...))
class WithLoss(_ModelView):
    """An `NQFModel` (or its `FactoredG` form) trained on another loss than MSE (`nqf.PerSampleLoss`):
    the "M-mu" flow (Eq. E10) with l'_x = (1/m) w ell'(f_x, y_x) on its m data rows
    (`PerSampleLoss.grad`; rows mu k + o, the labels `model.y` the loss's label rows). Same
    outputs as the model; `solve_flow(..., loss=...)` builds it (`of`). The loss is kept by name
    and k (so that `nqf.save` writes it); a callable loss in `fn` (then not saveable)."""

    model: Any
    name: str = eqx.field(static=True)
    k: int = eqx.field(static=True, default=1)
    fn: Any = eqx.field(static=True, default=None)

    @classmethod
    def of(cls, model, loss: PerSampleLoss) -> WithLoss:
        """`model` with the (non-MSE) `loss`."""
        named = loss.name != "callable"
        return cls(model, loss.name, loss.k, None if named else loss.fn)

    @property
    def loss(self) -> PerSampleLoss:
        return PerSampleLoss(_NAMED[self.name] if self.fn is None else self.fn, self.k)

    @property
    def has_mean_field(self) -> bool:
        return self.model.has_mean_field

    def outputs(self, M: Float[Array, "p p"], mu: Float[Array, " p"]) -> Float[Array, " m"]:
        """f_x for every training row (Eq. E2), shape (m,)."""
        return self.model.outputs(M, mu)

    def pullback_u(self, c: Float[Array, " m"], mu: Float[Array, " p"]) -> Float[Array, " p"]:
        """sum_mu c_mu u(x_mu), u = g + 2 B mu (Eq. E4), shape (p,)."""
        return _pullback_u(self.model, c, mu)


def is_model(x) -> bool:
    """True for an `NQFModel`, its `FactoredG` form or a `WithLoss` (False for a bare data set)."""
    return isinstance(x, (NQFModel, FactoredG, WithLoss))


def loss_of(model) -> PerSampleLoss | None:
    """The loss of a `WithLoss` model (None: MSE)."""
    return model.loss if isinstance(model, WithLoss) else None


def _pullback_u(model, c, mu):
    """sum_mu c_mu u(x_mu) (p,) for an `NQFModel`, a `FactoredG` or a `WithLoss`."""
    return model.pullback_u(c, mu) if isinstance(model, (FactoredG, WithLoss)) else c @ model.u(mu)


FACTOR_MAX_RANK = 8  # `factor_linear_term` looks for a rank of g up to this


def factor_linear_term(model, *, max_rank: int = FACTOR_MAX_RANK):
    """`model` with its g (m, p) as factors (`FactoredG`) when g has rank r <= `max_rank` and the
    factors save work (2 r (m + p) <= m p); otherwise `model` unchanged (also for a bare data
    set, a model without g, or traced arrays: the factorization runs on the host). A compiled
    solve depends on r, so models whose g differ in rank compile separately.

    The row space of G comes from a randomized range finder (fixed seed): G Omega, Omega
    (p, max_rank), made orthonormal (Q), then the SVD of Q^T G, truncated at 1e-14 of the largest
    singular value, gives orthonormal rows V (r, p); U = G V^T. The factors are used only if
    max|U V - G| <= 1e-13 max|G| (exact to rounding), so a g of higher rank is never
    approximated. Cost O(m p max_rank) on the host, once per solve.
    """
    if not isinstance(model, NQFModel) or model.g is None or is_traced(model.g):
        return model
    G = np.asarray(model.g)
    m, p = G.shape
    k = min(max_rank, p)
    if 2 * (m + p) > m * p:  # even rank 1 would not save work
        return model
    Q, _ = np.linalg.qr(G @ np.random.default_rng(0).standard_normal((p, k)))
    u, s, vt = np.linalg.svd(Q.T @ G, full_matrices=False)
    r = max(1, int(np.sum(s > 1e-14 * s[0])))
    V = vt[:r]
    U = G @ V.T
    if 2 * r * (m + p) > m * p or not np.abs(U @ V - G).max() <= 1e-13 * np.abs(G).max():
        return model  # no saving, or the rank of g exceeds max_rank
    base = eqx.tree_at(lambda x: x.g, model, None, is_leaf=lambda x: x is None)
    return FactoredG(base, jnp.asarray(U), jnp.asarray(V))


def rhs_M_mu(
    t: Float[ArrayLike, ""], state: tuple[Float[Array, "p p"], Float[Array, " p"]], args: tuple[Any, ...]
) -> tuple[Float[Array, "p p"], Float[Array, " p"]]:
    """Eq. E10 with weight decay: state = (M (p, p), mu (p,)), args = (model or data, gamma, d).

    The first slot is an `NQFModel`, its `FactoredG` form, or a bare data set (the model with
    g = B = f0 = 0: then u = 0 and mu' = -H mu). The third slot of `args` carries the width d (a
    float64 scalar) instead of a GLV mask.
    """
    M, mu = state
    model, gamma, d = args
    general = is_model(model)
    data = model.data if general else model
    f = model.outputs(M, mu) if general else data.traces(M)
    loss = loss_of(model)
    lp = 2.0 / data.m * (f - data.y) if loss is None else loss.grad(f, data.y) / data.m  # l'_x
    HX = data.apply(2.0 * lp, jnp.concatenate([M, mu[:, None]], axis=1))
    H_M = HX[:, :-1] + gamma * M
    H_mu = HX[:, -1] + gamma * mu
    if general and model.has_mean_field:
        v = _pullback_u(model, lp, mu)
        vmu = jnp.outer(v, mu)
        return -(H_M + H_M.T + vmu + vmu.T), -(d * v + H_mu)
    return -(H_M + H_M.T), -H_mu


# Each right-hand side takes args = (data, gamma, mask); mask is used by the GLV form only, and
# the "M-mu" form takes (model or data, gamma, d).
RHS = {"M": rhs_M, "factor": rhs_factor, "glv": rhs_glv, "M-mu": rhs_M_mu}


def check_form(form: str, data: AbstractData) -> None:
    if form not in FORMS:
        raise ValueError(f"`form` must be one of {FORMS} or 'auto'; found {form!r}.")
    if form == "glv" and not isinstance(data, AbstractCommutingData):
        raise ValueError(
            "`form='glv'` needs commuting data (a `CommutingData` or `DiagonalData`); found "
            f"{type(data).__name__}. Use form='M' or 'factor', or build the data with "
            "`CommutingData.from_dense`."
        )


# ---- the flow's state and observables (shared by the solvers) ----
def _saved_losses(t, y, args, *, form, z_star, grad):
    """SaveAt function of ``save="loss"``: the loss and, for commuting data, the excess loss
    (the cancellation-free KKT form of `nqf.excess_loss`) from the state y of any form."""
    data, _, third = args
    model = data if is_model(data) else None
    data = data.data if model is not None else data
    if form == "glv":
        z = glv_z(y, third)
        f = data.outputs_z(z)
    elif form == "factor":
        f = data.traces_factor(y)
        z = data.z_factor(y) if z_star is not None else None
    elif form == "M":
        f = data.traces(y)
        z = data.z(y) if z_star is not None else None
    else:
        f = model.outputs(*y) if model is not None else data.traces(y[0])
        z = None
    return _losses(data, f, z, z_star, grad, loss_of(model))


def _losses(data, f, z, z_star, grad, loss=None):
    """{"loss": (1/m) |f - y|^2} for outputs f (m,) (with a `PerSampleLoss` `loss`: the mean of
    its row values, the mean over inputs of ell), plus "excess_loss" from the mode strengths z
    (p,) when the equilibrium z_star (and the loss gradient there) is given."""
    out = {"loss": jnp.mean((f - data.y) ** 2) if loss is None else jnp.mean(loss.value(f, data.y))}
    if z_star is not None:
        dz = z - z_star
        lin = jnp.sum(jnp.where(z_star == 0, jnp.maximum(grad, 0.0) * z, 0.0))
        out["excess_loss"] = jnp.sum(data.outputs_z(dz) ** 2) / data.m + lin
    return out


def _initial_y0(form: str, init: str, data, x):
    """The initial state of `form` and its live-mode mask (GLV form; None otherwise) from the
    initial condition `x` of kind `init` (traceable; shapes were checked at the boundary)."""
    if form == "M-mu":
        return x, None
    if form == "glv":
        z0 = x if init == "z" else (data.z_factor(x) if init == "W" else data.z(x))
        mask = z0 > 0
        return jnp.where(mask, jnp.log(jnp.where(mask, z0, 1.0)), 0.0), mask
    if form == "M":
        return (x @ x.T if init == "W" else x), None
    if init == "W":
        return x, None
    ev, V = jnp.linalg.eigh(x)  # (p, p) factor of M0: the compiled shape never depends on rank
    return V * jnp.sqrt(jnp.maximum(ev, 0.0)), None
