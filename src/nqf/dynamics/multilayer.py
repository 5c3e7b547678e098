"""Multi-layer NQFs: closed per-layer SGD dynamics (Theorem 14) and per-layer compression
(Theorem 15); THEORY sec. 10, paper Appendix B.4.

An L-layer NQF maps h^(0) = x through layers l = 1..L of widths d_l (neurons in R^{p_l}):

    h^(l)_k = C^(l)_k + g^(l)_k^T mu^(l) + mu^(l)T B^(l)_k mu^(l) + s_l Tr[M^(l) A^(l)_k],
    k = 1..D_l,  M^(l) = W^(l) W^(l)T,  mu^(l) = W^(l) 1,

where the structure components (C, g, B, A)^(l) are arbitrary (JAX-traceable) functions of the
previous layer's output h^(l-1)(x) (`Layer.structure`), and s_l (`Layer.a_scale`, default 1) is
the factor d'_l/d_l that Theorem 15's compression puts on A. B follows `nqf.NQFModel`'s
convention (mu^T B mu includes i = j).

**Theorem 14 (closed dynamics).** With the batch loss L = (1/b) sum_x sum_k ell(h^(L)_k(x),
y_k(x)) and delta^(l)_k(x) = dL/dh^(l)_k(x) (backpropagation through the layers),

    v^(l) = sum_x sum_k delta^(l)_k (g^(l)_k + 2 B^(l)_k mu^(l)),
    H^(l) = sum_x sum_k 2 s_l delta^(l)_k A^(l)_k   (+ gamma_l I with weight decay),

and grad_{W^(l)} L = v^(l) 1^T + H^(l) W^(l), so each layer's (mu^(l), M^(l)) follows E5-E6 with
its own width d_l and learning rate eta_l, and the whole state is closed. `closed_deep_sgd`
iterates exactly this (default: the centered-factor form of `nqf.closed_sgd`, which keeps the rank of
M - mu mu^T / d exactly; ``form="M"``: E5-E6 literally). `train_deep_w` trains the weights
W^(l) themselves with autodiff gradients (the independent reference).

**Theorem 15 (per-layer compression).** With V^(l) the span of g^(l)_k, Col A^(l)_k and
Col B^(l)_k over the training inputs AND the training times (h^(l-1) moves during training),
each layer compresses to d'_l = k_l + 1 neurons by Theorem 3's construction with
A~ = (d'_l/d_l) A (a_scale), eta~_l = (d_l/d'_l) eta_l; every layer output h^(l) on every
training input is unchanged at every step. `layer_spans` computes V^(l) from a trajectory,
`compress_deep` builds the compressed deep NQF.

Time: steps n; layer l's gradient-flow time is eta_l n.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from .._core._checks import as_array, check_positive, shape_str
from ..data._span import DEFAULT_RTOL, Span, _rows_dense, _rows_vectors, helmert_rows, span_from_rows
from ._losses import PerSampleLoss, as_loss
from ._maps import _centered_factor_from_W
from ._train_args import (
    check_count,
    check_saves_memory,
    first_nonfinite_step,
    loop_counts,
    resolve_batches,
    save_schedule,
)

__all__ = [
    "Structure",
    "Layer",
    "DeepNQF",
    "DeepTrajectory",
    "closed_deep_sgd",
    "train_deep_w",
    "deep_outputs",
    "layer_spans",
    "DeepCompression",
    "compress_deep",
    "feedforward_layer",
]


class Structure(NamedTuple):
    """Structure components of one layer at one input h^(l-1):
    `A` (D, p, p) symmetric; `C` (D,), `g` (D, p), `B` (D, p, p) symmetric, each optional."""

    A: jax.Array
    C: jax.Array | None = None
    g: jax.Array | None = None
    B: jax.Array | None = None


class Layer(eqx.Module):
    """One NQF layer of a deep NQF (Theorem 14).

    **Arguments:**

    - `structure`: a JAX-traceable function h_prev -> `Structure` (or a tuple (A, C, g, B)),
      for ONE input: h_prev is the previous layer's output (D_{l-1},) (for l = 1, one training
      input of any shape). A must be symmetric (D, p, p). Static (hashed by identity): reuse the
      same function object to reuse compiled programs.
    - `p`: neuron dimension; `D`: output dimension of the layer.
    - `a_scale`: factor s_l on A (1 for an ordinary layer; d'/d after compression).
    - `traces`, `weighted` (optional, static): structured fast paths for A that must agree with
      `structure`'s dense A: ``traces(h_prev, M) -> (D,)`` = Tr[M A_k(h_prev)] for one input, and
      ``weighted(h_prev_batch, c) -> (p, p)`` = sum_{x,k} c_{x k} A_k(h_prev(x)) for a batch
      (b, ...) and weights c (b, D). When given, the dense A is never formed in training (the
      dense form is still used by `layer_spans`). `feedforward_layer` provides them.
    """

    structure: Callable = eqx.field(static=True)
    p: int = eqx.field(static=True)
    D: int = eqx.field(static=True)
    a_scale: jax.Array
    traces: Callable | None = eqx.field(static=True)
    weighted: Callable | None = eqx.field(static=True)

    def __init__(
        self,
        structure: Callable[[Array], Structure | tuple],
        p: int,
        D: int,
        a_scale: float = 1.0,
        *,
        traces: Callable[[Array, Array], Array] | None = None,
        weighted: Callable[[Array, Array], Array] | None = None,
    ):
        if not callable(structure):
            raise TypeError(f"`structure` must be a callable h_prev -> Structure; found {type(structure).__name__}.")
        for name, val in (("p", p), ("D", D)):
            if isinstance(val, (bool, np.bool_)) or not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"`{name}` must be an integer >= 1; found {val!r}.")
        if (traces is None) != (weighted is None):
            raise ValueError("Give both `traces` and `weighted` (structured fast paths for A) or neither.")
        self.structure = structure
        self.p = int(p)
        self.D = int(D)
        self.a_scale = jnp.asarray(check_positive(a_scale, "a_scale"), dtype=jnp.float64)
        self.traces = traces
        self.weighted = weighted

    def components(self, h_prev: Float[Array, " ..."]) -> Structure:
        s = self.structure(h_prev)
        return s if isinstance(s, Structure) else Structure(*s)

    def evaluate(
        self, h_prev: Float[Array, " ..."], M: Float[Array, "p p"], mu: Float[Array, " p"]
    ) -> Float[Array, " D"]:
        """h^(l) (D,) for one input from h^(l-1) and the layer's (M, mu)."""
        s = self.components(h_prev)
        if self.traces is not None:
            h = self.a_scale * self.traces(h_prev, M)
        else:
            h = self.a_scale * jnp.einsum("kij,ij->k", s.A, M)
        if s.C is not None:
            h = h + s.C
        if s.g is not None:
            h = h + s.g @ mu
        if s.B is not None:
            h = h + jnp.einsum("i,kij,j->k", mu, s.B, mu)
        return h

    def weighted_A(self, h_prev_batch, c):
        """sum_{x,k} c_{x k} A_k(h_prev(x)) (p, p) for a batch (b, ...) and weights c (b, D)."""
        if self.weighted is not None:
            return self.weighted(h_prev_batch, c)
        A = jax.vmap(lambda h: self.components(h).A)(h_prev_batch)
        return jnp.einsum("bk,bkij->ij", c, A)


class DeepNQF(eqx.Module):
    """An L-layer NQF on m training inputs (Theorem 14).

    **Arguments:** `layers`: sequence of `Layer`; `X`: training inputs, shape (m, ...) (what the
    first layer's structure takes, one row per input); `y`: labels, shape (m,) or (m, D_L)
    (stored as (m, D_L)).

    **Raises:** `ValueError` if the label shape does not match (m, D_L), or a layer's structure
    returns shapes inconsistent with its (p, D) or with the next layer's input (checked by
    abstract evaluation on the first input).
    """

    layers: tuple[Layer, ...]
    X: jax.Array
    y: jax.Array

    def __init__(
        self, layers: Sequence[Layer], X: Float[ArrayLike, "m ..."], y: Float[ArrayLike, " m"] | Float[ArrayLike, "m D"]
    ):
        layers = tuple(layers)
        if not layers or not all(isinstance(lay, Layer) for lay in layers):
            raise TypeError("`layers` must be a non-empty sequence of `nqf.multilayer.Layer`.")
        X = as_array(X, "X")
        if X.ndim < 1:
            raise ValueError(f"`X` must have shape (m, ...); found {shape_str(X.shape)}.")
        m, D_L = X.shape[0], layers[-1].D
        y = as_array(y, "y")
        if y.ndim == 1:
            y = y[:, None]
        if y.shape != (m, D_L):
            raise ValueError(
                f"`y` must have shape ({m},) or ({m}, {D_L}) (one label per input and output of the "
                f"last layer); found {shape_str(y.shape)}."
            )
        self.layers, self.X, self.y = layers, X, y
        self._check_shapes()

    def _check_shapes(self):
        h = jax.ShapeDtypeStruct(self.X.shape[1:], jnp.float64)
        for l, lay in enumerate(self.layers):
            s = jax.eval_shape(lay.components, h)
            D, p = lay.D, lay.p
            want = {"A": (D, p, p), "C": (D,), "g": (D, p), "B": (D, p, p)}
            for name, shape in want.items():
                got = getattr(s, name)
                if (name == "A" and got is None) or (got is not None and tuple(got.shape) != shape):
                    raise ValueError(
                        f"layer {l + 1}: structure component `{name}` must have shape "
                        f"{shape_str(shape)}; found {None if got is None else shape_str(got.shape)}."
                    )
            h = jax.ShapeDtypeStruct((D,), jnp.float64)

    @property
    def m(self) -> int:
        return self.X.shape[0]

    @property
    def L(self) -> int:
        return len(self.layers)

    def forward(
        self, Ms: Sequence[Float[Array, "p p"]], mus: Sequence[Float[Array, " p"]], x: Float[Array, " ..."]
    ) -> list[Float[Array, " D"]]:
        """All layer outputs for one input: list of h^(1..L), h^(l) of shape (D_l,)."""
        hs, h = [], x
        for lay, M, mu in zip(self.layers, Ms, mus):
            h = lay.evaluate(h, M, mu)
            hs.append(h)
        return hs

    def outputs(
        self,
        Ms: Sequence[Float[Array, "p p"]],
        mus: Sequence[Float[Array, " p"]],
        X: Float[ArrayLike, "n ..."] | None = None,
    ) -> Float[Array, "n D"]:
        """Final outputs h^(L) for inputs X (default: the training inputs), shape (n_inputs, D_L)."""
        X = self.X if X is None else X
        return jax.vmap(lambda x: self.forward(Ms, mus, x)[-1])(X)


def feedforward_layer(
    k: int,
    D: int,
    *,
    phi_prime0: float = 1.0,
    transform: Callable[[Array], Array] | None = None,
    C: Callable[[Array], Array] | None = None,
) -> Layer:
    """A multi-output two-layer-MLP module as an NQF layer (Prop. 1, Corollary 1):
    h_j = sum_i o_{ji} phi(u_i^T z), neurons w_i = [u_i (k); o_i (D)], p = k + D, with
    A_j(z) = phi'(0)/2 [[0, z e_j^T], [e_j z^T, 0]] (D, p, p); z = transform(h_prev) (default
    z = h_prev, e.g. ``jnp.tanh`` for the nonlinearity between two modules); optional constant
    term C(h_prev) -> (D,). Structured fast paths: Tr[M A_j(z)] = phi'(0) (z^T M[:k, k:])_j and
    sum c_{xj} A_j(z_x) = phi'(0)/2 [[0, Z^T c], [c^T Z, 0]] (O(b k D) instead of O(b D p^2))."""
    p = k + D
    f = float(phi_prime0)
    tf = (lambda h: h) if transform is None else transform

    def structure(h):
        z = tf(h)
        blk = 0.5 * f * jnp.einsum("i,jk->jik", z, jnp.eye(D))  # (D, k, D): z e_j^T
        A = jnp.zeros((D, p, p)).at[:, :k, k:].set(blk)
        A = A + jnp.swapaxes(A, 1, 2)
        return Structure(A, None if C is None else C(h))

    def traces(h, M):
        return f * (tf(h) @ M[:k, k:])

    def weighted(hb, c):
        blk = 0.5 * f * (jax.vmap(tf)(hb).T @ c)  # (k, D)
        return jnp.zeros((p, p)).at[:k, k:].set(blk).at[k:, :k].set(blk.T)

    return Layer(structure, p, D, traces=traces, weighted=weighted)


# --------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class DeepTrajectory:
    """Result of `closed_deep_sgd` / `train_deep_w`; n saved steps, L layers.

    **Attributes:** `steps` (n,); `M`: tuple of (n, p_l, p_l); `mu`: tuple of (n, p_l);
    `outputs` h^(L) on the training inputs (n, m, D_L); `loss` (1/m) sum_x sum_k ell (n,);
    `W`: tuple of (n, p_l, d_l) (W-space only, else None); `widths`; `lr` (per layer).
    """

    steps: np.ndarray
    M: tuple
    mu: tuple
    outputs: np.ndarray
    loss: np.ndarray
    W: tuple | None
    widths: tuple
    lr: tuple


def _per_layer(x, L: int, name: str, check) -> tuple:
    vals = tuple(x) if isinstance(x, (list, tuple, np.ndarray)) else (x,) * L
    if len(vals) != L:
        raise ValueError(f"`{name}` must be a scalar or one value per layer ({L}); found {len(vals)}.")
    return tuple(check(v) for v in vals)


def _batch_loss(deep: DeepNQF, loss: PerSampleLoss, outs, y):
    return jnp.mean(jnp.sum(loss.value(outs.reshape(-1), y.reshape(-1)).reshape(y.shape), axis=1))


def _gradient_terms(deep: DeepNQF, loss: PerSampleLoss, Ms, mus, X, y, gammas):
    """(v^(l), H^(l)) of Theorem 14 for every layer on the batch (X, y), by backpropagating
    delta^(l) = dL/dh^(l) through the layers and weighting the structure components."""
    Lyr = deep.layers

    def out_eps(x, eps):
        hs_prev, h = [], x
        for lay, M, mu, e in zip(Lyr, Ms, mus, eps):
            hs_prev.append(h)
            h = lay.evaluate(h, M, mu) + e
        return h, hs_prev

    def total(eps):
        outs, hprev = jax.vmap(out_eps)(X, eps)
        return _batch_loss(deep, loss, outs, y), hprev

    zeros = [jnp.zeros((X.shape[0], lay.D)) for lay in Lyr]
    deltas, hprev = jax.grad(total, has_aux=True)(zeros)
    vs, Hs = [], []
    for lay, mu, delta, hp, gamma in zip(Lyr, mus, deltas, hprev, gammas):
        s = jax.vmap(lay.components)(hp)
        H = 2.0 * lay.a_scale * lay.weighted_A(hp, delta) + gamma * jnp.eye(lay.p)
        v = jnp.zeros(lay.p)
        if s.g is not None:
            v = v + jnp.einsum("bk,bki->i", delta, s.g)
        if s.B is not None:
            v = v + 2.0 * jnp.einsum("bk,bkij,j->i", delta, s.B, mu)
        vs.append(v)
        Hs.append(0.5 * (H + H.T))
    return vs, Hs


class _ClosedDeep(eqx.Module):
    deep: DeepNQF
    loss: PerSampleLoss
    lrs: tuple
    ds: tuple
    gammas: tuple
    factor: bool = eqx.field(static=True)

    def order_params(self, state):
        if not self.factor:
            return [s[0] for s in state], [s[1] for s in state]
        Ms = []
        for (Lf, mu), d in zip(state, self.ds):
            M = Lf @ Lf.T + jnp.outer(mu, mu) / d
            Ms.append(0.5 * (M + M.T))
        return Ms, [s[1] for s in state]

    def step(self, state, X, y):
        Ms, mus = self.order_params(state)
        vs, Hs = _gradient_terms(self.deep, self.loss, Ms, mus, X, y, self.gammas)
        new = []
        for (a, mu), M, v, H, lr, d in zip(state, Ms, vs, Hs, self.lrs, self.ds):
            mu_n = mu - lr * (d * v + H @ mu)
            if self.factor:
                new.append((a - lr * (H @ a), mu_n))
            else:
                HM, Hmu = H @ M, H @ mu
                vmu, vHmu = jnp.outer(v, mu), jnp.outer(v, Hmu)
                Mn = M - lr * (vmu + vmu.T + HM + HM.T) + lr**2 * (d * jnp.outer(v, v) + vHmu + vHmu.T + HM @ H)
                new.append((0.5 * (Mn + Mn.T), mu_n))
        return new


class _WDeep(eqx.Module):
    deep: DeepNQF
    loss: PerSampleLoss
    lrs: tuple
    gammas: tuple

    def order_params(self, Ws):
        return [W @ W.T for W in Ws], [jnp.sum(W, axis=1) for W in Ws]

    def step(self, Ws, X, y):
        def objective(Ws):
            Ms, mus = self.order_params(Ws)
            outs = jax.vmap(lambda x: self.deep.forward(Ms, mus, x)[-1])(X)
            pen = sum(0.5 * g * jnp.sum(W**2) for g, W in zip(self.gammas, Ws))
            return _batch_loss(self.deep, self.loss, outs, y) + pen

        grads = jax.grad(objective)(Ws)
        return [W - lr * G for W, G, lr in zip(Ws, grads, self.lrs)]


@eqx.filter_jit
def _run(stepper, state0, idx, n_saves: int, save_every, remainder, has_remainder: bool, keep_state: bool):
    deep = stepper.deep

    def batch(k):
        if idx is None:
            return deep.X, deep.y
        rows = jax.lax.dynamic_index_in_dim(idx, k, keepdims=False)
        return deep.X[rows], deep.y[rows]

    def block(carry, n):
        def body(_, carry):
            state, k = carry
            return stepper.step(state, *batch(k)), k + 1

        return jax.lax.fori_loop(0, n, body, carry)

    def observe(state):
        Ms, mus = stepper.order_params(state)
        return (Ms, mus, state if keep_state else None)

    def scan_body(carry, _):
        carry = block(carry, save_every)
        return carry, observe(carry[0])

    carry0 = (state0, jnp.asarray(0, dtype=jnp.int32))
    carry, saved = jax.lax.scan(scan_body, carry0, None, length=n_saves)
    parts = [jax.tree.map(lambda x: x[None], observe(carry0[0])), saved]
    if has_remainder:
        parts.append(jax.tree.map(lambda x: x[None], observe(block(carry, remainder)[0])))
    Ms, mus, states = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *parts)
    outs = jax.lax.map(lambda a: deep.outputs(*a), (Ms, mus))
    losses = jax.vmap(lambda o: _batch_loss(deep, stepper.loss, o, deep.y))(outs)
    return Ms, mus, states, outs, losses


def _common_args(deep, lr, steps, save_every, weight_decay, batch_indices, batch_size, key, loss, where: str):
    if not isinstance(deep, DeepNQF):
        raise TypeError(f"`deep` must be an `nqf.multilayer.DeepNQF`; found {type(deep).__name__}.")
    L = deep.L
    lrs = _per_layer(lr, L, "lr", lambda v: check_positive(v, "lr"))
    gammas = _per_layer(weight_decay, L, "weight_decay", lambda v: check_positive(v, "weight_decay", allow_zero=True))
    steps = check_count(steps, "steps")
    save_every = check_count(save_every, "save_every")
    floats = sum(2 * lay.p * lay.p + lay.p for lay in deep.layers) + 2 * deep.m + 1  # M, L or W, mu; outputs, loss
    check_saves_memory(where, steps, save_every, floats)
    idx = resolve_batches(batch_indices, batch_size, key, deep.m, steps)
    return L, lrs, gammas, steps, save_every, idx, as_loss(loss)


def _check_W0(deep: DeepNQF, W0) -> list:
    if not isinstance(W0, (list, tuple)) or len(W0) != deep.L:
        raise ValueError(f"`W0` must be a list of {deep.L} arrays (one (p_l, d_l) per layer); found {W0!r:.80}.")
    out = []
    for l, (lay, W) in enumerate(zip(deep.layers, W0)):
        W = np.asarray(as_array(W, f"W0[{l}]", ndim=2))
        if W.shape[0] != lay.p:
            raise ValueError(
                f"`W0[{l}]` must have shape ({lay.p}, d) (one column per neuron of layer {l + 1}); "
                f"found {shape_str(W.shape)}."
            )
        out.append(W)
    return out


def _trajectory(saved, Ms, mus, outs, losses, W, widths, lrs, what: str, allow_nonfinite=False):
    Ms = tuple(np.asarray(M) for M in Ms)
    for M in Ms:
        bad = first_nonfinite_step(saved, M)
        if bad is not None and not allow_nonfinite:
            raise FloatingPointError(f"{what} diverged: non-finite M by step {bad}. Reduce `lr`.")
    return DeepTrajectory(
        saved,
        Ms,
        tuple(np.asarray(mu) for mu in mus),
        np.asarray(outs),
        np.asarray(losses),
        W,
        tuple(widths),
        tuple(lrs),
    )


def closed_deep_sgd(
    deep: DeepNQF,
    W0: Sequence[Float[ArrayLike, "p d"]],
    *,
    lr: float,
    steps: int,
    batch_indices: Int[ArrayLike, "steps b"] | None = None,
    batch_size: int | None = None,
    key: PRNGKeyArray | int | None = None,
    weight_decay: float = 0.0,
    loss: str | Callable[[Array, Array], Array] | PerSampleLoss | None = None,
    save_every: int = 1,
    form: str = "factor",
    allow_nonfinite: bool = False,
) -> DeepTrajectory:
    """Theorem 14: train a deep NQF with (minibatch) SGD on the per-layer order parameters only.

    Each step computes delta^(l) = dL/dh^(l) by backpropagation, v^(l) and H^(l) by weighting the
    structure components (module docstring), and updates every layer by E5-E6 (in the
    rank-preserving centered-factor form (L_l, mu_l), M = L L^T + mu mu^T / d, by default;
    ``form="M"`` iterates E5-E6 on (M, mu) literally). Cost per step independent of the widths.

    **Arguments:** `deep`: a `DeepNQF`; `W0`: list of initial weights (p_l, d_l) (only M, mu and
    the widths d_l are used); `lr`: eta, scalar or one per layer (> 0); `steps`; batches as in
    `nqf.closed_sgd` (`batch_indices` (steps, b), or `batch_size` with `key`, else full batch);
    `weight_decay`: gamma >= 0, scalar or per layer; `loss`: ``"mse"`` or ell(f, y) per output;
    `save_every`; `form`: ``"factor"`` or ``"M"``; `allow_nonfinite`: return a diverged
    trajectory (non-finite entries from the divergence on) instead of raising.

    **Returns:** a `DeepTrajectory` (per-layer M (n, p_l, p_l) and mu (n, p_l), outputs
    (n, m, D_L), loss (n,)).

    **Raises:** `ValueError` for W0 shapes inconsistent with the layers, bad lr/steps/batches or
    form; `FloatingPointError` on divergence.
    """
    L, lrs, gammas, steps, save_every, idx, loss = _common_args(
        deep, lr, steps, save_every, weight_decay, batch_indices, batch_size, key, loss, "closed_deep_sgd"
    )
    if form not in ("factor", "M"):
        raise ValueError(f"`form` must be 'factor' or 'M'; found {form!r}.")
    W0 = _check_W0(deep, W0)
    widths = [W.shape[1] for W in W0]
    f64 = lambda x: jnp.asarray(x, dtype=jnp.float64)  # noqa: E731
    if form == "factor":
        state0 = [(f64(_centered_factor_from_W(W)), f64(W.sum(axis=1))) for W in W0]
    else:
        state0 = [(f64(W @ W.T), f64(W.sum(axis=1))) for W in W0]
    stepper = _ClosedDeep(
        deep, loss, tuple(map(f64, lrs)), tuple(map(f64, widths)), tuple(map(f64, gammas)), form == "factor"
    )
    saved, n_saves, remainder = save_schedule(steps, save_every)
    Ms, mus, _, outs, losses = _run(stepper, state0, idx, n_saves, *loop_counts(save_every, remainder), False)
    return _trajectory(saved, Ms, mus, outs, losses, None, widths, lrs, "The closed deep map", allow_nonfinite)


def train_deep_w(
    deep: DeepNQF,
    W0: Sequence[Float[ArrayLike, "p d"]],
    *,
    lr: float,
    steps: int,
    batch_indices: Int[ArrayLike, "steps b"] | None = None,
    batch_size: int | None = None,
    key: PRNGKeyArray | int | None = None,
    weight_decay: float = 0.0,
    loss: str | Callable[[Array, Array], Array] | PerSampleLoss | None = None,
    save_every: int = 1,
) -> DeepTrajectory:
    """Weight-space reference for `closed_deep_sgd`: SGD on the weights W^(l) (p_l, d_l) with
    gradients by `jax.grad` of the loss through M = W W^T, mu = W 1 (Theorem 14's formulas are
    not used). Same arguments as `closed_deep_sgd` (no `form`); cost O(sum_l p_l^2 d_l) more per
    step. Returns a `DeepTrajectory` with `W` filled."""
    L, lrs, gammas, steps, save_every, idx, loss = _common_args(
        deep, lr, steps, save_every, weight_decay, batch_indices, batch_size, key, loss, "train_deep_w"
    )
    W0 = _check_W0(deep, W0)
    widths = [W.shape[1] for W in W0]
    f64 = lambda x: jnp.asarray(x, dtype=jnp.float64)  # noqa: E731
    stepper = _WDeep(deep, loss, tuple(map(f64, lrs)), tuple(map(f64, gammas)))
    saved, n_saves, remainder = save_schedule(steps, save_every)
    Ms, mus, Ws, outs, losses = _run(
        stepper, [f64(W) for W in W0], idx, n_saves, *loop_counts(save_every, remainder), True
    )
    return _trajectory(
        saved, Ms, mus, outs, losses, tuple(np.asarray(W) for W in Ws), widths, lrs, "W-space deep training"
    )


@eqx.filter_jit
def _deep_outputs(deep, Ms, mus, X):
    return jax.lax.map(lambda a: deep.outputs(a[0], a[1], X), (Ms, mus))


def deep_outputs(
    deep: DeepNQF, traj: DeepTrajectory, X: Float[ArrayLike, "n ..."] | None = None
) -> Float[np.ndarray, "nt n D"]:
    """h^(L) at every saved step of `traj` on inputs X (default: training inputs), shape
    (n, n_inputs, D_L)."""
    X = deep.X if X is None else as_array(X, "X")
    f64 = lambda x: jnp.asarray(x, dtype=jnp.float64)  # noqa: E731
    return np.asarray(_deep_outputs(deep, [f64(M) for M in traj.M], [f64(m) for m in traj.mu], X))


# --------------------------------------------------------------------------------------------
# Theorem 15: per-layer compression
# --------------------------------------------------------------------------------------------
@eqx.filter_jit
def _inputs_at(deep: DeepNQF, Ms, mus):
    """h^(0..L-1) of every training input at every saved step: list of (n, m, D_{l-1} or x)."""

    def at(a):
        hs = jax.vmap(lambda x: deep.forward(a[0], a[1], x))(deep.X)
        return hs[:-1]

    return jax.lax.map(at, (Ms, mus))


def layer_spans(deep: DeepNQF, traj: DeepTrajectory, *, rtol: float = DEFAULT_RTOL, every: int = 1) -> list[Span]:
    """V^(l) of Theorem 15 for every layer: the span of g^(l)_k, Col A^(l)_k, Col B^(l)_k at
    h^(l-1)(x) for every training input x and every `every`-th saved step of `traj` (layer 1:
    at the inputs only). Rank tolerance as `nqf.compress.data_span` (rows normalized per
    sample-output pair, sigma_i > rtol sigma_1).

    Theorem 15 needs the span over every step that will be trained: use a trajectory of the
    original covering the whole run (and `every` = 1 unless the span is known to saturate);
    beyond it the compressed model is exact only if h^(l-1) stays in the sampled span.

    **Returns:** list of `Span`, one per layer.
    """
    f64 = lambda x: jnp.asarray(x, dtype=jnp.float64)  # noqa: E731
    sel = slice(None, None, check_count(every, "every"))
    Ms = [f64(M[sel]) for M in traj.M]
    mus = [f64(mu[sel]) for mu in traj.mu]
    prev = _inputs_at(deep, Ms, mus) if deep.L > 1 else []
    spans = []
    for l, lay in enumerate(deep.layers):
        H = np.asarray(deep.X)[None] if l == 0 else np.asarray(prev[l - 1])
        H = H.reshape(-1, *H.shape[2:])
        s = jax.jit(jax.vmap(lay.components))(f64(H))

        def rows(s=s, lay=lay):
            yield from _rows_dense(np.asarray(s.A).reshape(-1, lay.p, lay.p))
            if s.g is not None:
                yield from _rows_vectors(np.asarray(s.g).reshape(-1, lay.p), rtol)
            if s.B is not None:
                yield from _rows_dense(np.asarray(s.B).reshape(-1, lay.p, lay.p))

        spans.append(span_from_rows(rows(), lay.p, rtol))
    return spans


@dataclasses.dataclass(frozen=True, eq=False)
class DeepCompression:
    """A deep NQF compressed layer by layer (Theorem 15).

    **Attributes:** `deep`: the compressed `DeepNQF` (layer l's A scaled by d'_l/d_l);
    `W0`: list of (p_l, d'_l); `lr`: per-layer eta~_l = (d_l/d'_l) eta_l; `widths` d_l;
    `widths_compressed` d'_l = k_l + 1; `spans`: the V^(l).
    """

    deep: DeepNQF
    W0: list
    lr: tuple
    widths: tuple
    widths_compressed: tuple
    spans: list


def compress_deep(
    deep: DeepNQF, W0: Sequence[Float[ArrayLike, "p d"]], *, lr: float, spans: Sequence[Span]
) -> DeepCompression:
    """Theorem 15: compress every layer l to d'_l = k_l + 1 neurons (Theorem 3's construction on
    V^(l) = `spans[l]`, e.g. from `layer_spans` of the original's trajectory).

    **Arguments:** `deep`, `W0` (list of (p_l, d_l)), `lr` (scalar or per layer), `spans`.

    **Returns:** a `DeepCompression`; train it with `closed_deep_sgd` / `train_deep_w` using its
    `lr` and the same batches: all layer outputs on the training inputs stay equal.
    """
    W0 = _check_W0(deep, W0)
    lrs = _per_layer(lr, deep.L, "lr", lambda v: check_positive(v, "lr"))
    if len(spans) != deep.L:
        raise ValueError(f"`spans` must hold one `Span` per layer ({deep.L}); found {len(spans)}.")
    layers, Ws, new_lr, dps = [], [], [], []
    for lay, W, lr_l, sp in zip(deep.layers, W0, lrs, spans):
        if not isinstance(sp, Span) or sp.V.shape[0] != lay.p:
            raise ValueError(f"each span must be a `Span` with V of shape ({lay.p}, k); found {sp!r:.80}.")
        d, k, V = W.shape[1], sp.k, sp.V
        dp = k + 1
        c = d / dp
        L0 = _centered_factor_from_W(W)
        Lk = np.zeros((k, k))
        if k:
            r = np.linalg.qr((V.T @ L0).T, mode="r")
            Lk[:, : r.shape[0]] = math.sqrt(c) * r.T
        mu = V @ (V.T @ W.sum(axis=1))
        Ws.append(mu[:, None] / dp + V @ Lk @ helmert_rows(k, dp))
        layers.append(
            Layer(lay.structure, lay.p, lay.D, float(lay.a_scale) / c, traces=lay.traces, weighted=lay.weighted)
        )
        new_lr.append(c * lr_l)
        dps.append(dp)
    return DeepCompression(
        DeepNQF(layers, deep.X, deep.y), Ws, tuple(new_lr), tuple(W.shape[1] for W in W0), tuple(dps), list(spans)
    )
