"""Theorem 7's sudden-learning and power-law branch on isotropic data (issue 27, item 2).

The paper states the feature-wise results of Sec. 6 (Theorems 8, 9; formal statement App. A.17)
for Theorem 6 (a = 1) and for Theorem 7 with M(0), Y commuting: zeta_k = g_k (the eigenvalues of
Y), a = 2, C_k = 4 c and V_k = g_k^2 / (16 c) (THEORY sec. 7). It shows only the Theorem 6 case
(Fig. 3). This reproduction runs the a = 2 case on isotropic, non-commuting data sets:

1. Ignition (Theorem 8 / Eq. E19, a = 2): `basis_isotropic_data` (p = 5, c = 1/4,
   g = (1, 1/2, 1/4, 1/8, 1/16)), the M-form flow from M0 = eps I, eps = 1e-6 (and 1e-3, 1e-9
   in the full run; not 1e-12: there the M-form's rounding, ~1e-16 |M| absolute in a state that
   mixes all modes, is 1e-4 of the slowest mode's initial size, and the flow is 4e-7 (normwise)
   off E17 at that mode's ignition, measured; its ignition time is still within 5e-6 of E19,
   which `nqf validate` checks at eps = 1e-12): times at which the eigenvalues of M reach half of g_k / (4 c) (linear
   interpolation on 2001 saved times) against E19 with a = 2.
2. Power law (Theorem 9): g_k = k^-a2, a2 = 2, so V_k = g_k^2 / (16 c) ~ k^-a1 with a1 = 4 and
   Theorem 9's exponent (a1 - 1)/a2 = 1.5; p = 30 (quick: 24), eps = 1e-8; the loss fitted by
   `fit_power_law` on [t*_2, t*_{k_hi}] (`ignition_window`: k_hi = floor(p 0.05^(1/(a1-1)))).
3. Approximately isotropic data: `datasets.sampled_isotropic_data` (m samples of an isotropic
   distribution, p = 4) for m = 10..2560; the isotropy residual and the error of Theorem 7's
   oracle against the flow (`nqf.validate._isotropic.approximate_isotropy_errors`).

Checks (is nqf right): the flow against Theorem 7's oracle (`theorem7`, Eq. E17; maximum
normwise relative error of M over the run <= 1e-8: the M-form state mixes modes of very
different size, so its eigenvalues near eps = 1e-12 carry rounding of 1e-16 |M|), the flow's loss against sum_k V_k (1 - z_k/z_k(inf))^2 (<= 1e-8),
the data's isotropy residual (<= 1e-12), and the oracle error's log-log slope against the
residual within 0.3 of 1 (first order in the residual).

Claims (criteria fixed before measuring): ignition times within 0.1 % of E19 with a = 2 (the
issue's criterion); the power-law exponent within 5 % of Theorem 9's (a1 - 1)/a2 (the Fig. 3
power-law criterion of `fig3_powerlaw`), and within 5 % of E22's finite-eps exponent.
"""

from __future__ import annotations

import numpy as np

from ..data._isotropic import isotropy
from ..solvers._solve import solve_flow
from ..theory._ignition import measure_ignition_times, predicted_ignition_times
from ..theory._oracles import theorem7
from ..validate._common import norm_relative_error
from ..validate._isotropic import (
    APPROX_SLOPE_BOUND,
    IGNITION_BOUND,
    POWERLAW_BOUND,
    approximate_isotropy_errors,
    basis_isotropic_data,
    isotropic_powerlaw_run,
)
from ._common import chosen, new_figure, sensitivity
from ._table import Check, Claim, Reproduction, reproduce

NAME = "isotropic"
TITLE = "Theorem 7 (a = 2): ignition times vs E19, power law vs V_k = g_k^2/(16c), approximate isotropy"

C = 0.25
G = (1.0, 0.5, 0.25, 0.125, 0.0625)
SECTION = "Sec. 6 (Feature-wise Descent) and App. A.17, Theorem 7 case (a = 2, zeta_k = g_k, C_k = 4c)"


def _ignition(eps: float):
    g = np.asarray(G)
    data = basis_isotropic_data(g, C, seed=1)
    tp = predicted_ignition_times(g, 4.0 * C, eps, a=2.0)
    T = 1.5 * float(tp.max())
    ts = np.linspace(0.0, T, 2001)
    sol = solve_flow(data, M0=eps * np.eye(g.size), t1=T, ts=ts, form="M", rtol=1e-11, atol=1e-250, dense=False)
    z = np.linalg.eigvalsh(np.asarray(sol.M))[:, ::-1]
    orc = theorem7(data, ts, M0=eps * np.eye(g.size))
    tm = measure_ignition_times(sol, quantity="eigenvalues", target=g / (4.0 * C), refine="linear")
    L = np.asarray(sol.loss)
    E = np.sum(g**2 / (16.0 * C) * (1.0 - z * 4.0 * C / g) ** 2, axis=1)
    sel = L > 1e-6 * L[0]
    return {
        "eps": eps,
        "ts": ts,
        "z": z,
        "predicted": tp,
        "measured": tm,
        "rel_error": float(np.max(np.abs(tm / tp - 1.0))),
        "flow_vs_oracle": norm_relative_error(sol.M, orc.M),
        "loss_vs_V": float(np.max(np.abs(E[sel] / L[sel] - 1.0))),
        "isotropy_residual": isotropy(data)[1],
    }


def run(out_dir, quick: bool = False) -> dict:
    """Theorem 7's a = 2 branch: ignition, power law, approximate isotropy (module docstring).

    Writes `out_dir/isotropic.png` (eigenvalues of M(t) with the E19 times; the loss on log-log
    axes with the fit; oracle error against isotropy residual) and `out_dir/isotropic.json`, and
    returns the JSON dict. `quick`: one eps (1e-6) instead of three, p = 24 instead of 30 for the
    power law (the approximately isotropic data keep both seeds).
    """
    return reproduce(Reproduction(NAME, TITLE, _measure, _report, _checks, _claims, _figure), out_dir, quick)


def _measure(quick: bool) -> dict:
    """Ignition runs per eps, the power-law run and the approximate-isotropy errors with their slope."""
    eps_values = (1e-6,) if quick else (1e-3, 1e-6, 1e-9)
    ign = [_ignition(eps) for eps in eps_values]
    p_pl = 24 if quick else 30
    pl = isotropic_powerlaw_run(p=p_pl)
    fit = pl["fit"]
    mult, seeds = (1, 4, 16, 64, 256), (0, 1)  # both seeds in quick mode too: one seed's slope scatters by 0.35
    re = approximate_isotropy_errors(multiples=mult, seeds=seeds)
    slope = float(np.polyfit(np.log(re[:, 0]), np.log(re[:, 1]), 1)[0])
    rel9 = abs(fit.exponent - pl["theorem9"]) / pl["theorem9"]
    rel22 = abs(fit.exponent - pl["E22"]) / pl["E22"]

    return {
        "quick": quick,
        "eps_values": eps_values,
        "ign": ign,
        "p_pl": p_pl,
        "pl": pl,
        "fit": fit,
        "re": re,
        "slope": slope,
        "rel9": rel9,
        "rel22": rel22,
        "mult": mult,
        "seeds": seeds,
    }


def _checks(q: dict) -> list[Check]:
    ign, p_pl, pl, slope = q["ign"], q["p_pl"], q["pl"], q["slope"]
    checks = []
    for r in ign:
        e = f"eps={r['eps']:.0e}"
        checks.append(
            Check(
                f"isotropic {e}: flow vs Theorem 7 (E17), max |M - M_oracle|_F / |M_oracle|_F",
                r["flow_vs_oracle"],
                1e-8,
            )
        )
        checks.append(Check(f"isotropic {e}: flow loss vs sum V_k (1 - z_k/z_k(inf))^2", r["loss_vs_V"], 1e-8))
    checks += [
        Check("isotropic: isotropy residual of the data (ignition run)", ign[0]["isotropy_residual"], 1e-12),
        Check(f"isotropic power law p={p_pl}: flow loss vs V_k formula", pl["V_formula_error"], 1e-8),
        Check(
            "isotropic approx: |d ln(theorem7 error) / d ln(isotropy residual) - 1|",
            abs(slope - 1.0),
            APPROX_SLOPE_BOUND,
        ),
    ]
    return checks


def _claims(q: dict) -> list[Claim]:
    eps_values, fit, ign, p_pl = q["eps_values"], q["fit"], q["ign"], q["p_pl"]
    pl, rel22, rel9 = q["pl"], q["rel22"], q["rel9"]
    worst = max(r["rel_error"] for r in ign)
    setting = "package-chosen"
    return [
        Claim(
            "isotropic: ignition times = E19 with a = 2",
            "Under Theorem 7 with M(0), Y commuting, t*_k = (1/(a zeta_k)) ln(...) with a = 2, zeta_k = g_k, C_k = 4c.",
            SECTION,
            metric="max_k |t*_k (flow) / t*_k (E19, a = 2) - 1| over eps in " + ", ".join(f"{e:g}" for e in eps_values),
            value=worst,
            criterion=f"<= {IGNITION_BOUND:g} (0.1 %)",
            holds=worst <= IGNITION_BOUND,
            setting=setting,
            why=f"measured {worst:.2e}; the paper shows no a = 2 run, data and eps chosen here",
        ),
        Claim(
            "isotropic: power-law exponent (a1 - 1)/a2",
            "With zeta_k ~ k^-a2 and V_k ~ k^-a1 the excess loss decays as t^-(a1-1)/a2 (Theorem 9).",
            SECTION,
            metric=f"|gamma - (a1 - 1)/a2| / ((a1 - 1)/a2), gamma fitted on [t*_2, t*_{pl['window']['k_hi']}]",
            value=rel9,
            criterion=f"<= {POWERLAW_BOUND:g} (the Fig. 3 power-law criterion)",
            holds=rel9 <= POWERLAW_BOUND,
            setting=setting,
            why=(
                f"gamma = {fit.exponent:.4f} vs {pl['theorem9']:g} (V_k = g_k^2/(16c) gives a1 = 2 a2 = 4); "
                f"finite eps = 1e-8 steepens it to E22's {pl['E22']:.4f}; p = {p_pl}, "
                f"is_power_law = {fit.is_power_law} (rms {fit.rms:.3f})"
            ),
        ),
        Claim(
            "isotropic: power-law exponent at finite eps (E22)",
            "At finite eps the local exponent is (a1 - 1)/(a2 - (a1 - a2)/ln(zeta_k/(C_k eps))) (E22).",
            SECTION,
            metric="|gamma - E22 averaged over the window| / E22",
            value=rel22,
            criterion=f"<= {POWERLAW_BOUND:g}",
            holds=rel22 <= POWERLAW_BOUND,
            setting=setting,
            why=f"gamma = {fit.exponent:.4f} vs E22 {pl['E22']:.4f}",
        ),
    ]


def _report(q: dict) -> dict:
    eps_values, fit, ign, mult = q["eps_values"], q["fit"], q["ign"], q["mult"]
    p_pl, pl, quick, re = q["p_pl"], q["pl"], q["quick"], q["re"]
    rel22, rel9, seeds, slope = q["rel22"], q["rel9"], q["seeds"], q["slope"]
    return {
        "settings": {
            "ignition": {"p": len(G), "c": C, "g": list(G), "eps": list(eps_values), "M0": "eps I"},
            "power_law": {"p": p_pl, "a2": 2.0, "a1": 4.0, "c": C, "eps": 1e-8, "window": pl["window"]},
            "approximate": {"p": 4, "m": [10 * k for k in mult], "seeds": list(seeds), "eps": 1e-6},
        },
        "ignition": [
            {k: r[k] for k in ("eps", "predicted", "measured", "rel_error", "flow_vs_oracle", "loss_vs_V")} for r in ign
        ],
        "power_law": {
            "fit": fit.summary(),
            "theorem9": pl["theorem9"],
            "E22": pl["E22"],
            "rel_error_vs_theorem9": rel9,
            "rel_error_vs_E22": rel22,
        },
        "approximate": {"residual": re[:, 0], "oracle_error": re[:, 1], "loglog_slope": slope},
        "wall_time_s": {"total": None},
        "chosen_settings": {
            "data": chosen(
                "one sample per basis element of Sym(p), labels giving Y = R diag(g) R^T",
                "not stated (no a = 2 experiment)",
                "exactly isotropic (K = 4c I) with a prescribed spectrum of Y",
            ),
            "power_law": chosen("g_k = k^-2, p = 30, eps = 1e-8", "not stated", "a1 = 2 a2 = 4 > 1; 1.5 decades of t"),
            "approximate": chosen(
                "m samples of A = (G + G^T)/sqrt 2, G ~ N(0, c/2)",
                "not stated",
                "isotropic in expectation; the residual shrinks as m grows",
            ),
        },
        "sensitivity": sensitivity([], quick=quick, reason="the paper states no setting for this case"),
    }


def _figure(q: dict):
    ign, pl, quick, re = q["ign"], q["pl"], q["quick"], q["re"]
    slope = q["slope"]
    return _plot(ign[len(ign) // 2 if not quick else 0], pl, re, slope)


def _plot(ign, pl, re, slope):
    fig, axes = new_figure(3)
    ax = axes[0]
    for k in range(ign["z"].shape[1]):
        ax.plot(ign["ts"], ign["z"][:, k], color=f"C{k}")
        ax.axvline(ign["predicted"][k], color=f"C{k}", ls="--", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel("eigenvalues of M")
    ax.set_title(f"ignition, eps = {ign['eps']:g} (dashed: E19, a = 2)")
    ax = axes[1]
    ts, L = pl["ts"][1:], pl["L"][1:]
    ax.loglog(ts, L, color="k")
    w, f = pl["window"], pl["fit"]
    tt = np.geomspace(w["t_min"], w["t_max"], 50)
    ax.loglog(tt, f.predict(tt), "r--", label=f"fit {f.exponent:.3f} (Thm 9: {pl['theorem9']:g}, E22 {pl['E22']:.3f})")
    ax.axvspan(w["t_min"], w["t_max"], color="0.9")
    ax.set_xlabel("t")
    ax.set_ylabel("loss")
    ax.legend(fontsize=7)
    ax.set_title("power law, g_k = k^-2")
    ax = axes[2]
    ax.loglog(re[:, 0], re[:, 1], "o")
    ax.set_xlabel("isotropy residual")
    ax.set_ylabel("Theorem 7 oracle error")
    ax.set_title(f"approximately isotropic data (slope {slope:.2f})")
    return fig
