"""Weight-space JAX implementations of the modules of the dictionary (MLP, CNN, QK attention,
multi-head attention, mixture of experts), to train side by side with their NQFs.

Each module is a small frozen dataclass with

- ``p``: parameters per neuron; ``__call__(W, x)``: the module's outputs (k,) for one input x,
  with W of shape (p, d) (one column per neuron, any width d) in the layout of `nqf.structure`;
- ``apply(W, xs)``: outputs for a batch, shape (m, k);
- ``structure(xs, y=None)``: the closed-form NQF data (`nqf.structure`) for a batch;
- ``f0(xs, d)``: the module's outputs at W = 0 for width d, flattened (m k,) like the data;
- ``effective_map(W)``: the learned linear map E of the NQF (the matrix whose singular values the
  paper's Fig. 2 tracks), computed from the weights;
- ``nqf_features(xs, d)`` and ``nqf_apply(W, feats)``: the NQF of the module evaluated in its
  feed-forward form f0 + a^T E(W) b, equal to f0 + Tr[W W^T A_o(x)] with the closed-form A
  (tests/test_structure.py) but with no per-sample p x p work (MHA at p = 880).

Nothing here uses the closed forms: `__call__` is the network itself (tanh, a convolution by
`jax.lax.conv_general_dilated`, softmax attention), so `nqf.extract` on it is an independent
check of `nqf.structure` (tests/test_extract.py).

Inputs: MLP and MoE x (n,); CNN x (H, W) or (C, H, W); attention x = (x_q (D,), X (D, N)) (a
tuple; a batch is a tuple of arrays with leading axis m).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PyTree

from . import structure
from ._operators import FeedForwardData

__all__ = ["MLP", "CNN", "QKAttention", "MHA", "MoE", "unvec"]


def unvec(v: Float[Array, " n"], rows: int, cols: int) -> Float[Array, "rows cols"]:
    """Inverse of the column-stacking vec: v (rows cols,) -> (rows, cols), v[a + rows c] = Q[a, c]."""
    return v.reshape(cols, rows).T


class _Features(NamedTuple):
    """Precomputed inputs of the NQF in feed-forward form: F[mu, o] = f0[mu, o] + a_mu^T E(W) b_mu[:, o]
    with E = `effective_map(W)`; a (m, n_a), b (m, n_b, k), f0 (m, k) or None."""

    a: jax.Array
    b: jax.Array
    f0: jax.Array | None


def _eye_b(m: int, k: int):
    return jnp.broadcast_to(jnp.eye(k), (m, k, k))


class _Module:
    if TYPE_CHECKING:  # what each module defines (declared here for the type checker only)

        @property
        def p(self) -> int: ...

        def __call__(self, W: Float[Array, "p d"], x: PyTree[Float[ArrayLike, " ..."]]) -> Float[Array, " k"]: ...

        def effective_map(self, W: Float[Array, "p d"]) -> Float[Array, "na nb"]: ...

    def nqf_apply(self, W: Float[Array, "p d"], feats: _Features) -> Float[Array, "m k"]:
        """The NQF's outputs f0 + Tr[W W^T A_o(x)] for a batch, shape (m, k), in the feed-forward
        form a^T E(W) b (Eq. E3: Tr[M A] = <M_12, C>, C_o = a b_o^T); `feats` from
        `nqf_features(xs, d)`. Costs O(p^2 d + m n_a n_b k): no (m, p, p) tensor."""
        F = jnp.einsum("ma,ab,mbk->mk", feats.a, self.effective_map(W), feats.b)
        return F if feats.f0 is None else F + feats.f0

    def apply(self, W: Float[Array, "p d"], xs: PyTree[Float[ArrayLike, "m ..."]]) -> Float[Array, "m k"]:
        """Outputs for a batch of inputs, shape (m, k)."""
        return jax.vmap(lambda x: self(W, x))(xs)

    def f0(self, xs: PyTree[Float[ArrayLike, "m ..."]], d: int) -> Float[Array, " mk"]:
        """Outputs at W = 0 of width d, flattened input-major, shape (m k,)."""
        return self.apply(jnp.zeros((self.p, d)), xs).reshape(-1)


@dataclasses.dataclass(frozen=True, eq=False)
class MLP(_Module):
    """Two-layer bias-free MLP f_o(x) = sum_i v_io phi(u_i^T x) (Proposition 1).
    Neuron w_i = [u_i (n_in); v_i (n_out)]."""

    n_in: int
    n_out: int = 1
    phi: Callable = jnp.tanh

    @property
    def p(self) -> int:
        return self.n_in + self.n_out

    def __call__(self, W: Float[Array, "p d"], x: PyTree[Float[ArrayLike, " ..."]]) -> Float[Array, " k"]:
        U, V = W[: self.n_in], W[self.n_in :]
        return V @ self.phi(U.T @ x)

    def phi_prime0(self) -> float:
        with jax.ensure_compile_time_eval():  # a constant even when called under a trace
            return float(jax.grad(self.phi)(0.0))

    def structure(
        self, xs: PyTree[Float[ArrayLike, "m ..."]], y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None
    ) -> FeedForwardData:
        return structure.mlp(xs, y, n_outputs=self.n_out, phi_prime0=self.phi_prime0())

    def effective_map(self, W: Float[Array, "p d"]) -> Float[Array, "na nb"]:
        """phi'(0) U V^T (n_in, n_out): the NQF is F(x) = (phi'(0) U V^T)^T x."""
        return self.phi_prime0() * W[: self.n_in] @ W[self.n_in :].T

    def nqf_features(self, xs: PyTree[Float[ArrayLike, "m ..."]], d: int = 1) -> _Features:
        return _Features(a=jnp.asarray(xs), b=_eye_b(xs.shape[0], self.n_out), f0=None)


@dataclasses.dataclass(frozen=True, eq=False)
class CNN(_Module):
    """One-layer CNN with global sum pooling f_o = sum_i v_io sum_P phi(kern_i^T x_P)
    (Proposition 16). Neuron w_i = [kern_i (C kh kw, (c, i, j) row-major); v_i (n_out)]."""

    input_shape: tuple  # (H, W) or (C, H, W)
    kernel_shape: tuple  # (kh, kw)
    n_out: int = 1
    stride: int = 1
    padding: int = 0
    phi: Callable = jnp.tanh

    @property
    def channels(self) -> int:
        return 1 if len(self.input_shape) == 2 else int(self.input_shape[0])

    @property
    def n_kernel(self) -> int:
        return self.channels * int(np.prod(self.kernel_shape))

    @property
    def p(self) -> int:
        return self.n_kernel + self.n_out

    def __call__(self, W: Float[Array, "p d"], x: PyTree[Float[ArrayLike, " ..."]]) -> Float[Array, " k"]:
        x = x.reshape((1, self.channels) + tuple(x.shape[-2:]))
        d = W.shape[1]
        kern = W[: self.n_kernel].T.reshape((d, self.channels) + tuple(self.kernel_shape))
        pad = [(self.padding, self.padding)] * 2
        z = jax.lax.conv_general_dilated(x, kern, (self.stride, self.stride), pad)  # (1, d, oh, ow)
        h = jnp.sum(self.phi(z), axis=(0, 2, 3))  # (d,)
        return W[self.n_kernel :] @ h

    def phi_prime0(self) -> float:
        with jax.ensure_compile_time_eval():  # a constant even when called under a trace
            return float(jax.grad(self.phi)(0.0))

    def structure(
        self, xs: PyTree[Float[ArrayLike, "m ..."]], y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None
    ) -> FeedForwardData:
        return structure.cnn(
            xs,
            self.kernel_shape,
            y,
            stride=self.stride,
            padding=self.padding,
            n_outputs=self.n_out,
            phi_prime0=self.phi_prime0(),
        )

    def effective_map(self, W: Float[Array, "p d"]) -> Float[Array, "na nb"]:
        """phi'(0) K V^T (C kh kw, n_out): the NQF is F(X) = (phi'(0) K V^T)^T s(X)."""
        return self.phi_prime0() * W[: self.n_kernel] @ W[self.n_kernel :].T

    def nqf_features(self, xs: PyTree[Float[ArrayLike, "m ..."]], d: int = 1) -> _Features:
        s = structure.cnn_patch_sum(xs, self.kernel_shape, stride=self.stride, padding=self.padding)
        return _Features(a=jnp.asarray(s), b=_eye_b(s.shape[0], self.n_out), f0=None)


def _softmax_readout(X, logits, readout):
    return readout @ (X @ jax.nn.softmax(logits))


@dataclasses.dataclass(frozen=True, eq=False)
class QKAttention(_Module):
    """Query-key attention with a fixed readout c (D, n_out).

    - ``heads=False`` (single head, Sec. 3 "single-head attention logits"): neurons are the rows
      q_i, k_i of W^Q, W^K (d = d_k), w_i = [q_i (D); k_i (D)], p = 2 D;
      f_o = c_o^T X softmax(X^T W^K^T W^Q x / sqrt d_k) with d_k = d (the width).
    - ``heads=True`` (Proposition 3): neurons are heads, w_i = [vec W^Q_i; vec W^K_i] (d_k D
      each), f_o = sum_i c_o^T X softmax(X^T W^K_i^T W^Q_i x / sqrt d_k).
    """

    D: int
    d_k: int
    c: jax.Array  # (D, n_out)
    heads: bool = False

    @property
    def n_out(self) -> int:
        return int(jnp.atleast_2d(self.c.T).shape[0])

    @property
    def p(self) -> int:
        return 2 * self.D * (self.d_k if self.heads else 1)

    def _c(self):
        return self.c.reshape(self.D, -1)

    def __call__(self, W: Float[Array, "p d"], x: PyTree[Float[ArrayLike, " ..."]]) -> Float[Array, " k"]:
        xq, X = x
        c = self._c().T  # (k, D)
        if not self.heads:
            Q, K = W[: self.D].T, W[self.D :].T  # (d_k, D)
            return _softmax_readout(X, X.T @ K.T @ (Q @ xq) / np.sqrt(self.d_k), c)
        n = self.d_k * self.D

        def head(w):
            Q, K = unvec(w[:n], self.d_k, self.D), unvec(w[n:], self.d_k, self.D)
            return _softmax_readout(X, X.T @ K.T @ (Q @ xq) / np.sqrt(self.d_k), c)

        return jnp.sum(jax.vmap(head, in_axes=1)(W), axis=0)

    def structure(
        self, xs: PyTree[Float[ArrayLike, "m ..."]], y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None
    ) -> FeedForwardData:
        xq, X = xs
        fn = structure.qk_heads if self.heads else structure.attention_logits
        return fn(xq, X, self._c(), y, d_k=self.d_k)

    def f0(self, xs: PyTree[Float[ArrayLike, "m ..."]], d: int) -> Float[Array, " mk"]:
        return structure.attention_f0(xs[1], self._c()) * (d if self.heads else 1)

    def effective_map(self, W: Float[Array, "p d"]) -> Float[Array, "na nb"]:
        """W^Q^T W^K / sqrt d_k (D, D) (single head; for heads, sum_i of the same): the NQF is
        f_o = f0 + x^T [W^Q^T W^K / sqrt d_k] u_o, u_o = Sigma_X c_o."""
        if not self.heads:
            return W[: self.D] @ W[self.D :].T / np.sqrt(self.d_k)
        n = self.d_k * self.D
        Qs = W[:n].T.reshape(-1, self.D, self.d_k)  # (d, D, d_k) = Q_i^T
        Ks = W[n:].T.reshape(-1, self.D, self.d_k)
        return jnp.einsum("icq,ieq->ce", Qs, Ks) / np.sqrt(self.d_k)

    def nqf_features(self, xs: PyTree[Float[ArrayLike, "m ..."]], d: int = 1) -> _Features:
        xq, X = xs
        u = structure.sigma_c(np.asarray(X), np.asarray(self._c()))  # (m, D, k)
        f0 = np.asarray(self.f0(xs, d)).reshape(u.shape[0], -1)
        return _Features(a=jnp.asarray(xq), b=jnp.asarray(u), f0=jnp.asarray(f0))


@dataclasses.dataclass(frozen=True, eq=False)
class MHA(_Module):
    """Multi-head attention with one neuron per head (Proposition 2):
    f_o = sum_i v_i[:, o]^T W^V_i X softmax(X^T W^K_i^T W^Q_i x / sqrt d_k),
    w_i = [vec W^Q_i (d_k D); vec W^K_i (d_k D); vec W^V_i (d_v D); vec v_i (d_v n_out)]."""

    D: int
    d_k: int
    d_v: int
    n_out: int = 1

    @property
    def p(self) -> int:
        return 2 * self.d_k * self.D + self.d_v * self.D + self.d_v * self.n_out

    def __call__(self, W: Float[Array, "p d"], x: PyTree[Float[ArrayLike, " ..."]]) -> Float[Array, " k"]:
        xq, X = x
        n, nv = self.d_k * self.D, self.d_v * self.D

        def head(w):
            Q, K = unvec(w[:n], self.d_k, self.D), unvec(w[n : 2 * n], self.d_k, self.D)
            WV = unvec(w[2 * n : 2 * n + nv], self.d_v, self.D)
            v = unvec(w[2 * n + nv :], self.d_v, self.n_out)
            att = jax.nn.softmax(X.T @ K.T @ (Q @ xq) / np.sqrt(self.d_k))
            return v.T @ (WV @ (X @ att))

        return jnp.sum(jax.vmap(head, in_axes=1)(W), axis=0)

    def structure(
        self, xs: PyTree[Float[ArrayLike, "m ..."]], y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None
    ) -> FeedForwardData:
        return structure.mha(xs[1], y, d_k=self.d_k, d_v=self.d_v, n_outputs=self.n_out)

    def effective_map(self, W: Float[Array, "p d"]) -> Float[Array, "na nb"]:
        """sum_i W^V_i^T v_i (D, n_out): the NQF is F(X) = (sum_i W^V_i^T v_i)^T x_avg."""
        n, nv = self.d_k * self.D, self.d_v * self.D
        WV = W[2 * n : 2 * n + nv].T.reshape(-1, self.D, self.d_v)  # (d, D, d_v) = W^V_i^T
        v = W[2 * n + nv :].T.reshape(-1, self.n_out, self.d_v)  # (d, n_out, d_v) = v_i^T
        return jnp.einsum("icv,iov->co", WV, v)

    def nqf_features(self, xs: PyTree[Float[ArrayLike, "m ..."]], d: int = 1) -> _Features:
        X = xs[1]
        return _Features(a=jnp.mean(jnp.asarray(X), axis=-1), b=_eye_b(X.shape[0], self.n_out), f0=None)


def _grad0(fn: Callable) -> float:
    with jax.ensure_compile_time_eval():  # a constant even when called under a trace
        return float(jax.grad(fn)(0.0))


_KINK_STEPS = (1e-2, 1e-3)  # one-sided differences at two steps: a jump at 0 does not shrink with h


def _kink_at_0(fn: Callable) -> tuple[int, float, float] | None:
    """The first order k in 1..3 at which the one-sided derivatives of the scalar function `fn`
    at 0 differ, as (k, right, left) (estimates at h = 1e-3), or None if fn looks C^3 at 0.

    Forward and backward differences of order k estimate f^(k)(0) from the right and from the
    left; for a C^{k+1} function they differ by k h f^(k+1)(0) + O(h^2), which shrinks tenfold
    from h = 1e-2 to 1e-3, while at a kink of order k (ReLU, |x|, leaky ReLU: k = 1; ELU, x|x|:
    k = 2; x^2 |x|: k = 3) the difference stays. Refused: a difference that shrinks by less than
    half and exceeds the rounding floor. Cost: 13 evaluations of fn. Only the neighbourhood
    |x| <= 3e-2 is probed (what the expansion about W = 0 uses)."""
    eps = np.finfo(float).eps
    out = []
    for h in _KINK_STEPS:
        xs = h * np.arange(-3.0, 4.0)
        with jax.ensure_compile_time_eval():
            f = np.asarray(fn(jnp.asarray(xs)), dtype=float).reshape(xs.shape)
        if not np.all(np.isfinite(f)):
            return (0, float("nan"), float("nan"))
        f0, fp, fm = f[3], f[4:], f[2::-1]  # f(0), f(h, 2h, 3h), f(-h, -2h, -3h)
        right = [(fp[0] - f0) / h, (fp[1] - 2 * fp[0] + f0) / h**2, (fp[2] - 3 * fp[1] + 3 * fp[0] - f0) / h**3]
        left = [(f0 - fm[0]) / h, (f0 - 2 * fm[0] + fm[1]) / h**2, (f0 - 3 * fm[0] + 3 * fm[1] - fm[2]) / h**3]
        floor = [1e3 * 2**k * eps * np.abs(f).max(initial=0.0) / h**k for k in (1, 2, 3)]
        out.append((right, left, floor))
    (r1, l1, _), (r2, l2, floor) = out
    for k in range(3):
        jump1, jump2 = abs(r1[k] - l1[k]), abs(r2[k] - l2[k])
        if jump2 > floor[k] and jump2 > 0.5 * jump1:
            return (k + 1, float(r2[k]), float(l2[k]))
    return None


def _check_smooth_at_0(fn: Callable, name: str, module: str, why: str) -> None:
    """`ValueError` naming `name` if the activation `fn` has a kink at 0 (`_kink_at_0`); `TypeError`
    if it is not JAX-traceable (a numpy function would fail later under jit / grad / extract)."""
    try:
        jax.eval_shape(jax.grad(fn), jax.ShapeDtypeStruct((), jnp.float64))
    except Exception as e:  # noqa: BLE001 - any failure to trace is the user's function
        raise TypeError(
            f"{module}: `{name}` must be a JAX-traceable scalar function (jax.numpy, not numpy); tracing its "
            f"derivative failed with {type(e).__name__}: {e}"
        ) from None
    kink = _kink_at_0(fn)
    if kink is None:
        return
    k, right, left = kink
    if k == 0:
        raise ValueError(f"{module}: `{name}` must be finite near 0 ({why}); found non-finite values for |x| <= 3e-2.")
    what = ("derivative", "second derivative", "third derivative")[k - 1]
    raise ValueError(
        f"{module}: `{name}` must be smooth (C^3) at 0 ({why}); its {what} jumps there: {right:.3g} from the "
        f"right, {left:.3g} from the left (e.g. ReLU, |x|, leaky ReLU, ELU). The NQF is the module's Taylor "
        "expansion about W = 0, which such a kink breaks (for ReLU `nqf.extract` raises SmoothnessError). "
        "Use a smooth activation with value 0 at 0 (tanh, GELU, SiLU, sin, ...)."
    )


@dataclasses.dataclass(frozen=True, eq=False)
class MoE(_Module):
    """Mixture of experts with independent gating (Proposition 5):
    f_o(x) = sum_i psi(r_i^T x) E_o(x; Theta_i), with experts E_o(x; Theta_i) = phi(theta_io^T x),
    Theta_i = [theta_i1 ... theta_ik] (n_in, n_out).

    Neuron (expert) i is w_i = [r_i (n_in); vec Theta_i (n_in n_out)] (column-stacking vec:
    w_i[n_in + o n_in + j] = Theta_i[j, o]), p = n_in (1 + n_out), the layout of
    `nqf.structure.moe`. Proposition 5 needs psi(0) = 0 and E(x; 0) = 0, i.e. phi(0) = 0
    (checked at construction); then A_o(x) = psi'(0)/2 [[0, x G_o^T], [G_o x^T, 0]] with
    G_o = grad_Theta E_o(x; 0) = phi'(0) vec(x e_o^T), and the NQF is
    f_o = psi'(0) phi'(0) x^T (sum_i r_i theta_io^T) x. For odd psi and phi (the default tanh)
    the module - NQF gap is O(|W|^4). Proposition 5 also assumes psi and phi C^3 (its proof,
    Appendix A.8): a kink at 0 (ReLU, |x|, leaky ReLU, ELU) is refused at construction, found
    from one-sided finite differences of orders 1 to 3 at |x| <= 3e-2 (`_kink_at_0`).

    **Raises:** `ValueError` for n_in, n_out < 1, psi(0), phi(0) != 0, or psi / phi with a kink at 0.
    """

    n_in: int
    n_out: int = 1
    psi: Callable = jnp.tanh
    phi: Callable = jnp.tanh

    def __post_init__(self):
        for name, v in (("n_in", self.n_in), ("n_out", self.n_out)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"MoE: `{name}` must be an integer >= 1; found {v!r}.")
        for name, fn in (("psi", self.psi), ("phi", self.phi)):
            with jax.ensure_compile_time_eval():
                v0 = float(fn(0.0))
            if v0 != 0.0:
                raise ValueError(
                    f"MoE: `{name}(0)` must be 0 (Proposition 5: gate psi(0) = 0 and expert E(x; 0) = 0); found {v0:.3g}."
                )
            _check_smooth_at_0(fn, name, "MoE", "Proposition 5 assumes psi and the experts E are C^3")

    @property
    def p(self) -> int:
        return self.n_in * (1 + self.n_out)

    def __call__(self, W: Float[Array, "p d"], x: PyTree[Float[ArrayLike, " ..."]]) -> Float[Array, " k"]:
        n = self.n_in
        gate = self.psi(W[:n].T @ x)  # (d,)
        Th = W[n:].T.reshape(W.shape[1], self.n_out, n)  # (d, k, n): Theta_i^T
        return jnp.einsum("i,io->o", gate, self.phi(Th @ x))

    def psi_prime0(self) -> float:
        return _grad0(self.psi)

    def phi_prime0(self) -> float:
        return _grad0(self.phi)

    def _G(self, xs) -> np.ndarray:
        """G_o(x) = phi'(0) vec(x e_o^T), shape (m, n_out, n_in n_out)."""
        xs = np.asarray(xs, dtype=float)
        m, n, k = xs.shape[0], self.n_in, self.n_out
        G = np.zeros((m, k, k, n))
        G[:, np.arange(k), np.arange(k), :] = xs[:, None, :]
        return self.phi_prime0() * G.reshape(m, k, k * n)

    def structure(
        self, xs: PyTree[Float[ArrayLike, "m ..."]], y: Float[ArrayLike, " m"] | Float[ArrayLike, "m k"] | None = None
    ) -> FeedForwardData:
        return structure.moe(xs, y, G=self._G(xs), psi_prime0=self.psi_prime0())

    def effective_map(self, W: Float[Array, "p d"]) -> Float[Array, "na nb"]:
        """psi'(0) R Theta^T (n_in, n_in n_out), R = W[:n_in], Theta = W[n_in:]: the NQF is
        F_o(x) = x^T E b_o(x) with b_o = G_o(x); its block o (columns o n_in .. (o+1) n_in) is
        psi'(0) sum_i r_i theta_io^T."""
        return self.psi_prime0() * W[: self.n_in] @ W[self.n_in :].T

    def nqf_features(self, xs: PyTree[Float[ArrayLike, "m ..."]], d: int = 1) -> _Features:
        return _Features(a=jnp.asarray(xs), b=jnp.asarray(np.swapaxes(self._G(xs), 1, 2)), f0=None)
