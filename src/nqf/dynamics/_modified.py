"""The modified (finite learning rate) flow on the order parameters (backward error analysis).

Gradient descent W+ = W - eta grad_W Phi with step eta follows, to O(eta^2) at fixed
gradient-flow time t = eta * steps, the gradient flow of the modified objective (Barrett and
Dherin 2021, "Implicit gradient regularization")

    Phi_eta(W) = Phi(W) + (eta / 4) |grad_W Phi(W)|^2,   Phi = L + (gamma / 2) |W|^2,

while the plain flow (Eq. E10) follows it only to O(eta). For the NQF the correction closes on
(M, mu). With the package's conventions (L = (1/m) sum_x ell(f_x, y_x), l'_x = dL/df_x,
H = sum_x 2 l'_x A_x + gamma I, v = sum_x l'_x u(x), Eq. E4) the weight gradient is
grad_W Phi = v 1^T + H W, so

    |grad_W Phi|^2 = d |v|^2 + 2 v^T H mu + Tr[H^2 M]          (= Tr[H^2 M] for f = Tr[M A]).

(In the issue's notation H' = sum_x l'_x A_x = H / 2 this is 4 Tr[H'^2 M].) Any objective
Phi(M, mu) of the order parameters gives the weight flow W' = -grad_W Phi = -(2 S W + r 1^T)
with S = dPhi/dM (symmetric), r = dPhi/dmu, hence the closed flow

    M' = -(2 S M + 2 M S + r mu^T + mu r^T),   mu' = -(2 S mu + d r).

For Phi_eta on the plain model f = Tr[M A] with the MSE loss (l'_x = (2/m) Delta_x,
ell'' = 2): dTr[H^2 M]/dM = H^2 + (8/m) sum_x c_x A_x with c_x = Tr[A_x H M] (H depends on M
through the residuals), so 2 S = H~ with

    H~ = H + (eta / 2) (H^2 + K),   K = (8/m) sum_x Tr[A_x H M] A_x,   M' = -(H~ M + M H~).  (*)

At eta = 0 this is Eq. E9 (`rhs_M`). `rhs_M_modified` evaluates (*) through the data's `apply`
and `traces` (no p x p matrix of the data is formed: H M, H (H M) and K M are applied). For a
general model (g, B, f0; `rhs_M_mu_modified`) S and r are the derivatives of Phi_eta(M, mu)
taken by `jax.grad` (the closed function above, through `gradient_terms`).

Time is gradient-flow time t = eta * steps, as everywhere. Momentum is not covered (its
modified equation has a different first-order term; not derived here).
"""

from __future__ import annotations

from typing import Any

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core import memory
from .._core._checks import as_array, check_positive
from .._core._errors import MaxStepsReached
from ..data._model import NQFModel
from ..data._operators import check_initial_loss
from ._flow import is_model
from ._losses import PerSampleLoss, mse
from ._maps import gradient_terms

__all__ = ["rhs_M_modified", "rhs_M_mu_modified", "modified_objective", "solve_modified_flow"]

_MSE = PerSampleLoss(mse)


def rhs_M_modified(t: Float[ArrayLike, ""], M: Float[Array, "p p"], args: tuple[Any, ...]) -> Float[Array, "p p"]:
    """The modified flow (*) of the module docstring on M for the MSE loss: M' = -(H~ M + M H~),
    H~ = H + (eta/2)(H^2 + K), shape (p, p).

    `args` = (data, gamma, eta): a data set (the plain model f = Tr[M A]), the weight decay
    gamma >= 0 and the learning rate eta > 0 (eta = 0: `rhs_M`, Eq. E9). Source: backward error
    analysis of GD (Barrett and Dherin 2021) closed on M; GD with step eta follows it to O(eta^2).
    Cost: four `apply` and two `traces` of the data per evaluation.
    """
    data, gamma, eta = args
    c = 4.0 / data.m
    HM = data.apply(c * data.residual(M), M) + gamma * M
    HHM = data.apply(c * data.residual(M), HM) + gamma * HM
    cx = data.traces(0.5 * (HM + HM.T))  # Tr[A_x H M]
    KM = data.apply(2.0 * c * cx, M)
    X = HM + 0.5 * eta * (HHM + KM)
    return -(X + X.T)


def modified_objective(
    model, M: Float[Array, "p p"], mu: Float[Array, " p"], gamma, d, eta, loss: PerSampleLoss | None = None
) -> Float[Array, ""]:
    """Phi_eta(M, mu) = L + (gamma/2) Tr M + (eta/4) (d |v|^2 + 2 v^T H mu + Tr[H^2 M]), the
    modified objective as a function of the order parameters (module docstring), scalar. `model`:
    an `NQFModel` or a data set; full batch, per-sample loss `loss` (default MSE)."""
    loss = _MSE if loss is None else loss
    model = model if is_model(model) else NQFModel(model)
    m = model.m
    w = jnp.full(m, 1.0 / m)
    L = jnp.mean(loss.value(model.outputs(M, mu), model.y))
    v, H = gradient_terms(model, w, loss, M, mu, gamma)
    Hmu = H @ mu
    G = d * (v @ v) + 2.0 * (v @ Hmu) + jnp.sum(H * (H @ M))  # Tr[H^2 M] = sum_ij H_ij (H M)_ij
    return L + 0.5 * gamma * jnp.trace(M) + 0.25 * eta * G


def rhs_M_mu_modified(
    t: Float[ArrayLike, ""], state: tuple[Float[Array, "p p"], Float[Array, " p"]], args: tuple[Any, ...]
) -> tuple[Float[Array, "p p"], Float[Array, " p"]]:
    """The modified flow on (M, mu) of a general model (module docstring):
    M' = -(2 S M + 2 M S + r mu^T + mu r^T), mu' = -(2 S mu + d r), with S = dPhi_eta/dM
    (symmetrized), r = dPhi_eta/dmu of `modified_objective` (by `jax.grad`); shapes (p, p), (p,).

    `args` = (model or data, gamma, d, eta): as `rhs_M_mu` (Eq. E10) plus the learning rate eta
    (eta = 0: Eq. E10). MSE loss, full batch.
    """
    M, mu = state
    model, gamma, d, eta = args
    S, r = jax.grad(modified_objective, argnums=(1, 2))(model, M, mu, gamma, d, eta)
    S = 0.5 * (S + S.T)
    SM = S @ M
    rmu = jnp.outer(r, mu)
    return -2.0 * (SM + SM.T) - (rmu + rmu.T), -(2.0 * S @ mu + d * r)


def _check_tolerances(rtol, atol, max_steps) -> tuple[float, float | None, int]:
    """`rtol` in (0, 1), `atol` (None or finite and > 0) and `max_steps` (an integer >= 1) of
    `solve_modified_flow`, checked before the solve (rtol = 0 failed inside diffrax after seconds).

    **Raises:** `ValueError` naming the argument and the value found."""
    from ._train_args import check_count

    rtol = check_positive(rtol, "rtol")
    if rtol >= 1.0:
        raise ValueError(f"`rtol` must be < 1 (a relative tolerance); found {rtol!r}.")
    return rtol, None if atol is None else check_positive(atol, "atol"), check_count(max_steps, "max_steps")


def solve_modified_flow(
    model,
    *,
    M0: Float[ArrayLike, "p p"],
    lr: float,
    t1: float,
    ts: Float[ArrayLike, " n"] | None = None,
    mu0: Float[ArrayLike, " p"] | None = None,
    d: int | None = None,
    weight_decay: float = 0.0,
    rtol: float = 1e-10,
    atol: float | None = None,
    max_steps: int = 100_000,
) -> diffrax.Solution:
    """Integrate the modified flow from t = 0 to `t1` (gradient-flow time) with diffrax (Tsit5,
    PID controller; atol default rtol * max|state(0)|).

    Plain data set (or a model without g, B, f0) and no `mu0`: the state is M (p, p)
    (`rhs_M_modified`); otherwise (M, mu) (`rhs_M_mu_modified`; needs `mu0` and the width `d`).
    `ts`: saved times (default: t1 only). Returns the `diffrax.Solution` (ys: M (n, p, p), or the
    pair). **Raises:** `ValueError` for lr <= 0 or not finite, lr above the stability edge at
    M0 (lr x the spectral radius of H(M0) > 2: GD oscillates or diverges there and the O(eta)
    expansion does not hold), `M0` of the wrong shape, not finite, not symmetric or not
    realizable (M0 - mu0 mu0^T / d PSD), `t1` not finite and > 0, `ts` outside [0, t1] or
    decreasing, a general model without `mu0`/`d`, `rtol` not in (0, 1), `atol` not finite and
    > 0, `max_steps` not an integer >= 1, an initial loss that overflows float64 (all before the
    solve); `nqf.MaxStepsReached` (naming `t1` and `max_steps`) if the steps run out before `t1`,
    `FloatingPointError` for another failed solve; `RuntimeError` if float64 is off.
    """
    from ._maps import _check_realizable
    from ._train_args import check_lr, check_weight_decay

    lr = check_lr(lr)
    gamma = check_weight_decay(weight_decay)
    rtol, atol, max_steps = _check_tolerances(rtol, atol, max_steps)
    data = model.data if is_model(model) else model
    general = is_model(model) and (model.has_mean_field or model.f0 is not None)
    M0 = as_array(M0, "M0", shape=(data.p, data.p), host=True)
    if not np.allclose(M0, M0.T, rtol=0, atol=1e-12 * max(1.0, float(np.abs(M0).max()))):
        raise ValueError("`M0` must be symmetric (M = W W^T).")
    check_initial_loss(data, M0, "M0")
    if general or mu0 is not None:
        if mu0 is None or d is None:
            raise ValueError("The (M, mu) modified flow needs `mu0` (p,) and the width `d`.")
        mu0 = as_array(mu0, "mu0", shape=(data.p,), host=True)
    _check_realizable(np.asarray(M0), None if mu0 is None else np.asarray(mu0), d)
    t1 = check_positive(t1, "t1")
    if ts is not None:
        memory.check(  # diffrax's saved M (n, p, p) (and mu) at every time of `ts`
            8.0 * np.size(ts) * (data.p + 1) * data.p,
            f"solve_modified_flow: M (p, p) = ({data.p}, {data.p}) saved at {np.size(ts)} times (ts)",
            "fewer times `ts` per call (solve again from the last state).",
        )
        ts = np.asarray(as_array(ts, "ts", ndim=1, host=True))
        if ts.size == 0:
            raise ValueError("`ts` must be a non-empty array of save times (or None: t1 only); found an empty array.")
        if np.any(np.diff(ts) < 0) or ts[0] < 0 or ts[-1] > t1:
            raise ValueError(f"`ts` must be non-decreasing times in [0, t1] = [0, {t1:g}]; found {ts!r}.")
    rate = float(np.abs(np.linalg.eigvalsh(np.asarray(data.H(jnp.asarray(M0))))).max())
    if lr * rate > 2.0:
        raise ValueError(
            f"`lr`={lr!r} is above the stability edge of GD at M0: lr x |H(M0)| = {lr * rate:.3g} > 2. GD "
            "oscillates or diverges there and the modified flow (an expansion in small lr) does not describe "
            "it; use nqf.closed_sgd."
        )
    M0 = jnp.asarray(M0)
    if general or mu0 is not None:
        y0 = (M0, jnp.asarray(mu0))
        term = diffrax.ODETerm(rhs_M_mu_modified)
        args = (model, jnp.float64(gamma), jnp.float64(d), jnp.float64(lr))
    else:
        y0 = M0
        term = diffrax.ODETerm(rhs_M_modified)
        args = (data, jnp.float64(gamma), jnp.float64(lr))
    scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(y0))
    atol = rtol * (scale if scale > 0 else 1.0) if atol is None else atol
    saveat = diffrax.SaveAt(t1=True) if ts is None else diffrax.SaveAt(ts=jnp.asarray(ts, dtype=jnp.float64))
    sol = diffrax.diffeqsolve(
        term,
        diffrax.Tsit5(),
        t0=0.0,
        t1=t1,
        dt0=None,
        y0=y0,
        args=args,
        saveat=saveat,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
        throw=False,
    )
    _check_result(sol, t1, max_steps)
    return sol


def _check_result(sol, t1: float, max_steps: int) -> None:
    """Raise for a failed modified-flow solve (diffrax's own error was an EquinoxRuntimeError
    naming no argument, issue 36): `MaxStepsReached` naming `t1` and `max_steps`, else
    `FloatingPointError` with diffrax's reason."""
    if sol.result == diffrax.RESULTS.successful:
        return
    if sol.result == diffrax.RESULTS.max_steps_reached:
        raise MaxStepsReached(
            f"solve_modified_flow used all `max_steps`={max_steps} steps before reaching `t1`={t1:g}: "
            "shorten `t1`, raise `max_steps` or loosen `rtol`."
        )
    raise FloatingPointError(
        f"solve_modified_flow failed before `t1`={t1:g}: {diffrax.RESULTS[sol.result]}. Reduce `lr` or `t1`."
    )
