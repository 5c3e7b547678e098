"""Closed-form structure matrices A(x) of the architecture dictionary (THEORY sec. 2; paper
Sec. 3, Propositions 1-6 and Table 3), batched over inputs, as nqf data sets.

Every function takes a batch of m inputs (leading axis m) and optional labels and returns the
cheapest exact representation of {A(x_mu)}:

- feed-forward blocks A = 1/2 [[0, C], [C^T, 0]] (Eq. E3) as `FeedForwardData` via
  `nqf.feedforward_data` from factors C = a b^T (MLP: rank 2 A);
- rank-one A = a a^T (quadratic network, phase retrieval, linear SSL) as `LowRankData`;
- diagonal / jointly diagonalizable A (diagonal linear networks) as `CommutingData`;
- a general symmetric A (PSD sensing) as `DenseData`.

**Multi-output (Corollary 1).** A module with k outputs F_x in R^k gives one scalar data matrix
per (input, output) pair. The pairs are flattened input-major: data index ``mu * k + o`` holds
A_o(x_mu), and labels of shape (m, k) are flattened the same way (``y.reshape(-1)``).

**Neuron layouts** (neurons are the columns of W (p, d) unless noted; ``vec`` is the
column-stacking vec of linear algebra, ``vec(Q)[a + r c] = Q[a, c]`` for Q with r rows, i.e.
``Q.T.reshape(-1)``; this is the convention under which the paper's Kronecker forms hold):

- MLP f_o = sum_i v_io phi(u_i^T x): w_i = [u_i (n); v_i (k)].
- CNN f_o = sum_i v_io sum_P phi(kern_i^T x_P): w_i = [kern_i (C kh kw, flattened (c, i, j)
  row-major, like the patch); v_i (k)].
- MHA f_o = sum_i v_i[:, o]^T W^V_i X softmax(X^T W^K_i^T W^Q_i x / sqrt d_k):
  w_i = [vec W^Q_i (d_k D); vec W^K_i (d_k D); vec W^V_i (d_v D); vec v_i (d_v k)], v_i (d_v, k).
- QK-only heads f_o = sum_i c_o^T X softmax(...): w_i = [vec W^Q_i; vec W^K_i].
- single-head logits f_o = c_o^T X softmax(X^T W^K^T W^Q x / sqrt d_k), neurons = rows of W^Q,
  W^K: w_i = [q_i (D); k_i (D)].
- MoE f_o = sum_i psi(r_i^T x) E_o(x; Theta_i): w_i = [r_i (n); Theta_i (P)].

Labels default to zeros (the structure does not depend on them). The constant f_x(0) is not part
of A; `attention_f0` gives it for the attention modules.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, Int

from .._core._checks import as_array as _as_array
from ._operators import CommutingData, DenseData, FeedForwardData, LowRankData

__all__ = [
    "mlp",
    "cnn",
    "cnn_patch_sum",
    "mha",
    "qk_heads",
    "attention_logits",
    "attention_f0",
    "moe",
    "psd_sensing",
    "rect_sensing",
    "matrix_completion",
    "word_context",
    "quadratic_network",
    "phase_retrieval",
    "diagonal_square",
    "diagonal_two_factor",
    "tied_query_key",
    "bilinear_sequence",
    "linear_ssl",
    "sigma_c",
]


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------
def as_array(x, name, **kw) -> np.ndarray:
    """Checked float64 host (numpy) array: the constructors here run on the host, once per data
    set, so that building data costs no JAX compilation."""
    return np.asarray(_as_array(x, name, **kw))


def _count(n, name: str) -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"`{name}` must be an integer >= 1; found {n!r}.")
    return int(n)


def _labels(y, m: int, k: int = 1):
    """Labels for m inputs and k outputs, flattened input-major to shape (m k,)."""
    if y is None:
        return np.zeros(m * k)
    y = as_array(y, "y")
    if k == 1 and y.shape == (m,):
        return y
    if y.shape == (m, k):
        return y.reshape(-1)
    want = f"({m},) or ({m}, 1)" if k == 1 else f"({m}, {k})"
    raise ValueError(f"`y` must have shape {want} (one label per input and output); found {tuple(y.shape)}.")


def _ff(y, a, b, *, front: int = 0, back: int = 0) -> FeedForwardData:
    """Feed-forward data A = 1/2 [[0, a b^T], [b a^T, 0]] (Eq. E3) from factors a (m, n, r),
    b (m, q, r), with `front`/`back` zero rows around the neuron [z1 (n); z2 (q)]."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[2]:
        raise ValueError(f"factors a (m, n, r) and b (m, q, r) disagree: {a.shape} and {b.shape}.")
    return FeedForwardData(a, b, y, front=front, back=back)


def _multi_output(a, b_out, k: int):
    """Factors for the k outputs of every input: a (m, n, r) repeated k times, and the output
    factor b_out(o) (k, q, r) tiled over the m inputs; data index mu * k + o."""
    m = a.shape[0]
    return np.repeat(a, k, axis=0), np.tile(b_out, (m, 1, 1))


def _onehot_b(k: int):
    """b for outputs e_o: shape (k, k, 1) with b[o] = e_o."""
    return np.eye(k)[:, :, None]


def _kron_eye(v, r: int):
    """kron(v, I_r) for a batch of vectors v (m, n) -> (m, n r, r)."""
    m, n = v.shape
    return (v[:, :, None, None] * np.eye(r)[None, None]).reshape(m, n * r, r)


def sigma_c(
    X: Float[ArrayLike, "m D N"],
    c: Float[ArrayLike, " D"] | Float[ArrayLike, "D k"],
) -> Float[np.ndarray, "m D *k"]:
    """u = Sigma_X c with Sigma_X = X X^T / N - x_avg x_avg^T (Proposition 3).

    `X`: contexts (m, D, N); `c`: readout (D,) or (D, k). Returns (m, D) or (m, D, k)."""
    X = np.asarray(X)
    N = X.shape[-1]
    xbar = np.mean(X, axis=-1)
    cov = np.einsum("mdn,men->mde", X, X) / N - np.einsum("md,me->mde", xbar, xbar)
    return np.einsum("mde,e...->md...", cov, c)


def _attention_inputs(x, X, c) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Queries `x` (m, D), contexts `X` (m, D, N) and readout `c` checked; `c` as (D, k), and k."""
    X = as_array(X, "X", ndim=3)
    m, D, _ = X.shape
    x = as_array(x, "x", shape=(m, D))
    return (x, X, *_readout(c, D))


def _readout(c, D: int) -> tuple[np.ndarray, int]:
    """The readout `c`, (D,) or (D, k), checked and as (D, k); and k."""
    c = as_array(c, "c")
    if c.ndim == 1:
        c = c[:, None]
    if c.ndim != 2 or c.shape[0] != D:
        raise ValueError(f"`c` (readout) must have shape ({D},) or ({D}, k); found {tuple(c.shape)}.")
    return c, c.shape[1]


# ------------------------------------------------------------------------------------------------
# Section 3 architectures (Propositions 1-6)
# ------------------------------------------------------------------------------------------------
def mlp(
    x: Float[ArrayLike, "m n"],
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None,
    *,
    n_outputs: int = 1,
    phi_prime0: float = 1.0,
) -> FeedForwardData:
    """Two-layer MLP f_o(x) = sum_i v_io phi(u_i^T x), phi(0) = 0 (Proposition 1, THEORY sec. 2).

    A_o(x) = phi'(0)/2 [[0_nxn, x e_o^T], [e_o x^T, 0_kxk]] on w_i = [u_i (n); v_i (k)]
    (k = n_outputs; for k = 1 this is the table's phi'(0)/2 [[0, x], [x^T, 0]], rank 2).

    **Arguments:** `x` (m, n) inputs; `y` labels (m,) or (m, k); `phi_prime0` = phi'(0)
    (1 for tanh). **Returns:** `FeedForwardData` with m k matrices, p = n + k.
    """
    x = as_array(x, "x", ndim=2)
    k = _count(n_outputs, "n_outputs")
    a, b = _multi_output(float(phi_prime0) * x[:, :, None], _onehot_b(k), k)
    return _ff(_labels(y, x.shape[0], k), a, b)


def _pad_image(X, padding: int):
    if padding == 0:
        return X
    return np.pad(X, ((0, 0), (0, 0), (padding, padding), (padding, padding)))


def _as_image_batch(X):
    X = as_array(X, "X")
    if X.ndim == 3:
        X = X[:, None]
    if X.ndim != 4:
        raise ValueError(f"`X` must have shape (m, H, W) or (m, C, H, W); found {tuple(X.shape)}.")
    return X


def cnn_patch_sum(
    X: Float[ArrayLike, "m ..."], kernel_shape: tuple[int, int], *, stride: int = 1, padding: int = 0
) -> Float[np.ndarray, "m q"]:
    """s(X) = sum_P x_P, the sum of all (flattened) patches of a conv layer, shape (m, C kh kw).

    `X` (m, H, W) or (m, C, H, W); `kernel_shape` (kh, kw); zero `padding` on each side; patches
    are flattened (c, i, j) row-major. Computed by strided slicing (no convolution routine)."""
    X = _as_image_batch(X)
    stride = _count(stride, "stride")
    if isinstance(padding, bool) or not isinstance(padding, (int, np.integer)) or padding < 0:
        raise ValueError(f"`padding` must be an integer >= 0; found {padding!r}.")
    kh, kw = (_count(int(s), "kernel_shape") for s in kernel_shape)
    Xp = _pad_image(X, int(padding))
    H, W = Xp.shape[2:]
    if kh > H or kw > W:
        raise ValueError(f"`kernel_shape` {(kh, kw)} is larger than the padded input {(H, W)}.")
    oh, ow = (H - kh) // stride + 1, (W - kw) // stride + 1
    rows = []
    for i in range(kh):
        for j in range(kw):
            sl = Xp[:, :, i : i + stride * (oh - 1) + 1 : stride, j : j + stride * (ow - 1) + 1 : stride]
            rows.append(np.sum(sl, axis=(2, 3)))  # (m, C)
    s = np.stack(rows, axis=-1)  # (m, C, kh kw)
    return s.reshape(s.shape[0], -1)


def cnn(
    X: Float[ArrayLike, "m ..."],
    kernel_shape: tuple[int, int],
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None,
    *,
    stride: int = 1,
    padding: int = 0,
    n_outputs: int = 1,
    phi_prime0: float = 1.0,
) -> FeedForwardData:
    """One-layer CNN with global sum pooling f_o = sum_i v_io sum_P phi(kern_i^T x_P)
    (Proposition 16 of the paper's appendix / THEORY sec. 2).

    A_o(X) = phi'(0)/2 [[0, s e_o^T], [e_o s^T, 0]], s = sum_P x_P (`cnn_patch_sum`), on
    w_i = [kern_i (C kh kw); v_i (k)].

    **Arguments:** `X` (m, H, W) or (m, C, H, W); `kernel_shape` (kh, kw); `stride`, `padding`
    (zeros on each side); `y` (m,) or (m, k). **Returns:** `FeedForwardData`, m k matrices.
    """
    k = _count(n_outputs, "n_outputs")
    s = cnn_patch_sum(X, kernel_shape, stride=stride, padding=padding)
    a, b = _multi_output(float(phi_prime0) * s[:, :, None], _onehot_b(k), k)
    return _ff(_labels(y, s.shape[0], k), a, b)


def mha(
    X: Float[ArrayLike, "m D N"],
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None,
    *,
    d_k: int,
    d_v: int,
    n_outputs: int = 1,
) -> FeedForwardData:
    """Multi-head attention, one neuron per head (Proposition 2, THEORY sec. 2).

    f_o = sum_i v_i[:, o]^T W^V_i X softmax(X^T W^K_i^T W^Q_i x / sqrt d_k). Only the (W^V, v)
    block is nonzero: C_o = (x_avg e_o^T) kron I_dv, x_avg = X 1_N / N, i.e. for k = 1 the
    paper's 1/2 [[0, x_avg kron I_dv], [x_avg^T kron I_dv, 0]]; the query token x does not enter.
    W^Q, W^K (d_k, D) enter at 4th order (their rows and columns of A are exactly zero).

    **Arguments:** `X` contexts (m, D, N); `d_k`, `d_v`; `y` (m,) or (m, k).
    **Returns:** `FeedForwardData`, m k matrices, p = 2 d_k D + d_v D + d_v k, rank 2 d_v.
    """
    X = as_array(X, "X", ndim=3)
    m, D, _ = X.shape
    d_k, d_v, k = _count(d_k, "d_k"), _count(d_v, "d_v"), _count(n_outputs, "n_outputs")
    xbar = np.mean(X, axis=-1)
    a = _kron_eye(xbar, d_v)  # (m, D dv, dv)
    b_out = _kron_eye(np.eye(k), d_v)  # (k, k dv, dv): e_o kron I_dv
    a, b = _multi_output(a, b_out, k)
    return _ff(_labels(y, m, k), a, b, front=2 * d_k * D)


def qk_heads(
    x: Float[ArrayLike, "m D"],
    X: Float[ArrayLike, "m D N"],
    c: Float[ArrayLike, " D"] | Float[ArrayLike, "D k"],
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None,
    *,
    d_k: int,
) -> FeedForwardData:
    """Query-key-only heads, one neuron per head (Proposition 3, THEORY sec. 2).

    f_o = sum_i c_o^T X softmax(X^T W^K_i^T W^Q_i x / sqrt d_k), w_i = [vec W^Q_i; vec W^K_i]:
    A_o = 1/(2 sqrt d_k) [[0, (x u_o^T) kron I_dk], [(u_o x^T) kron I_dk, 0]], u_o = Sigma_X c_o.

    **Arguments:** `x` queries (m, D); `X` contexts (m, D, N); `c` readout (D,) or (D, k);
    `y` (m,) or (m, k). **Returns:** `FeedForwardData`, m k matrices, p = 2 d_k D, rank 2 d_k.
    The constant f_x(0) = d c_o^T x_avg (d heads) is `attention_f0(X, c) * d`.
    """
    x, X, c, k = _attention_inputs(x, X, c)
    d_k = _count(d_k, "d_k")
    u = sigma_c(X, c)  # (m, D, k)
    a = _kron_eye(x, d_k)  # (m, D dk, dk)
    a = np.repeat(a, k, axis=0)
    uk = np.swapaxes(u, 1, 2).reshape(-1, X.shape[1])  # (m k, D), input-major
    b = _kron_eye(uk, d_k) / np.sqrt(d_k)
    return _ff(_labels(y, X.shape[0], k), a, b)


def attention_logits(
    x: Float[ArrayLike, "m D"],
    X: Float[ArrayLike, "m D N"],
    c: Float[ArrayLike, " D"] | Float[ArrayLike, "D k"],
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None,
    *,
    d_k: int,
) -> FeedForwardData:
    """Single-head attention logits with the rows of W^Q, W^K as neurons (Proposition 4, THEORY sec. 2).

    f_o = c_o^T X softmax(X^T W^K^T W^Q x / sqrt d_k), w_i = [q_i (D); k_i (D)] (row i of W^Q and
    of W^K; d = d_k neurons): A_o = 1/(2 sqrt d_k) [[0, x u_o^T], [u_o x^T, 0]], u_o = Sigma_X c_o.

    **Arguments:** as `qk_heads`. **Returns:** `FeedForwardData`, m k matrices, p = 2 D, rank 2.
    The constant f_x(0) = c_o^T x_avg is `attention_f0(X, c)`.
    """
    x, X, c, k = _attention_inputs(x, X, c)
    d_k = _count(d_k, "d_k")
    u = sigma_c(X, c)
    a = np.repeat(x[:, :, None], k, axis=0)
    b = np.swapaxes(u, 1, 2).reshape(-1, X.shape[1])[:, :, None] / np.sqrt(d_k)
    return _ff(_labels(y, X.shape[0], k), a, b)


def attention_f0(
    X: Float[ArrayLike, "m D N"],
    c: Float[ArrayLike, " D"] | Float[ArrayLike, "D k"],
) -> Float[np.ndarray, " mk"]:
    """c_o^T x_avg for every (input, output) pair, shape (m k,): the output of one attention head
    at W = 0 (softmax uniform). Multiply by the number of heads for `qk_heads`."""
    X = as_array(X, "X", ndim=3)
    c, _ = _readout(c, X.shape[1])
    return np.einsum("md,dk->mk", np.mean(X, axis=-1), c).reshape(-1)


def moe(
    x: Float[ArrayLike, "m n"],
    y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None,
    *,
    G: Float[ArrayLike, "m P"] | Float[ArrayLike, "m k P"] | None = None,
    expert: Callable | None = None,
    theta_dim: int | None = None,
    psi_prime0: float = 1.0,
) -> FeedForwardData:
    """Mixture of experts with independent gating f = sum_i psi(r_i^T x) E(x; Theta_i),
    psi(0) = 0, E(x; 0) = 0 (Proposition 5, THEORY sec. 2).

    A_o(x) = psi'(0)/2 [[0, x G_o^T], [G_o x^T, 0]], G_o = grad_Theta E_o(x; 0), on
    w_i = [r_i (n); Theta_i (P)].

    **Arguments:** `x` (m, n); either `G` (m, P) or (m, k, P), or `expert` E(x, theta) -> scalar
    or (k,) with `theta_dim` = P (G is then computed by forward-mode autodiff at theta = 0);
    `y` (m,) or (m, k); `psi_prime0` = psi'(0).

    **Raises:** `ValueError` if both/neither of G and expert are given, on bad shapes, or if
    E(x; 0) != 0 (then the expansion has a linear term and the form E2 with g applies).
    """
    x = as_array(x, "x", ndim=2)
    m = x.shape[0]
    if (G is None) == (expert is None):
        raise ValueError("Give exactly one of `G` (m, P) / (m, k, P) and `expert` (with `theta_dim`).")
    if expert is not None:
        P = _count(theta_dim, "theta_dim")
        z = jnp.zeros(P)
        E0 = np.asarray(jax.vmap(lambda xx: jnp.asarray(expert(xx, z)))(jnp.asarray(x)))
        if float(np.max(np.abs(E0))) > 0.0:
            raise ValueError(f"MoE needs E(x; 0) = 0; found max |E(x; 0)| = {float(np.max(np.abs(E0))):.3g}.")
        G = jax.vmap(lambda xx: jax.jacfwd(lambda t: jnp.asarray(expert(xx, t)))(z))(jnp.asarray(x))
    G = as_array(G, "G")
    if G.ndim == 2:
        G = G[:, None, :]
    if G.ndim != 3 or G.shape[0] != m:
        raise ValueError(f"`G` must have shape ({m}, P) or ({m}, k, P); found {tuple(G.shape)}.")
    k = G.shape[1]
    a = np.repeat(float(psi_prime0) * x[:, :, None], k, axis=0)
    b = G.reshape(m * k, -1)[:, :, None]
    return _ff(_labels(y, m, k), a, b)


# ------------------------------------------------------------------------------------------------
# Table 3 models
# ------------------------------------------------------------------------------------------------
def psd_sensing(S: Float[ArrayLike, "m p p"], y: Float[ArrayLike, " m"] | None = None) -> DenseData:
    """PSD matrix sensing y_a = <S_a, W W^T>: A_a = Sym(S_a) = (S_a + S_a^T)/2 (Table 3).
    `S` (m, p, p). Returns `DenseData`."""
    S = as_array(S, "S", ndim=3)
    return DenseData(0.5 * (S + np.swapaxes(S, 1, 2)), _labels(y, S.shape[0]))


def rect_sensing(S: Float[ArrayLike, "m k q"], y: Float[ArrayLike, " m"] | None = None) -> FeedForwardData:
    """Rectangular sensing / factorization y_a = <S_a, U V^T>: A_a = 1/2 [[0, S_a], [S_a^T, 0]]
    on w_i = [u_i; v_i] (Table 3). `S` (m, k, q)."""
    S = as_array(S, "S", ndim=3)
    m, k, q = S.shape
    if q <= k:
        return _ff(_labels(y, m), S, np.broadcast_to(np.eye(q), (m, q, q)))
    return _ff(_labels(y, m), np.broadcast_to(np.eye(k), (m, k, k)), np.swapaxes(S, 1, 2))


def _index_pairs(i, j, n_i: int, n_j: int, names):
    i = np.asarray(i)
    j = np.asarray(j)
    if (
        i.ndim != 1
        or j.shape != i.shape
        or not np.issubdtype(i.dtype, np.integer)
        or not np.issubdtype(j.dtype, np.integer)
    ):
        raise ValueError(
            f"`{names[0]}` and `{names[1]}` must be integer arrays of one shape (m,); found {i.shape} and {j.shape}."
        )
    for v, n, nm in ((i, n_i, names[0]), (j, n_j, names[1])):
        if v.size and (v.min() < 0 or v.max() >= n):
            raise ValueError(f"`{nm}` must lie in [0, {n}); found range [{v.min()}, {v.max()}].")
    return np.eye(n_i)[i][:, :, None], np.eye(n_j)[j][:, :, None]


def matrix_completion(
    rows: Int[ArrayLike, " m"],
    cols: Int[ArrayLike, " m"],
    n_rows: int,
    n_cols: int,
    y: Float[ArrayLike, " m"] | None = None,
) -> FeedForwardData:
    """Matrix completion R_ij = u_i^T v_j: A_ij = 1/2 [[0, e_i e_j^T], [e_j e_i^T, 0]] (Table 3);
    neuron l is [U[:, l] (n_rows); V[:, l] (n_cols)]. `rows`, `cols` (m,) observed entries."""
    a, b = _index_pairs(rows, cols, _count(n_rows, "n_rows"), _count(n_cols, "n_cols"), ("rows", "cols"))
    return _ff(_labels(y, a.shape[0]), a, b)


def word_context(
    words: Int[ArrayLike, " m"],
    contexts: Int[ArrayLike, " m"],
    n_words: int,
    n_contexts: int,
    y: Float[ArrayLike, " m"] | None = None,
) -> FeedForwardData:
    """Word-context embedding score s_wc = u_w^T v_c: A_wc = 1/2 [[0, e_w e_c^T], [e_c e_w^T, 0]]
    (Table 3); the same structure as `matrix_completion`."""
    a, b = _index_pairs(
        words, contexts, _count(n_words, "n_words"), _count(n_contexts, "n_contexts"), ("words", "contexts")
    )
    return _ff(_labels(y, a.shape[0]), a, b)


def _rank_one(v, y, name):
    v = as_array(v, name, ndim=2)
    return LowRankData(v[:, :, None], np.ones((v.shape[0], 1)), _labels(y, v.shape[0]))


def quadratic_network(x: Float[ArrayLike, "m p"], y: Float[ArrayLike, " m"] | None = None) -> LowRankData:
    """Quadratic network f = sum_r (w_r^T x)^2: A_x = x x^T (Table 3). `x` (m, p)."""
    return _rank_one(x, y, "x")


def phase_retrieval(a: Float[ArrayLike, "m p"], y: Float[ArrayLike, " m"] | None = None) -> LowRankData:
    """Phase retrieval y_a = a^T W W^T a: A_a = a a^T (Table 3). `a` (m, p)."""
    return _rank_one(a, y, "a")


def diagonal_square(x: Float[ArrayLike, "m p"], y: Float[ArrayLike, " m"] | None = None) -> CommutingData:
    """Diagonal linear network, square parametrization f = sum_k x_k u_k^2 / 4:
    A_x = Diag(x)/4 (Table 3). `x` (m, p). Returns diagonal `CommutingData`."""
    x = as_array(x, "x", ndim=2)
    return CommutingData(x / 4.0, _labels(y, x.shape[0]))


def diagonal_two_factor(x: Float[ArrayLike, "m n"], y: Float[ArrayLike, " m"] | None = None) -> CommutingData:
    """Diagonal linear network, two-factor form f = u^T Diag(x) v: A_x = 1/2 [[0, Diag x],
    [Diag x, 0]] on w = [u (n); v (n)] (Table 3).

    All A_x share the eigenbasis P = [[I, I], [I, -I]] / sqrt 2 with eigenvalues (x/2, -x/2), so
    this returns `CommutingData` (Assumption 1 holds exactly)."""
    x = as_array(x, "x", ndim=2)
    n = x.shape[1]
    eye = np.eye(n)
    P = np.block([[eye, eye], [eye, -eye]]) / np.sqrt(2.0)
    return CommutingData(np.concatenate([x / 2.0, -x / 2.0], axis=1), _labels(y, x.shape[0]), P)


def tied_query_key(
    x: Float[ArrayLike, "m D"],
    X: Float[ArrayLike, "m D N"],
    c: Float[ArrayLike, " D"],
    y: Float[ArrayLike, " m"] | None = None,
    *,
    d_k: int,
) -> LowRankData:
    """Tied query-key attention u^T W^T W x / sqrt d_k, u = Sigma_X c (Table 3; neurons are the
    rows of the table's W, i.e. the columns of our W (D, d_k), M = W^T W there):
    A = (x u^T + u x^T) / (2 sqrt d_k), rank 2. `x` (m, D), `X` (m, D, N), `c` (D,)."""
    x, X, c, k = _attention_inputs(x, X, c)
    if k != 1:
        raise ValueError(f"`c` must be one readout vector (D,); found shape {tuple(c.shape)}.")
    d_k = _count(d_k, "d_k")
    u = sigma_c(X, c)[:, :, 0] / np.sqrt(d_k)
    U = 0.5 * np.stack([x + u, x - u], axis=2)
    s = np.broadcast_to(np.array([1.0, -1.0]), (x.shape[0], 2))
    return LowRankData(U, s, _labels(y, x.shape[0]))


def bilinear_sequence(
    xs: Float[ArrayLike, "m n"],
    xt: Float[ArrayLike, "m q"],
    y: Float[ArrayLike, " m"] | None = None,
) -> FeedForwardData:
    """Bilinear sequence regression x_s^T U V^T x_t: A = 1/2 [[0, x_s x_t^T], [x_t x_s^T, 0]] on
    w_i = [u_i; v_i] (Table 3). `xs` (m, n), `xt` (m, q)."""
    xs = as_array(xs, "xs", ndim=2)
    xt = as_array(xt, "xt", ndim=2)
    if xt.shape[0] != xs.shape[0]:
        raise ValueError(f"`xs` and `xt` must have the same number of rows; found {xs.shape[0]} and {xt.shape[0]}.")
    return _ff(_labels(y, xs.shape[0]), xs[:, :, None], xt[:, :, None])


def linear_ssl(
    x: Float[ArrayLike, "m p"],
    chi: Float[ArrayLike, "m p"],
    y: Float[ArrayLike, " m"] | None = None,
) -> LowRankData:
    """Linear SSL |W Delta|^2 with Delta = x - chi (neurons are the rows of the table's W, the
    columns of ours): A = Delta Delta^T (Table 3). `x`, `chi` (m, p)."""
    x = as_array(x, "x", ndim=2)
    chi = as_array(chi, "chi", shape=x.shape)
    return _rank_one(x - chi, y, "x - chi")
