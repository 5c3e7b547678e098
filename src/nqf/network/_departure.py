"""The a-priori departure estimate of `nqf.predict`: when a network leaves its NQF.

Along the NQF's predicted weights W(t) (`weights_along`), the next terms of the module's
symmetric expansion, T3(W) + T4(W) with T_n(W) = (1/n!) d^n/ds^n f(s W)|_{s=0} (autodiff: nested
forward-mode derivatives), give the outputs f_NQF + T3 + T4; the estimated departure is the first
time the loss with them differs from the NQF's loss by more than `gap_tol` L(0) (`remainder`).
The module itself at W(t) gives a second estimate (`module_gap`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..data import FeedForwardData, Network
from ..data._model import as_model
from ..solvers import FlowSolution


def weights_along(traj, W0):
    """The NQF's weights at saved time i, `W_at(i)` -> (p, d), or None where the closed solution
    does not carry them: the factor flow from F0 (`_flow_factor`) has W(t) = F(t) F0^+ W0; the
    factor map has W_t = mu_t 1^T / d + L_t Z with Z fixed by W0 (L_0 Z = W0 - mu_0 1^T / d)."""
    if isinstance(traj, FlowSolution):
        if traj.form != "factor" or not traj.init_is_factor:
            return None
        F0 = np.asarray(traj.init)
        Z = np.linalg.lstsq(F0, W0, rcond=None)[0] if F0.shape != W0.shape else None
        return lambda i: np.asarray(traj.ys[i]) if Z is None else np.asarray(traj.ys[i]) @ Z
    if getattr(traj, "L", None) is None:
        return None
    d = W0.shape[1]
    L = np.asarray(traj.L)
    if traj.mu is None:
        Z = np.linalg.lstsq(L[0], W0, rcond=None)[0]
        return lambda i: L[i] @ Z
    mu = np.asarray(traj.mu)
    Z = np.linalg.lstsq(L[0], W0 - W0.mean(axis=1, keepdims=True), rcond=None)[0]
    return lambda i: np.outer(mu[i], np.ones(d)) / d + L[i] @ Z


_MAX_REMAINDER_TIMES = 24


def remainder(net: Network, model, x, y, t, loss, W_t, gap_tol):
    """(times, next-terms gap, module gap, departure estimate) along the NQF's weights W(t).

    With R(W) = L(f_NQF + r) - L(f_NQF) the loss change that the remainder r of the outputs
    makes (r = T3 + T4, the next terms of the expansion; or r = module - NQF), a network started
    on the NQF's path differs from the NQF's loss by, to first order in the remainder and in the
    Gauss-Newton approximation of the NQF's loss Hessian,

        G(t) = R(W(t)) - int_0^t |P_null grad_W R(W(s))|^2 ds,

    P_null the projection onto the directions that do not change the NQF's outputs (the null
    space of its output Jacobian J, range(J^T) = {[X Z2; X^T Z1] : X in span{C_mu}} for
    feed-forward data, Eq. E3): along the others the network re-equilibrates on the NQF's
    loss (their effect is the static term), along the null directions it keeps descending at
    the rate |P_null grad R|^2 (gradient flow: dL/dt = -|grad L|^2), which is how it leaves the
    NQF after the learning phase. Without feed-forward structure only the static term is used.
    `gap` = |G| / L(0); the estimate is the first saved time with gap > `gap_tol`."""
    empty = np.zeros(0)
    if W_t is None:
        return empty, empty, empty, float("nan")
    idx = np.unique(np.linspace(0, len(t) - 1, min(len(t), _MAX_REMAINDER_TIMES)).round().astype(int))
    model = as_model(model)
    basis = _output_span(model.data) if isinstance(model.data, FeedForwardData) and not model.has_mean_field else None
    front = None if basis is None else basis[2]
    fn = net._compiled(("remainder", front), lambda: _remainder_program(net, front))
    yf = jnp.asarray(y).reshape(-1)
    span = None if basis is None else basis[:2]
    parts = np.array([[np.asarray(v) for v in fn(jnp.asarray(W_t(i)), x, yf, span, model)] for i in idx])
    ts = t[idx]
    L0 = float(loss[0])
    rate, saturation = parts[:, 1], parts[:, 2]
    drift = np.minimum(np.concatenate([[0.0], np.cumsum(0.5 * (rate[1:] + rate[:-1]) * np.diff(ts))]), saturation)
    gap = np.abs(parts[:, 0] - drift) / L0
    over = np.flatnonzero(gap > gap_tol)
    depart = float(ts[over[0]]) if over.size else float("inf")
    return ts, gap, np.abs(parts[:, 3]) / L0, depart


def _output_span(data: FeedForwardData):
    """The span S = span{C_mu} of the feed-forward data (the NQF's outputs are <Z1 Z2^T, C_mu>)
    as ``(Ua, Ub, front)`` when S = span(a) (x) span(b) (orthonormal bases (k, sa), (q, sb);
    MLP, CNN: then the projection is a Sylvester solve), else ``(B, None, front)`` with an
    orthonormal basis B (s, k, q) of S. Ranks at max(m, kq) eps relative (eigh of the Gram
    matrices)."""
    a = np.asarray(data.a_rows).reshape(-1, data.k)
    b = np.asarray(data.b_rows).reshape(-1, data.q)
    C = np.einsum("mrk,mrq->mkq", np.asarray(data.a_rows), np.asarray(data.b_rows)).reshape(data.m, -1)
    Ua, Ub, V = (_range(M, max(data.m, data.k * data.q)) for M in (a, b, C))
    if V.shape[1] == Ua.shape[1] * Ub.shape[1]:
        return jnp.asarray(Ua), jnp.asarray(Ub), data.front
    return jnp.asarray(V.T.reshape(-1, data.k, data.q)), None, data.front


def _range(M, n: int):
    """An orthonormal basis of the row space of M (its right singular vectors above n eps)."""
    lam, V = np.linalg.eigh(M.T @ M)
    return V[:, lam > (n * np.finfo(float).eps) ** 2 * 1e4 * max(lam.max(initial=0.0), np.finfo(float).tiny)]


def _pinv_sym(lam, tol):
    return jnp.where(lam > tol, 1.0 / jnp.where(lam > tol, lam, 1.0), 0.0)


def _null_part(W, g, span, front: int):
    """P_null g for a gradient g (p, d) at W: g minus its least-squares projection on the range
    of the NQF's output Jacobian, range(J^T) = {[0; X Z2; X^T Z1; 0] : X in S} (feed-forward data;
    `span` from `_output_span`, without its `front`). The normal equations for X are
    X P2 + P1 X = R (projected on S), P1 = Z1 Z1^T, P2 = Z2 Z2^T, R = g1 Z2^T + Z1 g2^T."""
    first, Ub = span
    k = first.shape[0] if Ub is not None else first.shape[1]
    q = Ub.shape[0] if Ub is not None else first.shape[2]
    Z1, Z2 = W[front : front + k], W[front + k : front + k + q]
    g1, g2 = g[front : front + k], g[front + k : front + k + q]
    P1, P2, R = Z1 @ Z1.T, Z2 @ Z2.T, g1 @ Z2.T + Z1 @ g2.T
    if Ub is not None:  # S = span(Ua) (x) span(Ub): a Sylvester equation in (sa, sb) coordinates
        Ua = first
        la, Qa = jnp.linalg.eigh(Ua.T @ P1 @ Ua)
        lb, Qb = jnp.linalg.eigh(Ub.T @ P2 @ Ub)
        s = la[:, None] + lb[None, :]
        Y = Qa @ (_pinv_sym(s, 1e-12 * jnp.max(s)) * (Qa.T @ (Ua.T @ R @ Ub) @ Qb)) @ Qb.T
        X = Ua @ Y @ Ub.T
    else:  # a basis B (s, k, q) of S and its Gram matrix (eigh: jnp.linalg.lstsq's SVD is far slower)
        B = first
        G = jnp.einsum("jac,lac->jl", B, jnp.einsum("jab,bc->jac", B, P2) + jnp.einsum("ab,jbc->jac", P1, B))
        lam, Q = jnp.linalg.eigh(G)
        c = Q @ (_pinv_sym(lam, 1e-12 * jnp.max(lam)) * (Q.T @ jnp.einsum("jab,ab->j", B, R)))
        X = jnp.einsum("j,jab->ab", c, B)
    return g.at[front : front + k].add(-X @ Z2).at[front + k : front + k + q].add(-X.T @ Z1)


def _remainder_program(net: Network, front: int | None):
    """jit(W, x, y, span, model) -> (R_T, rate, saturation, R_module) of `remainder`: the static
    loss change of the next-terms remainder T3 + T4, the drift rate |P_null grad R|^2 and the
    most the drift can gain before the curvature along it stops it (0 and inf without
    feed-forward structure, `front` None), and the static loss change of the module itself."""

    def parts(W, x, y, span, model):
        def nqf_out(W):
            return model.outputs_factor(W, jnp.sum(W, axis=1))

        def taylor(W):
            t3, t4, full = jax.vmap(lambda xx: _taylor_one(net, W, xx))(x)
            return (t3 + t4).reshape(-1), full.reshape(-1)

        mse = lambda f: jnp.mean((f - y) ** 2)  # noqa: E731
        loss_t = lambda W: mse(nqf_out(W) + taylor(W)[0])  # noqa: E731
        L_t, g_full = jax.value_and_grad(loss_t)(W)
        L_nqf, g_nqf = jax.value_and_grad(lambda W: mse(nqf_out(W)))(W)
        R_t, g_t = L_t - L_nqf, g_full - g_nqf
        R_m = mse(taylor(W)[1]) - L_nqf
        if front is None:
            return R_t, jnp.zeros(()), jnp.asarray(jnp.inf), R_m
        u = _null_part(W, g_t, span, front)
        rate = jnp.sum(u**2)
        u = u / jnp.sqrt(jnp.where(rate > 0, rate, 1.0))
        h = 1e-5 * jnp.sqrt(jnp.sum(W**2))  # u^T Hess(L_T) u by a forward difference of gradients
        curv = jnp.vdot(u, jax.grad(loss_t)(W + h * u) - g_full) / h
        saturation = jnp.where(curv > 0, rate / (2.0 * jnp.where(curv > 0, curv, 1.0)), jnp.inf)
        return R_t, rate, saturation, R_m

    return jax.jit(parts)


def _taylor_one(net, W, xx):
    """(T3, T4, f(W)) for one input: T_n = (1/n!) d^n/ds^n f(s W)|_{s=0} (nested forward mode)."""
    g = lambda s: jnp.atleast_1d(net(s * W, xx))  # noqa: E731
    zero = jnp.zeros(())
    return (_derivatives(g, 3)(zero) / math.factorial(3), _derivatives(g, 4)(zero) / math.factorial(4), g(jnp.ones(())))


def _derivatives(g, n: int):
    """d^n g / ds^n as a function of s (nested jvp)."""
    for _ in range(n):
        g = (lambda h: lambda s: jax.jvp(h, (s,), (jnp.ones_like(s),))[1])(g)
    return g
