"""Exact discrete training maps on the order parameters (M, mu) (Theorem 2, Corollary 2).

For the general NQF model f_x(W) = f0(x) + g(x)^T mu + mu^T B(x) mu + Tr[M A(x)] (Eq. E2,
`nqf.NQFModel`), the batch loss L = sum_x w_x ell(f_x, y_x) (`nqf.PerSampleLoss`, `nqf.batch_weights`) and
weight decay gamma (penalty gamma/2 |W|^2) have the weight gradient

    grad_W (L + gamma/2 |W|^2) = v 1^T + (H + gamma I) W,                                   (E4)
    v = sum_x l'_x u(x),  u(x) = g(x) + 2 B(x) mu,  H = sum_x 2 l'_x A(x),  l'_x = dL/df_x.

Weight decay changes only H (v does not involve W's individual columns). One SGD step
W+ = W - eta grad therefore maps (M, mu) to (M+, mu+) exactly (E5-E6 with H -> H + gamma I),
whatever the width d, which enters only as a number:

    mu+ = mu - eta (d v + H mu)
    M+  = M - eta (v mu^T + mu v^T + H M + M H) + eta^2 (d v v^T + v mu^T H + H mu v^T + H M H).

Momentum (Corollary 2): every update that combines past gradients and past weights with scalar
coefficients keeps W_t = P_t W_0 + Q_t 1^T, with P_t (p, p) and Q_t (p,); the gradient of E4 is
(H P) W_0 + (v + H Q) 1^T in this representation. With the velocity V_t = VP_t W_0 + VQ_t 1^T,
heavy ball (`torch.optim.SGD` form: V <- beta V + grad, W <- W - eta V; equivalently
W+ = W - eta grad + beta (W - W_prev)) and Nesterov (W <- W - eta (grad + beta V)) act on
(P, Q, VP, VQ), and (M, mu) follow from E7:

    mu_t = P_t mu_0 + d Q_t,
    M_t  = P_t M_0 P_t^T + P_t mu_0 Q_t^T + Q_t mu_0^T P_t^T + d Q_t Q_t^T.

**Two exact forms** (`form=`), equal in exact arithmetic:

- ``"factor"`` (default): the centered factor. Write W = mu 1^T / d + L Z with Z (r, d) fixed
  (orthonormal rows, Z 1 = 0) and C = M - mu mu^T / d = L L^T (rank <= d - 1). The gradient is
  (d v + H mu) 1^T / d + (H L) Z, so every update above acts on (L, mu) (and velocities (VL,
  Vmu)) by p x p left multiplications: L+ = L - eta H L, mu+ = mu - eta (d v + H mu) for SGD, and
  M = L L^T + mu mu^T / d. Expanding M+ = L+ L+^T + mu+ mu+^T / d reproduces E6 term by term,
  and V-form momentum on (L, mu) reproduces E7. L starts as a p x p factor of C_0 (the centered
  W_0 padded with zero columns for d <= p, its QR for p < d <= 2p, eigh of R_0 R_0^T beyond; or
  eigh of M_0 - mu_0 mu_0^T / d keeping at most d - 1 modes).
- ``"M"``: E5-E6 literally on (M, mu), and E7 with (P, Q) for momentum.

Both are exact, but they differ in floating point when C is rank-deficient (d <= p, or a
low-rank W_0) and H has negative eigenvalues along directions no neuron occupies (a saddle of
the rank-constrained problem): E6 on M does not preserve rank(C), so rounding errors there grow
like (1 - eta lambda_min(H))^(2n), and P_t in E7 grows along them and cancels catastrophically in
P_t W_0. Measured (p = 5, d = 1, 500 steps, vs `nqf.train_w`): "M" 1e-13 to 1e-8 relative
without momentum and up to O(1) with momentum 0.9; "factor" at most 1e-15 in every case. The
factor form keeps the rank of C exactly, like W-space does, and is never slower (p x p products
either way).

Adam is not closed on (M, mu): its per-coordinate normalization 1/sqrt(v_hat) acts on individual
entries of W, which M = W W^T and mu = W 1 do not determine. Only the W-space simulation
`nqf.train_w(..., optimizer="adam")` is exact for it; `closed_map(optimizer="adam")` raises.

**Cost per step** (independent of d): two or three dense p x p products, O(p^3) (two for SGD in
either form, three for "M" with momentum), plus the data operations `traces` and `weighted_sum`
over the m training inputs (O(m p^2) for dense A, O(m p^2 r) for rank-r `LowRankData`) and
O(m p^2) for B. A W-space step costs O(p^2 d) on top of the same data operations (forming W W^T
and the gradient through it), so the closed map's advantage grows linearly with d once p^2 d
exceeds the data cost. A minibatch step evaluates only its b rows (`nqf.dynamics.restrict`), so m
becomes the batch size b above (for the dense, low-rank and commuting representations; any other
representation weights all m samples). Measured (`benchmarks/bench_maps.py`: MLP
data p = 65, m = 600, rank-2 A, batch 64, 1000 steps, 2-core CPU): the closed map takes ~0.2 s
at every d; W-space speed-up 1.3x, 6.8x, 47x at d = 10^2, 10^3, 10^4.

Time: step n is gradient-flow time t = eta * n; as eta -> 0 at fixed t the map converges to the
gradient flow (Eq. E10) at first order in eta.

**Under jit, vmap and grad.** `closed_sgd` validates concrete inputs on the host, then calls ONE
pure core, `_simulate` (JAX arrays in, JAX arrays out), which `closed_sgd_sweep`
(`nqf.closed_sgd_sweep`) vmaps over members. Traced inputs (inside the user's `jax.jit`, `jax.vmap`,
`jax.grad`) take the same core: value checks move to run time (`equinox.error_if`), the loops
become fixed-length scans (reverse mode), and the initial factor gets tangent rules that do not
differentiate QR or eigh (`_factor_of_C`, `_centered_factor_from_W`). `MapTrajectory` is a
registered pytree. What is skipped under tracing: `closed_sgd`'s docstring.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core import memory
from .._core._checks import REQUIRED, as_array, as_weights, check_symmetric, is_traced, keyword_options, shape_str
from .._core.io import Saveable
from ..data._model import NQFModel, as_model
from ..data._operators import AbstractData, check_initial_loss
from ._batches import batch_weights, restrict
from ._losses import PerSampleLoss, as_loss
from ._train_args import (
    any_traced,
    check_count,
    check_finite,
    check_lr_or_rates,
    check_momentum,
    check_nesterov,
    check_saves_memory,
    check_weight_decay,
    guard,
    loop_counts,
    parse_optimizer,
    resolve_loss_batches,
    save_schedule,
)
from ._training import accepts_training, step_times

__all__ = ["MapTrajectory", "closed_sgd", "closed_map", "gradient_terms"]

# Counts traces of the compiled map; tests assert that new values of the same shapes (including
# a new width d, learning rate, momentum or weight decay) do not recompile.
TRACE_COUNT = [0]

FORMS = ("factor", "M")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["steps", "t", "M", "mu", "outputs", "loss", "L", "P", "Q", "lr", "step_loss", "step_eigenvalues"],
    meta_fields=["d", "form"],
)
@dataclasses.dataclass(frozen=True, eq=False)
class MapTrajectory(Saveable):
    """Result of `closed_sgd` / `closed_map`. `n` is the number of saved steps.

    A plain frozen dataclass (it pickles) registered as a JAX pytree: the arrays and `lr` are
    leaves, `d` and `form` static. So `closed_sgd` can be returned from `jax.jit`, and
    `jax.vmap(closed_sgd-calling function)` returns one `MapTrajectory` whose leaves carry a
    leading batch axis. Fields are numpy arrays from a plain call, JAX arrays under tracing.

    **Attributes:**

    - `steps`: saved step numbers, int array (n,); `t`: gradient-flow times lr * steps, (n,).
    - `M`: M = W W^T after those steps, (n, p, p).
    - `mu`: mu = W 1, (n, p); None for a plain model (g = B = 0) started without `mu0`.
    - `outputs`: f_x on all m training inputs, (n, m).
    - `loss`: full-training-set loss (1/m) sum_mu ell(f_mu, y_mu), without the weight-decay
      penalty, (n,).
    - `L`: the centered factor, L_t L_t^T = M_t - mu_t mu_t^T / d (= M_t without `mu0`),
      (n, p, p), for ``form="factor"``: W_t = mu_t 1^T / d + L_t Z for one Z (p, d) fixed by
      W_0; None for ``form="M"``.
    - `P`, `Q`: the Corollary 2 representation W_t = P_t W_0 + Q_t 1^T, (n, p, p) and (n, p),
      for ``form="M"`` with momentum; None otherwise.
    - `d`: the width (None if it was not needed); `lr`: the learning rate (or the per-step
      rates (steps,) of a schedule); `form`.
    - `step_loss` (steps + 1,): the full-training-set loss L(W_j) after every step j = 0..steps
      (time t = lr j), and `step_eigenvalues` (steps + 1, p): the eigenvalues of M_j in
      decreasing order; None unless `closed_sgd(step_values=...)` asked for them.
    """

    steps: np.ndarray
    t: np.ndarray | Array
    M: np.ndarray
    mu: np.ndarray | None
    outputs: np.ndarray
    loss: np.ndarray
    L: np.ndarray | None
    P: np.ndarray | None
    Q: np.ndarray | None
    d: int | None
    lr: float | np.ndarray | Array
    form: str
    # keyword-only with defaults: a subclass (`nqf.MapSweep`) may add fields without defaults
    step_loss: np.ndarray | None = dataclasses.field(default=None, kw_only=True)
    step_eigenvalues: np.ndarray | None = dataclasses.field(default=None, kw_only=True)

    @property
    def step_times(self) -> np.ndarray | None:
        """Times t = lr j of the per-step values, j = 0..steps, (steps + 1,); None without them."""
        if self.step_loss is None:
            return None
        return np.asarray(step_times(self.lr, np.shape(self.step_loss)[-1] - 1))


STEP_VALUES = ("none", "loss", "all")


def gradient_terms(
    model: NQFModel,
    w: Float[Array, " m"],
    loss: PerSampleLoss,
    M: Float[Array, "p p"],
    mu: Float[Array, " p"],
    gamma: float | Float[Array, ""],
) -> tuple[Float[Array, " p"], Float[Array, "p p"]]:
    """(v, H + gamma I) of Eq. E4 for per-sample weights `w` (one per sample of `model`, e.g. a
    minibatch restricted with `nqf.dynamics.restrict`): shapes (p,) and (p, p).

    l'_mu = w_mu ell'(f_mu, y_mu); v = sum_mu l'_mu (g_mu + 2 B_mu mu); H = sum_mu 2 l'_mu A_mu.
    """
    return _gradient_terms(model, w, loss, M, mu, gamma)[:2]


def _gradient_terms(model: NQFModel, w, loss: PerSampleLoss, M, mu, gamma):
    """(v, H + gamma I, f): `gradient_terms` and the outputs f (m,) it evaluated."""
    f = model.outputs(M, mu)
    lp = w * loss.grad(f, model.y)
    H = model.data.weighted_sum(2.0 * lp) + gamma * jnp.eye(model.p)
    v = jnp.zeros(model.p)
    if model.g is not None:
        v = v + lp @ model.g
    if model.B is not None:
        v = v + 2.0 * jnp.einsum("m,mij,j->i", lp, model.B, mu)
    return v, H, f


def _factor_gradient(model: NQFModel, w, loss: PerSampleLoss, L, mu, d, gamma):
    """(H L, d v + H mu) of Eq. E4 with H = sum 2 l'_mu A_mu + gamma I applied through the data
    structure (`apply`, `traces_factor`: no p x p matrix is formed for low-rank or feed-forward
    data), for M = L L^T + mu mu^T / d: shapes (p, r) and (p,)."""
    F = jnp.concatenate([L, mu[:, None] / jnp.sqrt(d)], axis=1)  # M = F F^T
    f = model.outputs_factor(F, mu)
    lp = w * loss.grad(f, model.y)
    HX = model.data.apply(2.0 * lp, jnp.concatenate([L, mu[:, None]], axis=1)) + gamma * jnp.concatenate(
        [L, mu[:, None]], axis=1
    )
    v = jnp.zeros(model.p)
    if model.g is not None:
        v = v + lp @ model.g
    if model.B is not None:
        v = v + 2.0 * jnp.einsum("m,mij,j->i", lp, model.B, mu)
    return HX[:, :-1], d * v + HX[:, -1], f


def _sym(X):
    return 0.5 * (X + X.T)


class _EMap(eqx.Module):
    """Theorem 2's maps E5-E6 literally, on the state (M, mu) (``form="M"``, no momentum)."""

    model: NQFModel
    loss: PerSampleLoss
    lr: jax.Array
    d: jax.Array
    gamma: jax.Array

    def init(self, M0, mu0, L0):
        return (M0, mu0)

    def order_params(self, state):
        return state

    def outputs(self, state):
        return self.model.outputs(*state)

    def extras(self, state):
        return {}

    def step(self, state, batch):
        """(the state after one step, the batch outputs f at `state`)."""
        M, mu = state
        lr, d = self.lr, self.d
        v, H, f = _gradient_terms(batch[0], batch[1], self.loss, M, mu, self.gamma)
        HM = H @ M
        Hmu = H @ mu
        vmu = jnp.outer(v, mu)
        vHmu = jnp.outer(v, Hmu)
        first = vmu + vmu.T + HM + HM.T
        second = d * jnp.outer(v, v) + vHmu + vHmu.T + HM @ H
        return (_sym(M - lr * first + lr**2 * second), mu - lr * (d * v + Hmu)), f


class _PQMap(eqx.Module):
    """Corollary 2 with E7 on the state (P, Q, VP, VQ): W = P W0 + Q 1^T, velocity
    VP W0 + VQ 1^T (``form="M"`` with momentum)."""

    model: NQFModel
    loss: PerSampleLoss
    lr: jax.Array
    d: jax.Array
    gamma: jax.Array
    beta: jax.Array
    M0: jax.Array
    mu0: jax.Array
    nesterov: bool = eqx.field(static=True)

    def init(self, M0, mu0, L0):
        p = self.model.p
        return (jnp.eye(p), jnp.zeros(p), jnp.zeros((p, p)), jnp.zeros(p))

    def order_params(self, state):
        P, Q, _, _ = state
        Pmu = P @ self.mu0
        PQ = jnp.outer(Pmu, Q)
        M = P @ self.M0 @ P.T + PQ + PQ.T + self.d * jnp.outer(Q, Q)
        return (_sym(M), Pmu + self.d * Q)

    def outputs(self, state):
        return self.model.outputs(*self.order_params(state))

    def extras(self, state):
        return {"P": state[0], "Q": state[1]}

    def step(self, state, batch):
        """(the state after one step, the batch outputs f at `state`)."""
        P, Q, VP, VQ = state
        M, mu = self.order_params(state)
        v, H, f = _gradient_terms(batch[0], batch[1], self.loss, M, mu, self.gamma)
        gP, gQ = H @ P, v + H @ Q
        VP, VQ = self.beta * VP + gP, self.beta * VQ + gQ
        if self.nesterov:
            sP, sQ = gP + self.beta * VP, gQ + self.beta * VQ
        else:
            sP, sQ = VP, VQ
        return (P - self.lr * sP, Q - self.lr * sQ, VP, VQ), f


class _FactorMap(eqx.Module):
    """The same maps on the centered factor (``form="factor"``, the default).

    W = mu 1^T / d + L Z with Z (r, d) fixed (orthonormal rows, Z 1 = 0): the gradient of E4 is
    (d v + H mu) 1^T / d + (H L) Z, so SGD and momentum act on (L, mu) (and the velocities
    (VL, Vmu)) by p x p left multiplications, and M = L L^T + mu mu^T / d. Expanding M+ gives
    E6 term by term; unlike iterating E6 on M, the rank of C = M - mu mu^T / d (at most d - 1)
    is kept exactly, so rounding cannot grow along directions that no neuron occupies.
    """

    model: NQFModel
    loss: PerSampleLoss
    lr: jax.Array
    d: jax.Array
    gamma: jax.Array
    beta: jax.Array
    momentum: bool = eqx.field(static=True)
    nesterov: bool = eqx.field(static=True)

    def init(self, M0, mu0, L0):
        if self.momentum:
            return (L0, mu0, jnp.zeros_like(L0), jnp.zeros_like(mu0))
        return (L0, mu0)

    def order_params(self, state):
        L, mu = state[0], state[1]
        return (_sym(L @ L.T + jnp.outer(mu, mu) / self.d), mu)

    def outputs(self, state):  # the step's own evaluation (`_factor_gradient`): shared by a full batch
        L, mu = state[0], state[1]
        return self.model.outputs_factor(jnp.concatenate([L, mu[:, None] / jnp.sqrt(self.d)], axis=1), mu)

    def extras(self, state):
        return {"L": state[0]}

    def step(self, state, batch):
        """(the state after one step, the batch outputs f at `state`)."""
        L, mu = state[0], state[1]
        gL, gmu, f = _factor_gradient(batch[0], batch[1], self.loss, L, mu, self.d, self.gamma)
        if not self.momentum:
            return (L - self.lr * gL, mu - self.lr * gmu), f
        VL, Vmu = self.beta * state[2] + gL, self.beta * state[3] + gmu
        if self.nesterov:
            sL, smu = gL + self.beta * VL, gmu + self.beta * Vmu
        else:
            sL, smu = VL, Vmu
        return (L - self.lr * sL, mu - self.lr * smu, VL, Vmu), f


def _stepper(model: NQFModel, loss: PerSampleLoss, config, params, init):
    """The map of `config` = (form, momentum?, nesterov) with `params` = (lr, d, gamma, beta)
    and, for ``form="M"`` with momentum, the initial order parameters of `init`."""
    form, momentum, nesterov = config
    lr, d, gamma, beta = params
    M0, mu0, _ = init
    common = dict(model=model, loss=loss, lr=lr, d=d, gamma=gamma)
    if form == "factor":
        return _FactorMap(**common, beta=beta, momentum=momentum, nesterov=nesterov)
    if momentum:
        return _PQMap(**common, beta=beta, M0=M0, mu0=mu0, nesterov=nesterov)
    return _EMap(**common)


def at_step(stepper, k):
    """The stepper of step k: itself for a constant learning rate, else with lr = lr[k] of its
    per-step rates (a schedule, `nqf.SGD`)."""
    if jnp.ndim(stepper.lr) == 0:
        return stepper
    return eqx.tree_at(lambda s: s.lr, stepper, stepper.lr[k])


def step_batch(model: NQFModel, idx, k):
    """(model restricted to step k's batch, per-sample weights) for the steppers' `step`: the
    full batch (w = 1/m) when the schedule `idx` (steps, b) is None, else row k of `idx`
    (`restrict`; an unknown data representation weights all m samples by `batch_weights`).
    Shared by `_simulate` and the diffrax solver `nqf.dynamics.ExactMap`."""
    m = model.m
    if idx is None:
        return model, jnp.full(m, 1.0 / m)
    rows = jax.lax.dynamic_index_in_dim(idx, k, keepdims=False)
    sub = restrict(model, rows)
    if sub is None:  # unknown data representation: weight all m samples
        return model, batch_weights(rows, m)
    return sub, jnp.full(rows.shape[0], 1.0 / rows.shape[0])


def _simulate(
    model,
    loss,
    config,
    params,
    init,
    idx,
    n_saves: int,
    save_every,
    remainder,
    has_remainder: bool,
    step_values: str = "none",
):
    """The one traceable core of `closed_sgd`, `closed_map` and `closed_sgd_sweep`: a pure
    function of JAX arrays (no host checks, no host values), so it runs under jit, vmap (the
    sweep vmaps it over members) and grad.

    `config` = (form, momentum?, nesterov) (static); `params` = (lr, d, gamma, beta) scalars;
    `init` = (M0 (p, p), mu0 (p,), L0 (p, p)) with L0 L0^T = M0 - mu0 mu0^T / d; `idx` the batch
    schedule (steps, b) or None. `save_every`, `remainder`: int32 arrays (one compilation for
    any `steps` with the same number of saves) or Python ints (fixed-length loops, which reverse-
    mode autodiff needs, and which `step_values` other than ``"none"`` need: the per-step values
    are the scans' outputs). Returns (M (n, p, p), mu (n, p), outputs (n, m), loss (n,), extras);
    extras holds ``"step_loss"`` (steps + 1,) and, for ``"all"``, ``"step_eigenvalues"``
    (steps + 1, p) (`_step_values`).
    """
    TRACE_COUNT[0] += 1
    stepper = _stepper(model, loss, config, params, init)
    M0, mu0, L0 = init
    track = step_values != "none"

    def body(_, carry):
        state, k = carry
        return at_step(stepper, k).step(state, step_batch(model, idx, k))[0], k + 1

    def tracked(carry, _):
        state, k = carry
        new, f = at_step(stepper, k).step(state, step_batch(model, idx, k))
        return (new, k + 1), _step_values(stepper, state, step_values, None if idx is not None else f)

    def block(carry, n):
        if track:  # n is a Python int here (`closed_sgd` passes static loop counts)
            carry, values = jax.lax.scan(tracked, carry, None, length=n)
            return carry, _with_eigenvalues(values)  # one host call per block
        return jax.lax.fori_loop(0, n, body, carry), None

    def observe(state):
        return stepper.order_params(state), stepper.extras(state)

    def scan_body(carry, _):
        carry, per_step = block(carry, save_every)
        return carry, (observe(carry[0]), per_step)

    carry0 = (stepper.init(M0, mu0, L0), jnp.asarray(0, dtype=jnp.int32))
    carry, (saved, per_step) = jax.lax.scan(scan_body, carry0, None, length=n_saves)
    parts = [jax.tree.map(lambda x: x[None], observe(carry0[0])), saved]
    steps_parts = [jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), per_step)]
    if has_remainder:
        carry, rest = block(carry, remainder)
        parts.append(jax.tree.map(lambda x: x[None], observe(carry[0])))
        steps_parts.append(rest)
    (Ms, mus), extras = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *parts)
    outputs = jax.vmap(model.outputs)(Ms, mus)
    losses = jnp.mean(jax.vmap(stepper.loss.value, in_axes=(0, None))(outputs, model.y), axis=1)
    if track:  # the values after the last step close the per-step series: (steps + 1, ...)
        last = jax.tree.map(lambda x: x[None], _step_values(stepper, carry[0], step_values, None))
        steps_parts.append(_with_eigenvalues(last))
        extras = {**extras, **jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *steps_parts)}
    return Ms, mus, outputs, losses, extras


def _step_values(stepper, state, step_values: str, f) -> dict:
    """The per-step values of `closed_sgd(step_values=...)` at one state: the full-training-set
    loss (1/m) sum ell(f, y), from the full batch's outputs `f` that the step evaluated (None:
    a minibatch step, or after the last step: evaluated here), and for ``"all"`` M itself, whose
    eigenvalues `_with_eigenvalues` computes for a block of steps at once."""
    f = stepper.outputs(state) if f is None else f
    out = {"step_loss": jnp.mean(stepper.loss.value(f, stepper.model.y))}
    if step_values == "all":
        out["step_M"] = stepper.order_params(state)[0]
    return out


def _with_eigenvalues(values: dict) -> dict:
    """`values` with its ``"step_M"`` (n, p, p) replaced by ``"step_eigenvalues"`` (n, p)
    (`eigenvalues_in_program`: one host call for the n matrices)."""
    if "step_M" not in values:
        return values
    rest = {k: v for k, v in values.items() if k != "step_M"}
    return {**rest, "step_eigenvalues": eigenvalues_in_program(values["step_M"])}


def eigenvalues_in_program(M):
    """The eigenvalues (..., p) of the symmetric matrices M (..., p, p) in decreasing order, inside
    a compiled program. Not differentiated (an eigenvalue's derivative is undefined where two
    coincide). For p <= 32 `jnp.linalg.eigvalsh` in the program; for larger p LAPACK's
    eigenvalues-only driver on the host (`numpy.linalg.eigvalsh` through `jax.pure_callback`,
    one call for the stacked matrices; under vmap, one call per member) with BLAS held to one
    thread for the call (`_one_blas_thread`): `jnp.linalg.eigvalsh` forms the eigenvectors too,
    and a multithreaded BLAS on small matrices stalls when the cores are busy. Measured at p = 65
    (2-core CPU, load 4-6): 1000 steps of `closed_sgd(step_values="all")` on the digits MLP's NQF
    0.62 s with the host call against 4-16 s with `jnp.linalg.eigvalsh` (0.25 s without
    eigenvalues); numpy's eigvalsh 0.2-0.4 ms a call one-threaded, 5-12 ms two-threaded. A host
    call costs ~0.1-3 ms of overhead (more inside `nqf.record`'s program), hence the in-program
    path for small p (p = 6: 3000 recorded steps 0.09 s in program, 0.8 s by host calls)."""
    M = _sg(M)
    if M.shape[-1] <= _IN_PROGRAM_EIGH_P:  # small: no BLAS threads to wait on, no host call's overhead
        return jnp.linalg.eigvalsh(M)[..., ::-1]
    shape = jax.ShapeDtypeStruct(M.shape[:-1], M.dtype)
    return jax.pure_callback(_host_descending_eigvalsh, shape, M, vmap_method="sequential")


_IN_PROGRAM_EIGH_P = 32


def _host_descending_eigvalsh(M) -> np.ndarray:
    """Decreasing eigenvalues of each matrix in M (..., p, p); nan for a matrix with non-finite
    entries (a diverged run: its caller reports the divergence)."""
    M = np.asarray(M)
    out = np.full(M.shape[:-1], np.nan, dtype=M.dtype)
    ok = np.isfinite(M).all(axis=(-2, -1))
    with _one_blas_thread():
        out[ok] = np.linalg.eigvalsh(M[ok])[..., ::-1]
    return out


@functools.cache
def _blas_controller():
    """threadpoolctl's controller of the BLAS libraries loaded at the first call (None without
    threadpoolctl, an optional package that scikit-learn brings)."""
    try:
        import threadpoolctl
    except ImportError:  # pragma: no cover - then BLAS keeps its threads
        return None
    return threadpoolctl.ThreadpoolController().select(user_api="blas")


def _one_blas_thread():
    """A context in which BLAS uses one thread (restored on exit), or a no-op without threadpoolctl."""
    controller = _blas_controller()
    return contextlib.nullcontext() if controller is None else controller.limit(limits=1)


_run = eqx.filter_jit(_simulate)


def _check_width(d, name="d") -> int:
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"`{name}` (the number of neurons) must be an integer >= 1; found {d!r}.")
    return int(d)


def _check_realizable(
    M0: np.ndarray, mu0: np.ndarray | None, d: int | None, rtol=1e-8, *, names: tuple[str, str] = ("M0", "mu0")
) -> None:
    """Raise unless (M0, mu0) = (W W^T, W 1) for some W of shape (p, d).

    That holds iff C = M0 - mu0 mu0^T / d = W (I - 1 1^T / d) W^T is PSD of rank <= d - 1
    (mu0 = None: M0 PSD of rank <= d), checked to relative `rtol` of max(|M0|, |mu0|^2 / d).
    `names` are the argument names used in the messages (`nqf.ntk` passes ("M", "mu")).
    """
    Mn, mun = names
    C = M0 if mu0 is None or d is None else M0 - np.outer(mu0, mu0) / d
    ev = np.linalg.eigvalsh(C)[::-1]
    scale = max(float(np.abs(np.linalg.eigvalsh(M0)).max(initial=0.0)), np.finfo(float).tiny)
    if mu0 is not None and d is not None:
        scale = max(scale, float(mu0 @ mu0) / d)
    tol = rtol * scale
    what = Mn if mu0 is None or d is None else f"{Mn} - {mun} {mun}^T / d"
    if ev.size and ev[-1] < -tol:
        raise ValueError(
            f"`{Mn}` is not realizable: {what} must be positive semi-definite (it equals "
            f"W (I - 1 1^T/d) W^T); found eigenvalue {ev[-1]:.3g} (scale {scale:.3g})."
        )
    if d is None:
        return
    max_rank = d - 1 if mu0 is not None else d
    if max_rank < ev.size and ev[max_rank] > tol:
        raise ValueError(
            f"(`{Mn}`, `{mun}`) cannot come from d={d} neurons: {what} must have rank <= {max_rank}, "
            f"but its eigenvalue #{max_rank + 1} is {ev[max_rank]:.3g} (scale {scale:.3g}). "
            + ("Check `d` (or pass `W0`)." if Mn == "M0" else "Check `d`.")
        )


def _xp(*xs):
    """jax.numpy if any of `xs` is traced, else numpy (host arrays stay on the host)."""
    return jnp if any_traced(xs) else np


_sg = jax.lax.stop_gradient


def _factor_of_C(C, keep: int):
    """L0 (p, p) with L0 L0^T = C (symmetric PSD), keeping the `keep` largest eigenvalues of C
    clipped at 0: L0 = V sqrt(ev) from eigh.

    Traced C: eigh is not differentiated (its derivative divides by eigenvalue gaps and is
    undefined for the repeated zero eigenvalues of a rank-deficient C). The tangent is instead
    dL0 = (I - Pi/2) dC L0^{+T} (Pi the projector onto range(L0)), which satisfies
    dL0 L0^T + L0 dL0^T = dC for every dC = X L0^T + L0 X^T tangent to the rank-r matrices
    (all that the M trajectory, a function of C alone, can see at fixed rank; it is exact for
    full-rank C, and for C0 = R0 R0^T from traced weights).
    """
    xp = _xp(C)
    p = C.shape[0]
    Cs = 0.5 * (C + C.T)
    ev, V = xp.linalg.eigh(_sg(Cs) if xp is jnp else Cs)
    ev = xp.where(xp.arange(p) < p - keep, 0.0, xp.maximum(ev, 0.0))
    L0 = V * xp.sqrt(ev)
    if xp is np:
        return L0
    live = ev > 10 * p * np.finfo(np.float64).eps * jnp.max(ev)
    inv_sqrt = jnp.where(live, 1.0 / jnp.sqrt(jnp.where(live, ev, 1.0)), 0.0)
    K = jnp.eye(p) - 0.5 * (V * live) @ V.T
    return _sg(L0) + _sg(K) @ (Cs - _sg(Cs)) @ _sg(V * inv_sqrt)


def _centered_factor_from_W(W0):
    """L0 (p, p) with L0 L0^T = R0 R0^T, R0 = W0 (I - 1 1^T / d) the centered weights.

    d <= p: L0 = [R0, 0] (R0 padded with p - d zero columns: exact, no factorization, rank kept
    exactly). p < d <= 2 p: L0 = r^T from the QR of R0^T = Q r. d > 2 p: eigh of the p x p
    matrix R0 R0^T (one O(p^2 d) product instead of an O(p^2 d) Householder QR, ~9x faster at
    d = 10^4). Traced W0: the same factors; the QR is not differentiated: L0 = R0 Q, so its
    tangent is dR0 Q (exact for any rank).
    """
    xp = _xp(W0)
    p, d = W0.shape
    R0 = W0 - W0.mean(axis=1, keepdims=True)
    if d <= p:
        return xp.pad(R0, ((0, 0), (0, p - d)))
    if d > 2 * p:  # full rank: C0 = R0 R0^T = L0 L0^T
        return _factor_of_C(R0 @ R0.T, p)
    if xp is np:
        return np.linalg.qr(R0.T, mode="r").T  # R0^T = Q r, (p, p) since d > p
    Q, r = jnp.linalg.qr(_sg(R0).T)
    return _sg(r.T) + (R0 - _sg(R0)) @ _sg(Q)


def _centered_factor_from_M(M0, mu0, d: int | None):
    """L0 (p, p) with L0 L0^T = C0 = M0 - mu0 mu0^T / d (M0 if mu0 is None), keeping the
    min(p, max rank) largest eigenvalues (max rank d - 1, or d without mu0) clipped at 0."""
    p = M0.shape[0]
    C = M0 if mu0 is None else M0 - _xp(M0, mu0).outer(mu0, mu0) / d
    keep = p if d is None else min(p, d - 1 if mu0 is not None else d)
    return _factor_of_C(C, keep)


def _traced_finite(x, name: str):
    """A traced array checked for finiteness at run time (concrete arrays: `as_array` did)."""
    return guard(x, ~jnp.all(jnp.isfinite(x)), f"`{name}` must be finite") if is_traced(x) else x


def _initial_order_params(model: NQFModel, M0, mu0, d, W0):
    """Validate the initial condition; return (M0, mu0 or None, d or None, L0), numpy arrays
    (JAX arrays if traced), L0 (p, p) the centered factor (L0 L0^T = M0 - mu0 mu0^T / d).
    Traced values: shapes are checked, finiteness at run time; symmetry and realizability
    (`_check_realizable`) are not checked."""
    p = model.p
    if W0 is not None:
        if M0 is not None or mu0 is not None:
            raise ValueError("Give either `W0` or (`M0`, `mu0`, `d`), not both.")
        W0 = _traced_finite(as_weights(W0, p, host=True), "W0")
        check_initial_loss(model.data, W0, "W0", "W")
        if d is not None and _check_width(d) != W0.shape[1]:
            raise ValueError(
                f"`d` = {d} is inconsistent with `W0` of shape {shape_str(W0.shape)} (d = {W0.shape[1]} neurons)."
            )
        mu0 = W0.sum(axis=1)
        L0 = _centered_factor_from_W(W0)
        return L0 @ L0.T + _xp(W0).outer(mu0, mu0) / W0.shape[1], mu0, W0.shape[1], L0
    if M0 is None:
        raise ValueError("Give the initial condition: `W0` (p, d), or `M0` (p, p) with `mu0` (p,) and `d`.")
    M0 = _traced_finite(as_array(M0, "M0", ndim=2, host=True), "M0")
    if M0.shape != (p, p):
        raise ValueError(f"`M0` must have shape ({p}, {p}) to match the data; found {shape_str(M0.shape)}.")
    check_symmetric(M0, "M0")
    check_initial_loss(model.data, M0, "M0")
    if mu0 is not None:
        mu0 = _traced_finite(as_array(mu0, "mu0", ndim=1, host=True), "mu0")
        if mu0.shape != (p,):
            raise ValueError(f"`mu0` must have shape ({p},) to match the data; found {mu0.shape}.")
    if d is not None:
        d = _check_width(d)
    if model.has_mean_field and (mu0 is None or d is None):
        raise ValueError(
            "This model has g or B (mu enters the dynamics): give `mu0` (p,) and the width `d`, or `W0` (p, d)."
        )
    if mu0 is not None and d is None:
        raise ValueError("`mu0` needs the width `d` (mu = W 1 sums d neurons).")
    if not any_traced(M0, mu0):
        _check_realizable(M0, mu0, d)
    return M0, mu0, d, _centered_factor_from_M(M0, mu0, d)


SGD_KEYWORDS = dict(
    lr=REQUIRED,
    steps=REQUIRED,
    batch_indices=None,
    batch_size=None,
    key=None,
    weight_decay=0.0,
    momentum=0.0,
    nesterov=False,
    loss=None,
)  # the training keywords of `closed_sgd` (those of an `nqf.SGD`), in the order it reads them


def _check_choices(**named) -> None:
    """`ValueError` naming the first argument (name=(value, allowed)) whose value is not allowed."""
    for name, (value, allowed) in named.items():
        if value not in allowed:
            raise ValueError(f"`{name}` must be one of {allowed}; found {value!r}.")


def _check_step_values_memory(step_values: str, steps: int, p: int) -> None:
    """The memory of `closed_sgd`'s per-step values, (steps + 1)(1 [+ p]) floats, checked first."""
    if step_values != "none":
        memory.check(
            8.0 * (steps + 1) * (1 + (p if step_values == "all" else 0)),
            f"closed_sgd: step_values={step_values!r} for {steps} steps of p = {p}",
            "step_values='loss' or 'none', fewer steps, or NQF_MEMORY_BUDGET.",
        )


def _trajectory(out, saved, lr, steps: int, d, form: str, has_mu: bool) -> MapTrajectory:
    """The `MapTrajectory` of `closed_sgd`'s run `out` (saved steps `saved`); `FloatingPointError`
    if it diverged."""
    Ms, mus, outputs, losses, extras = check_finite(out, out[0], saved, "The closed map diverged: non-finite M", lr)
    return MapTrajectory(
        steps=saved,
        t=lr * saved if np.ndim(lr) == 0 else step_times(lr, steps)[saved],  # no (steps + 1,) array
        M=Ms,
        mu=mus if has_mu else None,
        outputs=outputs,
        loss=losses,
        L=extras.get("L"),
        P=extras.get("P"),
        Q=extras.get("Q"),
        d=d,
        lr=lr,
        form=form,
        step_loss=extras.get("step_loss"),
        step_eigenvalues=extras.get("step_eigenvalues"),
    )


@accepts_training
def closed_sgd(
    model: NQFModel | AbstractData,
    *,
    W0: Float[ArrayLike, "p d"] | None = None,
    M0: Float[ArrayLike, "p p"] | None = None,
    mu0: Float[ArrayLike, " p"] | None = None,
    d: int | None = None,
    save_every: int = 1,
    form: str = "factor",
    step_values: str = "none",
    **sgd,
) -> MapTrajectory:
    """Train an NQF with (minibatch) SGD, weight decay and momentum, exactly on (M, mu).

    Iterates Theorem 2's update maps E5-E6 (no momentum) and Corollary 2 / E7 (momentum) as one
    compiled `lax.scan`, in the centered-factor form (default) or literally on (M, mu)
    (``form="M"``); see the module docstring for both and why the factor form is the default.
    The trajectory equals that of W-space training (`nqf.train_w`) from any W0 with
    W0 W0^T = M0, W0 1 = mu0, to rounding, for every width d. New values of the same shapes
    (including a new `d`, `lr`, `momentum`, `weight_decay`, labels, batches, and a new `steps`
    with the same number of saves) reuse the compiled program. Cost per step: two or three
    p x p products plus the data operations (module docstring); it does not depend on d.

    **Arguments:**

    - `model`: an `nqf.NQFModel` (any data representation; g, B, f0 optional) or a bare data set
      (the plain model f = Tr[M A]).
    - `training` (second positional, optional): an `nqf.SGD` description, which stands for the
      keywords `lr`, `steps`, `momentum`, `nesterov`, `weight_decay`, batches and `loss` below
      (``closed_sgd(model, nqf.SGD(0.1, steps=500), W0=W0)``; giving one of them twice is a
      `ValueError`); given one by one they are read from ``**sgd`` (an unknown one: `TypeError`).
    - Initial condition: `W0` (p, d), or `M0` (p, p) symmetric, `mu0` (p,) and the width `d`
      (an integer >= 1). For a plain model (g = B = 0) mu does not affect M and `mu0`, `d` may be
      omitted (then `mu` is not reported).
    - `lr`: learning rate eta > 0, step n at gradient-flow time t = eta * n; or per-step rates
      (steps,) (a schedule's values, finite and >= 0): step n at t_n = lr_0 + ... + lr_{n-1}.
    - `steps`: number of steps (integer >= 1); `save_every`: save every this many steps (step 0
      and the last step are always saved).
    - Batches: full batch by default; or `batch_indices` (steps, b) integer array shared with
      `nqf.train_w`; or `batch_size` b with a `key` (PRNG key or int seed, default 0), drawn by
      `nqf.batch_indices` (identical to what `train_w` draws from the same key). The step loss
      is L = (1/b) sum_{j} ell(f_{idx_j}, y_{idx_j}).
    - `weight_decay`: gamma >= 0, penalty gamma/2 |W|^2 (H -> H + gamma I; v unchanged; the
      paper's "-gamma M" of Sec. 4 / Appendix B.3 is -2 gamma M in this convention).
    - `momentum`: beta in [0, 1) (heavy ball, `torch.optim.SGD` convention); `nesterov`: Nesterov
      momentum instead.
    - `loss`: ``"mse"`` (default, (f - y)^2 per row), ``"logistic"`` (labels y the signs +-1),
      a callable ell(f, y) -> scalar per row, or a `nqf.PerSampleLoss` that couples the k outputs
      of one input (``as_loss("cross_entropy", k)``: rows mu k + o, labels y the one-hot rows;
      ``as_loss(fn, k)``: fn on (k,) arrays); the loss is the mean over inputs of ell
      (`nqf.dynamics._losses`). With k > 1 the batches (`batch_indices`, `batch_size`) select
      inputs, 0 <= index < m / k, each with its k rows.
    - `form`: ``"factor"`` (default: (L, mu) with M = L L^T + mu mu^T / d; rank-preserving) or
      ``"M"`` (E5-E6 on (M, mu), E7 with (P, Q) for momentum).
    - `step_values`: values after every step, not only the saved ones: ``"none"`` (default),
      ``"loss"`` (`step_loss` (steps + 1,): the full-training-set loss L(W_j), j = 0..steps) or
      ``"all"`` (also `step_eigenvalues` (steps + 1, p), the eigenvalues of M_j, decreasing).
      Event times read off them (e.g. ``nqf.drop_times(traj.step_times, traj.step_loss,
      levels=...)``) have the map's own resolution, one step. Cost: for a full batch the loss reuses the step's outputs (measured:
      free); with minibatches it evaluates all m inputs each step (about m / b times a step's
      data cost); the eigenvalues add one O(p^3) `eigvalsh` per step (not differentiated).
      Memory (steps + 1)(p + 1) 8 bytes, checked first (`nqf.memory`). With per-step values
      the program is compiled for its `steps` (the step count fixes their length).

    **Returns:** a `MapTrajectory` with M (n, p, p), mu (n, p), outputs (n, m), loss (n,), and
    L (``"factor"``) or (P, Q) (``"M"`` with momentum); `step_loss`, `step_eigenvalues` with
    `step_values`.

    **Under jit, vmap and grad.** `lr`, `momentum`, `weight_decay`, `W0`, `M0`, `mu0`, `batch_indices`, `key`
    (a PRNG key or an integer seed) and the model's arrays (labels y, data values, g, B, f0) may be traced,
    e.g. ``jax.vmap(lambda lr: closed_sgd(..., lr=lr).loss)`` or ``jax.grad(lambda y:
    closed_sgd(nqf.DenseData(A, y), ...).loss[-1])``; the result is then a `MapTrajectory` of JAX arrays
    (vmap: with a leading batch axis). `steps`, `save_every`, `batch_size`, `d`, `form`, `nesterov` and `loss`
    fix the program and must be concrete. What changes under tracing: lr > 0, momentum in [0, 1), weight_decay
    >= 0, finite W0/M0/mu0, batch indices in [0, m) and divergence (non-finite M) are checked at run time with
    `equinox.error_if` (an error raised by the compiled program, or NaN outputs with ``EQX_ON_ERROR=nan``)
    instead of raising `ValueError`/`FloatingPointError` here: under your `jax.jit` catch
    `jax.errors.JaxRuntimeError` (`equinox.EquinoxRuntimeError` under `equinox.filter_jit` or an eager
    `jax.vmap`), nqf's message in its text (docs/numerics.md, "Errors raised inside compiled code");
    `nqf.closed_sgd_sweep` raises the documented types; the symmetry of M0 and the realizability of (M0, mu0,
    d) are NOT checked. A traced `momentum` always runs the momentum program (with beta = 0 it is plain SGD:
    the same numbers for ``form="factor"``). The loops become fixed-length scans, so `jax.grad` (reverse mode)
    works and stores one state per step: memory O(steps p^2); `jax.jacfwd` / `jax.jvp` (forward mode) store
    nothing per step. Derivatives through the initial factor: with respect to W0 exact at any rank; with
    respect to (M0, mu0) exact along directions that keep the rank of M0 - mu0 mu0^T / d (all directions when
    it has full rank p). The factor `L` of a traced initial condition may differ from the concrete call's by a
    right orthogonal factor (L L^T is the same); M, mu, outputs and loss agree to rounding. For many members
    at once with host validation, sharding and a tidy table, use `nqf.closed_sgd_sweep`.

    **Raises:** `ValueError` for shapes inconsistent with the model (W0, M0, mu0), a width d that is not an
    integer >= 1 or cannot produce (M0, mu0) (M0 - mu0 mu0^T/d must be PSD of rank <= d - 1) or disagrees with
    W0, an unknown `form`, lr <= 0 or not finite, momentum outside [0, 1) (or 0 with `nesterov=True`),
    weight_decay < 0, a batch schedule of the wrong shape, out-of-range indices or a batch size outside [1,
    m], steps/save_every not integers >= 1; `TypeError` for a bad model or loss (`ValueError` for a loss
    coupling k outputs on m rows not a multiple of k); `FloatingPointError` if the iteration diverges (reduce
    `lr`).
    """
    lr, steps, batch_indices, batch_size, key, weight_decay, momentum, nesterov, loss = keyword_options(
        "closed_sgd", sgd, **SGD_KEYWORDS
    )
    model = as_model(model)
    steps = check_count(steps, "steps")
    lr = check_lr_or_rates(lr, steps)
    save_every = check_count(save_every, "save_every")
    gamma = check_weight_decay(weight_decay)
    beta = check_momentum(momentum)
    nesterov = check_nesterov(nesterov, beta)
    _check_choices(form=(form, FORMS), step_values=(step_values, STEP_VALUES))
    loss = as_loss(loss)
    M0, mu0, d, L0 = _initial_order_params(model, M0, mu0, d, W0)
    check_saves_memory("closed_sgd", steps, save_every, saved_floats(model))
    idx = resolve_loss_batches(loss, batch_indices, batch_size, key, model.m, steps)
    saved, n_saves, remainder = save_schedule(steps, save_every)
    traced = any_traced(model, lr, gamma, beta, M0, mu0, L0, idx)
    config = (form, is_traced(beta) or beta > 0.0, bool(nesterov))
    params, init = _numeric(traced, lr, d, gamma, beta, M0, mu0, L0)
    _check_step_values_memory(step_values, steps, model.p)
    counts = loop_counts(save_every, remainder, static=traced or step_values != "none")
    out = _run(model, loss, config, params, init, idx, n_saves, *counts, step_values)
    return _trajectory(out if traced else jax.tree.map(np.asarray, out), saved, lr, steps, d, form, mu0 is not None)


def saved_floats(model) -> int:
    """Float64 values of one saved state of the closed map: M and L (p, p), mu (p,), outputs
    (m,), the loss, and with momentum (P, Q) (p, p) each (`check_saves_memory`)."""
    p = model.p
    return 4 * p * p + p + model.m + 1


def _numeric(traced: bool, lr, d, gamma, beta, M0, mu0, L0):
    """(params, init) as float64 arrays for `_simulate`: numpy (transferred by the jit call)
    or, traced, JAX; mu0 = None (plain model without mu0) becomes zeros, d = None becomes 1."""
    f64 = functools.partial(jnp.asarray if traced else np.asarray, dtype=np.float64)
    p = M0.shape[-1]
    params = (f64(lr), f64(1.0 if d is None else d), f64(gamma), f64(beta))
    return params, (f64(M0), f64(np.zeros(p) if mu0 is None else mu0), f64(L0))


def closed_map(
    model: NQFModel | AbstractData,
    *,
    optimizer: str = "sgd",
    momentum: float | Float[Array, ""] | None = None,
    nesterov: bool = False,
    **kwargs: Any,
) -> MapTrajectory:
    """`closed_sgd` selected by optimizer name, mirroring `nqf.train_w`.

    **Arguments:** `optimizer`: ``"sgd"`` (momentum default 0), ``"momentum"`` (heavy ball,
    default 0.9), ``"nesterov"`` (default 0.9); `momentum`: beta in [0, 1) or None for the
    default; every other keyword goes to `closed_sgd`. Runs under jit, vmap and grad as
    `closed_sgd` does (`momentum` may be traced; `optimizer` and `nesterov` must be concrete).

    **Raises:** `ValueError` for ``"adam"``: Adam has no closed map on (M, mu) (its
    per-coordinate normalization depends on the individual weights, which (M, mu) do not
    determine); simulate it in weight space with `nqf.train_w(..., optimizer="adam")`. Also
    `ValueError` for an unknown optimizer name and everything `closed_sgd` raises.
    """
    if isinstance(optimizer, str) and optimizer.lower() == "adam":
        raise ValueError(
            "Adam has no closed map on (M, mu): its update divides each weight's step by a "
            "running RMS of that weight's own gradient, which depends on individual entries of W "
            "that M = W W^T and mu = W 1 do not determine (Theorem 2 / Corollary 2 cover updates "
            "linear in past gradients and weights only). Simulate Adam in weight space with "
            "`nqf.train_w(model, W0, optimizer='adam', ...)`."
        )
    _, beta, nesterov = parse_optimizer(optimizer, momentum, nesterov)
    return closed_sgd(model, momentum=beta, nesterov=nesterov, **kwargs)
