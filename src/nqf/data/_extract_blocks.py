"""The per-input autodiff of `nqf.extract`, in chunks of inputs: the dense Hessian blocks (Theorems
1, 12), the detection and verification of the feed-forward structure A = 1/2 [[0, C], [C^T, 0]]
(THEORY sec. 2, Eq. E3), and the memory estimates made before anything large is allocated.

Every per-input program runs on the inputs in chunks of c inputs (the last chunk padded by
repeating the last input, so each program compiles once per chunk shape). The chunk is chosen so
that the program's workspace stays under a target (64 MiB, or a quarter of the memory budget;
at most 256 inputs): the workspace is first bounded from the traced program (the bytes of all
intermediate values of one input) and then measured on the compiled program (XLA's memory analysis), which also sees
what the lowering adds (a vmapped convolution with per-input kernels grows quadratically with
the chunk on CPU).

Derivatives are taken at W = 0 with two neurons, f evaluated at d = 2 (`_two`):
H_11 v = d/dt grad_{w_1} f(t v, 0) and H_12 v = d/dt grad_{w_1} f(0, t v) (forward over reverse),
one Hessian-vector product (HVP) per tangent, never the (p d)^2 Hessian.

**Feed-forward path** (``structure="auto"`` / ``"feedforward"``), for the row groups of W:

1. *detection* on the first min(m, 8) inputs: one HVP per group b with a random vector supported
   on group b; block (a, b) of A_H = H_11 / 2 counts as nonzero if the result restricted to group a
   exceeds `structure_tol` times the largest block. A split [front | z1 | z2 | back] into
   contiguous groups with nonzero blocks only in z1 x z2 and z2 x z1 is chosen (the one with the
   smallest min(k1, k2));
2. *blocks on every input*: the columns H_11[:, z_s] of the smaller side z_s (k_s HVPs per input,
   every output at once), giving C = H_{z1 z2} = 2 (A_H)_{z1 z2}; the groups of the larger side
   whose columns vanish on every input become front/back rows;
3. *verification on every input*: the columns give H[z_s, z_s] and the rows beyond z_s exactly;
   random probes r supported off z_s give H r, which must vanish off z_s (the larger side's
   diagonal block and the front/back rows). Everything dropped is measured relative to max |C|
   (the `residual`); above `structure_tol` the structure is refused. Random probes of H_12 (on
   every input) decide whether B = H_12 / 2 vanishes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.extend.core as jcore
import jax.numpy as jnp
import numpy as np

from .._core.memory import budget as _budget
from .._core.memory import check as _check_memory
from .._core.memory import fmt_bytes

WORKSPACE_TARGET = 64 * 2**20  # bytes of autodiff workspace per chunk (auto chunk_size)
MAX_CHUNK = 256  # inputs per chunk at most (auto): larger chunks gain no speed, may lose it
SAMPLE = 8  # inputs used to detect the block pattern
N_PROBES = 2  # random probes per input for the verification and for B


# ------------------------------------------------------------------------------------------------
# per-input programs (f is static; `static` is a tuple of hashable layout constants)
# ------------------------------------------------------------------------------------------------
def _two(f, w1, w2, xx):
    """f at width 2 with neurons (w1, w2), as a (k,) vector."""
    return jnp.atleast_1d(jnp.asarray(f(jnp.stack([w1, w2], axis=1), xx), dtype=jnp.float64))


def _grad1(f, xx):
    """(w1, w2) -> grad_{w1} f, shape (k, p): the reverse pass the HVPs differentiate forward."""
    return lambda w1, w2: jax.jacrev(_two, argnums=1)(f, w1, w2, xx)


def _hvp11(f, p, xx, V):
    """H_11 v for the rows v of V (n, p) at W = 0: (n, k, p)."""
    z = jnp.zeros(p)
    grad = _grad1(f, xx)
    return jax.vmap(lambda v: jax.jvp(lambda w: grad(w, z), (z,), (v,))[1])(V)


def _hvp12(f, p, xx, V):
    """H_12 v (the second neuron's tangent) for the rows v of V (n, p): (n, k, p)."""
    z = jnp.zeros(p)
    grad = _grad1(f, xx)
    return jax.vmap(lambda v: jax.jvp(lambda w: grad(z, w), (z,), (v,))[1])(V)


def _group_max(v, groups):
    """max over the rows of each group of the last axis: (..., p) -> (..., n_groups)."""
    ids = np.repeat(np.arange(len(groups)), groups)
    out = jax.ops.segment_max(jnp.moveaxis(v, -1, 0), ids, num_segments=len(groups), indices_are_sorted=True)
    return jnp.moveaxis(out, 0, -1)


def _dense_one(f, static, xx):
    """g (k, p), A_H = Sym(H_11)/2 and B = Sym(H_12)/2 (k, p, p), max |H_12 - H_12^T| and max |H|."""
    (p,) = static
    z = jnp.zeros(p)
    g = jax.jacrev(_two, argnums=1)(f, z, z, xx)
    h11, h12 = jax.jacfwd(jax.jacrev(_two, argnums=1), argnums=(1, 2))(f, z, z, xx)
    sym = lambda h: 0.25 * (h + jnp.swapaxes(h, -1, -2))  # noqa: E731
    asym = jnp.max(jnp.abs(h12 - jnp.swapaxes(h12, -1, -2)))
    hmax = jnp.maximum(jnp.max(jnp.abs(h11)), jnp.max(jnp.abs(h12)))
    return g, sym(h11), sym(h12), asym, hmax


def _pattern_one(f, static, xx, V):
    """Block pattern of H_11: out[a, b] = max |H_11 v_b| over the rows of group a and the
    outputs, v_b (row b of V) supported on group b. Shape (n_groups, n_groups)."""
    p, groups = static
    HV = jnp.max(jnp.abs(_hvp11(f, p, xx, V)), axis=1)  # (n_groups [b], p)
    return _group_max(HV, groups).T


def _ff_one(f, static, xx, RA, RB):
    """On one input, for the smaller side z_s = rows [lo, lo + ks) and the larger side's rows
    [b0, b1):

    - g (k, p);
    - the blocks H_11[b0:b1, z_s] (k, b1 - b0, ks) (ks HVPs with the unit vectors of z_s);
    - the group maxima of |H_11[:, z_s]| (n_groups,);
    - the group maxima of |H_11 r| off z_s (n_groups,; 0 on z_s's groups) for the probes r =
      rows of RA (supported off z_s);
    - max |H_12 r| for the probes r = rows of RB (a scalar)."""
    p, groups, lo, ks, b0, b1 = static
    z = jnp.zeros(p)
    g = jax.jacrev(_two, argnums=1)(f, z, z, xx)
    E = jnp.zeros((ks, p)).at[:, lo : lo + ks].set(jnp.eye(ks))
    HV = _hvp11(f, p, xx, jnp.concatenate([E, RA]))  # (ks + n_probes, k, p), one linearization
    cols = jnp.moveaxis(HV[:ks], 0, -1)  # (k, p, ks) = H_11[:, z_s]
    colmax = _group_max(jnp.max(jnp.abs(cols), axis=(0, 2)), groups)
    HA = jnp.max(jnp.abs(HV[ks:]), axis=(0, 1)).at[lo : lo + ks].set(0.0)
    bmax = jnp.max(jnp.abs(_hvp12(f, p, xx, RB)))
    return g, cols[:, b0:b1, :], colmax, _group_max(HA, groups), bmax


def _outputs_one(f, static, xx, W):
    """f(W, x) as a (k,) vector."""
    return jnp.atleast_1d(jnp.asarray(f(W, xx), dtype=jnp.float64))


def _batched(one):
    def prog(f, static, xc, consts):
        return jax.vmap(lambda xx: one(f, static, xx, *consts))(xc)

    return prog


_ONE = {"dense": _dense_one, "pattern": _pattern_one, "feedforward": _ff_one, "outputs": _outputs_one}
# Module-level compiled programs, keyed on the (hashable) f and layout: extracting again from the
# same f with inputs of the same shapes and the same chunk reuses them.
_PROGRAMS = {name: jax.jit(_batched(one), static_argnums=(0, 1)) for name, one in _ONE.items()}


# ------------------------------------------------------------------------------------------------
# chunks and workspace
# ------------------------------------------------------------------------------------------------
def _subjaxprs(param):
    if isinstance(param, jcore.ClosedJaxpr):
        yield param.jaxpr
    elif isinstance(param, jcore.Jaxpr):
        yield param
    elif isinstance(param, (tuple, list)):
        for item in param:
            yield from _subjaxprs(item)


def _jaxpr_bytes(jaxpr) -> int:
    """Bytes of every intermediate value of a jaxpr, nested programs included (an upper bound of
    its workspace: no buffer is assumed reused)."""
    total = 0
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            shape = getattr(v.aval, "shape", ())
            itemsize = getattr(getattr(v.aval, "dtype", None), "itemsize", 8)
            total += int(np.prod(shape, dtype=np.int64)) * int(itemsize)
        for param in eqn.params.values():
            for sub in _subjaxprs(param):
                total += _jaxpr_bytes(sub)
    return total


def _compiled_bytes(compiled):
    """Temporaries + arguments + outputs of a compiled program (XLA's memory analysis), or None
    where the backend does not report it."""
    try:
        ma = compiled.memory_analysis()
        return float(ma.temp_size_in_bytes + ma.argument_size_in_bytes + ma.output_size_in_bytes)
    except Exception:  # noqa: BLE001 -- not every backend implements it
        return None


def _take(x, idx):
    return jax.tree_util.tree_map(lambda a: a[idx], x)


@dataclasses.dataclass
class Chunks:
    """Runs the per-input programs of one extraction on the inputs `x` (pytree, leading axis m)
    in chunks; f has k outputs. `chunk_size`: None (auto: workspace under `WORKSPACE_TARGET`
    and a quarter of the memory budget, at most `MAX_CHUNK` inputs) or an int >= 1. `used`
    records, per program, (chunk, workspace bytes)."""

    f: object
    x: object
    m: int
    k: int
    chunk_size: int | None
    memory_budget: float | None
    used: dict = dataclasses.field(default_factory=dict)

    def chunk(self, name, static, consts, x=None, m=None):
        """The chunk for program `name` on `x` (default: all inputs), checked against the memory
        budget; records it and its workspace in `used`.

        Auto: start from the traced program's bound (bytes of all intermediates of one input,
        at most `MAX_CHUNK` inputs), then measure the compiled program (XLA's memory analysis:
        temporaries, arguments, outputs) and shrink the chunk while it exceeds the target (a
        vmapped convolution with batched kernels grows quadratically with the chunk).

        **Raises:** `MemoryBudgetError` if one chunk's workspace exceeds the budget."""
        x = self.x if x is None else x
        m = self.m if m is None else m
        traced = _PROGRAMS[name].trace(self.f, static, _take(x, np.zeros(1, dtype=int)), consts)  # cached
        per_input = max(_jaxpr_bytes(traced.jaxpr.jaxpr), 1)
        if self.chunk_size is None:
            target = min(WORKSPACE_TARGET, 0.25 * _budget(self.memory_budget))
            c = int(max(1, min(m, MAX_CHUNK, target // per_input)))
        else:
            c = min(self.chunk_size, m)
        for _ in range(8):
            workspace = _compiled_bytes(self._compiled(name, static, c, x, consts))
            workspace = c * per_input if workspace is None else workspace
            if self.chunk_size is not None or workspace <= target or c == 1:
                break
            c = max(1, int(c * target / workspace))
        _check_memory(
            workspace,
            f"extract: autodiff workspace of one chunk of {c} inputs ({name} program; traced bound "
            f"{fmt_bytes(per_input)} per input)",
            "a smaller chunk_size= (chunk_size=1 is the least), a layer with fewer parameters per "
            "neuron p, or a larger budget (memory_budget= or NQF_MEMORY_BUDGET).",
            self.memory_budget,
        )
        self.used[name] = (c, workspace)
        return c

    def _compiled(self, name, static, c, x, consts):
        """The program compiled for chunks of c inputs (JAX caches the compilation)."""
        return _PROGRAMS[name].lower(self.f, static, _take(x, np.zeros(c, dtype=int)), consts).compile()

    def run(self, name, static, consts=(), x=None, m=None, chunk=None):
        """Program `name` on every input of `x` (default: all inputs) in chunks; returns its
        outputs as numpy arrays with leading axis m (allocated once, filled chunk by chunk)."""
        x = self.x if x is None else x
        m = self.m if m is None else m
        c = self.chunk(name, static, consts, x, m) if chunk is None else chunk
        prog = self._compiled(name, static, c, x, consts)
        bufs = None
        for start in range(0, m, c):
            n = min(c, m - start)
            idx = np.minimum(np.arange(start, start + c), m - 1)  # pad with the last input
            outs = jax.tree_util.tree_leaves(prog(_take(x, idx), consts))
            if bufs is None:
                bufs = [np.empty((m,) + o.shape[1:], dtype=o.dtype) for o in outs]
            for buf, o in zip(bufs, outs):
                buf[start : start + n] = np.asarray(o[:n])
        return bufs


# ------------------------------------------------------------------------------------------------
# results
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Blocks:
    """What the autodiff stage found (arrays over the m inputs and k outputs).

    - `g` (m, k, p); `C` (m k, k1, k2) for a feed-forward result (else None) with `split` =
      (front, k1, k2, back); `AH`, `B` (m, k, p, p) for a dense result (else None);
    - `a_max` = max |A_H|; `b_max` = max |B| (dense) or max |H_12 r| / 2 over the probes
      (feed-forward, where B = 0 was verified); `block_sym` = max |H_12 - H_12^T| / max |H|
      (dense) or max |H_12 r| / max |H| (feed-forward);
    - `residual`: what the feed-forward form drops, relative to max |C| (nan for dense);
      `note`: why a dense result was returned under "auto" (empty otherwise).
    """

    g: np.ndarray
    a_max: float
    b_max: float
    block_sym: float
    C: np.ndarray | None = None
    split: tuple | None = None
    AH: np.ndarray | None = None
    B: np.ndarray | None = None
    residual: float = float("nan")
    note: str = ""


class NoStructure(Exception):
    """The feed-forward form does not hold (the message names the nonzero block)."""


class GroupNames:
    """Names of the row groups of W for messages: `group_names` if given, else "row i" for
    one-row groups and "group i (rows a:b)" otherwise."""

    def __init__(self, groups, names=None):
        self.groups = tuple(groups)
        self.offsets = np.concatenate([[0], np.cumsum(self.groups)]).astype(int)
        self.names = names

    def __call__(self, a: int) -> str:
        lo, hi = int(self.offsets[a]), int(self.offsets[a + 1])
        if self.names is not None:
            return f"{self.names[a]!r} (rows {lo}:{hi})"
        return f"row {lo}" if hi - lo == 1 else f"group {a} (rows {lo}:{hi})"


def _signed(rng, n):
    """n random numbers of magnitude in [1, 2] and random sign (no tiny entries)."""
    return rng.uniform(1.0, 2.0, n) * rng.choice([-1.0, 1.0], n)


def dense_bytes(m: int, k: int, p: int) -> float:
    """Bytes of the dense path: A_H and B (m k, p, p) as host buffers, the copy of each in the
    returned JAX arrays, and the transients of one symmetry check (x - x^T and its |.|): five
    (m k, p, p) float64 arrays."""
    return 5.0 * 8.0 * m * k * p * p


def dense(chunks: Chunks, p: int, k: int, memory_budget) -> Blocks:
    """g, A_H = H_11/2, B = H_12/2 on every input (Theorem 12), after checking their memory."""
    m = chunks.m
    _check_memory(
        dense_bytes(m, k, p),
        f"extract: dense structure matrices A and B (m k, p, p) = ({m * k}, {p}, {p}), each "
        f"{fmt_bytes(8.0 * m * k * p * p)}, with their copies",
        "structure='auto' (or 'feedforward') returns a layer of feed-forward form A = 1/2 [[0, C], "
        "[C^T, 0]] (Eq. E3: MLP, CNN + readout, attention's value-output block) as FeedForwardData "
        "without any (m k, p, p) array; or extract on a subset of the inputs; or raise the budget "
        "(memory_budget= or NQF_MEMORY_BUDGET).",
        memory_budget,
    )
    g, AH, B, asym, hmax = chunks.run("dense", (p,))
    hscale = max(float(hmax.max()), np.finfo(float).tiny)
    return Blocks(
        g=g,
        AH=AH,
        B=B,
        a_max=float(np.abs(AH).max()),
        b_max=float(np.abs(B).max()),
        block_sym=float(asym.max()) / hscale,
    )


def pattern(chunks: Chunks, p: int, groups, rng) -> np.ndarray:
    """max |H_11 v_b| on group a over the first min(m, SAMPLE) inputs: (n_groups, n_groups)."""
    offs = np.concatenate([[0], np.cumsum(groups)])
    V = np.zeros((len(groups), p))
    for b in range(len(groups)):
        V[b, offs[b] : offs[b + 1]] = _signed(rng, groups[b])
    s = min(chunks.m, SAMPLE)
    (N,) = chunks.run("pattern", (p, tuple(groups)), (jnp.asarray(V),), x=_take(chunks.x, np.arange(s)), m=s)
    return N.max(axis=0)


def choose_split(N: np.ndarray, names: GroupNames, tol: float):
    """The contiguous feed-forward split of the group pattern N (Eq. E3): (first, t, last) with
    z1 = groups [first, t), z2 = groups [t, last], minimizing min(k1, k2) (then k1 k2).

    **Raises:** `NoStructure` naming a nonzero block that no split puts off the diagonal."""
    scale = float(N.max())
    nz = N > tol * scale if scale > 0 else np.zeros_like(N, dtype=bool)
    nz = nz | nz.T
    if not nz.any():
        raise NoStructure("A_H vanishes on the sample inputs (no nonzero block to split)")
    diag = np.flatnonzero(np.diag(nz))
    if diag.size:
        a = int(diag[0])
        raise NoStructure(
            f"the diagonal block ({names(a)}, {names(a)}) of A_H is nonzero (relative size "
            f"{N[a, a] / scale:.3g} on the sample inputs)"
        )
    # a split before group t works iff every nonzero block (i, j), i < j, has i < t <= j
    I, J = np.nonzero(np.triu(nz, 1))
    t_lo, t_hi = int(I.max()) + 1, int(J.min())
    if t_lo > t_hi:
        (i1, j1), (i2, j2) = sorted(
            {(int(I[np.argmax(I)]), int(J[np.argmax(I)])), (int(I[np.argmin(J)]), int(J[np.argmin(J)]))}
        )
        raise NoStructure(
            f"the blocks ({names(i1)}, {names(j1)}) and ({names(i2)}, {names(j2)}) of A_H are "
            "nonzero and no contiguous split [front | z1 | z2 | back] of the row groups puts both in "
            "the z1 x z2 block"
        )
    first, last = int(I.min()), int(J.max())
    offs = names.offsets
    ts = np.arange(t_lo, t_hi + 1)
    k1, k2 = offs[ts] - offs[first], offs[last + 1] - offs[ts]
    best = np.lexsort((k1 * k2, np.minimum(k1, k2)))[0]  # smallest min(k1, k2), then k1 k2
    return first, int(ts[best]), last


def feedforward(
    chunks: Chunks, p: int, groups, names: GroupNames, split, rng, tol: float, zgz_tol: float, memory_budget
) -> Blocks:
    """C = H_{z1 z2} on every input from the columns of the smaller side, verified (module
    docstring, steps 2-3). **Raises:** `NoStructure` naming the block that does not vanish,
    or "B != 0"."""
    m = chunks.m
    offs = names.offsets
    first, t, last = split
    n_g = len(groups)
    k1s, k2s = offs[t] - offs[first], offs[last + 1] - offs[t]
    small_is_z2 = k2s <= k1s
    if small_is_z2:  # z_s = groups [t, last]; the larger side is every group before t
        small, big, far = range(t, last + 1), range(t), range(last + 1, n_g)
    else:  # z_s = groups [first, t); the larger side is every group from t on
        small, big, far = range(first, t), range(t, n_g), range(first)
    lo, ks = int(offs[small[0]]), int(offs[small[-1] + 1] - offs[small[0]])
    b0, b1 = int(offs[big[0]]), int(offs[big[-1] + 1])
    probe = np.zeros((N_PROBES, p))
    off_small = np.ones(p, dtype=bool)
    off_small[lo : lo + ks] = False
    probe[:, off_small] = _signed(rng, N_PROBES * int(off_small.sum())).reshape(N_PROBES, -1)
    RB = _signed(rng, N_PROBES * p).reshape(N_PROBES, p)
    k = chunks.k
    nbytes = 8.0 * m * k * ks * (3 * (b1 - b0) + 2 * ks)
    _check_memory(
        nbytes,
        f"extract: feed-forward blocks C (m k, {b1 - b0}, {ks}) = ({m * k}, {b1 - b0}, {ks}) and their factors",
        "extract on a subset of the inputs, or raise the budget (memory_budget= or NQF_MEMORY_BUDGET).",
        memory_budget,
    )
    static = (p, tuple(groups), lo, ks, b0, b1)
    g, C, colmax, amax, bmax = chunks.run("feedforward", static, (jnp.asarray(probe), jnp.asarray(RB)))
    cscale = float(np.abs(C).max())
    if not cscale > 0:
        raise NoStructure("the block C = H_{z1 z2} vanishes on every input")
    # the larger side's groups whose columns vanish on every input are front (or back) rows
    big_active = [a for a in big if colmax[:, a].max() > tol * cscale]
    # z1 ends right before z_s, or z2 starts right after it; the far end of the larger side is
    # trimmed to its last group that couples to z_s on some input
    keep = range(big_active[0], big[-1] + 1) if small_is_z2 else range(big[0], big_active[-1] + 1)
    dropped = [a for a in big if a not in keep]
    checks = [
        (list(small), colmax, "the diagonal block of the smaller side z_s (columns H[:, z_s])"),
        (list(far) + dropped, colmax, "the coupling of a front/back row to z_s (columns H[:, z_s])"),
        (
            [a for a in range(n_g) if a not in small],
            amax,
            "the larger side's diagonal block or a front/back row (random probes H r off z_s)",
        ),
    ]
    residual = 0.0
    for grp, vals, what in checks:
        if not grp:
            continue
        v = vals[:, grp]
        worst = float(v.max())
        residual = max(residual, worst / cscale)
        if worst > tol * cscale:
            mu, j = np.unravel_index(int(np.argmax(v)), v.shape)
            raise NoStructure(
                f"verification failed on input {mu}: {what} is nonzero at {names(grp[j])} "
                f"(max {worst:.3g}, relative to max |C| = {cscale:.3g}: {worst / cscale:.3g} > "
                f"structure_tol = {tol:g}); the sample of the first {min(m, SAMPLE)} inputs did not "
                "show it"
            )
    b_probe = 0.5 * float(bmax.max())
    a_max = 0.5 * cscale
    if b_probe > zgz_tol * a_max:
        raise NoStructure(
            f"B = H_12 / 2 != 0 (max |B r| = {b_probe:.3g} for random probes r; neurons couple at "
            "second order): the mean-field matrices B (m k, p, p) are dense"
        )
    r0 = int(offs[keep[0]]) - b0
    r1 = int(offs[keep[-1] + 1]) - b0
    C = C[:, :, r0:r1, :]
    if not small_is_z2:
        C = np.swapaxes(C, 2, 3)  # H_{z1 z2} with z1 the smaller side: (m, k, k1, k2)
    k1, k2 = C.shape[2], C.shape[3]
    front = int(offs[keep[0]]) if small_is_z2 else lo
    back = p - front - k1 - k2
    return Blocks(
        g=g,
        C=C.reshape(m * k, k1, k2),
        split=(front, k1, k2, back),
        a_max=a_max,
        b_max=b_probe,
        block_sym=2.0 * b_probe / cscale,
        residual=residual,
    )


def factor(C: np.ndarray):
    """Factors (a, b) of C_mu = a_mu b_mu^T (m, k1, k2) and a description of the choice:

    - a truncated SVD, a = U S, b = V, of rank r (the largest numerical rank over the inputs, with
      numpy's rank threshold max s x max(k1, k2) x eps on the largest singular value of all C) when
      r <= min(k1, k2) / 2 (at most half the storage and work of the next choice);
    - else a = C, b = I_k2 if k2 <= k1, or a = I_k1, b = C^T (`feedforward_data`'s choice).

    The rank is tried on the first inputs first, so a full-rank C costs one small SVD."""
    n, k1, k2 = C.shape
    kmin = min(k1, k2)
    if kmin >= 2:
        eps_rank = max(k1, k2) * np.finfo(float).eps
        s_head = np.linalg.svd(C[:SAMPLE], compute_uv=False)
        if int((s_head > eps_rank * s_head.max()).sum(axis=1).max()) <= kmin // 2:
            U, s, Vh = np.linalg.svd(C, full_matrices=False)
            smax = float(s.max())
            r = max(1, int((s > eps_rank * smax).sum(axis=1).max()))
            if r <= kmin // 2:
                a = U[:, :, :r] * s[:, None, :r]
                b = np.swapaxes(Vh[:, :r, :], 1, 2)
                return a, b, f"svd rank {r}: a = U S, b = V"
    if k2 <= k1:
        return C, np.broadcast_to(np.eye(k2), (n, k2, k2)), "a = C, b = I_k2"
    return np.broadcast_to(np.eye(k1), (n, k1, k1)), np.swapaxes(C, 1, 2), "a = I_k1, b = C^T"
