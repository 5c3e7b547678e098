"""Issue 24 part 2: the modified (finite learning rate) flow on M and (M, mu).

1. The closed vector fields (`rhs_M_modified`, `rhs_M_mu_modified`) equal the weight-space
   gradient flow of Phi + (eta/4) |grad_W Phi|^2 computed by autodiff in W and pushed to
   (M, mu) = (W W^T, W 1) (an independent computation), with weight decay and a general model.
2. The order: at a fixed time T the plain flow is O(eta) from the exact GD map (`closed_sgd`),
   the modified flow O(eta^2); fitted log-log slopes within 0.1 of 1 and 2 over
   eta in [1e-3, 1e-1] on fig3-like diagonal data and on a small non-commuting dense data set.
   Measured: slopes 1.007 / 2.001 (fig3 data, M0 = 1e-3 I, T = 5) and 1.013 / 1.995 (dense);
   the errors are listed below.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.dynamics import rhs_M, rhs_M_modified, rhs_M_mu, rhs_M_mu_modified, solve_modified_flow

# Measured relative errors |M_flow(T) - M_GD(T)| / |M_GD(T)| (Frobenius) at eta = 0.1, 0.02, 0.005, 0.001
# (2-core CPU, this file's problems):
# fig3 data, M0 = 1e-3 I, T = 5: plain flow 1.029e-1, 2.002e-2, 4.980e-3, 9.945e-4 (slope 1.0070);
#                                modified   2.946e-3, 1.176e-4, 7.342e-6, 2.936e-7 (slope 2.0007).
# dense p = 4, m = 6, T = 2:     plain flow 1.861e-2, 3.541e-3, 8.778e-4, 1.752e-4 (slope 1.0126);
#                                modified   2.364e-3, 9.606e-5, 6.043e-6, 2.422e-7 (slope 1.9948).


def dense_problem(seed=0, p=4, m=6):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, p, p))
    A = 0.5 * (A + A.transpose(0, 2, 1)) / np.sqrt(p)
    return nqf.DenseData(A, rng.standard_normal(m)), rng


def w_space_velocity(model, W, gamma, eta):
    """(M', mu') of the W-space flow W' = -grad_W [Phi + (eta/4) |grad_W Phi|^2] by autodiff."""
    general = isinstance(model, nqf.NQFModel)

    def phi(W):
        f = model.outputs(W @ W.T, W.sum(1)) if general else model.traces(W @ W.T)
        return jnp.mean((f - model.y) ** 2) + 0.5 * gamma * jnp.sum(W**2)

    def modified(W):
        return phi(W) + 0.25 * eta * jnp.sum(jax.grad(phi)(W) ** 2)

    Wd = -jax.jit(jax.grad(modified))(jnp.asarray(W))  # one program, not one per primitive
    return Wd @ W.T + W @ Wd.T, Wd.sum(1)


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


@pytest.mark.parametrize("gamma, eta", [(0.0, 0.05), (0.1, 0.2)])
def test_M_field_equals_w_space_autodiff(gamma, eta):
    data, rng = dense_problem()
    W = 0.5 * rng.standard_normal((4, 7))
    Md, _ = w_space_velocity(data, W, gamma, eta)
    assert rel(rhs_M_modified(0.0, jnp.asarray(W @ W.T), (data, gamma, eta)), Md) <= 1e-13
    # eta = 0 is the plain flow E9
    M = jnp.asarray(W @ W.T)
    assert rel(rhs_M_modified(0.0, M, (data, gamma, 0.0)), rhs_M(0.0, M, (data, gamma, None))) <= 1e-15


def test_M_field_on_diagonal_data():
    data = nqf.datasets.fig3_data()
    W = np.diag([0.3, 0.2, 0.5, 0.1, 0.4]) + 0.05 * np.random.default_rng(2).standard_normal((5, 5))
    Md, _ = w_space_velocity(data, W, 0.0, 0.1)
    assert rel(rhs_M_modified(0.0, jnp.asarray(W @ W.T), (data, 0.0, 0.1)), Md) <= 1e-13


def test_M_mu_field_equals_w_space_autodiff():
    data, rng = dense_problem(1)
    p, m, d = 4, 6, 7
    B = rng.standard_normal((m, p, p))
    model = nqf.NQFModel(
        data, g=rng.standard_normal((m, p)), B=0.3 * (B + B.transpose(0, 2, 1)), f0=rng.standard_normal(m)
    )
    W = 0.5 * rng.standard_normal((p, d))
    state = (jnp.asarray(W @ W.T), jnp.asarray(W.sum(1)))
    for gamma, eta in [(0.0, 0.05), (0.1, 0.2)]:
        Md, mud = w_space_velocity(model, W, gamma, eta)
        dM, dmu = rhs_M_mu_modified(0.0, state, (model, gamma, float(d), eta))
        assert rel(dM, Md) <= 1e-13 and rel(dmu, mud) <= 1e-13
    dM, dmu = rhs_M_mu_modified(0.0, state, (model, 0.1, float(d), 0.0))
    rM, rmu = rhs_M_mu(0.0, state, (model, 0.1, float(d)))
    assert rel(dM, rM) <= 1e-13 and rel(dmu, rmu) <= 1e-13


def _flow_at(data, M0, eta, T):
    """M(T) of the modified flow (eta = 0: the plain flow) at rtol = atol = 1e-12 (Dopri8)."""
    return diffrax.diffeqsolve(
        diffrax.ODETerm(rhs_M_modified),
        diffrax.Dopri8(),
        t0=0.0,
        t1=T,
        dt0=None,
        y0=jnp.asarray(M0),
        args=(data, jnp.float64(0.0), jnp.float64(eta)),  # arrays: one compilation for every eta
        stepsize_controller=diffrax.PIDController(rtol=1e-12, atol=1e-12 * float(np.abs(M0).max())),
        max_steps=100_000,
    ).ys[-1]


def _orders(data, M0, T, ns):
    rows = []
    plain = _flow_at(data, M0, 0.0, T)
    for n in ns:
        eta = T / n
        gd = nqf.closed_sgd(data, M0=M0, lr=eta, steps=n, save_every=n, form="M").M[-1]
        scale = np.linalg.norm(gd)
        rows.append((eta, np.linalg.norm(plain - gd) / scale, np.linalg.norm(_flow_at(data, M0, eta, T) - gd) / scale))
    a = np.log(np.array(rows))
    return rows, np.polyfit(a[:, 0], a[:, 1], 1)[0], np.polyfit(a[:, 0], a[:, 2], 1)[0]


@pytest.mark.parametrize("case", ["fig3", "dense"])
def test_order_plain_flow_1_modified_flow_2(case):
    if case == "fig3":
        data, M0, T = nqf.datasets.fig3_data(), 1e-3 * np.eye(5), 5.0
    else:
        data, rng = dense_problem()
        W0 = 0.3 * rng.standard_normal((4, 4))
        M0, T = W0 @ W0.T, 2.0
    ns = [round(T / eta) for eta in (1e-1, 2e-2, 5e-3, 1e-3)]
    rows, s_plain, s_mod = _orders(data, M0, T, ns)
    msg = f"{case}: " + "; ".join(f"eta {e:.3g}: flow {a:.3e}, modified {b:.3e}" for e, a, b in rows)
    assert abs(s_plain - 1.0) <= 0.1, (s_plain, msg)
    assert abs(s_mod - 2.0) <= 0.1, (s_mod, msg)
    assert all(b < a for _, a, b in rows), msg  # the modified flow is closer at every eta


def test_solve_modified_flow_matches_its_field_and_checks_lr():
    data = nqf.datasets.fig3_data()
    M0 = 1e-3 * np.eye(5)
    sol = solve_modified_flow(data, M0=M0, lr=0.05, t1=5.0, rtol=1e-12, atol=1e-15)
    assert rel(sol.ys[-1], _flow_at(data, M0, 0.05, 5.0)) <= 1e-9
    for lr in (0.0, -1.0, np.nan):
        with pytest.raises(ValueError, match="`lr`"):
            solve_modified_flow(data, M0=M0, lr=lr, t1=1.0)
    # issue 36 B9: tolerances refused up front (rtol=0 failed inside diffrax after 8.5 s)
    for kw, msg in (
        (dict(rtol=0.0), r"`rtol` must be finite and > 0; found 0"),
        (dict(rtol=1.5), r"`rtol` must be < 1"),
        (dict(atol=-1.0), r"`atol` must be finite and > 0"),
        (dict(max_steps=0), r"`max_steps` must be an integer >= 1"),
    ):
        with pytest.raises(ValueError, match=msg):
            solve_modified_flow(data, M0=M0, lr=0.05, t1=1.0, **kw)
