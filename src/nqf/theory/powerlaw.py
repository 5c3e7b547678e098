"""Power-law learning curves: the exponents predicted by Theorems 9 and 10 (THEORY sec. 7, Eqs.
E21-E23) and a fitter that measures an exponent on a loss curve, or says there is none.

Exponents here are decay exponents gamma > 0 of L(t) ~ t^-gamma (the slope of ln L against ln t
is -gamma). Rescaling time (t = tau ln(1/eps), t = eta * steps) does not change them.

Predictions:

- `featurewise_exponent` (E21, Theorem 9): zeta_k ~ k^-a2, V_k ~ k^-a1 give (a1 - 1)/a2.
- `finite_eps_exponent` (E22): the local exponent at mode k for finite eps,
  (a1 - 1) / (a2 - (a1 - a2)/ln(zeta_k/(C_k eps))); it tends to E21 as eps -> 0.
- `samplewise_exponent` (E23, Theorem 11): zeta_mu ~ mu^-g2, y_mu ~ mu^-g1 give (2 g1 - 1)/g2.
  (Its finite-eps form is E22 with a1 = 2 g1, a2 = g2 and the log of the sample's ignition,
  ln(rho y_mu / ((1 - rho) lambda*_mu c_mu eps)); see `nqf.samplewise`.)
- `featurewise_limit` / `nqf.samplewise.staircase_limit`: the eps -> 0 staircases whose tails are
  these power laws.

Fitter (`fit_power_law`): on a window [t_min, t_max] chosen by a documented rule (for the paper's
experiments: from the ignition after the first, isolated one, to the finite-size cutoff,
`ignition_window`; for a curve without a theory, from its first drop, `first_drop_time`, to the
end), ln L is resampled at `n_grid` log-uniform times (so every decade weighs the same, however
the curve was saved) and fitted by least squares, ln L = c - gamma ln t. The curve is called a
power law on the window (``is_power_law``) iff all of

1. the window spans at least `min_decades` (default 1) decades of t;
2. gamma >= `min_exponent` (default 0.05): the loss decays;
3. rms of the log residuals <= `max_rms` (default 0.25, i.e. the loss stays within about +-28% of
   the line on average; a staircase of discrete ignitions around a power law has 0.1-0.2);
4. drift = |gamma_1 - gamma_2| / gamma <= `max_drift` (default 0.3), gamma_1,2 the exponents
   fitted on the two halves of the window (in ln t): a power law has one exponent throughout,
   a plateau followed by a drop or a curve bending away does not.

Failing any criterion is a measured "no power law", with the reasons listed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jaxtyping import ArrayLike, Float

from .._core._checks import as_array

__all__ = [
    "featurewise_exponent",
    "finite_eps_exponent",
    "samplewise_exponent",
    "featurewise_limit",
    "window_average",
    "ignition_window",
    "first_drop_time",
    "PowerLawFit",
    "fit_power_law",
]


def featurewise_exponent(a1: float, a2: float) -> float:
    """Theorem 9 (Eq. E21): E(tau) = Theta(tau^-(a1 - 1)/a2) for zeta_k ~ k^-a2, V_k ~ k^-a1
    (a1 > 1, a2 > 0). Returns the decay exponent (a1 - 1)/a2.

    **Raises:** `ValueError` unless a1 > 1 and a2 > 0.
    """
    a1, a2 = float(a1), float(a2)
    if not (a1 > 1 and a2 > 0):
        raise ValueError(f"Theorem 9 needs a1 > 1 and a2 > 0; found a1={a1}, a2={a2}.")
    return (a1 - 1.0) / a2


def finite_eps_exponent(a1: float, a2: float, log_ratio: Float[ArrayLike, "*shape"]) -> Float[np.ndarray, "*shape"]:
    """Eq. E22: the local decay exponent at finite eps,

        k_eff = (a1 - 1) / (a2 - (a1 - a2) / log_ratio),   log_ratio = ln(zeta_k / (C_k eps)),

    i.e. -(d ln E / d ln k) / (d ln t*_k / d ln k) with t*_k = ln(zeta_k/(C_k eps)) / zeta_k and
    zeta_k / C_k ~ k^-(a1 - a2) (so that V_k = zeta_k^2 / (8 C_k) ~ k^-a1). For an initialization
    z_k(0) = eps c_k put c_k into the log: ln(zeta_k/(C_k c_k eps)) (then a1 - a2 must be the
    decay exponent of zeta_k/(C_k c_k); see `nqf.experiments.fig3_powerlaw.slope_eps`).

    **Arguments:** `a1`, `a2` as in E21; `log_ratio` scalar or array (> 0).

    **Returns:** the exponent(s), same shape as `log_ratio`.
    """
    L = np.asarray(as_array(log_ratio, "log_ratio"), float)
    if np.any(L <= 0):
        raise ValueError("`log_ratio` = ln(zeta/(C eps)) must be > 0 (eps below the saturation level).")
    return (float(a1) - 1.0) / (float(a2) - (float(a1) - float(a2)) / L)


def samplewise_exponent(g1: float, g2: float) -> float:
    """Theorem 11 (Eq. E23): L(tau) = Theta(tau^-(2 g1 - 1)/g2) for zeta_mu ~ mu^-g2,
    y_mu ~ mu^-g1 (g1 > 1/2, g2 > 0). Returns (2 g1 - 1)/g2.

    **Raises:** `ValueError` unless g1 > 1/2 and g2 > 0.
    """
    g1, g2 = float(g1), float(g2)
    if not (g1 > 0.5 and g2 > 0):
        raise ValueError(f"Theorem 11 needs g1 > 1/2 and g2 > 0; found g1={g1}, g2={g2}.")
    return (2.0 * g1 - 1.0) / g2


def featurewise_limit(
    tau: Float[ArrayLike, " n"], zeta: Float[ArrayLike, " p"], V: Float[ArrayLike, " p"], *, a: float = 1.0
) -> Float[np.ndarray, " n"]:
    """The eps -> 0 limit of the excess loss in the proof of Theorem 9:
    E(tau) = sum_k V_k I(tau < 1/(a zeta_k)) at rescaled time tau = t / ln(1/eps)
    (a = 1 for Theorem 6, 2 for Theorem 7; modes with zeta_k <= 0 never ignite).

    **Arguments:** `tau` (n,); `zeta`, `V` (p,). **Returns:** (n,).
    """
    tau = np.atleast_1d(np.asarray(as_array(tau, "tau"), float))
    zeta = np.asarray(as_array(zeta, "zeta", ndim=1), float)
    V = np.asarray(as_array(V, "V", ndim=1, shape=zeta.shape), float)
    with np.errstate(divide="ignore"):
        tau_star = np.where(zeta > 0, 1.0 / (a * np.where(zeta > 0, zeta, 1.0)), np.inf)
    return _tail_sums(tau, tau_star, V)


def _tail_sums(tau, tau_star, w) -> np.ndarray:
    """sum_k w_k I(tau < tau_star_k) for every tau, in O((n + p) log p)."""
    order = np.argsort(tau_star, kind="stable")
    ts, ws = tau_star[order], w[order]
    suffix = np.concatenate([np.cumsum(ws[::-1])[::-1], [0.0]])
    return suffix[np.searchsorted(ts, tau, side="right")]


def window_average(
    tstar: Float[ArrayLike, " p"], values: Float[ArrayLike, " p"], t_min: float, t_max: float, n: int = 200
) -> float:
    """Average of a per-mode quantity over a fit window, weighted like the fitter (log-uniform t).

    At `n` log-spaced times t in [t_min, t_max], the mode igniting at t is found by interpolating
    the index (in ln k) against ln t*_k, and `values` is interpolated there (in ln k). Used to
    compare a local-exponent prediction (e.g. E22 per mode) with a fitted exponent.

    **Arguments:** `tstar` (p,) increasing ignition times of modes k = 1..p; `values` (p,).
    """
    tstar = np.asarray(tstar, float)
    values = np.asarray(values, float)
    if tstar.shape != values.shape or tstar.ndim != 1:
        raise ValueError("`tstar` and `values` must be 1-d arrays of the same length.")
    if np.any(np.diff(tstar) <= 0):
        raise ValueError("`tstar` must be strictly increasing (modes ordered by ignition time).")
    lk = np.log(np.arange(1, tstar.size + 1, dtype=float))
    tt = np.geomspace(t_min, t_max, n)
    kt = np.interp(np.log(tt), np.log(tstar), lk)
    return float(np.mean(np.interp(kt, lk, values)))


def ignition_window(
    tstar: Float[ArrayLike, " p"],
    a1: float,
    *,
    k_lo: int = 2,
    cutoff_fraction: float = 0.05,
    t_end: float | None = None,
) -> dict:
    """The fit window of a feature-wise (or sample-wise) power law: [t*_{k_lo}, t*_{k_hi}].

    Rule: start at the ignition of mode `k_lo` (default 2: after the first mode, which is an
    isolated step), end at the finite-size cutoff k_hi = the largest k with
    (k/p)^(a1 - 1) <= `cutoff_fraction` (there the truncation of sum_k V_k at p steepens the local
    slope by at most ~5%), and not after `t_end` (the end of the run).

    **Arguments:** `tstar` (p,) predicted ignition times (E19) of modes 1..p, increasing; `a1` the
    exponent of V_k; `k_lo`; `cutoff_fraction` in (0, 1); `t_end`.

    **Returns:** dict {t_min, t_max, k_lo, k_hi, rule}.
    """
    tstar = np.asarray(tstar, float)
    p = tstar.size
    if not 1 <= k_lo < p:
        raise ValueError(f"`k_lo` must lie in [1, p); found {k_lo} (p = {p}).")
    if not 0 < cutoff_fraction < 1 or not a1 > 1:
        raise ValueError("Need 0 < cutoff_fraction < 1 and a1 > 1.")
    k_hi = int(np.floor(p * cutoff_fraction ** (1.0 / (a1 - 1.0))))
    if k_hi <= k_lo:
        raise ValueError(f"The finite-size cutoff k_hi = {k_hi} is not above k_lo = {k_lo}: too few modes.")
    t_min, t_max = float(tstar[k_lo - 1]), float(tstar[k_hi - 1])
    if t_end is not None:
        t_max = min(t_max, float(t_end))
    return {
        "t_min": t_min,
        "t_max": t_max,
        "k_lo": int(k_lo),
        "k_hi": k_hi,
        "rule": (
            f"[t*_{{k_lo}}, min(t*_{{k_hi}}, t_end)]: k_lo = {k_lo} (the first mode is an isolated "
            f"step), k_hi = floor(p {cutoff_fraction:g}^(1/(a1-1))) = {k_hi}, where the finite-size "
            "cutoff steepens the local slope by at most ~5%"
        ),
    }


def first_drop_time(t: Float[ArrayLike, " n"], L: Float[ArrayLike, " n"], fraction: float = 0.5) -> float:
    """The first time at which L(t) <= fraction * L(t[0]) (the first ignition of a curve without
    a theory), by linear interpolation; `nan` if it never drops that far."""
    t = np.asarray(t, float)
    L = np.asarray(L, float)
    below = L <= fraction * L[0]
    if not below.any():
        return float("nan")
    i = int(np.argmax(below))
    if i == 0:
        return float(t[0])
    L0, L1 = L[i - 1], L[i]
    target = fraction * L[0]
    return float(t[i - 1] + (t[i] - t[i - 1]) * (L0 - target) / (L0 - L1))


@dataclasses.dataclass(frozen=True)
class PowerLawFit:
    """Result of `fit_power_law` (exponents are decay exponents: L ~ t^-exponent).

    - `exponent`, `log_prefactor`: ln L = log_prefactor - exponent ln t on the window.
    - `t_min`, `t_max`, `decades` (log10(t_max / t_min)), `n_grid`.
    - `rms`, `max_residual`: of ln L - fit over the grid.
    - `half_exponents`: exponents fitted on the first and second half of the window (in ln t);
      `drift` = |difference| / |exponent|.
    - `is_power_law` and `reasons` (the failed criteria; empty if it is one), `criterion` (the
      thresholds used).
    - `log_t`, `residuals`: the grid (ln t) and residuals, for goodness-of-fit plots.
    """

    exponent: float
    log_prefactor: float
    t_min: float
    t_max: float
    decades: float
    n_grid: int
    rms: float
    max_residual: float
    half_exponents: tuple[float, float]
    drift: float
    is_power_law: bool
    reasons: tuple[str, ...]
    criterion: dict
    log_t: np.ndarray = dataclasses.field(repr=False)
    residuals: np.ndarray = dataclasses.field(repr=False)

    def predict(self, t: Float[ArrayLike, "*shape"]) -> Float[np.ndarray, "*shape"]:
        """The fitted line exp(log_prefactor) t^-exponent at times `t`."""
        return np.exp(self.log_prefactor - self.exponent * np.log(np.asarray(t, float)))

    def summary(self) -> dict:
        """JSON-ready dict of the scalar results."""
        d = dataclasses.asdict(self)
        d.pop("log_t")
        d.pop("residuals")
        d["half_exponents"] = list(self.half_exponents)
        d["reasons"] = list(self.reasons)
        return d


def fit_power_law(
    t: Float[ArrayLike, " n"],
    L: Float[ArrayLike, " n"],
    t_min: float,
    t_max: float,
    *,
    n_grid: int = 200,
    min_decades: float = 1.0,
    max_rms: float = 0.25,
    max_drift: float = 0.3,
    min_exponent: float = 0.05,
) -> PowerLawFit:
    """Fit L ~ t^-gamma on [t_min, t_max] and decide whether the curve is a power law there.

    See the module docstring for the procedure and the criterion. The curve is given at times `t`
    (n,), increasing, t > 0 where used, with L > 0 on the window (the window is resampled from
    the samples by linear interpolation of ln L in ln t; it must lie inside [t[0], t[-1]]).

    **Returns:** `PowerLawFit`.

    **Raises:** `ValueError` for mismatched shapes, a window that is empty or outside the data,
    non-positive L in the window, or n_grid < 8.
    """
    t = np.asarray(as_array(t, "t", ndim=1), float)
    L = np.asarray(as_array(L, "L", ndim=1, shape=t.shape), float)
    t_min, t_max = float(t_min), float(t_max)
    if int(n_grid) < 8:
        raise ValueError(f"`n_grid` must be >= 8; found {n_grid}.")
    if not (0 < t_min < t_max):
        raise ValueError(f"Need 0 < t_min < t_max; found t_min={t_min}, t_max={t_max}.")
    if np.any(np.diff(t) <= 0):
        raise ValueError("`t` must be strictly increasing.")
    if t_min < t[0] or t_max > t[-1]:
        raise ValueError(
            f"The window [{t_min:.4g}, {t_max:.4g}] must lie inside the data's time range [{t[0]:.4g}, {t[-1]:.4g}]."
        )
    lo = max(int(np.searchsorted(t, t_min, side="right")) - 1, 0)
    hi = min(int(np.searchsorted(t, t_max, side="left")) + 1, t.size)
    tw, Lw = t[lo:hi], L[lo:hi]
    if np.any(Lw <= 0) or np.any(tw <= 0):
        raise ValueError("L and t must be > 0 on the fit window (log-log fit).")
    n_grid = int(n_grid)
    g = np.linspace(np.log(t_min), np.log(t_max), n_grid)
    v = np.interp(g, np.log(tw), np.log(Lw))
    A = np.vstack([g, np.ones_like(g)]).T
    (slope, icpt), *_ = np.linalg.lstsq(A, v, rcond=None)
    res = v - A @ np.array([slope, icpt])
    h = n_grid // 2
    s1 = np.polyfit(g[:h], v[:h], 1)[0]
    s2 = np.polyfit(g[h:], v[h:], 1)[0]
    gamma = -float(slope)
    decades = float((g[-1] - g[0]) / np.log(10.0))
    rms = float(np.sqrt(np.mean(res**2)))
    drift = float(abs(s1 - s2) / abs(slope)) if slope != 0 else float("inf")
    reasons = []
    if decades < min_decades:
        reasons.append(f"window spans {decades:.2f} < {min_decades:g} decades")
    if not gamma >= min_exponent:
        reasons.append(f"exponent {gamma:.3g} < {min_exponent:g} (no decay)")
    if not rms <= max_rms:
        reasons.append(f"log-residual rms {rms:.3g} > {max_rms:g}")
    if not drift <= max_drift:
        reasons.append(
            f"half-window exponents {-s1:.3g} and {-s2:.3g} differ by {drift:.3g} > {max_drift:g} of the exponent"
        )
    criterion = {
        "min_decades": float(min_decades),
        "min_exponent": float(min_exponent),
        "max_rms": float(max_rms),
        "max_drift": float(max_drift),
    }
    return PowerLawFit(
        gamma,
        float(icpt),
        t_min,
        t_max,
        decades,
        n_grid,
        rms,
        float(np.abs(res).max()),
        (-float(s1), -float(s2)),
        drift,
        not reasons,
        tuple(reasons),
        criterion,
        g,
        res,
    )
