"""`nqf validate` checks of Theorems 4 and 5 and of Theorem 10's sample-wise staircase
(`nqf.samplewise`); each registers itself in `CHECKS` (after the flow and Theorem 2 checks).

Conventions as in `nqf.validate`: flow-vs-oracle records have bound `FLOW_BOUND` = 1e-8
(maximum relative error over the whole trajectory: elementwise on the mode strengths z in the
data's eigenbasis, Frobenius-normwise on M where the data are rotated, since the M-form state
mixes modes of very different size); refusal records contain "refuse" and pass when the oracle
raised `AssumptionError` (value: its residual, bound: its tol).
"""

from __future__ import annotations

import numpy as np

from ..data import datasets
from ..data._operators import DenseData
from ..solvers._solve import solve_flow
from ..theory.samplewise import (
    measure_sample_ignition_times,
    sample_ignition_times,
    staircase_limit,
    theorem4,
    theorem5,
)
from ._common import (
    _ATOL_TINY,
    _NT,
    _RTOL,
    FLOW_BOUND,
    _fmt,
    _random_psd,
    _refusal,
    norm_relative_error,
    record,
    register,
    relative_error,
)

__all__ = ["check_theorem4", "check_theorem5", "check_samplewise_staircase", "THM4_DATA", "THM5_DATA"]

THM4_DATA = dict(lam=(1.0, 0.6, -0.4, 0.0, 0.3), c=(1.0, 0.5, -0.7, 1.2, 0.3), y=(0.8, 0.2, -0.3, 1.0, 0.1))
"""Theorem 4 test bed: A = P diag(lam) P^T with growing, decaying and null modes, mixed-sign c."""

THM5_DATA = dict(blocks=((1.0, 0.5), (1.5, -0.4), (0.8, 0.8)), y=(1.0, 0.6, -0.3))
"""Theorem 5 test bed: m = 3 samples, K = 2 (p = 6), a sample with a negative eigenvalue and one
whose label cannot be reached (y < 0 with positive eigenvalues: it decays)."""

STAIRCASE_EPS = 1e-100


def thm4_data():
    return datasets.proportional_data(THM4_DATA["lam"], THM4_DATA["c"], THM4_DATA["y"], rotate_basis=True, seed=3)


def thm5_data():
    return datasets.orthogonal_samples_data(THM5_DATA["blocks"], THM5_DATA["y"], rotate_basis=True, seed=4)


def _flows_vs_sample_oracle(name, oracle, data, eps_values, seed, *, dense_input_check=False):
    """GLV and M-form (dense data) flows vs a sample-wise oracle from a random non-diagonal M0 of
    scale eps, t in [0, 40]; optionally the oracle on dense vs commuting input."""
    dense = DenseData(np.asarray(data.dense()), np.asarray(data.y))
    T = 40.0
    ts = np.linspace(0.0, T, _NT)
    out = []
    for eps in eps_values:
        M0 = _random_psd(data.p, eps, seed=seed)
        orc = oracle(data, ts, M0=M0)
        glv = solve_flow(data, M0=M0, t1=T, ts=ts, form="glv", rtol=_RTOL)
        out.append(record(f"{name} glv {_fmt(eps)}: max rel err z", relative_error(glv.z, orc.z), FLOW_BOUND))
        out.append(record(f"{name} glv {_fmt(eps)}: max rel err |M|_F", norm_relative_error(glv.M, orc.M), FLOW_BOUND))
        Mf = solve_flow(dense, M0=M0, t1=T, ts=ts, form="M", rtol=_RTOL, atol=_ATOL_TINY, dense=False)
        out.append(
            record(
                f"{name} M-form (dense data) {_fmt(eps)}: max rel err |M|_F",
                norm_relative_error(Mf.M, orc.M),
                FLOW_BOUND,
            )
        )
        if dense_input_check:
            od = oracle(dense, ts, M0=M0)
            out.append(
                record(
                    f"{name} dense vs commuting input {_fmt(eps)}: max rel err |M|_F",
                    norm_relative_error(od.M, orc.M),
                    FLOW_BOUND,
                )
            )
    return out, ts


@register
def check_theorem4(eps_values):
    """Theorem 4 (E14) on rotated proportional data (p = m = 5), random non-diagonal M0: the GLV
    and M-form flows vs the oracle, the oracle on dense vs commuting input, and a refusal."""
    out, ts = _flows_vs_sample_oracle("theorem4", theorem4, thm4_data(), eps_values, 13, dense_input_check=True)
    out.append(
        _refusal(
            "theorem4 refuses non-proportional samples (Fig. 4 data)",
            lambda: theorem4(datasets.fig4_data(), ts[:3], M0=np.eye(12)),
        )
    )
    return out


@register
def check_theorem5(eps_values):
    """Theorem 5 (E15) on rotated orthogonal-samples data (m = 3, p = 6), random non-diagonal M0:
    the GLV and M-form flows vs the oracle, and a refusal."""
    out, ts = _flows_vs_sample_oracle("theorem5", theorem5, thm5_data(), eps_values, 17)
    out.append(
        _refusal(
            "theorem5 refuses samples that are not orthogonal (proportional data)",
            lambda: theorem5(thm4_data(), ts[:3], M0=np.eye(5)),
        )
    )
    return out


@register
def check_samplewise_staircase(eps_values):
    """Theorem 10 (E23) on the Fig. 4 data at eps = 1e-100 (independent of `eps_values`): the
    loss at rescaled times tau = t / ln(1/eps) between the plateaus (geometric midpoints of
    1/zeta_mu, and 1/(2 zeta_1)) against the staircase (1/m) sum_mu y_mu^2 I(tau < 1/zeta_mu),
    normalized by L(0), for the oracle and the GLV flow; and the flow's ignition times against
    ln(1/eps)/zeta_mu + the O(1) correction (their remaining error is O(eps^(1/4)), 1e-25 here)."""
    eps = STAIRCASE_EPS
    data = datasets.fig4_data()
    y = np.asarray(data.y)
    W0 = np.sqrt(eps) * np.eye(data.p)
    ign = sample_ignition_times(data, W0=W0, eps=eps, exact=False)
    tau_star = np.sort(1.0 / ign.zeta)
    tau = np.concatenate([[0.5 * tau_star[0]], np.sqrt(tau_star[:-1] * tau_star[1:])])
    lam = np.log(1.0 / eps)
    t_mid = tau * lam
    S = staircase_limit(tau, ign.zeta, y)
    L0 = float(np.mean(y**2))
    orc = theorem5(data, t_mid, W0=W0)
    T = 1.25 * float(ign.logistic.max())
    ts = np.linspace(0.0, T, _NT)
    glv = solve_flow(data, W0=W0, t1=T, ts=ts, form="glv", rtol=_RTOL)
    L_flow = np.mean((glv.z_at(t_mid) @ np.asarray(data.Lambda).T - y) ** 2, axis=1)
    meas = measure_sample_ignition_times(glv)
    return [
        record(
            "samplewise staircase (Theorem 10) eps=1e-100: oracle, max |L(tau ln 1/eps) - staircase| / L(0)",
            float(np.max(np.abs(orc.loss - S))) / L0,
            FLOW_BOUND,
        ),
        record(
            "samplewise staircase (Theorem 10) eps=1e-100: flow, max |L(tau ln 1/eps) - staircase| / L(0)",
            float(np.max(np.abs(L_flow - S))) / L0,
            FLOW_BOUND,
        ),
        record(
            "samplewise ignition eps=1e-100: flow t*_mu vs ln(1/eps)/zeta + O(1) correction, max rel err",
            float(np.max(np.abs(meas / ign.logistic - 1.0))),
            FLOW_BOUND,
        ),
    ]
