"""The t -> inf limit of the MSE gradient flow from a given initial condition (`asymptote`).

Gradient flow (Eq. E8) from small initialization learns mode after mode and settles on a state
M* that depends on the data and, where the minimizer of the loss is not unique, on the initial
condition. `asymptote` returns that state without choosing a horizon:

- **commuting data** (`method="glv"`, exact for any initial condition): the mode strengths
  follow the GLV flow (Eq. E13); its limit z* is the minimizer of L over z >= 0 on the live
  modes (z_k(0) > 0), and where that minimizer is not unique, the one the flow selects (the
  mirror-flow form below). The off-diagonals are slaved (Eq. E12, Proposition 7), so
  M* = P (S P^T M0 P S) P^T with S = diag(sqrt(z*/z(0))).
- **feed-forward data** (`FeedForwardData`, `method="feedforward"`, to O(init scale)): the
  minimum-norm least-squares solution of the linear model y = <E, C_mu>, E = Z1 Z2^T, within the
  rank the width allows, with balanced factors.
- **anything else** (`method="flow"`): the flow itself (`solve_flow`) continued over doubling
  horizons until the state is certified: stationary, settled, and without an unstable direction
  (a plateau between two ignitions is stationary too; see `asymptote`).

Times are gradient-flow times t = eta * (GD steps) throughout.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from .._core._checks import any_traced, keyword_options
from .._core._config import require_x64
from .._core._errors import AssumptionError
from .._core.io import Saveable
from .._core.memory import check as check_memory
from ..data._model import NQFModel, as_model
from ..data._operators import AbstractCommutingData, AbstractData, BlockData, DiagonalData, FeedForwardData
from ..dynamics._glv import glv_equilibrium
from ..solvers._solve import MaxStepsReached, _initial_state, _initial_state_mu, solve_flow

__all__ = ["Asymptote", "asymptote"]  # of_flow, check_no_weight_decay: for measure_ignition_times

METHODS = ("auto", "glv", "feedforward", "flow")
_EPS = np.finfo(float).eps


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["eigenvalues", "loss", "M", "z", "mu", "outputs", "t", "accuracy"],
    meta_fields=["method"],
)
@dataclasses.dataclass(frozen=True, eq=False)
class Asymptote(Saveable):
    """Result of `asymptote`: the limit t -> inf of the MSE gradient flow from one initial
    condition. A plain frozen dataclass (it pickles and saves with `nqf.save`) registered as a
    JAX pytree (its arrays are the leaves, `method` is static), like `nqf.MapTrajectory`.

    **Attributes:**

    - `eigenvalues`: the eigenvalues of M*, shape (p,), in decreasing order (mode k of
      `measure_ignition_times(..., quantity="eigenvalues")` is the k-th largest).
    - `loss`: the asymptotic training loss (1/m) sum_mu (f_mu - y_mu)^2 (a float; a 0-d array
      under tracing).
    - `M`: M*, shape (p, p); None when p exceeds `asymptote`'s `max_dense`.
    - `z`: the mode strengths z*_k = (P^T M* P)_kk of commuting data, shape (p,), indexed like the
      data's modes; None for other data.
    - `mu`: mu* = W* 1, shape (p,), for a model with g or B (the ``"M-mu"`` flow); else None.
    - `outputs`: the model outputs f_mu at M* (and mu*), shape (m,), f0 included.
    - `t`: for ``method="flow"`` the gradient-flow time at which the state was certified; None
      for the closed forms.
    - `accuracy`: the stated relative accuracy: for ``"feedforward"`` the init ratio
      |M0|_2 / (smallest nonzero eigenvalue of M*) (the closed form holds to this order); for
      ``"glv"`` 0 (exact to rounding) or, for the mirror-flow solve, its relative residual; for
      ``"flow"`` the largest of the certificate's stationarity and settling residuals.
    - `method`: ``"glv"``, ``"feedforward"`` or ``"flow"``: how M* was obtained.
    """

    eigenvalues: Any
    loss: Any
    M: Any
    z: Any
    mu: Any
    outputs: Any
    t: Any
    accuracy: Any
    method: str


_OPTIONS = dict(
    tol=1e-7, curvature_tol=1e-8, init_tol=1e-2, max_segments=40, max_time=None, max_dense=4096, solve_options=None
)  # the keyword options of `asymptote`, in the order it reads them


def _check_options(method, init_tol, max_dense) -> None:
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}; found {method!r}.")
    if not (isinstance(init_tol, (int, float)) and init_tol > 0 and np.isfinite(init_tol)):
        raise ValueError(f"`init_tol` must be a finite number > 0; found {init_tol!r}.")
    if isinstance(max_dense, bool) or not isinstance(max_dense, (int, np.integer)) or max_dense < 0:
        raise ValueError(f"`max_dense` must be an integer >= 0; found {max_dense!r}.")


def _check_method_data(method, data) -> None:
    """`ValueError` for a forced closed form on data it does not apply to."""
    if method == "glv" and not isinstance(data, AbstractCommutingData):
        raise ValueError(
            f"method='glv' needs commuting data (CommutingData, DiagonalData, BlockData); found {type(data).__name__}."
        )
    if method == "feedforward" and not isinstance(data, FeedForwardData):
        raise ValueError(f"method='feedforward' needs FeedForwardData; found {type(data).__name__}.")


def _general(mdl, method, init, flow, max_dense) -> Asymptote:
    """`asymptote` of a model with g or B: the certified "M-mu" flow (Eq. E10) from `init`
    (M0, W0, z0, mu0, d), with the arguments `flow` of `_flow_settings`."""
    M0, W0, z0, mu0, d = init
    if z0 is not None:
        raise ValueError(
            "`z0` is the initial state of the GLV form; a model with g or B needs `W0`, or `M0` with `mu0` and `d`."
        )
    if method not in ("auto", "flow"):
        raise ValueError(
            f"method={method!r} needs a plain model (no g, B); a model with g or B has only "
            "method='flow' (the closed forms assume f = f0 + Tr[M A])."
        )
    (M_init, mu_init), _, _, width = _initial_state_mu(mdl.data, M0, W0, mu0, d)
    state = (np.asarray(M_init), np.asarray(mu_init))
    return _flow(mdl, "M-mu", "M-mu", state, width, _flow_settings(*flow), max_dense)


def asymptote(
    model: NQFModel | AbstractData,
    *,
    W0: Float[ArrayLike, "p d"] | None = None,
    M0: Float[ArrayLike, "p p"] | None = None,
    z0: Float[ArrayLike, " p"] | None = None,
    mu0: Float[ArrayLike, " p"] | None = None,
    d: int | None = None,
    method: str = "auto",
    **options,
) -> Asymptote:
    """The limit t -> inf of the MSE gradient flow (Eq. E8; Eq. E10 for a model with g, B) from
    one initial condition, computed without a horizon.

    **Methods** (`method="auto"` picks the first that applies; the others force one and raise
    if it does not apply):

    1. ``"glv"``: commuting data (`CommutingData`, `DiagonalData`, `BlockData`), a plain model
       (f0 allowed). Exact for any initial condition. The GLV flow (Eq. E13) is
       z_k(t) = z_k(0) exp(lambda_k^T nu(t)), nu' = (8/m)(y - Lambda z): a gradient flow of the
       convex Psi(nu) = sum_k z_k(0) e^{lambda_k^T nu} - y^T nu. Its limit z* minimizes
       L(z) = (1/m)|Lambda z - y|^2 over z >= 0 with z_k = 0 on the dead modes (z_k(0) = 0).
       The optimal outputs b* = Lambda z* are unique. If the minimizer is unique too (the
       columns of Lambda on the free modes F = {k live: grad_k L(z*) = 0} are linearly
       independent; always for `DiagonalData`), z* is `glv_equilibrium` of the live modes.
       Otherwise (e.g. m < p) the flow selects one: the GLV flow is a mirror flow with the
       entropy potential, so D_KL(zbar || z(t)) never increases for any minimizer zbar; hence z*
       is positive wherever some minimizer is, and z*_k = z_k(0) e^{lambda_k^T u} on F, where u
       minimizes sum_{k in F} z_k(0) e^{lambda_k^T u} - b*^T u (the KL projection of z(0) onto
       the minimizers; solved by damped Newton, certified by |Lambda_F z - b*| <= 1e-10 |b*|;
       if a mode of F is 0 in every minimizer, u does not exist, the solve fails and ``"auto"``
       continues with the flow). `glv_equilibrium` (NNLS) returns another minimizer then. M* = P S (P^T M0 P) S P^T, S = diag(sqrt(z*/z(0)))
       (off-diagonal slaving, Eq. E12), so M*'s eigenvalues are the sorted z* when P^T M0 P is
       diagonal (M0 = eps I, or `z0`) and differ from them otherwise (a factor W0 of width d
       keeps rank M* <= d).
    2. ``"feedforward"``: `FeedForwardData` (A = 1/2 [[0, C], [C^T, 0]], f = <E, C>, E = Z1 Z2^T,
       W = [front; Z1; Z2; back]), a plain model (f0 allowed). The flow is the two-layer linear
       network Z1' = -G Z2, Z2' = -G^T Z1, G = (2/m) sum_mu Delta_mu C_mu. G's columns lie in
       S1 = span{a_mu,r} and its rows in S2 = span{b_mu,r}, so the parts of Z1, Z2 outside S1,
       S2 never move (they stay O(|W0|)), the parts inside follow the same network restricted
       to S1 (x) S2 (whose gradient flow reaches a global minimizer of the rank-limited least
       squares from a generic init), and Z1^T Z1 - Z2^T Z2 = O(|W0|^2) is conserved. If the
       least-squares problem y_mu = <E, C_mu> has a unique solution in S1 (x) S2 (its design,
       the (m, k q) matrix of vec C_mu, has rank dim S1 * dim S2), that solution is the
       minimum-norm least-squares E_ls (numpy's `lstsq`, rcond = max(m, k q) eps_mach:
       smaller singular values count as 0) and E -> E_ls + O(|W0|). The width bounds the rank:
       rank E(t) <= r0 = rank of the [Z1; Z2] rows of W0 (or of that block of M0). If
       rank E_ls > r0 the limit is the best rank-r0 least-squares E, known in closed form when
       the design's Gram matrix is a Kronecker product S_a (x) S_b (multi-output regression
       C = x e_j^T, checked to 1e-10): E = S_a^{+1/2} [S_a^{1/2} E_ls S_b^{1/2}]_{r0} S_b^{+1/2}
       ([.]_r: truncated SVD). With E = U diag(s) V^T and balanced factors Z1 = U S^{1/2},
       Z2 = V S^{1/2}, M* = [[U S U^T, E], [E^T, V S V^T]] on the [Z1; Z2] block (0 on the
       front/back rows, which stay O(|W0|^2)): its nonzero eigenvalues are 2 s_i (eigenvectors
       [u_i; v_i] / sqrt 2). The loss is the least-squares minimum exactly; M*'s eigenvalues hold
       to O(|M0|_2) absolutely (`accuracy` gives it relative to the smallest), so the
       initialization must be small: |M0|_2 <= `init_tol` x that eigenvalue, and generic (its
       [Z1; Z2] block must overlap the growing directions; exactly degenerate ones, e.g. Z1 = Z2 = 0,
       never move).
    3. ``"flow"``: any data or `NQFModel`. `solve_flow` from the initial condition over segments
       of doubling length (4/kappa, then the time so far; kappa = |H(M0)|_2, the largest growth
       rate at the start), restarting from the last state, until the state passes all of:
       stationarity |M'|_F / (kappa max(|M|_F, |M0|_F)) <= `tol` (and |mu'| / (kappa
       sqrt(d |M|_2)) for a model with g, B); settling: over the last segment the eigenvalues of
       M changed by at most `tol` max(|eigenvalues|, |M0|_F) (2-norm) and the loss by at most
       `tol` times the initial loss; and no unstable direction:
       lambda_min(U^T H U) >= -`curvature_tol` kappa, H = H(M*) (Eq. E8) and U the top r0
       eigenvectors of M* (or of the centered M - mu mu^T / d), r0 = rank of the initial
       condition (the directions the flow can populate; M(t) = Q(t) M0 Q(t)^T keeps the rank);
       for g, B also lambda_min(d Hess_mu l) >= -`curvature_tol` kappa with
       l(mu) = L(C + mu mu^T / d, mu). A plateau between ignitions is stationary but has
       H < 0 on a small live direction, which will grow: it is never returned. Growth rates
       below `curvature_tol` kappa count as 0 (such a mode would need a time of order
       ln(1/eps) / (curvature_tol kappa) to ignite). A start with H(M0) = 0 and mu' = 0 never
       moves and is returned at t = 0.

    **Arguments:**

    - `model`: a data set or an `NQFModel` (with g, B only ``"flow"`` applies).
    - `W0` (p, d), `M0` (p, p), or for commuting data `z0` (p,): the initial condition, exactly
      one, as `solve_flow` takes it; for a model with g or B: `W0`, or `M0` with `mu0` (p,) and
      the width `d`.
    - `method`: ``"auto"`` (default), ``"glv"``, ``"feedforward"`` or ``"flow"``.
    - `tol`, `curvature_tol`: the ``"flow"`` certificate (above); `init_tol`: the largest
      init ratio accepted by ``"feedforward"`` (``"auto"`` continues with the flow beyond it).
    - `max_segments`, `max_time`: the ``"flow"`` budget (number of solves, total gradient-flow
      time; None: no time limit); `solve_options`: keyword arguments of `solve_flow` for the
      segments (e.g. ``{"stiff": True}``, ``{"max_steps": 10**6}``).
    - `max_dense`: M* (p, p) is formed only for p <= `max_dense` (else `M` is None).
    - Defaults: `tol` 1e-7, `curvature_tol` 1e-8, `init_tol` 1e-2, `max_segments` 40, `max_time`
      None, `max_dense` 4096, `solve_options` None; these keywords are read from ``**options``
      (an unknown one is a `TypeError`).

    **Returns:** an `Asymptote`.

    **Under jit / vmap:** `DiagonalData` with ``method="glv"`` (or ``"auto"``) traces (closed
    form); every other case runs on concrete input and raises `TypeError` under tracing.

    **Raises:** `ValueError` for a bad initial condition (as `solve_flow`), an unknown `method`,
    `mu0`/`d` for a model without g, B, a method that needs other data; `nqf.AssumptionError`
    when a forced closed form's assumption fails (which one, with its residual);
    `RuntimeError` when ``"flow"`` cannot certify a state within its budget (the message names
    the failed condition and its value; the uncertified last state is the exception's `last`).
    """
    tol, curvature_tol, init_tol, max_segments, max_time, max_dense, solve_options = keyword_options(
        "asymptote", options, **_OPTIONS
    )
    require_x64()
    _check_options(method, init_tol, max_dense)
    mdl = as_model(model)
    _refuse_traced(mdl, method, (model, W0, M0, z0, mu0))
    flow = (tol, curvature_tol, max_segments, max_time, solve_options)  # checked by _flow_settings where used
    if mdl.has_mean_field:
        return _general(mdl, method, (M0, W0, z0, mu0, d), flow, max_dense)
    if mu0 is not None or d is not None:
        raise ValueError(
            "`mu0` and `d` belong to a model with g or B (the 'M-mu' flow, Eq. E10); without them the "
            "limit of M does not depend on mu, so drop them (the width of a factor W0 is its shape)."
        )
    return _plain(mdl, method, (M0, W0, z0), flow, init_tol, max_dense)


def _refuse_traced(mdl, method: str, inputs) -> None:
    """`TypeError` for traced `inputs` (the model, W0, M0, z0, mu0 of `asymptote`) unless the limit
    is the closed form that traces (`DiagonalData`, no g or B, ``method`` "auto" or "glv")."""
    closed = isinstance(mdl.data, DiagonalData) and not mdl.has_mean_field and method in ("auto", "glv")
    if any_traced(*inputs) and not closed:
        raise TypeError(
            "`asymptote` runs on concrete input (numpy least squares, eigen-decompositions and flow "
            "solves on the host) except for DiagonalData with method='glv' (a closed form); call it "
            "outside jit / vmap and pass the result in."
        )


def _plain(mdl, method: str, initial, flow, init_tol: float, max_dense: int):
    """`asymptote` of a model without g, B (the plain flow of M): the closed form `method` allows
    (GLV for commuting data, least squares for feed-forward data), else the certified flow.
    `initial` = (M0, W0, z0); `flow` the flow settings of `_flow_settings`."""
    M0, W0, z0 = initial
    data = mdl.data
    plain = data if mdl.f0 is None else eqx.tree_at(lambda x: x.y, data, data.y - mdl.f0)
    form, kind, x0, _ = _initial_state(plain, M0, W0, "auto", z0)
    f0 = mdl.f0
    _check_method_data(method, data)
    settings = _flow_settings(*flow)
    if isinstance(data, AbstractCommutingData) and method in ("auto", "glv"):
        out = _glv(plain, kind, x0, f0, max_dense, strict=method == "glv")
        if out is not None:
            return out
    elif isinstance(data, FeedForwardData) and method in ("auto", "feedforward"):
        try:
            return _feedforward(plain, kind, x0, f0, init_tol, max_dense)
        except AssumptionError:
            if method == "feedforward":
                raise
    return _flow(NQFModel(plain), form, kind, x0, None, settings, max_dense, f0=f0)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _host(x):
    return x if x is None or any_traced(x) else np.asarray(x)


def _descending(ev):
    return -jnp.sort(-ev) if any_traced(ev) else -np.sort(-np.asarray(ev))


def _eigvals_desc(M):
    return _descending(jnp.linalg.eigvalsh(M) if any_traced(M) else np.linalg.eigvalsh(np.asarray(M)))


def _loss_and_outputs(traces, y, f0):
    """(loss, outputs) from the traces Tr[M A_mu] against the shifted labels y = y_data - f0."""
    f = traces if f0 is None else traces + f0
    loss = jnp.mean((traces - y) ** 2)
    return (loss, f) if any_traced(loss) else (float(loss), np.asarray(f))


# --------------------------------------------------------------------------------------------
# commuting data: the GLV limit
# --------------------------------------------------------------------------------------------


def _mode_strengths(data: AbstractCommutingData, kind: str, x0):
    if kind == "z":
        return jnp.asarray(x0)
    return data.z_factor(jnp.asarray(x0)) if kind == "W" else data.z(jnp.asarray(x0))


def _masked(data: AbstractCommutingData, live):
    """The data with the dead modes' eigenvalues set to 0 (they never move: z_k stays 0)."""
    if isinstance(data, DiagonalData):
        return eqx.tree_at(lambda x: x.lam, data, data.lam * live)
    if isinstance(data, BlockData):
        return eqx.tree_at(lambda x: x.blocks, data, data.blocks * live.reshape(data.blocks.shape))
    return eqx.tree_at(lambda x: x.Lambda, data, data.Lambda * live)


def _glv(data: AbstractCommutingData, kind: str, x0, f0, max_dense: int, *, strict: bool):
    """The GLV limit (method 1 of `asymptote`), or None if the mirror-flow solve fails and not
    `strict` (then the caller continues with the flow)."""
    z0 = _mode_strengths(data, kind, x0)
    live = z0 > 0
    z_eq = glv_equilibrium(_masked(data, live))
    accuracy = 0.0
    if not isinstance(data, DiagonalData):  # one feature per sample: the minimizer is unique
        z_eq, accuracy = _flow_selected_minimizer(data, np.asarray(z0), np.asarray(z_eq), strict)
        if z_eq is None:
            return None
    z_star = jnp.where(live, z_eq, 0.0) if any_traced(z_eq, z0) else np.where(np.asarray(live), z_eq, 0.0)
    loss, f = _loss_and_outputs(data.outputs_z(jnp.asarray(z_star)), data.y, f0)
    M, eigenvalues = _glv_state(data, kind, x0, z0, z_star, max_dense)
    return Asymptote(
        eigenvalues=eigenvalues,
        loss=loss,
        M=M,
        z=_host(z_star),
        mu=None,
        outputs=f,
        t=None,
        accuracy=accuracy,
        method="glv",
    )


def _glv_state(data, kind, x0, z0, z_star, max_dense):
    """(M* or None, its eigenvalues) from the slaving M* = P S M~0 S P^T, S = sqrt(z*/z0)."""
    xp = jnp if any_traced(x0, z_star) else np
    p = data.p
    P = None if data.P is None else xp.asarray(data.P)
    if kind == "z":  # M~0 diagonal: M* = P diag(z*) P^T
        eigenvalues = _descending(z_star)
        if p > max_dense:
            return None, eigenvalues
        Mt = xp.diag(z_star)
        return (Mt if P is None else P @ Mt @ P.T), eigenvalues
    safe = xp.where(z0 > 0, z0, 1.0)
    s = xp.sqrt(xp.where(z0 > 0, xp.asarray(z_star) / safe, 0.0))
    x0 = xp.asarray(x0)
    if kind == "W":  # W~* = S P^T W0: eigenvalues from its singular values, any p
        Wt = s[:, None] * (x0 if P is None else P.T @ x0)
        sv = xp.linalg.svd(Wt, compute_uv=False)
        eigenvalues = xp.concatenate([sv**2, xp.zeros(max(p - sv.shape[0], 0))])[:p]
        if p > max_dense:
            return None, _descending(eigenvalues)
        Mt = Wt @ Wt.T
    else:
        Mt = s[:, None] * (x0 if P is None else P.T @ x0 @ P) * s[None, :]
        eigenvalues = _eigvals_desc(Mt)
        if p > max_dense:
            return None, eigenvalues
    M = Mt if P is None else P @ Mt @ P.T
    return M, _descending(eigenvalues)


def _flow_selected_minimizer(data, z0, z_eq, strict: bool):
    """The minimizer of L over z >= 0 (dead modes at 0) that the GLV flow from z0 selects, and
    the relative residual of its solve. `z_eq` is one minimizer (NNLS); it is the answer when the
    minimizer is unique (the free modes' columns of Lambda are linearly independent). Otherwise
    the mirror-flow form (`asymptote`, method 1): z_k = z0_k exp(lambda_k^T u) on the free
    modes. Returns (None, residual) if that solve fails and not `strict`."""
    check_memory(
        8.0 * data.m * data.p,
        f"The GLV limit's dense Lambda (m, p) = ({data.m}, {data.p})",
        "use DiagonalData, or method='flow'.",
    )
    Lam = np.asarray(data.Lambda)
    y = np.asarray(data.y)
    m = Lam.shape[0]
    b = Lam @ z_eq  # the optimal outputs (unique)
    grad = 2.0 / m * Lam.T @ (b - y)
    scale = 2.0 / m * np.sqrt(np.einsum("mk,mk->k", Lam, Lam)) * (np.linalg.norm(y) + np.linalg.norm(b))
    free = (z0 > 0) & (grad <= 1e-9 * np.maximum(scale, np.finfo(float).tiny))
    LF = Lam[:, free]
    if LF.shape[1] == 0:
        return z_eq, 0.0
    sv = np.linalg.svd(LF, compute_uv=False)
    if LF.shape[1] <= m and sv[-1] > max(LF.shape) * _EPS * sv[0]:
        return z_eq, 0.0  # unique minimizer
    z_free, res = _bregman_projection(LF, z0[free], b, z_eq[free])
    tol = 1e-10
    if not res <= tol:
        if strict:
            raise AssumptionError(
                "GLV limit",
                "the minimizer the flow selects is interior to the free modes (z_k(0) e^{lambda_k^T u} "
                "with Lambda_F z = b* solvable)",
                res,
                tol,
                detail="The minimizer of L over z >= 0 is not unique and the selected one lies on the boundary; "
                "use method='flow' (or 'auto').",
            )
        return None, res
    z = np.zeros_like(z0)
    z[free] = z_free
    return z, res


def _bregman_projection(LF, z0, b, z_guess, max_iter: int = 500):
    """Minimize Phi(u) = sum_k z0_k exp(lambda_k^T u) - b^T u (u in R^m, columns lambda_k of LF)
    by damped Newton (Armijo backtracking), started from the u that reproduces the positive
    entries of `z_guess` in least squares. Returns (z = z0 exp(LF^T u), |LF z - b| / |b|)."""
    pos = z_guess > 0
    u = np.zeros(LF.shape[0])
    if pos.any():
        u = np.linalg.lstsq(LF[:, pos].T, np.log(z_guess[pos] / z0[pos]), rcond=None)[0]
    logz0 = np.log(z0)

    def phi(u):
        e = LF.T @ u + logz0
        return np.sum(np.exp(np.minimum(e, 700.0))) - b @ u if e.max() < 700 else np.inf

    bnorm = max(np.linalg.norm(b), np.finfo(float).tiny)
    res = np.inf
    for _ in range(max_iter):
        z = np.exp(LF.T @ u + logz0)
        g = LF @ z - b
        res = np.linalg.norm(g) / bnorm
        if res <= 1e-13:
            break
        Hm = (LF * z) @ LF.T
        step = -np.linalg.lstsq(Hm, g, rcond=None)[0]
        f0, slope, a = phi(u), g @ step, 1.0
        if not slope < 0:
            break
        while a > 1e-12 and not phi(u + a * step) <= f0 + 1e-4 * a * slope:
            a *= 0.5
        if a <= 1e-12:
            break
        u = u + a * step
    z = np.exp(LF.T @ u + logz0)
    return z, np.linalg.norm(LF @ z - b) / bnorm


# --------------------------------------------------------------------------------------------
# feed-forward data: the least-squares limit of the two-layer linear network
# --------------------------------------------------------------------------------------------

_KRON_TOL = 1e-10


def _feedforward(data: FeedForwardData, kind: str, x0, f0, init_tol: float, max_dense: int) -> Asymptote:
    m, k, q, p = data.m, data.k, data.q, data.p
    a = np.asarray(data.a_rows)  # (m, r, k)
    b = np.asarray(data.b_rows)  # (m, r, q)
    y = np.asarray(data.y)
    check_memory(
        8.0 * m * k * q * 2,
        f"The feed-forward asymptote's design matrix (m, k q) = ({m}, {k * q})",
        "use method='flow'.",
    )
    design = np.einsum("mrk,mrq->mkq", a, b).reshape(m, k * q)  # rows vec(C_mu), row-major like E.ravel()
    coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    s1 = np.linalg.matrix_rank(a.reshape(-1, k))
    s2 = np.linalg.matrix_rank(b.reshape(-1, q))
    if rank < s1 * s2:
        raise AssumptionError(
            "Feed-forward asymptote",
            f"a unique least-squares E in span(a) (x) span(b) (design rank {s1 * s2})",
            (s1 * s2 - rank) / (s1 * s2),
            0.0,
            where=f"design rank {rank} of {s1 * s2}",
            detail="The limit then depends on the flow's implicit bias (e.g. matrix completion); use method='flow'.",
        )
    E = coef.reshape(k, q)
    block = slice(data.front, data.front + k + q)
    x0 = np.asarray(x0)
    zblock = x0[block] if kind == "W" else x0[block, block]
    r0 = int(np.linalg.matrix_rank(zblock, hermitian=kind != "W"))
    if r0 == 0:
        raise ValueError(
            "The [Z1; Z2] block of the initial condition is 0: the flow never moves (Z1' = -G Z2, "
            "Z2' = -G^T Z1), so M stays at M0."
        )
    E = _rank_limited(design, E, r0)
    U, s, Vt = np.linalg.svd(E, full_matrices=False)
    keep = s > max(k, q) * _EPS * max(s[0] if s.size else 0.0, np.finfo(float).tiny)
    U, s, V = U[:, keep], s[keep], Vt[keep].T
    m0 = float(np.linalg.norm(x0, 2) ** 2 if kind == "W" else np.linalg.norm(x0, 2))
    ratio = m0 / (2 * s[-1]) if s.size else 0.0  # E_ls = 0: M* = 0 (to O(|M0|) absolutely)
    if not ratio <= init_tol:
        raise AssumptionError(
            "Feed-forward asymptote",
            "small initialization |M0|_2 <= init_tol x (smallest nonzero eigenvalue of M*)",
            ratio,
            init_tol,
            detail="The closed form holds to O(|M0|); use method='flow' (or 'auto') for this init.",
        )
    F = np.zeros((p, s.size))  # the balanced factor [0; U S^1/2; V S^1/2; 0] of M*
    F[data.front : data.front + k] = U * np.sqrt(s)
    F[data.front + k : data.front + k + q] = V * np.sqrt(s)
    loss, f = _loss_and_outputs(data.traces_factor(jnp.asarray(F)), data.y, f0)
    eigenvalues = np.concatenate([2 * s, np.zeros(p - s.size)])
    return Asymptote(
        eigenvalues=eigenvalues,
        loss=loss,
        M=F @ F.T if p <= max_dense else None,
        z=None,
        mu=None,
        outputs=f,
        t=None,
        accuracy=ratio,
        method="feedforward",
    )


def _rank_limited(design, E, r0: int):
    """E, or if rank E > r0 the best rank-r0 least-squares E (Kronecker-structured Gram only)."""
    k, q = E.shape
    sv = np.linalg.svd(E, compute_uv=False)
    rank = int(np.sum(sv > max(k, q) * _EPS * max(sv[0], np.finfo(float).tiny)))
    if rank <= r0:
        return E
    G = design.T @ design
    R = G.reshape(k, q, k, q).transpose(0, 2, 1, 3).reshape(k * k, q * q)
    u, w, vt = np.linalg.svd(R, full_matrices=False)
    kron = float(np.sqrt(np.sum(w[1:] ** 2)) / w[0])
    if kron > _KRON_TOL:
        raise AssumptionError(
            "Feed-forward asymptote",
            f"a Kronecker-structured least-squares Gram S_a (x) S_b (needed when the "
            f"width limits the rank: rank E_ls = {rank} > {r0})",
            kron,
            _KRON_TOL,
            detail="The best rank-limited E has no closed form here; use method='flow'.",
        )
    Sa = (u[:, 0] * w[0]).reshape(k, k)
    Sb = vt[0].reshape(q, q)
    if np.trace(Sa) < 0:
        Sa, Sb = -Sa, -Sb
    half, phalf = _psd_sqrt(Sa)
    bhalf, bphalf = _psd_sqrt(Sb)
    Ut, st, Vtt = np.linalg.svd(half @ E @ bhalf)
    if st[r0 - 1] - st[r0] <= 1e-10 * st[0]:
        raise AssumptionError(
            "Feed-forward asymptote",
            "a gap between the r0-th and (r0+1)-th whitened singular values (a unique best rank-r0 E)",
            1.0 - (st[r0 - 1] - st[r0]) / st[0],
            1.0 - 1e-10,
            where=f"r0 = {r0}",
            detail="Use method='flow'.",
        )
    return phalf @ (Ut[:, :r0] * st[:r0]) @ Vtt[:r0] @ bphalf


def _psd_sqrt(S):
    """S^{1/2} and its pseudo-inverse (eigenvalues below max(n) eps max count as 0)."""
    w, V = np.linalg.eigh(0.5 * (S + S.T))
    pos = w > S.shape[0] * _EPS * max(w.max(initial=0.0), np.finfo(float).tiny)
    r = np.where(pos, np.sqrt(np.where(pos, w, 1.0)), 0.0)
    return (V * r) @ V.T, (V * np.where(pos, 1.0 / np.where(pos, r, 1.0), 0.0)) @ V.T


# --------------------------------------------------------------------------------------------
# any data: the flow, continued until certified
# --------------------------------------------------------------------------------------------


def _flow_settings(tol, curvature_tol, max_segments, max_time, solve_options) -> dict:
    for name, v in (("tol", tol), ("curvature_tol", curvature_tol)):
        if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
            raise ValueError(f"`{name}` must be a finite number > 0; found {v!r}.")
    if isinstance(max_segments, bool) or not isinstance(max_segments, (int, np.integer)) or max_segments < 2:
        raise ValueError(f"`max_segments` must be an integer >= 2; found {max_segments!r}.")
    if max_time is not None and not (np.isfinite(max_time) and max_time > 0):
        raise ValueError(f"`max_time` must be None or a finite time > 0; found {max_time!r}.")
    opts = dict(solve_options or {})
    taken = {"M0", "W0", "z0", "mu0", "d", "t1", "t0", "ts", "dense", "save", "stop", "form"} & set(opts)
    if taken:
        raise ValueError(f"`solve_options` must not set {sorted(taken)} (asymptote chooses them).")
    return dict(
        tol=float(tol),
        curvature_tol=float(curvature_tol),
        max_segments=int(max_segments),
        max_time=max_time,
        options=opts,
    )


def _init_kwargs(kind: str, x, d):
    if kind == "M-mu":
        return {"M0": x[0], "mu0": x[1], "d": d}
    return {{"M": "M0", "W": "W0", "z": "z0"}[kind]: x}


def _next_state(sol, kind: str, form: str):
    """The state at the end of a segment, as an initial condition of the next one."""
    if form == "M-mu":
        return "M-mu", (np.asarray(sol.M[-1]), np.asarray(sol.mu[-1]))
    if form == "glv":
        return "z", np.asarray(sol.z[-1])
    if form == "factor":
        return "W", np.asarray(sol.W[-1])
    return "M", np.asarray(sol.M[-1])


def _flow(model: NQFModel, form: str, kind: str, x0, width, st: dict, max_dense: int, f0=None) -> Asymptote:
    """Method 3 of `asymptote`: doubling segments of `solve_flow` until the certificate holds.
    `model` is what is solved (a plain model: its data with labels y - f0; `f0` is added to the
    reported outputs only)."""
    target = model if model.has_mean_field else model.data
    cert = _Certificate(model, form, kind, x0, width, f0)
    if not cert.kappa > 0:  # H(M0) = 0: M' = 0 at the start, so the flow stays there (if mu' = 0 too)
        now = dict(cert.evaluate(kind, x0, 0.0), settle=0.0)
        if now["stationarity"] == 0.0:
            return cert.result(now, max_dense)
        raise ValueError(
            "asymptote (method='flow'): H(M0) = 0 but the state moves (mu' != 0); no rate scale "
            "kappa = |H(M0)|_2 for the certificate. Start from another state."
        )
    kind_now, x = kind, x0
    t, seg = 0.0, 4.0 / cert.kappa
    prev, last = None, None
    for _ in range(st["max_segments"]):
        if st["max_time"] is not None:
            seg = min(seg, st["max_time"] - t)
            if seg <= 0:
                break
        try:
            sol = solve_flow(
                target,
                **_init_kwargs(kind_now, x, width),
                t1=seg,
                ts=np.array([seg]),
                dense=False,
                form=form,
                **st["options"],
            )
        except MaxStepsReached as err:
            raise _not_certified(
                last,
                f"the solver used up max_steps in the segment starting at t = {t:.6g} "
                f"({err}); pass solve_options={{'max_steps': ...}} or {{'stiff': True}}",
            ) from err
        t += seg
        kind_now, x = _next_state(sol, kind_now, form)
        now = cert.evaluate(kind_now, x, t)
        now["settle"] = np.inf if prev is None else cert.settle(now, prev)
        failed = _failed(now, st)
        last = (now, failed)
        if not failed:
            return cert.result(now, max_dense)
        prev, seg = now, t
    raise _not_certified(
        last, f"the budget (max_segments = {st['max_segments']}, max_time = {st['max_time']}) ran out at t = {t:.6g}"
    )


def _failed(now: dict, st: dict) -> list[str]:
    out = []
    if not now["stationarity"] <= st["tol"]:
        out.append(f"stationarity |M'| / (kappa |M|) = {now['stationarity']:.3g} > tol {st['tol']:.3g}")
    if not now["settle"] <= st["tol"]:
        out.append(f"settling (relative change over the last segment) = {now['settle']:.3g} > tol {st['tol']:.3g}")
    if not now["curvature"] >= -st["curvature_tol"]:
        out.append(
            f"an unstable direction: lambda_min(H on the live directions) / kappa = {now['curvature']:.3g} < "
            f"-curvature_tol {-st['curvature_tol']:.3g} (a plateau: a mode has yet to ignite)"
        )
    return out


def _not_certified(last, why: str) -> RuntimeError:
    if last is None:
        err = RuntimeError(f"asymptote (method='flow'): no state was certified: {why}.")
        err.last = None
        return err
    now, failed = last
    err = RuntimeError(
        f"asymptote (method='flow') could not certify a steady state: {why}. At t = {now['t']:.6g} the last state "
        f"failed: {'; '.join(failed)}. Raise max_segments / max_time, or pass solve_options={{'stiff': True}} "
        "for slow, stiff convergence."
    )
    err.last = now
    return err


class _Certificate:
    """The quantities of the flow certificate (stationarity, curvature on the live directions)
    for one model and initial condition; `kappa` = |H(initial state)|_2."""

    def __init__(self, model: NQFModel, form: str, kind: str, x0, width, f0=None):
        self.model, self.form, self.width, self.f0 = model, form, width, f0
        self.kind0, self.x0 = kind, x0
        self.is_glv = form == "glv"
        self.M0, self.mu0 = self._state(kind, x0)
        C0 = self.M0 if self.mu0 is None else self.M0 - np.outer(self.mu0, self.mu0) / width
        if self.is_glv:  # the live modes z_k(0) > 0 (z_k = 0 stays 0)
            self.z0 = np.asarray(_mode_strengths(model.data, kind, x0))
            self.live = self.z0 > 0
        elif kind == "W":
            self.r0 = int(np.linalg.matrix_rank(np.asarray(x0)))
        else:
            self.r0 = int(np.linalg.matrix_rank(C0, hermitian=True))
        H0 = np.asarray(self._H(self.M0, self.mu0))
        self.kappa = float(np.linalg.norm(H0, 2))
        if self.mu0 is not None:
            self.kappa = max(self.kappa, float(np.abs(self._mu_curvature(self.M0, self.mu0)).max()))
        self.loss0 = float(self._loss(self.M0, self.mu0))
        # |M| below the initial scale does not count as small (a limit M* = 0 is relative to M0)
        self.scale = max(float(np.linalg.norm(self.M0)), np.finfo(float).tiny)

    def settle(self, now: dict, prev: dict) -> float:
        """The relative change from `prev` to `now`: of the eigenvalues (2-norm, relative to
        max(|eigenvalues|, |M0|_F)) and of the loss (relative to the initial loss)."""
        ev, ev_prev = now["eigenvalues"], prev["eigenvalues"]
        change = np.linalg.norm(ev - ev_prev) / max(np.linalg.norm(ev), self.scale)
        return float(max(change, abs(now["loss"] - prev["loss"]) / max(self.loss0, np.finfo(float).tiny)))

    def _state(self, kind, x):
        data = self.model.data
        if kind == "M-mu":
            return np.asarray(x[0]), np.asarray(x[1])
        if kind == "W":
            x = np.asarray(x)
            return x @ x.T, None
        if kind == "z":
            z = np.asarray(x)
            P = None if data.P is None else np.asarray(data.P)
            return (np.diag(z) if P is None else (P * z) @ P.T), None
        return np.asarray(x), None

    def _outputs(self, M, mu):
        """The outputs of the solved model (for a plain model: Tr[M A], labels shifted by f0)."""
        if mu is None:
            return self.model.data.traces(jnp.asarray(M))
        return self.model.outputs(jnp.asarray(M), jnp.asarray(mu))

    def _loss(self, M, mu):
        return float(jnp.mean((self._outputs(M, mu) - self.model.y) ** 2))

    def _H(self, M, mu):
        """H = (4/m) sum_mu Delta_mu A_mu (Eq. E8) with Delta the model's residuals."""
        resid = self._outputs(M, mu) - self.model.y
        return self.model.data.weighted_sum(4.0 / self.model.m * resid)

    def _v(self, M, mu):
        resid = self._outputs(M, mu) - self.model.y
        return (2.0 / self.model.m * resid) @ self.model.u(jnp.asarray(mu))

    def _mu_curvature(self, M, mu):
        """Eigenvalues of d Hess_mu l, l(mu) = L(C + mu mu^T / d, mu) at fixed C = M - mu mu^T / d."""
        d = self.width
        C = jnp.asarray(M) - jnp.outer(mu, mu) / d
        ell = lambda v: jnp.mean((self.model.outputs(C + jnp.outer(v, v) / d, v) - self.model.y) ** 2)  # noqa: E731
        return np.linalg.eigvalsh(d * np.asarray(jax.hessian(ell)(jnp.asarray(mu))))

    def evaluate(self, kind, x, t) -> dict:
        """The certificate's quantities at the state `x` of `kind` (relative to kappa; to 1 when
        kappa = 0, i.e. H(M0) = 0)."""
        kappa = self.kappa if self.kappa > 0 else 1.0
        M, mu = self._state(kind, x)
        H = np.asarray(self._H(M, mu))
        dM = H @ M + M @ H
        nM = max(np.linalg.norm(M), self.scale)
        if mu is not None:
            v = np.asarray(self._v(M, mu))
            dM = dM + np.outer(v, mu) + np.outer(mu, v)
        stationarity = float(np.linalg.norm(dM) / (kappa * nM))
        C = M if mu is None else M - np.outer(mu, mu) / self.width
        w, V = np.linalg.eigh(C)
        if self.is_glv:  # the live modes of the data's basis
            P = np.eye(M.shape[0]) if self.model.data.P is None else np.asarray(self.model.data.P)
            U = P[:, self.live]
        else:
            U = V[:, ::-1][:, : self.r0]
        curvature = float(np.linalg.eigvalsh(U.T @ H @ U)[0] / kappa) if U.shape[1] else 0.0
        if mu is not None:
            dmu = self.width * v + H @ mu  # relative to sqrt(d |M|_2) >= |mu| (M - mu mu^T / d is PSD)
            mu_scale = max(np.sqrt(self.width * np.linalg.norm(M, 2)), np.finfo(float).tiny)
            stationarity = max(stationarity, float(np.linalg.norm(dmu) / (kappa * mu_scale)))
            curvature = min(curvature, float(self._mu_curvature(M, mu)[0] / kappa))
        return {
            "t": t,
            "M": M,
            "mu": mu,
            "z": np.asarray(x) if kind == "z" else None,
            "eigenvalues": np.linalg.eigvalsh(M)[::-1],
            "loss": self._loss(M, mu),
            "stationarity": stationarity,
            "curvature": curvature,
        }

    def result(self, now: dict, max_dense: int) -> Asymptote:
        f = np.asarray(self._outputs(now["M"], now["mu"]))
        f = f if self.f0 is None else f + np.asarray(self.f0)
        M, eigenvalues = now["M"], now["eigenvalues"]
        if self.is_glv:  # the state kept only z: M* by the slaving of the initial off-diagonals
            M, eigenvalues = _glv_state(self.model.data, self.kind0, self.x0, self.z0, now["z"], max_dense)
        elif M.shape[0] > max_dense:
            M = None
        return Asymptote(
            eigenvalues=eigenvalues,
            loss=now["loss"],
            M=M,
            z=now["z"],
            mu=now["mu"],
            outputs=f,
            t=float(now["t"]),
            accuracy=max(now["stationarity"], now["settle"]),
            method="flow",
        )


def check_no_weight_decay(settings) -> None:
    """Raise unless the solver `settings` ((name, value) pairs of a `FlowSolution` or a
    `SweepSolution`) record no weight decay: `asymptote` is the limit without it."""
    gamma = dict(settings).get("weight_decay")
    if gamma not in (None, 0.0):
        raise ValueError(
            f"target='asymptote': this flow was solved with weight_decay = {gamma}; `asymptote` computes the "
            "limit of the flow without weight decay. Pass a `target` (p,) instead."
        )


def of_flow(sol) -> Asymptote:
    """`asymptote` of the model and initial condition of a `FlowSolution` (what
    ``measure_ignition_times(sol, target="asymptote")`` uses).

    **Raises:** `ValueError` for a flow solved with weight decay (its limit is not computed
    here), plus those of `asymptote`."""
    check_no_weight_decay(sol.settings)
    model = sol.model if sol.model is not None else sol.data
    general = sol.model is not None and sol.model.has_mean_field
    if sol.form == "M-mu" and general and not sol.init_is_factor:
        return asymptote(model, M0=sol.init, mu0=np.asarray(sol._y0[1]), d=sol.d)
    if sol.init_is_z:
        return asymptote(model, z0=sol.init)
    return asymptote(model, **{"W0" if sol.init_is_factor else "M0": sol.init})
