"""Isotropic data (Theorem 7's assumption K(X) = 4 c X on Sym(p)) and the isotropic Riccati
solution M(t) of THEORY E17, shared by the data sets' population flow and Theorem 7's oracle."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._core import memory
from .._core._checks import as_array, check, check_psd, check_symmetric, is_traced, shape_str
from ._operators import AbstractData


def check_times_memory(ts, p, where: str) -> None:
    """Raise `nqf.memory.MemoryBudgetError` before an oracle builds ~3 (n, p, p) arrays (M(t),
    its rotated copy, the result) at the n times `ts` over the budget; nothing for p = None (a
    data argument without p: the oracle's own check names it)."""
    if isinstance(p, (int, np.integer)):
        n = int(np.shape(ts)[0]) if np.ndim(ts) == 1 else 1
        memory.check(
            8.0 * n * (3 * p * p + 2 * p),
            f"{where}: M(t) (p, p) = ({p}, {p}) at {n} times (ts)",
            "fewer times `ts` per call (split them and concatenate).",
        )


def _times(ts):
    """Gradient-flow times (n,) >= 0: a numpy array for concrete `ts`; traced, a float64 JAX
    array with t >= 0 checked at run time (`check`)."""
    ts = as_array(ts, "ts", ndim=1, host=True)
    if is_traced(ts):
        ts = jnp.asarray(ts, dtype=jnp.float64)
    return check(
        ts,
        ~(ts >= 0),
        lambda: ValueError(
            f"`ts` must be gradient-flow times >= 0 (the oracles start at t = 0); found min {ts.min()}."
        ),
        "`ts` must be finite gradient-flow times >= 0 (the oracles start at t = 0)",
    )


def _initial_M(M0, p: int, name: str = "M0"):
    """`M0` (p, p) checked finite, symmetric and PSD and symmetrized: a numpy array for concrete
    `M0`; traced, a float64 JAX array with those checks at run time (`check`)."""
    M0 = as_array(M0, name, ndim=2, host=True)
    if M0.shape != (p, p):
        raise ValueError(f"`{name}` must have shape ({p}, {p}) to match the data; found {shape_str(M0.shape)}.")
    if is_traced(M0):
        M0 = jnp.asarray(M0, dtype=jnp.float64)
        M0 = check(M0, ~jnp.all(jnp.isfinite(M0)), None, f"`{name}` must be finite")
    M0 = check_psd(check_symmetric(M0, name), name)
    return 0.5 * (M0 + M0.T)


def _check_data(data) -> None:
    if not isinstance(data, AbstractData):
        raise TypeError(f"`data` must be an nqf data set (e.g. `DenseData`); found {type(data).__name__}.")


def sym_basis(p: int) -> np.ndarray:
    """Orthonormal basis of Sym(p) under <X, Y> = Tr[X Y]: E_ii and (E_ij + E_ji)/sqrt 2, i < j.

    Returns shape (p (p + 1) / 2, p, p).
    """
    out = []
    for i in range(p):
        for j in range(i, p):
            B = np.zeros((p, p))
            if i == j:
                B[i, i] = 1.0
            else:
                B[i, j] = B[j, i] = np.sqrt(0.5)
            out.append(B)
    return np.asarray(out).reshape(-1, p, p)


def isotropy(data: AbstractData) -> tuple[float, float, np.ndarray]:
    """Measure Theorem 7's assumption: the matrix of K on an orthonormal basis of Sym(p).

    K_ab = <B_a, K(B_b)> = (4/m) sum_mu <A_mu, B_a> <A_mu, B_b> (a PSD matrix of size
    p (p + 1) / 2); isotropy is K = 4 c I.

    **Returns:** `(c, residual, eigenvalues)`: c = Tr K / (4 dim Sym(p)), the relative residual
    max_i |kappa_i - 4 c| / max_i kappa_i over the eigenvalues kappa of K (0 when K = 0), and the
    eigenvalues.
    """
    with jax.ensure_compile_time_eval():
        c, res, kappa = _isotropy(data)
    return float(c), float(res), np.asarray(kappa)


def _isotropy(data: AbstractData):
    """(c, residual, kappa) of `isotropy` in JAX, traceable: c differentiable (c = Tr K / (4 dim
    Sym(p)) = sum T^2 / (m dim Sym(p))), the residual and kappa not differentiated."""
    _check_data(data)
    T = jax.vmap(data.traces)(jnp.asarray(sym_basis(data.p)))  # (n_s, m)
    c = jnp.sum(T**2) / (data.m * T.shape[0])
    Ts = jax.lax.stop_gradient(T)
    Kmat = 4.0 / data.m * (Ts @ Ts.T)
    kappa = jnp.linalg.eigvalsh(Kmat)
    top = jnp.abs(kappa).max(initial=0.0)
    cs = jax.lax.stop_gradient(c)
    res = jnp.where(top > 0, jnp.abs(kappa - 4.0 * cs).max(initial=0.0) / jnp.where(top > 0, top, 1.0), 0.0)
    return c, res, kappa


def _log_psi(g, t):
    """log Psi, Psi = (1 - exp(-2 g t)) / (2 g) = exp(-2 g t) int_0^t exp(2 g s) ds (t for g = 0),
    for t > 0, without overflow: for g < 0 it is 2|g| t + log(1 - e^{-2|g| t}) - log(2|g|)."""
    a = np.abs(g)
    with np.errstate(divide="ignore", invalid="ignore"):
        a_s = np.where(a > 0, a, 1.0)
        core = np.log(-np.expm1(-2.0 * a_s * t)) - np.log(2.0 * a_s)
        return np.where(g > 0, core, np.where(g < 0, 2.0 * a * t + core, np.log(t + 0.0 * g)))


def _log_phi_neg(g, t):
    """log phi_k = log((1 - e^{-2|g_k| t}) / (2|g_k|)) for g_k < 0 (bounded; other entries: any finite value),
    shapes g (p,), t (n', 1) -> (n', p)."""
    a = np.where(g < 0, -g, 1.0)[None, :]
    return np.log(-np.expm1(-2.0 * a * t)) - np.log(2.0 * a)


def _riccati_isotropic(g, c: float, Mb0, ts) -> np.ndarray:
    """M~(t) = E M~0 [I + 8 c Phi M~0]^{-1} E in Y's eigenbasis (E = diag(e^{g t}),
    Phi = diag(phi), phi_k = int_0^t e^{2 g_k s} ds), evaluated without overflow or loss of the
    small modes' relative accuracy.

    On the range of M~0 (orthonormal basis Q, rank r, restricted M_R = Q^T M~0 Q) E17 reads
    M~ = E Q (M_R^{-1} + 8 c Q^T Phi Q)^{-1} Q^T E (the information form N' = -Y N - N Y + 8 c I).
    Sort the modes by decreasing g (so by decreasing phi, for every t > 0) and rotate Q so that
    its sorted rows are lower trapezoidal (an LQ factorization, Q_sorted = L O^T): then
    A = O^T M_R^{-1} O + 8 c L^T Phi L is graded (entry (i, j) of the Phi part involves only rows
    with phi <= phi_i, phi_j), and after the symmetric scaling A = S Ahat S (unit diagonal, built
    in log space) its Cholesky solve is accurate; M~ = (E L S^{-1}) Ahat^{-1} (E L S^{-1})^T.
    """
    p = g.shape[0]
    n = ts.shape[0]
    out = np.zeros((n, p, p))
    ev, U = np.linalg.eigh(Mb0)
    keep = ev > 10.0 * p * np.finfo(float).eps * max(float(ev.max(initial=0.0)), 0.0)
    r = int(keep.sum())
    if r == 0:
        return out
    if c == 0:  # K = 0: M(t) = E M0 E
        E = np.exp(np.outer(ts, g))
        return E[:, :, None] * Mb0[None] * E[:, None, :]
    live = ts > 0
    out[~live] = Mb0
    if not live.any():
        return out
    t = ts[live][:, None]  # (n', 1)
    order = np.argsort(-g, kind="stable")
    Qs = U[:, keep][order]  # (p, r), rows sorted by decreasing g
    O_, Lt = np.linalg.qr(Qs.T)  # Qs^T = O Lt  =>  Qs = Lt^T O^T, L = Lt^T lower trapezoidal
    L = Lt.T  # (p, r)
    Ninv = (O_.T * (1.0 / ev[keep])) @ O_  # O^T M_R^{-1} O, (r, r)
    gs = g[order]
    # Column i of L starts at row i (trapezoidal): its dominant exponent at large t is
    # max(gs_i, 0) t. Every log below is taken relative to rho_i t, rho_i = max(gs_i, 0), with the
    # rate differences formed before multiplying by t: log phi_k - 2 rho_i t
    # = 2 (max(gs_k, 0) - rho_i) t + log phi~_k, phi~_k = phi_k e^{-2 max(gs_k, 0) t} (bounded).
    # So the dominant terms carry no rounding of order eps |g| t (measured 2e-9 .. 3e-8 relative
    # drift at t = 1e8 without this shift, ~1e-15 with it).
    rho = np.maximum(gs[:r], 0.0)  # (r,)
    gp = np.maximum(gs, 0.0)
    logphit = np.where(gs[None, :] < 0, _log_phi_neg(gs, t), _log_psi(gs[None, :], t))  # log phi~, (n', p)
    D = gp[:, None] - rho[None, :]  # (p, r): max(gs_k, 0) - rho_i
    with np.errstate(divide="ignore"):
        logL = np.log(np.abs(L))  # (p, r), -inf for zeros
    sgnL = np.sign(L)
    log8c = np.log(8.0 * c)
    with np.errstate(invalid="ignore", under="ignore"):
        # log of the diagonal of A relative to 2 rho_i t: logsumexp over k and the Ninv diagonal
        diag_terms = np.concatenate(
            [
                (np.log(np.diag(Ninv))[None, :] - 2.0 * rho[None, :] * t)[:, None, :],
                log8c + 2.0 * D[None] * t[:, :, None] + logphit[:, :, None] + 2.0 * logL[None],
            ],
            axis=1,
        )  # (n', p + 1, r)
        mx = diag_terms.max(axis=1, keepdims=True)
        half = 0.5 * (mx + np.log(np.exp(diag_terms - mx).sum(axis=1, keepdims=True)))[:, 0, :]  # log S_i - rho_i t
        # log(S_i S_j) - (rho_i + rho_j) t
        hh = half[:, :, None] + half[:, None, :]
        rr = (rho[:, None] + rho[None, :])[None] * t[:, :, None]  # (n', r, r)
        Ahat = Ninv[None] * np.exp(-rr - hh)
        # Phi part: log(8 c phi_k |L_ki| |L_kj|) - log(S_i S_j) = log8c + (D_ki + D_kj) t + log phi~_k + ...
        lt = (
            log8c
            + (D[:, :, None] + D[:, None, :])[None] * t[:, :, None, None]
            + logphit[:, :, None, None]
            + logL[None, :, :, None]
            + logL[None, :, None, :]
            - hh[:, None]
        )
        Ahat = Ahat + np.einsum("nkij->nij", sgnL[None, :, :, None] * sgnL[None, :, None, :] * np.exp(lt))
        # G = E L S^{-1}: G_ki = sign(L_ki) exp((g_k - rho_i) t + log|L_ki| - (log S_i - rho_i t))
        G = sgnL[None] * np.exp((gs[:, None] - rho[None, :])[None] * t[:, :, None] + logL[None] - half[:, None, :])
    Ahat = 0.5 * (Ahat + np.swapaxes(Ahat, 1, 2))
    Ch = np.linalg.cholesky(Ahat)  # (n', r, r)
    H = np.swapaxes(np.linalg.solve(Ch, np.swapaxes(G, 1, 2)), 1, 2)  # G Ch^{-T}, (n', p, r)
    Ms = H @ np.swapaxes(H, 1, 2)  # sorted order
    inv = np.argsort(order)
    out[live] = Ms[:, inv][:, :, inv]
    return out
