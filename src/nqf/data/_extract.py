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

- **width independence**: a neuron's contribution f_d(W with one nonzero column v) - f_d(0) must
  not depend on the width d (compared at d = 2 and d = 4). A width-normalised layer (a mean over
  neurons, or 1/sqrt(d) as in the NTK parametrisation) fails it and is named as such
  (`NormalizationError`) instead of being mistaken for a non-smooth one; declare the
  normalisation with ``normalization="mean"`` or ``"sqrt"`` to extract the sum form
  f_d / c(d), c(d) = 1/d or 1/sqrt(d) (the module at width d is then c(d) times it:
  ``data.scaled(c(d))``).

**Returns** (of `extract`): `DenseData` (m k matrices A_H, labels) when g = B = 0 and f(0) = 0
(|f(0)| at round-off level, below `f0_rtol` relative to the output scale, counts as 0: the type
does not depend on rounding); otherwise an `NQFModel` with g, B (model convention: A = A_H - B,
see `nqf.NQFModel`) and f0. `extract_report` returns the same together with the measured check
values. A module whose quadratic part at W = 0 vanishes (constant, linear or purely cubic f)
gives A = 0 with a `DegenerateWarning`.
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from .._core._checks import as_array
from .._core._config import require_x64
from ._model import NQFModel
from ._operators import DenseData

__all__ = [
    "extract",
    "extract_report",
    "ExtractionReport",
    "ExtractionError",
    "SymmetryError",
    "SmoothnessError",
    "ZGZWarning",
    "NormalizationError",
    "DegenerateWarning",
    "module_fn",
]


class ExtractionError(ValueError):
    """A module violates an assumption of Theorem 1 needed for its NQF."""


class SymmetryError(ExtractionError):
    """The module is not invariant under permutations of its neurons (columns of W)."""


class SmoothnessError(ExtractionError):
    """The module is not C^3 at W = 0 (e.g. ReLU): the quadratic expansion is not its Taylor form."""


class NormalizationError(ExtractionError):
    """The module's output depends on the width d beyond the sum over neurons (e.g. a mean over
    neurons or a 1/sqrt(d) factor): Theorem 1's form needs a width-independent neuron."""


class DegenerateWarning(UserWarning):
    """The quadratic part of the module at W = 0 vanishes (A = 0 for every input): constant,
    linear or purely cubic f. The NQF is trivial (M does not move under the MSE flow with g = 0)."""


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
    - `width_ratio`: (f_4 - f_4(0)) / (f_2 - f_2(0)) for one nonzero neuron at widths 4 and 2 (1 for a
      width-independent neuron; 1/2 for a mean over neurons, 1/sqrt(2) for 1/sqrt(d); nan if that
      neuron's contribution is 0);
    - `f0_norm`: max |f(0)| as evaluated (before a round-off f0 is set to 0);
    - `failed`: names of the failed checks ("symmetry", "width", "zgz", "smoothness").
    """

    symmetry: float
    block_symmetry: float
    g_norm: float
    B_norm: float
    order: float
    parity: float
    failed: tuple[str, ...]
    width_ratio: float = 1.0
    f0_norm: float = 0.0


_NORMALIZATIONS = {None: None, "mean": lambda d: 1.0 / d, "sqrt": lambda d: 1.0 / np.sqrt(d)}


def _batch_size(x) -> int:
    leaves = jax.tree_util.tree_leaves(x)
    if not leaves:
        raise ValueError("`x` must be an array or a pytree of arrays with a leading batch axis m.")
    m = {int(jnp.shape(leaf)[0]) if jnp.ndim(leaf) else -1 for leaf in leaves}
    if len(m) != 1 or -1 in m:
        raise ValueError(f"Every leaf of `x` must have the same leading batch axis m; found sizes {sorted(m)}.")
    m = m.pop()
    if m < 1:
        raise ValueError("`x` must hold at least one input (a leading batch axis m >= 1); found m = 0.")
    return m


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


def _probe(f, p: int, x) -> None:
    """Trace f(W, x) at W of shape (p, 2) (no computation): a function that cannot take p rows
    gets an error naming `p`, not a raw shape error from deep inside the user's code."""
    W = jax.ShapeDtypeStruct((p, 2), jnp.float64)
    try:
        jax.eval_shape(lambda WW: _outputs(f, WW, x), W)
    except (TypeError, ValueError, IndexError) as err:
        if "must return a scalar or a vector" in str(err):
            raise
        raise ValueError(
            f"`f(W, x)` fails for W of shape (p, d) = ({p}, 2) on the inputs `x`: is `p` the number of "
            f"parameters of one neuron (the rows of W)? {type(err).__name__}: {err}"
        ) from err


@dataclasses.dataclass(frozen=True)
class _Normalized:
    """f_d(W, x) / c(d): the sum form of a module with a declared width normalisation c(d)
    (hashable, so the compiled programs are reused for the same f)."""

    f: object
    kind: str

    def __call__(self, W, x):
        return jnp.asarray(self.f(W, x), dtype=jnp.float64) / _NORMALIZATIONS[self.kind](W.shape[1])


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
                   ts=(2e-2, 1e-2, 5e-3), on_error: str = "raise", normalization: str | None = None,
                   f0_rtol: float = 1e-10):
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
    - `on_error`: ``"raise"`` (default) raises `SymmetryError` / `NormalizationError` /
      `SmoothnessError`; ``"warn"`` warns instead and still returns the (then unreliable)
      representation.
    - `normalization`: None (default: f is a plain sum over neurons), ``"mean"`` (f has a 1/d
      factor, a mean over neurons) or ``"sqrt"`` (a 1/sqrt(d) factor, the NTK parametrisation).
      With a declared normalisation the sum form f_d / c(d) is extracted; the module at width d
      is c(d) times it (``data.scaled(c(d))``).
    - `f0_rtol`: |f(0)| <= f0_rtol x (output scale) is round-off and counts as f(0) = 0, so the
      return type does not depend on rounding (the measured value is `report.f0_norm`).

    ZGZ failures always warn (`ZGZWarning`) and return the general model with g, B. A vanishing
    quadratic part (A = 0 and B = 0: constant, linear or purely cubic f) warns `DegenerateWarning`.

    **Raises:** as `extract`.
    """
    require_x64()  # in float32 the symmetry check fails at ~1e-7 and would blame the module
    if on_error not in ("raise", "warn"):
        raise ValueError(f"`on_error` must be 'raise' or 'warn'; found {on_error!r}.")
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise ValueError(f"`p` (parameters per neuron) must be an integer >= 1; found {p!r}.")
    if normalization not in _NORMALIZATIONS:
        raise ValueError(f"`normalization` must be None, 'mean' (1/d) or 'sqrt' (1/sqrt(d)); found {normalization!r}.")
    if not (np.isfinite(f0_rtol) and f0_rtol >= 0):
        raise ValueError(f"`f0_rtol` must be finite and >= 0; found {f0_rtol!r}.")
    if normalization is not None:
        f = _Normalized(f, normalization)
    m = _batch_size(x)
    x = jax.tree_util.tree_map(np.asarray, x)
    _probe(f, int(p), x)
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

    # width independence: one nonzero neuron at widths 2 and 4 (a sum over neurons: equal)
    V1 = np.zeros((p, 4))
    V1[:, 0] = scale * rng.standard_normal(p)
    D4 = np.asarray(F(V1)) - f0w
    D2 = np.asarray(F(V1[:, :2])) - np.asarray(F(np.zeros((p, 2))))
    dnorm = float(np.vdot(D2, D2))
    width_ratio = float(np.vdot(D4, D2)) / dnorm if dnorm > 0 else float("nan")
    width_defect = float(np.abs(D4 - D2).max()) / max(float(np.abs(D2).max()), float(np.abs(D4).max()),
                                                     np.finfo(float).tiny)

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
    if width_defect > max(sym_tol, 1e-9):
        failed.append("width")
    if g_norm > zgz_tol * zref or B_norm > zgz_tol * zref:
        failed.append("zgz")
    if order < order_bound:
        failed.append("smoothness")
    f0 = (f0w if int(width) == 4 else np.asarray(F(np.zeros((p, int(width)))))).reshape(-1)
    f0_norm = float(np.abs(f0).max())
    report = ExtractionReport(symmetry=symmetry, block_symmetry=block_sym, g_norm=g_norm, B_norm=B_norm,
                              order=order, parity=parity, failed=tuple(failed), width_ratio=width_ratio,
                              f0_norm=f0_norm)

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
    if "width" in failed:
        if abs(width_ratio - 0.5) < 1e-6:
            cause = "a 1/d factor (a mean over neurons): declare it with normalization='mean'"
        elif abs(width_ratio - 2**-0.5) < 1e-6:
            cause = "a 1/sqrt(d) factor (the NTK parametrisation): declare it with normalization='sqrt'"
        else:
            cause = ("a dependence on d that is not a declared normalisation (e.g. a softmax or a "
                     "normalisation layer across neurons): Theorem 1 needs f = sum_i phi(w_i, x)")
        fail(NormalizationError,
             "The output depends on the width d: one neuron's contribution f_d(W) - f_d(0) differs "
             f"between d = 4 and d = 2 (relative difference {width_defect:.3g}, ratio {width_ratio:.4g}"
             + (f" after dividing by the declared normalisation {normalization!r}" if normalization else "")
             + f"). This points to {cause}. The width-2 Hessian would not be the module's "
             "expansion at other widths, so no NQF is returned.")
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

    dev = float(np.abs(fW - f0w).max())
    if not {"smoothness", "width"} & set(failed) and aref <= 1e-12 * dev / scale**2 and B_norm <= 1e-12 * dev / scale**2:
        warnings.warn(
            f"The quadratic part of f at W = 0 vanishes (max |A_H| = {aref:.3g}, max |B| = {B_norm:.3g}, "
            f"while f varies by {dev:.3g} at weights of scale {scale:g}): f is constant, linear or starts at "
            "cubic order in W, so A = 0 and the NQF is trivial (M does not move under the MSE flow with "
            "g = 0). Check that f is the intended module (e.g. a missing readout or square).",
            DegenerateWarning, stacklevel=2)
    if 0.0 < f0_norm <= f0_rtol * fscale:
        f0 = np.zeros_like(f0)  # round-off (e.g. a centred softmax head): f(0) = 0
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
    `NQFModel(DenseData(A_H - B), g, B, f0)` otherwise (the `NQFModel` B convention).

    **Raises:** `SymmetryError` if f is not invariant under permuting the columns of W;
    `NormalizationError` if f depends on the width d beyond a sum over neurons (a mean or a
    1/sqrt(d) factor not declared with `normalization`); `SmoothnessError` if f is not C^3 at 0
    (e.g. ReLU); all are `ExtractionError` (`ValueError`); `ValueError` for a bad `p`, `x` (no
    inputs: m = 0), `y`, `on_error`, `normalization` or `f0_rtol`; `RuntimeError` if JAX's
    float64 was turned off after importing nqf (the checks need float64; see `nqf._core._config`).
    Warns `ZGZWarning` if g or B is nonzero, `DegenerateWarning` if A = B = 0.
    """
    return extract_report(f, x, p, y, **kwargs)[0]


def module_fn(module, neurons):
    """Adapter for equinox modules: ``f(W, x)`` and p for `extract` from an `eqx.Module` whose
    neurons are slices of some of its parameter arrays, so that f(W, x) need not be hand-written.

    **Arguments:**

    - `module`: an `equinox.Module` (any callable pytree) computing the output from one input x.
    - `neurons`: a sequence of ``(where, axis)``: `where(module)` returns a parameter array and
      `axis` is its neuron axis (e.g. ``(lambda m: m.layers[0].weight, 0)`` for the rows of an
      `eqx.nn.MLP`'s hidden layer and ``(lambda m: m.layers[1].weight, 1)`` for the readout's
      entries; for attention, the head axis of the per-head projections). Every other array of
      the module stays as it is.

    Neuron i's parameters are the slices at index i along each `axis`, flattened and
    concatenated in the order of `neurons`: w_i (p,) with p the sum of the slice sizes. f(W, x)
    rebuilds the module at width d = W.shape[1] (the listed arrays get d slices; the module's
    own width does not matter) and calls it on x.

    **Returns:** ``(f, p)``; use ``nqf.extract(f, x, p)``.

    **Raises:** `ValueError` for an empty `neurons`, an `axis` out of range, or listed arrays that
    disagree in their number of neurons; `TypeError` if `where` does not return an array.
    """
    import equinox as eqx

    neurons = list(neurons)
    if not neurons:
        raise ValueError("`neurons` must list at least one (where, axis) pair.")
    getters, axes, rests, widths = [], [], [], []
    for j, item in enumerate(neurons):
        if not (isinstance(item, tuple) and len(item) == 2 and callable(item[0])):
            raise ValueError(f"`neurons[{j}]` must be a pair (where, axis) with `where` callable; found {item!r}.")
        where, axis = item
        leaf = where(module)
        if not hasattr(leaf, "shape") or not hasattr(leaf, "ndim"):
            raise TypeError(f"`neurons[{j}]`: `where(module)` must return a parameter array; found "
                            f"{type(leaf).__name__}.")
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -leaf.ndim <= axis < leaf.ndim:
            raise ValueError(f"`neurons[{j}]`: `axis` must be an integer axis of the array of shape "
                             f"{tuple(leaf.shape)}; found {axis!r}.")
        axis = int(axis) % leaf.ndim
        getters.append(where)
        axes.append(axis)
        rests.append(tuple(s for i, s in enumerate(leaf.shape) if i != axis))
        widths.append(int(leaf.shape[axis]))
    if len(set(widths)) != 1:
        raise ValueError(f"The arrays listed in `neurons` must have the same number of neurons along "
                         f"their axes; found {widths}.")
    sizes = [int(np.prod(r, dtype=int)) for r in rests]
    p = int(sum(sizes))
    offsets = np.cumsum([0] + sizes)

    def f(W, x):
        d = W.shape[1]
        leaves = []
        for j in range(len(getters)):
            part = W[offsets[j]:offsets[j + 1]].T.reshape((d,) + rests[j])  # neuron axis first
            leaves.append(jnp.moveaxis(part, 0, axes[j]))
        built = eqx.tree_at(lambda mod: [g(mod) for g in getters], module, leaves)
        return built(x)

    return f, p
