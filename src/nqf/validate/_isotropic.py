"""`nqf validate` checks of Theorem 7's sudden-learning / power-law branch (THEORY sec. 7: a = 2,
zeta_k = g_k, C_k = 4 c, V_k = g_k^2 / (16 c)) on isotropic data, and of Theorem 7 on
approximately isotropic data.

- ``isotropic ignition``: exactly isotropic data (`datasets.isotropic_data(5, c = 1/4, g = (1,
  1/2, 1/4, 1/8, 1/16))`, non-commuting A_mu), the M-form flow from M0 = eps I (which commutes
  with Y) for each eps; the times at which the eigenvalues of M(t) first reach half of
  z_k(inf) = g_k / (4 c), measured on 2001 saved times by linear interpolation (interpolation
  error <= 5e-6 relative at eps = 1e-12), against Eq. E19 with a = 2, C_k = 4 c
  (`predicted_ignition_times(g, 4c, eps, a=2)`): bound `IGNITION_BOUND` = 1e-3 (0.1 %). With it,
  the flow's loss against sum_k V_k (1 - z_k / z_k(inf))^2 with V_k = g_k^2 / (16 c) (the excess
  loss of Theorem 7; here L(inf) = 0), maximum relative error over the times where the loss is
  above 1e-6 L(0): bound `FLOW_BOUND`.
- ``isotropic power law``: exactly isotropic data (`basis_isotropic_data`: one sample per basis
  element of Sym(p)) with p = `POWERLAW_P` = 30 modes, g_k = k^-a2,
  a2 = 2 (so V_k ~ k^-a1, a1 = 2 a2 = 4; Theorem 9 predicts E ~ t^-(a1 - 1)/a2 = t^-1.5),
  c = 1/4, eps = 1e-8, the flow on 400 log-spaced times. Fit window (rule of
  `nqf.powerlaw.ignition_window`): from t*_2 to t*_{k_hi}, k_hi = floor(p 0.05^(1/(a1 - 1))) =
  11. Records: the fitted curve is a power law by `fit_power_law`'s criterion, and the fitted
  exponent against E22's finite-eps exponent (a1 - 1) / (a2 - (a1 - a2) / ln(g_k / (4 c eps)))
  averaged over the window (`window_average`), relative bound `POWERLAW_BOUND` = 0.05 (the
  Fig. 3 power-law bound). The eps -> 0 exponent 1.5 is 7 % below E22 at this eps.
- ``isotropic approx``: `datasets.sampled_isotropic_data` (m samples of an isotropic
  distribution, p = 4, c = 1/4, a fixed teacher M* with eigenvalues 1, 1/2, 1/4, 1/8) for
  m = 10 x (1, 4, 16, 64, 256), two seeds each; the isotropy residual (`isotropy`) and the
  maximum normwise relative error of Theorem 7's oracle (evaluated with tol = 10, i.e. outside
  its assumption) against the flow from M0 = 1e-6 I to 1.5 t* of the slowest population mode.
  First-order perturbation in the residual predicts error proportional to residual: record the
  log-log slope of error against residual, |slope - 1| <= `APPROX_SLOPE_BOUND` = 0.3 (measured
  1.11 over both seeds; a single seed's slope scatters by about 0.35).
"""

from __future__ import annotations

import numpy as np

from ..data import datasets
from ..data._isotropic import isotropy, sym_basis
from ..data._operators import DenseData
from ..solvers._solve import solve_flow
from ..theory._ignition import measure_ignition_times, predicted_ignition_times
from ..theory._oracles import theorem7
from ..theory.powerlaw import featurewise_exponent, fit_power_law, ignition_window, window_average
from ._common import _ATOL_TINY, _RTOL, FLOW_BOUND, _fmt, norm_relative_error, record, register

__all__ = [
    "check_isotropic_ignition",
    "check_isotropic_powerlaw",
    "check_isotropic_approximate",
    "IGNITION_BOUND",
    "POWERLAW_BOUND",
    "APPROX_SLOPE_BOUND",
    "isotropic_powerlaw_run",
    "basis_isotropic_data",
    "approximate_isotropy_errors",
]

IGNITION_BOUND = 1e-3
"""Bound on max_k |t*_k measured / t*_k (E19, a = 2) - 1|."""
POWERLAW_BOUND = 0.05
"""Bound on |fitted exponent - E22 window average| / E22."""
APPROX_SLOPE_BOUND = 0.3
"""Bound on |d ln(oracle error) / d ln(isotropy residual) - 1| (first order in the residual: 1;
the bound stated before measuring; two seeds are pooled because one seed's five points scatter by
about 0.35: 1.34 and 1.01 for seeds 0, 1)."""

IGN_C = 0.25
IGN_G = (1.0, 0.5, 0.25, 0.125, 0.0625)
POWERLAW_P = 30
POWERLAW_A2 = 2.0
POWERLAW_EPS = 1e-8
APPROX_P = 4
APPROX_MULTIPLES = (1, 4, 16, 64, 256)
APPROX_SEEDS = (0, 1)


def _theorem7_excess(z, g, c):
    """sum_k V_k (1 - z_k / z_k(inf))^2, V_k = g_k^2 / (16 c), z_k(inf) = g_k / (4 c) (g_k > 0)."""
    g = np.asarray(g, float)
    return np.sum(g**2 / (16.0 * c) * (1.0 - z * (4.0 * c) / g) ** 2, axis=-1)


@register
def check_isotropic_ignition(eps_values):
    """Theorem 7, a = 2: ignition times of the flow on isotropic data vs E19 (0.1 %), and the
    loss vs the excess-loss formula with V_k = g_k^2 / (16 c), for each eps."""
    c, g = IGN_C, np.asarray(IGN_G)
    data = datasets.isotropic_data(g.size, c, g=g, seed=1)
    out = []
    for eps in eps_values:
        tp = predicted_ignition_times(g, 4.0 * c, eps, a=2.0)
        T = 1.5 * float(tp.max())
        ts = np.linspace(0.0, T, 2001)
        sol = solve_flow(data, M0=eps * np.eye(g.size), t1=T, ts=ts, form="M", rtol=_RTOL, atol=_ATOL_TINY, dense=False)
        tm = measure_ignition_times(sol, quantity="eigenvalues", target=g / (4.0 * c), refine="linear")
        out.append(
            record(
                f"isotropic ignition {_fmt(eps)}: max |t* flow / t* E19 (a=2) - 1|",
                float(np.max(np.abs(tm / tp - 1.0))),
                IGNITION_BOUND,
            )
        )
        L = np.asarray(sol.loss)
        E = _theorem7_excess(np.linalg.eigvalsh(np.asarray(sol.M))[:, ::-1], g, c)
        sel = L > 1e-6 * L[0]
        out.append(
            record(
                f"isotropic excess loss {_fmt(eps)}: flow L vs sum V_k (1 - z_k/z_k(inf))^2, V_k = g_k^2/(16c)",
                float(np.max(np.abs(E[sel] / L[sel] - 1.0))),
                FLOW_BOUND,
            )
        )
    return out


def basis_isotropic_data(g, c: float, seed: int = 0) -> DenseData:
    """Exactly isotropic data with prescribed eigenvalues g of Y: one sample per element B_a of
    the orthonormal basis of Sym(p) (`sym_basis`), A_a = sqrt(c m) B_a (m = p (p + 1) / 2), so
    K(X) = (4/m) sum_a <A_a, X> A_a = 4 c X exactly, with labels y_a = <B_a, Y> m / (4 sqrt(c m))
    making Y = R diag(g) R^T (R random orthogonal from `seed`). The same K and Y as
    `datasets.isotropic_data(p, c, g=g)` without its random rotation of the samples and its
    numerical isotropy verification (the O(m^2 p^2) part of its cost at p = 30); the A_a do not
    commute. Shapes: g (p,) -> A (m, p, p)."""
    g = np.asarray(g, float)
    p = g.size
    B = sym_basis(p)
    m = B.shape[0]
    scale = np.sqrt(c * m)
    rng = np.random.default_rng(seed)
    R, Rr = np.linalg.qr(rng.standard_normal((p, p)))
    R = R * np.sign(np.diag(Rr))
    Y = (R * g) @ R.T
    coords = np.einsum("aij,ij->a", B, Y)
    return DenseData(scale * B, coords * m / (4.0 * scale))


def isotropic_powerlaw_run(p: int = POWERLAW_P, a2: float = POWERLAW_A2, eps: float = POWERLAW_EPS) -> dict:
    """The power-law run of `check_isotropic_powerlaw` (see the module docstring): returns the
    fit (`PowerLawFit`), the E22 window average, Theorem 9's eps -> 0 exponent, the window, the
    maximum relative error of the flow's loss against the V_k formula, and the saved (ts, L)."""
    c = 0.25
    k = np.arange(1, p + 1, dtype=float)
    g = k**-a2
    a1 = 2.0 * a2
    data = basis_isotropic_data(g, c, seed=0)
    tp = predicted_ignition_times(g, 4.0 * c, eps, a=2.0)
    win = ignition_window(tp, a1)
    T = 1.2 * win["t_max"]
    ts = np.concatenate([[0.0], np.geomspace(tp[0] / 4.0, T, 400)])
    sol = solve_flow(data, M0=eps * np.eye(p), t1=T, ts=ts, form="M", rtol=1e-10, atol=_ATOL_TINY, dense=False)
    L = np.asarray(sol.loss)
    E = _theorem7_excess(np.linalg.eigvalsh(np.asarray(sol.M))[:, ::-1], g, c)
    fit = fit_power_law(ts[1:], L[1:], win["t_min"], win["t_max"])
    e22 = (a1 - 1.0) / (a2 - (a1 - a2) / np.log(g / (4.0 * c * eps)))
    return {
        "fit": fit,
        "E22": window_average(tp, e22, win["t_min"], win["t_max"]),
        "theorem9": featurewise_exponent(a1, a2),
        "window": win,
        "V_formula_error": float(np.max(np.abs(E[1:] / L[1:] - 1.0))),
        "ts": ts,
        "L": L,
    }


@register
def check_isotropic_powerlaw(eps_values):
    """Theorem 7's power-law branch: the flow's excess loss on isotropic data with g_k = k^-2 is a
    power law with E22's exponent (independent of `eps_values`: eps = 1e-8)."""
    run = isotropic_powerlaw_run()
    fit = run["fit"]
    name = f"isotropic power law p={POWERLAW_P} a2={POWERLAW_A2:g} eps={POWERLAW_EPS:.0e}"
    return [
        record(f"{name}: flow L vs V_k = g_k^2/(16c) formula", run["V_formula_error"], FLOW_BOUND),
        record(
            f"{name}: is a power law on [t*_2, t*_{run['window']['k_hi']}] (rms of log residuals)",
            fit.rms,
            0.25,
            passed=bool(fit.is_power_law),
        ),
        record(
            f"{name}: |fitted exponent - E22 (finite eps)| / E22 (Theorem 9: {run['theorem9']:g})",
            abs(fit.exponent - run["E22"]) / run["E22"],
            POWERLAW_BOUND,
        ),
    ]


def approximate_isotropy_errors(multiples=APPROX_MULTIPLES, seeds=APPROX_SEEDS) -> np.ndarray:
    """(residual, oracle error) for each (m, seed) of `check_isotropic_approximate`, shape (n, 2)."""
    p, c, eps = APPROX_P, 0.25, 1e-6
    n = p * (p + 1) // 2
    R = np.linalg.qr(np.random.default_rng(0).standard_normal((p, p)))[0]
    lam = 2.0 ** -np.arange(p)
    M_star = (R * lam) @ R.T
    T = 1.5 * float(predicted_ignition_times(4.0 * c * lam[-1], 4.0 * c, eps, a=2.0))
    ts = np.linspace(0.0, T, 201)
    top = max(multiples)
    out = []
    for mult in multiples:
        for seed in seeds:
            data = datasets.sampled_isotropic_data(
                p, n * mult, c, M_star=M_star, repeat=top // mult, seed=1000 * mult + seed
            )
            _, res, _ = isotropy(data)
            M0 = eps * np.eye(p)
            sol = solve_flow(data, M0=M0, t1=T, ts=ts, form="M", rtol=_RTOL, atol=_ATOL_TINY, dense=False)
            orc = theorem7(data, ts, M0=M0, tol=10.0)  # outside its assumption on purpose
            out.append((res, norm_relative_error(sol.M, orc.M)))
    return np.asarray(out)


@register
def check_isotropic_approximate(eps_values):
    """Theorem 7 on m samples of an isotropic distribution: the oracle's error grows in
    proportion to the measured isotropy residual (independent of eps: eps = 1e-6)."""
    re = approximate_isotropy_errors()
    slope = float(np.polyfit(np.log(re[:, 0]), np.log(re[:, 1]), 1)[0])
    return [
        record(
            f"isotropic approx (p={APPROX_P}, m=10..2560): |d ln(theorem7 error) / d ln(isotropy residual) - 1|",
            abs(slope - 1.0),
            APPROX_SLOPE_BOUND,
        )
    ]
