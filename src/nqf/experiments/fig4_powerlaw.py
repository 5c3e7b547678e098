"""Sample-wise power law (Theorem 11, Eq. E23): the loss of many orthogonal samples whose growth
rates and labels follow power laws.

The paper states E23 without an experiment; this is the sample-wise counterpart of Fig. 3
(right). Setting (chosen and documented here): m = 1000 orthogonal samples
(`nqf.datasets.samplewise_powerlaw_data`), y_mu = mu^-g1, zeta_mu = (8/m) lambda*_mu y_mu =
mu^-g2 with g1 = 1, g2 = 1.5, each sample owning K = 3 diagonal modes with eigenvalues
lambda*_mu (1/2, 3/4, 1) (Fig. 4's ratios 1 : 1.5 : 2, so every sample has subdominant
eigenvalues; p = 3000), and z_k(0) = eps = 1e-12 for every mode (W(0) = sqrt(eps) I). The loss
is the Theorem 5 oracle's (`nqf.samplewise.theorem5`, scalar xi ODEs by scipy), on 0 and
log-spaced times.

Predictions (decay exponents, L ~ t^-gamma):

- ``predicted`` = (2 g1 - 1)/g2 = 2/3 (E23: eps -> 0, m -> inf).
- ``finite_eps_predicted``: E22's form with a1 = 2 g1, a2 = g2 and the log of the sample's
  ignition, L_mu = ln(y_mu / (lambda*_mu eps)) (rho = 1/2, c* = 1): t*_mu = (L_mu / zeta_mu) and
  y_mu / lambda*_mu ~ mu^-(2 g1 - g2), so gamma(mu) = (2 g1 - 1)/(g2 - (2 g1 - g2)/L_mu).
- ``finite_size_predicted``: also with the tail sum_{nu > mu} y_nu^2 cut off at m:
  gamma(mu) / (1 - (mu/m)^(2 g1 - 1)).

Both are averaged over the fit window like the fitter weighs it (`nqf.powerlaw.window_average`).

Fit window (rule fixed in advance, as in fig3-powerlaw): from the ignition of sample mu_lo = 5 to
that of mu_hi = floor(m 0.05^(1/(2 g1 - 1))) = 50, with the predicted (logistic) t*_mu; the fit is
`nqf.powerlaw.fit_power_law` (which also judges whether the curve is a power law there).

Checks: |measured - E23| / E23 <= 0.10 (the target of the issue), |measured - finite_size| /
finite_size <= 0.02, and the fitter's verdict that the curve is a power law on the window.
"""

from __future__ import annotations

import time

import numpy as np

from ..data import datasets
from ..theory.powerlaw import finite_eps_exponent, fit_power_law, samplewise_exponent, window_average
from ..theory.samplewise import sample_ignition_times, staircase_limit, theorem5
from ._common import chosen, new_figure, sensitivity
from ._table import Check, Claim, Reproduction, reproduce

NAME = "fig4-powerlaw"
TITLE = "Sample-wise power law (Theorem 11, E23): m = 1000 orthogonal samples, exponent vs (2 g1 - 1)/g2"

M = 1000
G1 = 1.0
G2 = 1.5
EPS = 1e-12
RATIOS = (0.5, 0.75, 1.0)
MU_LO = 5
CUTOFF_FRACTION = 0.05
E23_BOUND = 0.10
FINITE_BOUND = 0.02


def run(out_dir, quick: bool = False) -> dict:
    """The sample-wise power law of E23: measured exponent vs (2 g1 - 1)/g2 and its finite forms.

    Writes `out_dir/fig4-powerlaw.png` (loss on log-log axes with the fit, the predicted slope,
    the window and Theorem 10's eps -> 0 staircase; goodness of fit: log residuals and local
    slope) and `out_dir/fig4-powerlaw.json`, and returns the JSON dict. `quick` saves 300 instead
    of 1200 times (same m, window, checks).

    JSON keys: ``settings``, ``exponent`` {measured, predicted, finite_eps_predicted,
    finite_size_predicted, rel_error_*}, ``fit`` (the `PowerLawFit` summary), ``fit_window``,
    ``wall_time_s``, ``checks``.
    """
    return reproduce(Reproduction(NAME, TITLE, _measure, _report, _checks, _claims, _figure), out_dir, quick)


def _measure(quick: bool) -> dict:
    """The Theorem 5 oracle's loss on the sample-wise power-law data, its fit and the predicted exponents."""
    n_times = 300 if quick else 1200
    data = datasets.samplewise_powerlaw_data(M, G1, G2, ratios=RATIOS)
    z0 = np.full(data.p, EPS)
    y = np.asarray(data.y)
    Lam = np.asarray(data.Lambda)
    lam_star = Lam.max(axis=1)
    ign = sample_ignition_times(data, z0=z0, eps=EPS, exact=False)
    tstar = ign.logistic
    mu = np.arange(1, M + 1, dtype=float)
    param_err = float(max(np.max(np.abs(ign.zeta / mu**-G2 - 1)), np.max(np.abs(y / mu**-G1 - 1))))

    mu_hi = int(np.floor(M * CUTOFF_FRACTION ** (1.0 / (2.0 * G1 - 1.0))))
    t_min, t_max = float(tstar[MU_LO - 1]), float(tstar[mu_hi - 1])
    ts = np.concatenate([[0.0], np.geomspace(t_min / 30.0, 3.0 * t_max, n_times)])
    t0 = time.perf_counter()
    sol = theorem5(data, ts, z0=z0, matrices=False)
    oracle_wall = time.perf_counter() - t0
    L = sol.loss
    fit = fit_power_law(ts[1:], L[1:], t_min, t_max)

    a1, a2 = 2.0 * G1, G2
    log_ratio = np.log(y / (lam_star * EPS))
    g_eps = finite_eps_exponent(a1, a2, log_ratio)
    with np.errstate(divide="ignore"):
        g_size = g_eps / (1.0 - (mu / M) ** (a1 - 1.0))
    predicted = samplewise_exponent(G1, G2)
    finite_eps = window_average(tstar, g_eps, t_min, t_max)
    finite_size = window_average(tstar[:-1], g_size[:-1], t_min, t_max)
    measured = fit.exponent
    rel_e23 = abs(measured - predicted) / predicted
    rel_eps = abs(measured - finite_eps) / finite_eps
    rel_size = abs(measured - finite_size) / finite_size

    return {
        "quick": quick,
        "n_times": n_times,
        "data": data,
        "y": y,
        "ign": ign,
        "tstar": tstar,
        "param_err": param_err,
        "mu_hi": mu_hi,
        "ts": ts,
        "oracle_wall": oracle_wall,
        "L": L,
        "fit": fit,
        "predicted": predicted,
        "finite_eps": finite_eps,
        "finite_size": finite_size,
        "measured": measured,
        "rel_e23": rel_e23,
        "rel_eps": rel_eps,
        "rel_size": rel_size,
        "t_min": t_min,
        "t_max": t_max,
    }


def _checks(q: dict) -> list[Check]:
    fit, param_err, rel_e23, rel_size = q["fit"], q["param_err"], q["rel_e23"], q["rel_size"]
    return [
        Check(f"fig4-powerlaw m={M}: |exponent - (2 g1 - 1)/g2| / ((2 g1 - 1)/g2) (E23)", rel_e23, E23_BOUND),
        Check(
            f"fig4-powerlaw m={M}: |exponent - finite-eps, finite-m prediction| / prediction", rel_size, FINITE_BOUND
        ),
        Check(
            "fig4-powerlaw: fitter calls the loss a power law on the window (0 = yes)",
            0.0 if fit.is_power_law else 1.0,
            0.0,
        ),
        Check("fig4-powerlaw: data follow zeta_mu = mu^-g2, y_mu = mu^-g1 (max rel deviation)", param_err, 1e-12),
    ]


def _claims(q: dict) -> list[Claim]:
    finite_size, fit, measured, predicted = q["finite_size"], q["fit"], q["measured"], q["predicted"]
    rel_e23 = q["rel_e23"]
    return [
        Claim(
            "fig4-powerlaw: exponent (2 g1 - 1)/g2",
            "Sample-wise descent with zeta_mu = c mu^-g2, y_mu = c mu^-g1 gives "
            "L(tau) = Theta(tau^-(2 g1 - 1)/g2) (E23).",
            "Sec. 6, Theorem 11",
            metric=(
                "|gamma - (2 g1 - 1)/g2| / ((2 g1 - 1)/g2), gamma fitted on the window (sample 5 to the 5% finite-m "
                "cutoff)"
            ),
            value=rel_e23,
            criterion=f"<= {E23_BOUND:g} and the fitter calls it a power law",
            holds=bool(rel_e23 <= E23_BOUND and fit.is_power_law),
            setting="package-chosen",
            why=f"gamma {measured:.4f} vs {predicted:.4f}; finite eps and m predict {finite_size:.4f}",
        )
    ]


def _report(q: dict) -> dict:
    data, finite_eps, finite_size, fit = q["data"], q["finite_eps"], q["finite_size"], q["fit"]
    measured, mu_hi, n_times, oracle_wall = q["measured"], q["mu_hi"], q["n_times"], q["oracle_wall"]
    predicted, quick, rel_e23, rel_eps = q["predicted"], q["quick"], q["rel_e23"], q["rel_eps"]
    rel_size, t_max, t_min = q["rel_size"], q["t_max"], q["t_min"]
    return {
        "settings": {
            "m": M,
            "K": len(RATIOS),
            "p": data.p,
            "g1": G1,
            "g2": G2,
            "eps": EPS,
            "eigenvalue_ratios": list(RATIOS),
            "z0": "eps for every mode (W0 = sqrt(eps) I)",
            "zeta": "mu^-g2 = (8/m) lambda*_mu y_mu",
            "y": "mu^-g1",
            "times": f"0 and {n_times} log-spaced in [t*_{{mu_lo}}/30, 3 t*_{{mu_hi}}]",
            "oracle": "Theorem 5 (scipy DOP853 on the scalar xi ODEs, rtol 1e-13)",
            "choice": (
                "g1 = 1, g2 = 1.5: a decade of samples (5..50) between the first ignitions and the "
                "finite-m cutoff spans 1.5 decades of time; eps = 1e-12 keeps the finite-eps "
                "steepening (2 g1 - g2)/(g2 L_mu) near 1.6%"
            ),
        },
        "exponent": {
            "measured": measured,
            "predicted": predicted,
            "finite_eps_predicted": finite_eps,
            "finite_size_predicted": finite_size,
            "rel_error_vs_predicted": rel_e23,
            "rel_error_vs_finite_eps": rel_eps,
            "rel_error_vs_finite_size": rel_size,
            "method": (
                "measured: `fit_power_law` (least squares of ln L on ln t, log-uniform resampling) on "
                "the window. finite_eps: (2g1-1)/(g2 - (2g1-g2)/ln(y_mu/(lambda*_mu eps))) (E22's form for "
                "samples); finite_size: divided by 1 - (mu/m)^(2g1-1); both averaged over the window "
                "at the sample igniting at t (`window_average`)."
            ),
        },
        "fit": fit.summary(),
        "fit_window": {
            "t_min": t_min,
            "t_max": t_max,
            "mu_lo": MU_LO,
            "mu_hi": mu_hi,
            "rule": (
                "[t*_{mu_lo}, t*_{mu_hi}] (logistic ignition times, rho = 1/2): mu_lo = 5 (the first "
                "samples are isolated steps), mu_hi = floor(m 0.05^(1/(2g1-1))) = 50, where the finite-m "
                "cutoff steepens the local slope by at most ~5%"
            ),
        },
        "wall_time_s": {"oracle": oracle_wall, "total": None},
        "chosen_settings": {
            "exponents": chosen(
                {"g1": G1, "g2": G2, "m": M},
                "none (the paper has no figure of E23)",
                "a decade of samples between the first ignitions and the finite-m cutoff",
            ),
            "eps": chosen(EPS, "not stated", "keeps the finite-eps steepening near 1.6%"),
        },
        "sensitivity": sensitivity([], quick=quick, reason="the paper states no setting for this theorem"),
    }


def _figure(q: dict):
    L, finite_size, fit, ign = q["L"], q["finite_size"], q["fit"], q["ign"]
    predicted, quick, ts, tstar = q["predicted"], q["quick"], q["ts"], q["tstar"]
    y = q["y"]
    return _plot(ts, L, fit, predicted, finite_size, tstar, ign.zeta, y, quick)


def _plot(ts, L, fit, predicted, finite_size, tstar, zeta, y, quick):
    fig, (ax, ax_r) = new_figure(2, width=5.5, height=4.2)
    t, e = ts[1:], L[1:]
    ax.loglog(t, e, color="k", lw=1.8, label="Theorem 5 oracle")
    tau = t / np.log(1.0 / EPS)
    ax.loglog(
        t,
        staircase_limit(tau, zeta, y),
        color="gray",
        lw=0.9,
        alpha=0.8,
        label="Theorem 10 staircase ($\\epsilon\\to 0$)",
    )
    ax.axvspan(fit.t_min, fit.t_max, color="tab:blue", alpha=0.12, label="fit window")
    tw = np.geomspace(fit.t_min / 3, fit.t_max * 3, 50)
    ax.loglog(tw, fit.predict(tw), color="tab:red", lw=1.2, label=f"fit: exponent {fit.exponent:.3f}")
    t_mid = np.sqrt(fit.t_min * fit.t_max)
    tp = np.geomspace(fit.t_min / 10, fit.t_max * 10, 50)
    ax.loglog(
        tp,
        2.0 * fit.predict(t_mid) * (tp / t_mid) ** -predicted,
        color="tab:blue",
        ls="--",
        lw=1.2,
        label=f"E23: $(2g_1-1)/g_2 = {predicted:.3f}$",
    )
    ax.set_xlabel("gradient-flow time $t$")
    ax.set_ylabel("MSE loss $L(t)$")
    ax.set_title("Sample-wise power law (m = 1000)")
    ax.set_xlim(t[0], t[-1])
    ax.set_ylim(max(e[e > 0].min(), 1e-8 * e.max()), e.max() * 3)
    ax.legend(fontsize=7.5, loc="lower left")

    ax_r.semilogx(np.exp(fit.log_t), fit.residuals, color="k", lw=1.2, label="ln L - fit (window)")
    lt, le = np.log(t), np.log(np.maximum(e, 1e-300))
    local = -np.gradient(le, lt)
    ax_r2 = ax_r.twinx()
    ax_r2.semilogx(t, local, color="tab:green", lw=1.0, label="local exponent $-d\\ln L/d\\ln t$")
    ax_r2.axhline(predicted, color="tab:blue", ls="--", lw=1.0, label=f"E23 {predicted:.3f}")
    ax_r2.axhline(finite_size, color="tab:orange", ls="-.", lw=1.0, label=f"finite eps, m: {finite_size:.3f}")
    ax_r2.set_ylim(0, 2.0)
    ax_r2.set_ylabel("local exponent")
    ax_r.axvspan(fit.t_min, fit.t_max, color="tab:blue", alpha=0.12)
    ax_r.set_ylim(-0.3, 0.3)
    ax_r.set_xlim(t[0], t[-1])
    ax_r.set_xlabel("gradient-flow time $t$")
    ax_r.set_ylabel("log residual of the fit")
    verdict = "power law" if fit.is_power_law else "NOT a power law"
    ax_r.set_title(f"Goodness of fit: rms {fit.rms:.3f}, drift {fit.drift:.3f} ({verdict})")
    h1, l1 = ax_r.get_legend_handles_labels()
    h2, l2 = ax_r2.get_legend_handles_labels()
    ax_r.legend(h1 + h2, l1 + l2, fontsize=7.5, loc="upper left")
    fig.suptitle(
        f"NQF sample-wise descent (E23): $y_\\mu = \\mu^{{-{G1:g}}}$, $\\zeta_\\mu = \\mu^{{-{G2:g}}}$, "
        f"K = 3 modes per sample, $\\epsilon = 10^{{-12}}$" + (" [quick]" if quick else ""),
        fontsize=11,
    )
    return fig
