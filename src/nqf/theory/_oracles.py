"""Exact solutions of the MSE gradient flow (THEORY sec. 6) with checked assumptions.

Each oracle first measures the assumption it rests on, on the data set it is given, as a relative
residual, and refuses with an `AssumptionError` naming the violated condition if the residual
exceeds `tol`. Only then does it evaluate the closed form. Time is gradient-flow time
t = eta * (number of GD steps), the same time as `nqf.solve_flow`.

- `theorem6`: commuting data with orthogonal features (Theorem 6, Eq. E16): every mode is logistic.
- `theorem7` / `theorem7_commuting`: isotropic samples, K(X) = 4 c X (Theorem 7, Eq. E17).
- `theorem16`: invariant orthogonal projectors (Theorem 16, Eq. E18), unifying 6 and commuting 7.
- `proposition7`: the off-diagonal slaving of commuting data (Proposition 7, Eq. E12), given any
  trajectory of the mode strengths z.

Weight decay (`weight_decay` = gamma >= 0 in every oracle) follows nqf's convention, the penalty
gamma/2 |W|^2 of `nqf.solve_flow`: W' = -(H + gamma I) W, M' = ... - 2 gamma M. The paper
(Sec. 4 and Appendix B.3) writes the decay term as "-gamma M" and the stability threshold of a mode
as r_k - gamma (Sec. 9); in nqf's convention these read -2 gamma M and r_k - 2 gamma (Theorem 6),
g_k - gamma (Theorem 7, whose z_k grow at 2 g_k) and g_a - gamma (Theorem 16). The paper's gamma is
twice nqf's. Every closed form keeps its shape with the shifted rate: a mode whose rate falls
below the threshold decays (its logistic has a negative rate) and never ignites.

All closed forms are evaluated so that no two large terms cancel (`expm1`, positive sums only), so
their relative accuracy holds for initial scales z(0) ~ 1e-12 and large growth r t.

Each oracle is one JAX code for concrete and traced input (jit / vmap / grad). Its checks (the
theorem's assumption, argument validation) go through one mechanism, `nqf._core._checks.check`
/ `check_assumption`: measured in JAX under `jax.ensure_compile_time_eval()`, so that concrete
values (also inside someone's jit) are checked at once and refused with the exception and the
measured values; a check on a traced value becomes `equinox.error_if`, raised at run time (never
called inside `ensure_compile_time_eval`, where its error branch would run at trace time). Host
algorithms (scipy's ODE solver, Theorem 7's graded form) run where their inputs are concrete,
also inside someone's jit.
Concrete input gives numpy arrays (converted at the boundary, `_host`). Theorem 7 keeps three
evaluations of E17: the graded form (concrete M0, needs its rank), the information form (traced,
M0 positive definite) and one linear solve per time (traced, singular M0, refused where
ill-conditioned), see `theorem7`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._core._checks import (
    any_traced,
    as_array,
    as_weights,
    check,
    check_assumption,
    check_positive,
    is_traced,
)
from .._core._errors import AssumptionError
from .._core.io import Saveable
from ..data._isotropic import (
    _check_data,
    _initial_M,
    _isotropy,
    _riccati_isotropic,
    _times,
    check_times_memory,
    isotropy,
    sym_basis,
)
from ..data._operators import AbstractCommutingData, AbstractData, CommutingData, DiagonalData, check_initial_loss
from ..dynamics._glv import _THM6_COND, _logistic_terms, features_cosines
from ..dynamics._train_args import check_weight_decay

__all__ = [
    "AssumptionError",
    "OracleSolution",
    "theorem6_rates",
    "theorem6",
    "theorem7",
    "theorem7_commuting",
    "theorem16",
    "proposition7",
    "logistic",
    "isotropy",
    "sym_basis",
]

_TINY = np.finfo(float).tiny


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["ts", "z", "basis", "M_basis", "W"], meta_fields=["theorem"]
)
@dataclasses.dataclass(frozen=True, eq=False)
class OracleSolution(Saveable):
    """An exact solution evaluated at times `ts`.

    **Attributes:**

    - `theorem`: which result produced it (``"Theorem 6"``, ...).
    - `ts`: gradient-flow times, shape (n,).
    - `z`: mode strengths, shape (n, p) (Theorems 6, 7: diagonal of M in `basis`) or (n, n_a)
      (Theorem 16: coefficients of the projectors).
    - `basis`: orthogonal (p, p) basis in which `M_basis` is expressed (None: standard basis).
    - `M_basis`: M(t) in `basis`, shape (n, p, p); small entries keep their relative accuracy here.
    - `W`: W(t) = Q(t) W0, shape (n, p, d), when the oracle was given a factor W0 (else None).

    `M` (property): M(t) = basis M_basis basis^T in the standard basis, shape (n, p, p).
    """

    theorem: str
    ts: np.ndarray
    z: np.ndarray
    basis: np.ndarray | None
    M_basis: np.ndarray = dataclasses.field(repr=False)
    W: np.ndarray | None = dataclasses.field(repr=False, default=None)

    @functools.cached_property
    def M(self) -> np.ndarray:
        """Order parameter M(t) in the standard basis, shape (n, p, p)."""
        if self.basis is None:
            return self.M_basis
        return _host(jnp.einsum("ik,nkl,jl->nij", self.basis, self.M_basis, self.basis))


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def logistic(R, C, z0, ts) -> np.ndarray:
    """Exact solution of the logistic ODE z' = R z - C z^2, z(0) = z0, C >= 0 (Eqs. E16-E18).

    Evaluated as z0 / (e^{-R t} + C z0 (1 - e^{-R t}) / R) for R > 0 and
    z0 e^{R t} / (1 + C z0 (e^{R t} - 1) / R) for R < 0 (R = 0: z0 / (1 + C z0 t)), with one
    exponential e^{-|R| t} <= 1 and (1 - e^{-|R| t}) / |R| to full relative precision: both
    denominators are sums of non-negative terms, so the relative accuracy is that of float64
    for any z0 (down to 1e-12 and below) and any R t. Runs under jit / vmap / grad.

    **Arguments:** `R`, `C`, `z0` broadcastable, shape (p,); `ts` times, shape (n,).

    **Returns:** z(t), shape (n, p) (a numpy array for concrete input).
    """
    t = jnp.asarray(ts, dtype=jnp.float64)[:, None]
    return _host(jnp.asarray(z0, dtype=jnp.float64) * _logistic_ratio(R, C, z0, t))


def _logistic_ratio(R, C, z0, t):
    """z(t)/z(0) for z' = R z - C z^2 (see `logistic`); 1 where z0 = 0 (the mode stays at 0).
    JAX arrays in, a JAX array out (traceable; no overflow, so gradients stay finite)."""
    R, C, z0, t = jnp.broadcast_arrays(*(jnp.asarray(v, dtype=jnp.float64) for v in (R, C, z0, t)))
    _, e, frac = _logistic_terms(R, t)
    grows = R > 0
    ratio = jnp.where(grows, 1.0, e) / (jnp.where(grows, e, 1.0) + C * z0 * frac)
    return jnp.where(z0 > 0, ratio, 1.0)


def _host(x):
    """`x` as numpy unless it is traced (the oracles return numpy arrays for concrete input)."""
    return x if x is None or any_traced(x) else np.asarray(x)


def _commutator_residual(A: np.ndarray) -> tuple[float, tuple[int, int]]:
    """max_{mu,nu} max|A_mu A_nu - A_nu A_mu| / max|A|^2 and its (mu, nu)."""
    scale = max(float(np.abs(A).max(initial=0.0)), _TINY)
    AB = np.einsum("aij,bjk->abik", A, A)
    comm = np.abs(AB - np.swapaxes(AB, 0, 1)).max(axis=(2, 3), initial=0.0)
    a, b = np.unravel_index(np.argmax(comm), comm.shape)
    return float(comm[a, b]) / scale**2, (int(a), int(b))


_COMMUTING = "commuting data A_mu A_nu = A_nu A_mu (Assumption 1: a shared eigenbasis P)"


def _as_commuting(data: AbstractData, theorem: str, tol: float, fn: str = "") -> CommutingData:
    """`data` as `CommutingData`, converting dense forms on the host (concrete data, also inside
    someone's jit); AssumptionError if it does not commute; ValueError for traced dense data."""
    _check_data(data)
    if isinstance(data, AbstractCommutingData):
        return data
    if any_traced(data):
        raise ValueError(
            f"Under jit / vmap / grad with traced data `{fn}` needs CommutingData or DiagonalData "
            f"(dense data are converted on the host); found {type(data).__name__}."
        )
    with jax.ensure_compile_time_eval():
        return _from_dense(data, theorem, tol)


def _from_dense(data, theorem: str, tol: float) -> CommutingData:
    A = np.asarray(data.dense())
    res, (a, b) = _commutator_residual(A)
    if res > tol:
        raise AssumptionError(
            theorem,
            _COMMUTING,
            res,
            tol,
            where=f"(mu, nu) = ({a}, {b})",
            detail="Residual: max|A_mu A_nu - A_nu A_mu| / max|A|^2.",
        )
    try:
        return CommutingData.from_dense(A, np.asarray(data.y), rtol=max(tol, 1e-14))
    except ValueError as err:  # joint diagonalization failed
        raise AssumptionError(theorem, _COMMUTING, float("nan"), tol, detail=str(err)) from None


# --------------------------------------------------------------------------------------------
# Theorem 6
# --------------------------------------------------------------------------------------------


def theorem6_rates(data: AbstractCommutingData) -> tuple[np.ndarray, np.ndarray]:
    """Growth rates and self-competition of Theorem 6 (Eq. E16).

    r_k = (8/m) sum_mu lambda_{mu,k} y_mu and C_kk = (8/m) sum_mu lambda_{mu,k}^2, each shape (p,),
    in the shared eigenbasis P of commuting data. (No assumption check; `theorem6` checks.)
    Numpy arrays for concrete data; JAX arrays for traced data (jit / vmap / grad).

    **Raises:** `TypeError` if `data` is not commuting (`CommutingData` or `DiagonalData`).
    """
    if not isinstance(data, AbstractCommutingData):
        raise TypeError(
            "`theorem6_rates` needs commuting data (a `CommutingData`); build it with "
            f"`CommutingData.from_dense`. Found {type(data).__name__}."
        )
    r, C = _rates(data)
    return _host(r), _host(C)


def _rates(data):
    """(r, C) of `theorem6_rates`, JAX arrays (traceable)."""
    return 8.0 / data.m * data.pullback(data.y), 8.0 / data.m * data.feature_norms()


def theorem6(
    data: AbstractData, ts, *, M0=None, W0=None, weight_decay: float = 0.0, tol: float = 1e-10
) -> OracleSolution:
    """Theorem 6 (Eq. E16): exact flow for commuting data with orthogonal features.

    With A_mu = P diag(lambda_mu) P^T and sum_mu lambda_{mu,k} lambda_{mu,j} = 0 for k != j, every
    mode strength z_k = (P^T M P)_kk is logistic,
    z_k(t) = r_k z_k(0) / (C_kk z_k(0) + (r_k - C_kk z_k(0)) exp(-r_k t))  (r_k = 0:
    z_k(0) / (1 + C_kk z_k(0) t)), with r, C from `theorem6_rates`, and
    W(t) = Q(t) W(0), M(t) = Q(t) M(0) Q(t), Q = P diag(sqrt(z(t)/z(0))) P^T (for any PSD M(0),
    off-diagonals included: Proposition 7). Modes with z_k(0) = 0 stay at 0.

    Weight decay gamma (penalty gamma/2 |W|^2, as in `nqf.solve_flow`) replaces r_k by
    r_k - 2 gamma everywhere above (z_k' = (r_k - 2 gamma - C_kk z_k) z_k): modes with
    r_k < 2 gamma decay to 0 and never ignite, modes with r_k > 2 gamma saturate at
    (r_k - 2 gamma) / C_kk. The paper writes this threshold r_k - gamma (Sec. 9), with the decay
    term "-gamma M" (Sec. 4, Appendix B.3): its gamma is twice nqf's.

    **Arguments:**

    - `data`: a `CommutingData`, or any data set whose matrices commute (converted with
      `CommutingData.from_dense`; then `z` is in that conversion's basis, returned as `basis`).
    - `ts`: gradient-flow times t = eta * steps, shape (n,), >= 0.
    - `M0` (p, p) symmetric PSD, or `W0` (p, d) with M0 = W0 W0^T (exactly one).
    - `weight_decay`: gamma >= 0 (penalty gamma/2 |W|^2, nqf's convention; see above).
    - `tol`: tolerance of the assumption checks (relative residuals).

    **Returns:** `OracleSolution` with `z` (n, p), `basis` = P, `M` (n, p, p) and, given `W0`,
    `W` (n, p, d).

    Runs under jit / vmap / grad (times, initial condition and data values traced): the same
    JAX code; checks on traced values run at run time (`equinox.error_if`: the orthogonality of
    traced features, t >= 0, M0 finite, symmetric and PSD); traced data must be `CommutingData`
    or `DiagonalData` (dense data are converted on the host).

    **Raises:** `AssumptionError` if the data does not commute (residual
    max|[A_mu, A_nu]| / max|A|^2) or the features are not orthogonal (residual: the largest cosine
    |sum_mu lambda_{mu,k} lambda_{mu,j}| / (|lambda_k| |lambda_j|), k != j); `ValueError` for bad
    shapes, non-finite input, a non-PSD `M0`, negative times, a negative or non-finite
    `weight_decay`.
    """
    tol = check_positive(tol, "tol", allow_zero=True)  # NaN would pass every assumption
    gamma = check_weight_decay(weight_decay)
    theorem = "Theorem 6"
    check_times_memory(ts, getattr(data, "p", None), "theorem6")  # before the data's checks (~1 s)
    cdata = _as_commuting(data, theorem, tol, "theorem6")
    if not isinstance(cdata, DiagonalData):  # DiagonalData: one feature per sample, orthogonal
        with jax.ensure_compile_time_eval():
            cos, cols = features_cosines(cdata.Lambda)
        cdata = check_assumption(
            cdata,
            theorem,
            _THM6_COND,
            cos,
            tol,
            where=lambda i: f"(k, j) = ({int(cols[i[0]])}, {int(cols[i[1]])})",
            detail="Residual: |sum_mu lambda_{mu,k} lambda_{mu,j}| / (|lambda_k| |lambda_j|).",
        )
    p = cdata.p
    ts = _times(ts)
    if (M0 is None) == (W0 is None):
        raise ValueError("Give exactly one initial condition: `M0` (p, p) or `W0` (p, d).")
    if W0 is not None:
        W0 = jnp.asarray(as_weights(W0, p, host=True), dtype=jnp.float64)
        check_initial_loss(cdata, W0, "W0", "W")
        M0 = W0 @ W0.T
    else:
        M0 = _initial_M(M0, p)
        check_initial_loss(cdata, M0, "M0")
    P = jnp.eye(p) if cdata.P is None else jnp.asarray(cdata.P)
    Mb0 = P.T @ M0 @ P
    z0 = jnp.maximum(jnp.diagonal(Mb0), 0.0)
    r, C = _rates(cdata)
    ratio = _logistic_ratio(r - 2.0 * gamma, C, z0, ts[:, None])  # (n, p): z(t)/z(0), Eq. E16
    s = jnp.sqrt(ratio)
    z = z0 * ratio
    Mb = s[:, :, None] * Mb0[None] * s[:, None, :]
    Mb = Mb.at[:, jnp.arange(p), jnp.arange(p)].set(z)  # diagonal exactly z (no rounding from s^2)
    W = None if W0 is None else jnp.einsum("ik,nk,kd->nid", P, s, P.T @ W0)
    return OracleSolution(theorem, _host(ts), _host(z), _host(P), _host(Mb), _host(W))


# --------------------------------------------------------------------------------------------
# Theorem 7
# --------------------------------------------------------------------------------------------
_THM7_COND = "isotropic samples K(X) = 4 c X for every symmetric X"


def _check_isotropic(data: AbstractData, tol, theorem: str = "Theorem 7"):
    """(data, c): Theorem 7's isotropy check (`check_assumption`: concrete data now, traced data
    at run time, threaded through the returned data) and c = Tr K / (4 dim Sym(p))."""
    with jax.ensure_compile_time_eval():
        c, res, kappa = _isotropy(data)
    p, m = data.p, data.m

    def detail():
        ns = p * (p + 1) // 2
        out = (
            f"Residual: max|kappa - 4c| / max kappa over the eigenvalues kappa of K on Sym({p}) "
            f"(they span [{float(kappa.min()):.4g}, {float(kappa.max()):.4g}], 4c = {4 * float(c):.4g})."
        )
        if m < ns:
            out += f" Isotropy needs m >= p(p+1)/2 = {ns} samples; found m = {m}."
        return out

    return check_assumption(data, theorem, _THM7_COND, res, tol, detail=detail), c


# sinh(x)/x = sum_k x^(2k) / (2k+1)!, k <= 6: relative error < 1e-16 for |x| < 1/2
_SINHC = tuple(1.0 / float(np.prod(np.arange(1, 2 * k + 2))) for k in range(7))


def _t_sinhc(g, t):
    """e^{g t} (1 - e^{-2 g t}) / (2 g) = sinh(g t) / g (= t at g = 0), traceable, with finite
    gradients at g = 0: t times a Taylor polynomial of sinh(x)/x for |x| < 1/2."""
    x = g * t
    small = jnp.abs(x) < 0.5
    xs = jnp.where(small, x, 0.0) ** 2
    poly = _SINHC[-1]
    for c in _SINHC[-2::-1]:
        poly = poly * xs + c
    xb = jnp.where(small, 1.0, x)
    return t * jnp.where(small, poly, jnp.sinh(xb) / xb)


def _t_expm1c(a, t):
    """(1 - e^{-2 a t}) / (2 a) = e^{-a t} sinh(a t) / a (= t at a = 0), traceable for any real
    a (the Taylor branch covers |a t| < 1/2 on both sides of 0, so it is smooth at a = 0), bounded
    by t and by 1 / (2 a) for a > 0, no overflow for a t >= -1/2."""
    x = a * t
    small = jnp.abs(x) < 0.5
    xs = jnp.where(small, x, 0.0)
    poly = _SINHC[-1]
    for c in _SINHC[-2::-1]:
        poly = poly * xs**2 + c
    xb = jnp.where(small, 1.0, x)
    return t * jnp.where(small, jnp.exp(-xs) * poly, -jnp.expm1(-2.0 * xb) / (2.0 * xb))


# the information form needs lambda_min(M0) >= _PD_RATIO lambda_max(M0) (relative error <~ eps / ratio)
_PD_RATIO = 1e-6
# the fallback solve of `_riccati_traced` refuses when cond(I + 8 c Z Psi) exceeds this (error <~ eps cond)
_SOLVE_COND = 1e6


def _riccati_info(g, c, X, ts):
    """Eq. E17 in Y's eigenbasis for positive definite M~0 = X, in information form with every
    exponential <= 1: with l = e^{-max(g, 0) t}, h = e^{-max(-g, 0) t} (so e^{g t} = h / l) and
    phi~ = (1 - e^{-2 |g| t}) / (2 |g|) (t at g = 0; so Phi = diag(phi~) / l^2),

        M~(t) = E (X^{-1} + 8 c Phi)^{-1} E = H J^{-1} H,  J = L X^{-1} L + 8 c diag(phi~),

    L = diag(l), H = diag(h). J is SPD with bounded entries (L X^{-1} L decays on the growing
    modes, where 8 c phi~ -> 4 c / g takes over), so one Cholesky solve per time is accurate to
    ~eps cond(X) relative, for any t (no overflow, no e^{+|g| t}). The branch g > 0 / g <= 0 is
    one boolean per mode, and each branch is analytic in g, so gradients are right at g = 0.
    Shapes: g (p,), X (p, p) SPD, ts (n,) -> (n, p, p)."""
    t = ts[:, None]
    pos = g > 0
    a = jnp.where(pos, g, -g)[None, :]  # |g|, branch-consistent
    l = jnp.where(pos, jnp.exp(-a * t), 1.0)  # (n, p)
    h = jnp.where(pos, 1.0, jnp.exp(-a * t))
    phi = _t_expm1c(a, t)
    p = g.shape[0]
    cho = jax.scipy.linalg.cho_factor(X, lower=True)
    Xi = jax.scipy.linalg.cho_solve(cho, jnp.eye(p))
    Xi = 0.5 * (Xi + Xi.T)
    J = l[:, :, None] * Xi[None] * l[:, None, :] + 8.0 * c * jax.vmap(jnp.diag)(phi)
    Ji = jax.vmap(lambda A: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(A, lower=True), jnp.eye(p)))(J)
    Mb = h[:, :, None] * Ji * h[:, None, :]
    return 0.5 * (Mb + jnp.swapaxes(Mb, 1, 2))


def _riccati_solve(g, c, X, ts):
    """Eq. E17 in Y's eigenbasis as one linear solve per time, for traced input:
    M~(t) = (I + 8 c Z Psi)^{-1} Z with Z = E X E, E = diag(e^{g t}) and
    (Z Psi)_ij = e^{g_i t} X_ij sinh(g_j t) / g_j (Psi = E^{-1} Phi E^{-1}, Phi = int_0^t e^{2 g s} ds).
    I + 8 c Z Psi is similar to an SPD matrix with eigenvalues >= 1, so the solve is stable in
    norm; entries much smaller than |M~| carry absolute (not relative) error ~ 1e-16 |M~|, and
    e^{g t} must not overflow (|g| t < ~350). The error grows like eps cond(I + 8 c Z Psi), which
    reaches 1/eps within tens of 1/|g| when modes of different sign or scale mix (e.g.
    g = (1, 0.5, -0.4), M0 = 1e-6 I, t = 75: entries ~3e18 instead of ~0.47), so it is only the
    fallback for singular or ill-conditioned M~0, guarded by that condition number (see
    `_riccati_traced`). Times where e^{g t} overflows are not solved (M~ = 0 there, cond = inf).
    Returns (M~ (n, p, p), cond (n,) of the solved matrices, not differentiated)."""
    t = ts[:, None]
    p = g.shape[0]
    E = jnp.exp(g[None, :] * t)  # (n, p)
    S = _t_sinhc(g[None, :], t)  # (n, p)
    Z = E[:, :, None] * X[None] * E[:, None, :]
    A = jnp.eye(p) + 8.0 * c * (E[:, :, None] * X[None] * S[:, None, :])
    # exp(g t) overflows for large |g| t (inf, or 0 * inf = NaN): LAPACK must not see those
    # matrices (it prints "DLASCL parameter 4" and returns garbage); their cond is reported as inf
    ok = jnp.all(jnp.isfinite(A), axis=(1, 2)) & jnp.all(jnp.isfinite(Z), axis=(1, 2))
    A = jnp.where(ok[:, None, None], A, jnp.eye(p))
    Z = jnp.where(ok[:, None, None], Z, 0.0)
    Mb = jnp.linalg.solve(A, Z)
    cond = jnp.where(ok, jnp.linalg.cond(jax.lax.stop_gradient(A)), jnp.inf)
    return 0.5 * (Mb + jnp.swapaxes(Mb, 1, 2)), cond


def _riccati_traced(g, c, X, ts):
    """Eq. E17 in Y's eigenbasis for traced input (jit / vmap / grad): the information form
    (`_riccati_info`, accurate at every t) when M~0 = X is positive definite with
    lambda_min >= 1e-6 lambda_max; otherwise (singular or ill-conditioned M0) the linear solve
    `_riccati_solve`, refused at run time (`check`: `FloatingPointError`) once the condition
    number of its matrix exceeds 1e6 (relative error bound ~eps 1e6 = 1e-10), since a solution on
    the range of a singular M0 needs its rank (the concrete graded form). The choice is made on
    the values (both branches are evaluated, sanitized, when X is traced). Shapes: g (p,),
    X (p, p), ts (n,) -> (n, p, p)."""
    p = g.shape[0]
    with jax.ensure_compile_time_eval():
        lam = jnp.linalg.eigvalsh(jax.lax.stop_gradient(X))
        pd = lam[0] > _PD_RATIO * lam[-1]
    if not is_traced(pd):
        if bool(pd):
            return _riccati_info(g, c, X, ts)
        Mi, ts_s = None, ts
    else:
        Mi = _riccati_info(g, c, jnp.where(pd, X, jnp.eye(p)), ts)  # sanitized: finite when unused
        ts_s = jnp.where(pd, 0.0, ts)
    Ms, cond = _riccati_solve(g, c, X, ts_s)
    with jax.ensure_compile_time_eval():
        bad = ~pd & jnp.any(cond > _SOLVE_COND)  # cond = inf where e^{g t} overflowed
    head = "`M0` is singular or ill-conditioned for Theorem 7 under jit / vmap / grad"
    bound = f"(lambda_min(M0) < {_PD_RATIO:g} lambda_max(M0), i.e. condition number > {1 / _PD_RATIO:g}"
    tail = (
        "; a singular M0 needs its rank, which a traced call cannot take, so E17 is evaluated by a linear solve "
        f"that is ill-conditioned (cond > {_SOLVE_COND:g}) or overflows at these times. Call theorem7 with "
        "concrete `M0` and `ts` (the graded form is accurate there), use smaller times, or a positive definite M0"
    )
    if is_traced(lam):
        measured = ")"
    else:  # M0 concrete (e.g. only `ts` traced): its spectrum goes into the run-time message
        lam_ = np.asarray(lam)
        lo, hi = float(lam_[0]), float(lam_[-1])
        kappa = hi / lo if lo > 0 else float("inf")
        measured = f"; found lambda_min = {lo:.3g}, lambda_max = {hi:.3g}, condition number {kappa:.3g})"

    def error():
        worst = float(jnp.max(cond))
        return FloatingPointError(f"{head} {bound}{measured}{tail}; found solve cond {worst:.3g}.")

    Ms = check(Ms, bad, error, f"{head} {bound}{measured}{tail}")
    return Ms if Mi is None else jnp.where(pd, Mi, Ms)


def theorem7(data: AbstractData, ts, *, M0, weight_decay: float = 0.0, tol: float = 1e-10) -> OracleSolution:
    """Theorem 7 (Eq. E17): exact flow for isotropic samples, K(X) = 4 c X.

    M(t) = exp(Y t) M0 [I + 8 c Phi(t) M0]^{-1} exp(Y t), Phi(t) = int_0^t exp(2 Y s) ds,
    Y = (4/m) sum_mu y_mu A_mu. Evaluated in the eigenbasis V of Y (Y = V diag(g) V^T) from a
    graded information form on the range of M0 (see `_riccati_isotropic`), never forming the
    ill-conditioned I + 8 c Phi M0: valid for any PSD M0 (singular included; eigenvalues below
    ~1e-15 of the largest are treated as zero), no overflow, and the small modes keep their
    relative accuracy for z(0) down to 1e-12 and large |g| t.

    Weight decay gamma (penalty gamma/2 |W|^2, as in `nqf.solve_flow`) adds -2 gamma M, i.e.
    Y -> Y - gamma I in E17 (same eigenvectors, eigenvalues g_k - gamma): modes with g_k < gamma
    never ignite. (The paper's "-gamma M", Sec. 4 / Appendix B.3, is -2 gamma M here: its gamma
    is twice nqf's.)

    **Arguments:** `data` (any representation), `ts` gradient-flow times (n,) >= 0, `M0` (p, p)
    symmetric PSD, `weight_decay` gamma >= 0 (see above), `tol` for the isotropy check.

    **Returns:** `OracleSolution` with `basis` = V (eigenvectors of Y, ascending eigenvalues),
    `M_basis` = V^T M(t) V, `z` = its diagonal (n, p) (the z_k of `theorem7_commuting` when M0
    commutes with Y), and `M` (n, p, p).

    **Under jit / vmap / grad** (traced `ts`, `M0`, labels or data values): the graded form
    needs the rank of M0 and data-dependent orderings, so a traced call evaluates E17 in
    information form with every exponential <= 1 (`_riccati_info`):
    M~(t) = H (L M~0^{-1} L + 8 c diag(phi~))^{-1} H, L = diag(e^{-max(g, 0) t}),
    H = diag(e^{-max(-g, 0) t}), phi~ = (1 - e^{-2|g| t}) / (2|g|): one p x p Cholesky solve per
    time, differentiable, no overflow and accurate at every t (|g| t up to 2000 and beyond), for
    M0 positive definite with lambda_min >= 1e-6 lambda_max (relative error ~eps / that ratio).
    Measured against the concrete path, normwise, on `isotropic_data(3, 0.5, g=(1, 0.5, -0.4))`
    with M0 = 1e-6 I, with and without weight decay 0.3: <= 1.5e-15 for 0 <= t <= 2000, where both
    equal the exact limit V diag(max(g, 0) / (4 c)) V^T to 5e-16 (the former solve gave 7e18
    instead of 0.47 at t = 75, was 5 % off with weight decay, and overflowed beyond |g| t ~ 350);
    <= 1e-14 for M0 of scale 1e-12 or 0.3, negative g. The concrete graded form forms every rate
    difference before multiplying by t, so it has no drift of order eps |g| t: at t = 1e8 it equals
    the exact limit to ~1e-16 (it drifted 2e-9 .. 3e-8 before).
    A singular or ill-conditioned M0 (lambda_min < 1e-6 lambda_max) needs its rank, so there a
    traced call keeps one linear solve per time, M~(t) = (I + 8 c Z Psi)^{-1} Z,
    Z = e^{Gt} M~0 e^{Gt} (`_riccati_solve`), whose error grows like eps cond(I + 8 c Z Psi):
    it is refused at run time (`FloatingPointError` via `equinox.error_if`, a message naming `M0`,
    its conditioning and the bounds) once that condition number exceeds 1e6 (error bound ~1e-10)
    or e^{g t} overflows (such matrices never reach LAPACK), which for a rank-one M0 of scale 0.4 on the data
    above happens between t = 6 and 8 (use concrete M0 and `ts` there: the graded form is accurate).
    The checks are the same for concrete and traced input (`check_assumption` / `check`): on
    concrete values at once, on traced ones at run time (`equinox.error_if`: isotropy of traced
    data, t >= 0, M0 finite, symmetric and PSD, no overflow, the condition bound above);
    c = Tr K / (4 dim Sym(p)).
    Gradients with respect to labels or data values need distinct eigenvalues of Y (eigh's
    derivative).

    **Raises:** `AssumptionError` if K is not 4 c I on Sym(p) (which needs m >= p(p+1)/2);
    `ValueError` for bad shapes, non-finite input, a non-PSD `M0`, negative times, a negative or
    non-finite `weight_decay`; `FloatingPointError` if the result overflows (c = 0 only) or,
    under tracing, for a singular / ill-conditioned `M0` at times where the solve is inaccurate.
    """
    tol = check_positive(tol, "tol", allow_zero=True)  # NaN would pass every assumption
    gamma = check_weight_decay(weight_decay)
    theorem = "Theorem 7"
    check_times_memory(ts, getattr(data, "p", None), "theorem7")
    _check_data(data)
    p = data.p
    data, c = _check_isotropic(data, tol, theorem)
    ts = _times(ts)
    M0 = _initial_M(M0, p)
    check_initial_loss(data, M0, "M0")
    with jax.ensure_compile_time_eval():  # concrete parts inside someone's jit: evaluated at once
        g, V = jnp.linalg.eigh(data.Y())
        g = g - gamma  # weight decay: Y -> Y - gamma I (same eigenvectors, same order)
        Mb0 = V.T @ M0 @ V
        Mb0 = 0.5 * (Mb0 + Mb0.T)
    if any_traced(g, c, Mb0, ts):  # one p x p solve per time (differentiable)
        Mb = _riccati_traced(g, c, Mb0, ts)
    else:  # the graded information form: needs the rank of M0 (host)
        with np.errstate(over="ignore", invalid="ignore"):
            Mb = _riccati_isotropic(np.asarray(g), float(c), np.asarray(Mb0), ts)
        Mb = 0.5 * (Mb + np.swapaxes(Mb, 1, 2))
    with jax.ensure_compile_time_eval():
        bad = ~jnp.all(jnp.isfinite(Mb))
    Mb = check(
        Mb,
        bad,
        lambda: FloatingPointError(
            "Theorem 7 oracle overflowed (g_max t = "
            f"{float(jnp.abs(g).max(initial=0.0) * jnp.max(ts, initial=0.0)):.4g}); use smaller times."
        ),
        "Theorem 7 oracle overflowed (exp(g t) too large); use smaller times",
    )
    z = jnp.einsum("nkk->nk", Mb)
    return OracleSolution(theorem, _host(ts), _host(z), _host(V), _host(Mb))


def theorem7_commuting(g, c, z0, ts, *, weight_decay: float = 0.0) -> np.ndarray:
    """Theorem 7 when M0 commutes with Y (Eq. E17, eigenvalue form).

    z_k(t) = g_k z_k(0) / (4 c z_k(0) + (g_k - 4 c z_k(0)) exp(-2 g_k t)); g_k = 0:
    z_k(0) / (1 + 8 c z_k(0) t). This is the logistic z' = 2 g z - 8 c z^2, evaluated with
    `logistic` (relative accuracy for any z0 and g t). Weight decay gamma (penalty gamma/2 |W|^2,
    nqf's convention; the paper's "-gamma M" is -2 gamma M here) replaces g_k by g_k - gamma:
    z' = 2 (g - gamma) z - 8 c z^2.

    **Arguments:** `g` eigenvalues of Y (p,), `c` >= 0 the isotropy constant, `z0` (p,) >= 0 the
    eigenvalues of M0 in Y's eigenbasis, `ts` gradient-flow times (n,), `weight_decay` gamma >= 0.

    **Returns:** z(t), shape (n, p).

    Runs under jit / vmap / grad (the sign checks of c, z0 and times at run time for traced input).

    **Raises:** `ValueError` for negative c, z0, times or `weight_decay`, or non-finite input.
    """
    gamma = check_weight_decay(weight_decay)
    g = as_array(g, "g", ndim=1, host=True)
    z0 = as_array(z0, "z0", host=True)
    c = as_array(c, "c", ndim=0, host=True)
    with jax.ensure_compile_time_eval():
        bad = (c < 0) | jnp.any(z0 < 0)
    z0 = check(z0, bad, lambda: ValueError("`c` and `z0` must be >= 0."), "`c` and `z0` must be >= 0")
    ts = _times(ts)
    return logistic(2.0 * (g - gamma), 8.0 * c, jnp.broadcast_to(z0, g.shape), ts)


# --------------------------------------------------------------------------------------------
# Theorem 16
# --------------------------------------------------------------------------------------------
def _spec(X):
    """|X|_2 of the symmetric part, for a stack (..., p, p)."""
    return jnp.abs(jnp.linalg.eigvalsh(0.5 * (X + jnp.swapaxes(X, -1, -2)))).max(axis=-1, initial=0.0)


def theorem16(
    data: AbstractData, projectors, ts, *, M0, weight_decay: float = 0.0, tol: float = 1e-10
) -> OracleSolution:
    """Theorem 16 (Eq. E18): exact flow in the span of invariant orthogonal projectors.

    Assumptions (each measured as a relative residual and checked against `tol`):

    1. Pi_a symmetric: |Pi_a - Pi_a^T|_F / |Pi_a|_F.
    2. Pi_a Pi_b = delta_ab Pi_a: |Pi_a Pi_b - delta_ab Pi_a|_F / max(|Pi_a|_F, |Pi_b|_F).
    3. Y Pi_a + Pi_a Y = 2 g_a Pi_a, g_a = Tr[Y Pi_a] / Tr Pi_a:
       |Y Pi_a + Pi_a Y - 2 g_a Pi_a|_F / (2 |Y|_2 |Pi_a|_F).
    4. K(Pi_b) Pi_a + Pi_a K(Pi_b) = 2 k_a delta_ab Pi_a, k_a = Tr[K(Pi_a) Pi_a] / Tr Pi_a:
       |K(Pi_b) Pi_a + Pi_a K(Pi_b) - 2 k_a delta_ab Pi_a|_F / (2 |K(Pi_b)|_2 |Pi_a|_F).
    5. M0 = sum_a z_a(0) Pi_a, z_a(0) = Tr[M0 Pi_a] / Tr Pi_a: |M0 - sum_a z_a(0) Pi_a|_F / |M0|_F.

    Then M(t) = sum_a z_a(t) Pi_a with the logistic z_a' = 2 g_a z_a - 2 k_a z_a^2:
    z_a(t) = g_a z_a(0) / (k_a z_a(0) + (g_a - k_a z_a(0)) exp(-2 g_a t));
    g_a = 0: z_a(0) / (1 + 2 k_a z_a(0) t).

    Weight decay gamma (penalty gamma/2 |W|^2, as in `nqf.solve_flow`) adds -2 gamma M, which
    stays in the span of the projectors: g_a -> g_a - gamma in the logistic above (projectors
    with g_a < gamma decay and never ignite). The paper's "-gamma M" (Sec. 4, Appendix B.3) is
    -2 gamma M here: its gamma is twice nqf's.

    **Arguments:** `data` (any representation), `projectors` (n_a, p, p), `ts` gradient-flow times
    (n,) >= 0, `M0` (p, p) symmetric PSD, `weight_decay` gamma >= 0 (see above), `tol`.

    **Returns:** `OracleSolution` with `z` (n, n_a), `M` (n, p, p) (standard basis).

    **Under jit / vmap / grad** (traced `ts`, `M0`, `projectors`, labels or data values): the
    same formulas run in JAX (g_a, k_a, z_a(0) as traces, the logistic without overflow), so a
    traced call equals the concrete one to rounding. The checks are the same: on concrete values
    at once, on traced ones at run time (`equinox.error_if`: the five assumptions above, nonzero
    projectors, M0 finite, symmetric and PSD, t >= 0); shapes always at trace time.

    **Raises:** `AssumptionError` naming the first violated condition above (and (a, b));
    `ValueError` for bad shapes, non-finite input, a non-PSD `M0`, a zero projector, negative times,
    a negative or non-finite `weight_decay`.
    """
    tol = check_positive(tol, "tol", allow_zero=True)  # NaN would pass every assumption
    gamma = check_weight_decay(weight_decay)
    theorem = "Theorem 16"
    _check_data(data)
    p = data.p
    Pi = as_array(projectors, "projectors", ndim=3, shape=(None, p, p), host=True)
    n_a = Pi.shape[0]
    if n_a == 0:
        raise ValueError("`projectors` must hold at least one projector; found shape (0, p, p).")
    ts = _times(ts)
    M0 = _initial_M(M0, p)
    check_initial_loss(data, M0, "M0")
    Pi = _theorem16_check(theorem, Pi, data, M0, tol)
    Y = data.Y()
    KP = jax.vmap(data.K)(Pi)  # K(Pi_b), (n_a, p, p)
    tr = jnp.einsum("aii->a", Pi)
    g = jnp.einsum("ij,aji->a", Y, Pi) / tr
    k = jnp.einsum("aij,aji->a", KP, Pi) / tr
    z0 = jnp.maximum(jnp.einsum("ij,aji->a", M0, Pi) / tr, 0.0)
    z = z0 * _logistic_ratio(2.0 * (g - gamma), 2.0 * k, z0, ts[:, None])  # (n, n_a), Eq. E18
    M = jnp.einsum("na,aij->nij", z, Pi)
    return OracleSolution(theorem, _host(ts), _host(z), None, _host(M))


def _theorem16_check(theorem, Pi, data, M0, tol):
    """`Pi` with Theorem 16's assumptions 1-5 (see `theorem16`) checked in that order, through
    `check_assumption` (concrete: now, naming the first violated condition; traced: at run time,
    threaded through the returned projectors). Measured in JAX, not differentiated."""
    n_a = Pi.shape[0]
    with jax.ensure_compile_time_eval():
        Pi_, M0_ = jax.lax.stop_gradient((jnp.asarray(Pi), jnp.asarray(M0)))
        Y = jax.lax.stop_gradient(data.Y())
        KP = jax.lax.stop_gradient(jax.vmap(data.K)(Pi_))
        nrm = jnp.linalg.norm(Pi_, axis=(1, 2))
        tr = jnp.einsum("aii->a", Pi_)
    Pi = check(
        Pi,
        tr < 0.5,
        lambda: ValueError(
            f"`projectors[{int(jnp.argmin(tr))}]` has trace {float(tr.min()):.3g}; each projector must be nonzero "
            "(rank >= 1)."
        ),
        "each projector must be nonzero (rank >= 1, trace >= 1/2)",
    )
    with jax.ensure_compile_time_eval():
        res1 = jnp.linalg.norm(Pi_ - jnp.swapaxes(Pi_, 1, 2), axis=(1, 2)) / nrm
        prod = jnp.einsum("aij,bjk->abik", Pi_, Pi_) - jnp.eye(n_a)[:, :, None, None] * Pi_[:, None]
        res2 = jnp.linalg.norm(prod, axis=(2, 3)) / jnp.maximum(nrm[:, None], nrm[None, :])
        g = jnp.einsum("ij,aji->a", Y, Pi_) / tr
        YP = jnp.einsum("ij,ajk->aik", Y, Pi_)
        R = YP + jnp.swapaxes(YP, 1, 2) - 2.0 * g[:, None, None] * Pi_
        res3 = jnp.linalg.norm(R, axis=(1, 2)) / (2.0 * jnp.maximum(_spec(Y), _TINY) * nrm)
        k = jnp.einsum("aij,aji->a", KP, Pi_) / tr
        KbPa = jnp.einsum("bij,ajk->abik", KP, Pi_)  # K(Pi_b) Pi_a, indexed [a, b]
        R = KbPa + jnp.swapaxes(KbPa, 2, 3) - 2.0 * (jnp.eye(n_a) * k[:, None])[:, :, None, None] * Pi_[:, None]
        res4 = jnp.linalg.norm(R, axis=(2, 3)) / (2.0 * jnp.maximum(_spec(KP), _TINY)[None, :] * nrm[:, None])
        z0 = jnp.maximum(jnp.einsum("ij,aji->a", M0_, Pi_) / tr, 0.0)
        m0n = jnp.linalg.norm(M0_)
        res5 = jnp.linalg.norm(M0_ - jnp.einsum("a,aij->ij", z0, Pi_)) / jnp.where(m0n > 0, m0n, 1.0)
        res5 = jnp.where(m0n > 0, res5, 0.0)[None]
    for res, name, where in (
        (res1, "symmetric projectors Pi_a = Pi_a^T", "a = {}"),
        (res2, "orthogonal projectors Pi_a Pi_b = delta_ab Pi_a", "(a, b) = ({}, {})"),
        (res3, "Y Pi_a + Pi_a Y = 2 g_a Pi_a", "a = {}"),
        (res4, "K(Pi_b) Pi_a + Pi_a K(Pi_b) = 2 k_a delta_ab Pi_a", "(a, b) = ({}, {})"),
        (res5, "initial condition M0 = sum_a z_a(0) Pi_a", ""),
    ):
        Pi = check_assumption(Pi, theorem, name, res, tol, where=where)
    return Pi


# --------------------------------------------------------------------------------------------
# Proposition 7
# --------------------------------------------------------------------------------------------
def proposition7(data: CommutingData, M0, z, *, tol: float = 1e-10) -> np.ndarray:
    """Proposition 7 (Eq. E12): off-diagonal slaving of commuting data.

    In the shared eigenbasis P, M~ = P^T M P obeys M~_ij(t) = M~_ij(0) sqrt(z_i z_j / (z_i0 z_j0))
    for any trajectory z(t) of the mode strengths z_k = M~_kk (from a GLV solve, `theorem6`, ...),
    with z_0 = diag(P^T M0 P); the diagonal is z itself. Rows with z_i0 = 0 are zero (M0 PSD).
    The relation holds unchanged with weight decay gamma (penalty gamma/2 |W|^2, the paper's
    "-gamma M" being -2 gamma M in this convention): the decay multiplies M~_ij by e^{-2 gamma t}
    and z_i, z_j each by the same factor, so it cancels; pass the z of a flow with weight decay
    (e.g. `theorem6(..., weight_decay=gamma).z`).

    **Arguments:** `data` a `CommutingData` (z is indexed in its basis P), `M0` (p, p) symmetric
    PSD, `z` (n, p) >= 0, `tol` for the commutativity check of non-`CommutingData` input.

    **Returns:** M(t) in the standard basis, shape (n, p, p) (numpy for concrete input).

    Runs under jit / vmap / grad (traced `M0`, `z`, or a traced `CommutingData`): the same JAX
    code; the checks of a traced `M0` (finite, symmetric, PSD) and z >= 0 of a traced `z` run at
    run time (`equinox.error_if`) (d M / d z is singular where z_i = 0).

    **Raises:** `AssumptionError` if `data` is not commuting (residual max|[A_mu, A_nu]| / max|A|^2);
    `TypeError` if it commutes but is not given as `CommutingData` (z's basis would be undefined:
    convert with `CommutingData.from_dense`); `ValueError` for bad shapes, non-finite or negative z,
    or a non-PSD `M0`.
    """
    tol = check_positive(tol, "tol", allow_zero=True)  # NaN would pass every assumption
    cdata = _as_commuting(data, "Proposition 7", tol, "proposition7")
    if cdata is not data:
        raise TypeError(
            "`proposition7` needs the data as a `CommutingData` so that the basis of `z` is defined; "
            "convert it with `CommutingData.from_dense(A, y)` and solve for z with that object."
        )
    p = cdata.p
    M0 = _initial_M(M0, p)
    z = as_array(z, "z", ndim=2, shape=(None, p), host=True)
    with jax.ensure_compile_time_eval():
        bad = jnp.any(z < 0)
    z = check(
        z,
        bad,
        lambda: ValueError(f"`z` must be >= 0 (mode strengths); found min {float(z.min()):.3g}."),
        "`z` must be >= 0 (mode strengths)",
    )
    P = jnp.eye(p) if cdata.P is None else cdata.P
    Mb0 = P.T @ M0 @ P
    z0 = jnp.diagonal(Mb0)
    live = z0 > 0
    s = jnp.where(live, jnp.sqrt(z / jnp.where(live, z0, 1.0)), 0.0)
    Mb = s[:, :, None] * Mb0[None] * s[:, None, :]
    Mb = Mb.at[:, jnp.arange(p), jnp.arange(p)].set(jnp.where(live, z, 0.0))
    return _host(jnp.einsum("ik,nkl,jl->nij", P, Mb, P))
