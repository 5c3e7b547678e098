"""Theorem 6 as a solve path: the exact flow of commuting data with orthogonal features.

When sum_mu lambda_{mu,k} lambda_{mu,j} = 0 for k != j (every `DiagonalData`, e.g. the Fig. 3
power law), the GLV equations (Eq. E13) decouple into logistic equations
z_k' = (a_k - C_kk z_k) z_k with a_k = r_k - 2 gamma (r, C of Theorem 6, gamma the weight
decay), solved in closed form (Eq. E16). `solve_flow(..., method="exact")` evaluates that
solution at the saved times instead of integrating: O(p) per time, no steps, no tolerance, and
a dense output that is the closed form itself. It returns the same `FlowSolution` (GLV form,
log z) as the ODE path, so every derived quantity (M, W, z, loss, excess loss, ignition times)
works unchanged. The assumption is checked structurally (`nqf.dynamics.orthogonal_features_residual`),
never through a p x p matrix.

The ODE path stays the default: the flow is then an independent computation that the oracles
(`nqf.theory`) check; this module and `nqf.theorem6` share the closed form.
"""

from __future__ import annotations

from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..data._operators import DiagonalData
from ..dynamics._flow import _initial_y0, _losses  # the GLV form's initial state and saved losses
from ..dynamics._glv import logistic_log_z, logistic_z
from ._core import _FlowArgs

__all__ = ["ExactGLVInterpolation"]

_SUCCESS = int(diffrax.RESULTS.successful._value)


class ExactGLVInterpolation(eqx.Module):
    """Dense output of the exact path: log z(t) of Theorem 6 at any t in [t0, t1].

    **Attributes:** `t0`, `t1` (the solved interval, gradient-flow time); `log_z0` (p,) the
    initial log mode strengths (0 on masked modes); `mask` (p,) the live modes z_k(0) > 0;
    `a` (p,) the effective rates r_k - 2 gamma; `C` (p,) the self-competition C_kk.
    """

    t0: Float[Array, ""]
    t1: Float[Array, ""]
    log_z0: Float[Array, " p"]
    mask: Array
    a: Float[Array, " p"]
    C: Float[Array, " p"]

    @property
    def z0(self) -> Float[Array, " p"]:
        """z(t0), shape (p,) (0 on masked modes)."""
        return jnp.where(self.mask, jnp.exp(self.log_z0), 0.0)

    def evaluate(self, t) -> Float[Array, " p"]:
        """log z(t), shape (p,) (0 on masked modes, like the GLV form's state)."""
        u = logistic_log_z(self.log_z0, self.z0, self.a, self.C, t - self.t0)
        return jnp.where(self.mask, u, 0.0)

    def z(self, t) -> Float[Array, " p"]:
        """z(t) itself, shape (p,) (two transcendental functions per mode instead of four)."""
        return jnp.where(self.mask, logistic_z(self.z0, self.a, self.C, t - self.t0), 0.0)


class _ExactConfig(NamedTuple):
    """Static half of an exact solve."""

    init: str  # kind of dyn.init: "W", "M" or "z"
    save: str  # "state" or "loss"
    excess: bool  # save="loss" also saves the excess loss


def _exact_core(cfg: _ExactConfig, dyn: _FlowArgs) -> dict:
    """The exact solve as a pure function of arrays (same `dyn` layout and output dict as
    `nqf.solvers._core._solve_core`; traceable)."""

    data = dyn.data
    y0, mask = _initial_y0("glv", cfg.init, data, dyn.init)
    assert mask is not None  # the GLV form always has its live-mode mask
    t0, t1, _, gamma = dyn.params
    scale = 8.0 / data.m
    interp = ExactGLVInterpolation(
        t0, t1, y0, mask, scale * data.pullback(data.y) - 2.0 * gamma, scale * data.feature_norms()
    )
    ts = dyn.ts
    if cfg.save == "state":
        ys = jax.vmap(interp.evaluate)(ts)
    elif isinstance(data, DiagonalData):  # separable: all times at once, modes in chunks
        ys = _diagonal_losses(interp, data, ts, dyn.z_star, dyn.grad)
    else:  # one time at a time: O(p) memory at any p
        z_star, grad = dyn.z_star, dyn.grad

        def losses(t):
            z = interp.z(t)
            return _losses(data, data.outputs_z(z), z, z_star, grad)

        ys = jax.lax.map(losses, ts)
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(ys)]))
    info = jnp.stack([jnp.asarray(_SUCCESS), 0, 0, 0, finite]).astype(jnp.int64)
    return {"ts": ts, "ys": ys, "y0": y0, "mask": mask, "info": info, "dense": interp}


def _diagonal_losses(interp: ExactGLVInterpolation, data: DiagonalData, ts, z_star, grad, chunk: int = 1024) -> dict:
    """Loss (and excess loss) at every saved time for `DiagonalData`, whose loss is a sum over
    modes: (1/p) sum_k (lam_k z_k(t) - y_k)^2. Modes are taken `chunk` at a time against all n
    times, so each mode's parameters are read from memory once (not once per time) and the
    (n, chunk) block stays in cache: O(n p) flops, O(p) bytes moved, O(n chunk) memory."""
    p = data.p
    pad = -p % chunk
    excess = z_star is not None

    def blocks(x):
        return jnp.pad(x, (0, pad)).reshape(-1, chunk)

    cols = [interp.log_z0, interp.mask, interp.a, interp.C, data.lam, data.y]
    if excess:  # the KKT form of `nqf.excess_loss`, mode by mode
        cols += [z_star, jnp.where(z_star == 0, jnp.maximum(grad, 0.0), 0.0)]
    dt = ts - interp.t0

    def body(acc, col):
        log_z0, mask, a, C, lam, y = col[:6]
        z0 = jnp.where(mask, jnp.exp(log_z0), 0.0)
        z = jnp.where(mask, logistic_z(z0, a, C, dt[:, None]), 0.0)  # (n, chunk)
        if not excess:
            return [acc[0] + jnp.sum((lam * z - y) ** 2, axis=1)], None
        z_star, g = col[6:]
        return [
            acc[0] + jnp.sum((lam * z - y) ** 2, axis=1),
            acc[1] + jnp.sum((lam * (z - z_star)) ** 2 + g * z, axis=1),
        ], None

    init = [jnp.zeros(ts.shape)] * (2 if excess else 1)
    sums, _ = jax.lax.scan(body, init, [blocks(c) for c in cols])
    out = {"loss": sums[0] / p}
    if excess:
        out["excess_loss"] = sums[1] / p
    return out


_exact_jit = jax.jit(_exact_core, static_argnums=0)
