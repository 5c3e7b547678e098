"""Automatic extraction of g(x), A(x), B(x) of any JAX module f(W, x) at W = 0 (Theorems 1, 12).

The module is a function ``f(W, x)`` of the weights W of shape (p, d) -- one column per neuron,
any width d -- and of one input x (any pytree; a batch has a leading axis m on every leaf). It
returns a scalar or a vector of k outputs.

By permutation symmetry every diagonal Hessian block H_ii at W = 0 is the same matrix and every
off-diagonal block H_ij (i != j) is the same matrix, so **two neurons suffice**: `extract`
evaluates f at width d = 2 and computes (jax.hessian / jacfwd of grad in the two columns)

    g(x) = grad_{w_1} f(0),   A_H(x) = H_11 / 2,   B(x) = H_12 / 2,

i.e. (2p)^2 second derivatives per input and output, never the (p d)^2 Hessian of a wide module.
Then (THEORY E1-E2) f_x(W) = f_x(0) + g^T mu + sum_i w_i^T A_H w_i + sum_{i != j} w_i^T B w_j
+ O(|W|^3).

Checks (each names what failed; see `extract`):

- **permutation symmetry**: f(W Pi) = f(W) at a random small W (p, 4) for a random non-identity
  permutation Pi, and H_12 = H_12^T at d = 2;
- **ZGZ** (the zero-gradient condition of Theorem 1): g = 0 and B = 0. A fixed bias inside the
  nonlinearity gives g != 0; a nonlinearity applied after summing the neurons gives B != 0;
- **C^3 at W = 0**: the remainder r(t) = f(tW) - q(tW) (q the quadratic model) must be O(t^3). A ReLU
  (positively homogeneous, f(tW) = t^2 f(W) for t > 0) leaves r(t) ~ t^2: the measured order
  log2 |r(t)| / |r(t/2)| falls below 3 (bound 2.5), and its t^2 part is also odd in t
  (f(tW) != f(-tW)).

**Returns** (of `extract`): `DenseData` (m k matrices A_H, labels) when g = B = 0 and f(0) = 0;
otherwise an `NQFModel` with g, B (model convention: A = A_H - B, see `nqf.model`) and f0.
`extract_report` returns the same together with the measured check values.
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import as_array
from ._config import require_x64
from .data import DenseData
from .model import NQFModel

__all__ = [
    "extract",
    "extract_report",
    "ExtractionReport",
    "ExtractionError",
    "SymmetryError",
    "SmoothnessError",
    "ZGZWarning",
]


class ExtractionError(ValueError):
    """A module violates an assumption of Theorem 1 needed for its NQF."""


class SymmetryError(ExtractionError):
    """The module is not invariant under permutations of its neurons (columns of W)."""


class SmoothnessError(ExtractionError):
    """The module is not C^3 at W = 0 (e.g. ReLU): the quadratic expansion is not its Taylor form."""


class ZGZWarning(UserWarning):
    """ZGZ fails (g != 0 or B != 0): the NQF is the general form E2 with g, B (Theorem 12)."""


@dataclasses.dataclass(frozen=True)
class ExtractionReport:
    """Measured values of the checks of `extract` (all relative to the output scale).

    - `symmetry`: max |f(W Pi) - f(W)| / scale at a random W and permutation Pi (bound `sym_tol`);
    - `block_symmetry`: max |H_12 - H_12^T| / max|H| at d = 2 (H_12 = H_21^T always, and
      H_12 = H_21 under the swap of the two neurons);
    - `g_norm`, `B_norm`: max |g| and max |B| (ZGZ holds iff both are 0 up to `zgz_tol`);
    - `order`: min over the test directions of the measured order of the quadratic remainder
      (>= 3 expected; `inf` when the remainder is at rounding level, e.g. an exact quadratic);
    - `parity`: max |(f(tW) - f(-tW)) - 2 t g^T mu| / |f(tW) + f(-tW) - 2 f(0)| at the smallest t
      (O(t) for a C^3 module; O(1) for ReLU);
    - `failed`: names of the failed checks ("symmetry", "zgz", "smoothness").
    """

    symmetry: float
    block_symmetry: float
    g_norm: float
    B_norm: float
    order: float
    parity: float
    failed: tuple[str, ...]


def _batch_size(x) -> int:
    leaves = jax.tree_util.tree_leaves(x)
    if not leaves:
        raise ValueError("`x` must be an array or a pytree of arrays with a leading batch axis m.")
    m = {int(jnp.shape(leaf)[0]) if jnp.ndim(leaf) else -1 for leaf in leaves}
    if len(m) != 1 or -1 in m:
        raise ValueError(f"Every leaf of `x` must have the same leading batch axis m; found sizes {sorted(m)}.")
    return m.pop()


def _outputs(f, W, x):
    """f(W, x) for the batch, as (m, k)."""
    out = jax.vmap(lambda xx: jnp.atleast_1d(jnp.asarray(f(W, xx), dtype=jnp.float64)))(x)
    if out.ndim != 2:
        raise ValueError(f"`f(W, x)` must return a scalar or a vector of outputs; found shape {out.shape[1:]}.")
    return out


def _blocks(f, p: int, x):
    """g (m, k, p), H_11, H_12 (m, k, p, p) by autodiff at W = 0 (forward over reverse)."""

    def two(w1, w2, xx):
        return jnp.atleast_1d(jnp.asarray(f(jnp.stack([w1, w2], axis=1), xx), dtype=jnp.float64))

    z = jnp.zeros(p)

    def per_input(xx):
        g = jax.jacfwd(two, argnums=0)(z, z, xx)
        h11, h12 = jax.jacfwd(jax.jacrev(two, argnums=0), argnums=(0, 1))(z, z, xx)
        return g, h11, h12

    return jax.vmap(per_input)(x)


# Module-level compiled programs, keyed on the (hashable) function f: extracting again from the
# same f with inputs of the same shapes reuses them.
_blocks_jit = jax.jit(_blocks, static_argnums=(0, 1))
_outputs_jit = jax.jit(_outputs, static_argnums=0)


@jax.jit
def _quadratic(W, g, AH, B):
    """sum_i g^T w_i + sum_i w_i^T AH w_i + sum_{i != j} w_i^T B w_j for every (input, output)."""
    mu = jnp.sum(W, axis=1)
    lin = jnp.einsum("mkp,p->mk", g, mu)
    diag = jnp.einsum("pd,mkpq,qd->mk", W, AH - B, W)
    mf = jnp.einsum("p,mkpq,q->mk", mu, B, mu)
    return lin + diag + mf


def extract_report(f, x, p: int, y=None, *, width: int = 2, scale: float = 0.3, seed: int = 0,
                   sym_tol: float = 1e-9, zgz_tol: float = 1e-12, order_bound: float = 2.5,
                   ts=(2e-2, 1e-2, 5e-3), on_error: str = "raise"):
    """`extract` plus the `ExtractionReport` of its checks; returns ``(representation, report)``.

    **Arguments:**

    - `f`: ``f(W, x)`` -> scalar or (k,), W of shape (p, d) for any d >= 1 (neurons = columns).
    - `x`: a batch of m inputs (array or pytree with leading axis m on every leaf).
    - `p`: the number of parameters of one neuron.
    - `y`: labels (m,) or (m, k); zeros if None. Multi-output data are flattened input-major
      (data index mu * k + o, Corollary 1).
    - `width`: d at which the constant f0 = f_x(0) is evaluated (it may depend on d, e.g. the sum
      over attention heads of c^T x_avg).
    - `scale`, `seed`: entry scale and seed of the random test weights (checks only).
    - `sym_tol`: bound on the relative symmetry defect; `zgz_tol`: bound on max |g|, max |B|
      relative to max |A_H| (or absolute if A_H = 0); `order_bound`: least accepted remainder order;
      `ts`: decreasing step sizes t of the smoothness test (each halving the previous one).
    - `on_error`: ``"raise"`` (default) raises `SymmetryError` / `SmoothnessError`; ``"warn"``
      warns instead and still returns the (then unreliable) representation.

    ZGZ failures always warn (`ZGZWarning`) and return the general model with g, B.

    **Raises:** as `extract`.
    """
    require_x64()  # in float32 the symmetry check fails at ~1e-7 and would blame the module
    if on_error not in ("raise", "warn"):
        raise ValueError(f"`on_error` must be 'raise' or 'warn'; found {on_error!r}.")
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise ValueError(f"`p` (parameters per neuron) must be an integer >= 1; found {p!r}.")
    m = _batch_size(x)
    x = jax.tree_util.tree_map(np.asarray, x)
    g, h11, h12 = (np.asarray(v) for v in _blocks_jit(f, int(p), x))
    k = g.shape[1]
    AH = 0.5 * (h11 + np.swapaxes(h11, -1, -2)) / 2.0
    B = 0.5 * (h12 + np.swapaxes(h12, -1, -2)) / 2.0
    hscale = max(float(np.abs(h11).max()), float(np.abs(h12).max()), np.finfo(float).tiny)
    # H_12 = H_21^T, and H_21 = H_12 for a symmetric module: H_12 must be symmetric
    block_sym = float(np.abs(h12 - np.swapaxes(h12, -1, -2)).max()) / hscale

    rng = np.random.default_rng(seed)
    W = scale * rng.standard_normal((p, 4))
    perm = rng.permutation(4)
    while np.all(perm == np.arange(4)):
        perm = rng.permutation(4)

    def F(WW):
        return _outputs_jit(f, WW, x)

    fW = np.asarray(F(W))
    fP = np.asarray(F(W[:, perm]))
    f0w = np.asarray(F(np.zeros((p, 4))))
    fscale = max(float(np.abs(fW).max()), float(np.abs(f0w).max()), np.finfo(float).tiny)
    symmetry = float(np.abs(fP - fW).max()) / fscale

    aref = float(np.abs(AH).max())
    zref = aref if aref > 0 else 1.0
    g_norm = float(np.abs(g).max())
    B_norm = float(np.abs(B).max())

    # C^3 test: remainder of the quadratic model along three random directions (d = 4).
    Q = _quadratic
    orders, parities = [], []
    for trial in range(3):
        V = scale * rng.standard_normal((p, 4))
        rs = []
        for t in ts:
            ft = np.asarray(F(t * V)) - f0w
            rs.append(ft - np.asarray(Q(t * V, g, AH, B)))
        rs = [float(np.linalg.norm(r)) for r in rs]
        fq = float(np.linalg.norm(np.asarray(Q(ts[0] * V, g, AH, B)))) + \
            float(np.linalg.norm(np.asarray(F(ts[0] * V)) - f0w))
        noise = 1e-11 * max(fq, fscale * ts[0] ** 2, np.finfo(float).tiny)
        if rs[-1] <= noise and rs[-2] <= noise:
            orders.append(float("inf"))
        else:
            orders.append(min(np.log2(max(rs[i], 1e-300) / max(rs[i + 1], 1e-300)) / np.log2(ts[i] / ts[i + 1])
                              for i in range(len(ts) - 1)))
        t = ts[-1]
        fp = np.asarray(F(t * V)) - f0w
        fm = np.asarray(F(-t * V)) - f0w
        lin = 2.0 * t * np.einsum("mkp,p->mk", g, V.sum(axis=1))
        even = float(np.linalg.norm(fp + fm))
        parities.append(float(np.linalg.norm(fp - fm - lin)) / max(even, np.finfo(float).tiny)
                        if even > noise else 0.0)
    order = float(min(orders))
    parity = float(max(parities))

    failed = []
    if symmetry > sym_tol or block_sym > sym_tol:
        failed.append("symmetry")
    if g_norm > zgz_tol * zref or B_norm > zgz_tol * zref:
        failed.append("zgz")
    if order < order_bound:
        failed.append("smoothness")
    report = ExtractionReport(symmetry=symmetry, block_symmetry=block_sym, g_norm=g_norm, B_norm=B_norm,
                              order=order, parity=parity, failed=tuple(failed))

    def fail(cls, msg):
        if on_error == "raise":
            raise cls(msg)
        warnings.warn(msg, UserWarning, stacklevel=3)

    if "symmetry" in failed:
        fail(SymmetryError,
             "Permutation symmetry fails: the module is not invariant under relabeling its neurons "
             f"(columns of W): max |f(W Pi) - f(W)| / max|f| = {symmetry:.3g} at a random W, and "
             f"max |H_12 - H_12^T| / max|H| = {block_sym:.3g} at W = 0 "
             f"(bound {sym_tol:g}). Theorem 1 does not apply; no NQF is returned.")
    if "smoothness" in failed:
        fail(SmoothnessError,
             "C^3 smoothness at W = 0 fails: the remainder f(tW) - [quadratic model](tW) scales as "
             f"t^{order:.2f} (expected t^3 or faster; bound t^{order_bound:g}), and its odd part "
             f"relative to the even part is {parity:.3g} (O(t) for a smooth module). The Hessian at 0 "
             "is not the expansion of the module -- e.g. a ReLU (not differentiable at 0, "
             "positively homogeneous). Use a C^3 activation (tanh, GELU, ...).")
    if "zgz" in failed:
        warnings.warn(
            "ZGZ fails: "
            + (f"the gradient of a neuron at W = 0 is nonzero (max |g| = {g_norm:.3g}; e.g. a bias "
               "inside the nonlinearity or an output offset per neuron)" if g_norm > zgz_tol * zref else "")
            + ("; " if g_norm > zgz_tol * zref and B_norm > zgz_tol * zref else "")
            + (f"neurons couple at second order (max |B| = {B_norm:.3g}, H_12 != 0; e.g. a "
               "nonlinearity applied after summing the neurons)" if B_norm > zgz_tol * zref else "")
            + f" (bound {zgz_tol:g} x max|A_H| = {zgz_tol * zref:.3g}). Returning the general form "
            "E2 (Theorem 12): an NQFModel with g, B; its dynamics close on (M, mu), not M alone.",
            ZGZWarning, stacklevel=2)

    f0 = (f0w if int(width) == 4 else np.asarray(F(np.zeros((p, int(width)))))).reshape(-1)
    yv = np.zeros(m * k) if y is None else _flat_labels(y, m, k)
    A_flat = AH.reshape(m * k, p, p)
    if "zgz" not in failed:
        data = DenseData(A_flat, yv)
        if np.all(f0 == 0.0):
            return data, report
        return NQFModel(data, f0=f0), report
    B_flat = B.reshape(m * k, p, p)
    data = DenseData(A_flat - B_flat, yv)
    return NQFModel(data, g=g.reshape(m * k, p), B=B_flat, f0=f0), report


def _flat_labels(y, m, k):
    y = np.asarray(as_array(y, "y"))
    if k == 1 and y.shape == (m,):
        return y
    if y.shape == (m, k):
        return y.reshape(-1)
    raise ValueError(f"`y` must have shape ({m},) or ({m}, {k}); found {y.shape}.")


def extract(f, x, p: int, y=None, **kwargs):
    """Structure matrices of the module ``f(W, x)`` at W = 0 by autodiff with two neurons.

    See `extract_report` for the arguments and checks. **Returns:** `DenseData` of the A_H(x)
    (shape (m k, p, p), input-major over (input, output) pairs) when ZGZ holds and f(0) = 0; an
    `NQFModel(DenseData(A_H - B), g, B, f0)` otherwise (the `nqf.model` B convention).

    **Raises:** `SymmetryError` if f is not invariant under permuting the columns of W;
    `SmoothnessError` if f is not C^3 at 0 (e.g. ReLU); both are `ExtractionError`
    (`ValueError`); `ValueError` for a bad `p`, `x`, `y` or `on_error`; `RuntimeError` if JAX's
    float64 was turned off after importing nqf (the checks need float64; see `nqf._config`).
    Warns `ZGZWarning` if g or B is nonzero.
    """
    return extract_report(f, x, p, y, **kwargs)[0]
