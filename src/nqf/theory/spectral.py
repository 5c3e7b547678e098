"""The early-time power method and the spectral view of Y (issue 18).

**Early time.** The MSE flow (THEORY Eq. E9, nqf's normalisation: loss (1/m) sum_mu
(Tr[M A_mu] - y_mu)^2, time t = eta * steps) is

    M' = Y M + M Y - K(M) M - M K(M),   Y = (4/m) sum_mu y_mu A_mu,
    K(X) = (4/m) sum_mu <A_mu, X>_F A_mu.

Near a small initialization the K(M) term is O(|M|^2) and the flow is its linear part
M' = Y M + M Y, solved exactly by M(t) = e^{tY} M0 e^{tY} (`linearized`; W(t) = e^{tY} W0 for
the neurons): a continuous power method on Y. It stays valid until the fastest mode of Y ignites
(`linearized_horizon`).

**Spectral view.** Because the linear flow is a power method on Y, what the flow can learn from
n samples at early time is what Y's top eigenvectors recover. For the spiked He2 model of
`nqf.datasets.spiked_he2_data` (x ~ N(0, I_d), A(x) = He2(x) = x x^T - I,
y = sum_i lambda_i (<a_i, x>^2 - 1) + sigma xi) with m = n samples:

- E[Y] = 8 M*, M* = sum_i lambda_i a_i a_i^T (E[y A] = 2 M* by Wick's theorem);
- Y - E[Y] = 4 G with G approximately a GOE matrix of off-diagonal entry variance s^2 / n,
  s^2 = E[y^2] = 2 sum_i lambda_i^2 + sigma^2 (entries (1/n) sum y x_j x_k; diagonal variance
  2 s^2 / n), i.e. a semicircle of radius R = 2 s sqrt(d / n) for Y / 4;
- so Y / 4 = 2 M* + G is a spiked Wigner matrix with spike strengths
  theta_i = 2 lambda_i / (s sqrt(d / n)) (in units of R / 2). The BBP transition
  (Baik-Ben Arous-Peche; Benaych-Georges & Nadakuditi 2011 for finite-rank Wigner spikes) puts
  the threshold at theta_i = 1:

      n_i = d s^2 / (4 lambda_i^2) = d (2 sum_j lambda_j^2 + sigma^2) i^(2 gamma) / (4 Z^2)   (`bbp_thresholds`)

  for lambda_i = Z i^-gamma (q = 1 in the notation of arXiv 2605.14567), with the eigenvalue
  of Y at 4 (R / 2) (theta_i + 1 / theta_i) outside the bulk edge 8 s sqrt(d / n) (`bulk_edge`).
- Overlap above threshold. For a GOE the squared overlap of the i-th top eigenvector with a_i
  is 1 - n_i / n. Here the noise is not GOE in the spike's own row: the entries
  (1/n) sum y <a_i, x> x_k coupling a_i to the bulk have variance rho_i s^2 / n with

      rho_i = E[y^2 <a_i, x>^2] / E[y^2] = 1 + 8 lambda_i^2 / s^2                          (`spike_variance_ratio`)

  (E[(g^2 - 1)^2 g^2] = 10 for g ~ N(0, 1)), and first-order perturbation theory in the
  bulk resolvent gives 1 - cos^2 theta_i = rho_i r^2 / theta_i^2 + O(n_i^2 / n^2), i.e.

      cos^2 theta_i = 1 - rho_i n_i / n  (leading order in n_i / n; 0 where it would be < 0)  (`bbp_overlap`)

  which reduces to the GOE formula for weak spikes (rho_i -> 1: lambda_i^2 << s^2) and is
  slower by the factor rho_i for strong ones. The overlap reaches 1/2 at
  n_half,i = 2 rho_i n_i (`half_overlap_sizes`), the measurable threshold position used by
  ``nqf reproduce sample-scaling``. (The correction rho_i was derived after a pilot run at
  d = 200 showed the GOE overlap overestimating cos^2 theta_1 by about this factor.)

These are the large-d, n >> d (semicircle) approximations: at n ~ d the bulk of
(1/n) sum y x x^T is not yet a semicircle (its skewness E[y^3] != 0 shifts the edge), and the
K - 1 spikes below threshold deform it; at finite d the transition is smoothed over a window
of relative width O(d^-1/3). Nothing here is fitted to data.

**Signs, a nonlinear readout, the He2 lift** (`spiked_he2_data(signs=, readout=, q=)`). With
Rademacher signs the spikes sit at both ends of Y's spectrum (the BBP formulas hold for |lambda|);
with a readout y = g(h) Stein's lemma keeps E[Y] diagonal on the a_i with effective spikes
lambda_eff,i (`SpikedTeacher.spikes`), and the formulas above hold with lambda_i -> |lambda_eff,i|,
s^2 = E[y^2] and rho_i = E[y^2 <a_i, x>^2] / E[y^2] (the `s2=` and `rho=` arguments). On the He2
lift phi(x) (q = 2, p = d (d + 1) / 2 features) they are only the Gaussian-equivalent prediction:
phi is not Gaussian (``nqf reproduce sample-grid`` measures how far it is off).

Top eigenvectors are computed by a Krylov method (`top_eigenpairs`: ARPACK's Lanczos through
`scipy.sparse.linalg.eigsh` on a `LinearOperator` v -> Y v that costs one pass over the data per
product), never by a full eigendecomposition of Y.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core._checks import as_array, check_positive, check_symmetric, is_traced, shape_str
from ..data._operators import AbstractData

if TYPE_CHECKING:
    import scipy.sparse.linalg

__all__ = [
    "linearized",
    "linearized_horizon",
    "bbp_thresholds",
    "bbp_overlap",
    "bulk_edge",
    "spike_variance_ratio",
    "half_overlap_sizes",
    "Y_operator",
    "top_eigenpairs",
]


def _check_data(data) -> None:
    if not isinstance(data, AbstractData):
        raise TypeError(f"`data` must be an nqf data set (e.g. `DenseData`); found {type(data).__name__}.")


def _initial(data: AbstractData, M0, W0):
    """M0 (p, p) from exactly one of M0, W0 (shape-checked; traced values are not inspected)."""
    p = data.p
    if (M0 is None) == (W0 is None):
        raise ValueError("Give exactly one initial condition: `M0` (p, p) or `W0` (p, d).")
    if W0 is not None:
        W0 = as_array(W0, "W0", ndim=2)
        if W0.shape[0] != p:
            raise ValueError(f"`W0` must have shape ({p}, d) to match the data; found {shape_str(W0.shape)}.")
        return W0 @ W0.T
    M0 = as_array(M0, "M0", ndim=2)
    if M0.shape != (p, p):
        raise ValueError(f"`M0` must have shape ({p}, {p}) to match the data; found {shape_str(M0.shape)}.")
    if not is_traced(M0):
        from .._core._checks import check_psd, check_symmetric

        check_symmetric(M0, "M0")
        check_psd(M0, "M0")
    return 0.5 * (M0 + M0.T)


def linearized(
    data: AbstractData,
    t: Float[ArrayLike, "*times"],
    *,
    M0: Float[ArrayLike, "p p"] | None = None,
    W0: Float[ArrayLike, "p d"] | None = None,
) -> Float[Array, "*times p p"]:
    """The early-time (linearized) flow M(t) = e^{tY} M0 e^{tY}, the exact solution of
    M' = Y M + M Y, the linear part of the MSE flow M' = Y M + M Y - K(M) M - M K(M)
    (THEORY Eq. E9; Y = (4/m) sum_mu y_mu A_mu, `data.Y()`).

    A continuous power method on Y: in Y's eigenbasis (Y = V diag(g) V^T),
    (V^T M V)_jk(t) = e^{(g_j + g_k) t} (V^T M0 V)_jk. With `W0`, M0 = W0 W0^T and the neurons
    follow W(t) = e^{tY} W0 (the linear part of W' = -H W). It agrees with the flow to relative
    O(|K| |M|/ g_1) until the top mode ignites (`linearized_horizon`) and departs after.

    Runs under `jax.jit`, `jax.vmap` and `jax.grad` (one p x p `eigh` of Y).

    **Arguments:**

    - `data`: any nqf data set (m matrices A_mu, p x p).
    - `t`: gradient-flow time(s) t = eta * steps, a scalar or an array of any shape (e.g. (n,)).
    - `M0` (p, p) symmetric PSD, or `W0` (p, d): the initial condition (exactly one).

    **Returns:** M(t), shape t.shape + (p, p).

    **Raises:** `ValueError` unless exactly one of `M0`, `W0` is given, for shapes that do not
    match the data, non-finite values, or (concrete values) a non-symmetric or non-PSD `M0`;
    `TypeError` if `data` is not an nqf data set; `FloatingPointError` (concrete values) if
    e^{2 g t} overflows.
    """
    _check_data(data)
    M0 = _initial(data, M0, W0)
    t = as_array(t, "t")
    g, V = jnp.linalg.eigh(data.Y())
    Mb0 = V.T @ M0 @ V
    e = jnp.exp(t[..., None] * g)  # t.shape + (p,)
    Mb = e[..., :, None] * Mb0 * e[..., None, :]
    out = V @ Mb @ V.T
    if not (any(is_traced(x) for x in jax.tree.leaves((data, M0, t))) or bool(jnp.all(jnp.isfinite(out)))):
        raise FloatingPointError(
            f"`linearized` overflowed: e^(2 g_max t) with g_max t = {float(jnp.max(jnp.abs(g)) * jnp.max(jnp.abs(t))):.4g} "
            "exceeds float64; the linearized flow is only meaningful before `linearized_horizon`."
        )
    return out


def linearized_horizon(
    data: AbstractData,
    *,
    M0: Float[ArrayLike, "p p"] | None = None,
    W0: Float[ArrayLike, "p d"] | None = None,
    delta: float = 0.1,
) -> float | Float[Array, ""]:
    """Validity horizon t_h of `linearized`: the time at which the neglected term K(M) reaches
    a fraction `delta` of the top growth rate g_1 = lambda_max(Y) along the fastest mode,

        t_h = ln(delta g_1 / (k_1 |M0|_2)) / (2 g_1),   k_1 = |K(v_1 v_1^T)|_2,

    v_1 the top eigenvector of Y, |.|_2 the spectral norm. In the top mode the flow is the
    logistic z' = 2 g_1 z - 2 k_1 z^2 (Theorem 7 with 4 c -> k_1; THEORY E17-E19), whose
    relative departure from the linear z(0) e^{2 g_1 t} is k_1 z / g_1: about `delta` at t_h.
    Equivalently t_h = t*_1 - ln(1/delta) / (2 g_1) with t*_1 ~ ln(g_1 / (k_1 |M0|_2)) / (2 g_1),
    the first ignition time (E19, a = 2, rho = 1/2, bounding z_1(0) by |M0|_2): the linear flow
    holds before the first ignition and fails at it (delta ~ 1).

    **Arguments:** `data` (any representation), `M0` (p, p) or `W0` (p, d) (exactly one),
    `delta` > 0 the tolerated relative size of the K(M) term.

    **Returns:** t_h (a float, gradient-flow time; a JAX scalar under tracing): +inf if g_1 <= 0
    (nothing grows) or M0 = 0; 0.0 if the K(M) term is already above `delta` at t = 0.

    **Raises:** `ValueError` as `linearized`, and for `delta` <= 0.
    """
    _check_data(data)
    delta = check_positive(delta, "delta")
    M0 = _initial(data, M0, W0)
    g, V = jnp.linalg.eigh(data.Y())
    g1, v1 = g[-1], V[:, -1]
    k1 = jnp.max(jnp.abs(jnp.linalg.eigvalsh(data.K(jnp.outer(v1, v1)))))
    m0 = jnp.max(jnp.abs(jnp.linalg.eigvalsh(M0)))
    arg = delta * g1 / (k1 * m0)
    th = jnp.where(arg > 1.0, jnp.log(jnp.where(arg > 1.0, arg, 2.0)) / (2.0 * g1), 0.0)
    th = jnp.where((g1 <= 0) | (m0 == 0), jnp.inf, th)
    return th if is_traced(th) else float(th)


# ------------------------------------------------------------------------------------------------
# The spectral view (module docstring): BBP thresholds and overlaps of the spiked He2 model.
# ------------------------------------------------------------------------------------------------
def _spikes(lam) -> np.ndarray:
    lam = np.asarray(as_array(lam, "lam", ndim=1))
    if lam.size == 0 or not np.all(lam > 0):
        found = "an empty array" if lam.size == 0 else f"min {np.min(lam):.3g}"
        raise ValueError(
            f"`lam` (the spike strengths lambda_i) must be a non-empty array of values > 0; found {found} "
            "(signed or effective spikes: pass their magnitudes, np.abs(teacher.spikes))."
        )
    return lam


def _s2(lam, sigma, s2=None) -> float:
    """E[y^2]: the given `s2` (> 0), else the linear teacher's 2 sum_j lambda_j^2 + sigma^2."""
    if s2 is not None:
        if check_positive(sigma, "sigma", allow_zero=True) != 0:
            raise ValueError("Give either `s2` (E[y^2] directly) or `sigma` (the linear teacher's noise), not both.")
        return check_positive(s2, "s2")
    sigma = check_positive(sigma, "sigma", allow_zero=True)
    return float(2.0 * np.sum(lam**2) + sigma**2)


def _row_ratio(lam, sigma, s2, rho) -> np.ndarray:
    """rho_i: the given `rho` (scalar or (K,), > 0), else `spike_variance_ratio`."""
    lam = _spikes(lam)
    if rho is None:
        if s2 is not None:
            raise ValueError(
                "`rho` is needed with `s2`: the default 1 + 8 lambda^2 / s^2 is the linear teacher's; a nonlinear "
                "teacher's is `SpikedTeacher.spike_variance_ratio` (a linear one: `spike_variance_ratio(lam, s2=)`)."
            )
        return spike_variance_ratio(lam, sigma=sigma, s2=s2)
    rho = np.asarray(as_array(rho, "rho"), dtype=float)
    rho = np.broadcast_to(rho, lam.shape) if rho.ndim == 0 else rho
    if rho.shape != lam.shape or not np.all(rho > 0):
        found = f"shape {rho.shape}" if rho.shape != lam.shape else f"min {np.min(rho):.3g}"
        raise ValueError(f"`rho` must be a scalar or shape {lam.shape} (one per spike) with values > 0; found {found}.")
    return rho


def bbp_thresholds(lam: Float[ArrayLike, " K"], d: int, *, sigma: float = 0.0, s2: float | None = None) -> np.ndarray:
    """BBP sample-size thresholds n_i of the spiked He2 model (module docstring): the i-th top
    eigenvector of Y = (4/n) sum_mu y_mu (x_mu x_mu^T - I) starts to align with a_i at

        n_i = d s^2 / (4 lambda_i^2),   s^2 = E[y^2] = 2 sum_j lambda_j^2 + sigma^2,

    i.e. n_i = d s^2 i^(2 gamma) / (4 Z^2) for lambda_i = Z i^-gamma (q = 1 in arXiv 2605.14567;
    GOE approximation of the noise of Y, valid for n >> d and large d).

    **Arguments:** `lam` (K,) the spike strengths lambda_i > 0 (all of the teacher's, since they
    all enter s^2); `d` the input dimension (the feature dimension p for a lifted teacher);
    `sigma` >= 0 the label-noise standard deviation; `s2` > 0: E[y^2] given directly (overrides
    2 sum_j lambda_j^2 + sigma^2). Nonlinear or signed teachers
    (`nqf.datasets.spiked_he2_data(signs=, readout=)`): `lam` = |lambda_eff|
    (`SpikedTeacher.spikes`), `s2` = `SpikedTeacher.s2` (and `rho` =
    `SpikedTeacher.spike_variance_ratio` where taken); `sigma` is then not used.

    **Returns:** n_i, shape (K,) (real numbers of samples).

    **Raises:** `ValueError` for lam <= 0, d < 1 or sigma < 0.
    """
    lam = _spikes(lam)
    d = _dim(d)
    return d * _s2(lam, sigma, s2) / (4.0 * lam**2)


def spike_variance_ratio(lam: Float[ArrayLike, " K"], *, sigma: float = 0.0, s2: float | None = None) -> np.ndarray:
    """rho_i = E[y^2 <a_i, x>^2] / E[y^2] = 1 + 8 lambda_i^2 / s^2 (module docstring): the
    variance of the noise of Y in a_i's own row relative to the bulk's, for the spiked He2 model.

    **Arguments:** `lam` (K,) > 0 all spike strengths; `sigma` >= 0 label noise.

    **Returns:** rho_i, shape (K,), >= 1.
    """
    lam = _spikes(lam)
    return 1.0 + 8.0 * lam**2 / _s2(lam, sigma, s2)


def bbp_overlap(
    n: Float[ArrayLike, "*n"],
    lam: Float[ArrayLike, " K"],
    d: int,
    *,
    sigma: float = 0.0,
    gaussian_row: bool = False,
    s2: float | None = None,
    rho: Float[ArrayLike, "*K"] | None = None,
) -> np.ndarray:
    """Predicted squared overlap cos^2 theta_i = (v_i^T a_i)^2 of the i-th top eigenvector of Y
    with a_i (module docstring): max(0, 1 - rho_i n_i / n), rho_i = `spike_variance_ratio`, to
    leading order in n_i / n; with ``gaussian_row=True`` the GOE (spiked Wigner) formula
    max(0, 1 - n_i / n) (rho_i = 1; Benaych-Georges & Nadakuditi 2011).

    **Arguments:** `n` sample sizes, scalar or (N,) > 0; `lam` (K,); `d`; `sigma`; `s2` > 0:
    E[y^2] given directly (`bbp_thresholds`); `rho` scalar or (K,) > 0: the spike-row variance
    ratios given directly (default `spike_variance_ratio`; a nonlinear teacher's:
    `SpikedTeacher.spike_variance_ratio`).

    **Returns:** shape n.shape + (K,).

    **Raises:** `ValueError` for n <= 0 and as `bbp_thresholds`.
    """
    n = np.asarray(as_array(n, "n"))
    if np.any(n <= 0):
        raise ValueError("`n` (sample sizes) must be > 0.")
    if gaussian_row and rho is not None:
        raise ValueError("`gaussian_row=True` sets rho_i = 1; do not pass `rho` with it.")
    ni = bbp_thresholds(lam, d, sigma=sigma, s2=s2)
    r = 1.0 if gaussian_row else _row_ratio(lam, sigma, s2, rho)
    return np.clip(1.0 - r * ni / n[..., None], 0.0, None)


def half_overlap_sizes(
    lam: Float[ArrayLike, " K"],
    d: int,
    *,
    sigma: float = 0.0,
    s2: float | None = None,
    rho: Float[ArrayLike, "*K"] | None = None,
) -> np.ndarray:
    """n_half,i = 2 rho_i n_i: the sample size at which the predicted cos^2 theta_i
    (`bbp_overlap`) reaches 1/2, shape (K,). `s2`, `rho`: as `bbp_overlap`."""
    return 2.0 * _row_ratio(lam, sigma, s2, rho) * bbp_thresholds(lam, d, sigma=sigma, s2=s2)


def bulk_edge(
    n: Float[ArrayLike, "*n"],
    d: int,
    *,
    lam: Float[ArrayLike, " K"] | None = None,
    sigma: float = 0.0,
    s2: float | None = None,
) -> np.ndarray:
    """Predicted upper edge of the noise bulk of Y's spectrum, 8 s sqrt(d / n)
    (Y / 4 - 2 M* is a semicircle of radius 2 s sqrt(d / n); module docstring).

    **Arguments:** `n` scalar or array; `d`; `lam` (K,) the spikes (they set s^2); `sigma`;
    `s2` > 0: E[y^2] given directly (then `lam` is not needed).

    **Raises:** `ValueError` for n <= 0, or neither `lam` nor `s2` given.

    **Returns:** the edge, shape n.shape (units of Y's eigenvalues, i.e. growth rates of the
    linear flow per unit gradient-flow time, halved: M grows as e^{2 g t}).
    """
    n = np.asarray(as_array(n, "n"))
    if np.any(n <= 0):
        raise ValueError("`n` (sample sizes) must be > 0.")
    if s2 is None and lam is None:
        raise ValueError("`bulk_edge` needs `lam` (the linear teacher's spikes) or `s2` (E[y^2]).")
    return 8.0 * np.sqrt(_s2(None if lam is None else _spikes(lam), sigma, s2) * _dim(d) / n)


def _dim(d) -> int:
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"`d` (the input dimension) must be an integer >= 1; found {d!r}.")
    return int(d)


@jax.jit
def _apply(data, c, V):
    return data.apply(c, V)


def Y_operator(data: AbstractData):
    """Y = (4/m) sum_mu y_mu A_mu as a `scipy.sparse.linalg.LinearOperator` (p x p, symmetric)
    whose products v -> Y v use `data.apply` (for `nqf.He2Data`: X^T (y * (X v)) - sum(y) v,
    one pass over the data, O(m p) per column; never a p x p matrix per sample).

    **Raises:** `TypeError` if `data` is not an nqf data set.
    """
    _check_data(data)
    c = 4.0 / data.m * data.y
    from ..data._operators import He2Data

    if isinstance(data, He2Data):  # numpy BLAS products, no per-call dispatch
        X, cw, sc = np.asarray(data.X), np.asarray(c), float(data.c)
        csum = float(cw.sum())

        def matmat(V):
            V = np.asarray(V, dtype=np.float64)
            V2 = V.reshape(V.shape[0], -1)
            return (sc * (X.T @ (cw[:, None] * (X @ V2)) - csum * V2)).reshape(V.shape)

        return _symmetric_operator(data.p, matmat)

    def apply_mat(V):
        V = np.asarray(V, dtype=np.float64)
        V2 = V.reshape(V.shape[0], -1)
        return np.asarray(_apply(data, c, jnp.asarray(V2))).reshape(V.shape)

    return _symmetric_operator(data.p, apply_mat)


def _symmetric_operator(p: int, matmat) -> scipy.sparse.linalg.LinearOperator:
    """The symmetric float64 (p, p) `LinearOperator` whose products (matvec, matmat, rmatvec) are
    `matmat` (a function of V, (p,) or (p, k))."""
    from scipy.sparse.linalg import LinearOperator

    class _Symmetric(LinearOperator):
        def _matvec(self, x):
            return matmat(x)

        def _rmatvec(self, x):
            return matmat(x)

        def _matmat(self, X):
            return matmat(X)

    return _Symmetric(np.float64, (p, p))


def top_eigenpairs(
    Y: Float[ArrayLike, "p p"] | AbstractData | scipy.sparse.linalg.LinearOperator,
    k: int,
    *,
    tol: float = 1e-10,
    seed: int = 0,
    which: Literal["LA", "LM"] = "LA",
) -> tuple[Float[np.ndarray, " k"], Float[np.ndarray, "p k"]]:
    """The k algebraically largest (or largest-magnitude) eigenpairs of the symmetric Y by
    Lanczos (ARPACK, `scipy.sparse.linalg.eigsh`), never a full eigendecomposition.

    **Arguments:** `Y`: an nqf data set (its Y through `Y_operator`, matrix-free), a dense
    symmetric (p, p) array, or a `LinearOperator`; `k` (1 <= k < p) the number of pairs; `tol`
    ARPACK's relative tolerance; `seed` of the start vector (reproducible results); `which`:
    "LA" (algebraically largest: the growing modes of the flow) or "LM" (largest |eigenvalue|:
    a signed teacher's spikes at both ends of the spectrum).

    **Returns:** `(g, V)`: eigenvalues (k,) in descending order ("LA") or of descending magnitude
    ("LM") and eigenvectors (p, k) as columns (unit norm, sign fixed so that the largest-|.|
    entry is positive).

    **Raises:** `ValueError` for k outside [1, p - 1], `which` not "LA" / "LM", or a non-square or
    non-symmetric `Y`.
    """
    from scipy.sparse.linalg import LinearOperator, aslinearoperator, eigsh

    if which not in ("LA", "LM"):
        raise ValueError(f"`which` must be 'LA' (algebraically largest) or 'LM' (largest magnitude); found {which!r}.")
    if isinstance(Y, AbstractData):
        op = Y_operator(Y)
    elif isinstance(Y, LinearOperator):
        op = Y
    else:
        Yd = np.asarray(as_array(Y, "Y", ndim=2))
        if Yd.shape[0] != Yd.shape[1]:
            raise ValueError(f"`Y` must be square (p, p); found {shape_str(Yd.shape)}.")
        check_symmetric(Yd, "Y")  # eigsh would silently use one triangle of a non-symmetric Y
        op = aslinearoperator(Yd)
    p = op.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < p:
        raise ValueError(f"`k` must be an integer in [1, p - 1] = [1, {p - 1}]; found {k!r}.")
    v0 = np.random.default_rng(seed).standard_normal(p)
    g, V = eigsh(op, k=int(k), which=which, tol=tol, v0=v0, ncv=min(p, max(2 * int(k) + 1, 20)))  # pyright: ignore[reportArgumentType]
    order = np.argsort(g if which == "LA" else np.abs(g))[::-1]
    g, V = g[order], V[:, order]
    sign = np.sign(V[np.argmax(np.abs(V), axis=0), np.arange(V.shape[1])])
    return g, V * sign
