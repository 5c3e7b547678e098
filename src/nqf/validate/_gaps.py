"""`nqf validate` check of Theorem 8's diverging gaps (Appendix A.17; Eq. 40 in the numbering of
papers/nqf-paper-summary-zh.md): the gaps between successive ignition times diverge as eps -> 0,
lim (t*_{k+1} - t*_k) = inf, growing like (1/(a zeta_{k+1}) - 1/(a zeta_k)) ln(1/eps) (E19).

Measured on the flow (`nqf.solve_flow`, GLV form, dense output; `measure_ignition_times`) of the
Fig. 3 data (Theorem 6, a = 1, zeta = r = (1, .5, .25, .125, .0625), C_kk = 1), W0 = sqrt(eps) I,
at eps = 1e-3, 1e-6, 1e-9, 1e-12.
"""

from __future__ import annotations

import numpy as np

from ..data import datasets
from ..solvers._solve import solve_flow
from ..theory._ignition import measure_ignition_times, predicted_ignition_times
from ..theory._oracles import theorem6_rates
from ._common import _NT, _RTOL, FLOW_BOUND, _fmt, record, register

__all__ = ["check_diverging_gaps", "GAPS_EPS", "SLOPE_FACTOR"]

GAPS_EPS = (1e-3, 1e-6, 1e-9, 1e-12)
"""Initial scales of the Eq. 40 check."""
SLOPE_FACTOR = 100.0
"""The slope of the gaps in ln(1/eps) between eps_i and eps_{i+1} must match
1/zeta_{k+1} - 1/zeta_k to relative SLOPE_FACTOR * eps_i: E19's remaining eps-dependence,
(1/zeta) ln(zeta/(zeta - C c eps)) ~ C c eps / zeta^2, is O(eps_i) (about 4.6 eps_i here)."""


@register
def check_diverging_gaps(eps_values):
    """Eq. 40 on the Fig. 3 data (independent of `eps_values`). Criteria, stated before measuring:

    - at each eps, the flow's ignition times (rho = 1/2 of z_k(inf) = r_k / C_kk) equal E19's
      (`predicted_ignition_times`), max rel err <= 1e-8;
    - between successive eps_i > eps_{i+1}, each gap t*_{k+1} - t*_k grows by
      (1/r_{k+1} - 1/r_k) ln(eps_i / eps_{i+1}): measured slope vs that, max rel err
      <= 100 eps_i;
    - the gaps increase at every step of eps (Eq. 40's divergence; value: minus the smallest
      increase, bound 0), the smallest gap growing from its eps = 1e-3 value by the factor
      reported in the name.
    """
    data = datasets.fig3_data()
    r, C = (np.asarray(v, float) for v in theorem6_rates(data))
    order = np.argsort(-r)  # fastest first: t*_1 < t*_2 < ...
    out, gaps = [], []
    for eps in GAPS_EPS:
        W0 = np.sqrt(eps) * np.eye(data.p)
        pred = predicted_ignition_times(r, C, np.full(data.p, eps))
        T = 1.25 * float(pred.max())
        glv = solve_flow(data, W0=W0, t1=T, ts=np.linspace(0.0, T, _NT), form="glv", rtol=_RTOL, dense=True)
        meas = measure_ignition_times(glv, target=r / C)
        out.append(
            record(
                f"Eq. 40 gaps {_fmt(eps)}: flow ignition times vs E19, max rel err",
                float(np.max(np.abs(meas / pred - 1.0))),
                FLOW_BOUND,
            )
        )
        gaps.append(np.diff(meas[order]))
    gaps = np.asarray(gaps)  # (n_eps, p - 1)
    slope_pred = np.diff(1.0 / r[order])
    for i in range(len(GAPS_EPS) - 1):
        slope = (gaps[i + 1] - gaps[i]) / np.log(GAPS_EPS[i] / GAPS_EPS[i + 1])
        out.append(
            record(
                f"Eq. 40 gaps {_fmt(GAPS_EPS[i])} -> {_fmt(GAPS_EPS[i + 1])}: slope in ln(1/eps) vs "
                "1/r_{k+1} - 1/r_k, max rel err (bound 100 eps_i)",
                float(np.max(np.abs(slope / slope_pred - 1.0))),
                SLOPE_FACTOR * GAPS_EPS[i],
            )
        )
    rise = np.diff(gaps, axis=0)
    out.append(
        record(
            f"Eq. 40: gaps grow as eps decreases (minus the smallest increase; smallest gap "
            f"{gaps[0].min():.3g} at {_fmt(GAPS_EPS[0])} -> {gaps[-1].min():.3g} at {_fmt(GAPS_EPS[-1])})",
            float(-rise.min()),
            0.0,
            passed=bool(rise.min() > 0),
        )
    )
    return out
