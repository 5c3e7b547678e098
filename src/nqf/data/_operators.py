"""The NQF data set: m symmetric p x p data matrices A_mu with labels y_mu (THEORY sec. 1, 4).

Six representations share one interface (`AbstractData`), so that every flow and oracle runs on
whichever is cheapest for the structure at hand and never materializes an (m, p, p) tensor unless
the data is given that way:

- `DenseData`: A of shape (m, p, p), the fallback.
- `CommutingData`: A_mu = P diag(Lambda_mu) P^T with Lambda of shape (m, p) and an optional
  orthogonal P (p, p) shared by all samples (Assumption 1 of the paper).
- `DiagonalData`: one feature per sample, A_k = lam_k e_k e_k^T (m = p), stored as the vector
  lam (p,): the Fig. 3 right power-law setting at any p (10^6 and beyond) in O(p) memory.
- `BlockData`: orthogonal samples (Theorem 5) in block form: sample mu owns K modes of a shared
  basis, stored as `blocks` (m, K): the sample-wise setting of Fig. 4 at any m in O(m K) memory.
- `LowRankData`: A_mu = sum_j s_{mu j} u_{mu j} u_{mu j}^T with U of shape (m, p, r) and s of
  shape (m, r) (phase retrieval, quadratic networks: A = x x^T).
- `He2Data`: A_mu = x_mu x_mu^T - I from the inputs X (m, p) (quadratic networks and phase
  retrieval with Gaussian inputs, centred: the spiked He2 model of `nqf.spectral`).
- `FeedForwardData`: feed-forward data A = 1/2 [[0, C], [C^T, 0]] (Eq. E3) with C = a b^T
  stored as its factors a (m, k, r), b (m, q, r) (built by `feedforward_data`); an MLP's
  structure matrix is rank 2 with a = x, b = 1.

Each class states the flop count of its operations; the flow's right-hand sides use only
`traces`, `traces_factor` and `apply`, so they cost what the structure allows.

Every representation is an `equinox.Module` (a JAX pytree): solving with new values of the same
shapes reuses the compiled program.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from .._core._checks import as_array, check_symmetric, is_traced, shape_str
from .._core.io import register

__all__ = [
    "AbstractData",
    "DenseData",
    "AbstractCommutingData",
    "CommutingData",
    "DiagonalData",
    "BlockData",
    "LowRankData",
    "FeedForwardData",
    "feedforward_data",
    "He2Data",
]


def _check_labels(y, m: int, p: int | None = None, source: str = "") -> Float[Array, " m"]:
    """`y` as (m,) labels; ValueError for m = 0 or, given `p`, p = 0 (`source` names the
    argument that fixes m and p, e.g. "`A` of shape (2, 0, 0)"; the messages name it)."""
    y = as_array(y, "y", ndim=1)
    origin = f" from {source}" if source else ""
    if m < 1:
        raise ValueError(f"An NQF data set needs at least one data matrix (m >= 1); found m = 0{origin}.")
    if p is not None and p < 1:
        raise ValueError(f"An NQF data set needs at least one feature (p >= 1); found p = 0{origin}.")
    if y.shape[0] != m:
        raise ValueError(
            f"`y` must hold one label per data matrix: expected shape ({m},); found {y.shape}"
            + (f" (m = {m}{origin})." if source else ".")
        )
    return jnp.asarray(y)  # as_array's float64 JAX array (typed as one)


def check_initial_loss(data, init, name: str, kind: str = "M") -> None:
    """Refuse an initial state whose MSE loss overflows float64 (issue 36: `solve_flow` returned
    loss[0] = inf for W0 ~ 1e100 and ran into max_steps naming nothing for W0 ~ 1e200). `init`:
    M (p, p) for `kind` "M", W (p, d) for "W", the mode strengths z (p,) of commuting data for
    "z"; a leading batch axis is allowed. Only the outputs' mean square is tested (labels that
    overflow by themselves are refused as `y` where checked). Traced values are not inspected.

    **Raises:** `ValueError` naming `name`, its largest magnitude and the overflowing loss."""
    if is_traced(init):
        return
    x = jnp.asarray(init, dtype=jnp.float64)
    outputs = getattr(data, {"M": "traces", "W": "traces_factor", "z": "outputs_z"}[kind])
    f = np.asarray(jax.vmap(outputs)(x) if x.ndim == (1 if kind == "z" else 2) + 1 else outputs(x))
    with np.errstate(over="ignore", invalid="ignore"):  # the outputs' part: labels that overflow are `y`'s
        square = np.mean(f**2, axis=-1)
    if not np.all(np.isfinite(square)):
        biggest = float(np.max(np.abs(np.asarray(init, dtype=float))))
        raise ValueError(
            f"`{name}` reaches {biggest:.3g}: the loss (1/m) sum_x (Tr[A_x M] - y_x)^2 at the initial state "
            "overflows float64 (it is inf; the outputs must stay well below 1e154). Start from a smaller "
            f"`{name}`, or rescale the data: the flow is covariant under M -> c M, A -> A / c."
        )


class AbstractData(eqx.Module):
    """An NQF data set {(A_mu, y_mu)}, mu = 1..m, A_mu symmetric p x p.

    Subclasses implement `traces`, `traces_factor`, `apply`, `weighted_sum` and `dense`; the
    MSE quantities `Y`, `K` and `residual` (THEORY E8-E9) are derived from them.
    """

    y: eqx.AbstractVar[Float[Array, " m"]]

    @property
    @abc.abstractmethod
    def p(self) -> int:
        """Dimension p of a neuron (each A_mu is p x p)."""

    @property
    def m(self) -> int:
        """Number m of data matrices (samples, or sample-output pairs)."""
        return self.y.shape[0]

    @abc.abstractmethod
    def traces(self, X: Float[Array, "p p"]) -> Float[Array, " m"]:
        """<A_mu, X>_F = Tr[A_mu X] for every mu, for a symmetric X of shape (p, p)."""

    @abc.abstractmethod
    def traces_factor(self, F: Float[Array, "p r"]) -> Float[Array, " m"]:
        """Tr[F^T A_mu F] = Tr[A_mu F F^T] for every mu, without forming F F^T."""

    @abc.abstractmethod
    def apply(self, c: Float[Array, " m"], X: Float[Array, "p r"]) -> Float[Array, "p r"]:
        """(sum_mu c_mu A_mu) X for weights c of shape (m,) and X of shape (p, r)."""

    @abc.abstractmethod
    def weighted_sum(self, c: Float[Array, " m"]) -> Float[Array, "p p"]:
        """The dense p x p matrix sum_mu c_mu A_mu."""

    @abc.abstractmethod
    def dense(self) -> Float[Array, "m p p"]:
        """All data matrices as a dense (m, p, p) array (for tests and small problems; the
        m p^2 floats are checked against the memory budget first, `nqf.memory`)."""

    def _check_dense_memory(self) -> None:
        from .._core.memory import check

        check(
            8.0 * self.m * self.p**2,
            f"{type(self).__name__}.dense() (an (m, p, p) = ({self.m}, {self.p}, {self.p}) array)",
            "keep the structured representation: every flow, map and oracle of nqf works on it without dense().",
        )

    def subset(self, idx: Int[ArrayLike, " b"]) -> AbstractData | None:
        """The data set of the samples `idx` (integer array (b,), repeats kept) in the same
        representation, or None if the representation has no cheap row subset. Works inside
        `jit` (constructors only shape-check traced arrays)."""
        return None

    def scaled(self, c: float | Float[Array, ""]) -> AbstractData:
        """The data set with every A_mu multiplied by c (labels kept), in the same
        representation where it has one (else `DenseData`).

        **Raises:** `ValueError` if `c` is not a finite real scalar (a traced c is not checked)."""
        if not is_traced(c):
            v = np.asarray(c)
            if v.ndim != 0 or v.dtype.kind not in "biuf" or not np.isfinite(v):
                raise ValueError(f"`c` must be a finite real scalar; found {c!r}.")
        return self._scaled(c)

    def _scaled(self, c: float | Float[Array, ""]) -> AbstractData:
        return DenseData(c * jnp.asarray(self.dense()), self.y)

    # Derived MSE quantities (THEORY E8-E9).
    def residual(self, M: Float[Array, "p p"]) -> Float[Array, " m"]:
        """Delta_mu = Tr[M A_mu] - y_mu, shape (m,)."""
        return self.traces(M) - self.y

    def loss(self, M: Float[Array, "p p"]) -> Float[Array, ""]:
        """MSE loss L = (1/m) sum_mu (Tr[M A_mu] - y_mu)^2 (THEORY sec. 4)."""
        return jnp.mean(self.residual(M) ** 2)

    def Y(self) -> Float[Array, "p p"]:
        """Y = (4/m) sum_mu y_mu A_mu (Eq. E9)."""
        return self.weighted_sum(4.0 / self.m * self.y)

    def K(self, X: Float[Array, "p p"]) -> Float[Array, "p p"]:
        """K(X) = (4/m) sum_mu <A_mu, X>_F A_mu (Eq. E9)."""
        return self.weighted_sum(4.0 / self.m * self.traces(X))

    def H(self, M: Float[Array, "p p"]) -> Float[Array, "p p"]:
        """H = (4/m) sum_mu Delta_mu A_mu = K(M) - Y, the MSE gradient matrix (Eq. E8)."""
        return self.weighted_sum(4.0 / self.m * self.residual(M))


class DenseData(AbstractData):
    """Data matrices stored densely: `A` of shape (m, p, p), labels `y` of shape (m,).

    **Raises:** `ValueError` if `A` is not (m, p, p), not symmetric, not finite, or `y` does not
    have shape (m,).
    """

    A: Float[Array, "m p p"]
    y: Float[Array, " m"]

    def __init__(self, A: Float[ArrayLike, "m p p"], y: Float[ArrayLike, " m"]):
        A = as_array(A, "A", ndim=3)
        if A.shape[1] != A.shape[2]:
            raise ValueError(f"`A` must have shape (m, p, p); found {A.shape}.")
        check_symmetric(A, "A")
        self.A = A
        self.y = _check_labels(y, A.shape[0], A.shape[1], f"`A` of shape {shape_str(A.shape)}")

    @property
    def p(self) -> int:
        return self.A.shape[-1]

    def traces(self, X: Float[Array, "p p"]) -> Float[Array, " m"]:
        return jnp.einsum("mij,ij->m", self.A, X)

    def traces_factor(self, F: Float[Array, "p r"]) -> Float[Array, " m"]:
        return jnp.einsum("mij,ir,jr->m", self.A, F, F)

    def apply(self, c: Float[Array, " m"], X: Float[Array, "p r"]) -> Float[Array, "p r"]:
        return self.weighted_sum(c) @ X

    def weighted_sum(self, c: Float[Array, " m"]) -> Float[Array, "p p"]:
        return jnp.einsum("m,mij->ij", c, self.A)

    def dense(self) -> Float[Array, "m p p"]:
        return self.A

    def subset(self, idx: Int[ArrayLike, " b"]) -> AbstractData:
        return DenseData(self.A[idx], self.y[idx])

    def _scaled(self, c: float | Float[Array, ""]) -> AbstractData:
        return DenseData(c * self.A, self.y)


class AbstractCommutingData(AbstractData):
    """Commuting data (Assumption 1): A_mu = P diag(Lambda[mu]) P^T with a shared orthogonal P.

    The GLV form of the flow (Eq. E13) needs only the maps z -> Lambda z (the outputs
    f_mu = sum_k lambda_{mu,k} z_k) and delta -> Lambda^T delta, which subclasses implement
    without forming p x p objects: `CommutingData` (dense Lambda (m, p)) and `DiagonalData`
    (Lambda = diag(lam), m = p).
    """

    @property
    @abc.abstractmethod
    def P(self) -> Float[Array, "p p"] | None:
        """Shared orthogonal eigenbasis (p, p); None means the identity."""

    @abc.abstractmethod
    def outputs_z(self, z: Float[Array, "... p"]) -> Float[Array, "... m"]:
        """f = Lambda z: the outputs Tr[M A_mu] of every M with P^T M P = diag(z) (batched over
        leading axes)."""

    @abc.abstractmethod
    def pullback(self, delta: Float[Array, "... m"]) -> Float[Array, "... p"]:
        """Lambda^T delta (batched over leading axes)."""

    @abc.abstractmethod
    def feature_norms(self) -> Float[Array, " p"]:
        """sum_mu lambda_{mu,k}^2 for every mode k, shape (p,)."""

    @abc.abstractmethod
    def z(self, M: Float[Array, "p p"]) -> Float[Array, " p"]:
        """z_k = (P^T M P)_kk, the mode strengths of the GLV form (Eq. E11)."""

    @abc.abstractmethod
    def z_factor(self, F: Float[Array, "p r"]) -> Float[Array, " p"]:
        """z_k = (P^T F F^T P)_kk without forming F F^T."""


class _SharedBasisData(AbstractCommutingData):
    """Commuting data with an explicit optional eigenbasis field `P` (None: the identity): the
    basis changes shared by `CommutingData` and `BlockData`."""

    def _to_basis(self, X):
        return X if self.P is None else self.P.T @ X

    def _from_basis(self, X):
        return X if self.P is None else self.P @ X

    def z(self, M: Float[Array, "p p"]) -> Float[Array, " p"]:
        """z_k = (P^T M P)_kk, the mode strengths of the GLV form (Eq. E11)."""
        if self.P is None:
            return jnp.diagonal(M)
        return jnp.einsum("ik,ij,jk->k", self.P, M, self.P)

    def z_factor(self, F: Float[Array, "p r"]) -> Float[Array, " p"]:
        """z_k = (P^T F F^T P)_kk without forming F F^T."""
        return jnp.sum(self._to_basis(F) ** 2, axis=1)

    def traces(self, X: Float[Array, "p p"]) -> Float[Array, " m"]:
        return self.outputs_z(self.z(X))

    def traces_factor(self, F: Float[Array, "p r"]) -> Float[Array, " m"]:
        return self.outputs_z(self.z_factor(F))

    def apply(self, c: Float[Array, " m"], X: Float[Array, "p r"]) -> Float[Array, "p r"]:
        h = self.pullback(c)
        return self._from_basis(h[:, None] * self._to_basis(X))

    def weighted_sum(self, c: Float[Array, " m"]) -> Float[Array, "p p"]:
        h = self.pullback(c)
        if self.P is None:
            return jnp.diag(h)
        return (self.P * h) @ self.P.T


def _check_basis(P, p: int):
    """`P` as a (p, p) array, orthogonal to 1e-10 (concrete values only), or None."""
    if P is None:
        return None
    P = as_array(P, "P", shape=(p, p))
    if not is_traced(P):
        err = float(np.abs(np.asarray(P).T @ np.asarray(P) - np.eye(p)).max())
        if err > 1e-10:
            raise ValueError(f"`P` must be orthogonal (P^T P = I); found max |P^T P - I| = {err:.3g}.")
    return P


class CommutingData(_SharedBasisData):
    """Commuting data (Assumption 1): A_mu = P diag(Lambda[mu]) P^T.

    **Arguments:**

    - `Lambda`: eigenvalues lambda_{mu,k}, shape (m, p).
    - `y`: labels, shape (m,).
    - `P`: shared orthogonal eigenbasis, shape (p, p); `None` means the identity (diagonal data).

    The GLV form of the flow (Eq. E13) runs on z_k = (P^T M P)_kk; `z(M)` computes it.

    **Raises:** `ValueError` on wrong shapes, non-finite values, or a `P` that is not orthogonal
    (|P^T P - I| > 1e-10).
    """

    Lambda: Float[Array, "m p"]
    y: Float[Array, " m"]
    P: Float[Array, "p p"] | None = None

    def __init__(
        self,
        Lambda: Float[ArrayLike, "m p"],
        y: Float[ArrayLike, " m"],
        P: Float[ArrayLike, "p p"] | None = None,
    ):
        self.Lambda = as_array(Lambda, "Lambda", ndim=2)
        m, p = self.Lambda.shape
        self.y = _check_labels(y, m, p, f"`Lambda` of shape {shape_str(self.Lambda.shape)}")
        self.P = _check_basis(P, p)

    @classmethod
    def from_dense(
        cls,
        A: Float[ArrayLike, "m p p"],
        y: Float[ArrayLike, " m"],
        *,
        rtol: float = 1e-10,
        seed: int = 0,
    ) -> CommutingData:
        """Jointly diagonalize commuting dense matrices A (m, p, p).

        **Raises:** `ValueError` naming the largest commutator |A_mu A_nu - A_nu A_mu| relative to
        max|A|^2 if the matrices do not commute to relative `rtol`.
        """
        dense = DenseData(A, y)
        A = np.asarray(dense.A)
        scale = max(float(np.abs(A).max()), np.finfo(float).tiny)
        comm = np.einsum("aij,bjk->abik", A, A)
        comm = np.abs(comm - np.swapaxes(comm, 0, 1)).max(axis=(2, 3))
        if comm.max() > rtol * scale**2:
            a, b = np.unravel_index(np.argmax(comm), comm.shape)
            raise ValueError(
                "Data matrices do not commute (Assumption 1 fails): "
                f"|A_{a} A_{b} - A_{b} A_{a}| = {comm.max():.3g} "
                f"(relative {comm.max() / scale**2:.3g} > {rtol:g})."
            )
        w = np.random.default_rng(seed).standard_normal(A.shape[0])
        _, P = np.linalg.eigh(np.einsum("m,mij->ij", w, A))
        Lam_full = np.einsum("ik,mij,jl->mkl", P, A, P)
        Lam = np.einsum("mkk->mk", Lam_full)
        off = np.abs(Lam_full - np.einsum("mk,kl->mkl", Lam, np.eye(A.shape[1]))).max()
        if off > 1e3 * rtol * scale:
            raise ValueError(
                f"Joint diagonalization failed: off-diagonal residual {off:.3g} (relative {off / scale:.3g})."
            )
        return cls(Lam, dense.y, P)

    @property
    def p(self) -> int:
        return self.Lambda.shape[1]

    def traces(self, X: Float[Array, "p p"]) -> Float[Array, " m"]:
        return self.Lambda @ self.z(X)

    def traces_factor(self, F: Float[Array, "p r"]) -> Float[Array, " m"]:
        return self.Lambda @ self.z_factor(F)

    def dense(self) -> Float[Array, "m p p"]:
        self._check_dense_memory()
        if self.P is None:
            return jax.vmap(jnp.diag)(self.Lambda)
        return jnp.einsum("ik,mk,jk->mij", self.P, self.Lambda, self.P)

    def competition(self) -> Float[Array, "p p"]:
        """C' = Lambda^T Lambda, the GLV competition matrix (Eq. E13), shape (p, p)."""
        return self.Lambda.T @ self.Lambda

    def outputs_z(self, z: Float[Array, "... p"]) -> Float[Array, "... m"]:
        return z @ self.Lambda.T

    def pullback(self, delta: Float[Array, "... m"]) -> Float[Array, "... p"]:
        return delta @ self.Lambda

    def feature_norms(self) -> Float[Array, " p"]:
        return jnp.sum(self.Lambda**2, axis=0)

    def subset(self, idx: Int[ArrayLike, " b"]) -> AbstractData:
        return CommutingData(self.Lambda[idx], self.y[idx], self.P)

    def _scaled(self, c: float | Float[Array, ""]) -> AbstractData:
        return CommutingData(c * self.Lambda, self.y, self.P)


class DiagonalData(AbstractCommutingData):
    """One feature per sample: m = p, A_k = lam_k e_k e_k^T, label y_k (THEORY sec. 11, Fig. 3
    right), i.e. `CommutingData(diag(lam), y)` stored in O(p) memory.

    Every GLV quantity is elementwise: f = lam * z, Lambda^T delta = lam * delta, so the GLV
    flow (Eq. E13) costs O(p) per evaluation and its Jacobian is diagonal (`nqf.stiff`). The
    Theorem 6 rates are r_k = (8/p) lam_k y_k and C_kk = (8/p) lam_k^2.

    **Arguments:**

    - `lam`: the nonzero entry of each A_k, shape (p,).
    - `y`: labels, shape (p,).

    `Lambda` (the dense (p, p) matrix diag(lam)) and `dense()` exist for small p only (O(p^2) and
    O(p^3) memory); the flow, `glv_equilibrium`, `excess_loss` and `theorem6_rates` never form them.

    **Raises:** `ValueError` on wrong shapes or non-finite values.
    """

    lam: Float[Array, " p"]
    y: Float[Array, " m"]

    def __init__(self, lam: Float[ArrayLike, " p"], y: Float[ArrayLike, " p"]):
        self.lam = as_array(lam, "lam", ndim=1)
        self.y = _check_labels(y, self.lam.shape[0], source=f"`lam` of shape {shape_str(self.lam.shape)}")

    @property
    def p(self) -> int:
        return self.lam.shape[0]

    @property
    def P(self) -> None:
        return None

    @property
    def Lambda(self) -> Float[Array, "p p"]:
        """diag(lam), shape (p, p) (materialized: small p only)."""
        return jnp.diag(self.lam)

    def z(self, M: Float[Array, "p p"]) -> Float[Array, " p"]:
        return jnp.diagonal(M)

    def z_factor(self, F: Float[Array, "p r"]) -> Float[Array, " p"]:
        return jnp.sum(F**2, axis=1)

    def outputs_z(self, z: Float[Array, "... p"]) -> Float[Array, "... m"]:
        return self.lam * z

    def pullback(self, delta: Float[Array, "... m"]) -> Float[Array, "... p"]:
        return self.lam * delta

    def feature_norms(self) -> Float[Array, " p"]:
        return self.lam**2

    def traces(self, X: Float[Array, "p p"]) -> Float[Array, " m"]:
        return self.lam * jnp.diagonal(X)

    def traces_factor(self, F: Float[Array, "p r"]) -> Float[Array, " m"]:
        return self.lam * self.z_factor(F)

    def apply(self, c: Float[Array, " m"], X: Float[Array, "p r"]) -> Float[Array, "p r"]:
        return (c * self.lam)[:, None] * X

    def weighted_sum(self, c: Float[Array, " m"]) -> Float[Array, "p p"]:
        return jnp.diag(c * self.lam)

    def dense(self) -> Float[Array, "m p p"]:
        self._check_dense_memory()
        k = jnp.arange(self.p)
        return jnp.zeros((self.p, self.p, self.p)).at[k, k, k].set(self.lam)

    def competition(self) -> Float[Array, "p p"]:
        """C' = diag(lam^2), shape (p, p) (materialized: small p only)."""
        return jnp.diag(self.lam**2)

    def _scaled(self, c: float | Float[Array, ""]) -> AbstractData:
        return DiagonalData(c * self.lam, self.y)


class BlockData(_SharedBasisData):
    """Orthogonal samples in block form (Theorem 5's assumption A_mu A_nu = 0 for mu != nu, by
    construction): sample mu owns the K modes mu K .. mu K + K - 1 of a shared orthogonal basis P,

        A_mu = P diag(0, .., 0, blocks[mu], 0, .., 0) P^T,   p = m K,

    i.e. `CommutingData` with the block-diagonal Lambda (m, p) stored as its blocks (m, K)
    (`nqf.datasets.orthogonal_samples_data` builds the same data as `CommutingData`). A zero entry
    of `blocks` is an unused mode (samples with fewer than K eigenvalues).

    Every GLV quantity is blockwise: f_mu = sum_j blocks[mu, j] z[mu K + j] and
    Lambda^T delta = (delta[:, None] * blocks).ravel(), O(p) per evaluation, and the Jacobian of
    the GLV flow is block-diagonal with m blocks of size K.

    **Arguments:**

    - `blocks`: eigenvalues of each sample on its own modes, shape (m, K).
    - `y`: labels, shape (m,).
    - `P`: shared orthogonal basis, shape (p, p) with p = m K; `None` (default) means the
      identity (diagonal A_mu, no p x p array at all).

    `Lambda` (the (m, p) matrix) and `dense()` are materialized on demand, for small problems only.

    **Raises:** `ValueError` on wrong shapes, non-finite values, or a `P` that is not orthogonal.
    """

    blocks: Float[Array, "m K"]
    y: Float[Array, " m"]
    P: Float[Array, "p p"] | None = None

    def __init__(
        self,
        blocks: Float[ArrayLike, "m K"],
        y: Float[ArrayLike, " m"],
        P: Float[ArrayLike, "p p"] | None = None,
    ):
        self.blocks = as_array(blocks, "blocks", ndim=2)
        m, K = self.blocks.shape
        if K < 1:
            raise ValueError(
                f"`blocks` must have at least one mode per sample (K >= 1); found shape {shape_str(self.blocks.shape)}."
            )
        self.y = _check_labels(y, m, source=f"`blocks` of shape {shape_str(self.blocks.shape)}")
        self.P = _check_basis(P, m * K)

    @property
    def K(self) -> int:
        """Number of modes owned by each sample."""
        return self.blocks.shape[1]

    @property
    def p(self) -> int:
        return self.blocks.shape[0] * self.blocks.shape[1]

    @property
    def Lambda(self) -> Float[Array, "m p"]:
        """The block-diagonal eigenvalue matrix (m, p) (materialized: O(m p) memory)."""
        m, K = self.blocks.shape
        return (jnp.eye(m)[:, :, None] * self.blocks[None, :, :]).reshape(m, m * K)

    def outputs_z(self, z: Float[Array, "... p"]) -> Float[Array, "... m"]:
        m, K = self.blocks.shape
        return jnp.sum(z.reshape(z.shape[:-1] + (m, K)) * self.blocks, axis=-1)

    def pullback(self, delta: Float[Array, "... m"]) -> Float[Array, "... p"]:
        m, K = self.blocks.shape
        return (delta[..., :, None] * self.blocks).reshape(delta.shape[:-1] + (m * K,))

    def feature_norms(self) -> Float[Array, " p"]:
        return (self.blocks**2).reshape(-1)

    def dense(self) -> Float[Array, "m p p"]:
        self._check_dense_memory()
        Lam = self.Lambda
        if self.P is None:
            return jax.vmap(jnp.diag)(Lam)
        return jnp.einsum("ik,mk,jk->mij", self.P, Lam, self.P)

    def competition(self) -> Float[Array, "p p"]:
        """C' = Lambda^T Lambda: block-diagonal with blocks b b^T (materialized (p, p))."""
        Lam = self.Lambda
        return Lam.T @ Lam

    def as_commuting(self) -> CommutingData:
        """The same data as `CommutingData` (Lambda (m, p) materialized)."""
        return CommutingData(self.Lambda, self.y, self.P)

    def _scaled(self, c: float | Float[Array, ""]) -> AbstractData:
        return BlockData(c * self.blocks, self.y, self.P)


class LowRankData(AbstractData):
    """Low-rank data: A_mu = sum_j s[mu, j] U[mu, :, j] U[mu, :, j]^T.

    **Arguments:**

    - `U`: column factors, shape (m, p, r).
    - `s`: signed weights, shape (m, r).
    - `y`: labels, shape (m,).

    Every operation costs O(m p r) per column of its argument; nothing of size p x p per sample is
    formed. Phase retrieval (A = a a^T) is `LowRankData(a[:, :, None], ones((m, 1)), y)`;
    feed-forward layers use `feedforward_data`.

    **Raises:** `ValueError` on wrong shapes or non-finite values.
    """

    U: Float[Array, "m p r"]
    s: Float[Array, "m r"]
    y: Float[Array, " m"]

    def __init__(self, U: Float[ArrayLike, "m p r"], s: Float[ArrayLike, "m r"], y: Float[ArrayLike, " m"]):
        self.U = as_array(U, "U", ndim=3)
        m, p, r = self.U.shape
        self.s = as_array(s, "s", shape=(m, r))
        self.y = _check_labels(y, m, p, f"`U` of shape {shape_str(self.U.shape)}")

    @property
    def p(self) -> int:
        return self.U.shape[1]

    def traces(self, X: Float[Array, "p p"]) -> Float[Array, " m"]:
        return jnp.einsum("mir,ij,mjr,mr->m", self.U, X, self.U, self.s)

    def traces_factor(self, F: Float[Array, "p r"]) -> Float[Array, " m"]:
        G = jnp.einsum("mir,ik->mrk", self.U, F)
        return jnp.einsum("mrk,mr->m", G**2, self.s)

    def apply(self, c: Float[Array, " m"], X: Float[Array, "p r"]) -> Float[Array, "p r"]:
        G = jnp.einsum("mir,ik->mrk", self.U, X)
        return jnp.einsum("mir,mr,mrk->ik", self.U, c[:, None] * self.s, G)

    def weighted_sum(self, c: Float[Array, " m"]) -> Float[Array, "p p"]:
        return jnp.einsum("mir,mr,mjr->ij", self.U, c[:, None] * self.s, self.U)

    def dense(self) -> Float[Array, "m p p"]:
        self._check_dense_memory()
        return jnp.einsum("mir,mr,mjr->mij", self.U, self.s, self.U)

    def subset(self, idx: Int[ArrayLike, " b"]) -> AbstractData:
        return LowRankData(self.U[idx], self.s[idx], self.y[idx])

    def _scaled(self, c: float | Float[Array, ""]) -> AbstractData:
        return LowRankData(self.U, c * self.s, self.y)


class FeedForwardData(AbstractData):
    """Feed-forward data (THEORY Eq. E3): A_mu = 1/2 [[0, C_mu], [C_mu^T, 0]] on neurons
    w = [z1 (k); z2 (q)], stored as factors C_mu = a_mu b_mu^T, never as p x p matrices.

    f = Tr[M A] = Tr[Z2 Z1^T C] for W = [Z1; Z2]. A two-layer MLP f = sum_i v_i phi(u_i^T x) has
    a = phi'(0) x (k, 1), b = 1 (1, 1): rank-2 A with p = k + 1 (Proposition 1).

    **Arguments:**

    - `a`: first-block factors, shape (m, k, r); `b`: second-block factors, shape (m, q, r).
    - `y`: labels, shape (m,).
    - `front`, `back`: zero rows of A before and after the [z1; z2] block (other parameters of
      the neuron that do not enter at second order, e.g. an attention head's Q and K),
      p = front + k + q + back.

    The factors are stored sample-major as `a_rows` (m, r, k) and `b_rows` (m, r, q), so every
    operation is a plain matrix product with the (m r, k) and (m r, q) matrices.

    **Cost per operation** for a factor F (p, n): `traces_factor` min(k q n + m r k q,
    m r n (k + q)) flops, `apply` min(m r k q + 2 k q n, 2 m r n (k + q)) (the cheaper
    contraction order is chosen from the shapes when compiling), `traces` O(m r k q); memory
    O(m r (k + q)). For the MLP (q = r = 1) a right-hand side of the factor flow costs
    O(m k + k n): one pass over the inputs X (m, k) for the outputs and one for H, like a
    forward and a backward pass of the linearized network, where the equivalent `LowRankData`
    (U of shape (m, p, 2 r)) costs O(m p n) and reads twice the bytes.

    **Raises:** `ValueError` on wrong shapes, non-finite values, or negative `front`/`back`.
    """

    a_rows: Float[Array, "m r k"]
    b_rows: Float[Array, "m r q"]
    y: Float[Array, " m"]
    front: int = eqx.field(static=True, default=0)
    back: int = eqx.field(static=True, default=0)

    def __init__(
        self,
        a: Float[ArrayLike, "m k r"],
        b: Float[ArrayLike, "m q r"],
        y: Float[ArrayLike, " m"],
        *,
        front: int = 0,
        back: int = 0,
    ):
        a = as_array(a, "a", ndim=3)
        m, _, r = a.shape
        b = as_array(b, "b", ndim=3)
        if b.shape[0] != m or b.shape[2] != r:
            raise ValueError(
                "`a` (m, k, r) and `b` (m, q, r) must agree in m and r; "
                f"found a {shape_str(a.shape)} and b {shape_str(b.shape)}."
            )
        if a.shape[1] < 1 or b.shape[1] < 1:
            raise ValueError(
                "`a` (m, k, r) and `b` (m, q, r) need k >= 1 and q >= 1 (the two blocks of "
                f"A = 1/2 [[0, C], [C^T, 0]]); found a {shape_str(a.shape)} and b {shape_str(b.shape)}."
            )
        self.a_rows = jnp.swapaxes(a, 1, 2)
        self.b_rows = jnp.swapaxes(b, 1, 2)
        self.y = _check_labels(y, m, source=f"`a` of shape {shape_str(a.shape)}")
        for name, v in (("front", front), ("back", back)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"`{name}` must be an integer >= 0; found {v!r}.")
        self.front, self.back = int(front), int(back)

    @property
    def a(self) -> Float[Array, "m k r"]:
        """First-block factors, shape (m, k, r)."""
        return jnp.swapaxes(self.a_rows, 1, 2)

    @property
    def b(self) -> Float[Array, "m q r"]:
        """Second-block factors, shape (m, q, r)."""
        return jnp.swapaxes(self.b_rows, 1, 2)

    @property
    def k(self) -> int:
        """Size k of the first block z1."""
        return self.a_rows.shape[2]

    @property
    def q(self) -> int:
        """Size q of the second block z2."""
        return self.b_rows.shape[2]

    @property
    def r(self) -> int:
        """Rank r of each C_mu = a_mu b_mu^T."""
        return self.a_rows.shape[1]

    @property
    def p(self) -> int:
        return self.front + self.k + self.q + self.back

    def _mats(self):
        """The factors as matrices (m r, k) and (m r, q) (free reshapes)."""
        m, r = self.m, self.r
        return self.a_rows.reshape(m * r, self.k), self.b_rows.reshape(m * r, self.q)

    def _per_row(self, c):
        """Sample weights c (m,) repeated over the r rows of each sample, shape (m r, 1)."""
        return jnp.repeat(c, self.r)[:, None]

    def _per_sample(self, t):
        """Sum over the r rows of each sample: (m r,) -> (m,)."""
        return t.reshape(self.m, self.r).sum(axis=1)

    def _blocks(self, X):
        """Rows of X in the z1 block (k, ...) and the z2 block (q, ...)."""
        i = self.front
        return X[i : i + self.k], X[i + self.k : i + self.k + self.q]

    def _pad(self, X1, X2):
        """[0 (front); X1 (k); X2 (q); 0 (back)] along the first axis."""
        z = lambda n: jnp.zeros((n,) + X1.shape[1:], X1.dtype)  # noqa: E731
        return jnp.concatenate([z(self.front), X1, X2, z(self.back)], axis=0)

    def _contract(self, N):
        """t_mu = sum_j a_mu,j^T N b_mu,j for N of shape (k, q): O(m r k q)."""
        Am, Bm = self._mats()
        return self._per_sample(jnp.sum((Am @ N) * Bm, axis=1))

    def _combine(self, c):
        """C_c = sum_mu c_mu a_mu b_mu^T, shape (k, q): O(m r k q)."""
        Am, Bm = self._mats()
        return jax.lax.dot_general(Am, self._per_row(c) * Bm, (((0,), (0,)), ((), ())))

    def _small_C(self, n: int) -> bool:
        """True if forming the (k, q) matrices is cheaper than contracting the factors with n
        columns directly (the flop counts in the class docstring)."""
        m, r, k, q = self.m, self.r, self.k, self.q
        return m * r * k * q + 2 * k * q * n <= 2 * m * r * n * (k + q)

    def traces(self, X: Float[Array, "p p"]) -> Float[Array, " m"]:
        i, j = self.front, self.front + self.k
        S = 0.5 * (X[i:j, j : j + self.q] + X[j : j + self.q, i:j].T)  # the z1-z2 block, symmetrized
        return self._contract(S)

    def traces_factor(self, F: Float[Array, "p r"]) -> Float[Array, " m"]:
        F1, F2 = self._blocks(F)
        if self._small_C(F.shape[1]):
            return self._contract(F1 @ F2.T)
        Am, Bm = self._mats()
        return self._per_sample(jnp.sum((Am @ F1) * (Bm @ F2), axis=1))

    def apply(self, c: Float[Array, " m"], X: Float[Array, "p r"]) -> Float[Array, "p r"]:
        X1, X2 = self._blocks(X)
        if self._small_C(X.shape[1]):
            Cc = self._combine(c)
            return self._pad(0.5 * (Cc @ X2), 0.5 * (Cc.T @ X1))
        Am, Bm = self._mats()
        cr = self._per_row(c)
        dims = (((0,), (0,)), ((), ()))
        out1 = jax.lax.dot_general(Am, cr * (Bm @ X2), dims)
        out2 = jax.lax.dot_general(Bm, cr * (Am @ X1), dims)
        return self._pad(0.5 * out1, 0.5 * out2)

    def weighted_sum(self, c: Float[Array, " m"]) -> Float[Array, "p p"]:
        Cc = 0.5 * self._combine(c)
        k, q = self.k, self.q
        blk = jnp.block([[jnp.zeros((k, k)), Cc], [Cc.T, jnp.zeros((q, q))]])
        return jnp.pad(blk, ((self.front, self.back), (self.front, self.back)))

    def dense(self) -> Float[Array, "m p p"]:
        self._check_dense_memory()
        C = 0.5 * jnp.einsum("mrk,mrq->mkq", self.a_rows, self.b_rows)
        m, k, q = C.shape
        blk = jnp.concatenate(
            [
                jnp.concatenate([jnp.zeros((m, k, k)), C], axis=2),
                jnp.concatenate([jnp.swapaxes(C, 1, 2), jnp.zeros((m, q, q))], axis=2),
            ],
            axis=1,
        )
        return jnp.pad(blk, ((0, 0), (self.front, self.back), (self.front, self.back)))

    def subset(self, idx: Int[ArrayLike, " b"]) -> AbstractData:
        return FeedForwardData(self.a[idx], self.b[idx], self.y[idx], front=self.front, back=self.back)

    def _scaled(self, c: float | Float[Array, ""]) -> AbstractData:
        return FeedForwardData(c * self.a, self.b, self.y, front=self.front, back=self.back)

    def as_lowrank(self) -> LowRankData:
        """The same data as `LowRankData` (U of shape (m, p, 2 r)), using
        1/2 (a b^T + b a^T) = 1/4 [(a + b)(a + b)^T - (a - b)(a - b)^T] on the zero-padded
        vectors (exact to rounding)."""
        m, k, q, r = self.m, self.k, self.q, self.r
        a, b = self.a, self.b
        a_pad = jnp.concatenate([jnp.zeros((m, self.front, r)), a, jnp.zeros((m, q + self.back, r))], axis=1)
        b_pad = jnp.concatenate([jnp.zeros((m, self.front + k, r)), b, jnp.zeros((m, self.back, r))], axis=1)
        U = 0.5 * jnp.concatenate([a_pad + b_pad, a_pad - b_pad], axis=2)
        s = jnp.concatenate([jnp.ones((m, r)), -jnp.ones((m, r))], axis=1)
        return LowRankData(U, s, self.y)


def feedforward_data(
    y: Float[ArrayLike, " m"],
    C: Float[ArrayLike, "m k q"] | None = None,
    *,
    a: Float[ArrayLike, "m k r"] | None = None,
    b: Float[ArrayLike, "m q r"] | None = None,
    front: int = 0,
    back: int = 0,
) -> FeedForwardData:
    """Feed-forward data A(x) = 1/2 [[0, C(x)], [C(x)^T, 0]] (THEORY Eq. E3) as `FeedForwardData`.

    Neurons are w = [z1 (k); z2 (q)], p = k + q (plus `front`/`back` zero rows), and
    f = Tr[Z2 Z1^T C]. Give either

    - `C`: dense blocks, shape (m, k, q) (stored as factors a = C, b = I_q, or a = I_k,
      b = C^T when k < q), or
    - `a` (m, k, r) and `b` (m, q, r): factors with C_mu = a_mu b_mu^T. For a two-layer MLP with
      activation phi, `a = phi'(0) * x[:, :, None]` and `b = ones((m, 1, 1))` (rank-2 A).

    **Raises:** `ValueError` if neither or both forms are given, or on inconsistent shapes.
    """
    if (C is None) == (a is None and b is None):
        raise ValueError("Give either `C` (m, k, q) or both `a` (m, k, r) and `b` (m, q, r).")
    if C is not None:
        C = as_array(C, "C", ndim=3)
        m, k, q = C.shape
        if q <= k:
            a, b = C, jnp.broadcast_to(jnp.eye(q), (m, q, q))
        else:
            a, b = jnp.broadcast_to(jnp.eye(k), (m, k, k)), jnp.swapaxes(C, 1, 2)
    elif a is None or b is None:
        raise ValueError("Give both `a` (m, k, r) and `b` (m, q, r).")
    return FeedForwardData(a, b, y, front=front, back=back)


class He2Data(AbstractData):
    """Gaussian-input quadratic data A_mu = c (x_mu x_mu^T - I_p) = c He2(x_mu) (the second
    Hermite tensor of x; THEORY sec. 2: the quadratic network / phase retrieval A(x) = x x^T,
    centred), stored as the inputs X (m, p): rank one plus a multiple of the identity, the
    identity handled structurally (never an (m, p, p) tensor, nor a p x p matrix per sample).

    Every operation is a matrix product with X (for a factor F (p, r): O(m p r) flops):
    `traces_factor(F)` = c (|F^T x|^2 - |F|_F^2), `apply(c', F)` = c (X^T (c' * (X F)) -
    sum(c') F), `weighted_sum(c')` = c (X^T diag(c') X - sum(c') I) (O(m p^2), one pass over the
    data). So Y = (4/m) sum_mu y_mu A_mu costs one pass, and Y v one pass over X per product.

    **Arguments:**

    - `X`: inputs, shape (m, p) (the rows are the x_mu).
    - `y`: labels, shape (m,).
    - `c`: a scale (default 1; `scaled` multiplies it).

    **Raises:** `ValueError` on wrong shapes or non-finite values.
    """

    X: Float[Array, "m p"]
    y: Float[Array, " m"]
    c: Float[Array, ""]

    def __init__(self, X: Float[ArrayLike, "m p"], y: Float[ArrayLike, " m"], c: float | Float[ArrayLike, ""] = 1.0):
        self.X = as_array(X, "X", ndim=2)
        self.y = _check_labels(y, self.X.shape[0], source=f"`X` of shape {shape_str(self.X.shape)}")
        self.c = as_array(c, "c", ndim=0)

    @property
    def p(self) -> int:
        return self.X.shape[1]

    def traces(self, S: Float[Array, "p p"]) -> Float[Array, " m"]:
        return self.c * (jnp.sum((self.X @ S) * self.X, axis=1) - jnp.trace(S))

    def traces_factor(self, F: Float[Array, "p r"]) -> Float[Array, " m"]:
        return self.c * (jnp.sum((self.X @ F) ** 2, axis=1) - jnp.sum(F**2))

    def apply(self, c: Float[Array, " m"], Z: Float[Array, "p r"]) -> Float[Array, "p r"]:
        return self.c * (self.X.T @ (c[:, None] * (self.X @ Z)) - jnp.sum(c) * Z)

    def weighted_sum(self, c: Float[Array, " m"]) -> Float[Array, "p p"]:
        return self.c * (self.X.T @ (c[:, None] * self.X) - jnp.sum(c) * jnp.eye(self.p))

    def dense(self) -> Float[Array, "m p p"]:
        self._check_dense_memory()
        return self.c * (jnp.einsum("mi,mj->mij", self.X, self.X) - jnp.eye(self.p))

    def subset(self, idx: Int[ArrayLike, " b"]) -> AbstractData:
        return He2Data(self.X[idx], self.y[idx], self.c)

    def _scaled(self, c: float | Float[Array, ""]) -> AbstractData:
        return He2Data(self.X, self.y, c * self.c)


register(
    DenseData, CommutingData, DiagonalData, BlockData, LowRankData, FeedForwardData, He2Data
)  # nqf.save / nqf.load
