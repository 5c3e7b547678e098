"""Fused numba kernels for the commuting (GLV) dynamics at very large p (THEORY sec. 5).

For commuting data (Assumption 1, A_mu = P diag(Lambda[mu]) P^T) everything the MSE dynamics
needs is the mode-strength vector z_k = (P^T M P)_kk >= 0 and two maps, z -> Lambda z and
delta -> Lambda^T delta. This module evaluates them as fused, multi-threaded loops
(`numba.njit(parallel=True)`), never forming the p x p competition matrix C' = Lambda^T Lambda
(rank <= m) and allocating nothing beyond O(m) work arrays and the O(p) outputs. Every public
function also has a JAX implementation (`backend="jax"`), the reference the numba kernels are
tested against (to ~1e-13 relative), and ``backend="auto"`` picks numba above a size threshold.

Two data layouts:

- **dense** `Lambda` (m, p) with labels y (m,), m << p (`nqf.CommutingData`; its `P` is not
  used: z is already the diagonal in the P basis);
- **diagonal** m = p, A_k = lam_k e_k e_k^T, given as the vector `lam` (p,) and y (p,)
  (`nqf.DiagonalData`, or any object with `.lam` and `.y`): Lambda = diag(lam) is never formed.

**Functions.**

- `glv_rhs`: the GLV right-hand side, Eq. E13 (gradient flow, time t = eta * steps),
  z_k' = z_k r_k or, in log form (u = log z), u_k' = r_k, with
  r_k = -(8/m) sum_mu lambda_{mu,k} Delta_mu - 2 gamma and Delta = Lambda z - y (Eq. E11);
  diagonal: r_k = -(8/p) lam_k (lam_k z_k - y_k) - 2 gamma.
- `glv_gd`: the exact discrete map of full-batch GD / minibatch SGD on z (Theorem 2 restricted
  to commuting data, below), for n steps, saving z at requested steps.

**The exact z-map (Theorem 2 for commuting data).** With the batch loss
L = (1/b) sum_{j<b} (f_{mu_j} - y_{mu_j})^2 + gamma/2 |W|^2 (`nqf.batch_indices`; full batch: b = m,
every sample once), Eq. E4 gives grad_W L = (H + gamma I) W with H = (4/b) sum_j Delta_{mu_j}
A_{mu_j} = P diag(h - gamma) P^T, so W+ = P D P^T W with D = diag(1 - eta h) and
P^T M+ P = D (P^T M P) D: the diagonal closes exactly, for any M (not only diagonal ones),

    z_k+ = z_k (1 - eta h_k)^2,   h_k = (4/b) sum_j lambda_{mu_j,k} Delta_{mu_j} + gamma,

with Delta_mu = sum_k lambda_{mu,k} z_k - y_mu. Repeated entries of a batch count with their
multiplicity. For the diagonal layout h_k = (4/b) c_k lam_k (lam_k z_k - y_k) + gamma, c_k the
count of k in the batch (c_k = 1 for all k in full batch, b = p). This is `nqf.closed_sgd` /
`nqf.train_w` (tested against both) at O(m p) per step (O(p) diagonal) instead of O(p^3).

**Cost and memory traffic** (float64; `bytes_moved`; measured in `benchmarks/bench_kernels.py`):

- dense RHS: two parallel passes over blocks of p, (1) Delta = Lambda z - y (a reduction over p
  into per-chunk partial sums, no races; four rows of Lambda per loop), (2) out = r (times z);
  each reads Lambda once, so 8 (2 m + 3) p bytes in the z form (Lambda and z in each pass, out
  written once) and 8 (2 m + 2) p in the log form (pass 2 does not need u). Two passes are
  necessary: Delta depends on all of z.
- diagonal RHS: one fused pass, 32 p bytes (lam, y, z in; out).
- log form: exp(u) by a vectorized polynomial (`_exp_into`, max error 2.2e-16 relative).
- diagonal full-batch GD: coordinates decouple, so all steps run block by block in L1 (lam, y,
  z0 read once, one write per saved z): compute-bound, ~5x faster than one pass per step.
- dense GD / minibatch SGD: the two passes per step (a minibatch reads only its b rows);
  diagonal minibatch SGD touches only the b batch coordinates per step (weight decay is applied
  lazily as one scale factor, folded in at saves).

**Threads.** The kernels use numba's thread pool (`numba.set_num_threads` / NUMBA_NUM_THREADS).
Importing this module sets OMP_WAIT_POLICY=passive unless the variable is already set: with
numba's OpenMP layer spin-waiting, a machine with more runnable threads than cores made single
small evaluations up to 1000x slower (18 ms instead of 20 us, measured).

**Backend selection.** ``"auto"`` uses numba when the work per evaluation, m p (p for the
diagonal layout), is at least `AUTO_THRESHOLD_RHS` = 10^5 for `glv_rhs` and
`AUTO_THRESHOLD_GD` = 3 * 10^5 for `glv_gd`, JAX otherwise. Measured on the 2-core development
VM (shared, best of 30; `python -m nqf.kernels` prints the RHS table): one `glv_rhs` call costs
~20-40 us with numba and ~60-80 us with JAX at p <= 10^4, so the JAX reference is kept where a
call costs microseconds either way (and needs no numba compilation); numba is 2.2-3.4x faster at
work 10^5 - 4 * 10^6. `glv_gd`'s dense path loops over steps in Python (~45 us per step on top
of the passes), so JAX's compiled loop wins up to work ~10^5 (0.3x at p = 10^4, m = 4) and
numba from ~4 * 10^5 (1.2-1.4x at p = 10^5, m = 4; diagonal minibatch 2.6-5x from p = 10^4).

**Compilation.** Kernels compile on first use with ``cache=True`` (machine code stored in
`nqf/__pycache__`, reused by later processes until this file changes). Measured first calls
with an empty cache on the shared 2-core VM (load ~3): dense RHS 10.3 s (both passes), diagonal
RHS 3.3 s, diagonal GD 3.2 s, diagonal SGD 4.9 s (dense GD and SGD reuse the RHS passes):
~22 s in all. Read-only inputs (the JAX-backed arrays of `CommutingData` / `DiagonalData`) are
a separate numba specialization, compiled (and cached) once more on first use: 11.7 s dense,
3.3 s diagonal. With a warm cache, loading takes ~0.1-1 s per kernel.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .._core._config import require_x64
from .._core.io import Saveable
from ..dynamics._train_args import (
    check_count,
    check_lr,
    check_saves_memory,
    check_weight_decay,
    loop_counts,
    resolve_batches,
    save_schedule,
)

__all__ = [
    "AUTO_THRESHOLD_GD",
    "AUTO_THRESHOLD_RHS",
    "BACKENDS",
    "GLVTrajectory",
    "bytes_moved",
    "glv_gd",
    "glv_rhs",
    "select_backend",
]

BACKENDS = ("auto", "numba", "jax")
# "auto" uses numba from this much work per evaluation (m p dense, p diagonal); see the module
# docstring and `_crossover` (python -m nqf.kernels) for the measurements behind them.
AUTO_THRESHOLD_RHS = 100_000
AUTO_THRESHOLD_GD = 300_000


def _nb():
    """The numba kernels (`nqf.solvers._numba`), imported on first use: numba loads only when a
    numba backend runs."""
    from . import _numba

    return _numba


def __getattr__(name: str):  # the kernels' private names, as before the split (tests use _exp_into)
    if name in ("_exp_into", "_nb_delta", "_nb_apply", "_nb_diag_rhs", "_nb_diag_gd", "_nb_diag_sgd", "_dense_gd"):
        return getattr(_nb(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------------------------
# JAX reference implementations
# --------------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("log", "diag"))
def _jax_rhs(L, y, v, gamma, mask, *, log, diag):
    z = jnp.where(mask, jnp.exp(jnp.where(mask, v, 0.0)), 0.0) if log else jnp.where(mask, v, 0.0)
    if diag:
        r = -(8.0 / v.shape[0]) * L * (L * z - y) - 2.0 * gamma
    else:
        r = -(8.0 / L.shape[0]) * ((L @ z - y) @ L) - 2.0 * gamma
    return jnp.where(mask, r if log else r * z, 0.0)


def _jax_loss(L, y, z, diag):
    d = L * z - y if diag else L @ z - y
    return jnp.mean(d**2)


def _jax_h(L, y, z, gamma, rows, diag):
    """h = (4/b) sum_j lambda_{rows_j} Delta_{rows_j} + gamma (rows None: full batch)."""
    if diag:
        p = z.shape[0]
        if rows is None:
            return (4.0 / p) * L * (L * z - y) + gamma
        Lb = L[rows]
        hb = (4.0 / rows.shape[0]) * Lb * (Lb * z[rows] - y[rows])
        return jnp.zeros(p).at[rows].add(hb) + gamma
    if rows is None:
        return (4.0 / L.shape[0]) * ((L @ z - y) @ L) + gamma
    Lb = L[rows]
    return (4.0 / rows.shape[0]) * ((Lb @ z - y[rows]) @ Lb) + gamma


@functools.partial(jax.jit, static_argnames=("n_saves", "has_remainder", "diag"))
def _jax_gd(L, y, z0, lr, gamma, idx, n_saves, save_every, remainder, has_remainder, diag):
    def step(k, z):
        rows = None if idx is None else jax.lax.dynamic_index_in_dim(idx, k, keepdims=False)
        return z * (1.0 - lr * _jax_h(L, y, z, gamma, rows, diag)) ** 2

    def block(carry, n):
        def body(_, carry):
            z, k = carry
            return step(k, z), k + 1

        return jax.lax.fori_loop(0, n, body, carry)

    def scan_body(carry, _):
        carry = block(carry, save_every)
        return carry, carry[0]

    carry0 = (z0, jnp.asarray(0, dtype=jnp.int32))
    carry, zs = jax.lax.scan(scan_body, carry0, None, length=n_saves)
    parts = [z0[None], zs]
    if has_remainder:
        parts.append(block(carry, remainder)[0][None])
    zs = jnp.concatenate(parts, axis=0)
    return zs, jax.vmap(lambda z: _jax_loss(L, y, z, diag))(zs)


# --------------------------------------------------------------------------------------------
# argument handling
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Problem:
    L: np.ndarray  # Lambda (m, p) or lam (p,)
    y: np.ndarray
    diag: bool

    @property
    def p(self) -> int:
        return self.L.shape[-1]

    @property
    def m(self) -> int:
        return self.y.shape[0]

    @property
    def work(self) -> int:
        return self.p if self.diag else self.m * self.p


def _f64(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"`{name}` must be a numeric array; found dtype {arr.dtype}.")
    if np.iscomplexobj(arr):
        raise TypeError(f"`{name}` must be real; found complex dtype {arr.dtype}.")
    return np.ascontiguousarray(arr, dtype=np.float64)


def _first_bad(x: np.ndarray, name: str, what: str, bad: np.ndarray) -> ValueError:
    i = int(np.argmax(bad))
    return ValueError(
        f"`{name}` must be {what}; found {int(bad.sum())} offending entries (first at index {i}: {float(x[i])!r})."
    )


def _check_finite(x: np.ndarray, name: str, mask=None) -> None:
    bad = ~np.isfinite(x)
    if mask is not None:
        bad &= mask
    if bad.any():
        raise _first_bad(x, name, "finite", bad)


def _problem(data, y, check: bool) -> _Problem:
    """Resolve (data or Lambda/lam, y) to numpy arrays, checking shapes (and values if `check`
    and they were given as raw arrays). Refuses without JAX float64 (the JAX backend)."""
    require_x64()
    if hasattr(data, "lam") and hasattr(data, "y"):  # DiagonalData (before `.Lambda`: O(p^2))
        if y is not None:
            raise ValueError("`y` is taken from the data object; do not pass it separately.")
        L, yy, diag, raw = data.lam, data.y, True, False
    elif hasattr(data, "Lambda") and hasattr(data, "y"):  # CommutingData
        if y is not None:
            raise ValueError("`y` is taken from the data object; do not pass it separately.")
        L, yy, diag, raw = data.Lambda, data.y, False, False
    elif isinstance(data, (np.ndarray, jax.Array)):
        if y is None:
            raise ValueError("With a raw `Lambda` (m, p) or `lam` (p,) array, give the labels `y` too.")
        L, yy, raw = data, y, True
        diag = np.ndim(L) == 1
    else:
        raise TypeError(
            "`data` must be an `nqf.CommutingData`, an `nqf.DiagonalData` (or any object with "
            "`.lam` and `.y`), or a raw array `Lambda` (m, p) / `lam` (p,) with `y`; found "
            f"{type(data).__name__}."
        )
    name = "lam" if diag else "Lambda"
    L = _f64(L, name)
    yy = _f64(yy, "y")
    if diag:
        if L.ndim != 1:
            raise ValueError(f"`lam` must be a 1-d array of shape (p,); found shape {L.shape}.")
        if yy.shape != L.shape:
            raise ValueError(
                f"`y` must have shape ({L.shape[0]},) (one label per mode, m = p) to match `lam`; found {yy.shape}."
            )
    else:
        if L.ndim != 2:
            raise ValueError(f"`Lambda` must be a 2-d array of shape (m, p); found shape {L.shape}.")
        if yy.shape != (L.shape[0],):
            raise ValueError(f"`y` must have shape ({L.shape[0]},) (one label per row of `Lambda`); found {yy.shape}.")
    if L.shape[-1] < 1 or yy.shape[0] < 1:
        raise ValueError(f"`{name}` must have p >= 1 modes and m >= 1 rows; found {L.shape}.")
    if raw and check:
        _check_finite(L.ravel(), name)
        _check_finite(yy, "y")
    return _Problem(L, yy, diag)


def _check_backend(backend, prob: _Problem, kind: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of {BACKENDS}; found {backend!r}.")
    if backend == "auto":
        thr = AUTO_THRESHOLD_RHS if kind == "rhs" else AUTO_THRESHOLD_GD
        return "numba" if prob.work >= thr else "jax"
    return backend


def select_backend(data, *, y=None, backend: str = "auto", kind: str = "rhs") -> str:
    """The backend `glv_rhs` (``kind="rhs"``) or `glv_gd` (``kind="gd"``) uses for `data`
    (arguments as there): ``"numba"`` when the work per evaluation (m p dense, p diagonal) is
    >= `AUTO_THRESHOLD_RHS` / `AUTO_THRESHOLD_GD`, else ``"jax"``; an explicit ``"numba"`` or
    ``"jax"`` is returned as is.

    **Raises:** `ValueError` for an unknown backend or kind, and the shape errors of `glv_rhs`.
    """
    if kind not in ("rhs", "gd"):
        raise ValueError(f"`kind` must be 'rhs' or 'gd'; found {kind!r}.")
    return _check_backend(backend, _problem(data, y, check=False), kind)


def _state(x, name: str, p: int) -> np.ndarray:
    x = _f64(x, name)
    if x.shape != (p,):
        raise ValueError(f"`{name}` must have shape ({p},) (one entry per mode) to match the data; found {x.shape}.")
    return x


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------


def glv_rhs(
    data,
    z,
    *,
    y=None,
    weight_decay: float = 0.0,
    log: bool = False,
    mask=None,
    out=None,
    backend: str = "auto",
    check: bool = True,
) -> np.ndarray:
    """The GLV right-hand side of the MSE gradient flow on commuting data (Eq. E13).

    z form (``log=False``): out_k = dz_k/dt = r_k z_k; log form (``log=True``, input u = log z):
    out_k = du_k/dt = r_k, where

        r_k = -(8/m) sum_mu lambda_{mu,k} Delta_mu - 2 gamma,   Delta = Lambda z - y  (Eq. E11)

    (diagonal data, m = p: r_k = -(8/p) lam_k (lam_k z_k - y_k) - 2 gamma). Time is
    gradient-flow time t = eta * (GD steps). The rank-m competition C' = Lambda^T Lambda is
    applied as Lambda^T (Lambda z), never formed. Modes with mask False are dead (z_k = 0, as
    for z_k(0) = 0): they do not enter Delta and get out_k = 0 (the convention of
    `nqf.solve_flow`'s GLV form).

    **Arguments:**

    - `data`: an `nqf.CommutingData` (dense Lambda (m, p); its P is not used, z is already in
      the P basis), an `nqf.DiagonalData` or any object with `.lam` (p,) and `.y` (p,) (diagonal
      layout, O(p) memory), or a raw array: `Lambda` (m, p) or `lam` (p,), with `y` given.
    - `z`: the state, shape (p,): z (z form) or u = log z (log form).
    - `y`: labels, shape (m,) ((p,) for the diagonal layout); only with a raw array `data`
      (a data object carries its own).
    - `weight_decay`: gamma >= 0 (penalty gamma/2 |W|^2).
    - `log`: evaluate the log form (input u, output u').
    - `mask`: boolean (p,) of live modes, or None (all live).
    - `out`: optional preallocated float64 C-contiguous writable array (p,) for the result.
    - `backend`: ``"numba"`` (fused parallel kernels), ``"jax"`` (the jitted reference) or
      ``"auto"`` (numba when m p >= `AUTO_THRESHOLD_RHS`, p for the diagonal layout).
    - `check`: scan raw `Lambda`/`lam`/`y` for non-finite values (one O(m p) pass; data objects
      are validated at construction and never rescanned). The state is always checked; numba
      does it for free (a checksum inside pass 1, a full scan only if it is not finite).

    **Returns:** `out` (a new array if None), float64 (p,), in units of 1 / (gradient-flow
    time). Usable as a scipy/diffrax-style vector field: ``lambda t, u: glv_rhs(data, u,
    log=True, out=buf)``. Cost (numba): two passes over Lambda (one over lam), no allocation
    beyond O(m); see the module docstring for the bytes moved and the measured speed.

    **Raises:** `ValueError` for shapes that do not match (z, y, mask, out), a non-finite live
    entry of `z` (or of raw `Lambda`, `lam`, `y` with `check`), weight_decay < 0 or not finite,
    an unknown backend, a read-only or non-contiguous `out`; `TypeError` for a bad `data` or a
    non-numeric array; `RuntimeError` if JAX's float64 was turned off after importing nqf.
    """
    prob = _problem(data, y, check)
    backend = _check_backend(backend, prob, "rhs")
    gamma = check_weight_decay(weight_decay)
    p = prob.p
    name = "u" if log else "z"
    v = _state(z, name, p)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ or mask.shape != (p,):
            raise ValueError(
                f"`mask` must be a boolean array of shape ({p},); found dtype {mask.dtype} and shape {mask.shape}."
            )
        mask = np.ascontiguousarray(mask)
    if out is None:
        out = np.empty(p)
    elif not (
        isinstance(out, np.ndarray)
        and out.dtype == np.float64
        and out.shape == (p,)
        and out.flags.c_contiguous
        and out.flags.writeable
    ):
        raise ValueError(
            f"`out` must be a writable C-contiguous float64 numpy array of shape ({p},); found "
            f"{type(out).__name__} " + (f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else "") + "."
        )
    if backend == "jax":
        _check_finite(v, name, mask)
        m_arr = np.ones(p, dtype=bool) if mask is None else mask
        res = _jax_rhs(prob.L, prob.y, v, gamma, m_arr, log=bool(log), diag=prob.diag)
        np.copyto(out, np.asarray(res))
        return out
    has_mask = mask is not None
    mk = mask if has_mask else np.ones(1, dtype=np.bool_)
    if prob.diag:
        chk = _nb()._nb_diag_rhs(prob.L, prob.y, v, -8.0 / p, -2.0 * gamma, bool(log), mk, has_mask, out)
    else:
        rows = np.arange(prob.m)
        delta, chk = _nb()._nb_delta(prob.L, rows, v, prob.y, bool(log), mk, has_mask)
        chk = chk + delta.sum()  # also catches exp overflow in the log form
        _nb()._nb_apply(prob.L, rows, (-8.0 / prob.m) * delta, -2.0 * gamma, v, 0 if log else 1, mk, has_mask, out)
    if not math.isfinite(chk):
        _check_finite(v, name, mask)  # names the entry; passes on mere overflow
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class GLVTrajectory(Saveable):
    """Result of `glv_gd`. `n` is the number of saved steps.

    **Attributes:** `steps` (n,) int; `t` = lr * steps, gradient-flow time (n,); `z` the mode
    strengths after those steps (n, p); `loss` the full-training-set MSE
    (1/m) sum_mu Delta_mu^2 without the weight-decay penalty (n,); `lr`; `backend` used.
    """

    steps: np.ndarray
    t: np.ndarray
    z: np.ndarray
    loss: np.ndarray
    lr: float
    backend: str


def glv_gd(
    data,
    z0,
    *,
    y=None,
    lr,
    steps: int,
    weight_decay: float = 0.0,
    batch_indices=None,
    batch_size: int | None = None,
    key=None,
    save_every: int = 1,
    backend: str = "auto",
    check: bool = True,
) -> GLVTrajectory:
    """Full-batch GD or minibatch SGD on commuting data, exactly, on the mode strengths z.

    Iterates z_k <- z_k (1 - lr h_k)^2, h_k = (4/b) sum_j lambda_{mu_j,k} Delta_{mu_j} + gamma
    over the batch mu_1..mu_b of each step (all m samples for full batch), which is Theorem 2's
    map E6 restricted to commuting data (module docstring): the same z_k = (P^T M P)_kk as
    `nqf.closed_sgd` and `nqf.train_w` (MSE loss, no momentum) from any M0 with
    diag(P^T M0 P) = z0, at O(m p) per step (O(p) diagonal; diagonal full batch runs all steps
    in cache). Step n is gradient-flow time t = lr * n; as lr -> 0 it converges to the flow of
    `glv_rhs` (Eq. E13).

    **Arguments:**

    - `data`, `y`: as for `glv_rhs` (dense `Lambda` (m, p) or diagonal `lam` (p,)).
    - `z0`: initial mode strengths (p,), finite and >= 0 (z = diag of P^T M P with M PSD).
    - `lr`: eta > 0; `steps`: integer >= 1; `save_every`: integer >= 1 (step 0 and the last
      step are always saved; each save stores p floats).
    - `weight_decay`: gamma >= 0 (penalty gamma/2 |W|^2).
    - Batches as in `nqf.closed_sgd`: full batch by default; `batch_indices` (steps, b) integer
      array (repeats count twice); or `batch_size` b with `key` (int seed or PRNG key, default
      0) drawn by `nqf.batch_indices` (identical to what `closed_sgd` draws; it draws a
      (steps, m) array of uniforms, so for m = p ~ 10^7 pass your own `batch_indices`).
    - `backend`: ``"numba"``, ``"jax"`` or ``"auto"`` (numba when m p >= `AUTO_THRESHOLD_GD`).
    - `check`: scan raw `Lambda`/`lam`/`y` for non-finite values.

    **Returns:** a `GLVTrajectory` (steps, t, z (n, p), loss (n,)).

    **Raises:** `ValueError` for z0 of the wrong shape, non-finite or negative, lr <= 0 or not
    finite, weight_decay < 0, steps/save_every not integers >= 1, a bad batch schedule
    (shape, range, batch size outside [1, m]) or both `batch_indices` and `batch_size`, an
    unknown backend, and the shape errors of `glv_rhs`; `FloatingPointError` if z becomes
    non-finite (reduce `lr`); `RuntimeError` if JAX's float64 was turned off after importing nqf.
    """
    prob = _problem(data, y, check)
    backend = _check_backend(backend, prob, "gd")
    lr = check_lr(lr)
    steps = check_count(steps, "steps")
    save_every = check_count(save_every, "save_every")
    gamma = check_weight_decay(weight_decay)
    z0 = _state(z0, "z0", prob.p)
    _check_finite(z0, "z0")
    if (z0 < 0).any():
        raise _first_bad(z0, "z0", ">= 0 (z_k = (P^T M P)_kk of a PSD M)", z0 < 0)
    check_saves_memory("glv_gd", steps, save_every, prob.p + 1)  # z (p,) and the loss
    idx = resolve_batches(batch_indices, batch_size, key, prob.m, steps)
    saved, n_saves, remainder = save_schedule(steps, save_every)
    if backend == "jax":
        zs, loss = _jax_gd(
            prob.L, prob.y, z0, lr, gamma, idx, n_saves, *loop_counts(save_every, remainder), diag=prob.diag
        )
        zs, loss = np.asarray(zs), np.asarray(loss)
    else:
        zs = np.empty((saved.shape[0], prob.p))
        save_steps = saved.astype(np.int64)
        if prob.diag and idx is None:
            loss = _nb()._nb_diag_gd(prob.L, prob.y, z0, lr * 4.0 / prob.p, lr * gamma, save_steps, zs)
        elif prob.diag:
            rows = np.sort(np.asarray(idx, dtype=np.int64), axis=1)
            loss = _nb()._nb_diag_sgd(prob.L, prob.y, z0.copy(), rows, lr, gamma, save_steps, zs)
        else:
            rows = None if idx is None else np.asarray(idx, dtype=np.int64)
            loss = _nb()._dense_gd(prob.L, prob.y, z0.copy(), rows, lr, gamma, save_steps, zs)
    ok = np.isfinite(zs).all(axis=1)
    if not ok.all():
        raise FloatingPointError(
            f"GD on z diverged: non-finite z by step {int(saved[np.argmax(~ok)])} (lr={lr:g}). Reduce `lr`."
        )
    return GLVTrajectory(steps=saved, t=lr * saved, z=zs, loss=loss, lr=lr, backend=backend)


def bytes_moved(m: int | None, p: int, *, log: bool = False) -> int:
    """Bytes a `glv_rhs` evaluation must move between memory and the cores (float64), counting
    every array read or written once per pass (what a perfect streaming kernel moves; hardware
    write-allocate traffic is not counted, as for the copy baseline's read + write):

    - dense (m, p), z form: pass 1 reads Lambda and z, pass 2 reads Lambda and z and writes out:
      8 (2 m + 3) p; log form (pass 2 does not need z): 8 (2 m + 2) p.
    - diagonal (m = None): one pass reading lam, y, z and writing out: 32 p.
    """
    if m is None:
        return 32 * p
    return 8 * (2 * m + (2 if log else 3)) * p


def _crossover(sizes=(1_000, 3_000, 10_000, 30_000, 100_000, 1_000_000), m: int = 4, repeat: int = 30) -> list[tuple]:
    """Best-of-`repeat` time (seconds) of one `glv_rhs` call per backend and layout, for the
    `AUTO_THRESHOLD` choice: rows (layout, p, work, numba, jax)."""
    import time

    rng = np.random.default_rng(0)
    rows = []
    for p in sizes:
        for layout in ("dense", "diag"):
            L = rng.standard_normal(p) if layout == "diag" else rng.standard_normal((m, p))
            y = rng.standard_normal(p if layout == "diag" else m)
            z = rng.random(p)
            out = np.empty(p)
            best = {}
            for backend in ("numba", "jax"):
                glv_rhs(L, z, y=y, out=out, backend=backend, check=False)
                t_best = np.inf
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    glv_rhs(L, z, y=y, out=out, backend=backend, check=False)
                    t_best = min(t_best, time.perf_counter() - t0)
                best[backend] = t_best
            work = p if layout == "diag" else m * p
            rows.append((layout, p, work, best["numba"], best["jax"]))
    return rows


if __name__ == "__main__":
    print(f"{'layout':>6} {'p':>9} {'work':>9} {'numba us':>10} {'jax us':>10} {'jax/numba':>9}")
    for layout, p, work, tn, tj in _crossover():
        print(f"{layout:>6} {p:>9} {work:>9} {tn * 1e6:>10.1f} {tj * 1e6:>10.1f} {tj / tn:>9.2f}")
