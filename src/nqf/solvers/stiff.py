"""Structured Newton solves for the stiff (implicit) GLV path (THEORY Eq. E13, E21).

Power-law spectra (Eq. E21) give rates spanning many decades, so explicit solvers are limited by
stability, not accuracy, once the fast modes have saturated. diffrax's implicit solvers (Kvaerno)
solve, at every stage, k - f(y + a h k) = 0 with a chord (frozen-Jacobian) Newton method
(`diffrax.VeryChord`), whose linear system has the operator O = I - a h J_f. By default lineax
materializes O (p x p) and LU-factorizes it: O(p^2) memory and O(p^3) time per step.

For the GLV form in log space, u' = -(8/m) Lambda^T (Lambda e^u - y) - 2 gamma (masked modes
frozen), the Jacobian is J_f = -(8/m) D_mask Lambda^T Lambda diag(z): its range lies in the span
of the columns of U = D_mask Lambda^T (p x m). With Q (p x r) an orthonormal basis of that span
(computed once per data set from the eigendecomposition of U^T U, eigenvalues below
`rtol * max` dropped, so rank-deficient Lambda is fine), O = I + Q S with S = Q^T (O - I), and the
Woodbury identity gives

    O^{-1} b = b - Q (I_r + S Q)^{-1} S b.                                                (*)

S (r x p) comes from r products with the transposed operator, S^T = O^T Q - Q: O(p m r) per
Jacobian (once per step under the chord method), and each solve costs O(p r) plus an r x r LU
solve, instead of O(p^3) and O(p^2). `WoodburySolver` implements (*) as a lineax solver that only
calls the operator's (transposed) `mv`, so it works on the linearized Jacobian operator diffrax
builds, with no knowledge of the step size or the stage coefficient; it is exact (not
iterative) whenever the range of O - I lies in the span of Q.

For `DiagonalData` (m = p, A_k = lam_k e_k e_k^T) the Jacobian is diagonal; `DiagonalSolver`
reads the diagonal of O with one product O 1 and divides: O(p) per step.

For `BlockData` (orthogonal samples, sample mu owning K modes: Lambda^T Lambda is block-diagonal
with blocks b_mu b_mu^T) the Jacobian is block-diagonal with m blocks K x K; `BlockSolver` reads
all blocks with K products (column j of every block at once, from the probe with a 1 at
position j of every block), LU-factorizes the m blocks in one batch and solves blockwise:
O(p K) per Jacobian and per solve, instead of O(p^3) (m = 1000, K = 3: p = 3000).

`glv_root_finder(data, mask)` returns the chord root finder with the right linear solver; it is
what `solve_flow(..., stiff=True)` uses for the GLV form (and for "kvaerno3"/"kvaerno5" by name).
The other forms keep lineax's dense default (their Jacobians act on p x p states).
"""

from __future__ import annotations

from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import lineax as lx
import numpy as np
from jaxtyping import Array, Float

from ..data._operators import AbstractCommutingData, BlockData, CommutingData, DiagonalData

__all__ = ["WoodburySolver", "DiagonalSolver", "BlockSolver", "glv_root_finder"]


def _batch_shape(operator: lx.AbstractLinearOperator, p: int, name: str) -> tuple:
    """() for an operator on vectors (p,); (B,) for one on stacked states (B, p)."""
    struct = operator.in_structure()
    if isinstance(struct, jax.ShapeDtypeStruct) and struct.shape[-1:] == (p,) and len(struct.shape) <= 2:
        return struct.shape[:-1]
    raise ValueError(
        f"`{name}` solves systems on vectors of shape ({p},) or stacked states (B, {p}); the operator acts on {struct}."
    )


class WoodburySolver(lx.AbstractLinearSolver):
    """Solve O x = b for O = I + U S' with U (p, m) known and S' unknown, by Eq. (*) above.

    Exact (not iterative) whenever the range of O - I lies in the column span of U; `init` costs
    r transposed products with O (r = rank U) and a solve O(p r).

    The operator may also act on stacked states (B, p) (the joint mode of `nqf.solve_sweep`) if it
    is block-diagonal over the B members, each block of the form above with the same U: then
    the same r products give every member's S at once, and each member gets its own r x r LU.

    **Arguments:**

    - `U`: spanning columns, shape (p, m); for the GLV Jacobian U = D_mask Lambda^T.
    - `rtol`: relative eigenvalue cutoff for the rank of U^T U (default 1e-12).

    **Raises:** `ValueError` if U is not a finite 2-D array, or (in `init`) if the operator does
    not act on vectors of shape (p,).
    """

    QT: Float[Array, "r p"]

    def __init__(self, U, *, rtol: float = 1e-12):
        U = np.asarray(U, dtype=float)
        if U.ndim != 2 or not np.all(np.isfinite(U)):
            raise ValueError(f"`U` must be a finite (p, m) array; found shape {U.shape}.")
        ev, V = np.linalg.eigh(U.T @ U)
        keep = ev > rtol * max(float(ev.max(initial=0.0)), np.finfo(float).tiny)
        if not np.any(keep):  # U = 0, so O = I: one zero row keeps the shapes non-empty
            self.QT = jnp.zeros((1, U.shape[0]))
        else:  # Q = U V s^-1/2: orthonormal columns spanning the range of U, stored as Q^T (r, p)
            self.QT = jnp.asarray((V[:, keep] / np.sqrt(ev[keep])).T @ U.T)

    @property
    def Q(self) -> Float[Array, "p r"]:
        """Orthonormal basis of the range of U, shape (p, r)."""
        return self.QT.T

    def init(self, operator, options: dict[str, Any]):
        del options
        QT = self.QT
        r, p = QT.shape
        batch = _batch_shape(operator, p, "WoodburySolver")
        # O - I = Q S with S = Q^T (O - I): r transposed products give S = (O^T Q - Q)^T, (r, p).
        # Stacked (B, p): block-diagonal O, so one product with Q's row j in every block gives
        # row j of every member's S.
        E = jnp.broadcast_to(QT[:, None, :], (r,) + batch + (p,)) if batch else QT
        S = jax.vmap(operator.transpose().mv)(E) - E
        if batch:
            S = jnp.moveaxis(S, 0, 1)  # (B, r, p)
            return S, jax.vmap(jsl.lu_factor)(jnp.eye(r) + S @ QT.T)
        return S, jsl.lu_factor(jnp.eye(r) + S @ QT.T)

    def compute(self, state, vector, options: dict[str, Any]):
        del options
        S, lu = state
        if vector.ndim == 2:  # stacked members (B, p), one LU each
            c = jax.vmap(jsl.lu_solve)(lu, jnp.einsum("brp,bp->br", S, vector))
        else:
            c = jsl.lu_solve(lu, S @ vector)
        x = vector - c @ self.QT  # Woodbury: (I + Q S)^{-1}
        ok = jnp.all(jnp.isfinite(x))
        return x, lx.RESULTS.where(ok, lx.RESULTS.successful, lx.RESULTS.singular), {}

    def transpose(self, state, options: dict[str, Any]):
        raise NotImplementedError("`WoodburySolver` does not support transposed solves.")

    def conj(self, state, options: dict[str, Any]):
        raise NotImplementedError("`WoodburySolver` does not support conjugated solves.")

    def assume_full_rank(self) -> bool:
        return True


class DiagonalSolver(lx.AbstractLinearSolver):
    """Solve O x = b for a diagonal operator O of unknown diagonal, read as O 1 (one `mv`).

    Exact when O is diagonal (the GLV Jacobian of `DiagonalData`, also stacked over the members
    of a joint `nqf.solve_sweep`: states (B, p)); O(p) per `init` and solve.
    """

    def init(self, operator, options: dict[str, Any]):
        del options
        struct = operator.in_structure()
        if not isinstance(struct, jax.ShapeDtypeStruct) or len(struct.shape) not in (1, 2):
            raise ValueError(
                f"`DiagonalSolver` needs an operator on vectors (p,) or stacked states (B, p); found {struct}."
            )
        return operator.mv(jnp.ones(struct.shape, struct.dtype))

    def compute(self, state, vector, options: dict[str, Any]):
        del options
        x = vector / state
        ok = jnp.all(jnp.isfinite(x))
        return x, lx.RESULTS.where(ok, lx.RESULTS.successful, lx.RESULTS.singular), {}

    def transpose(self, state, options: dict[str, Any]):
        return state, {}

    def conj(self, state, options: dict[str, Any]):
        return state, {}

    def assume_full_rank(self) -> bool:
        return True


class BlockSolver(lx.AbstractLinearSolver):
    """Solve O x = b for a block-diagonal operator O with consecutive K x K blocks (the GLV
    Jacobian of `BlockData`), read with K products; also on stacked states (B, p) of a joint
    `nqf.solve_sweep` (each member's blocks at once). Exact when O is block-diagonal with that
    block size; O(p K) per `init` and per solve.

    **Arguments:** `K`, the block size (an integer >= 1 dividing p).

    **Raises:** `ValueError` for a bad `K`, or (in `init`) an operator whose state size is not a
    multiple of K.
    """

    K: int = eqx.field(static=True)

    def __init__(self, K: int):
        if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
            raise ValueError(f"`K` (the block size) must be an integer >= 1; found {K!r}.")
        self.K = int(K)

    def init(self, operator, options: dict[str, Any]):
        del options
        struct = operator.in_structure()
        K = self.K
        if not isinstance(struct, jax.ShapeDtypeStruct) or len(struct.shape) not in (1, 2) or struct.shape[-1] % K:
            raise ValueError(
                f"`BlockSolver` with K = {K} needs an operator on vectors (p,) or stacked "
                f"states (B, p) with p a multiple of K; found {struct}."
            )
        shape = struct.shape
        m = shape[-1] // K
        probes = jnp.broadcast_to(jnp.eye(K, dtype=struct.dtype)[:, None, :], (K, m, K))
        probes = jnp.broadcast_to(probes.reshape((K,) + (1,) * (len(shape) - 1) + (shape[-1],)), (K,) + shape)
        cols = jax.vmap(operator.mv)(probes)  # (K, ..., p): column j of every block
        blocks = jnp.moveaxis(cols.reshape((K,) + shape[:-1] + (m, K)), 0, -1)  # (..., m, K, K)
        return jax.vmap(jsl.lu_factor)(blocks.reshape((-1, K, K)))

    def compute(self, state, vector, options: dict[str, Any]):
        del options
        K = self.K
        x = jax.vmap(jsl.lu_solve)(state, vector.reshape((-1, K))).reshape(vector.shape)
        ok = jnp.all(jnp.isfinite(x))
        return x, lx.RESULTS.where(ok, lx.RESULTS.successful, lx.RESULTS.singular), {}

    def transpose(self, state, options: dict[str, Any]):
        raise NotImplementedError("`BlockSolver` does not support transposed solves.")

    def conj(self, state, options: dict[str, Any]):
        raise NotImplementedError("`BlockSolver` does not support conjugated solves.")

    def assume_full_rank(self) -> bool:
        return True


def glv_linear_solver(data: AbstractCommutingData, mask=None) -> lx.AbstractLinearSolver:
    """The linear solver for the chord step of the GLV form (Eq. E13) on `data`.

    `DiagonalSolver` for `DiagonalData`; `BlockSolver(K)` for `BlockData` (the mask keeps the
    Jacobian block-diagonal); `WoodburySolver(D_mask Lambda^T)` for `CommutingData`
    with m < p / 2 (O(p m^2) per Jacobian); lineax's dense LU otherwise (m >= p / 2, where the
    low-rank form saves nothing). `mask` (p,) bool marks the live modes (default: all); several
    masks (k, p) (the members of a sweep) give one basis spanning every D_mask Lambda^T, i.e.
    k m columns (dense LU if k m >= p / 2).
    """
    if isinstance(data, DiagonalData):
        return DiagonalSolver()
    if isinstance(data, BlockData):
        return BlockSolver(data.K)
    if not isinstance(data, CommutingData):
        raise TypeError(f"`data` must be commuting data; found {type(data).__name__}.")
    m, p = data.Lambda.shape
    masks = np.ones((1, p), bool) if mask is None else np.atleast_2d(np.asarray(mask, dtype=bool))
    if 2 * m * masks.shape[0] >= p:
        return lx.AutoLinearSolver(well_posed=None)
    LT = np.asarray(data.Lambda).T
    if masks.shape[0] == 1 and masks.all():  # no copy of the (p, m) Lambda^T at large p
        return WoodburySolver(LT)
    return WoodburySolver(np.concatenate([LT * mk[:, None] for mk in masks], axis=1))


def glv_root_finder(data: AbstractCommutingData, mask=None) -> diffrax.VeryChord:
    """diffrax's chord root finder (tolerances from the step-size controller) with the
    structured linear solver of `glv_linear_solver` (`data`, `mask` as there)."""
    return diffrax.with_stepsize_controller_tols(diffrax.VeryChord)(linear_solver=glv_linear_solver(data, mask))


_STIFF_TYPES: dict = {}  # type -> bool (ABC isinstance checks are slow on a per-call path)


def is_stiff(solver: Any) -> bool:
    """True if `solver` is a stiff (linearly or fully implicit) solver: a diffrax implicit
    solver (Kvaerno) or `nqf.rosenbrock.Rodas5P`."""
    kind = type(solver)
    if kind not in _STIFF_TYPES:
        from .rosenbrock import Rodas5P

        _STIFF_TYPES[kind] = isinstance(solver, (diffrax.AbstractImplicitSolver, Rodas5P))
    return _STIFF_TYPES[kind]


def linear_solver_of(solver: Any):
    """The linear solver a stiff solver uses (Rodas5P's own, or an implicit solver's Newton
    root finder's); None for other solvers."""
    ls = getattr(solver, "linear_solver", None)
    return ls if ls is not None else getattr(getattr(solver, "root_finder", None), "linear_solver", None)


def is_structured(solver: Any) -> bool:
    """True if `solver` is a stiff solver whose linear solves use a structured solver."""
    return isinstance(linear_solver_of(solver), (WoodburySolver, DiagonalSolver, BlockSolver))
