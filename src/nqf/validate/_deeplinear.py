"""`nqf validate` check of Theorem 16's deep-linear-network instance (paper App. B.7): nqf's flow,
the Theorem 16 oracle, Saxe et al. (2014) Eq. 12 and the two-layer linear network W2 W1 itself
trained in weight space (gradient flow and GD) agree.

Test bed (`deep_linear_testbed`): `nqf.datasets.deep_linear_data` with singular values
s = (2, 1, 1/2) of a random S (n_out = 4, n_in = 5), N = 6 white inputs (m = 24, p = 9), so
Saxe's time constant is tau = n_out / 2 = 2 (nqf time t = eta * steps); a balanced, aligned start
(`DeepLinearData.balanced_init`) of width d = 4 with every mode strength u_a(0) = eps (so
M0 = 2 eps sum_a Pi_a); times [0, T], T = max_a tau / (2 s_a) (ln(s_a / eps) + 6) (every mode
past 99.7 % of s_a).

Saxe et al. (2014) Eq. 12 is written here from the formula, independently of nqf's oracles:
u(t) = s e^{2 s t / tau} / (e^{2 s t / tau} - 1 + s / u0) (evaluated divided through by
e^{2 s t / tau}, the same expression without overflow), with tau = n_out / 2 and u = z / 2 (the
mapping is derived in `deep_linear_data`'s docstring).

Records (bound `FLOW_BOUND` = 1e-8 unless stated), per eps:

- Theorem 16 oracle vs Eq. 12: max relative error of u_a = z_a / 2 over the trajectory.
- nqf's flow (`solve_flow`) vs Theorem 16: max relative error of z_a = Tr[M Pi_a] (`mode_error`:
  modes below 1e-6 x the largest are measured in that scale, the float64 floor of reading a mode
  from M in a rotated basis); and |M - M_thm16|_F / |M_thm16|_F (the flow stays in the span of
  the projectors).
- nqf's flow vs Eq. 12 on the network's map: |W2 W1(t) - sum_a u_a(t) u_a v_a^T|_F / |.|_F, with
  W2 W1 the (output, input) block of the flow's M.
- the network's weight-space gradient flow W' = -grad_W L (autodiff of W2 W1 x, scipy DOP853,
  rtol 1e-13) vs nqf's flow: max_t |W W^T - M|_F / |M|_F.

Once (at the smallest eps of the list, independent of the rest):

- the network's plain GD (weights, autodiff gradient) at eta = 0.01 vs nqf's closed map
  (Theorem 2, `closed_map`) at the same eta: max relative |M| error, bound 1e-10 (a linear
  network's GD is the NQF's exact discrete map);
- GD vs the flow at eta and eta / 2: the ratio of the max |M_GD(t) - M_flow(t)|_F / |M_flow|_F
  errors, which must lie in [1.8, 2.2] (GD -> flow at first order in eta); value
  |ratio - 2|, bound 0.2;
- a refusal: Theorem 16 on an unbalanced random start (assumption 5 fails).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate

from ..data.datasets import DeepLinearData, deep_linear_data
from ..dynamics._maps import closed_map
from ..solvers._solve import solve_flow
from ..theory._oracles import theorem16
from ._common import _NT, _RTOL, FLOW_BOUND, _fmt, _refusal, norm_relative_error, record, register, relative_error

__all__ = ["check_deep_linear", "deep_linear_testbed", "saxe_eq12", "mode_error", "DEEP_LINEAR_S"]

DEEP_LINEAR_S = (2.0, 1.0, 0.5)
"""Singular values of the test bed's input-output correlation S."""

_NOUT, _NIN, _N, _D = 4, 5, 6, 4
_GD_LR = 0.01
GD_MAP_BOUND = 1e-10
"""Bound on the network's GD vs the closed map (Theorem 2), relative max |M| error."""


def deep_linear_testbed() -> DeepLinearData:
    """The check's data: `deep_linear_data(singular_values=DEEP_LINEAR_S, n_out=4, n_in=5,
    n_samples=6, seed=5)`."""
    return deep_linear_data(singular_values=DEEP_LINEAR_S, n_out=_NOUT, n_in=_NIN, n_samples=_N, seed=5)


def saxe_eq12(s, u0, t, tau):
    """Saxe et al. (2014) Eq. 12, u(t) = s e^{2st/tau} / (e^{2st/tau} - 1 + s/u0), written
    directly (numerator and denominator divided by e^{2st/tau}); broadcasting numpy."""
    s, u0, t = np.asarray(s, float), np.asarray(u0, float), np.asarray(t, float)
    e = np.exp(-2.0 * s * t / tau)
    return s / (1.0 - e + (s / u0) * e)


def mode_error(z, ref) -> float:
    """max_{t,a} |z_a(t) - ref_a(t)| / max(ref_a(t), 1e-6 max_b ref_b(t)): the relative error of
    each mode strength, in the scale 1e-6 x the largest mode for modes below it. The floor is
    float64's: the flow's M lives in the standard basis, where the projectors are rotated, so a
    mode z_a is read as Tr[M Pi_a] with a rounding error ~ 1e-16 |M|; a mode 1e-9 x the largest
    (the slow mode at eps = 1e-12 when the fast one has saturated) can only be resolved to ~1e-7
    relative, whatever the solver tolerance (measured: 6.5e-8 at rtol 1e-11 and 1e-13 alike)."""
    z, ref = np.asarray(z, float), np.asarray(ref, float)
    scale = np.maximum(np.abs(ref), 1e-6 * np.abs(ref).max(axis=-1, keepdims=True))
    return float(np.max(np.abs(z - ref) / scale))


def horizon(dl: DeepLinearData, u0: float) -> float:
    """T = max_a tau / (2 s_a) (ln(s_a / u0) + 6): every mode past 99.7 % of s_a."""
    return float(np.max(dl.tau / (2.0 * dl.s) * (np.log(dl.s / u0) + 6.0)))


def network_loss(W, x, y, n_out: int):
    """The two-layer linear network's loss (1/(N n_out)) sum_n |W2 W1 x_n - y_n|^2, W = [W2; W1^T]."""
    W2, W1T = W[:n_out], W[n_out:]
    F = (x @ W1T) @ W2.T  # (N, n_out): rows W2 W1 x_n
    return jnp.mean((F - y) ** 2)


def wspace_flow(dl: DeepLinearData, W0, ts) -> np.ndarray:
    """The network's weight-space gradient flow W' = -grad_W L (autodiff, scipy DOP853 at
    rtol 1e-13), M = W W^T at `ts`, (n, p, p)."""
    p, d = W0.shape
    x, y = jnp.asarray(dl.x), jnp.asarray(dl.y)
    grad = jax.jit(jax.grad(lambda w: network_loss(w.reshape(p, d), x, y, dl.n_out)))
    ref = scipy.integrate.solve_ivp(
        lambda t, w: -np.asarray(grad(jnp.asarray(w))),
        (0.0, float(ts[-1])),
        W0.ravel(),
        "DOP853",
        t_eval=ts,
        rtol=1e-13,
        atol=1e-15 * float(np.abs(W0).max()),
    )
    if not ref.success:
        raise RuntimeError(f"scipy W-space reference failed: {ref.message}")
    Ws = ref.y.T.reshape(-1, p, d)
    return Ws @ np.swapaxes(Ws, 1, 2)


def network_gd(dl: DeepLinearData, W0, lr: float, steps: int) -> np.ndarray:
    """Plain GD of the network's weights, W <- W - lr grad_W L (autodiff), M = W W^T after every
    step (steps + 1, p, p)."""
    x, y = jnp.asarray(dl.x), jnp.asarray(dl.y)
    grad = jax.grad(lambda w: network_loss(w, x, y, dl.n_out))

    def step(W, _):
        W = W - lr * grad(W)
        return W, W @ W.T

    W0 = jnp.asarray(W0)
    _, Ms = jax.lax.scan(step, W0, None, length=steps)
    return np.concatenate([np.asarray(W0 @ W0.T)[None], np.asarray(Ms)])


@register
def check_deep_linear(eps_values):
    """Theorem 16 on a two-layer linear network's NQF (App. B.7): flow vs oracle vs Saxe et al.
    Eq. 12 vs the network in weight space (module docstring)."""
    dl = deep_linear_testbed()
    Pi, no = dl.projectors, dl.n_out
    out = []
    for eps in eps_values:
        W0 = dl.balanced_init(eps, d=_D)
        T = horizon(dl, eps)
        ts = np.linspace(0.0, T, _NT)
        orc = theorem16(dl.data, Pi, ts, M0=W0 @ W0.T)
        u_saxe = saxe_eq12(dl.s, eps, ts[:, None], dl.tau)  # (n, r)
        tag = f"deep linear (Thm 16, App. B.7) {_fmt(eps)}"
        out.append(
            record(f"{tag}: Theorem 16 vs Saxe Eq. 12, max rel err u", relative_error(orc.z / 2.0, u_saxe), FLOW_BOUND)
        )
        sol = solve_flow(dl.data, W0=W0, t1=T, ts=ts, rtol=_RTOL)
        M = np.asarray(sol.M)
        z = np.einsum("nij,aji->na", M, Pi)
        out.append(
            record(f"{tag}: flow vs Theorem 16, max rel err z (floor 1e-6 max z)", mode_error(z, orc.z), FLOW_BOUND)
        )
        out.append(record(f"{tag}: flow vs Theorem 16, max rel err |M|_F", norm_relative_error(M, orc.M), FLOW_BOUND))
        prod_saxe = np.einsum("na,ia,ja->nij", u_saxe, dl.U, dl.V)
        out.append(
            record(
                f"{tag}: flow W2 W1 vs Saxe Eq. 12 sum u_a u_a v_a^T, max rel err |.|_F",
                norm_relative_error(M[:, :no, no:], prod_saxe),
                FLOW_BOUND,
            )
        )
        Mw = wspace_flow(dl, W0, ts)
        out.append(
            record(
                f"{tag}: network W-space gradient flow (scipy) vs flow, max rel err |M|_F",
                norm_relative_error(Mw, M),
                FLOW_BOUND,
            )
        )
    out += _gd_records(dl, min(eps_values))
    rng = np.random.default_rng(2)
    W_bad = 1e-3 * rng.standard_normal((dl.data.p, _D))
    out.append(
        _refusal(
            "deep linear: theorem16 refuses an unbalanced random start",
            lambda: theorem16(dl.data, Pi, ts[:3], M0=W_bad @ W_bad.T),
        )
    )
    return out


def _gd_records(dl: DeepLinearData, eps: float) -> list[dict]:
    W0 = dl.balanced_init(eps, d=_D)
    T = horizon(dl, eps)
    nsave = _NT - 1  # the flow's saved times: the same shape as above (one compiled program)
    steps = nsave * int(np.ceil(T / _GD_LR / nsave))
    ts = _GD_LR * np.arange(0, steps + 1, steps // nsave)
    sol = solve_flow(dl.data, W0=W0, t1=float(ts[-1]), ts=ts, rtol=_RTOL)
    Mf = np.asarray(sol.M)
    errs = []
    out = []
    for k in (1, 2):  # eta and eta / 2, same saved times
        lr, n = _GD_LR / k, k * steps
        Mg = network_gd(dl, W0, lr, n)
        if k == 1:
            cm = closed_map(dl.data, W0=W0, lr=lr, steps=n)
            out.append(
                record(
                    f"deep linear {_fmt(eps)}: network GD (eta={lr}) vs closed map (Theorem 2), max rel err M",
                    float(np.abs(np.asarray(cm.M) - Mg).max() / np.abs(Mg).max()),
                    GD_MAP_BOUND,
                )
            )
        errs.append(norm_relative_error(Mg[:: n // nsave], Mf))
    out.append(
        record(
            f"deep linear {_fmt(eps)}: network GD -> flow at first order, |err(eta)/err(eta/2) - 2| "
            f"(err {errs[0]:.3g} at eta={_GD_LR})",
            abs(errs[0] / errs[1] - 2.0),
            0.2,
        )
    )
    return out
