"""Closed-form structure matrices (nqf.structure, THEORY sec. 2) against the autodiff extractor
(nqf.extract) on the W-space modules (nqf.modules) and on direct implementations of the Table 3
models: every A(x) must agree to 1e-10 on random inputs, multi-output included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf import structure as S
from nqf.data._extract import extract_report
from nqf.modules import CNN, MHA, MLP, QKAttention

TOL = 1e-10
M = 3  # inputs per test (one compiled shape per module)


def _dense(rep):
    return np.asarray(rep.data.dense() if isinstance(rep, nqf.NQFModel) else rep.dense())


def _agree(data, f, x, p, **kw):
    rep, report = extract_report(f, x, p, **kw)
    A_auto = _dense(rep)
    A_closed = np.asarray(data.dense())
    assert A_closed.shape == A_auto.shape
    err = float(np.abs(A_closed - A_auto).max())
    assert err <= TOL * max(1.0, float(np.abs(A_closed).max())), err
    assert report.failed == ()
    return rep, err


# ---------------------------------------------------------------- Section 3 architectures
def test_mlp(rng):
    n_out = 3
    mod = MLP(5, n_out)
    xs = rng.standard_normal((M, 5))
    y = rng.standard_normal((M, n_out))
    data = mod.structure(xs, y)
    assert isinstance(data, nqf.FeedForwardData) and data.p == 5 + n_out and data.m == M * n_out
    np.testing.assert_array_equal(np.asarray(data.y), np.reshape(y, -1))
    _agree(data, mod, xs, mod.p)
    # multi-output order: data index mu * k + o is A_o(x_mu) = 1/2 [[0, x e_o^T], [e_o x^T, 0]]
    A = np.asarray(data.dense())
    mu, o = M - 1, n_out - 1
    assert A[mu * n_out + o, 2, 5 + o] == pytest.approx(0.5 * xs[mu, 2], abs=1e-15)


def test_mlp_phi_prime(rng):
    mod = MLP(4, 1, phi=lambda z: jnp.sin(2.0 * z))
    xs = rng.standard_normal((M, 4))
    _agree(mod.structure(xs), mod, xs, mod.p)


def test_cnn(rng):
    mod = CNN((2, 5, 6), (3, 2), n_out=2, stride=2, padding=1)
    xs = rng.standard_normal((M, 2, 5, 6))
    _agree(mod.structure(xs), mod, xs, mod.p)


def test_cnn_patch_sum_fig2_shape(rng):
    xs = rng.standard_normal((M, 5, 7))
    s = S.cnn_patch_sum(xs, (4, 5))
    # 2 x 3 patches of 4 x 5 (stride 1, no padding): independent sum by explicit loops
    ref = sum(xs[:, i : i + 4, j : j + 5].reshape(M, -1) for i in range(2) for j in range(3))
    np.testing.assert_allclose(s, ref, atol=1e-14)
    # stride 2 with padding 1 on 4 x 4: padded 6 x 6, patches 2 x 2 at offsets 0, 2, 4
    x4 = rng.standard_normal((1, 4, 4))
    xp = np.pad(x4, ((0, 0), (1, 1), (1, 1)))
    ref = sum(xp[:, i : i + 2, j : j + 2].reshape(1, -1) for i in (0, 2, 4) for j in (0, 2, 4))
    np.testing.assert_allclose(S.cnn_patch_sum(x4, (2, 2), stride=2, padding=1), ref, atol=1e-14)


def _attn_inputs(rng, D=3, N=4):
    return rng.standard_normal((M, D)), rng.standard_normal((M, D, N))


@pytest.mark.parametrize("heads", [False, True])
def test_qk_attention(heads, rng):
    xq, X = _attn_inputs(rng)
    c = jnp.asarray(rng.standard_normal((3, 2)))
    mod = QKAttention(3, 2, c, heads=heads)
    rep, _ = _agree(mod.structure((xq, X)), mod, (xq, X), mod.p, width=4)
    # the extractor's constant f(0) equals the closed form (d = 4 heads / one head)
    np.testing.assert_allclose(np.asarray(rep.f0), np.asarray(mod.f0((xq, X), 4)), atol=1e-13)


def test_mha_blocks(rng):
    xq, X = _attn_inputs(rng)
    mod = MHA(3, 2, 2, n_out=2)
    data = mod.structure((xq, X))
    auto, _ = _agree(data, mod, (xq, X), mod.p)
    A = np.asarray(data.dense())
    nqk = 2 * 2 * 3
    for B in (A, _dense(auto)):  # closed form and autodiff: Q, K rows/columns exactly zero
        assert np.all(B[:, :nqk, :] == 0.0) and np.all(B[:, :, :nqk] == 0.0)
    assert np.all(_dense(auto)[:, nqk : nqk + 6, nqk : nqk + 6] == 0.0)  # (W^V, W^V) block
    assert np.abs(A[:, nqk : nqk + 6, nqk : nqk + 6]).max() < 1e-16  # low-rank form: rounding only
    # (W^V, v) block for output o: 1/2 (x_avg e_o^T) kron I_dv
    xbar = X.mean(axis=2)
    for mu in range(M):
        for o in range(2):
            ref = 0.5 * np.kron(np.outer(xbar[mu], np.eye(2)[o]), np.eye(2))
            np.testing.assert_allclose(A[mu * 2 + o, nqk : nqk + 6, nqk + 6 :], ref, atol=1e-15)


def test_moe(rng):
    P, n = 4, 3
    F = rng.standard_normal((2, P, n))

    def expert(x, theta):  # E_o(x; Theta) = tanh(Theta^T F_o x), E(x; 0) = 0, two outputs
        return jnp.tanh(theta @ (F @ x).T)

    def f(W, x):
        R, Th = W[:n], W[n:]
        return jnp.sum(jnp.tanh(R.T @ x)[:, None] * jax.vmap(lambda t: expert(x, t))(Th.T), axis=0)

    xs = rng.standard_normal((M, n))
    data = S.moe(xs, expert=expert, theta_dim=P)
    _agree(data, f, xs, n + P)
    G = np.einsum("opn,mn->mop", F, xs)  # grad_Theta E_o(x; 0) = F_o x
    np.testing.assert_allclose(np.asarray(S.moe(xs, G=G).dense()), np.asarray(data.dense()), atol=1e-15)
    with pytest.raises(ValueError, match="E\\(x; 0\\) = 0"):
        S.moe(xs, expert=lambda x, t: jnp.cos(t.sum()), theta_dim=P)


# ---------------------------------------------------------------- Table 3
def test_psd_sensing(rng):
    Sm = rng.standard_normal((M, 4, 4))
    _agree(S.psd_sensing(Sm), lambda W, s: jnp.sum(s * (W @ W.T)), Sm, 4)


def test_rect_sensing(rng):
    for k, q in ((4, 3), (2, 3)):
        Sm = rng.standard_normal((M, k, q))
        _agree(S.rect_sensing(Sm), lambda W, s, k=k: jnp.sum(s * (W[:k] @ W[k:].T)), Sm, k + q)


@pytest.mark.parametrize("fn", [S.matrix_completion, S.word_context])
def test_index_models(fn, rng):
    i, j = np.array([0, 2, 1]), np.array([1, 0, 1])
    data = fn(i, j, 3, 2)
    _agree(data, lambda W, ij: W[ij[0]] @ W[3 + ij[1]], (i, j), 5)
    with pytest.raises(ValueError, match="must lie in"):
        fn(np.array([3]), np.array([0]), 3, 2)


def test_quadratic_and_phase(rng):
    xs = rng.standard_normal((M, 4))
    f = lambda W, x: jnp.sum((W.T @ x) ** 2)  # noqa: E731
    _agree(S.quadratic_network(xs), f, xs, 4)
    _agree(S.phase_retrieval(xs), lambda W, a: a @ W @ W.T @ a, xs, 4)


def test_diagonal_networks(rng):
    xs = rng.standard_normal((M, 3))
    data = S.diagonal_square(xs)
    assert isinstance(data, nqf.CommutingData)
    _agree(data, lambda W, x: jnp.sum(x[:, None] * W**2) / 4.0, xs, 3)
    data2 = S.diagonal_two_factor(xs)
    assert isinstance(data2, nqf.CommutingData)
    _agree(data2, lambda W, x: jnp.sum(W[:3] * x[:, None] * W[3:]), xs, 6)


def test_tied_query_key(rng):
    xq, X = _attn_inputs(rng)
    c = rng.standard_normal(3)
    d_k = 2

    def f(W, inp):  # W (D, d) = the table's W^T; real attention, tied W^Q = W^K
        x, Xc = inp
        return c @ Xc @ jax.nn.softmax(Xc.T @ W @ (W.T @ x) / np.sqrt(d_k))

    rep, _ = _agree(S.tied_query_key(xq, X, c, d_k=d_k), f, (xq, X), 3)
    np.testing.assert_allclose(np.asarray(rep.f0), np.asarray(S.attention_f0(X, c)), atol=1e-14)


def test_bilinear_and_ssl(rng):
    xs, xt = rng.standard_normal((M, 3)), rng.standard_normal((M, 2))
    _agree(S.bilinear_sequence(xs, xt), lambda W, z: z[0] @ W[:3] @ W[3:].T @ z[1], (xs, xt), 5)
    x, chi = rng.standard_normal((M, 4)), rng.standard_normal((M, 4))
    _agree(S.linear_ssl(x, chi), lambda W, z: jnp.sum((W.T @ (z[0] - z[1])) ** 2), (x, chi), 4)


# ---------------------------------------------------------------- the NQF tracks the module
def test_nqf_is_the_expansion(rng):
    """f(eps W) - f(0) - eps^2 Tr[W W^T A] = O(eps^4) for tanh / attention (Z2-even remainder)."""
    mod = MLP(5, 2)
    xs = rng.standard_normal((M, 5))
    data = mod.structure(xs)
    W = rng.standard_normal((mod.p, 7))
    errs = []
    for eps in (1e-2, 5e-3):
        Ws = jnp.asarray(eps * W)
        nqf_out = np.asarray(data.traces_factor(Ws))
        errs.append(np.abs(np.asarray(mod.apply(Ws, xs)).reshape(-1) - nqf_out).max())
    assert errs[0] / errs[1] == pytest.approx(16.0, rel=0.05)


def test_errors(rng):
    with pytest.raises(ValueError, match="`y` must have shape"):
        S.mlp(rng.standard_normal((3, 4)), np.zeros(4))
    with pytest.raises(ValueError, match="n_outputs"):
        S.mlp(rng.standard_normal((3, 4)), n_outputs=0)
    with pytest.raises(ValueError, match="`c`"):
        S.qk_heads(rng.standard_normal((3, 2)), rng.standard_normal((3, 2, 5)), np.ones(3), d_k=2)
    with pytest.raises(ValueError, match="kernel_shape"):
        S.cnn(rng.standard_normal((2, 3, 3)), (4, 1))


def test_modules_nqf_feedforward_form(rng):
    """nqf_apply (a^T E(W) b + f0) equals f0 + Tr[W W^T A_o(x)] of the closed-form data."""
    xq, X = _attn_inputs(rng)
    c = jnp.asarray(rng.standard_normal((3, 2)))
    cases = [
        (MLP(5, 3), rng.standard_normal((M, 5))),
        (CNN((2, 5, 6), (3, 2), n_out=2, stride=2, padding=1), rng.standard_normal((M, 2, 5, 6))),
        (QKAttention(3, 2, c), (xq, X)),
        (QKAttention(3, 2, c, heads=True), (xq, X)),
        (MHA(3, 2, 2, n_out=2), (xq, X)),
    ]
    for mod, xs in cases:
        W = jnp.asarray(rng.standard_normal((mod.p, 4)))
        ref = np.asarray(mod.structure(xs).traces_factor(W)) + np.asarray(mod.f0(xs, 4))
        got = np.asarray(mod.nqf_apply(W, mod.nqf_features(xs, 4))).reshape(-1)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
