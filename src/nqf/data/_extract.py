"""Automatic extraction of g(x), A(x), B(x) of any JAX module f(W, x) at W = 0 (Theorems 1, 12).

The module is a function ``f(W, x)`` of the weights W of shape (p, d) -- one column per neuron,
any width d -- and of one input x (any pytree; a batch has a leading axis m on every leaf). It
returns a scalar or a vector of k outputs.

By permutation symmetry every diagonal Hessian block H_ii at W = 0 is the same matrix and every
off-diagonal block H_ij (i != j) is the same matrix, so **two neurons suffice**: `extract`
evaluates f at width d = 2 and computes (forward over reverse in the two columns)

    g(x) = grad_{w_1} f(0),   A_H(x) = H_11 / 2,   B(x) = H_12 / 2,

never the (p d)^2 Hessian of a wide module. When A_H has the feed-forward form
1/2 [[0, C], [C^T, 0]] on contiguous row groups (THEORY sec. 2, Eq. E3) and B = 0, only the block
C = H_{z1 z2} is computed (min(k1, k2) Hessian-vector products per input) and returned as
`FeedForwardData`; otherwise the dense (m k, p, p) blocks, after a memory estimate. Every
per-input computation runs in chunks of inputs (`nqf.data._extract_blocks`).
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

**Returns** (of `extract`): the data (`FeedForwardData` for a feed-forward module, else
`DenseData`: m k matrices A_H, labels) when g = B = 0 and f(0) = 0 (|f(0)| at round-off level,
below `f0_rtol` relative to the output scale, counts as 0: the type does not depend on rounding);
otherwise an `NQFModel` with g, B (model convention: A = A_H - B, see `nqf.NQFModel`) and f0.
`extract_report` returns the same together with the measured check values. A module whose
quadratic part at W = 0 vanishes (constant, linear or purely cubic f) gives A = 0 with a
`DegenerateWarning`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PyTree

from .._core._checks import as_array, keyword_options
from .._core._config import require_x64
from .._core._errors import NQFWarning
from . import _extract_blocks as _blocks
from ._model import NQFModel
from ._operators import AbstractData, DenseData, FeedForwardData

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


class DegenerateWarning(NQFWarning):
    """The quadratic part of the module at W = 0 vanishes (A = 0 for every input): constant,
    linear or purely cubic f. The NQF is trivial (M does not move under the MSE flow with g = 0)."""


class ZGZWarning(NQFWarning):
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
    - `failed`: names of the failed checks ("symmetry", "width", "zgz", "smoothness");
    - `structure`: ``"feedforward"`` (the data are `FeedForwardData`, Eq. E3) or ``"dense"``;
    - `split`: (front, k1, k2, back) row counts of a feed-forward result (None for dense);
    - `structure_residual`: the largest block the feed-forward form drops (diagonal blocks,
      front/back rows; measured on every input by columns and random probes) relative to max |C|
      (nan for dense); at most `structure_tol`;
    - `structure_note`: why a dense result was returned under ``structure="auto"`` (the block that
      is nonzero, the verification that failed, or B != 0; empty otherwise);
    - `factorization`: how C = a b^T is stored ("a = C, b = I_k2", "a = I_k1, b = C^T" or
      "svd rank r: a = U S, b = V"; empty for dense);
    - `chunk_size`, `workspace_bytes`: the inputs per chunk of the main autodiff program and the
      workspace of one chunk (XLA's memory analysis of the compiled program; the traced bound
      where the backend does not report it).

    For a feed-forward result `B_norm` is max |B r| over random probes r on every input (B = 0
    verified) and `block_symmetry` is 2 B_norm / max |H|.
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
    structure: str = "dense"
    split: tuple[int, int, int, int] | None = None
    structure_residual: float = float("nan")
    structure_note: str = ""
    factorization: str = ""
    chunk_size: int = 0
    workspace_bytes: float = 0.0


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
    """f(W, x) for the batch, as (m, k) (traced only, by `_probe`)."""
    out = jax.vmap(lambda xx: jnp.atleast_1d(jnp.asarray(f(W, xx), dtype=jnp.float64)))(x)
    if out.ndim != 2:
        raise ValueError(f"`f(W, x)` must return a scalar or a vector of outputs; found shape {out.shape[1:]}.")
    return out


def _probe(f, p: int, x) -> int:
    """Trace f(W, x) at W of shape (p, 2) (no computation) and return the number k of outputs: a
    function that cannot take p rows gets an error naming `p`, not a raw shape error from deep
    inside the user's code."""
    W = jax.ShapeDtypeStruct((p, 2), jnp.float64)
    try:
        out = jax.eval_shape(lambda WW: _outputs(f, WW, x), W)
    except (TypeError, ValueError, IndexError) as err:
        if "must return a scalar or a vector" in str(err):
            raise
        raise ValueError(
            f"`f(W, x)` fails for W of shape (p, d) = ({p}, 2) on the inputs `x`: is `p` the number of "
            f"parameters of one neuron (the rows of W)? {type(err).__name__}: {err}"
        ) from err
    return int(out.shape[1])


@dataclasses.dataclass(frozen=True)
class _Normalized:
    """f_d(W, x) / c(d): the sum form of a module with a declared width normalisation c(d)
    (hashable, so the compiled programs are reused for the same f)."""

    f: object
    kind: str

    def __call__(self, W, x):
        return jnp.asarray(self.f(W, x), dtype=jnp.float64) / _NORMALIZATIONS[self.kind](W.shape[1])


class _ById:
    """An unhashable f (e.g. an equinox module holding arrays) keyed by identity, so that the
    compiled programs (static in f) are reused when the same object is extracted again."""

    def __init__(self, f):
        self.f = f

    def __call__(self, W, x):
        return self.f(W, x)

    def __hash__(self):
        return id(self.f)

    def __eq__(self, other):
        return isinstance(other, _ById) and other.f is self.f


def _hashable(f):
    try:
        hash(f)
    except TypeError:
        return _ById(f)
    return f


def _is_count(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer))


def _layout(f, p, groups):
    """(p, groups, group names) from the arguments and the optional attributes `f.p`,
    `f.groups`, `f.group_names` of an adapter object.

    **Raises:** `ValueError` for a missing or bad p, a p that disagrees with `f.p`, or groups that
    are not positive integers summing to p (naming where they came from)."""
    f_p = getattr(f, "p", None)
    if p is None:
        if f_p is None:
            raise ValueError(
                "`p` (parameters per neuron, the rows of W) is required: `f` has no attribute `p` to take it from."
            )
        p, where = f_p, "`f.p`"
    else:
        where = "`p`"
    if not _is_count(p) or p < 1:
        raise ValueError(f"{where} (parameters per neuron) must be an integer >= 1; found {p!r}.")
    p = int(p)
    if f_p is not None and where == "`p`" and _is_count(f_p) and int(f_p) != p:
        raise ValueError(
            f"`p` = {p} disagrees with `f.p` = {int(f_p)} (the parameters per neuron of the "
            "adapter `f`); pass p=None to use f.p."
        )
    names = None
    if groups is None and getattr(f, "groups", None) is not None:
        groups, src = f.groups, "`f.groups`"
        names = getattr(f, "group_names", None)
    else:
        src = "`groups`"
    if groups is None:
        return p, (1,) * p, None
    try:
        groups = tuple(groups)
    except TypeError:
        raise ValueError(
            f"{src} must be a sequence of group sizes (positive integers summing to p = {p}); found {groups!r}."
        ) from None
    if not groups or not all(_is_count(g) and g >= 1 for g in groups) or sum(int(g) for g in groups) != p:
        raise ValueError(
            f"{src} must be positive integers (the sizes of consecutive row groups of W) "
            f"summing to p = {p}; found {groups!r}"
            + (f" (sum {sum(groups)})." if all(_is_count(g) for g in groups) else ".")
        )
    groups = tuple(int(g) for g in groups)
    if names is not None:
        names = tuple(names)
        if len(names) != len(groups) or not all(isinstance(n, str) for n in names):
            raise ValueError(
                f"`f.group_names` must be {len(groups)} strings, one per group of `f.groups`; found {names!r}."
            )
    return p, groups, names


_STRUCTURES = ("auto", "dense", "feedforward")


def _structure_blocks(chunks, p, groups, names, structure, seed, structure_tol, zgz_tol, memory_budget):
    """The autodiff stage: the feed-forward blocks (verified on every input) when `structure`
    allows them and they hold, else the dense blocks (after the memory check)."""
    note = ""
    if structure != "dense":
        rng = np.random.default_rng([seed, 23])
        label = _blocks.GroupNames(groups, names)
        try:
            split = _blocks.choose_split(_blocks.pattern(chunks, p, groups, rng), label, structure_tol)
            return _blocks.feedforward(chunks, p, groups, label, split, rng, structure_tol, zgz_tol, memory_budget)
        except _blocks.NoStructure as err:
            if structure == "feedforward":
                raise ExtractionError(
                    "structure='feedforward': the module is not of feed-forward form A_H = 1/2 [[0, C], "
                    f"[C^T, 0]] on contiguous row groups [front | z1 | z2 | back] (Eq. E3) with B = 0: "
                    f"{err}. Use structure='auto' (dense when the form does not hold) or 'dense'."
                ) from None
            note = f"dense because {err}"
    blocks = _blocks.dense(chunks, p, chunks.k, memory_budget)
    blocks.note = note
    return blocks


def _representation(blocks, yv, m, k, p, zgz_failed):
    """(data, B (m k, p, p) or None, factorization) from the autodiff stage: `FeedForwardData`
    of the factors of C, or `DenseData` of A_H (of A_H - B when ZGZ fails: the `NQFModel`
    convention); the dense host buffers are released once copied."""
    if blocks.C is not None:
        a, b, how = _blocks.factor(blocks.C)
        front, _, _, back = blocks.split
        return FeedForwardData(a, b, yv, front=front, back=back), None, how
    AH, B = blocks.AH, blocks.B
    blocks.AH = blocks.B = None
    if zgz_failed:
        AH -= B  # in place: A = A_H - B
    data = DenseData(AH.reshape(m * k, p, p), yv)
    del AH
    return data, (B.reshape(m * k, p, p) if zgz_failed else None), ""


@jax.jit
def _quadratic(model, W):
    """The quadratic model g^T mu + sum_i w_i^T A_H w_i + sum_{i != j} w_i^T B w_j for every
    (input, output): `model.outputs_factor` (A = A_H - B), shape (m k,)."""
    return model.outputs_factor(W, jnp.sum(W, axis=1))


def _refuse_deep(f) -> None:
    """A `DeepNetwork` has no one-layer NQF: `TypeError` naming `f` and the ways out."""
    from ._deep_network import DeepNetwork

    if isinstance(f, DeepNetwork):
        raise TypeError(
            f"`f` is a deep network ({f!r}): it has no one-layer NQF. nqf.predict solves its multi-layer NQF "
            "(Theorem 14); for one layer with the others frozen, name its neurons: nqf.Network(module, neurons=...)."
        )


def _constants_of(f) -> tuple[str, ...]:
    """The `constants` of a `Network` `f` (fixed per-neuron constants: `nqf.data._constants`)."""
    from ._network import Network

    return tuple(f.constants) if isinstance(f, Network) else ()


def extract_report(
    f: Callable[[Float[Array, "p d"], Any], ArrayLike],
    x: PyTree[Float[ArrayLike, "m ..."]],
    p: int | None = None,
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None,
    **options: Any,
) -> tuple[AbstractData | NQFModel, ExtractionReport]:
    """`extract` plus the `ExtractionReport` of its checks; returns ``(representation, report)``.

    **Arguments** (from `width` on keyword options, read from ``**options`` into `ExtractOptions`;
    an unknown one: `TypeError`):

    - `f`: ``f(W, x)`` -> scalar or (k,), W of shape (p, d) for any d >= 1 (neurons = columns).
      An object callable so may carry `p` (int), `groups` (tuple of group sizes) and
      `group_names` (tuple of str, for messages): a network adapter.
    - `x`: a batch of m inputs (array or pytree with leading axis m on every leaf).
    - `p`: the number of parameters of one neuron; None takes `f.p` (an explicit p must agree
      with it).
    - `y`: labels (m,) or (m, k); zeros if None. Multi-output data are flattened input-major
      (data index mu * k + o, Corollary 1).
    - `width`: d at which the constant f0 = f_x(0) is evaluated (it may depend on d, e.g. the sum
      over attention heads of c^T x_avg).
    - `scale`, `seed`: entry scale and seed of the random test weights and probes.
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
    - `structure`: ``"auto"`` (default) returns `FeedForwardData` when A_H = 1/2 [[0, C], [C^T, 0]]
      on contiguous row groups [front | z1 (k1) | z2 (k2) | back] (Eq. E3; front/back rows zero)
      and B = 0, verified on every input, else `DenseData` (the reason is `report.structure_note`);
      ``"feedforward"`` requires that form (else `ExtractionError` naming the nonzero block);
      ``"dense"`` always builds the (m k, p, p) matrices. See "Feed-forward result" below.
    - `groups`: sizes of the consecutive row groups of W (summing to p) that the feed-forward
      split may not cut, e.g. (n, 1) for an MLP neuron [u (n); v (1)]; None takes `f.groups`,
      else every row is its own group (the detection then costs p HVPs per sample input).
    - `chunk_size`: inputs per chunk of the per-input autodiff (each program compiles once per
      chunk; the last chunk is padded); None (default) chooses it so that one chunk's estimated
      workspace (measured on the compiled program) stays under 64 MiB and a quarter of the
      memory budget, with at most 256 inputs per chunk.
    - `memory_budget`: bytes allowed for the dense matrices, the feed-forward blocks and one
      chunk's workspace (estimated before allocation); None takes ``NQF_MEMORY_BUDGET`` or half
      the available memory (`nqf.memory`).
    - `structure_tol`: what the feed-forward form drops (the diagonal blocks and the front/back
      rows, measured by the columns of the smaller side and random probes on every input) must
      be below `structure_tol` x max |C| (`report.structure_residual`); blocks of the sample
      pattern below it count as zero.

    **Feed-forward result** (``structure="auto"`` or ``"feedforward"``, `nqf.data._extract_blocks`):
    the block pattern of A_H between row groups is found on the first min(m, 8) inputs with one
    Hessian-vector product per group; then C(x) = H_{z1 z2}(x) = 2 (A_H)_{z1 z2} (k1, k2) comes
    from k_s = min(k1, k2) HVPs per input (forward over reverse, all outputs at once; never the
    p x p Hessian), and every dropped block is verified on every input. C is stored as
    a = C, b = I_k2 (k2 <= k1) or a = I_k1, b = C^T, or as a truncated SVD a = U S, b = V of
    rank r when r <= min(k1, k2) / 2 (`report.factorization`). A block that is zero on the
    sample but not on a later input fails the verification: "auto" then computes the dense form
    (and says so in `report.structure_note`), "feedforward" raises.

    ZGZ failures always warn (`ZGZWarning`) and return the general model with g, B. A vanishing
    quadratic part (A = 0 and B = 0: constant, linear or purely cubic f) warns `DegenerateWarning`.

    **Raises:** as `extract`.
    """
    require_x64()  # in float32 the symmetry check fails at ~1e-7 and would blame the module
    _refuse_deep(f)
    o = ExtractOptions(*keyword_options("extract_report", options, **_OPTION_DEFAULTS))
    p, groups, names = _layout(f, p, o.groups)
    constants = _constants_of(f)
    f = _hashable(f) if o.normalization is None else _Normalized(_hashable(f), o.normalization)
    m = _batch_size(x)
    x = jax.tree_util.tree_map(np.asarray, x)
    k = _probe(f, p, x)
    yv = np.zeros(m * k) if y is None else _flat_labels(y, m, k)
    chunks = _blocks.Chunks(f, x, m, k, None if o.chunk_size is None else int(o.chunk_size), o.memory_budget)
    blocks = _structure_blocks(
        chunks, p, groups, names, o.structure, o.seed, o.structure_tol, o.zgz_tol, o.memory_budget
    )
    main = "feedforward" if blocks.C is not None else "dense"
    rng = np.random.default_rng(o.seed)
    F = _outputs_at(chunks, p)
    symmetry, fW, f0w, fscale = _symmetry(F, p, o.scale, rng)
    width_ratio, width_defect = _width_independence(F, f0w, p, o.scale, rng)
    zref = blocks.a_max if blocks.a_max > 0 else 1.0
    g_norm = float(np.abs(blocks.g).max())
    zgz_failed = g_norm > o.zgz_tol * zref or blocks.b_max > o.zgz_tol * zref
    data, B_flat, factorization = _representation(blocks, yv, m, k, p, zgz_failed)
    model = NQFModel(data, g=blocks.g.reshape(m * k, p), B=B_flat)  # the quadratic model the checks test
    order, parity = _smoothness(F, model, blocks.g, f0w, fscale, o, rng)
    failed = [name for name, bad in _verdicts(o, symmetry, blocks.block_sym, width_defect, zgz_failed, order) if bad]
    f0 = (f0w if int(o.width) == 4 else F(np.zeros((p, int(o.width))))).reshape(-1)
    chunk_used, workspace = chunks.used[main]  # the chunk and workspace of the main stage
    report = ExtractionReport(
        symmetry=symmetry,
        block_symmetry=blocks.block_sym,
        g_norm=g_norm,
        B_norm=blocks.b_max,
        order=order,
        parity=parity,
        failed=tuple(failed),
        width_ratio=width_ratio,
        f0_norm=float(np.abs(f0).max()),
        structure=main,
        split=blocks.split,
        structure_residual=blocks.residual,
        structure_note=blocks.note,
        factorization=factorization,
        chunk_size=chunk_used,
        workspace_bytes=workspace,
    )
    _enforce(report, o, width_defect, constants, zref)
    _warn_degenerate(report, blocks.a_max, float(np.abs(fW - f0w).max()), o.scale)
    return _result(data, model, f0, report, fscale, o.f0_rtol), report


@dataclasses.dataclass(frozen=True)
class ExtractOptions:
    """The keyword options of `nqf.extract` / `extract_report` (documented there), checked on
    construction (a `ValueError` naming the option). `check_extract_options` of `nqf.predict`
    reads the valid names from its fields."""

    width: int = 2
    scale: float = 0.3
    seed: int = 0
    sym_tol: float = 1e-9
    zgz_tol: float = 1e-12
    order_bound: float = 2.5
    ts: Sequence[float] = (2e-2, 1e-2, 5e-3)
    on_error: str = "raise"
    normalization: str | None = None
    f0_rtol: float = 1e-10
    structure: str = "auto"
    groups: Sequence[int] | None = None
    chunk_size: int | None = None
    memory_budget: float | None = None
    structure_tol: float = 1e-10

    def __post_init__(self):
        if self.on_error not in ("raise", "warn"):
            raise ValueError(f"`on_error` must be 'raise' or 'warn'; found {self.on_error!r}.")
        if self.normalization not in _NORMALIZATIONS:
            raise ValueError(
                f"`normalization` must be None, 'mean' (1/d) or 'sqrt' (1/sqrt(d)); found {self.normalization!r}."
            )
        if not (np.isfinite(self.f0_rtol) and self.f0_rtol >= 0):
            raise ValueError(f"`f0_rtol` must be finite and >= 0; found {self.f0_rtol!r}.")
        if self.structure not in _STRUCTURES:
            raise ValueError(f"`structure` must be 'auto', 'dense' or 'feedforward'; found {self.structure!r}.")
        if self.chunk_size is not None and (not _is_count(self.chunk_size) or self.chunk_size < 1):
            raise ValueError(
                f"`chunk_size` must be None (automatic) or an integer >= 1 (inputs per chunk); found {self.chunk_size!r}."
            )
        if not (np.isfinite(self.structure_tol) and 0 <= self.structure_tol < 1):
            raise ValueError(f"`structure_tol` must be in [0, 1); found {self.structure_tol!r}.")


_OPTION_DEFAULTS = {fl.name: fl.default for fl in dataclasses.fields(ExtractOptions)}


def _outputs_at(chunks, p: int):
    """F(W) -> outputs (m, k) of the module at weights W (p, d) on all inputs, in chunks."""
    out_chunk = chunks.chunk("outputs", None, (jnp.zeros((p, 4)),))

    def F(WW):
        return chunks.run("outputs", None, (jnp.asarray(WW, dtype=jnp.float64),), chunk=out_chunk)[0]

    return F


def _symmetry(F, p: int, scale: float, rng):
    """Permutation symmetry at a random W (p, 4) of entry scale `scale`: (max |f(W Pi) - f(W)| /
    max |f|, f(W), f(0) at d = 4, the output scale max(|f(W)|, |f(0)|)) for a random
    non-identity permutation Pi."""
    W = scale * rng.standard_normal((p, 4))
    perm = rng.permutation(4)
    while np.all(perm == np.arange(4)):
        perm = rng.permutation(4)
    fW = F(W)
    fP = F(W[:, perm])
    f0w = F(np.zeros((p, 4)))
    fscale = max(float(np.abs(fW).max()), float(np.abs(f0w).max()), np.finfo(float).tiny)
    return float(np.abs(fP - fW).max()) / fscale, fW, f0w, fscale


def _width_independence(F, f0w, p: int, scale: float, rng):
    """(ratio, relative defect) of one nonzero neuron's contribution f_d(V) - f_d(0) at d = 4
    against d = 2 (a sum over neurons: ratio 1, defect 0; a mean: 1/2; 1/sqrt(d): 2^-1/2)."""
    V1 = np.zeros((p, 4))
    V1[:, 0] = scale * rng.standard_normal(p)
    D4 = F(V1) - f0w
    D2 = F(V1[:, :2]) - F(np.zeros((p, 2)))
    dnorm = float(np.vdot(D2, D2))
    width_ratio = float(np.vdot(D4, D2)) / dnorm if dnorm > 0 else float("nan")
    width_defect = float(np.abs(D4 - D2).max()) / max(
        float(np.abs(D2).max()), float(np.abs(D4).max()), np.finfo(float).tiny
    )
    return width_ratio, width_defect


def _smoothness(F, model, g, f0w, fscale: float, o: ExtractOptions, rng):
    """The C^3 test: (order, parity) of the remainder r(t) = f(tV) - f(0) - q(tV) of the
    quadratic `model` along three random directions V (p, 4), t in `o.ts`: the least measured
    order log2 |r(t)| / |r(t/2)| (inf at round-off), and the largest odd part relative to the even
    part at the smallest t (`g` (m, k, p): the linear term removed)."""
    m, k, p = g.shape
    ts, scale = o.ts, o.scale

    def Q(WW):
        return np.asarray(_quadratic(model, jnp.asarray(WW))).reshape(m, k)

    orders, parities = [], []
    for _ in range(3):
        V = scale * rng.standard_normal((p, 4))
        rs = [float(np.linalg.norm(F(t * V) - f0w - Q(t * V))) for t in ts]
        fq = float(np.linalg.norm(Q(ts[0] * V))) + float(np.linalg.norm(F(ts[0] * V) - f0w))
        noise = 1e-11 * max(fq, fscale * ts[0] ** 2, np.finfo(float).tiny)
        if rs[-1] <= noise and rs[-2] <= noise:
            orders.append(float("inf"))
        else:
            orders.append(
                min(
                    np.log2(max(rs[i], 1e-300) / max(rs[i + 1], 1e-300)) / np.log2(ts[i] / ts[i + 1])
                    for i in range(len(ts) - 1)
                )
            )
        t = ts[-1]
        fp = F(t * V) - f0w
        fm = F(-t * V) - f0w
        lin = 2.0 * t * np.einsum("mkp,p->mk", g, V.sum(axis=1))
        even = float(np.linalg.norm(fp + fm))
        parities.append(float(np.linalg.norm(fp - fm - lin)) / max(even, np.finfo(float).tiny) if even > noise else 0.0)
    return float(min(orders)), float(max(parities))


def _verdicts(o: ExtractOptions, symmetry, block_sym, width_defect, zgz_failed, order):
    """(check, failed?) pairs of `extract_report`'s checks against the bounds of `o`."""
    return (
        ("symmetry", symmetry > o.sym_tol or block_sym > o.sym_tol),
        ("width", width_defect > max(o.sym_tol, 1e-9)),
        ("zgz", zgz_failed),
        ("smoothness", order < o.order_bound),
    )


def _enforce(report: ExtractionReport, o: ExtractOptions, width_defect: float, constants, zref: float) -> None:
    """Raise (``on_error="raise"``) or warn for the failed checks of `report`, each naming what
    failed with its measured value and bound; a ZGZ failure warns `ZGZWarning` (an
    `ExtractionError` with `constants`). The warnings point at the caller of `extract_report`."""

    def fail(cls, msg):
        if o.on_error == "raise":
            raise cls(msg)
        warnings.warn(msg, NQFWarning, stacklevel=4)

    failed, sym_tol = report.failed, o.sym_tol
    if "symmetry" in failed:
        fail(
            SymmetryError,
            "Permutation symmetry fails: the module is not invariant under relabeling its neurons "
            f"(columns of W): max |f(W Pi) - f(W)| / max|f| = {report.symmetry:.3g} at a random W, and "
            f"max |H_12 - H_12^T| / max|H| = {report.block_symmetry:.3g} at W = 0 "
            f"(bound {sym_tol:g}). Theorem 1 does not apply; no NQF is returned.",
        )
    if "width" in failed:
        width_ratio, normalization = report.width_ratio, o.normalization
        if abs(width_ratio - 0.5) < 1e-6:
            cause = "a 1/d factor (a mean over neurons): declare it with normalization='mean'"
        elif abs(width_ratio - 2**-0.5) < 1e-6:
            cause = "a 1/sqrt(d) factor (the NTK parametrisation): declare it with normalization='sqrt'"
        else:
            cause = (
                "a dependence on d that is not a declared normalisation (e.g. a softmax or a "
                "normalisation layer across neurons): Theorem 1 needs f = sum_i phi(w_i, x)"
            )
        fail(
            NormalizationError,
            "The output depends on the width d: one neuron's contribution f_d(W) - f_d(0) differs "
            f"between d = 4 and d = 2 (relative difference {width_defect:.3g}, ratio {width_ratio:.4g}"
            + (f" after dividing by the declared normalisation {normalization!r}" if normalization else "")
            + f"). This points to {cause}. The width-2 Hessian would not be the module's "
            "expansion at other widths, so no NQF is returned.",
        )
    if "smoothness" in failed:
        fail(
            SmoothnessError,
            "C^3 smoothness at W = 0 fails: the remainder f(tW) - [quadratic model](tW) scales as "
            f"t^{report.order:.2f} (expected t^3 or faster; bound t^{o.order_bound:g}), and its odd part "
            f"relative to the even part is {report.parity:.3g} (O(t) for a smooth module). The Hessian at 0 "
            "is not the expansion of the module -- e.g. a ReLU (not differentiable at 0, "
            "positively homogeneous). Use a C^3 activation (tanh, GELU, ...).",
        )
    if "zgz" in failed:
        _zgz_failure(report.g_norm, report.B_norm, o.zgz_tol, zref, constants)


def _zgz_failure(g_norm: float, B_norm: float, zgz_tol: float, zref: float, constants) -> None:
    """A ZGZ failure (g or B above `zgz_tol` x `zref`): `ExtractionError` for a network with
    `constants` (the lift is exact only under ZGZ), else a `ZGZWarning` naming what is nonzero."""
    if constants:
        raise ExtractionError(
            f"`constants` ({', '.join(constants)}): ZGZ fails (max |g| = {g_norm:.3g}, max |B| = {B_norm:.3g}; bound "
            f"{zgz_tol * zref:.3g}), and the lifted NQF of fixed per-neuron constants is exact only under ZGZ: a "
            "neuron's gradient at zero weights g (e.g. an activation with phi'(0) != 0 behind a frozen readout: tanh, "
            "z + z^2; a bias inside the activation) would move the zero blocks of the lifted W, which the module does not have "
            "(nqf.data._constants). Train the constant (drop it from `constants`), or use an activation with "
            "phi'(0) = 0 behind it."
        )
    warnings.warn(
        "ZGZ fails: "
        + (
            f"the gradient of a neuron at W = 0 is nonzero (max |g| = {g_norm:.3g}; e.g. a bias "
            "inside the nonlinearity or an output offset per neuron)"
            if g_norm > zgz_tol * zref
            else ""
        )
        + ("; " if g_norm > zgz_tol * zref and B_norm > zgz_tol * zref else "")
        + (
            f"neurons couple at second order (max |B| = {B_norm:.3g}, H_12 != 0; e.g. a "
            "nonlinearity applied after summing the neurons)"
            if B_norm > zgz_tol * zref
            else ""
        )
        + f" (bound {zgz_tol:g} x max|A_H| = {zgz_tol * zref:.3g}). Returning the general form "
        "E2 (Theorem 12): an NQFModel with g, B; its dynamics close on (M, mu), not M alone.",
        ZGZWarning,
        stacklevel=4,
    )


def _warn_degenerate(report: ExtractionReport, aref: float, dev: float, scale: float) -> None:
    """`DegenerateWarning` when the quadratic part at W = 0 vanishes (max |A_H| and max |B| below
    1e-12 of the variation `dev` of f at weights of scale `scale`) and smoothness and width hold."""
    B_norm = report.B_norm
    if (
        not {"smoothness", "width"} & set(report.failed)
        and aref <= 1e-12 * dev / scale**2
        and B_norm <= 1e-12 * dev / scale**2
    ):
        warnings.warn(
            f"The quadratic part of f at W = 0 vanishes (max |A_H| = {aref:.3g}, max |B| = {B_norm:.3g}, "
            f"while f varies by {dev:.3g} at weights of scale {scale:g}): f is constant, linear or starts at "
            "cubic order in W, so A = 0 and the NQF is trivial (M does not move under the MSE flow with "
            "g = 0). Check that f is the intended module (e.g. a missing readout or square).",
            DegenerateWarning,
            stacklevel=3,
        )


def _result(data, model, f0, report: ExtractionReport, fscale: float, f0_rtol: float):
    """`extract`'s representation: the data when ZGZ holds and f(0) = 0 (|f(0)| <= `f0_rtol` x the
    output scale is round-off: 0), an `NQFModel(data, f0=f0)` when only f(0) != 0, else the checked
    `model` (g, B in the `NQFModel` convention A = A_H - B; B None for a feed-forward result, B = 0
    verified on every input) with f0."""
    if 0.0 < report.f0_norm <= f0_rtol * fscale:
        f0 = np.zeros_like(f0)  # round-off (e.g. a centred softmax head): f(0) = 0
    if "zgz" not in report.failed:
        return data if np.all(f0 == 0.0) else NQFModel(data, f0=f0)
    return eqx.tree_at(lambda mm: mm.f0, model, jnp.asarray(f0), is_leaf=lambda v: v is None)


def _flat_labels(y, m, k):
    y = np.asarray(as_array(y, "y"))
    if k == 1 and y.shape == (m,):
        return y
    if y.shape == (m, k):
        return y.reshape(-1)
    raise ValueError(f"`y` must have shape ({m},) or ({m}, {k}); found {y.shape}.")


def extract(
    f: Callable[[Float[Array, "p d"], Any], ArrayLike],
    x: PyTree[Float[ArrayLike, "m ..."]],
    p: int | None = None,
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None,
    **kwargs: Any,
) -> AbstractData | NQFModel:
    """Structure matrices of the module ``f(W, x)`` at W = 0 by autodiff with two neurons
    (Theorems 1, 12), in chunks of inputs.

    See `extract_report` for the arguments (`structure`, `groups`, `chunk_size`, `memory_budget`,
    ...) and checks. **Returns** m k data matrices (input-major over (input, output) pairs):

    - a feed-forward module (A_H = 1/2 [[0, C], [C^T, 0]] on contiguous row groups, Eq. E3: MLP,
      CNN + readout, attention's value-output block) with B = 0, under ``structure="auto"``
      (default) or ``"feedforward"``: `FeedForwardData` (C (m k, k1, k2) as factors a, b, with
      `front`/`back` zero rows), never an (m k, p, p) array;
    - otherwise `DenseData` of the A_H(x), shape (m k, p, p), after the memory check;
    - when ZGZ fails or f(0) != 0: an `NQFModel(data, g, B, f0)` around either (the `NQFModel` B
      convention A = A_H - B; B is None for a feed-forward result, where B = 0 is verified).

    **Raises:** `SymmetryError` if f is not invariant under permuting the columns of W;
    `NormalizationError` if f depends on the width d beyond a sum over neurons (a mean or a
    1/sqrt(d) factor not declared with `normalization`); `SmoothnessError` if f is not C^3 at 0
    (e.g. ReLU); `ExtractionError` under ``structure="feedforward"`` when the form does not hold
    (naming the nonzero block, the input where a verification failed, or B != 0), or for a
    `nqf.Network` with `constants` whose ZGZ fails (naming `constants`: the lift is exact only
    under ZGZ, `nqf.data._constants`); all are
    `ExtractionError` (`ValueError`); `MemoryBudgetError` (`nqf.memory`) before a dense
    (m k, p, p) result, the feed-forward blocks or one chunk's workspace would exceed the memory
    budget (the message names the size and the ways out); `ValueError` for a bad or missing `p`
    (or one that disagrees with `f.p`), `groups` (or `f.groups`) that are not positive integers
    summing to p, a bad `structure`, `chunk_size`, `structure_tol`, `x` (no inputs: m = 0), `y`,
    `on_error`, `normalization` or `f0_rtol`; `RuntimeError` if JAX's float64 was turned off
    after importing nqf (the checks need float64; see `nqf._core._config`). Warns `ZGZWarning`
    if g or B is nonzero, `DegenerateWarning` if A = B = 0.
    """
    return extract_report(f, x, p, y, **kwargs)[0]


def module_fn(
    module: eqx.Module,
    neurons: Sequence[tuple[Callable[[Any], Array], int]],
) -> tuple[Callable[[Float[Array, "p d"], Any], Array], int]:
    """``(f, p)`` for `extract` from an equinox module whose neurons are slices of some of its
    parameter arrays: ``nqf.Network(module, neurons=neurons)`` and its `p` (kept for nqf 0.1;
    `nqf.Network` is the full adapter: flax.nnx modules, packed attention heads, ``"auto"``,
    the layout in both directions).

    **Arguments:** `module`: an `equinox.Module`; `neurons`: ``(where, axis)`` pairs, `where(module)`
    a parameter array and `axis` its neuron axis (see `nqf.Network`).

    **Returns:** ``(f, p)``: f(W, x) (the `nqf.Network`, callable) and the parameters per neuron.

    **Raises:** `nqf.data.NeuronError` (a `ValueError`) for an empty `neurons`, an `axis` out of
    range, or listed arrays that disagree in their number of neurons.
    """
    from ._network import Network

    net = Network(module, neurons=list(neurons))
    return net, net.p
