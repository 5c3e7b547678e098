"""The a-priori departure estimate of `nqf.predict`: when a network leaves its NQF, at a cost that
does not grow with the width; and the init-size check (`init_gap`).

Along the NQF's predicted weights W(t) (`weights_along`), the next terms of the module's
symmetric expansion, T3(W) + T4(W) with T_n(W) = (1/n!) d^n/ds^n f(s W)|_{s=0} (autodiff: nested
forward-mode derivatives), give the outputs f_NQF + T3 + T4; the estimated departure is the first
time the loss with them differs from the NQF's loss by more than `gap_tol` L(0) (`remainder`).
The module itself at W(t) gives a second estimate (`module_gap`).

**Why a neuron subsample.** For a module that is a sum over its neurons, f(W) = f(0) +
sum_i phi(w_i) (MLPs, a CNN with sum pooling, summed attention heads), every term is a neuron sum,
T_n(W) = sum_i t_n(w_i), and so is each piece of the drift rate |P_null grad R|^2 (the gradient's
columns g_i, |g|^2 = sum_i |g_i|^2 and R = sum_i g1_i z2_i^T + z1_i g2_i^T of the normal
equations; P1 = Z1 Z1^T and P2 = Z2 Z2^T are blocks of M(t), exact from the NQF's state) and of
the curvature that saturates it. W(t) = F(t) Z with Z fixed by W0 (Theorem 2 and Corollary 2: a
p x p propagator applied to W0), so the columns S of W(t) cost nothing in d. The estimate
evaluates the module at width s on s random neurons S and scales the sums by d / s (unbiased for
each sum); the NQF's own outputs come from (M(t), mu(t)) exactly. The alternative, the neurons'
moment tensors sum_i w_i^(x n), has p^n entries (p = 257, n = 4: 4e9) and needs the module's
Taylor coefficients as tensors; the subsample needs neither and works for any additive module.

**Error bar.** S is split into G groups (vmap of G modules of width s / G); a delete-one-group
jackknife of every quantity (gap curves included, each replicate with its own drift integral)
gives its standard error, times the finite-population factor sqrt(1 - s / d) (0 at s = d). The
residual weights e = (2 / m) (f_NQF + r - y) of the gradient are those of the pooled estimate in
every replicate (the bar is the neuron sampling of each sum at fixed e). `departure_interval` is
(first time gap + 2 se > gap_tol, first time gap - 2 se > gap_tol).

**Additivity.** Before trusting the groups (at s = d too) the module's output at the full width at the last
saved W(t) is compared with the sum of its width-(s / G) blocks on a few inputs; a module with
cross-neuron terms (a mean over units, an output nonlinearity) fails it and the estimate falls back
to the full width (one group of all d neurons, exact, cost ~ d; ``sampling`` says so).

**Cost and default.** Per saved time (24 at most): one forward and one reverse pass of the
width-s module's T3 + T4 on the m inputs and two forward passes for the curvature, independent of
d (the program's XLA FLOP count is the same at d = 32 and d = 128; linear in m). Measured
(`benchmarks/bench_departure.py`, digits MLP 64-d-1, 1797 inputs, 2000 steps, 2 shared cores,
warm): 0.36 s at d = 256 and 0.37 s at d = 1024, against 3.6 s and 12.3 s at the full width and
1.65 s / 3.1 s for the rest of `predict`: 18 % and 11 % of the total (m k p = 1.2e5). The cost
grows with m k p faster than the rest of `predict`: at the issue's scale (m = 20000 inputs of
dimension 256, p = 257, d = 1024, 300 steps; m k p = 5.1e6) 33 s against 22 s, 60 %; at
m = 6000, dimension 160, d = 1024, 300 steps (m k p = 9.7e5) 3.35 s against 1.10 s warm, 75 %
(`benchmarks/departure_scale.py`, warm, 2 loaded cores). It is linear in m k p
(0.36 s at 1.2e5, 3.35 s at 9.7e5) while `predict`'s own cost depends on the steps. So `predict`
estimates it by default only up to m k p = `AUTO_SIZE` = 2e5 (`departure_on`; between 1.2e5 and
9.7e5 not measured); ``estimate_departure=True`` forces it. The first call compiles (about 8 s,
independent of d; nqf's persistent compilation cache keeps it for later processes).

**Accuracy** (`benchmarks/departure_table.py`): first order in the remainder, the estimate
catches a departure inside the learning phase (a strong cubic term) and misses the late ones that
feature learning drives (GELU at init 0.05, measured 99.5; the module's own init, measured 46):
the table is in that script's docstring.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._core._errors import NQFWarning
from ..data import FeedForwardData, Network
from ..data._model import as_model
from ..solvers import FlowSolution

_MAX_REMAINDER_TIMES = 24
_GROUPS = 8
DEFAULT_NEURONS = 64
INIT_GAP_TOL = 0.01  # init_gap above this fraction of L(0) warns InitScaleWarning
_ADDITIVE_INPUTS = 4
AUTO_SIZE = 200_000  # predict's default estimates the departure up to m k p data entries (measured shares below)


class InitScaleWarning(NQFWarning):
    """The initialization is not small: the module's loss along the NQF's path differs from the
    NQF's loss by more than `INIT_GAP_TOL` (1 %) of L(0) at W0 or after a short time (`init_gap`),
    so the NQF (Theorem 1's expansion at W = 0) does not describe the module from the start."""


@dataclasses.dataclass(frozen=True)
class WeightPath:
    """The NQF's weights along its saved times: W(t_i) = c_i 1^T + F_i Z (p, d), F_i (p, r) the
    saved factor, Z (r, d) fixed by W0 (None: the identity, F_i = W(t_i)), c_i (p,) a mean part
    (the factor map with mu) or 0.
    Calling it, ``path(i)``, gives W(t_i) (p, d); `columns(i, cols)` only the columns `cols`;
    `order(i)` the order parameters (M, mu) = (W W^T, W 1) at cost independent of d."""

    factor: Callable[[int], np.ndarray]  # i -> F_i (p, r)
    Z: np.ndarray | None
    mean: Callable[[int], np.ndarray] | None = None  # i -> c_i (p,), or None
    d: int = dataclasses.field(init=False)
    _zz: np.ndarray | None = dataclasses.field(init=False, repr=False)
    _z1: np.ndarray | None = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        Z = self.Z
        d = np.shape(self.factor(0))[1] if Z is None else Z.shape[1]
        object.__setattr__(self, "d", int(d))
        object.__setattr__(self, "_zz", None if Z is None else Z @ Z.T)
        object.__setattr__(self, "_z1", None if Z is None else Z.sum(axis=1))

    def columns(self, i: int, cols) -> np.ndarray:
        F = np.asarray(self.factor(i))
        W = F[:, cols] if self.Z is None else F @ self.Z[:, cols]
        return W if self.mean is None else W + np.asarray(self.mean(i))[:, None]

    def __call__(self, i: int) -> np.ndarray:
        return self.columns(i, slice(None))

    def order(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        F = np.asarray(self.factor(i))
        if self._zz is None or self._z1 is None:
            Fz, M = F.sum(axis=1), F @ F.T
        else:
            Fz, M = F @ self._z1, F @ self._zz @ F.T
        mu = Fz
        if self.mean is not None:
            c = np.asarray(self.mean(i))
            M = M + self.d * np.outer(c, c) + np.outer(c, Fz) + np.outer(Fz, c)
            mu = mu + self.d * c
        return M, mu


def weights_along(traj, W0) -> WeightPath | None:
    """The NQF's weights at the saved times as a `WeightPath` (``path(i)`` -> (p, d)), or None
    where the closed solution does not carry them: the factor flow from F0 (`_flow_factor`) has
    W(t) = F(t) F0^+ W0; the factor map has W_t = mu_t 1^T / d + L_t Z with Z fixed by W0
    (L_0 Z = W0 - mu_0 1^T / d)."""
    if isinstance(traj, FlowSolution):
        if traj.form != "factor" or not traj.init_is_factor:
            return None
        F0 = np.asarray(traj.init)
        Z = None if F0.shape == W0.shape else np.linalg.lstsq(F0, W0, rcond=None)[0]
        return WeightPath(lambda i: np.asarray(traj.ys[i]), Z)
    if getattr(traj, "L", None) is None:
        return None
    d = W0.shape[1]
    L = np.asarray(traj.L)
    if traj.mu is None:
        return WeightPath(lambda i: L[i], np.linalg.lstsq(L[0], W0, rcond=None)[0])
    mu = np.asarray(traj.mu)
    Z = np.linalg.lstsq(L[0], W0 - W0.mean(axis=1, keepdims=True), rcond=None)[0]
    return WeightPath(lambda i: L[i], Z, lambda i: mu[i] / d)


@dataclasses.dataclass(frozen=True)
class Departure:
    """`remainder`'s result: saved times `t` (n_r,) at which the estimate was evaluated; `gap`
    (n_r,) = |R(t) - drift(t)| / L(0) with its jackknife standard error `gap_se` (n_r,);
    `module_gap` (n_r,) = |L(module at W(t)) - L_NQF| / L(0); `estimate`: the first time
    gap > gap_tol (inf if none, nan without W(t)); `interval` (2,): the first times gap + 2 se and
    gap - 2 se exceed gap_tol; `settings`: ``neurons`` (s), ``groups`` (G), ``sampling``."""

    t: np.ndarray
    gap: np.ndarray
    gap_se: np.ndarray
    module_gap: np.ndarray
    estimate: float
    interval: np.ndarray
    settings: dict


def departure_on(estimate_departure: bool | None, size: int) -> tuple[bool, str]:
    """Whether `predict` estimates the departure: `estimate_departure`, or by default (None) when
    the data's m k p entries (`size`) are at most `AUTO_SIZE`; and why not (``""`` when on)."""
    if estimate_departure is None:
        if size <= AUTO_SIZE:
            return True, ""
        return False, (
            f"off by default: m k p = {size} > {AUTO_SIZE} (its cost grows with m k p and passes ~20 % of predict's; "
            "estimate_departure=True computes it)"
        )
    return bool(estimate_departure), "" if estimate_departure else "estimate_departure=False"


def check_neurons(neurons, d: int) -> int:
    """The subsample size s of the departure estimate: `neurons` (None: min(d, 64)) in [2, d]."""
    if neurons is None:
        return min(d, DEFAULT_NEURONS)
    if isinstance(neurons, bool) or not isinstance(neurons, (int, np.integer)) or not 2 <= neurons <= d:
        raise ValueError(
            f"`departure_neurons` must be an integer s with 2 <= s <= d = {d} (the module's width; s = d is "
            f"the full width); found {neurons!r}."
        )
    return int(neurons)


def remainder(net: Network, model, x, y, t, loss, path: WeightPath | None, gap_tol, *, neurons=None, seed=0):
    """The departure estimate along the NQF's weights W(t) (a `Departure`), from s neurons.

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
    NQF after the learning phase; the drift stops at rate / (2 curvature) (the curvature of L_T
    along P_null grad R). Without feed-forward structure only the static term is used.
    `gap` = |G| / L(0); the estimate is the first saved time with gap > `gap_tol`, at up to 24
    saved times `t` of the n saved ones; `loss` (n,) the NQF's loss (L(0) = loss[0]).

    `neurons` (s, default min(d, 64)) random neurons (numpy `seed`) in G = min(8, s) groups:
    the sums over the d neurons are (d / s) times the sums over them, with a jackknife error bar
    (module docstring); the cost is that of a width-s module, independent of d.

    **Raises:** `ValueError` for `neurons` outside [2, d]."""
    if path is None:
        empty = np.zeros(0)
        return Departure(empty, empty, empty, empty, float("nan"), np.full(2, np.nan), {})
    d = path.d
    s = check_neurons(neurons, d)
    idx = np.unique(np.linspace(0, len(t) - 1, min(len(t), _MAX_REMAINDER_TIMES)).round().astype(int))
    groups = np.array_split(np.random.default_rng(seed).permutation(d)[:s], min(_GROUPS, s))
    sampling = "all d neurons" if s == d else f"{s} of the d = {d} neurons"
    if len(groups) > 1 and not _additive(net, path(idx[-1]), max(map(len, groups)), x):  # also at s = d
        groups, s = [np.arange(d)], d
        sampling = "the full width: the module is not a sum over its neurons (cross-neuron terms)"
    parts = _parts(net, model, x, y, path, idx, groups)
    ts, L0 = t[idx], float(loss[0])
    gaps = _gap_curves(ts, parts, L0)  # (G + 1, n_r)
    fpc = np.sqrt(max(0.0, 1.0 - s / d))
    se = fpc * _jackknife_se(gaps[1:]) if len(groups) > 1 else np.zeros(len(ts))
    mgap = np.abs(parts[:, 3, 0]) / L0
    first = lambda v: float(ts[np.flatnonzero(v > gap_tol)[0]]) if np.any(v > gap_tol) else float("inf")  # noqa: E731
    interval = np.array([first(gaps[0] + 2 * se), first(gaps[0] - 2 * se)])
    settings = dict(neurons=s, groups=len(groups), sampling=sampling, seed=seed)
    return Departure(ts, gaps[0], se, mgap, first(gaps[0]), interval, settings)


def _parts(net: Network, model, x, y, path: WeightPath, idx, groups) -> np.ndarray:
    """(len(idx), 4, G + 1): `_remainder_program`'s rows at the saved times `idx` for the neuron
    groups `groups` (G index arrays into the d columns), per replicate of `_replicate_weights`."""
    model = as_model(model)
    basis = _output_span(model.data) if isinstance(model.data, FeedForwardData) and not model.has_mean_field else None
    front = None if basis is None else basis[2]
    fn = net._compiled(("remainder", front), lambda: _remainder_program(net, front))
    sizes = [len(g) for g in groups]
    rep, own = (jnp.asarray(f(sizes, path.d)) for f in (_replicate_weights, _residual_weights))
    span = None if basis is None else basis[:2]
    yf = jnp.asarray(y).reshape(-1)
    n = max(map(len, groups))
    parts = []
    for i in idx:
        Wg = np.zeros((len(groups), net.p, n))
        for j, g in enumerate(groups):
            Wg[j, :, : len(g)] = path.columns(i, g)
        M, mu = path.order(i)
        parts.append(np.asarray(fn(jnp.asarray(Wg), x, yf, jnp.asarray(M), jnp.asarray(mu), model, span, rep, own)))
    return np.array(parts)


def _replicate_weights(sizes, d: int) -> np.ndarray:
    """(G + 1, G) weights of the group sums: row 0 the pooled estimate (d / s), row j + 1 the
    estimate without group j (d / (s - n_j)); G = 1: the pooled row only."""
    sizes = np.asarray(sizes, dtype=float)
    s = sizes.sum()
    rows = [np.full(len(sizes), d / s)]
    if len(sizes) > 1:
        rows += [np.where(np.arange(len(sizes)) == j, 0.0, d / (s - sizes[j])) for j in range(len(sizes))]
    return np.array(rows)


def _residual_weights(sizes, d: int) -> np.ndarray:
    """(G, G) weights of the group sums in the residual that weights group g's gradient: its own
    neurons once, the other groups' scaled to the other d - n_g neurons ((d - n_g) / (s - n_g)),
    so a neuron's own term is not inflated by d / s (at s = d: the exact residual)."""
    sizes = np.asarray(sizes, dtype=float)
    s, G = sizes.sum(), len(sizes)
    if G == 1:
        return np.ones((1, 1))
    w = ((d - sizes) / (s - sizes))[:, None] * np.ones((G, G))
    np.fill_diagonal(w, 1.0)
    return w


def _jackknife_se(reps: np.ndarray) -> np.ndarray:
    """Delete-one-group jackknife standard error over the first axis (G replicates)."""
    G = reps.shape[0]
    return np.sqrt((G - 1) / G * np.sum((reps - reps.mean(axis=0)) ** 2, axis=0))


def _gap_curves(ts, parts, L0: float) -> np.ndarray:
    """|R - drift| / L(0) (replicates, times) from parts (times, 4, replicates): the drift is the
    trapezoid integral of the rate, capped by the saturation."""
    R, rate, saturation = (np.moveaxis(parts[:, j], 0, -1) for j in range(3))
    steps = 0.5 * (rate[:, 1:] + rate[:, :-1]) * np.diff(ts)
    drift = np.minimum(np.concatenate([np.zeros((rate.shape[0], 1)), np.cumsum(steps, axis=1)], axis=1), saturation)
    return np.abs(R - drift) / L0


def _additive(net: Network, W, n: int, x, rtol: float = 1e-6) -> bool:
    """Whether the module is a sum over its neurons at W (p, d) on a few inputs: its output at
    the full width against f(0) + the sum over blocks of n columns of (f(block) - f(0))."""
    p, d = W.shape
    nb = -(-d // n)
    padded = np.zeros((p, nb * n))
    padded[:, :d] = W
    blocks = jnp.asarray(padded.reshape(p, nb, n).transpose(1, 0, 2))
    xs = jax.tree_util.tree_map(lambda a: a[:_ADDITIVE_INPUTS], x)
    full, parts, f0 = (
        np.asarray(v) for v in net._compiled(("additive",), lambda: _additive_program(net))(jnp.asarray(W), blocks, xs)
    )
    summed = f0 + np.sum(parts - f0, axis=0)
    scale = np.abs(full - f0) + np.sum(np.abs(parts - f0), axis=0)
    floor = 1e3 * np.finfo(float).eps * nb * (np.abs(f0) + np.abs(parts).max(axis=0))
    return bool(np.all(np.abs(full - summed) <= rtol * scale + floor))


def _additive_program(net: Network):
    def outputs(W, xs):
        return jax.vmap(lambda xx: jnp.atleast_1d(net(W, xx)))(xs)

    def program(W, blocks, xs):
        return outputs(W, xs), jax.vmap(lambda B: outputs(B, xs))(blocks), outputs(jnp.zeros((W.shape[0], 1)), xs)

    return jax.jit(program)


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


def _span_dims(span) -> tuple[int, int]:
    first, Ub = span
    return (first.shape[0], Ub.shape[0]) if Ub is not None else (first.shape[1], first.shape[2])


def _coefficients(P1, P2, R, span):
    """The least-squares X in S of the projection of a gradient on range(J^T): the normal
    equations X P2 + P1 X = R projected on S (`_null_part`)."""
    first, Ub = span
    if Ub is not None:  # S = span(Ua) (x) span(Ub): a Sylvester equation in (sa, sb) coordinates
        Ua = first
        la, Qa = jnp.linalg.eigh(Ua.T @ P1 @ Ua)
        lb, Qb = jnp.linalg.eigh(Ub.T @ P2 @ Ub)
        s = la[:, None] + lb[None, :]
        Y = Qa @ (_pinv_sym(s, 1e-12 * jnp.max(s)) * (Qa.T @ (Ua.T @ R @ Ub) @ Qb)) @ Qb.T
        return Ua @ Y @ Ub.T
    B = first  # a basis B (s, k, q) of S and its Gram matrix (eigh: jnp.linalg.lstsq's SVD is far slower)
    G = jnp.einsum("jac,lac->jl", B, jnp.einsum("jab,bc->jac", B, P2) + jnp.einsum("ab,jbc->jac", P1, B))
    lam, Q = jnp.linalg.eigh(G)
    c = Q @ (_pinv_sym(lam, 1e-12 * jnp.max(lam)) * (Q.T @ jnp.einsum("jab,ab->j", B, R)))
    return jnp.einsum("j,jab->ab", c, B)


def _null_part(W, g, span, front: int):
    """P_null g for a gradient g (p, d) at W: g minus its least-squares projection on the range
    of the NQF's output Jacobian, range(J^T) = {[0; X Z2; X^T Z1; 0] : X in S} (feed-forward data;
    `span` from `_output_span`, without its `front`). The normal equations for X are
    X P2 + P1 X = R (projected on S), P1 = Z1 Z1^T, P2 = Z2 Z2^T, R = g1 Z2^T + Z1 g2^T."""
    k, q = _span_dims(span)
    Z1, Z2 = W[front : front + k], W[front + k : front + k + q]
    g1, g2 = g[front : front + k], g[front + k : front + k + q]
    X = _coefficients(Z1 @ Z1.T, Z2 @ Z2.T, g1 @ Z2.T + Z1 @ g2.T, span)
    return g.at[front : front + k].add(-X @ Z2).at[front + k : front + k + q].add(-X.T @ Z1)


def _group_terms(net, Wg, x):
    """((G, m k) T3 + T4, (G, m k) module outputs) of the G width-n modules Wg (G, p, n)."""

    def one(W):
        t3, t4, full = jax.vmap(lambda xx: _taylor_one(net, W, xx))(x)
        return (t3 + t4).reshape(-1), full.reshape(-1)

    return jax.vmap(one)(Wg)


def _remainder_program(net: Network, front: int | None):
    """jit(Wg, x, y, M, mu, model, span, rep, own) -> (4, G + 1): per replicate (rows of `rep`,
    the group weights of `_replicate_weights`) the static loss change R_T of the next-terms
    remainder T3 + T4, the drift rate |P_null grad R|^2, the most the drift can gain before the
    curvature along it stops it (0 and inf without feed-forward structure, `front` None), and
    the static loss change of the module itself. Wg (G, p, n): the groups' neurons (zero
    columns pad a short group: a zero neuron adds nothing to a sum); (M, mu) = (W W^T, W 1) of
    the full width, so the NQF's outputs are exact, and the module's outputs are the NQF's plus
    the neuron sum of (module - NQF) (a control variate: only the remainder is sampled);
    `own` (`_residual_weights`): the residual that weights each group's gradient."""

    def parts(Wg, x, y, M, mu, model, span, rep, own):
        mse = lambda f: jnp.mean((f - y) ** 2, axis=-1)  # noqa: E731
        f_nqf = model.outputs(M, mu)
        L_nqf = mse(f_nqf)
        f0 = jax.vmap(lambda xx: jnp.atleast_1d(net(jnp.zeros((Wg.shape[1], 1)), xx)))(x).reshape(-1)
        r_g, pull, out_g = jax.vjp(lambda V: _group_terms(net, V, x), Wg, has_aux=True)
        r = rep @ r_g
        nqf_at = lambda V: model.outputs_factor(V, jnp.sum(V, axis=1))  # noqa: E731
        nqf0 = nqf_at(jnp.zeros((Wg.shape[1], 1)))
        dev_g = out_g - f0 - (jax.vmap(nqf_at)(Wg) - nqf0)  # each group's module minus its NQF terms
        R_t, R_m = mse(f_nqf + r) - L_nqf, mse(f_nqf + (f0 - nqf0) + rep @ dev_g) - L_nqf
        if front is None:
            return jnp.stack([R_t, jnp.zeros_like(R_t), jnp.full_like(R_t, jnp.inf), R_m])
        e_g = 2.0 / y.size * (f_nqf + own @ r_g - y)  # (G, m k): each group's residual weights
        (g,) = pull(e_g)  # (G, p, n): columns of grad R over the groups
        e = 2.0 / y.size * (f_nqf + r[0] - y)
        rate, u = _drift_rate(Wg, g, M, span, front, rep)
        saturation = _saturation(net, model, Wg, x, u, e, r_g, rate, rep)
        return jnp.stack([R_t, rate, saturation, R_m])

    return jax.jit(parts)


def _drift_rate(Wg, g, M, span, front: int, rep):
    """Per replicate, |P_null g|^2 = |g|^2 - <X, R> with the neuron sums |g|^2 and
    R = sum_i g1_i z2_i^T + z1_i g2_i^T weighted by `rep` and P1, P2 exact from M; and the
    pooled P_null g over the groups' columns (G, p, n)."""
    k, q = _span_dims(span)
    a, b = slice(front, front + k), slice(front + k, front + k + q)
    Rg = jnp.einsum("gan,gbn->gab", g[:, a], Wg[:, b]) + jnp.einsum("gan,gbn->gab", Wg[:, a], g[:, b])
    Rr = jnp.einsum("rg,gab->rab", rep, Rg)
    X = jax.vmap(lambda R: _coefficients(M[a, a], M[b, b], R, span))(Rr)
    rate = jnp.maximum(rep @ jnp.sum(g**2, axis=(1, 2)) - jnp.sum(X * Rr, axis=(1, 2)), 0.0)
    u = (
        g.at[:, a]
        .add(-jnp.einsum("ab,gbn->gan", X[0], Wg[:, b]))
        .at[:, b]
        .add(-jnp.einsum("ab,gan->gbn", X[0], Wg[:, a]))
    )
    return rate, u


def _saturation(net, model, Wg, x, u, e, r_g, rate, rep):
    """rate / (2 c), c = u^T Hess(L_T) u / |u|^2 along u = P_null grad R (inf where c <= 0):
    Gauss-Newton (2 / (m k)) |J_r u|^2 (J_NQF u = 0) plus e . u^T Hess(f_NQF + r) u, every term a
    neuron sum; J_r u and u^T Hess(r) u by central differences of the groups' T3 + T4 at a step
    of 1e-3 |W| (truncation ~ 1e-6 relative)."""
    norm = jnp.sqrt(jnp.sum(u**2))
    h = 1e-3 * jnp.sqrt(jnp.sum(Wg**2)) / jnp.where(norm > 0, norm, 1.0)
    r_plus, r_minus = _group_terms(net, Wg + h * u, x)[0], _group_terms(net, Wg - h * u, x)[0]
    slope = (r_plus - r_minus) / (2 * h)
    second = (r_plus - 2 * r_g + r_minus) @ e / h**2 + 2 * jax.vmap(lambda U: e @ model.data.traces_factor(U))(u)
    uu = rep @ jnp.sum(u**2, axis=(1, 2))
    curv = (2.0 / e.size * jnp.sum((rep @ slope) ** 2, axis=1) + rep @ second) / jnp.where(uu > 0, uu, 1.0)
    return jnp.where(curv > 0, rate / (2.0 * jnp.where(curv > 0, curv, 1.0)), jnp.inf)


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


# -- the init-size check --------------------------------------------------------------------------


def init_gap(net: Network, model, x, y, W0, W_short, loss=None) -> np.ndarray:
    """The module-vs-NQF loss gap (2,) |L_module(W) - L_NQF(W)| / L_NQF(W0) at W = W0 and at
    W = `W_short` (p, d), the NQF's weights after a short time (nan where None). The NQF is the
    module's expansion at W = 0 (Theorem 1): a gap of more than a per cent of L(0) says the
    initialization is not small. x: the m inputs, y (m,) or (m, k) labels (MSE over all), or
    with a `PerSampleLoss` `loss` its label rows (m, k) (`PerSampleLoss.targets`)."""
    model = as_model(model)
    yf = jnp.asarray(y).reshape(-1)
    fn = net._compiled(("init_gap", loss), lambda: jax.jit(_loss_pair(net, loss)))
    pairs = [np.full(2, np.nan) if W is None else np.asarray(fn(jnp.asarray(W), x, yf, model)) for W in (W0, W_short)]
    L0 = pairs[0][1]
    return np.array([abs(a - b) / L0 for a, b in pairs])


def _loss_pair(net: Network, loss=None):
    mean = (lambda f, y: jnp.mean((f - y) ** 2)) if loss is None else (lambda f, y: jnp.mean(loss.value(f, y)))

    def losses(W, x, y, model):
        out = jax.vmap(lambda xx: jnp.atleast_1d(net(W, xx)))(x).reshape(-1)
        return jnp.stack([mean(out, y), mean(model.outputs_factor(W, jnp.sum(W, axis=1)), y)])

    return losses


def check_init(net: Network, model, x, y, W0, path: WeightPath | None, t, loss=None) -> tuple[np.ndarray, float]:
    """`init_gap` at W0 and at the first saved time t_s >= 5 % of the horizon t[-1] (the NQF's
    path `path`; nan without it); warns `InitScaleWarning` when either exceeds `INIT_GAP_TOL`.
    Returns (init_gap (2,), t_s)."""
    i = int(np.searchsorted(t, 0.05 * t[-1]))
    gap = init_gap(net, model, x, y, W0, None if path is None else path(i), loss)
    if np.nanmax(gap) > INIT_GAP_TOL:
        warnings.warn(
            f"The initialization is not small: the module's loss differs from its NQF's by {gap[0]:.3g} L(0) at "
            f"W0 and {gap[1]:.3g} L(0) at t = {t[i]:.4g} on the NQF's path (more than {INIT_GAP_TOL:g} L(0)); "
            "the NQF (the module's expansion at W = 0) does not describe this start, and the prediction may be "
            "off from the first steps. Use a smaller `init_scale` (or `W0`).",
            InitScaleWarning,
            stacklevel=3,
        )
    return gap, float(t[i])
