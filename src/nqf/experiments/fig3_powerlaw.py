"""Fig. 3 (right) of the paper: the excess-loss power law of feature-wise descent (Theorem 9).

Setting (THEORY sec. 11): m = p = 1000, one nonzero per A_k (`powerlaw_data`), growth rates
zeta_k = r_k = k^-a2 and loss weights V_k = r_k^2 / (8 C_kk) = k^-a1 with a1 = 2, a2 = 0.8, and
initial mode strengths z_k(0) = eps c_k with eps = 1e-6, c_k = k^-b, b = 1.2 (M0 = diag z(0)).
The flow is integrated in the log-space GLV form (Eq. E13) to t1 = 5 t*_p, five times the
ignition time of the slowest mode, by which every mode has saturated (the excess loss has fallen
by > 15 decades), on log-spaced times.

Predictions. With ignition times t*_k (Eq. E19) increasing in k, E(t) ~ sum_{k: t*_k > t} V_k, so
the local slope of ln E against ln t at the time t*_k at which mode k ignites is

    s(k) = (d ln E / d ln k) / (d ln t*_k / d ln k).

- ``predicted`` = -(a1 - 1) / a2 = -1.25 (Theorem 9: eps -> 0, p -> inf).
- ``finite_eps_predicted``: d ln t*_k / d ln k at finite eps. From E19 with rho = 1/2,
  t*_k ~ ln(zeta_k / (C_k c_k eps)) / zeta_k, and zeta_k / (C_k c_k) ~ 8 k^(b - (a1 - a2)), so
  d ln t*_k / d ln k = a2 + (b - (a1 - a2)) / ln(zeta_k / (C_k c_k eps)) and

      s_eps(k) = -(a1 - 1) / (a2 + (b - (a1 - a2)) / ln(zeta_k / (C_k c_k eps))).

  For a uniform initialization (b = 0) this is THEORY Eq. E22 exactly. For the paper's
  initialization b = a1 - a2 = 1.2 the log correction vanishes (zeta_k / (C_k z_k(0)) = 8e6 for
  every k, so t*_k is exactly proportional to k^a2) and s_eps = -1.25. E22 evaluated as written
  (with c_k left out of the logarithm) is reported as ``E22_as_written`` for reference; it
  does not apply to this initialization (it predicts ~ -1.43, while a uniform-init run, b = 0,
  is the case that steepens).
- ``finite_size_predicted``: finite eps and finite p. The sum of V_k = k^-a1 is cut off at p:
  E ~ (k^(1 - a1) - p^(1 - a1)) / (a1 - 1), so d ln E / d ln k = -(a1 - 1) / (1 - (k/p)^(a1 - 1))
  and s_eps,p(k) = s_eps(k) / (1 - (k/p)^(a1 - 1)).

Each prediction is averaged over the fit window: at 200 log-spaced times t in the window, k(t) is
the (continuous) mode igniting at t, found by interpolating ln k against ln t*_k, and the local
slope s(k(t)) is averaged.

Fit window (rule, fixed before looking at the data): from the ignition time of mode k_lo = 5
(below it, the first modes are isolated steps rather than a continuum) to that of mode k_hi, the
largest k with (k/p)^(a1 - 1) <= 0.05, i.e. where the finite-p cutoff steepens the local slope by
at most ~5% (k_hi = p/20 for a1 = 2: 50 for p = 1000, 15 for the quick p = 300). The measured
slope is the least-squares slope of ln E(t) against ln t over the saved (log-spaced) times in
[t*_{k_lo}, t*_{k_hi}].

Checks: |measured - finite_eps_predicted| / |finite_eps_predicted| <= 0.05, and
|measured - finite_size_predicted| / |finite_size_predicted| <= 0.02.
"""

from __future__ import annotations

import time

import numpy as np

from ..data import datasets
from ..solvers._solve import solve_flow
from ..theory._ignition import predicted_ignition_times
from ..theory._oracles import theorem6_rates
from ._common import chosen, new_figure, sensitivity
from ._table import Check, Claim, Reproduction, reproduce

NAME = "fig3-powerlaw"
TITLE = "Fig. 3 right: excess-loss power law (m = p = 1000), slope vs -(a1-1)/a2 = -1.25"

A1 = 2.0
A2 = 0.8
B = 1.2
EPS = 1e-6
K_LO = 5
CUTOFF_FRACTION = 0.05
RTOL = 1e-10
SLOPE_BOUND = 0.05
FINITE_SIZE_BOUND = 0.02
N_AVERAGE = 200


def slope_eps(k, zeta, C, c, eps: float, a1: float = A1, a2: float = A2, b: float = B):
    """Finite-eps local slope s_eps(k) = -(a1-1) / (a2 + (b - (a1-a2)) / ln(zeta/(C c eps)))
    (E22 generalized to c_k = k^-b; b = 0 is E22)."""
    L = np.log(zeta / (C * c * eps))
    return -(a1 - 1.0) / (a2 + (b - (a1 - a2)) / L)


def slope_E22_as_written(zeta, C, eps: float, a1: float = A1, a2: float = A2):
    """THEORY Eq. E22 as written: -(a1-1) / (a2 - (a1-a2) / ln(zeta/(C eps))) (assumes c_k = 1)."""
    return -(a1 - 1.0) / (a2 - (a1 - a2) / np.log(zeta / (C * eps)))


def slope_analysis(ts, E, p: int, *, eps: float = EPS, a1: float = A1, a2: float = A2, b: float = B) -> dict:
    """Measured and predicted slopes of the excess loss E(t) of the power-law problem
    (`nqf.datasets.powerlaw_data(p)` from z_k(0) = eps k^-b), by the rules of this module's
    docstring (fit window [t*_5, t*_{p/20}], predictions averaged over the window).

    **Arguments:** `ts` (n,) times, `E` (n,) excess loss at those times, `p`, and the parameters.

    **Returns:** dict with ``measured``, ``predicted``, ``finite_eps_predicted``,
    ``finite_size_predicted``, ``E22_as_written``, ``t_min``, ``t_max``, ``k_lo``, ``k_hi``,
    ``fit`` (the polyfit coefficients), ``selected`` (bool mask of the fitted times).

    **Raises:** `ValueError` if fewer than 3 saved times fall in the fit window.
    """
    ts, E = np.asarray(ts, dtype=float), np.asarray(E, dtype=float)
    k = np.arange(1, p + 1, dtype=float)
    zeta, C, c = k**-a2, k ** (a1 - 2 * a2) / 8.0, k**-b
    tstar = predicted_ignition_times(zeta, C, eps * c, rho=0.5)
    k_lo = K_LO
    k_hi = int(np.floor(p * CUTOFF_FRACTION ** (1.0 / (a1 - 1.0))))
    t_min, t_max = float(tstar[k_lo - 1]), float(tstar[k_hi - 1])
    sel = (ts >= t_min) & (ts <= t_max)
    if sel.sum() < 3:
        raise ValueError(
            f"the fit window [{t_min:.4g}, {t_max:.4g}] holds {int(sel.sum())} saved times; save "
            "more log-spaced times inside it."
        )
    fit = np.polyfit(np.log(ts[sel]), np.log(E[sel]), 1)
    t_avg = np.geomspace(t_min, t_max, N_AVERAGE)
    k_t = np.exp(np.interp(np.log(t_avg), np.log(tstar), np.log(k)))
    zeta_t, C_t, c_t = k_t**-a2, k_t ** (a1 - 2 * a2) / 8.0, k_t**-b
    s_eps = slope_eps(k_t, zeta_t, C_t, c_t, eps, a1, a2, b)
    return {
        "measured": float(fit[0]),
        "predicted": -(a1 - 1.0) / a2,
        "finite_eps_predicted": float(np.mean(s_eps)),
        "finite_size_predicted": float(np.mean(s_eps / (1.0 - (k_t / p) ** (a1 - 1.0)))),
        "E22_as_written": float(np.mean(slope_E22_as_written(zeta_t, C_t, eps, a1, a2))),
        "t_min": t_min,
        "t_max": t_max,
        "k_lo": k_lo,
        "k_hi": k_hi,
        "fit": fit,
        "selected": sel,
    }


def run(out_dir, quick: bool = False) -> dict:
    """Fig. 3 right: excess-loss power law, measured slope vs Theorem 9 and its finite-eps form.

    Writes `out_dir/fig3-powerlaw.png` (excess loss on log-log axes with the fitted line, the
    predicted slope and the shaded fit window; local slope d ln E / d ln t against the
    predictions) and `out_dir/fig3-powerlaw.json`, and returns the JSON dict. `quick` uses
    p = m = 300 and 1000 saved times instead of p = m = 1000 and 3000 (same rules, checks).

    JSON keys: ``settings``, ``slope`` {measured, predicted, finite_eps_predicted,
    finite_size_predicted, E22_as_written}, ``fit_window`` {t_min, t_max, k_lo, k_hi, rule,
    n_points}, ``solver_stats``, ``wall_time_s``, ``checks``.
    """
    return reproduce(Reproduction(NAME, TITLE, _measure, _report, _checks, _claims, _figure), out_dir, quick)


def _measure(quick: bool) -> dict:
    """The flow on the power-law data from z_k(0) = eps k^-b, its excess loss and slope analysis."""
    p = 300 if quick else 1000
    n_times = 1000 if quick else 3000
    data = datasets.powerlaw_data(p, a1=A1, a2=A2)
    k = np.arange(1, p + 1, dtype=float)
    z0 = EPS * k**-B
    r, C = theorem6_rates(data)
    V = r**2 / (8.0 * C)
    tstar = predicted_ignition_times(r, C, z0, rho=0.5)
    t1 = 5.0 * float(tstar.max())
    ts = np.concatenate([[0.0], np.geomspace(1.0, t1, n_times)])

    t0 = time.perf_counter()
    sol = solve_flow(data, z0=z0, t1=t1, ts=ts, rtol=RTOL, max_steps=100_000, dense=False, save="loss")
    solve_wall = time.perf_counter() - t0
    E = sol.excess_loss
    sl = slope_analysis(sol.ts, E, p)
    measured, finite_eps, finite_size = sl["measured"], sl["finite_eps_predicted"], sl["finite_size_predicted"]
    predicted, e22, fit = sl["predicted"], sl["E22_as_written"], sl["fit"]
    t_min, t_max, k_lo, k_hi, sel = sl["t_min"], sl["t_max"], sl["k_lo"], sl["k_hi"], sl["selected"]

    # Consistency of the data with the power-law parameters used by the predictions.
    param_err = float(
        max(
            np.max(np.abs(r / k**-A2 - 1)),
            np.max(np.abs(V / k**-A1 - 1)),
            np.max(np.abs(C / (k ** (A1 - 2 * A2) / 8.0) - 1)),
        )
    )

    rel_eps = abs(measured - finite_eps) / abs(finite_eps)
    rel_size = abs(measured - finite_size) / abs(finite_size)
    return {
        "quick": quick,
        "p": p,
        "n_times": n_times,
        "data": data,
        "k": k,
        "tstar": tstar,
        "t1": t1,
        "sol": sol,
        "solve_wall": solve_wall,
        "E": E,
        "measured": measured,
        "finite_eps": finite_eps,
        "finite_size": finite_size,
        "predicted": predicted,
        "e22": e22,
        "fit": fit,
        "t_min": t_min,
        "t_max": t_max,
        "k_lo": k_lo,
        "k_hi": k_hi,
        "sel": sel,
        "param_err": param_err,
        "rel_eps": rel_eps,
        "rel_size": rel_size,
    }


def _checks(q: dict) -> list[Check]:
    p, rel_eps, rel_size, param_err = q["p"], q["rel_eps"], q["rel_size"], q["param_err"]
    return [
        Check(f"fig3-powerlaw p={p}: |slope - finite-eps prediction| / |prediction|", rel_eps, SLOPE_BOUND),
        Check(
            f"fig3-powerlaw p={p}: |slope - finite-eps, finite-p prediction| / |prediction|",
            rel_size,
            FINITE_SIZE_BOUND,
        ),
        Check(f"fig3-powerlaw p={p}: data follow r_k = k^-a2, V_k = k^-a1 (max rel deviation)", param_err, 1e-12),
    ]


def _claims(q: dict) -> list[Claim]:
    quick, p, measured, predicted = q["quick"], q["p"], q["measured"], q["predicted"]
    finite_eps, finite_size = q["finite_eps"], q["finite_size"]
    rel_pred = abs(measured - predicted) / abs(predicted)
    return [
        Claim(
            "fig3-powerlaw: slope matches -(a1 - 1)/a2",
            "The slope predicted by Section 6 matches the loss trajectory before the finite-size cutoff.",
            "Sec. 7 (Feature-wise saddle-to-saddle dynamics), Fig. 3 right",
            metric=(
                "|s - (-(a1 - 1)/a2)| / |(a1 - 1)/a2|, s the least-squares slope of ln E vs ln t on the window (mode "
                "k_lo = 5 to the 5% finite-size cutoff)"
            ),
            value=rel_pred,
            criterion=f"<= {SLOPE_BOUND:g}",
            holds=rel_pred <= SLOPE_BOUND,
            setting="package-chosen" if quick else "paper",
            why=(
                f"slope {measured:.4f} vs {predicted:.4f}; with z_k(0) = eps k^-1.2 the finite-eps correction vanishes "
                f"(prediction {finite_eps:.4f}); the finite-p cutoff gives {finite_size:.4f}"
                + (f" (quick: p = {p} instead of 1000)" if quick else "")
            ),
        )
    ]


def _report(q: dict) -> dict:
    quick, p, data, sol, sel = q["quick"], q["p"], q["data"], q["sol"], q["sel"]
    measured, predicted, finite_eps, finite_size = q["measured"], q["predicted"], q["finite_eps"], q["finite_size"]
    t1, n_times, e22, rel_eps, rel_size = q["t1"], q["n_times"], q["e22"], q["rel_eps"], q["rel_size"]
    t_min, t_max, k_lo, k_hi = q["t_min"], q["t_max"], q["k_lo"], q["k_hi"]
    return {
        "settings": {
            "m": data.m,
            "p": p,
            "a1": A1,
            "a2": A2,
            "b": B,
            "eps": EPS,
            "z0": "eps * k^-b",
            "t1": t1,
            "t1_rule": "5 * t*_p (slowest mode's ignition time)",
            "n_times": n_times,
            "times": "0 and log-spaced in [1, t1]",
            "solver": "tsit5 (GLV form, log z; DiagonalData, save='loss')",
            "rtol": RTOL,
        },
        "slope": {
            "measured": measured,
            "predicted": predicted,
            "finite_eps_predicted": finite_eps,
            "finite_size_predicted": finite_size,
            "E22_as_written": e22,
            "rel_error_vs_finite_eps": rel_eps,
            "rel_error_vs_finite_size": rel_size,
            "rel_error_vs_predicted": abs(measured - predicted) / abs(predicted),
            "method": (
                "measured: least-squares slope of ln E vs ln t over the saved log-spaced times in "
                "the window. Predictions: local slopes averaged over 200 log-spaced t in the window "
                "at the mode k(t) igniting at t (ln k interpolated against ln t*_k, E19). "
                "finite_eps: -(a1-1)/(a2 + (b-(a1-a2))/ln(zeta_k/(C_k c_k eps))) (E22 generalized "
                "to c_k = k^-b; equals E22 for b = 0, and -(a1-1)/a2 here since b = a1-a2). "
                "finite_size: finite_eps / (1 - (k/p)^(a1-1)) (the sum of V_k cut off at p). "
                "E22_as_written: E22 with c_k left out of the log (assumes c_k = 1; not this init)."
            ),
        },
        "fit_window": {
            "t_min": t_min,
            "t_max": t_max,
            "k_lo": k_lo,
            "k_hi": k_hi,
            "n_points": int(sel.sum()),
            "rule": (
                "[t*_{k_lo}, t*_{k_hi}] (predicted ignition times, E19): k_lo = 5 (first modes are "
                "isolated steps), k_hi = floor(p * 0.05^(1/(a1-1))) = p/20, the largest k at which "
                "the finite-p cutoff steepens the local slope by at most ~5%"
            ),
        },
        "solver_stats": dict(sol.stats, form=sol.form, solver="tsit5", rtol=RTOL),
        "wall_time_s": {"solve": q["solve_wall"], "total": None},
        "chosen_settings": {
            "dynamics": chosen(
                "the gradient flow (solve_flow, GLV form)",
                "GD (learning rate not stated)",
                "the flow is GD's lr -> 0 limit; time is t = lr * steps",
            ),
            "fit_window": chosen(
                "ignition of mode 5 to the largest k with (k/p)^(a1 - 1) <= 0.05",
                "not stated",
                "rule fixed before measuring",
            ),
            "t1": chosen("5 t*_p", "not stated", "every mode has saturated"),
        },
        "sensitivity": sensitivity([], quick=quick, reason="every setting the paper states is used"),
    }


def _figure(q: dict):
    return _plot(
        q["sol"].ts,
        q["E"],
        q["fit"],
        q["t_min"],
        q["t_max"],
        q["predicted"],
        q["tstar"],
        q["p"],
        q["k"],
        q["quick"],
        q["measured"],
        q["finite_size"],
    )


def _plot(ts, E, fit, t_min, t_max, predicted, tstar, p, k, quick, measured, finite_size):
    fig, (ax, ax_s) = new_figure(2, width=5.5, height=4.2)
    t_end = min(float(ts[-1]), 2.5 * float(tstar[-1]))
    pos = (ts > 0) & (ts <= t_end) & (E > 1e-13 * E.max())  # drop the rounding-level tail
    t, e = ts[pos], E[pos]
    ax.loglog(t, e, color="k", lw=1.8, label="flow (GLV)")
    ax.axvspan(t_min, t_max, color="tab:blue", alpha=0.12, label="fit window")
    tw = np.geomspace(t_min / 3, t_max * 3, 50)
    ax.loglog(tw, np.exp(np.polyval(fit, np.log(tw))), color="tab:red", lw=1.2, label=f"fit: slope {measured:.3f}")
    t_mid = np.sqrt(t_min * t_max)
    E_mid = np.exp(np.polyval(fit, np.log(t_mid)))
    tp = np.geomspace(t_min / 10, t_max * 10, 50)
    ax.loglog(
        tp,
        2.0 * E_mid * (tp / t_mid) ** predicted,
        color="tab:blue",
        ls="--",
        lw=1.2,
        label=f"theory slope $-(a_1-1)/a_2 = {predicted:.2f}$",
    )
    ax.axvline(tstar[-1], color="gray", ls=":", lw=1.0, label=f"$t^*_p$ (p = {p}): finite-p cutoff")
    ax.set_xlabel("gradient-flow time $t$")
    ax.set_ylabel("excess loss $L(t) - L(\\infty)$")
    ax.set_title("Excess loss: power law before the finite-p cutoff")
    ax.set_xlim(1.0, t_end)
    ax.set_ylim(max(e.min(), e.max() * 1e-8), e.max() * 3)
    ax.legend(fontsize=7.5, loc="lower left")

    # Local slope d ln E / d ln t against the predictions.
    lt, le = np.log(t), np.log(e)
    local = np.gradient(le, lt)
    ax_s.semilogx(t, local, color="k", lw=1.4, label="flow: $d\\ln E / d\\ln t$")
    kk = k[tstar < ts[-1]]
    kk = kk[kk < p]
    s_size = slope_eps(kk, kk**-A2, kk ** (A1 - 2 * A2) / 8.0, kk**-B, EPS) / (1.0 - (kk / p) ** (A1 - 1.0))
    ax_s.semilogx(
        tstar[kk.astype(int) - 1],
        s_size,
        color="tab:green",
        ls="-.",
        lw=1.2,
        label="finite-eps, finite-p prediction at $t^*_k$",
    )
    ax_s.axhline(predicted, color="tab:blue", ls="--", lw=1.2, label=f"Theorem 9: {predicted:.2f}")
    ax_s.axhline(measured, color="tab:red", lw=1.0, label=f"fitted slope {measured:.3f}")
    ax_s.axvspan(t_min, t_max, color="tab:blue", alpha=0.12)
    ax_s.set_xlim(1.0, t_end)
    ax_s.set_ylim(-3.0, 0.2)
    ax_s.set_xlabel("gradient-flow time $t$")
    ax_s.set_ylabel("local slope")
    ax_s.set_title(f"Local slope (finite-size prediction in window: {finite_size:.3f})")
    ax_s.legend(fontsize=7.5, loc="lower left")
    fig.suptitle(
        f"NQF power law (paper Fig. 3 right): m = p = {p}, $r_k = k^{{-0.8}}$, $V_k = k^{{-2}}$, "
        f"$z_k(0) = 10^{{-6}} k^{{-1.2}}$" + (" [quick]" if quick else ""),
        fontsize=11,
    )
    return fig
