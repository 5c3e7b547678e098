"""Sample-wise exact solutions and sample-wise sudden learning (Theorems 4, 5, 10; THEORY secs.
6-7, Eqs. E14, E15, E23).

Both oracles reduce the p x p gradient flow of the MSE loss to independent scalar ODEs, which they
integrate with scipy's DOP853 at `rtol` = 1e-13 (never with the package's diffrax flow, so that a
comparison with `nqf.solve_flow` is a comparison of two independent computations):

- `theorem4` (proportional samples A_mu = c_mu A, Eq. E14): one scalar xi(t),
  xi' = alpha sum_j lambda_j z_j(0) exp(-2 lambda_j xi) - beta, and W(t) = P exp(-xi Lambda) P^T W0.
- `theorem5` (orthogonal samples A_mu A_nu = 0 for mu != nu, Eq. E15): one scalar per sample,
  xi_mu' = sum_k lambda_{mu,k} z_k(0) exp(-(8/m) lambda_{mu,k} xi_mu) - y_mu, and
  W(t) = P exp(-Sigma(t)) P^T W0 with Sigma = (4/m) sum_mu xi_mu Lambda_mu.

Each first measures its assumption on the data as a relative residual and refuses with an
`nqf.AssumptionError` if the residual exceeds `tol`.

Weight decay (`weight_decay` = gamma >= 0, nqf's convention: penalty gamma/2 |W|^2 as in
`nqf.solve_flow`, W' = -(H + gamma I) W, M' = ... - 2 gamma M; the paper's "-gamma M" of Sec. 4 /
Appendix B.3 is -2 gamma M here, its gamma twice nqf's) multiplies W(t) by e^{-gamma t}, so every
z_k(t) gets the factor e^{-2 gamma t} and the scalar ODEs become non-autonomous:
xi' = sum_j a_j exp(-b_j xi - 2 gamma t) - c.

Sample-wise sudden learning (Theorem 10): with zeta_mu = (8/m) lambda*_mu y_mu, where lambda*_mu is
the eigenvalue of A_mu that maximizes lambda y_mu (the largest for y_mu > 0), sample mu is learned
at t*_mu ~ ln(1/eps) / zeta_mu, and as eps -> 0 the loss at rescaled time tau = t / ln(1/eps)
becomes the staircase (1/m) sum_mu y_mu^2 I(tau < 1/zeta_mu) (`staircase_limit`).
`sample_ignition_times` gives t*_mu at finite eps with its O(1) correction, derived here:

    keeping only the top eigenspace of A_mu (initial mass Z0 = sum over it of z_k(0)), the output
    f_mu = lambda* Z obeys the logistic Z' = zeta Z (1 - lambda* Z / y), so f_mu reaches rho y_mu
    at exactly
        t*_mu = (1/zeta_mu) ln( rho (y_mu - lambda* Z0) / ((1 - rho) lambda* Z0) ),
    i.e. with z_k(0) = eps c_k and c* = Z0 / eps,
        t*_mu = ln(1/eps)/zeta_mu + (1/zeta_mu) ln( rho y_mu / ((1 - rho) lambda* c*) ) + O(eps).

The remaining error comes from the other eigenvalues of A_mu: a mode with ratio
r = lambda_k / lambda* in (0, 1) shifts t*_mu by O(eps^(1 - r)); `sample_ignition_times` also
returns this first-order shift (``corrected``) and the exact t*_mu from the implicit integral
form of E15 by quadrature (``exact``).

Time is gradient-flow time t = eta * (number of GD steps), as in `nqf.solve_flow`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._core._checks import any_traced, as_array, as_weights, check, check_assumption, check_positive, shape_str
from .._core._config import require_x64
from ..data._operators import (
    AbstractCommutingData,
    AbstractData,
    BlockData,
    CommutingData,
    DiagonalData,
    LowRankData,
    check_initial_loss,
)
from ..dynamics._train_args import check_weight_decay
from ._ignition import _check_rho, _first_crossings
from ._oracles import AssumptionError, OracleSolution, _as_commuting, _check_data, _host, _initial_M, _times

__all__ = [
    "SampleOracleSolution",
    "SampleIgnition",
    "proportional_decomposition",
    "orthogonal_samples_residual",
    "theorem4",
    "theorem5",
    "samplewise_rates",
    "sample_ignition_times",
    "measure_sample_ignition_times",
    "crossing_times",
    "staircase_limit",
]

_TINY = np.finfo(float).tiny
_FREEZE = 16 * np.finfo(float).eps  # |xi'| <= _FREEZE * scale: converged to rounding


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["ts", "z", "basis", "M_basis", "W", "xi", "outputs", "y"],
    meta_fields=["theorem"],
)
@dataclasses.dataclass(frozen=True, eq=False)
class SampleOracleSolution(OracleSolution):
    """An exact solution of Theorem 4 or 5 at times `ts` (all of `OracleSolution`, plus):

    - `xi`: the auxiliary scalar(s), shape (n,) for Theorem 4, (n, m) for Theorem 5.
    - `outputs`: f_mu(t) = Tr[M(t) A_mu], shape (n, m).
    - `y`: the labels, shape (m,).

    Derived: `residuals` Delta = outputs - y (n, m), `sample_losses` Delta^2 (n, m) and `loss`
    (1/m) sum_mu Delta_mu^2 (n,).
    """

    xi: np.ndarray | None = dataclasses.field(repr=False, default=None)
    outputs: np.ndarray | None = dataclasses.field(repr=False, default=None)
    y: np.ndarray | None = dataclasses.field(repr=False, default=None)

    @functools.cached_property
    def M(self) -> np.ndarray:
        """Order parameter M(t) in the standard basis, shape (n, p, p) (not available from a
        solve with ``matrices=False``)."""
        if self.M_basis is None:
            raise ValueError(
                "This solution was computed with matrices=False: only `z`, `xi` and the outputs are available."
            )
        return OracleSolution.M.func(self)

    @functools.cached_property
    def residuals(self) -> np.ndarray:
        """Delta_mu(t) = f_mu(t) - y_mu, shape (n, m)."""
        return self.outputs - self.y

    @functools.cached_property
    def sample_losses(self) -> np.ndarray:
        """Per-sample losses Delta_mu(t)^2, shape (n, m)."""
        return self.residuals**2

    @functools.cached_property
    def loss(self) -> np.ndarray:
        """MSE loss (1/m) sum_mu Delta_mu(t)^2, shape (n,)."""
        return self.sample_losses.mean(axis=1)


# --------------------------------------------------------------------------------------------
# independent scalar ODEs  xi_i' = sum_j a_ij exp(-b_ij xi_i) - c_i
# --------------------------------------------------------------------------------------------
def _exp_sum(a, b, xi):
    """sum_j a_ij exp(-b_ij xi_i) and sum_j |a_ij| exp(-b_ij xi_i), for xi of shape (n_c,)."""
    e = np.exp(-b * xi[:, None])
    return np.sum(a * e, axis=1), np.sum(np.abs(a) * e, axis=1)


def _solve_scalar_odes(a, b, c, ts, rtol: float, gamma: float = 0.0) -> np.ndarray:
    """Integrate n_c independent ODEs xi_i' = sum_j a_ij exp(-b_ij xi_i - 2 gamma t) - c_i,
    xi_i(0) = 0 (gamma: weight decay, 0 by default), with scipy DOP853 and return xi at the times
    `ts` (any order, >= 0), shape (len(ts), n_c).

    The time axis is cut into segments of doubling length (the first one 1/rate_max, the fastest
    rate in the problem); after each segment, components whose derivative has fallen to rounding
    level (|xi'| <= 16 ulp of the terms it is made of: a converged, stable fixed point of a scalar
    autonomous ODE) are frozen, so that fast components do not force tiny steps on the slow ones
    for the rest of the run. Their further motion is O(16 ulp) relative. With gamma > 0 the ODEs
    are non-autonomous (no fixed point to freeze at): nothing is frozen.

    Absolute tolerance: rtol * 0.1 / max_j |b_ij| per component, so that the exponents b xi, and
    thus z = z0 exp(-b xi), carry relative errors of order rtol.
    """
    import scipy.integrate  # on first use (~0.3 s at import)

    a = np.asarray(a, float)
    b = np.asarray(b, float)
    c = np.asarray(c, float)
    n_c = c.shape[0]
    b = np.where(a != 0, b, 0.0)  # masked modes: no overflow of exp(-b xi) times 0
    if a.size:  # each component's nonzero terms only, in order: (n_c, K) with K the most per component
        nz = a != 0
        keep = np.argsort(~nz, axis=1, kind="stable")[:, : max(int(nz.sum(axis=1).max()), 1)]
        a, b = np.take_along_axis(a, keep, axis=1), np.take_along_axis(b, keep, axis=1)
    ts = np.asarray(ts, float)
    out = np.zeros((ts.shape[0], n_c))
    if ts.size == 0 or n_c == 0:
        return out
    bmax = np.max(np.abs(b), axis=1, initial=0.0)
    atol = rtol * 0.1 / np.where(bmax > 0, bmax, 1.0)
    scale0 = np.sum(np.abs(a), axis=1) + np.abs(c)
    rate = bmax * scale0
    rate_max = float(rate.max(initial=0.0))
    t_end = float(ts.max())
    order = np.argsort(ts, kind="stable")
    t_sorted = ts[order]
    xi = np.zeros(n_c)
    active = np.ones(n_c, bool)
    # a component with no terms at all (a = 0, c = 0) never moves
    active &= (np.abs(a).sum(axis=1) > 0) | (c != 0)
    t_a = 0.0
    seg = 1.0 / rate_max if rate_max > 0 else t_end
    pos = int(np.searchsorted(t_sorted, 0.0, side="right"))  # times == 0: xi = 0
    while pos < t_sorted.size:
        t_b = min(t_end, t_a + seg) if t_a + seg < t_end * (1 - 1e-12) else t_end
        stop = int(np.searchsorted(t_sorted, t_b, side="right"))
        t_eval = t_sorted[pos:stop]
        if active.any():
            idx = np.flatnonzero(active)
            ai, bi, ci = a[idx], b[idx], c[idx]

            def rhs(t, x, ai=ai, bi=bi, ci=ci):
                return np.sum(ai * np.exp(-bi * x[:, None] - 2.0 * gamma * t), axis=1) - ci

            t_req = np.unique(np.concatenate([t_eval, [t_b]]))
            sol = scipy.integrate.solve_ivp(
                rhs,
                (t_a, t_b),
                xi[idx],
                method="DOP853",
                t_eval=t_req,
                rtol=rtol,
                atol=atol[idx],
            )
            if not sol.success:
                raise FloatingPointError(
                    f"scipy DOP853 failed on the xi ODE between t = {t_a:.6g} and {t_b:.6g} (`ts` reaches "
                    f"{t_end:.6g}): {sol.message}"
                )
            vals = sol.y.T  # (len(t_req), n_active)
            where = np.searchsorted(t_req, t_eval)
            block = np.broadcast_to(xi, (t_eval.size, n_c)).copy()
            block[:, idx] = vals[where]
            out[order[pos:stop]] = block
            xi[idx] = vals[-1]
            if gamma == 0.0:
                f, s = _exp_sum(ai, bi, xi[idx])
                done = np.abs(f - ci) <= _FREEZE * (s + np.abs(ci))
                active[idx[done]] = False
        else:
            out[order[pos:stop]] = xi
        pos = stop
        t_a = t_b
        seg *= 2.0
    return out


def _solve_scalar_odes_traced(a, b, c, ts, rtol: float, gamma=0.0, max_steps: int = 100_000):
    """`_solve_scalar_odes` for traced input (inside jit / vmap / grad): the same ODEs
    xi_i' = sum_j a_ij exp(-b_ij xi_i - 2 gamma t) - c_i, xi_i(0) = 0, and tolerances (`rtol`, atol =
    rtol * 0.1 / max_j |b_ij| per component), integrated together by diffrax's Kvaerno5 at a
    tenth of those tolerances (to match the concrete path to ~1e-12) with a max-norm error
    control, stepping onto the sorted saved times; differentiable (diffrax's default
    RecursiveCheckpointAdjoint). An implicit method because converged components sit at a stiff
    fixed point: an explicit one (Dopri8, used before) runs there at its stability limit, where
    the primal stays right but the differentiated steps grow without bound (gradients of 1e20
    and more at long times, found in a new-user trial; tested in
    tests/test_oracles_transforms.py).
    Shapes: a, b (n_c, K), c (n_c,), ts (n,) >= 0 in any order -> (n, n_c)."""
    import diffrax
    import optimistix as optx

    b = jnp.where(a != 0, b, 0.0)
    n_c = c.shape[0]
    if ts.shape[0] == 0 or n_c == 0:
        return jnp.zeros((ts.shape[0], n_c))
    bmax = jnp.max(jnp.abs(b), axis=1)
    atol = rtol * 0.1 / jnp.where(bmax > 0, bmax, 1.0)
    order = jnp.argsort(ts)
    t_sorted = ts[order]

    def rhs(t, x, args):
        a, b, c, gamma = args
        return jnp.sum(a * jnp.exp(-b * x[:, None] - 2.0 * gamma * t), axis=1) - c

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        diffrax.Kvaerno5(),
        0.0,
        t_sorted[-1],
        None,
        jnp.zeros(n_c),
        args=(a, b, c, jnp.asarray(gamma, dtype=jnp.float64)),
        saveat=diffrax.SaveAt(ts=t_sorted),
        # steps land on the saved times (no interpolation error: 2e-12 -> 4e-15 against scipy)
        stepsize_controller=diffrax.PIDController(
            rtol=0.1 * rtol, atol=0.1 * atol, norm=optx.max_norm, step_ts=t_sorted
        ),
        max_steps=max_steps,
    )
    return jnp.zeros_like(sol.ys).at[order].set(sol.ys)


def _assemble(P, Mb0, expo, W0, matrices: bool = True):
    """z (n, p), M~(t) = D M~0 D (n, p, p) and W(t) = P D P^T W0 (n, p, d) with
    D = diag(exp(-expo)) (expo = Sigma_kk, shape (n, p)), in JAX (traceable); the diagonal of M~
    is exactly z. (None, None) for the matrices when `matrices` is False."""
    D = jnp.exp(-expo)
    z = jnp.diagonal(Mb0)[None, :] * D**2
    if not matrices:
        return z, None, None
    p = z.shape[1]
    Mb = (D[:, :, None] * Mb0[None] * D[:, None, :]).at[:, jnp.arange(p), jnp.arange(p)].set(z)
    W = None if W0 is None else jnp.einsum("ik,nk,kd->nid", P, D, P.T @ W0)
    return z, Mb, W


def _xi(a, b, c, ts, rtol: float, gamma=0.0):
    """xi of the scalar ODEs xi_i' = sum_j a_ij exp(-b_ij xi_i - 2 gamma t) - c_i, xi_i(0) = 0, at `ts`,
    shape (n, n_c): by scipy DOP853 for concrete input (`_solve_scalar_odes`, independent of
    diffrax and of the package's flow), by diffrax's Kvaerno5 for traced input
    (`_solve_scalar_odes_traced`, differentiable). The only part of Theorems 4 and 5 that is not
    one JAX code: a numerical integration has to run somewhere."""
    if any_traced(a, b, c, ts, gamma):
        a, b, c, ts = (jnp.asarray(v, dtype=jnp.float64) for v in (a, b, c, ts))
        return _solve_scalar_odes_traced(a, b, c, ts, rtol, gamma)
    return _solve_scalar_odes(np.asarray(a), np.asarray(b), np.asarray(c), np.asarray(ts), rtol, float(gamma))


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _initial(data: AbstractData, M0, W0, p: int, z0=None, P=None):
    """(M0, W0) from exactly one of M0 (p, p), W0 (p, d) or z0 (p,) (then M0 = P diag(z0) P^T),
    checked (concrete: now; traced: at run time)."""
    if sum(v is not None for v in (M0, W0, z0)) != 1:
        raise ValueError("Give exactly one initial condition: `M0` (p, p), `W0` (p, d) or `z0` (p,).")
    if z0 is not None:
        z0 = _check_z0(z0, p)
        Q = jnp.eye(p) if P is None else P
        M0 = (Q * z0) @ Q.T
        check_initial_loss(data, M0, "z0")
        return M0, None
    if W0 is not None:
        W0 = jnp.asarray(as_weights(W0, p, host=True), dtype=jnp.float64)
        check_initial_loss(data, W0, "W0", "W")
        return W0 @ W0.T, W0
    M0 = _initial_M(M0, p)
    check_initial_loss(data, M0, "M0")
    return M0, None


def _check_z0(z0, p: int, what: str = "to match the data"):
    """Mode strengths z0 (p,) >= 0 (concrete: checked now; traced: z0 >= 0 at run time)."""
    z0 = as_array(z0, "z0", ndim=1, host=True)
    if z0.shape != (p,):
        raise ValueError(f"`z0` must have shape ({p},) {what}; found {shape_str(z0.shape)}.")
    return check(
        z0,
        z0 < 0,
        lambda: ValueError(f"`z0` must be >= 0 (mode strengths); found min {z0.min():.3g}."),
        "`z0` must be >= 0 (mode strengths)",
    )


def _check_rtol(rtol) -> float:
    rtol = float(rtol)
    if not (100 * np.finfo(float).eps <= rtol < 1):
        raise ValueError(f"`rtol` must lie in [{100 * np.finfo(float).eps:.3g}, 1); found {rtol!r}.")
    return rtol


# --------------------------------------------------------------------------------------------
# Theorem 4
# --------------------------------------------------------------------------------------------
_THM4_COND = "proportional samples A_mu = c_mu A"


def proportional_decomposition(data: AbstractData):
    """Best fit A_mu ~ c_mu A (rank-1 SVD of the stacked matrices), the measure of Theorem 4's
    assumption.

    **Returns:** `(c, lam, P, residual, worst)`: c (m,); A = P diag(lam) P^T with |A|_F = 1 and the
    sign chosen so that the largest |c_mu| is positive; the relative residual
    max_mu |A_mu - c_mu A|_F / max_mu |A_mu|_F (0 for all-zero data); and the mu where it sits.
    For `CommutingData` the fit runs on Lambda (m, p) in its basis (no dense matrices).
    """
    with jax.ensure_compile_time_eval():
        c, lam, P, res, worst = _proportional(data)
    return np.asarray(c), np.asarray(lam), np.asarray(P), float(res), int(worst)


def _proportional(data: AbstractData):
    """`proportional_decomposition` in JAX, traceable: (c, lam, P) differentiable where the
    assumption holds (the value is the SVD's; the derivative that of the normalized
    X^T X v, which equals v for exactly proportional samples), the residual and its mu not
    differentiated. Gradients with respect to dense data values need distinct eigenvalues of A."""
    _check_data(data)
    m, p = data.m, data.p
    X = jnp.asarray(data.Lambda) if isinstance(data, CommutingData) else data.dense().reshape(m, -1)
    Xs = jax.lax.stop_gradient(X)
    top = jnp.linalg.norm(Xs, axis=1).max(initial=0.0)
    live = top > 0
    v0 = jnp.linalg.svd(Xs, full_matrices=False)[2][0]
    w = X.T @ (X @ v0)
    wn = jnp.linalg.norm(w)
    w = jnp.where(live, w / jnp.where(live, wn, 1.0), v0)
    w = w * jnp.sign(jax.lax.stop_gradient(w) @ v0 + (~live))
    v = v0 + (w - jax.lax.stop_gradient(w))  # the value of v0, the derivative of w
    c = X @ v
    sgn = jnp.where(c[jnp.argmax(jnp.abs(jax.lax.stop_gradient(c)))] < 0, -1.0, 1.0)
    v, c = sgn * v, sgn * c
    cs, vs = jax.lax.stop_gradient((c, v))
    res = jnp.linalg.norm(Xs - jnp.outer(cs, vs), axis=1) / jnp.where(live, top, 1.0)
    worst = jnp.argmax(res)
    if isinstance(data, CommutingData):
        lam, P = v, (jnp.eye(p) if data.P is None else jnp.asarray(data.P))
    else:
        Amat = v.reshape(p, p)
        lam, P = jnp.linalg.eigh(0.5 * (Amat + Amat.T))
    zero = ~live  # all-zero data: c = 0, lam = 0, P = I, residual 0
    return (
        jnp.where(zero, 0.0, c),
        jnp.where(zero, 0.0, lam),
        jnp.where(zero, jnp.eye(p), P),
        jnp.where(zero, 0.0, res[worst]),
        jnp.where(zero, 0, worst),
    )


def theorem4(
    data: AbstractData,
    ts,
    *,
    M0=None,
    W0=None,
    weight_decay: float = 0.0,
    tol: float = 1e-10,
    rtol: float = 1e-13,
) -> SampleOracleSolution:
    """Theorem 4 (Eq. E14): exact MSE gradient flow for proportional samples A_mu = c_mu A.

    With A = P diag(lambda) P^T, alpha = (4/m) sum_mu c_mu^2, beta = (4/m) sum_mu c_mu y_mu and
    z_j(0) = (P^T M0 P)_jj, the flow is W(t) = P exp(-xi(t) Lambda) P^T W(0), i.e.
    M~(t) = exp(-xi Lambda) M~(0) exp(-xi Lambda), where the scalar xi solves

        xi' = alpha sum_j lambda_j z_j(0) exp(-2 lambda_j xi) - beta,   xi(0) = 0

    (the derivative form of E14's t = int_0^xi ds / (alpha sum_j lambda_j z_j(0) e^{-2 lambda_j s}
    - beta)). It is integrated by scipy DOP853 at `rtol` (see `_solve_scalar_odes`), independent
    of the p x p flow. The split A_mu = c_mu A is fixed by |A|_F = 1 (`proportional_decomposition`);
    xi Lambda does not depend on it.

    Weight decay gamma (penalty gamma/2 |W|^2, as in `nqf.solve_flow`; the paper's "-gamma M" of
    Sec. 4 / Appendix B.3 is -2 gamma M here): W' = -(h(t) A + gamma I) W gives
    W(t) = e^{-gamma t} P exp(-xi(t) Lambda) P^T W(0) with
    xi' = alpha sum_j lambda_j z_j(0) exp(-2 lambda_j xi - 2 gamma t) - beta (non-autonomous).

    **Arguments:** `data` (any representation); `ts` gradient-flow times t = eta * steps, shape
    (n,), >= 0; `M0` (p, p) symmetric PSD or `W0` (p, d) (exactly one); `weight_decay` gamma >= 0
    (see above); `tol` for the assumption check; `rtol` of the xi integration (>= 100 ulp).

    **Returns:** `SampleOracleSolution` with `xi` (n,), `z` (n, p) in the eigenbasis `basis` = P of
    A, `M` (n, p, p), `outputs` f_mu = c_mu Tr[M A] (n, m), `loss`, and `W` (n, p, d) given `W0`.

    **Under jit / vmap / grad** (traced `ts`, `M0` / `W0`, labels or data values): the same JAX
    code, with xi integrated by diffrax's Kvaerno5 at a tenth of `rtol` and atol
    (`_solve_scalar_odes_traced`, differentiable; agrees with the concrete scipy path to
    ~1e-13). The checks are the same for concrete and traced input: on concrete values at once,
    on traced ones at run time (`equinox.error_if`: the proportionality of traced data, t >= 0,
    M0 finite, symmetric and PSD). The decomposition is differentiable where the assumption
    holds (`_proportional`); gradients with respect to dense data values need distinct
    eigenvalues of A (eigh's derivative).

    **Raises:** `AssumptionError` if max_mu |A_mu - c_mu A|_F / max_mu |A_mu|_F > tol;
    `ValueError` for bad shapes, non-finite input, a non-PSD `M0`, negative times, bad `rtol`,
    a negative or non-finite `weight_decay`; `FloatingPointError` if scipy's xi integration fails
    (e.g. at times `ts` ~ 1e200, where float64 cannot resolve the steps).
    """
    tol = check_positive(tol, "tol", allow_zero=True)  # NaN would pass every assumption
    gamma = check_weight_decay(weight_decay)
    theorem = "Theorem 4"
    _check_data(data)
    rtol = _check_rtol(rtol)
    with jax.ensure_compile_time_eval():  # concrete data inside someone's jit: decomposed on the host
        c, lam, P, res, worst = _proportional(data)
    c = check_assumption(
        c,
        theorem,
        _THM4_COND,
        res,
        tol,
        where=lambda _: f"mu = {int(worst)}",
        detail="Residual: max_mu |A_mu - c_mu A|_F / max_mu |A_mu|_F for the best rank-1 fit of the stacked A_mu.",
    )
    p, m = data.p, data.m
    ts = _times(ts)
    M0, W0 = _initial(data, M0, W0, p)
    with jax.ensure_compile_time_eval():  # concrete input inside someone's jit: xi by scipy, as outside
        Mb0 = P.T @ M0 @ P
        Mb0 = 0.5 * (Mb0 + Mb0.T)
        z0 = jnp.maximum(jnp.diagonal(Mb0), 0.0)
        y = jnp.asarray(data.y, dtype=jnp.float64)
        alpha = 4.0 / m * (c @ c)
        beta = 4.0 / m * (c @ y)
        a, b, rhs_c = (alpha * lam * z0)[None], (2.0 * lam)[None], beta[None]
    xi = _xi(a, b, rhs_c, ts, rtol, gamma)[:, 0]  # (n,), Eq. E14
    z, Mb, W = _assemble(P, Mb0, xi[:, None] * lam[None, :] + gamma * ts[:, None], W0)
    outputs = jnp.outer(z @ lam, c)
    return SampleOracleSolution(
        theorem, _host(ts), _host(z), _host(P), _host(Mb), _host(W), xi=_host(xi), outputs=_host(outputs), y=_host(y)
    )


# --------------------------------------------------------------------------------------------
# Theorem 5
# --------------------------------------------------------------------------------------------
_THM5_COND = "orthogonal samples A_mu A_nu = 0 (mu != nu)"


def orthogonal_samples_residual(data: AbstractData) -> tuple[float, tuple[int, int]]:
    """Measure Theorem 5's assumption: max_{mu != nu} |A_mu A_nu|_F / (|A_mu|_F |A_nu|_F).

    For `CommutingData` this is |lambda_mu * lambda_nu|_2 / (|lambda_mu| |lambda_nu|) on Lambda
    (elementwise product); `DiagonalData` and `BlockData` are orthogonal by construction (0);
    for `LowRankData` it is |Lambda_mu G_{mu nu} Lambda_nu|_F / (|lambda_mu| |lambda_nu|) with
    G_{mu nu} = Q_mu^T Q_nu the overlaps of the samples' eigenvectors, computed in chunks of
    samples (O(m p r) memory, O(p (m r)^2) time); otherwise it is computed from the dense
    matrices. Zero matrices are orthogonal to everything. **Returns:** `(residual, (mu, nu))`.
    """
    _check_data(data)
    m = data.m
    if m < 2 or isinstance(data, (DiagonalData, BlockData)):
        return 0.0, (0, 0)
    if isinstance(data, LowRankData):
        lam, Q = _lowrank_eig(data)
        return _lowrank_residual(lam, Q)
    if isinstance(data, CommutingData):
        with jax.ensure_compile_time_eval():
            R = np.asarray(_overlaps(data.Lambda))
        a, b = np.unravel_index(np.argmax(R), R.shape)
        return float(R[a, b]), (int(a), int(b))
    else:
        A = np.asarray(data.dense())
        nrm = np.linalg.norm(A, axis=(1, 2))
        G = np.linalg.norm(np.einsum("aij,bjk->abik", A, A), axis=(2, 3))
    R = G / np.maximum(np.outer(nrm, nrm), _TINY)
    np.fill_diagonal(R, 0.0)
    a, b = np.unravel_index(np.argmax(R), R.shape)
    return float(R[a, b]), (int(a), int(b))


def _overlaps(Lam):
    """|lambda_mu * lambda_nu|_2 / (|lambda_mu| |lambda_nu|) (m, m), zero diagonal: Theorem 5's
    residual for commuting data, in JAX (traceable, not differentiated)."""
    L = jax.lax.stop_gradient(jnp.asarray(Lam))
    nrm = jnp.linalg.norm(L, axis=1)
    G = jnp.sqrt(jnp.einsum("ak,bk->ab", L**2, L**2))
    R = G / jnp.maximum(jnp.outer(nrm, nrm), _TINY)
    return jnp.where(jnp.eye(L.shape[0], dtype=bool), 0.0, R)


def _lowrank_eig(data: LowRankData):
    """Eigenpairs of every A_mu = U_mu diag(s_mu) U_mu^T in its column space: lam (m, r) and
    orthonormal Q (m, p, r) with A_mu = Q_mu diag(lam_mu) Q_mu^T (QR of U_mu, then an r x r
    eigh), O(m p r) memory. Eigenvalues below 1e-13 of the sample's largest are set to 0."""
    U = np.asarray(data.U)
    Q, R = np.linalg.qr(U)  # (m, p, r), (m, r, r)
    C = np.einsum("mij,mj,mkj->mik", R, np.asarray(data.s), R)
    lam, V = np.linalg.eigh(0.5 * (C + np.swapaxes(C, 1, 2)))
    top = np.abs(lam).max(axis=1, keepdims=True)
    lam = np.where(np.abs(lam) > 1e-13 * top, lam, 0.0)
    return lam, np.einsum("mpr,mrj->mpj", Q, V)


def _lowrank_residual(lam: np.ndarray, Q: np.ndarray, chunk_elements: int = 2**22):
    """max_{mu != nu} |diag(lam_mu) Q_mu^T Q_nu diag(lam_nu)|_F / (|lam_mu| |lam_nu|) and its
    (mu, nu), in chunks of samples (never the (m, m, p, p) products)."""
    m, p, r = Q.shape
    nrm = np.linalg.norm(lam, axis=1)
    best, where = 0.0, (0, 0)
    c = max(1, chunk_elements // max(1, m * r * r))
    for a in range(0, m, c):
        b = min(m, a + c)
        G = np.einsum("api,bpj->aibj", Q[a:b], Q) * lam[a:b, :, None, None] * lam[None, None, :, :]
        R = np.sqrt(np.einsum("aibj->ab", G**2)) / np.maximum(np.outer(nrm[a:b], nrm), _TINY)
        R[np.arange(b - a), np.arange(a, b)] = 0.0
        i, j = np.unravel_index(np.argmax(R), R.shape)
        if R[i, j] > best:
            best, where = float(R[i, j]), (int(a + i), int(j))
    return best, where


@dataclasses.dataclass(frozen=True)
class _SampleModes:
    """Orthogonal samples in block form: sample mu owns the modes idx[mu, j] (where mask[mu, j])
    with eigenvalues lam[mu, j] (0 where not mask); the n_modes modes have the eigenvectors in
    the columns of `basis` (p, n_modes) (None: the standard basis, n_modes = p). O(m K) plus the
    basis; never an (m, p) or (m, m) array for DiagonalData, BlockData and LowRankData."""

    lam: np.ndarray
    idx: np.ndarray
    mask: np.ndarray
    basis: np.ndarray | None
    n_modes: int
    y: np.ndarray
    p: int

    @property
    def m(self) -> int:
        return self.lam.shape[0]

    def z_initial(self, M0, W0, z0) -> np.ndarray:
        """z_k(0) (n_modes,) from exactly one of M0 (p, p), W0 (p, d) or z0 (n_modes,)."""
        if sum(v is not None for v in (M0, W0, z0)) != 1:
            raise ValueError(
                f"Give exactly one initial condition: `M0` ({self.p}, {self.p}), `W0` ({self.p}, d) or "
                f"`z0` ({self.n_modes},)."
            )
        Q = self.basis
        if z0 is not None:
            z0 = np.asarray(as_array(z0, "z0", ndim=1))
            if z0.shape != (self.n_modes,):
                raise ValueError(
                    f"`z0` must have shape ({self.n_modes},) (one strength per mode of the "
                    f"data); found {shape_str(z0.shape)}."
                )
            if np.any(z0 < 0):
                raise ValueError(f"`z0` must be >= 0 (mode strengths); found min {z0.min():.3g}.")
            return z0
        if W0 is not None:
            W0 = as_weights(W0, self.p, host=True)
            Wb = W0 if Q is None else Q.T @ W0
            return np.sum(Wb**2, axis=1)
        M0 = _initial_M(M0, self.p)
        z = np.diagonal(M0) if Q is None else np.einsum("ik,ij,jk->k", Q, M0, Q)
        return np.maximum(z, 0.0)

    def blockwise(self, v: np.ndarray) -> np.ndarray:
        """A mode vector (..., n_modes) gathered per sample, (..., m, K) (0 where not mask)."""
        return np.where(self.mask, v[..., self.idx], 0.0)

    def scatter(self, vb: np.ndarray) -> np.ndarray:
        """Per-sample values (..., m, K) placed on the modes, (..., n_modes) (0 on unowned modes)."""
        out = np.zeros(vb.shape[:-2] + (self.n_modes,))
        out[..., self.idx[self.mask]] = vb[..., self.mask]
        return out


def _sample_modes(data: AbstractData, theorem: str, tol: float) -> _SampleModes:
    """`data` with orthogonal samples in block form (`_SampleModes`): structural for
    `DiagonalData` (K = 1), `BlockData` and `LowRankData` (eigenpairs of each A_mu, checked
    with `_lowrank_residual`); through `CommutingData` (m, p) otherwise.
    AssumptionError if the samples are not orthogonal (residual > tol)."""
    _check_data(data)
    y = np.asarray(data.y, float)
    if isinstance(data, DiagonalData):
        lam = np.asarray(data.lam)[:, None]
        return _SampleModes(lam, np.arange(data.p)[:, None], lam != 0, None, data.p, y, data.p)
    if isinstance(data, BlockData):
        lam = np.asarray(data.blocks)
        P = None if data.P is None else np.asarray(data.P)
        return _SampleModes(lam, np.arange(data.p).reshape(lam.shape), lam != 0, P, data.p, y, data.p)
    if isinstance(data, LowRankData):
        lam, Q = _lowrank_eig(data)
        res, (a, b) = _lowrank_residual(lam, Q)
        if res > tol:
            raise AssumptionError(
                theorem,
                _THM5_COND,
                res,
                tol,
                where=f"(mu, nu) = ({a}, {b})",
                detail="Residual: |A_mu A_nu|_F / (|A_mu|_F |A_nu|_F).",
            )
        m, p, r = Q.shape
        basis = np.ascontiguousarray(Q.transpose(1, 0, 2).reshape(p, m * r))
        return _SampleModes(lam, np.arange(m * r).reshape(m, r), lam != 0, basis, m * r, y, p)
    cdata = _orthogonal_commuting(data, theorem, tol)
    Lam = np.asarray(cdata.Lambda)
    _, idx, mask = _blocks(Lam)
    lam = np.where(mask, np.take_along_axis(Lam, idx, axis=1), 0.0)
    P = np.eye(cdata.p) if cdata.P is None else np.asarray(cdata.P)
    return _SampleModes(lam, idx, mask, P, cdata.p, np.asarray(cdata.y, float), cdata.p)


def _orthogonal_commuting(data: AbstractData, theorem: str, tol) -> CommutingData:
    """`data` as commuting data, with Theorem 5's orthogonality checked (`check_assumption`:
    concrete data now, with the structural measure of `orthogonal_samples_residual`; traced
    commuting data at run time, threaded through the returned data). Dense data are jointly
    diagonalized on the host (traced dense data: ValueError)."""
    detail = "Residual: |A_mu A_nu|_F / (|A_mu|_F |A_nu|_F)."
    if any_traced(data):
        if not isinstance(data, AbstractCommutingData):
            raise ValueError(
                f"Under jit / vmap / grad with traced data `{theorem.lower().replace(' ', '')}` needs "
                "CommutingData or DiagonalData (dense data are diagonalized on the host); found "
                f"{type(data).__name__}."
            )
        if isinstance(data, (DiagonalData, BlockData)) or data.m < 2:  # orthogonal by construction
            return data
        with jax.ensure_compile_time_eval():
            R = _overlaps(data.Lambda)
        return check_assumption(data, theorem, _THM5_COND, R, tol, where="(mu, nu) = ({}, {})", detail=detail)
    with jax.ensure_compile_time_eval():  # concrete data inside someone's jit: on the host
        res, (a, b) = orthogonal_samples_residual(data)
        check_assumption(None, theorem, _THM5_COND, res, tol, where=f"(mu, nu) = ({a}, {b})", detail=detail)
        return _as_commuting(data, theorem, max(tol, 1e-12))


def _blocks(Lam: np.ndarray):
    """Assign each mode k to the sample with the largest |lambda_{mu,k}| (its support) and pack
    the per-sample eigenvalues as a padded (m, K) array; returns (owner (p,), idx (m, K), mask)."""
    m, p = Lam.shape
    owner = np.argmax(np.abs(Lam), axis=0)
    owner = np.where(np.abs(Lam).max(axis=0) > 0, owner, -1)
    counts = np.bincount(owner[owner >= 0], minlength=m)
    K = max(int(counts.max(initial=0)), 1)
    idx = np.zeros((m, K), int)
    mask = np.zeros((m, K), bool)
    fill = np.zeros(m, int)
    for k in np.flatnonzero(owner >= 0):
        mu = owner[k]
        idx[mu, fill[mu]] = k
        mask[mu, fill[mu]] = True
        fill[mu] += 1
    return owner, idx, mask


def theorem5(
    data: AbstractData,
    ts,
    *,
    M0=None,
    W0=None,
    z0=None,
    matrices: bool = True,
    weight_decay: float = 0.0,
    tol: float = 1e-10,
    rtol: float = 1e-13,
) -> SampleOracleSolution:
    """Theorem 5 (Eq. E15): exact MSE gradient flow for orthogonal samples A_mu A_nu = 0 (mu != nu).

    The A_mu then commute, A_mu = P diag(lambda_mu) P^T, with disjoint supports. With
    z_k(0) = (P^T M0 P)_kk each sample has its own scalar

        xi_mu' = sum_k lambda_{mu,k} z_k(0) exp(-(8/m) lambda_{mu,k} xi_mu) - y_mu,  xi_mu(0) = 0,

    integrated by scipy DOP853 at `rtol` (independent of the p x p flow), and
    W(t) = P exp(-Sigma(t)) P^T W(0), Sigma = (4/m) sum_mu xi_mu Lambda_mu;
    M~(t) = exp(-Sigma) M~(0) exp(-Sigma) (off-diagonals included), f_mu = sum_k lambda_{mu,k} z_k.

    Weight decay gamma (penalty gamma/2 |W|^2, as in `nqf.solve_flow`; the paper's "-gamma M" of
    Sec. 4 / Appendix B.3 is -2 gamma M here): Sigma -> Sigma + gamma t I and
    xi_mu' = sum_k lambda_{mu,k} z_k(0) exp(-(8/m) lambda_{mu,k} xi_mu - 2 gamma t) - y_mu.

    **Arguments:** `data` (any representation: dense data is jointly diagonalized, then `z` is in
    that basis, returned as `basis`); `ts` gradient-flow times (n,) >= 0; `M0` (p, p) symmetric PSD
    or `W0` (p, d) or `z0` (p,) (mode strengths in the basis of the data; M0 = P diag(z0) P^T),
    exactly one; `matrices`: also form M~(t) (n, p, p) and W(t) (False for large p: then only
    `xi`, `z`, `outputs` and the losses); `weight_decay` gamma >= 0 (see above); `tol` for the
    assumption check; `rtol` of the xi integration.

    With ``matrices=False`` the samples are read in block form (each sample's own modes and
    eigenvalues, O(m K) plus the basis): `DiagonalData` (K = 1) and `BlockData` never form an
    (m, p) or (m, m) array (m = 1e4 in seconds and tens of MB); `LowRankData` uses the
    eigenpairs of each A_mu = U_mu diag(s_mu) U_mu^T in its column space, so `z` has shape
    (n, m r) in the partial eigenbasis `basis` (p, m r), and `z0` is (m r,) in that order.
    `basis` is None for the standard basis (DiagonalData, BlockData without P).

    **Returns:** `SampleOracleSolution` with `xi` (n, m), `z` (n, p), `basis` P, `M` (n, p, p),
    `outputs` (n, m), `sample_losses`, `loss`, and `W` (n, p, d) given `W0`.

    **Under jit / vmap / grad** (traced `ts`, `M0` / `W0` / `z0`, labels or data values): the
    same E15 with the m xi_mu integrated together by diffrax's Kvaerno5 at a tenth of `rtol` and
    per-sample atol (`_solve_scalar_odes_traced`, max-norm error control, differentiable;
    agrees with the concrete scipy path to ~1e-13), in the same JAX code as concrete input
    (each xi_mu summing over the modes its sample owns). The checks are the same: on concrete
    values at once, on traced ones at run time (`equinox.error_if`: the orthogonality of traced
    `CommutingData`, M0 finite, symmetric and PSD, z0 >= 0, t >= 0); traced data must be
    commuting (`CommutingData`, `DiagonalData`, `BlockData`: dense data are jointly diagonalized
    on the host). ``matrices=False`` on concrete input uses the block form above.

    **Raises:** `AssumptionError` if max_{mu != nu} |A_mu A_nu|_F / (|A_mu|_F |A_nu|_F) > tol;
    `ValueError` for bad shapes, non-finite input, a non-PSD `M0`, negative times, bad `rtol`,
    a negative or non-finite `weight_decay`; `FloatingPointError` if scipy's xi integration fails
    (e.g. at times `ts` ~ 1e200, where float64 cannot resolve the steps).
    """
    tol = check_positive(tol, "tol", allow_zero=True)  # NaN would pass every assumption
    gamma = check_weight_decay(weight_decay)
    theorem = "Theorem 5"
    _check_data(data)
    rtol = _check_rtol(rtol)
    if not (matrices or any_traced(data, ts, M0, W0, z0, gamma)):  # block form on the host (see above)
        return _theorem5_blocks(data, ts, M0, W0, z0, tol, rtol, gamma)
    cdata = _orthogonal_commuting(data, theorem, tol)
    with jax.ensure_compile_time_eval():  # concrete input inside someone's jit: xi by scipy, as outside
        Lam = jnp.asarray(cdata.Lambda)
        m, p = Lam.shape
        P = jnp.eye(p) if cdata.P is None else jnp.asarray(cdata.P)
    ts = _times(ts)
    given = z0 is not None and not matrices  # the mode strengths as given (no M0 formed)
    if given:
        if M0 is not None or W0 is not None:
            raise ValueError("Give exactly one initial condition: `M0` (p, p), `W0` (p, d) or `z0` (p,).")
        z0 = _check_z0(z0, p)
    else:
        M0, W0 = _initial(cdata, M0, W0, p, z0=z0, P=P)
    Mb0 = None
    with jax.ensure_compile_time_eval():
        if given:
            z0 = jnp.asarray(z0, dtype=jnp.float64)
        else:
            Mb0 = P.T @ M0 @ P
            Mb0 = 0.5 * (Mb0 + Mb0.T)
            z0 = jnp.maximum(jnp.diagonal(Mb0), 0.0)
        y = jnp.asarray(cdata.y, dtype=jnp.float64)
        # each mode k belongs to the sample with the largest |lambda_{mu,k}| (exact under the assumption)
        own = jnp.arange(m)[:, None] == jnp.argmax(jnp.abs(jax.lax.stop_gradient(Lam)), axis=0)[None, :]
        Lown = jnp.where(own, Lam, 0.0)
        a, b = Lown * z0[None, :], 8.0 / m * Lown
    xi = _xi(a, b, y, ts, rtol, gamma)  # (n, m), Eq. E15
    expo = 4.0 / m * xi @ Lam + gamma * ts[:, None]  # Sigma_kk + gamma t, (n, p)
    if Mb0 is None:
        z, Mb, W = z0[None, :] * jnp.exp(-2.0 * expo), None, None
    else:
        z, Mb, W = _assemble(P, Mb0, expo, W0, matrices)
    return SampleOracleSolution(
        theorem, _host(ts), _host(z), _host(P), _host(Mb), _host(W), xi=_host(xi), outputs=_host(z @ Lam.T), y=_host(y)
    )


def _theorem5_blocks(data, ts, M0, W0, z0, tol, rtol, gamma=0.0) -> SampleOracleSolution:
    """`theorem5` with ``matrices=False`` on concrete input: the block form (O(m K) plus the
    basis, structural for every data class; a layout of the same E15, on the host)."""
    ts = _times(ts)
    sm = _sample_modes(data, "Theorem 5", tol)
    z0 = sm.z_initial(M0, W0, z0)
    xi = _solve_scalar_odes(sm.lam * sm.blockwise(z0), 8.0 / sm.m * sm.lam, sm.y, ts, rtol, gamma)  # (n, m)
    expo = sm.scatter(4.0 / sm.m * xi[:, :, None] * sm.lam[None]) + gamma * np.asarray(ts)[:, None]  # + gamma t
    z = z0[None, :] * np.exp(-2.0 * expo)
    outputs = np.sum(sm.lam * sm.blockwise(z), axis=-1)  # f_mu = sum_k lambda_{mu,k} z_k
    return SampleOracleSolution("Theorem 5", ts, z, sm.basis, None, None, xi=xi, outputs=outputs, y=sm.y)


# --------------------------------------------------------------------------------------------
# Theorem 10: sample-wise sudden learning
# --------------------------------------------------------------------------------------------
def _top(Lam: np.ndarray, y: np.ndarray, rel: float = 1e-12):
    """lambda*_mu = the nonzero eigenvalue of A_mu maximizing lambda y_mu (value, shape (m,); 0 for
    a zero matrix or y_mu = 0) and the top-set mask (m, p) (empty unless lambda* y_mu > 0)."""
    sgn = np.where(np.asarray(y) >= 0, 1.0, -1.0)
    score = np.where(Lam != 0, Lam * sgn[:, None], -np.inf)
    best = score.max(axis=1)
    best = np.where(np.isfinite(best), best, 0.0)
    lam_star = np.where(np.asarray(y) != 0, best * sgn, 0.0)
    best = np.where(np.asarray(y) != 0, best, 0.0)
    top = (score >= best[:, None] - rel * np.abs(best[:, None])) & (best[:, None] > 0)
    return lam_star, top


def samplewise_rates(data: AbstractData, *, tol: float = 1e-10) -> np.ndarray:
    """Effective growth rates of Theorem 10, zeta_mu = (8/m) lambda*_mu y_mu, shape (m,).

    lambda*_mu is the nonzero eigenvalue of A_mu that maximizes lambda y_mu (the largest for
    y_mu > 0, the most negative for y_mu < 0), so zeta_mu > 0 whenever sample mu can be learned
    from a small initialization; zeta_mu <= 0 means it is never learned (then -zeta_mu is the decay
    rate of its slowest-decaying mode; 0 for y_mu = 0 or A_mu = 0). (Theorem 10 states it for
    y_mu > 0: zeta_mu = (8/m) lambda_{mu,max} y_mu.)

    Structural for `DiagonalData`, `BlockData` and `LowRankData` (see `theorem5`: O(m p) memory).

    **Returns:** zeta, shape (m,).

    **Raises:** `AssumptionError` if the samples are not orthogonal (Theorem 5's condition).
    """
    tol = check_positive(tol, "tol", allow_zero=True)  # NaN would pass every assumption
    sm = _sample_modes(data, "Theorem 10", tol)
    lam_star, _ = _top(sm.lam, sm.y)
    return 8.0 / sm.m * lam_star * sm.y


@dataclasses.dataclass(frozen=True)
class SampleIgnition:
    """Ignition times of the samples (output f_mu reaches rho y_mu), gradient-flow time, each (m,).

    - `zeta`: growth rates zeta_mu (`samplewise_rates`).
    - `leading`: ln(1/eps) / zeta_mu (Theorem 10's leading order; None without `eps`).
    - `logistic`: the exact ignition time of the top-eigenspace logistic,
      (1/zeta) ln(rho (y - lambda* Z0) / ((1 - rho) lambda* Z0)) = leading + O(1) correction.
    - `correction`: logistic - leading = (1/zeta) ln(rho (y - lambda* c* eps)/((1-rho) lambda* c*)),
      c* = Z0/eps (None without `eps`).
    - `corrected`: logistic plus the first-order shift from the other eigenvalues of A_mu
      (each O(eps^(1 - lambda_k/lambda*))); None if computed with ``exact=False``.
    - `exact`: t*_mu of the exact solution (Theorem 5), from the implicit integral form of E15 by
      quadrature (`scipy.integrate.quad`), independent of any ODE solver; None with
      ``exact=False``.
    - `rho`: the level.

    Entries are `inf` for samples that are never learned (zeta <= 0 or no initial mass in the top
    eigenspace) and 0 for samples already at or beyond rho y_mu.
    """

    zeta: np.ndarray
    leading: np.ndarray | None
    logistic: np.ndarray
    correction: np.ndarray | None
    corrected: np.ndarray | None
    exact: np.ndarray | None
    rho: float


def _beta_integral(r: float, w0: float, rho: float) -> float:
    """J = int_{w0}^{rho} w^(r-1) ((1 - w)^-2 - 1) dw (bounded integrand ~ 2 w^r near 0)."""
    import scipy.integrate

    f = lambda w: w ** (r - 1.0) * ((1.0 - w) ** -2 - 1.0)  # noqa: E731
    val, _ = scipy.integrate.quad(f, w0, rho, epsabs=0.0, epsrel=1e-10, limit=200)
    return val


def _exact_ignition(lam, z0, y, m, rho):
    """Exact t* of one sample: f(xi) = sum_k lam_k z0_k exp(-(8/m) lam_k xi) reaches rho y along
    the path xi' = f(xi) - y from 0; t* = int_0^{xi*} ds / (f(s) - y)."""
    import scipy.integrate
    import scipy.optimize

    b = 8.0 / m * lam

    def f(xi):
        return float(np.sum(lam * z0 * np.exp(-b * xi)))

    target = rho * y
    F0 = f(0.0) - y
    if (f(0.0) - target) * np.sign(y) >= 0:
        return 0.0
    direction = np.sign(F0)  # xi' = f(xi) - y keeps the sign of F0 until the fixed point
    # bracket xi* along the direction of motion: f - target changes sign before the fixed point
    step = 1.0 / max(float(np.max(np.abs(b))), _TINY)
    lo, hi = 0.0, direction * step
    for _ in range(2000):
        if (f(hi) - target) * np.sign(y) >= 0:
            break
        if (f(hi) - y) * F0 <= 0:  # passed the fixed point without reaching the target
            return np.inf
        lo, hi = hi, hi * 2.0
    else:
        return np.inf
    xs = scipy.optimize.brentq(
        lambda x: f(x) - target, min(lo, hi), max(lo, hi), xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500
    )
    val, _ = scipy.integrate.quad(lambda s: 1.0 / (f(s) - y), 0.0, xs, epsabs=0.0, epsrel=1e-12, limit=500)
    return val


def sample_ignition_times(
    data: AbstractData,
    *,
    M0=None,
    W0=None,
    z0=None,
    rho: float = 0.5,
    eps: float | None = None,
    exact: bool = True,
    tol: float = 1e-10,
) -> SampleIgnition:
    """Ignition times t*_mu of the samples under Theorem 5's assumption (Theorem 10, Eq. E23).

    t*_mu is when the output f_mu = Tr[M A_mu] first reaches rho y_mu. See `SampleIgnition` for
    the returned forms: the leading order ln(1/eps)/zeta_mu, the logistic form with its O(1)
    correction (derived in the module docstring), the first-order correction from the
    subdominant eigenvalues of A_mu, and the exact value by quadrature of the E15 integral.

    The subdominant shift of a mode k of sample mu with r = lambda_k / lambda*, a_k = lambda_k
    z_k(0), A = lambda* Z0 and q = rho y / A is (first order in those modes)

        dt_k = (a_k / (zeta y)) [ (y/A)^r J_k + (q^r - 1)/r - q^r / (rho (1 - rho)) ],
        J_k = int_{A/y}^{rho} w^(r-1) ((1 - w)^-2 - 1) dw.

    **Arguments:** `data` with orthogonal samples; `M0`, `W0` or `z0` the initial condition (as
    in `theorem5`); `rho` in (0, 1); `eps` > 0, the initial scale used for `leading` and
    `correction` (z_k(0) = eps c_k), optional; `exact`: also compute `corrected` and `exact`
    (a few quadratures per sample; with False both are None, for large m). Structural for
    `DiagonalData`, `BlockData` and `LowRankData` (see `theorem5`; `z0` as there).

    **Returns:** `SampleIgnition`.

    **Raises:** `AssumptionError` if the samples are not orthogonal; `ValueError` for rho outside
    (0, 1), eps <= 0 or bad initial conditions.
    """
    tol = check_positive(tol, "tol", allow_zero=True)  # NaN would pass every assumption
    if not 0.0 < rho < 1.0:
        raise ValueError(f"`rho` must lie in (0, 1); found {rho!r}.")
    if eps is not None and not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"`eps` must be a finite value > 0; found {eps!r}.")
    sm = _sample_modes(data, "Theorem 10", tol)
    m, y, lam = sm.m, sm.y, sm.lam
    z0_b = sm.blockwise(sm.z_initial(M0, W0, z0))  # (m, K)
    lam_star, top = _top(lam, y)
    zeta = 8.0 / m * lam_star * y
    Z0 = np.sum(np.where(top, z0_b, 0.0), axis=1)
    A = lam_star * Z0  # initial output of the top eigenspace (same sign as y when learnable)
    live = (zeta > 0) & (Z0 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        arg = rho * (y - A) / ((1.0 - rho) * A)
        logistic = np.where(live, np.where(arg > 1.0, np.log(arg) / zeta, 0.0), np.inf)
    corrected = logistic.copy()
    exact_t = np.full(m, np.inf)
    for mu in range(m if exact else 0):
        own = sm.mask[mu]
        if not live[mu]:
            continue
        exact_t[mu] = _exact_ignition(lam[mu, own], z0_b[mu, own], y[mu], m, rho)
        if logistic[mu] == 0.0:
            continue
        shift = 0.0
        for k in np.flatnonzero(own & ~top[mu]):
            r = lam[mu, k] / lam_star[mu]
            a_k = lam[mu, k] * z0_b[mu, k]
            if a_k == 0.0 or r == 0.0:
                continue
            q = rho * y[mu] / A[mu]
            w0 = A[mu] / y[mu]
            J = _beta_integral(r, w0, rho)
            with np.errstate(over="ignore"):
                shift += (
                    a_k
                    / (zeta[mu] * y[mu])
                    * ((y[mu] / A[mu]) ** r * J + np.expm1(r * np.log(q)) / r - q**r / (rho * (1.0 - rho)))
                )
        corrected[mu] = logistic[mu] + shift
    leading = correction = None
    if eps is not None:
        with np.errstate(divide="ignore"):
            leading = np.where(live, np.log(1.0 / eps) / np.where(live, zeta, 1.0), np.inf)
        correction = np.where(live, logistic - leading, np.nan)
    if not exact:
        corrected = exact_t = None
    return SampleIgnition(zeta, leading, logistic, correction, corrected, exact_t, float(rho))


def crossing_times(t, f, level, *, direction: float = 1.0) -> np.ndarray:
    """First times at which the columns of `f` (n, m) cross `level` (m,), by linear interpolation
    between consecutive samples of `t` (n,) (for saved GD trajectories; `direction` = +1 for an
    upward crossing f >= level, -1 for downward; per column, a (m,) array of signs is accepted).

    **Returns:** (m,), `nan` where the column never crosses.
    """
    return _first_crossings(t, f, level, direction=direction, how="linear")


def measure_sample_ignition_times(solution, *, rho: float = 0.5, xtol: float = 1e-12) -> np.ndarray:
    """Times at which the outputs f_mu(t) = Tr[M(t) A_mu] of a solved flow first reach rho y_mu.

    Brackets each crossing on the solver's step grid and refines it with Brent's method on the
    dense interpolant (`FlowSolution.M_at`), to absolute time tolerance `xtol`.

    **Arguments:** `solution`, a `FlowSolution` solved with `dense=True` (forms "M", "factor",
    "glv"); `rho` in (0, 1).

    **Returns:** (m,) gradient-flow times; `nan` where f_mu does not reach rho y_mu before t1.

    **Raises:** `ValueError` for rho outside (0, 1) or a solution without dense output;
    `RuntimeError` if JAX's float64 was turned off after importing nqf.
    """
    require_x64()
    _check_rho(rho)
    data = solution.data
    y = np.asarray(data.y, float)

    def outputs(t):
        t = np.atleast_1d(np.asarray(t, float))
        if solution.form == "glv":
            return solution.z_at(t) @ np.asarray(data.Lambda).T
        M = solution.M_at(t)
        return np.stack([np.asarray(data.traces(Mi)) for Mi in M])

    grid = solution.step_times
    return _first_crossings(grid, outputs(grid), rho * y, direction=np.sign(y), at=outputs, how="brent", xtol=xtol)


def staircase_limit(tau, zeta, y) -> np.ndarray:
    """Theorem 10's eps -> 0 loss at rescaled time tau = t / ln(1/eps) (Eq. E23):

        lim L(tau ln(1/eps)) = (1/m) sum_mu y_mu^2 I(tau < 1/zeta_mu),

    with samples of zeta_mu <= 0 never learned. **Arguments:** `tau` (n,) >= 0; `zeta`, `y` (m,).
    **Returns:** (n,). **Raises:** `ValueError` for a negative `tau`, non-finite values or
    mismatched shapes.
    """
    tau = np.atleast_1d(np.asarray(as_array(tau, "tau"), float))
    if np.any(tau < 0):
        raise ValueError(f"`tau` must be rescaled times t / ln(1/eps) >= 0; found minimum {tau.min():.3g}.")
    zeta = np.asarray(as_array(zeta, "zeta", ndim=1), float)
    y = np.asarray(as_array(y, "y", ndim=1, shape=zeta.shape), float)
    from .powerlaw import featurewise_limit

    return featurewise_limit(tau, zeta, y**2 / y.shape[0])
