"""`nqf validate` checks of the flow against the exact solutions (Theorems 6, 7, 16,
Proposition 7), the oracles' refusals, the NTK (Proposition 8, E25), the general model's (M, mu)
flow (E10) and the architecture dictionary against the autodiff extractor."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate

from ..data import datasets
from ..data._model import NQFModel
from ..data._operators import DenseData, feedforward_data
from ..solvers._solve import solve_flow
from ..theory._ntk import ntk
from ..theory._oracles import proposition7, theorem6, theorem7, theorem7_commuting, theorem16
from ._common import (
    _ATOL_TINY,
    _NT,
    _RTOL,
    FLOW_BOUND,
    NTK_BOUND,
    THM6_C,
    THM6_R,
    _fmt,
    _random_psd,
    _refusal,
    generic_commuting_data,
    matrix_relative_error,
    norm_relative_error,
    record,
    register,
    relative_error,
)


@register
def check_theorem6(eps_values):
    """Theorem 6 on orthogonal-features data with r = 0 and r < 0 modes, non-diagonal M0."""
    data = datasets.orthogonal_features_data(THM6_R, THM6_C, seed=1)
    T = 250.0
    ts = np.linspace(0.0, T, _NT)
    out = []
    for eps in eps_values:
        M0 = _random_psd(data.p, eps, seed=11)
        orc = theorem6(data, ts, M0=M0)
        glv = solve_flow(data, M0=M0, t1=T, ts=ts, form="glv", rtol=_RTOL)
        out.append(record(f"theorem6 glv {_fmt(eps)}: max rel err z", relative_error(glv.z, orc.z), FLOW_BOUND))
        out.append(record(f"theorem6 glv {_fmt(eps)}: max rel err M", matrix_relative_error(glv.M, orc.M), FLOW_BOUND))
        Mf = solve_flow(data, M0=M0, t1=T, ts=ts, form="M", rtol=_RTOL, atol=_ATOL_TINY)
        out.append(
            record(f"theorem6 M-form {_fmt(eps)}: max rel err M", matrix_relative_error(Mf.M, orc.M), FLOW_BOUND)
        )
    return out


@register
def check_theorem7(eps_values):
    """Theorem 7 on exactly isotropic data (p = 3), growing and decaying modes, M0 not
    commuting with Y; plus agreement of E17 with its eigenvalue form for M0 = eps I."""
    data = datasets.isotropic_data(3, 0.5, g=(1.0, 0.5, -0.4), seed=1)
    T = 60.0
    ts = np.linspace(0.0, T, _NT)
    out = []
    for eps in eps_values:
        M0 = _random_psd(data.p, eps, seed=7)
        orc = theorem7(data, ts, M0=M0)
        Mf = solve_flow(data, M0=M0, t1=T, ts=ts, form="M", rtol=_RTOL, atol=_ATOL_TINY)
        out.append(
            record(f"theorem7 M-form {_fmt(eps)}: max rel err |M|_F", norm_relative_error(Mf.M, orc.M), FLOW_BOUND)
        )
        g = np.linalg.eigvalsh(np.asarray(data.Y()))
        zc = theorem7_commuting(g, 0.5, np.full(3, eps), ts)
        z7 = theorem7(data, ts, M0=eps * np.eye(3)).z
        out.append(
            record(f"theorem7 E17 vs eigenvalue form {_fmt(eps)}: max rel err z", relative_error(z7, zc), FLOW_BOUND)
        )
    return out


@register
def check_theorem16(eps_values):
    """Theorem 16 on projector data (blocks 2, 1, 2: Theorem 6 does not apply)."""
    data, Pi = datasets.projector_data((2, 1, 2), (1.0, 0.4, -0.2), (1.0, 2.0, 0.5), m=5, seed=2, rotate_basis=False)
    blocks = np.repeat(np.arange(3), (2, 1, 2))
    T = 120.0
    ts = np.linspace(0.0, T, _NT)
    out = []
    for eps in eps_values:
        M0 = np.einsum("a,aij->ij", eps * np.array([1.0, 2.0, 0.5]), Pi)
        orc = theorem16(data, Pi, ts, M0=M0)
        glv = solve_flow(data, M0=M0, t1=T, ts=ts, form="glv", rtol=_RTOL)
        out.append(
            record(f"theorem16 glv {_fmt(eps)}: max rel err z", relative_error(glv.z, orc.z[:, blocks]), FLOW_BOUND)
        )
        Mf = solve_flow(data, M0=M0, t1=T, ts=ts, form="M", rtol=_RTOL, atol=_ATOL_TINY)
        out.append(
            record(f"theorem16 M-form {_fmt(eps)}: max rel err M", matrix_relative_error(Mf.M, orc.M), FLOW_BOUND)
        )
    return out


@register
def check_proposition7(eps_values):
    """Proposition 7: off-diagonals of the M-form flow vs slaving to the GLV solution z(t)."""
    data = generic_commuting_data(seed=3)
    T = 100.0
    ts = np.linspace(0.0, T, _NT)
    out = []
    for eps in eps_values:
        M0 = _random_psd(data.p, eps, seed=5)
        glv = solve_flow(data, M0=M0, t1=T, ts=ts, form="glv", rtol=_RTOL)
        Mp = proposition7(data, M0, glv.z)
        Mf = solve_flow(data, M0=M0, t1=T, ts=ts, form="M", rtol=_RTOL, atol=_ATOL_TINY)
        out.append(
            record(
                f"proposition7 M-form vs slaved GLV {_fmt(eps)}: max rel err M",
                matrix_relative_error(Mf.M, Mp),
                FLOW_BOUND,
            )
        )
    return out


@register
def check_refusals(eps_values):
    """Each oracle refuses a data set that violates its assumption (independent of eps)."""
    ts = np.linspace(0.0, 1.0, 3)
    proj, Pi = datasets.projector_data((2, 1, 2), (1.0, 0.4, -0.2), m=5, seed=2)
    iso = datasets.isotropic_data(3, 0.5, seed=1)
    fig3 = datasets.fig3_data()
    # Wrong projectors for `proj`: merge two blocks' directions into one split that the data do not respect.
    P = np.asarray(proj.P)
    bad = np.stack([P[:, :3] @ P[:, :3].T, P[:, 3:] @ P[:, 3:].T])
    return [
        _refusal("theorem6 refuses repeated features (projector data)", lambda: theorem6(proj, ts, M0=np.eye(5))),
        _refusal("theorem7 refuses non-isotropic data (Fig. 3 data)", lambda: theorem7(fig3, ts, M0=np.eye(5))),
        _refusal(
            "theorem16 refuses projectors that are not invariant", lambda: theorem16(proj, bad, ts, M0=bad[0] + bad[1])
        ),
        _refusal(
            "theorem16 refuses M0 outside the span of the projectors",
            lambda: theorem16(proj, Pi, ts, M0=np.eye(5) + 0.1 * np.ones((5, 5))),
        ),
        _refusal(
            "proposition7 refuses non-commuting (isotropic) data", lambda: proposition7(iso, np.eye(3), np.ones((2, 3)))
        ),
    ]


def _general_model(data, rng) -> NQFModel:
    """`data` with random g (m, p), symmetric B (m, p, p) and f0 (m,) (Eq. E2)."""
    m, p = data.m, data.p
    B = rng.standard_normal((m, p, p))
    return NQFModel(
        data, g=rng.standard_normal((m, p)), B=0.25 * (B + np.swapaxes(B, 1, 2)), f0=0.3 * rng.standard_normal(m)
    )


def _wspace_outputs(model: NQFModel, W):
    """f_x(W) = f0 + g^T W1 + (W1)^T B (W1) + Tr[W^T A W] from the dense A (Eq. E2), shape (m,)."""
    mu = W.sum(axis=1)
    return (
        model.f0
        + model.g @ mu
        + jnp.einsum("i,mij,j->m", mu, model.B, mu)
        + jnp.einsum("mij,ia,ja->m", model.data.dense(), W, W)
    )


_wspace_jacobian = jax.jit(jax.jacrev(lambda model, W: _wspace_outputs(model, W), argnums=1))
"""d f_x / d W by reverse-mode autodiff, shape (m, p, d)."""


@register
def check_ntk(eps_values):
    """Proposition 8 (Eq. E25) on feed-forward (low-rank) data with g and B: `nqf.ntk` between
    two input sets vs J(x) J(x')^T, J = d f / d vec(W) by `jax.jacrev`, at random W of width
    d = 1, 3, 50 (independent of eps)."""
    rng = np.random.default_rng(8)
    k, q = 3, 2
    mx = _general_model(feedforward_data(np.zeros(5), rng.standard_normal((5, k, q))), rng)
    mxp = _general_model(feedforward_data(np.zeros(4), rng.standard_normal((4, k, q))), rng)
    worst = 0.0
    for d in (1, 3, 50):
        W = rng.standard_normal((k + q, d)) / np.sqrt(d)
        J1, J2 = (np.asarray(_wspace_jacobian(mod, jnp.asarray(W))).reshape(mod.m, -1) for mod in (mx, mxp))
        ref = J1 @ J2.T
        theta = np.asarray(ntk(mx, mxp, M=W @ W.T, mu=W.sum(axis=1), d=d))
        worst = max(worst, float(np.abs(theta - ref).max() / np.abs(ref).max()))
    return [record("ntk: E25 vs autodiff", worst, NTK_BOUND)]


@register
def check_flow_general(eps_values):
    """Eq. E10 (Theorem 2 in the flow limit) on dense data with g, B, f0 and weight decay: the
    "M-mu" flow vs M = W W^T, mu = W 1 of the weight-space gradient flow W' = -grad_W L (autodiff
    gradient, scipy DOP853 at rtol 1e-13), width d = 3; max relative error |.|_F over the saved
    times of M and of mu (independent of eps)."""
    rng = np.random.default_rng(9)
    m, p, d, gamma, T = 6, 4, 3, 0.1, 2.0
    A = rng.standard_normal((m, p, p))
    model = _general_model(DenseData(A + np.swapaxes(A, 1, 2), rng.standard_normal(m)), rng)
    W0 = 0.5 * rng.standard_normal((p, d))
    ts = np.linspace(0.0, T, 11)
    sol = solve_flow(model, W0=W0, t1=T, ts=ts, rtol=_RTOL, weight_decay=gamma, dense=False)

    def loss(w):
        f = _wspace_outputs(model, w.reshape(p, d))
        return jnp.mean((f - model.y) ** 2) + gamma / 2 * jnp.sum(w**2)

    grad = jax.jit(jax.grad(loss))
    ref = scipy.integrate.solve_ivp(
        lambda t, w: -np.asarray(grad(w)),
        (0.0, T),
        W0.ravel(),
        "DOP853",
        t_eval=ts,
        rtol=1e-13,
        atol=1e-15 * np.abs(W0).max(),
    )
    if not ref.success:
        raise RuntimeError(f"scipy W-space reference failed: {ref.message}")
    Ws = ref.y.T.reshape(-1, p, d)
    err = max(norm_relative_error(sol.M, Ws @ np.swapaxes(Ws, 1, 2)), norm_relative_error(sol.mu, Ws.sum(axis=2)))
    return [record("flow E10 vs W-space", err, FLOW_BOUND)]


# --------------------------------------------------------------------------------------------
# architecture dictionary (nqf.structure, THEORY sec. 2) vs the autodiff extractor (nqf.extract)
# --------------------------------------------------------------------------------------------
DICTIONARY_BOUND = 1e-10
"""Bound on max |A_closed - A_autodiff| / max(1, max |A|) of the dictionary-vs-autodiff checks."""


@register
def check_dictionary_vs_autodiff(eps_values):
    """Closed-form A(x) of the MLP (3 outputs), CNN (stride 2, padding 1, 2 outputs), single-head
    QK logits, QK heads and multi-head attention (2 outputs) against `nqf.extract` applied to the
    W-space modules (`nqf.modules`) on 3 random inputs; one record per architecture (independent
    of eps). For MHA the Q, K rows of the extracted A must be exactly zero (else value = inf)."""
    from ..data._extract import extract
    from ..data.modules import CNN, MHA, MLP, QKAttention

    rng = np.random.default_rng(11)
    m, D, N = 3, 3, 4
    xq, X = rng.standard_normal((m, D)), rng.standard_normal((m, D, N))
    c = jnp.asarray(rng.standard_normal((D, 2)))
    cases = [
        ("MLP 5-3 tanh", MLP(5, 3), rng.standard_normal((m, 5))),
        (
            "CNN 2x5x6, kernel 3x2, stride 2, pad 1",
            CNN((2, 5, 6), (3, 2), n_out=2, stride=2, padding=1),
            rng.standard_normal((m, 2, 5, 6)),
        ),
        ("QK logits (rows as neurons)", QKAttention(D, 2, c), (xq, X)),
        ("QK-only heads", QKAttention(D, 2, c, heads=True), (xq, X)),
        ("MHA (d_k = d_v = 2)", MHA(D, 2, 2, n_out=2), (xq, X)),
    ]
    out = []
    for name, mod, xs in cases:
        rep = extract(mod, xs, mod.p)
        A_auto = np.asarray((rep.data if isinstance(rep, NQFModel) else rep).dense())
        A_closed = np.asarray(mod.structure(xs).dense())
        err = float(np.abs(A_closed - A_auto).max()) / max(1.0, float(np.abs(A_closed).max()))
        if isinstance(mod, MHA):
            nqk = 2 * mod.d_k * mod.D
            if np.any(A_auto[:, :nqk, :] != 0.0) or np.any(A_closed[:, :nqk, :] != 0.0):
                err = float("inf")
        out.append(record(f"dictionary vs autodiff: {name}", err, DICTIONARY_BOUND))
    return out
