"""`nqf validate` check of the mixture of experts (Proposition 5): the closed-form structure
matrices, the module against its NQF near small initialization, and the module's weight-space GD
against the NQF's closed map (Theorem 2) and closed flow.

Test bed (`moe_testbed`): `nqf.modules.MoE(n_in=4, n_out=2)` (tanh gates and tanh experts,
p = 12), m = 8 inputs x ~ N(0, I/4), width d = 6; unit-rms labels y0 realizable by the NQF (a
rank-2 teacher in the NQF's feed-forward form). The NQF is valid near W = 0: with labels
delta y0 and W0 = 0.01 sqrt(delta) N(0, 1/d), |W|^2 stays O(delta) along the whole run and the
neglected term of the module (O(|W|^4) for odd psi, phi) is O(delta) relative. Time is rescaled
by delta: lr = 0.05 / delta, 800 steps (delta t = 40 in gradient-flow time t = lr * steps).

Records:

- closed-form A (`MoE.structure`, `nqf.structure.moe`) vs autodiff (`nqf.extract` on the module),
  max |A - A_autodiff| / max(1, max |A|), bound `DICTIONARY_BOUND` = 1e-10;
- the module - NQF output gap at W0 = s N(0, 1): order log2(gap(s) / gap(s/2)) at s = 0.01;
  value |order - 4|, bound 0.2 (Theorem 1's remainder, O(|W|^4) for odd psi and phi);
- the module's GD vs the NQF's closed map (Theorem 2, same lr and W0):
  err(delta) = max_t |M_module - M_map|_F / max_t |M_map|_F at delta = 1e-2 and 1e-3; the order
  log10(err(1e-2) / err(1e-3)) must be 1 (the neglected term is O(delta)): value |order - 1|,
  bound 0.1;
- the module's GD vs the NQF's closed flow (`solve_flow`) at delta = 1e-3, lr and lr / 2 (same
  times): err(lr) / err(lr / 2) must be 2 (GD -> flow at first order in lr; the O(delta) part is
  10x smaller here): value |ratio - 2|, bound 0.2.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..data._extract import extract
from ..data._operators import AbstractData
from ..data.modules import MoE
from ..dynamics._maps import closed_map
from ..solvers._solve import solve_flow
from ._common import _RTOL, record, register
from ._flow import DICTIONARY_BOUND

__all__ = ["check_moe", "moe_testbed", "module_gd"]

_N_IN, _N_OUT, _M, _D = 4, 2, 8, 6
_LR0, _STEPS, _NSAVE = 0.05, 800, 40
_DELTAS = (1e-2, 1e-3)


def moe_testbed(seed: int = 0):
    """(module, inputs xs (m, n_in), unit-rms labels y0 (m, n_out), W-shape (p, d) draw N(0, 1/d))
    of the check (module docstring)."""
    mod = MoE(_N_IN, _N_OUT)
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((_M, _N_IN)) / np.sqrt(_N_IN)
    feats = mod.nqf_features(xs)
    T = rng.standard_normal((_N_IN, 2)) @ rng.standard_normal((2, _N_IN * _N_OUT))
    y0 = np.einsum("ma,ab,mbk->mk", np.asarray(feats.a), T, np.asarray(feats.b))
    y0 /= np.sqrt(np.mean(y0**2))
    Winit = rng.standard_normal((mod.p, _D)) / np.sqrt(_D)
    return mod, xs, y0, Winit


@functools.partial(jax.jit, static_argnums=(0, 6))
def _gd(mod, xs, y, W0, lr, every, nsave):
    grad = jax.grad(lambda W: jnp.mean((mod.apply(W, xs) - y) ** 2))

    def block(W, _):
        W = jax.lax.fori_loop(0, every, lambda k, W: W - lr * grad(W), W)
        return W, W @ W.T

    _, Ms = jax.lax.scan(block, W0, None, length=nsave)
    return jnp.concatenate([(W0 @ W0.T)[None], Ms])


def module_gd(mod, xs, y, W0, *, lr: float, steps: int, nsave: int) -> np.ndarray:
    """Full-batch GD of the module's weights on the MSE mean (F - y)^2 (autodiff gradient);
    M = W W^T at steps 0, steps/nsave, ..., steps, shape (nsave + 1, p, p)."""
    if steps % nsave:
        raise ValueError(f"`steps` ({steps}) must be a multiple of `nsave` ({nsave}).")
    out = _gd(mod, jnp.asarray(xs), jnp.asarray(y), jnp.asarray(W0), lr, steps // nsave, nsave)
    return np.asarray(out)


def _rel(M, ref) -> float:
    M, ref = np.asarray(M), np.asarray(ref)
    n = len(ref)
    return float(
        np.linalg.norm((M - ref).reshape(n, -1), axis=1).max() / np.linalg.norm(ref.reshape(n, -1), axis=1).max()
    )


@register
def check_moe(eps_values):
    """Mixture of experts (Proposition 5): structure vs autodiff, module vs NQF at init (order 4),
    module GD vs closed map (order 1 in delta) and vs closed flow (order 1 in lr); independent of
    eps (module docstring)."""
    mod, xs, y0, Winit = moe_testbed()
    A = np.asarray(mod.structure(xs).dense())
    ext = extract(mod, xs, mod.p)
    if not isinstance(ext, AbstractData):  # an NQFModel: extract found a g or B, which Prop. 5 excludes
        raise RuntimeError(f"extract returned {type(ext).__name__} for the MoE (expected a plain data set: g = B = 0).")
    Ae = np.asarray(ext.dense())
    out = [
        record(
            "moe (Prop. 5) closed-form A vs autodiff: max abs err / max(1, max|A|)",
            float(np.abs(A - Ae).max() / max(1.0, np.abs(A).max())),
            DICTIONARY_BOUND,
        )
    ]
    feats = mod.nqf_features(xs, _D)
    gaps = []
    for s in (0.01, 0.005):
        W = jnp.asarray(s * Winit * np.sqrt(_D))
        gaps.append(float(np.linalg.norm(np.asarray(mod.apply(W, jnp.asarray(xs)) - mod.nqf_apply(W, feats)))))
    order = float(np.log2(gaps[0] / gaps[1]))
    out.append(
        record(f"moe module - NQF output gap at init: |order - 4| (order {order:.4f}, s = 0.01)", abs(order - 4.0), 0.2)
    )
    errs = {}
    for delta in _DELTAS:
        lr = _LR0 / delta
        W0 = np.sqrt(delta) * 0.01 * Winit
        y = delta * y0
        data = mod.structure(xs, y)
        Mg = module_gd(mod, xs, y, W0, lr=lr, steps=_STEPS, nsave=_NSAVE)
        cm = closed_map(data, W0=W0, lr=lr, steps=_STEPS, save_every=_STEPS // _NSAVE)
        errs[delta] = _rel(Mg, cm.M)
    order = float(np.log10(errs[_DELTAS[0]] / errs[_DELTAS[1]]))
    out.append(
        record(
            f"moe module GD vs NQF closed map (Theorem 2): |order in delta - 1| (err {errs[_DELTAS[0]]:.3g} at "
            f"delta={_DELTAS[0]:g}, {errs[_DELTAS[1]]:.3g} at {_DELTAS[1]:g})",
            abs(order - 1.0),
            0.1,
        )
    )
    delta = _DELTAS[1]
    lr, W0, y = _LR0 / delta, np.sqrt(delta) * 0.01 * Winit, delta * y0
    ts = lr * np.arange(0, _STEPS + 1, _STEPS // _NSAVE)
    sol = solve_flow(mod.structure(xs, y), W0=W0, t1=float(ts[-1]), ts=ts, rtol=_RTOL)
    e1 = _rel(module_gd(mod, xs, y, W0, lr=lr, steps=_STEPS, nsave=_NSAVE), sol.M)
    e2 = _rel(module_gd(mod, xs, y, W0, lr=lr / 2, steps=2 * _STEPS, nsave=_NSAVE), sol.M)
    out.append(
        record(
            f"moe module GD vs NQF closed flow (delta={delta:g}): |err(lr)/err(lr/2) - 2| (err {e1:.3g} at lr={lr:g})",
            abs(e1 / e2 - 2.0),
            0.2,
        )
    )
    return out
