"""nqf.extract at real sizes (issue 23, item 6): the feed-forward result (FeedForwardData,
THEORY Eq. E3) detected on a sample and verified on every input, the dense fallback, chunks of
inputs, the memory check before a dense (m k, p, p) result, and the adapter attributes p/groups.

Every extracted matrix is compared with an independent computation: `jax.hessian` of f at W = 0
(width 2, flattened W; A_H = H_11 / 2, B = H_12 / 2) and, where one exists, the closed form of
`nqf.structure`."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf import structure as S
from nqf._core.memory import MemoryBudgetError
from nqf.data._extract import ExtractionError, ZGZWarning, extract, extract_report
from nqf.modules import CNN, MHA, MLP

N = 4  # inputs of the MLPs
TOL = 1e-12


def _hessian_blocks(f, p, xs):
    """A_H = H_11 / 2 and B = H_12 / 2 by jax.hessian of the flattened (p, 2) weights, (m k, p, p)."""

    def per(x):
        H = jax.hessian(lambda w: jnp.atleast_1d(f(w.reshape(p, 2), x)))(jnp.zeros(2 * p))
        return H[:, 0::2, 0::2] / 2, H[:, 0::2, 1::2] / 2

    A, B = jax.jit(jax.vmap(per))(xs)  # one program (not one per primitive, run eagerly)
    return np.asarray(A).reshape(-1, p, p), np.asarray(B).reshape(-1, p, p)


def _A(rep):
    """The data matrices of a result (DenseData / FeedForwardData / NQFModel) as (m k, p, p)."""
    return np.asarray((rep.data if isinstance(rep, nqf.NQFModel) else rep).dense())


def _close(A, ref):
    err = float(np.abs(A - ref).max())
    assert A.shape == ref.shape and err <= TOL * max(1.0, float(np.abs(ref).max())), err


def _structured_equals_dense(f, xs, p, **kw):
    """The feed-forward result, its dense twin and the jax.hessian reference agree; returns the
    result and its report."""
    rep, report = extract_report(f, xs, p, **kw)
    dense, dreport = extract_report(f, xs, p, structure="dense", **kw)
    p = f.p if p is None else p
    assert report.structure == "feedforward" and dreport.structure == "dense"
    data = rep.data if isinstance(rep, nqf.NQFModel) else rep
    assert isinstance(data, nqf.FeedForwardData) and data.p == p
    assert isinstance(dense.data if isinstance(dense, nqf.NQFModel) else dense, nqf.DenseData)
    A = _A(rep)
    _close(A, _A(dense))
    _close(A, _hessian_blocks(f, p, xs)[0])
    assert report.failed == dreport.failed and report.structure_residual <= 1e-10
    return rep, report


@pytest.fixture
def xs(rng):
    return rng.standard_normal((5, N))


def test_mlp_feedforward_with_and_without_groups(xs):
    """tanh MLP [u (4); v (1)]: C = x, split (0, 4, 1, 0), a = C, b = 1; the same with per-row
    groups (every row its own group) and with groups (4, 1); equals Proposition 1's closed form."""
    mod = MLP(N, 1)
    data, report = _structured_equals_dense(mod, xs, mod.p)
    assert report.split == (0, N, 1, 0) and report.factorization == "a = C, b = I_k2"
    _close(np.asarray(data.dense()), np.asarray(S.mlp(xs).dense()))
    np.testing.assert_allclose(np.asarray(data.a)[:, :, 0], xs, atol=1e-15)  # C(x) = phi'(0) x
    grouped, greport = extract_report(mod, xs, groups=(N, 1))  # p=None: from mod.p
    assert greport.split == (0, N, 1, 0)
    _close(np.asarray(grouped.dense()), np.asarray(data.dense()))


def test_multi_output_mlp_rank_revealing_factors(rng):
    """3 outputs: C_o = x e_o^T (4 x 3, rank 1) is stored as an SVD of rank 1 (r = 1 < 3);
    labels flattened input-major; equals the closed form."""
    mod = MLP(N, 3)
    xs = rng.standard_normal((5, N))
    y = rng.standard_normal((5, 3))
    data, report = _structured_equals_dense(mod, xs, mod.p, y=y)
    assert report.split == (0, N, 3, 0) and report.factorization.startswith("svd rank 1") and data.r == 1
    np.testing.assert_array_equal(np.asarray(data.y), y.reshape(-1))
    _close(np.asarray(data.dense()), np.asarray(S.mlp(xs, n_outputs=3).dense()))


def test_cnn_sum_pool(rng):
    """CNN by jax.lax.conv_general_dilated with global sum pooling (Proposition 16): C = patch sum."""
    mod = CNN((5, 6), (3, 2), n_out=1)
    xs = rng.standard_normal((5, 5, 6))
    data, report = _structured_equals_dense(mod, xs, mod.p)
    assert report.split == (0, 6, 1, 0)
    _close(np.asarray(data.dense()), np.asarray(mod.structure(xs).dense()))


class _Adapter:
    """A network adapter: callable f(W, x) with `p`, `groups` and `group_names`."""

    def __init__(self, mod, groups, names):
        self.mod, self.p, self.groups, self.group_names = mod, mod.p, groups, names

    def __call__(self, W, x):
        return self.mod(W, x)


def test_attention_front_rows_from_adapter_groups(rng):
    """Multi-head attention, one neuron per head [Q; K; V; O]: Q and K enter at 4th order, so
    they are front rows and only the (V, O) block is C (Proposition 2); p and groups come from the
    adapter object; equals nqf.structure.mha."""
    D, d_k, d_v = 3, 2, 2
    mod = MHA(D, d_k, d_v)
    xq, X = rng.standard_normal((5, D)), rng.standard_normal((5, D, 4))
    f = _Adapter(mod, (d_k * D, d_k * D, d_v * D, d_v), ("Q", "K", "V", "O"))
    data, report = _structured_equals_dense(f, (xq, X), None)
    assert report.split == (2 * d_k * D, d_v * D, d_v, 0) and data.front == 2 * d_k * D
    _close(np.asarray(data.dense()), np.asarray(S.mha(X, d_k=d_k, d_v=d_v).dense()))


def test_sigmoid_mlp_gives_model_with_g_and_no_B(xs):
    """sigmoid(0) = 1/2: g != 0 on the v row, B = 0: NQFModel(FeedForwardData, g, f0) with B None;
    g equals jax.grad and the model reproduces f to O(|W|^3)."""

    def f(W, x):
        return W[N] @ jax.nn.sigmoid(W[:N].T @ x)

    with pytest.warns(ZGZWarning, match="gradient of a neuron at W = 0 is nonzero"):
        model, report = extract_report(f, xs, N + 1, groups=(N, 1))
    assert isinstance(model, nqf.NQFModel) and isinstance(model.data, nqf.FeedForwardData)
    assert model.B is None and report.structure == "feedforward" and report.failed == ("zgz",)
    g_ref = jax.jit(jax.vmap(lambda x: jax.grad(lambda w: f(w.reshape(N + 1, 2), x))(jnp.zeros(2 * (N + 1)))[0::2]))(xs)
    np.testing.assert_allclose(np.asarray(model.g), np.asarray(g_ref), atol=1e-15)
    np.testing.assert_allclose(np.asarray(model.g)[:, N], 0.5, atol=1e-15)
    A_ref, B_ref = _hessian_blocks(f, N + 1, xs)
    assert np.abs(B_ref).max() == 0.0
    _close(_A(model), A_ref)
    W = np.random.default_rng(5).standard_normal((N + 1, 3))
    errs = []
    f_all = jax.jit(jax.vmap(f, in_axes=(None, 0)))  # f on every input, one program for both eps
    for eps in (1e-2, 5e-3):
        We = eps * W
        ref = np.asarray(f_all(jnp.asarray(We), xs))
        errs.append(np.abs(np.asarray(model.outputs(We @ We.T, We.sum(axis=1))) - ref).max())
    assert np.log2(errs[0] / errs[1]) >= 2.8, errs


def test_quadratic_network_is_dense_or_refused(xs):
    """f = sum_i (w_i^T x)^2 has A = x x^T: a nonzero diagonal block; "auto" returns DenseData and
    says why, "feedforward" raises naming the block."""

    def f(W, x):
        return jnp.sum((W.T @ x) ** 2)

    data, report = extract_report(f, xs, N)
    assert isinstance(data, nqf.DenseData) and report.structure == "dense" and report.split is None
    assert "diagonal block (row 0, row 0)" in report.structure_note
    _close(_A(data), np.einsum("mi,mj->mij", xs, xs))
    with pytest.raises(
        ExtractionError, match=r"structure='feedforward'.*diagonal block \(row 0, row 0\) of A_H is nonzero"
    ):
        extract(f, xs, N, structure="feedforward")


def test_non_contiguous_pattern_is_dense_or_refused(xs):
    """Rows [a; b; c] with blocks (a, b) and (b, c) nonzero: bipartite ({b} vs {a, c}) but no
    contiguous split [front | z1 | z2 | back]."""

    def f(W, x):
        return jnp.sum(W[1] * (W[0] * x[0] + W[2] * x[1]))

    data, report = extract_report(f, xs, 3)
    assert isinstance(data, nqf.DenseData) and "no contiguous split" in report.structure_note
    _close(_A(data), _hessian_blocks(f, 3, xs)[0])
    with pytest.raises(ExtractionError, match=r"blocks \(row 0, row 1\) and \(row 1, row 2\) of A_H are nonzero"):
        extract(f, xs, 3, structure="feedforward")


def _late(x):
    """A switch that is 0 on the first 8 inputs (the detection sample) and 1 after."""
    return x[N]


@pytest.mark.parametrize("kind", ["u-u probe", "v-v column"])
def test_block_zero_on_the_sample_but_not_later_is_caught(rng, kind):
    """A block that vanishes on the first 8 inputs but not on inputs 8.. : "auto" falls back to
    the dense form (equal to jax.hessian) and names the input; "feedforward" raises."""

    def f(W, x):
        U, v = W[:N], W[N]
        extra = jnp.sum((U.T @ x[:N]) ** 2) if kind == "u-u probe" else jnp.sum(v**2)
        return v @ jnp.tanh(U.T @ x[:N]) + _late(x) * extra

    xs = np.concatenate([rng.standard_normal((11, N)), (np.arange(11) >= 8)[:, None]], axis=1)
    data, report = extract_report(f, xs, N + 1, groups=(N, 1))
    assert isinstance(data, nqf.DenseData) and report.structure == "dense"
    assert "verification failed on input 8" in report.structure_note
    _close(_A(data), _hessian_blocks(f, N + 1, xs)[0])
    with pytest.raises(ExtractionError, match="verification failed on input 8"):
        extract(f, xs, N + 1, groups=(N, 1), structure="feedforward")


def test_row_coupled_only_later_is_kept_in_the_block(rng):
    """Rows [q; u (4); v]: q couples to v only from input 8 on. The sample shows q as a zero row,
    but the columns H[:, v] on every input keep it in z1: split (0, 5, 1, 0), equal to jax.hessian."""

    def f(W, x):
        q, U, v = W[0], W[1 : N + 1], W[N + 1]
        return v @ jnp.tanh(U.T @ x[:N]) + _late(x) * (v @ q)

    xs = np.concatenate([rng.standard_normal((11, N)), (np.arange(11) >= 8)[:, None]], axis=1)
    data, report = extract_report(f, xs, N + 2)
    assert isinstance(data, nqf.FeedForwardData) and report.split == (0, N + 1, 1, 0)
    _close(_A(data), _hessian_blocks(f, N + 2, xs)[0])


def test_B_nonzero_falls_back_to_dense(xs):
    """f = sum_i v_i tanh(u_i^T x) + sum_{i != j} v_i c^T u_j: A_H is feed-forward but H_12 != 0,
    so B is dense: "auto" returns the dense NQFModel (B equals jax.hessian's H_12 / 2),
    "feedforward" raises."""
    c = np.linspace(1.0, 2.0, N)

    def f(W, x):
        U, v = W[:N], W[N]
        cross = jnp.sum(v) * jnp.sum(c @ U) - jnp.sum(v * (c @ U))
        return v @ jnp.tanh(U.T @ x) + cross

    with pytest.warns(ZGZWarning, match="neurons couple at second order"):
        model, report = extract_report(f, xs, N + 1, groups=(N, 1))
    assert isinstance(model.data, nqf.DenseData) and "B = H_12 / 2 != 0" in report.structure_note
    A_ref, B_ref = _hessian_blocks(f, N + 1, xs)
    _close(np.asarray(model.B), B_ref)
    _close(_A(model), A_ref - B_ref)  # the NQFModel convention A = A_H - B
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZGZWarning)
        with pytest.raises(ExtractionError, match="B = H_12 / 2 != 0"):
            extract(f, xs, N + 1, groups=(N, 1), structure="feedforward")


@pytest.mark.parametrize("structure", ["auto", "dense"])
def test_chunked_equals_unchunked(rng, structure):
    """chunk_size=3 on m = 7 inputs (a padded last chunk) gives the same matrices as one chunk."""
    mod = MLP(N, 2)
    xs = rng.standard_normal((7, N))
    one, r1 = extract_report(mod, xs, mod.p, structure=structure)
    chunked, r3 = extract_report(mod, xs, mod.p, structure=structure, chunk_size=3)
    assert r3.chunk_size == 3 and r1.chunk_size == 7 and r3.structure == r1.structure
    np.testing.assert_allclose(_A(chunked), _A(one), rtol=0, atol=1e-15)
    _close(_A(chunked), _hessian_blocks(mod, mod.p, xs)[0])


def test_dense_request_over_the_memory_budget(xs):
    """A dense result is estimated before allocation: 5 arrays of m k p^2 float64 (A_H, B, their
    JAX copies, one symmetry-check transient); the message names the size and the ways out."""
    mod = MLP(N, 1)
    with pytest.raises(
        MemoryBudgetError,
        match=r"dense structure matrices A and B \(m k, p, p\) = \(5, 5, 5\).*would allocate about 5 kB"
        r".*NQF_MEMORY_BUDGET.*Ways out: structure='auto'.*subset of the inputs",
    ) as err:
        extract(mod, xs, mod.p, structure="dense", memory_budget=1000)
    assert err.value.nbytes == 5 * 8 * 5 * 1 * 5 * 5 and err.value.budget == 1000


class _EqxAdapter(eqx.Module):
    """An equinox adapter holding an array (unhashable: extract keys its programs by identity);
    `quad` adds sum_i (u_i^T x)^2, a nonzero (u, u) block."""

    scale: jax.Array
    quad: bool = eqx.field(static=True)
    p: int = eqx.field(static=True, default=N + 1)
    groups: tuple = eqx.field(static=True, default=(N, 1))
    group_names: tuple = eqx.field(static=True, default=("u", "v"))

    def __call__(self, W, x):
        U, v = W[:N], W[N]
        out = v @ jnp.tanh(self.scale * (U.T @ x))
        return out + jnp.sum((U.T @ x) ** 2) if self.quad else out


def test_p_and_groups_from_the_adapter_and_argument_errors(xs):
    mod = MLP(N, 1)
    f = _EqxAdapter(jnp.asarray(2.0), False)
    data, report = extract_report(f, xs)  # p = f.p, groups = f.groups
    assert report.split == (0, N, 1, 0) and isinstance(data, nqf.FeedForwardData)
    _close(np.asarray(data.dense()), 2.0 * np.asarray(S.mlp(xs).dense()))  # phi'(0) = 2
    with pytest.raises(ExtractionError, match=r"diagonal block \('u' \(rows 0:4\), 'u' \(rows 0:4\)\)"):
        extract(_EqxAdapter(jnp.asarray(2.0), True), xs, structure="feedforward")
    with pytest.raises(
        ValueError, match=r"`p` \(parameters per neuron, the rows of W\) is required: `f` has no attribute `p`"
    ):
        extract(lambda W, x: jnp.sum(W), xs)
    with pytest.raises(
        ValueError, match=r"`groups` must be positive integers .* summing to p = 5; found \(3, 1\) \(sum 4\)"
    ):
        extract(mod, xs, groups=(3, 1))
    with pytest.raises(ValueError, match=r"`f.groups` must be positive integers .* summing to p = 5; found \(5, 0\)"):
        extract(_Adapter(mod, (5, 0), ("u", "v")), xs)
    with pytest.raises(ValueError, match=r"`f.group_names` must be 2 strings"):
        extract(_Adapter(mod, (N, 1), ("u",)), xs)
    with pytest.raises(ValueError, match=r"`p` = 4 disagrees with `f.p` = 5"):
        extract(mod, xs, N)
    with pytest.raises(ValueError, match=r"`structure` must be 'auto', 'dense' or 'feedforward'; found 'lowrank'"):
        extract(mod, xs, structure="lowrank")
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match=r"`chunk_size` must be None \(automatic\) or an integer >= 1"):
            extract(mod, xs, chunk_size=bad)


@pytest.mark.parametrize("layout, split", [("vu", (0, 1, N, 0)), ("uvz", (0, N, 1, 1)), ("zvu", (1, 1, N, 0))])
def test_row_layouts_front_back_and_the_smaller_side_first(xs, layout, split):
    """The same MLP with its rows permuted and an unused row z: the smaller side may come first
    (C = H_{z1 z2} from the columns of z1), an unused row becomes front or back."""
    offs, pos = {}, 0
    for name in layout:
        offs[name] = pos
        pos += N if name == "u" else 1

    def f(W, x):
        U, v = W[offs["u"] : offs["u"] + N], W[offs["v"]]
        return v @ jnp.tanh(U.T @ x)

    _, report = _structured_equals_dense(f, xs, pos)
    assert report.split == split
