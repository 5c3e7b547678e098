"""Minibatch SGD as a closed stochastic differential equation on M, or (M, mu) (issue 24, part 3).

**The noise.** A minibatch step of `nqf.closed_sgd` uses per-sample weights w (m,) with
w_x = (count of x in the batch) / b (`nqf.batch_weights`). Their mean is 1/m (full batch) and
their covariance is

    Cov(w) = kappa / (b m) Pi,   Pi = I - 1 1^T / m   (a projector, Pi Pi^T = Pi),
    kappa = 1 (sampling with replacement, multinomial counts),
    kappa = (m - b) / (m - 1) (without replacement, `nqf.batch_indices`; 0 for b = m).

For the MSE (ell' = 2 Delta_x) the step's H = sum_x w_x 4 Delta_x A_x is full batch plus
H_xi = sum_x xi_x a_x, a_x = 4 Delta_x A_x, with xi = w - 1/m. Theorem 2 (E6, g = B = 0) reads
M+ = (I - eta H) M (I - eta H), i.e. W+ = (I - eta H) W.

**The SDE** (time t = eta * steps; B a standard m-dimensional Brownian motion). In weight space
the first-order stochastic modified equation (Li, Tai and E 2017) is the linear SDE
dW = -Hbar W dt - sqrt(eta) s H(Pi dB) W with s = sqrt(kappa / (b m)), whose increments have
mean -eta Hbar W and covariance eta^2 Cov(H_xi W), those of the map. Its Ito image M = W W^T is
closed on M:

    dM = F(M) dt + eta s^2 sum_j H_j M H_j dt - sqrt(eta) s (H(Pi dB) M + M H(Pi dB)),      (S1)

F(M) = -(Hbar M + M Hbar) the full-batch flow (E8), H(c) = sum_x c_x a_x, H_j = H(Pi e_j), so
sum_j H_j M H_j = sum_xy Pi_xy a_x M a_y. The Ito term eta s^2 sum_j H_j M H_j = eta E[H_xi M H_xi]
is the noise part of the map's second-order term eta^2 H M H, per unit time. One step of S1 over dt = eta has
mean eta F + eta^2 sum C_xy a_x M a_y and covariance eta^2 sum_xy C_xy phi_x (x) phi_y,
phi_x = a_x M + M a_x: the map's, up to the deterministic eta^2 (Hbar M Hbar - (1/2) DF F) that
the modified flow (issue 24 part 2) adds (`drift=`). So S1 is weak order 1 in eta against the map.

**Commuting data, log space.** With A_x = P diag(lambda_x) P^T and M0 = P diag(z0) P^T the map
keeps M = P diag(z) P^T; for u = log z, Ito's formula on S1 gives (h(c) = Lambda^T (c * a),
a = 4 Delta, Delta = Lambda z - y)

    du = [-2 hbar - eta s^2 sum_j h_j^2] dt - 2 sqrt(eta) s h(Pi dB),                       (S2)

hbar = Lambda^T a / m, sum_j h_j,k^2 = sum_x lambda_xk^2 a_x^2 - (Lambda^T a)_k^2 / m. The
Ito correction of the change of variable, -(1/2) (2 sqrt(eta) s)^2 sum_j h_j^2 = -2 eta s^2 ..,
combines with the +eta s^2 sum_j h_j^2 of S1 to the -eta s^2 sum_j h_j^2 above (cf. the map:
E[2 log(1 - eta h)] = -2 eta hbar - eta^2 (hbar^2 + Var h)). z stays positive for any step and
relative accuracy is kept at z ~ eps (small init).

**Models with a mean field (S3).** For f = f0 + g^T mu + mu^T B mu + Tr[M A] (`nqf.NQFModel`)
the step's gradient is v 1^T + H W (E4), (v, H) linear in the batch weights, so with
(v_j, H_j) those of the weights s Pi e_j and (v_xi, H_xi) those of s Pi dB, the Ito image of
dW = -(vbar 1^T + Hbar W) dt - sqrt(eta) (v_xi 1^T + H_xi W) reads

    dmu = -(d vbar + Hbar mu) dt - sqrt(eta) (d v_xi + H_xi mu),
    dM  = E10 dt + eta sum_j (d v_j v_j^T + v_j mu^T H_j + H_j mu v_j^T + H_j M H_j) dt
          - sqrt(eta) (v_xi mu^T + mu v_xi^T + H_xi M + M H_xi),                              (S3)

the Ito term being the noise part of E6's eta^2 term (mu is linear in W: none for mu).

**Calculus and solvers.** The drifts above are Ito drifts. For a Stratonovich solver (the default
`diffrax.Heun`, deterministic order 2, so that with a step dt0 >> eta the discretization error
stays below the O(eta) modelling error; default dt0 = sqrt(eta / rate) / 4 with the drift's
fastest rate at the initial state, so (rate dt0)^2 << eta rate) the drift gets -(1/2) sum_j D g_j[g_j] (g_j the j-th
diffusion column): closed forms in log space, m Jacobian-vector products in M space. Ito
solvers (`diffrax.Euler`) get the Ito drift.

**Measured** (`benchmarks/sde_weak_error.py`, Fig. 3 data, M0 = 1e-5 I, b = 2, 10^4 SDE paths vs
10^4 maps per eta = 0.005 .. 0.04): the bias of the mean loss, of E log z_1 and of the mean
ignition time falls as eta^0.92, eta^0.88, eta^0.92 (6-15 Monte Carlo standard errors); the
spread (std) of ignition times across batch seeds agrees to ~2 % (e.g. t*_1: 0.196 vs 0.200 at
eta = 0.01). M space on non-commuting data (`benchmarks/sde_weak_error_mlp.py`: an MLP's NQF, p = 5,
m = 16, b = 4, 2 x 10^4 paths and maps, eta = 0.01 .. 0.04): orders 0.97 (mean loss) and 0.96
(mean top eigenvalue of M), 10-22 standard errors. S3 (a random 3 x 3 model with g and B, m = 4,
d = 4, stiff: eta x rate = 0.2-0.8): loss spread within ~8 % of the map's, mean-loss bias
4e-4, 1.9e-3, 1.2e-2 at eta = 0.005, 0.01, 0.02 (super-linear: not yet asymptotic). With the full-batch finite-eta correction passed as `drift=`, the bias of E log z_1
falls below the Monte Carlo error (consistent with the second-order SME).

Source: Theorem 2 (THEORY E6, E8, E13); Li, Tai and E, "Stochastic modified equations and
adaptive stochastic gradient algorithms" (ICML 2017).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, cast

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .._core import memory
from .._core._checks import as_array, is_traced
from .._core._config import require_x64
from .._core.io import Saveable
from ..data._model import NQFModel
from ..data._operators import AbstractCommutingData, AbstractData, DiagonalData, check_initial_loss
from ._batches import _as_key
from ._flow import glv_z, rhs_M
from ._maps import _check_realizable
from ._train_args import check_lr

__all__ = ["SDEPaths", "sgd_sde", "batch_weight_covariance", "sde_coefficients"]

SDE_FORMS = ("auto", "M", "log_z", "M-mu")
DT0_FACTOR = 0.25  # default step dt0 = DT0_FACTOR * sqrt(lr / rate) (module docstring)
MAX_STEPS = 10**8  # steps of one path that `sgd_sde` runs at most (more is refused, not run)
TRACE_COUNT = [0]


def batch_weight_covariance(m: int, batch_size: int, *, replace: bool = False) -> Float[np.ndarray, "m m"]:
    """Covariance of the minibatch weights w_x = (count of x in the batch) / b, shape (m, m).

    kappa / (b m) (I - 1 1^T / m) with kappa = 1 with replacement and (m - b) / (m - 1) without
    (`nqf.batch_indices`; kappa = 0 for b = m, i.e. full batch). Exact for one batch.

    **Raises:** `ValueError` if m < 1 or `batch_size` is not an integer in [1, m] (without
    replacement) or >= 1 (with replacement).
    """
    m, b = _check_m_b(m, batch_size, replace)
    return _kappa(m, b, replace) / (b * m) * (np.eye(m) - 1.0 / m)


def _check_m_b(m, batch_size, replace):
    if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"`m` must be an integer >= 1; found {m!r}.")
    hi = "inf" if replace else f"m={m}"
    if (
        isinstance(batch_size, (bool, np.bool_))
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
        or (not replace and batch_size > m)
    ):
        raise ValueError(
            f"`batch_size` must be an integer in [1, {hi}] "
            f"({'with' if replace else 'without'} replacement); found {batch_size!r}."
        )
    return int(m), int(batch_size)


def _kappa(m: int, b: int, replace: bool) -> float:
    if replace:
        return 1.0
    return 0.0 if m == 1 else (m - b) / (m - 1)


# ---- the coefficients (pure, traceable) ----
class _Coeffs(eqx.Module):
    """Drift and diffusion of S1 (``form="M"``, state M) or S2 (``form="log_z"``, state u =
    log z, with the live-mode `mask`), scaled by `lr` and s^2 = kappa / (b m)."""

    data: Any  # AbstractData; AbstractCommutingData for form "log_z"
    lr: Array
    s2: Array
    mask: Any  # bool (p,) live modes for "log_z", else None
    form: str = eqx.field(static=True)
    stratonovich: bool = eqx.field(static=True)

    @property
    def m(self) -> int:
        return self.data.m

    def _proj(self, xi):
        return xi - jnp.mean(xi, axis=-1, keepdims=True)

    # -- M space --
    def _a(self, M):
        return 4.0 * (self.data.traces(M) - self.data.y)

    def diffusion_M(self, M, xi):
        HM = self.data.apply(self._a(M) * self._proj(xi), M)
        return -jnp.sqrt(self.lr * self.s2) * (HM + HM.T)

    def ito_M(self, M):
        a = self._a(M)
        cols = a[None, :] * self._proj(jnp.eye(self.m))  # row j: a * Pi e_j

        def HMH(c):
            return self.data.apply(c, self.data.apply(c, M).T)

        return self.lr * self.s2 * jnp.sum(jax.vmap(HMH)(cols), axis=0)

    def drift_M(self, M):
        out = rhs_M(0.0, M, (self.data, 0.0, None)) + self.ito_M(M)
        if self.stratonovich:
            out = out - 0.5 * _strat_sum(self.diffusion_M, M, self.m)
        return 0.5 * (out + out.T)

    # -- log space (commuting data) --
    def _z(self, u):
        return glv_z(u, self.mask)

    def _a_z(self, z):
        return 4.0 * (self.data.outputs_z(z) - self.data.y)

    def diffusion_u(self, u, xi):
        a = self._a_z(self._z(u))
        du = -2.0 * jnp.sqrt(self.lr * self.s2) * self.data.pullback(a * self._proj(xi))
        return jnp.where(self.mask, du, 0.0)

    def drift_u(self, u):
        data, m = self.data, self.m
        z = self._z(u)
        a = self._a_z(z)
        pa = data.pullback(a)
        var = _pullback_sq(data, a**2) - pa**2 / m  # sum_j h_j^2 / 1 (h_j = Lambda^T(a Pi e_j))
        out = -2.0 * pa / m - self.lr * self.s2 * var
        if self.stratonovich:  # -(1/2) sum_j D g_j[g_j] = -8 eta s^2 Lambda^T(diag(K) a - K a / m)
            Kdiag = _outputs_sq(data, z)
            Ka = data.outputs_z(z * pa)
            out = out - 8.0 * self.lr * self.s2 * data.pullback(Kdiag * a - Ka / m)
        return jnp.where(self.mask, out, 0.0)

    def drift(self, y):
        return self.drift_M(y) if self.form == "M" else self.drift_u(y)

    def diffusion(self, y, xi):
        return self.diffusion_M(y, xi) if self.form == "M" else self.diffusion_u(y, xi)


class _CoeffsMmu(eqx.Module):
    """Drift and diffusion of S3 (``form="M-mu"``): a model with a mean field (g, B, f0), state
    (M, mu), width d. The step's (v, H) are linear in the batch weights (`gradient_terms`), so
    the noise columns are (v_j, H_j) = gradient_terms(s Pi e_j) and the Ito term of M is
    eta sum_j (d v_j v_j^T + v_j mu^T H_j + H_j mu v_j^T + H_j M H_j), the noise part of E6's
    eta^2 term (mu = W 1 is linear in W: no Ito term)."""

    model: NQFModel
    lr: Array
    s2: Array
    d: Array
    stratonovich: bool = eqx.field(static=True)
    form: str = eqx.field(static=True, default="M-mu")

    @property
    def m(self) -> int:
        return self.model.m

    def _terms(self, M, mu, w):
        from ._losses import as_loss
        from ._maps import gradient_terms

        return gradient_terms(self.model, w, as_loss(None), M, mu, 0.0)

    def _noise_vH(self, y, xi):
        M, mu = y
        return self._terms(M, mu, jnp.sqrt(self.s2) * (xi - jnp.mean(xi)))

    def diffusion(self, y, xi):
        M, mu = y
        v, H = self._noise_vH(y, xi)
        X = jnp.outer(v, mu) + H @ M
        c = -jnp.sqrt(self.lr)
        return (c * (X + X.T), c * (self.d * v + H @ mu))

    def drift(self, y):
        M, mu = y
        v, H = self._terms(M, mu, jnp.full(self.m, 1.0 / self.m))
        X = jnp.outer(v, mu) + H @ M
        dM, dmu = -(X + X.T), -(self.d * v + H @ mu)

        def ito(e):
            vj, Hj = self._noise_vH(y, e)
            Hmu = jnp.outer(Hj @ mu, vj)
            return self.d * jnp.outer(vj, vj) + Hmu + Hmu.T + Hj @ M @ Hj

        dM = dM + self.lr * jnp.sum(jax.vmap(ito)(jnp.eye(self.m)), axis=0)
        if self.stratonovich:
            cM, cmu = _strat_sum(self.diffusion, y, self.m)
            dM, dmu = dM - 0.5 * cM, dmu - 0.5 * cmu
        return (0.5 * (dM + dM.T), dmu)


def _strat_sum(g, y, m):
    """sum_j D g(., e_j)[g(y, e_j)] by m Jacobian-vector products (g linear in its 2nd argument)."""

    def one(e):
        col = g(y, e)
        return jax.jvp(lambda x: g(x, e), (y,), (col,))[1]

    return jax.tree.map(lambda x: jnp.sum(x, axis=0), jax.vmap(one)(jnp.eye(m)))


def _pullback_sq(data, c):
    """sum_x lambda_xk^2 c_x, shape (p,)."""
    if isinstance(data, DiagonalData):
        return data.lam**2 * c
    return c @ data.Lambda**2


def _outputs_sq(data, z):
    """sum_k lambda_xk^2 z_k, shape (m,)."""
    if isinstance(data, DiagonalData):
        return data.lam**2 * z
    return data.Lambda**2 @ z


def sde_coefficients(
    data: AbstractData,
    *,
    lr: float,
    batch_size: int,
    replace: bool = False,
    form: str = "M",
    stratonovich: bool = False,
    d: float = 1.0,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The drift b(y) and diffusion g(y, dB) of the SGD SDE (module docstring, S1 / S2), for checks.

    `form="M"`: y = M (p, p), b(M) (p, p), g(M, xi) (p, p) linear in xi (m,). `form="log_z"`
    (commuting data): y = u = log z (p,), all modes live. One step of size eta has mean
    ~ eta b(y) and covariance ~ eta Cov(g(y, xi)), xi ~ N(0, I_m). Ito drift unless
    `stratonovich` (then with -(1/2) sum_j D g_j[g_j]). For an `NQFModel` with g, B or f0
    (``form="M-mu"``, width `d`): y = (M (p, p), mu (p,)), S3 of the module docstring.

    **Raises:** as `sgd_sde`.
    """
    lr = check_lr(lr)
    data, model = _check_data(data, form)
    _, b = _check_m_b(data.m, batch_size, replace)
    s2 = jnp.asarray(_kappa(data.m, b, replace) / (b * data.m))
    if model is not None:
        c = _CoeffsMmu(model, jnp.asarray(lr), s2, jnp.asarray(float(d)), stratonovich)
        return c.drift, c.diffusion
    mask = jnp.ones(data.p, dtype=bool) if form == "log_z" else None
    c = _Coeffs(data, jnp.asarray(lr), s2, mask, form, stratonovich)
    return c.drift, c.diffusion


# ---- the result ----
@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["ts", "M", "mu", "z", "loss", "lr"],
    meta_fields=["batch_size", "replace", "form"],
)
@dataclasses.dataclass(frozen=True, eq=False)
class SDEPaths(Saveable):
    """Result of `sgd_sde`: paths of the SGD SDE at the saved times (a registered pytree).

    **Attributes** (B the number of paths; no leading axis for a single path):

    - `ts`: saved gradient-flow times t = eta * steps, (n,).
    - `M`: M(t) = W W^T, (B, n, p, p) (``"M"``, ``"M-mu"``; None for ``"log_z"``).
    - `mu`: mu(t) = W 1, (B, n, p) (``"M-mu"``; None otherwise).
    - `z`: mode strengths z_k = (P^T M P)_kk, (B, n, p), for commuting data (both forms); None
      otherwise.
    - `loss`: full training loss (1/m) sum_x (f_x - y_x)^2, (B, n).
    - `lr`, `batch_size`, `replace`, `form`: the settings.
    """

    ts: np.ndarray
    M: np.ndarray | None
    mu: np.ndarray | None
    z: np.ndarray | None
    loss: np.ndarray
    lr: float
    batch_size: int
    replace: bool
    form: str

    @property
    def t(self) -> np.ndarray:
        """Alias of `ts` (for `nqf.measure_ignition_times`)."""
        return self.ts


class _Noise(diffrax.AbstractTerm):
    """The diffusion term g(y, dB) driven by the Brownian motion `path`. g is linear in dB, so
    `vf_prod` applies it without forming the diffusion matrix; `vf` (used by solvers that need
    the matrix itself, e.g. Milstein's) forms it column by column, (*y.shape, m)."""

    coeffs: _Coeffs
    path: diffrax.AbstractBrownianPath

    def vf(self, t, y, args):
        cols = jax.vmap(lambda e: self.coeffs.diffusion(y, e))(jnp.eye(self.coeffs.m))
        return jax.tree.map(lambda c: jnp.moveaxis(c, 0, -1), cols)

    def contr(self, t0, t1, **kwargs):
        return self.path.evaluate(t0, t1, **kwargs)

    def prod(self, vf, control):
        return jax.tree.map(lambda v: v @ control, vf)

    def vf_prod(self, t, y, args, control):
        return self.coeffs.diffusion(y, control)

    def is_vf_expensive(self, t0, t1, y, args):
        return True


def _check_data(data, form):
    """(data set, model or None): the model when it has a mean field or f0 (the "M-mu" form)."""
    model = None
    if isinstance(data, NQFModel):
        if data.g is not None or data.B is not None or data.f0 is not None:
            model = data
        data = data.data
    if not isinstance(data, AbstractData):
        raise TypeError(f"`data` must be an nqf data set (AbstractData) or an NQFModel; found {type(data).__name__}.")
    if form not in SDE_FORMS:
        raise ValueError(f"`form` must be one of {SDE_FORMS}; found {form!r}.")
    if form == "log_z" and not isinstance(data, AbstractCommutingData):
        raise ValueError(
            "`form='log_z'` needs commuting data (`CommutingData`, `DiagonalData`); found "
            f"{type(data).__name__}. Use form='M'."
        )
    if model is not None and form not in ("auto", "M-mu"):
        raise ValueError(f"`form`: a model with g, B or f0 needs form='M-mu' (or 'auto'); found {form!r}.")
    if model is None and form == "M-mu":
        raise ValueError("`form='M-mu'` is for an NQFModel with g, B or f0; use form='M' for a plain model.")
    return data, model


def _check_float64(x, name):
    dt = getattr(x, "dtype", None)
    if dt is not None and jnp.issubdtype(dt, jnp.floating) and jnp.finfo(dt).bits < 64:
        raise TypeError(f"`{name}` must be float64 (nqf does not compute in {dt}); convert it with .astype(float).")


def _check_ts(ts):
    ts = np.asarray(as_array(ts, "ts", ndim=1, host=True))
    if ts.size < 1 or ts[0] < 0 or np.any(ts[1:] < ts[:-1]) or ts[-1] <= 0:
        raise ValueError(f"`ts` must be non-decreasing times >= 0 with ts[-1] > 0; found {ts!r}.")
    return ts


def _keys(key, n_paths):
    if isinstance(key, (jax.Array, np.ndarray)) and not is_traced(key):
        arr = key
        if jnp.issubdtype(arr.dtype, jax.dtypes.prng_key) and arr.ndim == 1:
            if n_paths is not None and n_paths != arr.shape[0]:
                raise ValueError(f"`n_paths`={n_paths} disagrees with {arr.shape[0]} keys in `key`.")
            return arr, True
        if jnp.issubdtype(arr.dtype, jnp.integer) and arr.ndim == 1:
            if n_paths is not None and n_paths != arr.shape[0]:
                raise ValueError(f"`n_paths`={n_paths} disagrees with {arr.shape[0]} seeds in `key`.")
            return jax.vmap(jax.random.key)(jnp.asarray(arr)), True
    k = _as_key(key)
    if n_paths is None:
        return k, False
    if isinstance(n_paths, (bool, np.bool_)) or not isinstance(n_paths, (int, np.integer)) or n_paths < 1:
        raise ValueError(f"`n_paths` must be an integer >= 1 or None; found {n_paths!r}.")
    return jax.random.split(k, int(n_paths)), True


def _check_paths_memory(key, n_paths, n_saved: int, p: int, m: int, form: str, commuting: bool) -> None:
    """Raise `nqf.memory.MemoryBudgetError` before `sgd_sde` splits its keys and runs the
    vmapped ensemble over the budget: per path its key, the saved values at `n_saved` times (z
    in log space; M, and z for commuting data, in M space; (M, mu) in the "M-mu" form; the
    loss) and the working state of the vmapped solve (~20 states and noise vectors of size m)."""
    if n_paths is not None:
        if isinstance(n_paths, (bool, np.bool_)) or not isinstance(n_paths, (int, np.integer)) or n_paths < 1:
            raise ValueError(f"`n_paths` must be an integer >= 1 or None; found {n_paths!r}.")
        paths = int(n_paths)
    else:
        paths = int(np.shape(key)[0]) if np.ndim(key) == 1 else 1
    state = p if form == "log_z" else p * p + p
    saved = p if form == "log_z" else p * p + (p if commuting or form == "M-mu" else 0)
    per_path = 8.0 * (2 + n_saved * (saved + 1) + 20 * (state + m))
    memory.check(
        paths * per_path,
        f"sgd_sde: {paths} paths (n_paths) x {n_saved} saved times (ts) of {saved + 1} values each, "
        f"with the vmapped solve's working state",
        "fewer `n_paths` per call (run the ensemble in chunks of keys: `key` a 1-d array of seeds, "
        "and concatenate), or fewer saved times `ts`.",
    )


def sgd_sde(
    data: AbstractData | NQFModel,
    M0: Float[ArrayLike, "p p"] | Float[ArrayLike, " p"],
    *,
    lr: float,
    batch_size: int,
    ts: Float[ArrayLike, " n"],
    key: PRNGKeyArray | int,
    n_paths: int | None = None,
    replace: bool = False,
    form: str = "auto",
    solver: diffrax.AbstractSolver | None = None,
    dt0: float | None = None,
    drift: Callable[[Array], Array] | None = None,
) -> SDEPaths:
    """Minibatch SGD (MSE, batch size b, learning rate eta) as a closed SDE on M, solved with diffrax.

    The weak-order-1 stochastic modified equation of `nqf.closed_sgd(data, M0=M0, lr=lr,
    batch_size=b, key=...)` (module docstring: S1 on M, S2 on u = log z for commuting data):
    the full-batch flow, the Ito term eta E[H_xi M H_xi] and multiplicative noise of covariance
    eta Cov(w) in the per-sample directions a_x M + M a_x. Mean and variance of the loss and of
    M or z over paths match those over batch seeds of the exact map up to O(eta) (measured in
    `tests/dynamics/test_sde.py` and the issue-24 note).

    **Arguments:**

    - `data`: a data set (any `AbstractData`) or an `NQFModel` (with g, B or f0: the (M, mu)
      SDE S3, ``form="M-mu"``).
    - `M0`: initial M (p, p), symmetric PSD; or, for commuting data, the mode strengths z0 (p,)
      (M0 = P diag(z0) P^T); for a model with g or B the tuple (M0, mu0 (p,), d) with the
      width d (an integer, as in `nqf.closed_sgd`).
    - `lr`: eta > 0 (the SDE's noise scale; time t = eta * steps).
    - `batch_size`: b, in [1, m] without replacement (`replace=False`, as `nqf.batch_indices`),
      >= 1 with replacement.
    - `ts`: saved times (n,), non-decreasing, >= 0; the SDE runs from t = 0 to ts[-1].
    - `key`: PRNG key or int seed; with `n_paths` it is split into that many paths (vmapped
      ensemble); a 1-d array of keys or int seeds gives one path per entry.
    - `form`: ``"log_z"`` (commuting data with M0 diagonal in the data's basis; S2, small-init
      safe), ``"M"`` (any data; S1), ``"M-mu"`` (a model with g, B or f0; S3), ``"auto"``
      (``"M-mu"`` for such a model, else ``"log_z"`` where possible, else ``"M"``).
    - `solver`: a diffrax SDE solver (default `diffrax.Heun()`, Stratonovich; Ito solvers such as
      `diffrax.Euler()` get the Ito drift); any solver of diffrax's SDE table that takes a
      `BrownianIncrement` (Euler, Heun, EulerHeun, Midpoint, ItoMilstein, ...). `dt0`: its
      constant step in time t (default sqrt(lr / rate) / 4, rate = max(1, the spectral radius
      of the drift's Jacobian at the initial state, and in log space the largest initial
      |du/dt|): Heun's error O((rate dt0)^2 + lr rate dt0) relative then stays below the SDE's
      O(lr rate) modelling error).
    - `drift`: an extra drift term y -> dy added to the SDE's (in the state of the form: M, or
      u = log z; for ``"M-mu"`` a function of the tuple (M, mu) returning a tuple), e.g. the
      finite-eta modified-flow correction (`benchmarks/sde_weak_error.py: gd_log_correction`). It
      is part of the compiled program: reuse the same function object to avoid recompiling.

    **Returns:** `SDEPaths` (ts (n,), M (B, n, p, p) or None, mu (B, n, p) or None, z (B, n, p)
    or None, loss (B, n);
    no B axis without `n_paths` and with a single key).

    **Cost:** per step and path, two drift and diffusion evaluations: O(m p) in log space;
    O(m) `apply`s in M space (the Ito term and the Stratonovich correction sum over samples), so
    there an SDE step costs ~m map steps: measured on an MLP NQF (m = 16) 2x10^4 SDE paths took
    2.5x (eta = 0.01) to 5.5x (eta = 0.04) the time of 2x10^4 maps; in log space (Fig. 3 data) the
    SDE ensemble is 4.7-5.5x (eta = 0.01) and 6.7-12x (eta = 0.002) faster (`benchmarks/bench_sde.py`).

    **Raises:** `ValueError` for lr <= 0 or not finite, a path of more than `MAX_STEPS` (1e8)
    steps (a tiny `lr` or `dt0` for the horizon ts[-1]), `batch_size` out of range, bad `ts`,
    `form`, `n_paths`, `M0` of the wrong shape or not finite, ``"log_z"`` on non-commuting data
    or with M0 not diagonal in the data's basis; `TypeError` for float32 input, a bad key, a
    data argument that is not a data set, or a solver that is neither Ito nor Stratonovich;
    `ValueError` for a model with g or B without (M0, mu0, d), or a `form` that does not fit
    the model.
    """
    require_x64()
    lr = check_lr(lr)
    if is_traced(lr):
        raise TypeError("`lr` must be concrete in `sgd_sde` (vmap over keys via `n_paths`).")
    data, model = _check_data(data, form)
    m, b = _check_m_b(data.m, batch_size, bool(replace))
    for leaf in jax.tree.leaves(model if model is not None else data):
        _check_float64(leaf, "data")
    ts = _check_ts(ts)
    p = data.p
    mu0, d = _mean_field_init(model, M0, p)
    form, commuting, Mfull, z0 = _initial_M(data, model, M0, form, mu0, d)
    solver, strat = _check_solver(solver)
    _check_paths_memory(key, n_paths, len(ts), p, m, form, commuting)
    keys, batched = _keys(key, n_paths)
    s2 = _kappa(m, b, bool(replace)) / (b * m)
    y0, coeffs = _state_and_coeffs(form, data, model, (lr, s2, strat), (Mfull, z0, mu0, d))
    n_steps = _step_count(lr, float(_rate(coeffs, y0)), dt0, ts)
    dt = jnp.asarray(ts[-1] / n_steps)  # traced: a new dt0 or horizon reuses the compiled program
    run = functools.partial(_solve, coeffs, y0, jnp.asarray(ts), dt, solver, drift, commuting)
    out = jax.vmap(run)(keys) if batched else run(keys)
    Ms, mus, zs, losses = jax.tree.map(np.asarray, out)
    if not np.all(np.isfinite(losses)):
        raise FloatingPointError("The SDE diverged (non-finite loss); reduce `dt0` or `lr`.")
    return SDEPaths(
        ts=ts,
        M=None if form == "log_z" else Ms,
        mu=mus,
        z=zs if commuting else None,
        loss=losses,
        lr=lr,
        batch_size=b,
        replace=bool(replace),
        form=form,
    )


def _initial_M(data, model, M0, form: str, mu0, d):
    """(form, commuting, M0 (p, p), z0 (p,) or None) of `sgd_sde`'s initial condition: `M0` (p,
    p) symmetric and realizable (with mu0, d: M0 - mu0 mu0^T / d PSD), or mode strengths z0 (p,)
    >= 0 of commuting data; ``form="auto"`` resolved ("M-mu" for a model with g, B, f0, "log_z"
    where M0 is diagonal in the commuting data's basis, else "M"). **Raises:** `ValueError`."""
    p = data.p
    if isinstance(M0, tuple):
        M0 = M0[0]
    _check_float64(M0, "M0")
    M0 = np.asarray(M0)
    commuting = isinstance(data, AbstractCommutingData) and model is None
    if M0.ndim == 1:
        if not commuting:
            raise ValueError("`M0` of shape (p,) (mode strengths z0) needs commuting data; give M0 (p, p).")
        z0 = np.asarray(as_array(M0, "M0", shape=(p,), host=True))
        if np.any(z0 < 0):
            raise ValueError("`M0` as mode strengths z0 must be >= 0.")
        check_initial_loss(data, z0, "M0", "z")
        Mfull = None
    else:
        Mfull = np.asarray(as_array(M0, "M0", shape=(p, p), host=True))
        if not np.allclose(Mfull, Mfull.T, rtol=0, atol=1e-12 * max(1.0, np.abs(Mfull).max())):
            raise ValueError("`M0` must be symmetric.")
        _check_realizable(Mfull, mu0, d)  # M0 = W W^T (PSD; with mu0: M0 - mu0 mu0^T / d PSD)
        check_initial_loss(data, Mfull, "M0")
        z0 = None
    diag_ok = commuting and (Mfull is None or _is_diag_in_basis(data, Mfull))
    if form == "auto":
        form = "M-mu" if model is not None else ("log_z" if diag_ok else "M")
    if form == "log_z" and not diag_ok:
        raise ValueError(
            "`form='log_z'` needs M0 = P diag(z0) P^T (diagonal in the data's eigenbasis P); "
            "its off-diagonal part is not zero. Use form='M'."
        )
    cdata = cast(Any, data)  # AbstractCommutingData where `commuting`
    if commuting and Mfull is not None:
        z0 = np.asarray(cdata.z(jnp.asarray(Mfull)))
    if Mfull is None:
        assert z0 is not None
        Pm = cdata.P
        Mfull = np.diag(z0) if Pm is None else np.asarray(Pm) @ np.diag(z0) @ np.asarray(Pm).T
    return form, commuting, Mfull, z0


def _check_solver(solver):
    """(solver, Stratonovich?) of `sgd_sde`: default `diffrax.Heun()`; `TypeError` for a solver
    that is neither Ito nor Stratonovich."""
    if solver is None:
        solver = diffrax.Heun()
    if isinstance(solver, diffrax.AbstractStratonovichSolver):
        return solver, True
    if isinstance(solver, diffrax.AbstractItoSolver):
        return solver, False
    raise TypeError(
        f"`solver` must be a diffrax SDE solver (AbstractItoSolver or AbstractStratonovichSolver); found {solver!r}."
    )


def _state_and_coeffs(form: str, data, model, scales, initial):
    """(y0, coefficients) of `sgd_sde`'s SDE in `form`: u0 = log z0 (0 where z0 = 0, masked) and
    `_Coeffs` in log space, M0 and `_Coeffs` in M space, (M0, mu0) and `_CoeffsMmu` for a model
    with g, B. `scales` = (lr, s2 the sampling variance factor, Stratonovich?); `initial` = (M0,
    z0, mu0, d)."""
    lr, s2, strat = scales
    Mfull, z0, mu0, d = initial
    if form == "log_z":
        assert z0 is not None
        mask = z0 > 0
        y0 = jnp.asarray(np.where(mask, np.log(np.where(mask, z0, 1.0)), 0.0))
        return y0, _Coeffs(data, jnp.asarray(lr), jnp.asarray(s2), jnp.asarray(mask), form, strat)
    if form == "M":
        return jnp.asarray(Mfull), _Coeffs(data, jnp.asarray(lr), jnp.asarray(s2), None, form, strat)
    assert model is not None and mu0 is not None and d is not None
    y0 = (jnp.asarray(Mfull), jnp.asarray(mu0))
    return y0, _CoeffsMmu(model, jnp.asarray(lr), jnp.asarray(s2), jnp.asarray(float(d)), strat)


def _step_count(lr: float, rate: float, dt0, ts) -> int:
    """The number of constant steps of `sgd_sde` to ts[-1]: of `dt0`, or of DT0_FACTOR sqrt(lr /
    rate) by default (rate = max(1, the drift's fastest rate)). **Raises:** `ValueError` above
    the stability edge lr x rate > 2, for a bad `dt0`, or beyond `MAX_STEPS` steps."""
    rate = max(1.0, rate)
    if lr * rate > 2.0:  # a linear step 1 - lr x rate leaves (-1, 1): the map is unstable
        raise ValueError(
            f"`lr`={lr!r} is above the stability edge of minibatch SGD at the initial state: lr x rate = "
            f"{lr * rate:.3g} > 2 (rate = {rate:.3g}, the drift's fastest rate). The map oscillates or diverges "
            "there, and the SDE (an expansion in small lr) does not describe it; use nqf.closed_sgd."
        )
    if dt0 is None:
        step = DT0_FACTOR * float(np.sqrt(lr / rate))
    else:
        step = float(dt0)
        if not (np.isfinite(step) and step > 0):
            raise ValueError(f"`dt0` must be finite and > 0; found {dt0!r}.")
    n_float = ts[-1] / step
    if n_float > MAX_STEPS:  # e.g. lr = 1e-300: dt0 ~ 1e-151, a loop that never ends
        raise ValueError(
            f"sgd_sde would take {n_float:.3g} steps of dt0 = {step:.3g} to reach ts[-1] = {ts[-1]:g}, more "
            f"than {MAX_STEPS:.0e}: `lr` = {lr!r} is too small for its default dt0 = sqrt(lr / rate) / 4 "
            "(or `dt0` is): give a larger `dt0` or `lr`, or shorter `ts`."
        )
    return max(1, int(np.ceil(n_float - 1e-9)))


@jax.jit
def _rate(coeffs: Any, y0):
    """The fastest rate of the drift at y0 (1/time): the spectral radius of its Jacobian (20
    power iterations) and, in log space, the largest |du/dt| (the growth rates at small z)."""
    leaves, tree = jax.tree.flatten(y0)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    v = jax.tree.unflatten(tree, [jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])

    def norm(t):
        return jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree.leaves(t)))

    def step(_, carry):
        v, _ = carry
        Jv = jax.jvp(coeffs.drift, (y0,), (v,))[1]
        n = norm(Jv)
        return jax.tree.map(lambda x: x / jnp.maximum(n, 1e-300), Jv), n

    v = jax.tree.map(lambda x: x / norm(v), v)
    _, rate = jax.lax.fori_loop(0, 20, step, (v, jnp.asarray(0.0)))
    if coeffs.form == "log_z":
        rate = jnp.maximum(rate, jnp.max(jnp.abs(coeffs.drift(y0))))
    return rate


def _mean_field_init(model, M0, p):
    """(mu0 (p,), d) for the "M-mu" form from ``M0 = (M0, mu0, d)``; (None, None) otherwise."""
    if model is None:
        if isinstance(M0, tuple):
            raise ValueError("`M0` as a tuple (M0, mu0, d) is for an NQFModel with g, B or f0; give M0 (p, p).")
        return None, None
    if not isinstance(M0, tuple):
        if model.g is None and model.B is None:  # f0 only: mu does not enter
            return np.zeros(p), 1
        raise ValueError("`M0`: a model with g or B needs the tuple (M0 (p, p), mu0 (p,), d) (d the width).")
    if len(M0) != 3:
        raise ValueError(f"`M0` as a tuple must be (M0, mu0, d); found {len(M0)} entries.")
    _, mu0, d = M0
    _check_float64(mu0, "M0")
    mu0 = np.asarray(as_array(mu0, "mu0", shape=(p,), host=True))
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"`M0`: the width d in (M0, mu0, d) must be an integer >= 1; found {d!r}.")
    return mu0, int(d)


def _is_diag_in_basis(data, M):
    Pm = data.P
    Mt = M if Pm is None else np.asarray(Pm).T @ M @ np.asarray(Pm)
    off = Mt - np.diag(np.diag(Mt))
    return np.abs(off).max() <= 1e-12 * max(np.abs(Mt).max(), np.finfo(float).tiny)


@functools.partial(jax.jit, static_argnums=(4, 5, 6))
def _solve(coeffs: Any, y0, ts, dt, solver, extra, commuting: bool, key):
    """One path: the SDE from y0 at t = 0 to ts[-1] in constant steps dt (dividing ts[-1]),
    saved at `ts`."""
    TRACE_COUNT[0] += 1
    m = coeffs.m

    def f(t, y, args):
        out = coeffs.drift(y)
        return out if extra is None else out + extra(y)

    path = diffrax.UnsafeBrownianPath(shape=(m,), key=key)
    terms = diffrax.MultiTerm(diffrax.ODETerm(f), _Noise(coeffs, path))
    t1 = ts[-1]
    sol = diffrax.diffeqsolve(
        terms,
        solver,
        0.0,
        t1,
        dt,
        y0,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.ConstantStepSize(),
        max_steps=None,  # ForwardMode: a plain while loop, no per-step storage
        adjoint=diffrax.ForwardMode(),
    )
    ys = cast(Any, sol.ys)
    if coeffs.form == "M-mu":
        model = coeffs.model
        loss = jax.vmap(lambda M, mu: jnp.mean((model.outputs(M, mu) - model.y) ** 2))(*ys)
        return ys[0], ys[1], None, loss
    data = coeffs.data
    if coeffs.form == "log_z":
        z = jax.vmap(lambda u: glv_z(u, coeffs.mask))(ys)
        loss = jnp.mean((data.outputs_z(z) - data.y) ** 2, axis=-1)
        return None, None, z, loss
    loss = jax.vmap(lambda M: jnp.mean((data.traces(M) - data.y) ** 2))(ys)
    z = jax.vmap(data.z)(ys) if commuting else None
    return ys, None, z, loss
