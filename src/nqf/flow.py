"""Vector fields of the MSE gradient flow on the order parameters (THEORY sec. 4-5).

Time is gradient-flow time: t = eta * (number of GD steps). Three exact forms:

- ``"M"``: M' = -(H M + M H), H = (4/m) sum_mu Delta_mu A_mu + gamma I (Eqs. E8-E9).
- ``"factor"``: F' = -H F with F F^T = M (exact, PSD by construction; W' = -H W is the factor
  form with F = W).
- ``"glv"`` (commuting data only): u = log z, u_k' = -(8/m) sum_mu lambda_{mu,k} Delta_mu - 2 gamma
  (Eq. E13 in log space, which keeps relative accuracy while z ~ eps). Modes with z_k(0) = 0 stay
  at zero and are masked.
"""

from __future__ import annotations

import jax.numpy as jnp

from .data import AbstractData, CommutingData

FORMS = ("M", "factor", "glv")


def rhs_M(t, M, args):
    data, gamma, _ = args
    H_M = data.apply(4.0 / data.m * data.residual(M), M) + gamma * M
    return -(H_M + H_M.T)


def rhs_factor(t, F, args):
    data, gamma, _ = args
    delta = data.traces_factor(F) - data.y
    return -(data.apply(4.0 / data.m * delta, F) + gamma * F)


def glv_z(u, mask):
    """z = exp(u) on live modes, 0 on masked (z(0) = 0) modes."""
    return jnp.where(mask, jnp.exp(jnp.where(mask, u, 0.0)), 0.0)


def rhs_glv(t, u, args):
    data, gamma, mask = args
    delta = data.Lambda @ glv_z(u, mask) - data.y
    du = -(8.0 / data.m) * (delta @ data.Lambda) - 2.0 * gamma
    return jnp.where(mask, du, 0.0)


# Each right-hand side takes args = (data, gamma, mask); mask is used by the GLV form only.
RHS = {"M": rhs_M, "factor": rhs_factor, "glv": rhs_glv}


def check_form(form: str, data: AbstractData) -> None:
    if form not in FORMS:
        raise ValueError(f"`form` must be one of {FORMS} or 'auto'; found {form!r}.")
    if form == "glv" and not isinstance(data, CommutingData):
        raise ValueError(
            "`form='glv'` needs commuting data (a `CommutingData`); found "
            f"{type(data).__name__}. Use form='M' or 'factor', or build the data with "
            "`CommutingData.from_dense`."
        )
