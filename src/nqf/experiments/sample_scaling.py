"""Sample-size power laws from one NQF (issue 18): the spiked He2 model, Y as a spectral estimator,
and the trained flow.

Model (`nqf.datasets.spiked_he2_data`): x ~ N(0, I_d), A(x) = x x^T - I (quadratic network /
phase retrieval, centred), teacher y = sum_{i<=K} lambda_i (<a_i, x>^2 - 1) + sigma xi with
lambda_i = Z i^-gamma, K = d / 2 orthonormal a_i, Z normalised to sum_i lambda_i^2 = 1, sigma = 0.5
(E[y^2] = s^2 = 2.25). Near small initialization the flow is the power method M(t) =
e^{tY} M0 e^{tY} on Y = (4/n) sum_mu y_mu A_mu (`nqf.linearized`), so what it can learn from
n samples at early time is what Y's top eigenvectors recover.

Predictions (`nqf.spectral`, stated before measuring):

- threshold n_i = d s^2 / (4 lambda_i^2) (BBP, GOE approximation of Y's noise); squared
  overlap of the i-th top eigenvector of Y with a_i, cos^2 theta_i = 1 - rho_i n_i / n
  (rho_i = 1 + 8 lambda_i^2 / s^2, the spike-row variance; leading order in n_i / n), which
  reaches 1/2 at n_half,i = 2 rho_i n_i;
- representation error of the spectral estimator, R(n) = sum_i lambda_i^2 (1 - |P a_i|^2) /
  sum_i lambda_i^2, P the projector on the eigenvectors of Y whose eigenvalues stand out of the
  noise bulk (above the predicted edge 8 s sqrt(d / n), at most k_eig): the teacher's weight
  outside the representation Y recovers. It decays as
  R ~ n^(-1 + 1/(2 gamma)) for gamma > 1/2 (directions i <= k(n) ~ n^(1/(2 gamma)) recovered,
  the tail sum_{i > k} lambda_i^2 ~ k^(1 - 2 gamma)); for gamma <= 1/2 no decaying power law is
  predicted (gamma = 0: all directions share one threshold). Finite-size prediction: the same fit
  applied to R_pred(n) = sum_i lambda_i^2 (1 - cos^2 theta_i(n)) / sum lambda^2 (predicted
  overlaps, K = d/2 directions), which carries the finite-K and finite-n corrections.

Measurements. For every gamma in {0, 0.4, 0.6, 1}, d in {100, 200, 400} and seed, one data set
of n_max = min(d^2, 10^5) samples; n runs over the prefixes n = round(d^alpha), alpha on a grid
in [1, 2] (points above 10^5 replaced by 10^5), and Y of each prefix is accumulated in one pass over the data (only the new rows'
X^T diag(y) X at each n). Y's top k_eig = min(K - 1, 60) eigenpairs by Lanczos
(`nqf.spectral.top_eigenpairs`). Panel (a): cos^2 theta_i = (v_i^T a_i)^2 (the i-th top
eigenvector against a_i), seed mean; measured n_half,i = the first n at which it crosses 1/2
(log-linear interpolation). Panel (b): R(n) and its exponent by `nqf.fit_power_law` on the
window [n_half,2, n_max] (after the first two directions are recovered, rule fixed before
measuring). Panel (c): the NQF flow (`solve_flow`, factor form, tsit5, rtol 1e-6) from
W0 = sqrt(eps) Q (Q: d x r orthonormal, eps = 1e-6, r = 16 neurons) at d = 100, trained to the
stated horizon t1 = 30 (gradient-flow time), at every other n of the grid: recovered directions
#{i : max_j (u_j^T a_i)^2 >= 1/2} (u_j the r eigenvectors of M(t1); the criterion of panel (a))
against the spectral prediction #{i : n_half,i <= n}, and
the test error |M - M*|_F^2 / |M*|_F^2 (population excess loss 2 |M - M*|_F^2 over 2 |M*|_F^2)
at t1 and at its best saved time, with its exponent fitted as in (b).

Claims: (1) threshold positions: for gamma in {0.6, 1} and each d, max over i = 1..4 of
|log2(measured n_half,i / (2 rho_i n_i))| <= 1 (within a factor 2); (2) spectral exponent at the
largest d within 10 % of 1 - 1/(2 gamma) for gamma in {0.6, 1} (gamma in {0, 0.4}: reported, not
expected); (3) whether the trained flow follows the same exponent (an open question: measured
and reported, criterion the same 10 %).

Checks (package correctness, exit status): prefix accumulation of Y equals `He2Data.Y()`;
Lanczos eigenvalues equal a dense `eigh`; the flow agrees with `nqf.linearized` up to the
validity horizon (relative error <= 2 delta, delta = 0.1).
"""

from __future__ import annotations

import time

import numpy as np

from ..data.datasets import spiked_he2_data
from ..solvers._solve import solve_flow
from ..theory import spectral
from ..theory.powerlaw import fit_power_law
from ._common import COLORS, chosen, sensitivity
from ._table import Check, Claim, Reproduction, reproduce

NAME = "sample-scaling"
TITLE = (
    "Sample-size power laws (spiked He2 model): Y's eigenvectors vs BBP thresholds, spectral "
    "exponent vs 1 - 1/(2 gamma), trained flow"
)

GAMMAS = (0.0, 0.4, 0.6, 1.0)
CLAIM_GAMMAS = (0.6, 1.0)
SIGMA = 0.5
N_MAX = 100_000
K_EIG_MAX = 60
I_SHOW = 6
I_CLAIM = 4
THRESHOLD_FACTOR = 2.0
EXPONENT_BOUND = 0.10
EPS = 1e-6
DELTA = 0.1
T_FLOW = 30.0
FLOW_RTOL = 1e-6


def _config(quick: bool) -> dict:
    if quick:
        return {
            "ds": (40, 80),
            "n_alpha": 9,
            "seeds": (0,),
            "d_flow": 40,
            "width": 8,
            "flow_every": 4,
            "flow_gammas": (1.0,),
        }
    return {
        "ds": (100, 200, 400),
        "n_alpha": 17,
        "seeds": (0, 1),
        "d_flow": 100,
        "width": 16,
        "flow_every": 2,
        "flow_gammas": GAMMAS,
    }


def n_grid(d: int, n_alpha: int) -> np.ndarray:
    """n = round(d^alpha), alpha on `n_alpha` equally spaced points of [1, 2]; where that exceeds
    N_MAX, the points above it are replaced by N_MAX itself (the largest n the issue asks for)."""
    n = np.unique(np.round(float(d) ** np.linspace(1.0, 2.0, n_alpha)).astype(int))
    return np.append(n[n < N_MAX], N_MAX) if n.max() > N_MAX else n


def crossing(n, c, level: float = 0.5) -> float:
    """First n at which c (N,) crosses `level` upward (linear in ln n), NaN if never."""
    n, c = np.asarray(n, float), np.asarray(c, float)
    above = np.flatnonzero(c >= level)
    if above.size == 0:
        return float("nan")
    j = int(above[0])
    if j == 0:
        return float(n[0])
    f = (level - c[j - 1]) / (c[j] - c[j - 1])
    return float(np.exp(np.log(n[j - 1]) + f * (np.log(n[j]) - np.log(n[j - 1]))))


def representation_error(V, a, lam) -> float:
    """R = sum_i lambda_i^2 (1 - |P a_i|^2) / sum_i lambda_i^2: the teacher's weight outside the span
    of the orthonormal columns V (d, k) (P = V V^T), for directions a (d, K) and spikes lam (K,)."""
    captured = np.sum((V.T @ a) ** 2, axis=0)
    return float(np.sum(lam**2 * (1.0 - captured)) / np.sum(lam**2))


def predicted_error(n, lam, d: int) -> np.ndarray:
    """R_pred(n) = sum_i lambda_i^2 (1 - cos^2 theta_i(n)) / sum lambda^2 (predicted overlaps)."""
    c = spectral.bbp_overlap(n, lam, d, sigma=SIGMA)
    return ((1.0 - c) @ lam**2) / np.sum(lam**2)


def _spectral_run(gamma, d, seeds, n_alpha, checks_acc):
    ns = n_grid(d, n_alpha)
    K = d // 2
    k_eig = min(K - 1, K_EIG_MAX)
    cos2 = np.zeros((len(seeds), ns.size, I_SHOW))
    R = np.zeros((len(seeds), ns.size))
    k_out = np.zeros((len(seeds), ns.size), dtype=int)
    t_eig = 0.0
    lam = None
    for s_idx, seed in enumerate(seeds):
        data, T = spiked_he2_data(int(ns[-1]), d, gamma=gamma, sigma=SIGMA, seed=seed)
        lam = T.lam
        X, y = np.asarray(data.X), np.asarray(data.y)
        S = np.zeros((d, d))
        prev = 0
        for j, n in enumerate(ns):
            Xc = X[prev:n]
            S += Xc.T @ (y[prev:n, None] * Xc)  # one pass over the data across the whole grid
            prev = int(n)
            Y = 4.0 / n * (S - y[:n].sum() * np.eye(d))
            t0 = time.perf_counter()
            g, V = spectral.top_eigenpairs(Y, k_eig)
            t_eig += time.perf_counter() - t0
            cos2[s_idx, j] = np.sum(V[:, :I_SHOW] * T.a[:, :I_SHOW], axis=0) ** 2
            k_out[s_idx, j] = int(np.sum(g > spectral.bulk_edge(n, d, lam=T.lam, sigma=SIGMA)))
            R[s_idx, j] = representation_error(V[:, : k_out[s_idx, j]], T.a, T.lam)
        if "prefix" not in checks_acc:
            ref = np.asarray(data.Y())
            checks_acc["prefix"] = float(np.abs(Y - ref).max() / np.abs(ref).max())
            w = np.linalg.eigvalsh(Y)[::-1][:k_eig]
            checks_acc["lanczos"] = float(np.abs(g - w).max() / np.abs(w).max())
    return {
        "n": ns,
        "cos2": cos2.mean(0),
        "cos2_seeds": cos2,
        "R": R.mean(0),
        "k_out": k_out,
        "lam": lam,
        "k_eig": k_eig,
        "t_eig": t_eig,
    }


def _fit(n, R, n_lo, n_hi):
    """Exponent of R ~ n^-e on [n_lo, n_hi] (nqf.fit_power_law), or None if the window is not inside."""
    n = np.asarray(n, float)
    if not (n[0] <= n_lo < n_hi <= n[-1]) or np.any(np.asarray(R) <= 0):
        return None
    return fit_power_law(n, np.asarray(R, float), n_lo, n_hi)


def _flow_run(gamma, d, width, ns, lin_errs):
    """The NQF flow at each n from W0 = sqrt(eps) Q; returns recovered counts and test errors."""
    out = {
        "n": [],
        "recovered": [],
        "predicted_recovered": [],
        "test_error_t1": [],
        "test_error_best": [],
        "t_best": [],
        "horizon": [],
    }
    rng = np.random.default_rng(12345)
    Q = np.linalg.qr(rng.standard_normal((d, width)))[0]
    W0 = np.sqrt(EPS) * Q
    for n in ns:
        data, T = spiked_he2_data(int(n), d, gamma=gamma, sigma=SIGMA, seed=0)
        Ms = T.M_star()
        th = spectral.linearized_horizon(data, W0=W0, delta=DELTA)
        t_lin = np.linspace(th / 10, th, 10) if 0 < th < T_FLOW / 2 else np.linspace(0.01, 0.1, 10)
        ts = np.unique(np.concatenate([np.linspace(0.0, T_FLOW, 61), t_lin]))
        sol = solve_flow(data, W0=W0, t1=T_FLOW, ts=ts, form="factor", rtol=FLOW_RTOL, max_steps=200_000, dense=False)
        M = np.asarray(sol.M)
        if 0 < th < T_FLOW / 2:
            sel = np.isin(ts, t_lin)
            Ml = np.asarray(spectral.linearized(data, ts[sel], W0=W0))
            rel = np.linalg.norm(M[sel] - Ml, axis=(1, 2)) / np.linalg.norm(M[sel], axis=(1, 2))
            lin_errs.append(float(rel.max()))
        err = np.sum((M - Ms) ** 2, axis=(1, 2)) / np.sum(T.lam**2)
        w, U = np.linalg.eigh(M[-1])
        U = U[:, -width:]  # the r eigenvectors of M(t1) (rank <= r neurons)
        best = np.max((U.T @ T.a) ** 2, axis=0)  # best cos^2 of each a_i with an eigenvector of M(t1)
        out["n"].append(int(n))
        out["recovered"].append(int(np.sum(best >= 0.5)))
        out["predicted_recovered"].append(int(np.sum(spectral.half_overlap_sizes(T.lam, d, sigma=SIGMA) <= n)))
        out["test_error_t1"].append(float(err[-1]))
        out["test_error_best"].append(float(err.min()))
        out["t_best"].append(float(ts[int(np.argmin(err))]))
        out["horizon"].append(float(th))
    return out


def run(out_dir, quick: bool = False) -> dict:
    """Sample-size power laws of the spiked He2 model (module docstring).

    Writes `out_dir/sample-scaling.png` (panels (a) cos^2 theta_i vs n with the predicted curves
    and n_half,i; (a') the same against n / n_half,i for every d; (b) the spectral estimator's
    representation error vs n with fits; (c) the trained flow's recovered directions and test
    error vs n) and `out_dir/sample-scaling.json`, and returns the JSON dict. `quick`: d in
    {40, 80}, 9 grid points, one seed, the flow at d = 40 with 8 neurons at 3 sample sizes for
    gamma = 1 (same rules, checks and
    claims, at sizes where finite-d effects are larger).

    JSON keys: ``settings``, ``thresholds`` (per gamma, d: predicted n_i, rho_i, n_half predicted and
    measured), ``spectral`` (per gamma, d: n, cos2, R, R_pred, fitted and predicted exponents),
    ``flow`` (per gamma), ``wall_time_s``, ``checks``, ``claims``, ``chosen_settings``,
    ``sensitivity``.
    """
    rep = Reproduction(NAME, TITLE, _measure, _report, _checks, _claims, _plot)
    return reproduce(rep, out_dir, quick)


def _measure(quick: bool) -> dict:
    """The spectral estimator at every (gamma, d) and the trained flow at d_flow."""
    cfg = _config(quick)
    q = {"quick": quick, "cfg": cfg, "ds": cfg["ds"], "d_flow": cfg["d_flow"], "acc": {}}
    t0 = time.perf_counter()
    q["thresholds"], q["spec"] = _measure_spectral(cfg, q["acc"])
    q["t_spec"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    q["ns_flow"] = n_grid(cfg["d_flow"], cfg["n_alpha"])[:: cfg["flow_every"]]
    q["lin_errs"] = []
    q["flow"] = _measure_flow(cfg, q["ns_flow"], q["thresholds"], q["lin_errs"])
    q["t_flow"] = time.perf_counter() - t0
    return q


def _measure_spectral(cfg: dict, acc: dict):
    """Per (gamma, d): the thresholds record (predicted and measured n_half) and the spectral record."""
    thresholds: dict = {}
    spec: dict = {}
    for gamma in GAMMAS:
        for d in cfg["ds"]:
            r = _spectral_run(gamma, d, cfg["seeds"], cfg["n_alpha"], acc)
            lam, n = r["lam"], r["n"]
            ni = spectral.bbp_thresholds(lam, d, sigma=SIGMA)
            rho = spectral.spike_variance_ratio(lam, sigma=SIGMA)
            nh = spectral.half_overlap_sizes(lam, d, sigma=SIGMA)
            meas = np.array([crossing(n, r["cos2"][:, i]) for i in range(I_SHOW)])
            R_pred = predicted_error(n, lam, d)
            n_lo, n_hi = float(nh[1]), float(n[-1])
            fit = _fit(n, r["R"], n_lo, n_hi)
            fit_pred = _fit(n, R_pred, n_lo, n_hi)
            key = f"gamma={gamma:g},d={d}"
            thresholds[key] = {
                "n_i": ni[:I_SHOW],
                "rho_i": rho[:I_SHOW],
                "n_half_predicted": nh[:I_SHOW],
                "n_half_measured": meas,
                "ratio_measured_over_predicted": meas / nh[:I_SHOW],
                "ratio_measured_over_goe_2n_i": meas / (2 * ni[:I_SHOW]),
            }
            spec[key] = {
                "gamma": gamma,
                "d": d,
                "K": d // 2,
                "k_eig": r["k_eig"],
                "n": n,
                "cos2": r["cos2"],
                "R": r["R"],
                "k_outliers": r["k_out"],
                "R_pred": R_pred,
                "window": [n_lo, n_hi],
                "exponent_measured": None if fit is None else fit.exponent,
                "exponent_finite_size_predicted": None if fit_pred is None else fit_pred.exponent,
                "exponent_asymptotic": 1.0 - 1.0 / (2.0 * gamma) if gamma > 0 else None,
                "fit_is_power_law": None if fit is None else fit.is_power_law,
                "fit_reasons": None if fit is None else list(fit.reasons),
                "lanczos_time_s": r["t_eig"],
            }
    return thresholds, spec


def _measure_flow(cfg: dict, ns_flow, thresholds: dict, lin_errs: list) -> dict:
    """Per flow gamma: the trained flow's record with its fitted exponents."""
    d_flow = cfg["d_flow"]
    flow = {}
    for gamma in cfg["flow_gammas"]:
        f = _flow_run(gamma, d_flow, cfg["width"], ns_flow, lin_errs)
        nh = np.asarray(thresholds[f"gamma={gamma:g},d={d_flow}"]["n_half_predicted"])
        fit = _fit(f["n"], f["test_error_t1"], float(nh[1]), float(f["n"][-1]))
        fit_best = _fit(f["n"], f["test_error_best"], float(nh[1]), float(f["n"][-1]))
        f["exponent_t1"] = None if fit is None else fit.exponent
        f["exponent_best"] = None if fit_best is None else fit_best.exponent
        f["exponent_asymptotic"] = 1.0 - 1.0 / (2.0 * gamma) if gamma > 0 else None
        flow[f"gamma={gamma:g}"] = f
    return flow


def _checks(q: dict) -> list[Check]:
    acc, lin_errs = q["acc"], q["lin_errs"]
    return [
        Check("sample-scaling: Y accumulated over prefixes vs He2Data.Y() (max rel deviation)", acc["prefix"], 1e-10),
        Check("sample-scaling: Lanczos top eigenvalues vs dense eigh (max rel deviation)", acc["lanczos"], 1e-8),
        Check(
            f"sample-scaling: flow vs nqf.linearized up to the horizon t_h(delta={DELTA:g}) (max rel error, "
            f"{len(lin_errs)} runs)",
            max(lin_errs) if lin_errs else float("nan"),
            2 * DELTA,
        ),
    ]


def _claims(q: dict) -> list[Claim]:
    rows = [_threshold_claim(q["thresholds"], gamma, d) for gamma in CLAIM_GAMMAS for d in q["ds"]]
    rows += [_spectral_claim(q["spec"], gamma, q["ds"][-1]) for gamma in GAMMAS]
    rows += [_flow_claim(q, gamma) for gamma in CLAIM_GAMMAS if f"gamma={gamma:g}" in q["flow"]]
    return rows


def _threshold_claim(thresholds: dict, gamma: float, d: int) -> Claim:
    th = thresholds[f"gamma={gamma:g},d={d}"]
    ratio = np.asarray(th["ratio_measured_over_predicted"][:I_CLAIM], float)
    dev = float(np.max(np.abs(np.log2(ratio)))) if np.all(np.isfinite(ratio)) else float("nan")
    return Claim(
        f"sample-scaling gamma={gamma:g} d={d}: thresholds n_half,i within a factor {THRESHOLD_FACTOR:g}",
        "The i-th direction is recovered by the spectral estimator once its spike beats the estimator's "
        "noise, at n_i ~ d^q i^(2 gamma) / Z^2 (a BBP-type threshold), q = 1 for the NQF's Y.",
        "arXiv 2605.14567 (sibling theory); issue 18",
        metric=(
            "max over i = 1..4 of |log2(measured n_half,i / predicted 2 rho_i n_i)|, n_half,i the first n "
            "at which the seed-mean cos^2 theta_i = (v_i^T a_i)^2 crosses 1/2"
        ),
        value=dev,
        criterion=f"<= {np.log2(THRESHOLD_FACTOR):g}",
        holds=dev <= np.log2(THRESHOLD_FACTOR),
        setting="package-chosen",
        why=(
            f"measured / predicted n_half for i = 1..4: {np.round(ratio, 2).tolist()}; against the GOE value "
            f"2 n_i: {np.round(np.asarray(th['ratio_measured_over_goe_2n_i'][:I_CLAIM], float), 2).tolist()}"
        ),
    )


def _spectral_claim(spec: dict, gamma: float, d_big: int) -> Claim:
    sp = spec[f"gamma={gamma:g},d={d_big}"]
    e, e_fs, e_as = sp["exponent_measured"], sp["exponent_finite_size_predicted"], sp["exponent_asymptotic"]
    expected = gamma in CLAIM_GAMMAS
    rel = abs(e - e_as) / abs(e_as) if (e is not None and e_as) else float("nan")
    return Claim(
        f"sample-scaling gamma={gamma:g}: spectral exponent 1 - 1/(2 gamma) at d={d_big}",
        "The representation error falls as MSE(n) ~ (n / d^q)^(-1 + 1/(2 gamma)).",
        "arXiv 2605.14567 (sibling theory); issue 18",
        metric=(
            "|e - (1 - 1/(2 gamma))| / |1 - 1/(2 gamma)|, e the decay exponent of the spectral estimator's "
            "representation error R(n) fitted by nqf.fit_power_law on [n_half,2, n_max]"
        ),
        value=rel,
        criterion=f"<= {EXPONENT_BOUND:g}",
        holds=rel <= EXPONENT_BOUND,
        setting="package-chosen",
        expected=expected,
        why=(
            f"fitted exponent {e if e is None else round(e, 4)}, asymptotic {e_as if e_as is None else round(e_as, 4)}, "
            f"finite-size prediction (same fit on R_pred, K = d/2, predicted overlaps) "
            f"{e_fs if e_fs is None else round(e_fs, 4)}"
            + ("" if expected else "; no decaying power law is predicted for gamma <= 1/2")
        ),
    )


def _flow_claim(q: dict, gamma: float) -> Claim:
    f = q["flow"][f"gamma={gamma:g}"]
    d_flow = q["d_flow"]
    e, e_as = f["exponent_t1"], f["exponent_asymptotic"]
    rel = abs(e - e_as) / abs(e_as) if e is not None else float("nan")
    return Claim(
        f"sample-scaling gamma={gamma:g}: trained flow exponent (open question) at d={d_flow}",
        "Open question (issue 18): does the NQF flow trained from small initialization follow the spectral "
        "estimator's sample-size exponent?",
        "issue 18",
        metric=(
            f"|e - (1 - 1/(2 gamma))| / |1 - 1/(2 gamma)|, e the decay exponent of the flow's test error "
            f"|M(t1) - M*|^2 / |M*|^2 at t1 = {T_FLOW:g} on [n_half,2, n_max]"
        ),
        value=rel,
        criterion=f"<= {EXPONENT_BOUND:g}",
        holds=rel <= EXPONENT_BOUND,
        setting="package-chosen",
        why=(
            f"flow exponent at t1 {e if e is None else round(e, 4)}, at the best saved time "
            f"{f['exponent_best'] if f['exponent_best'] is None else round(f['exponent_best'], 4)}; spectral "
            f"{q['spec'][f'gamma={gamma:g},d={d_flow}']['exponent_measured']}; recovered directions "
            f"{f['recovered']} vs spectral prediction {f['predicted_recovered']}"
        ),
    )


def _report(q: dict) -> dict:
    cfg, d_flow = q["cfg"], q["d_flow"]
    return {
        "settings": {
            "gammas": GAMMAS,
            "ds": cfg["ds"],
            "K": "d / 2",
            "Z": "sum_i lambda_i^2 = 1",
            "sigma": SIGMA,
            "n_grid": "round(d^alpha), alpha equally spaced in [1, 2], n <= 1e5",
            "n_alpha": cfg["n_alpha"],
            "seeds": cfg["seeds"],
            "k_eig": f"min(K - 1, {K_EIG_MAX})",
            "flow": {
                "d": d_flow,
                "width": cfg["width"],
                "eps": EPS,
                "W0": "sqrt(eps) Q, Q orthonormal (d, r)",
                "t1": T_FLOW,
                "solver": "tsit5, factor form",
                "rtol": FLOW_RTOL,
                "n": q["ns_flow"],
            },
        },
        "thresholds": q["thresholds"],
        "spectral": q["spec"],
        "flow": q["flow"],
        "wall_time_s": {"spectral": q["t_spec"], "flow": q["t_flow"], "total": None},
        "chosen_settings": _chosen_settings(cfg),
        "sensitivity": sensitivity([], quick=q["quick"], reason="no paper setting: the settings are the package's"),
    }


def _chosen_settings(cfg: dict) -> dict:
    return {
        "K": chosen(
            "d / 2 directions",
            "not stated (issue 18)",
            "gamma = 0 needs K < d (else M* ~ I); large "
            "enough that the tail sum is a power law over the recovered range",
        ),
        "Z": chosen("sum_i lambda_i^2 = 1", "not stated", "fixes E[y^2] = 2 + sigma^2 for every gamma, d"),
        "sigma": chosen(SIGMA, "not stated", "label noise present but below the signal"),
        "n_grid": chosen(
            "alpha = log n / log d in [1, 2], n <= 1e5",
            "issue 18: a grid of alpha",
            "covers the thresholds from n ~ d to the largest n the issue asks for",
        ),
        "threshold_metric": chosen(
            "n at which cos^2 crosses 1/2 vs 2 rho_i n_i",
            "not stated",
            "a measurable position of a smoothed transition",
        ),
        "fit_window": chosen(
            "[n_half,2, n_max]", "not stated", "after two directions are recovered; fixed before measuring"
        ),
        "flow": chosen(
            f"d = {cfg['d_flow']}, r = {cfg['width']} neurons, eps = {EPS:g}, t1 = {T_FLOW:g}",
            "not stated",
            "every direction the spectral estimator recovers ignites well before t1; cost",
        ),
    }


def _plot(q: dict):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(16, 9), layout="constrained")
    ax = fig.subplots(2, 3)
    styles = {d: (0.35 + 0.65 * (k + 1) / len(q["ds"])) for k, d in enumerate(q["ds"])}
    _panel_overlaps(ax[0, 0], q, styles)
    _panel_collapse(ax[0, 1], q, styles)
    _panel_error(ax[0, 2], q)
    _panel_flow(ax[1, 0], ax[1, 1], q)
    _panel_thresholds(ax[1, 2], q)
    fig.suptitle(
        "Sample-size power laws of the NQF's Y (spiked He2 model, K = d/2, sigma = 0.5)"
        + (" [quick]" if q["quick"] else ""),
        fontsize=11,
    )
    return fig


def _panel_overlaps(a, q: dict, styles: dict) -> None:
    """(a) cos^2 vs n, gamma = 1, every d (alpha by d), predictions at the largest d."""
    spec, ds = q["spec"], q["ds"]
    d_big = ds[-1]
    for d in ds:
        sp = spec[f"gamma=1,d={d}"]
        for i in range(4):
            a.semilogx(
                sp["n"],
                np.asarray(sp["cos2"])[:, i],
                color=COLORS[i],
                alpha=styles[d],
                lw=1.5 if d == d_big else 0.9,
                label=f"i = {i + 1}" if d == d_big else None,
            )
    sp = spec[f"gamma=1,d={d_big}"]
    nn = np.geomspace(sp["n"][0], sp["n"][-1], 300)
    pred = spectral.bbp_overlap(nn, sp_lam(sp), d_big, sigma=SIGMA)
    nh = q["thresholds"][f"gamma=1,d={d_big}"]["n_half_predicted"]
    for i in range(4):
        a.semilogx(nn, pred[:, i], color=COLORS[i], ls="--", lw=1.0)
        a.axvline(nh[i], color=COLORS[i], ls=":", lw=0.8)
    a.set_xlabel("samples n")
    a.set_ylabel(r"$\cos^2\theta_i = (v_i^T a_i)^2$")
    a.set_title(
        rf"(a) $\gamma$ = 1: Y's eigenvectors (d = {', '.join(map(str, ds))}, darker = larger);"
        "\n dashed: $1 - \\rho_i n_i / n$, dotted: $n_{half,i}$",
        fontsize=9,
    )
    a.legend(fontsize=7)


def _panel_collapse(a, q: dict, styles: dict) -> None:
    """(a') collapse: cos^2 vs n / n_half,i."""
    for gamma, mk in ((1.0, "-"), (0.6, "--")):
        for d in q["ds"]:
            sp = q["spec"][f"gamma={gamma:g},d={d}"]
            nh = q["thresholds"][f"gamma={gamma:g},d={d}"]["n_half_predicted"]
            for i in range(I_CLAIM):
                a.semilogx(
                    np.asarray(sp["n"]) / nh[i],
                    np.asarray(sp["cos2"])[:, i],
                    mk,
                    color=COLORS[i],
                    alpha=styles[d],
                    lw=1.0,
                )
    a.axhline(0.5, color="gray", lw=0.6)
    a.axvline(1.0, color="gray", lw=0.6)
    a.axvspan(0.5, 2.0, color="gray", alpha=0.1, label="claim: factor 2")
    a.set_xlabel(r"$n / (2 \rho_i n_i)$")
    a.set_ylabel(r"$\cos^2\theta_i$")
    a.set_title(r"(a') i = 1..4, $\gamma$ = 1 (solid), 0.6 (dashed); darker = larger d", fontsize=9)
    a.legend(fontsize=7)


def _panel_error(a, q: dict) -> None:
    """(b) the spectral estimator's representation error."""
    spec, ds = q["spec"], q["ds"]
    d_big = ds[-1]
    for k, gamma in enumerate(GAMMAS):
        sp = spec[f"gamma={gamma:g},d={d_big}"]
        a.loglog(
            sp["n"],
            sp["R"],
            "o-",
            ms=3,
            color=COLORS[k],
            label=rf"$\gamma$={gamma:g}: e = {_fmt(sp['exponent_measured'])} (pred. {_fmt(sp['exponent_asymptotic'])},"
            rf" finite-size {_fmt(sp['exponent_finite_size_predicted'])})",
        )
        a.loglog(sp["n"], sp["R_pred"], ":", color=COLORS[k], lw=1.0)
        for d in ds[:-1]:
            s2 = spec[f"gamma={gamma:g},d={d}"]
            a.loglog(s2["n"], s2["R"], "-", color=COLORS[k], alpha=0.3, lw=0.8)
    a.set_xlabel("samples n")
    a.set_ylabel(r"representation error $R(n)$")
    a.set_title(f"(b) spectral estimator, d = {d_big} (faint: smaller d; dotted: prediction)", fontsize=9)
    a.legend(fontsize=6.5)


def _panel_flow(a, b, q: dict) -> None:
    """(c) the flow: recovered directions (a) and test error (b)."""
    d_flow = q["d_flow"]
    for k, gamma in enumerate(GAMMAS):
        if f"gamma={gamma:g}" not in q["flow"]:
            continue
        f = q["flow"][f"gamma={gamma:g}"]
        a.semilogx(f["n"], f["recovered"], "o-", color=COLORS[k], ms=3, label=rf"flow, $\gamma$={gamma:g}")
        a.semilogx(f["n"], f["predicted_recovered"], "--", color=COLORS[k], lw=1.0)
        b.loglog(
            f["n"],
            f["test_error_t1"],
            "o-",
            ms=3,
            color=COLORS[k],
            label=rf"$\gamma$={gamma:g}: e = {_fmt(f['exponent_t1'])}",
        )
        b.loglog(f["n"], f["test_error_best"], "x:", ms=3, color=COLORS[k], lw=0.8)
        sp = q["spec"][f"gamma={gamma:g},d={d_flow}"]
        b.loglog(sp["n"], sp["R"], "-", color=COLORS[k], alpha=0.35, lw=0.8)
    a.set_xlabel("samples n")
    a.set_ylabel("recovered directions")
    a.set_title(
        rf"(c) NQF flow at d = {d_flow}, t1 = {T_FLOW:g}: #$\{{i: \max_j (u_j^T a_i)^2 \geq 1/2\}}$"
        "\n dashed: spectral prediction #{i: n >= 2 rho_i n_i}",
        fontsize=9,
    )
    a.legend(fontsize=7)
    b.set_xlabel("samples n")
    b.set_ylabel(r"test error $|M - M^*|_F^2 / |M^*|_F^2$")
    b.set_title(f"(c) flow test error at t1 (o) and best time (x); faint: spectral R(n), d = {d_flow}", fontsize=9)
    b.legend(fontsize=7)


def _panel_thresholds(a, q: dict) -> None:
    """Measured vs predicted n_half."""
    thresholds, ds = q["thresholds"], q["ds"]
    for gamma in CLAIM_GAMMAS:
        for d in ds:
            th = thresholds[f"gamma={gamma:g},d={d}"]
            a.loglog(
                th["n_half_predicted"],
                th["n_half_measured"],
                "o" if gamma == 1.0 else "s",
                color=COLORS[ds.index(d)],
                alpha=0.8,
                label=rf"$\gamma$={gamma:g}, d={d}",
            )
    lo = min(min(thresholds[k]["n_half_predicted"]) for k in thresholds) / 2
    hi = max(max(thresholds[k]["n_half_predicted"]) for k in thresholds) * 2
    x = np.geomspace(lo, hi, 10)
    a.loglog(x, x, "k-", lw=0.8)
    a.fill_between(x, x / 2, 2 * x, color="gray", alpha=0.15)
    a.set_xlabel(r"predicted $n_{half,i} = 2 \rho_i n_i$")
    a.set_ylabel(r"measured $n_{half,i}$")
    a.set_title("thresholds, i = 1..6 (band: factor 2)", fontsize=9)
    a.legend(fontsize=6.5)


def sp_lam(sp) -> np.ndarray:
    """lambda_i of a spectral record (recomputed from gamma, d: Z normalised, K = d/2)."""
    K = sp["K"]
    s = np.arange(1, K + 1, dtype=float) ** -sp["gamma"]
    return s / np.sqrt(np.sum(s**2))


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"
