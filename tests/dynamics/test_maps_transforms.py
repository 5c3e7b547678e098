"""`closed_sgd`, `closed_map` and `train_w` under `jax.jit`, `jax.vmap` and `jax.grad`/`jax.jacfwd`
(issue 14), and their result types under pickle.

References: the untransformed call (values to 1e-12 relative, member by member for vmap) and
central finite differences of untransformed calls (gradients, relative 1e-6). The initial
factor's tangent rules are checked against the exact derivative of C0 = R0 R0^T. Shapes are
small and fixed (p = 3, m = 4, d = 4, 20 steps) so that each transform compiles once.
"""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf import maps

P, MS, D, STEPS, LR = 3, 4, 4, 20, 0.05
KW = dict(steps=STEPS, batch_size=2, key=1, momentum=0.5, weight_decay=0.02)
FIELDS = ("M", "mu", "outputs", "loss", "t")
TOL = 1e-12
GRAD_TOL = 1e-6

_rng = np.random.default_rng(2024)
_A = _rng.standard_normal((MS, P, P))
A = 0.5 * (_A + _A.transpose(0, 2, 1))
Y = _rng.standard_normal(MS)
G = 0.3 * _rng.standard_normal((MS, P))
W0 = 0.4 * _rng.standard_normal((P, D))


def model_of(y=Y):
    """Dense NQF with a linear term g, so that mu enters the dynamics."""
    return nqf.NQFModel(nqf.DenseData(A, y), g=G)


MODEL = model_of()


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def gram(L):
    return np.einsum("...ij,...kj->...ik", L, L)


def assert_same(out, ref, fields=FIELDS, tol=TOL):
    np.testing.assert_array_equal(np.asarray(out.steps), ref.steps)
    for f in fields:
        assert rel(getattr(out, f), getattr(ref, f)) <= tol, f
    if getattr(ref, "L", None) is not None:  # the factor up to its right orthogonal gauge
        assert rel(gram(out.L), gram(ref.L)) <= tol


def central(f, x, v, h):
    """Central difference of the scalar f at x along v, step h."""
    return (f(x + h * v) - f(x - h * v)) / (2 * h)


def assert_grad(analytic, fd, tol=GRAD_TOL):
    assert abs(analytic - fd) <= tol * abs(fd), (analytic, fd)


# -- closed_sgd ----------------------------------------------------------------------------------

_jit_closed = jax.jit(lambda lr, W: nqf.closed_sgd(MODEL, W0=W, lr=lr, **KW))


def test_jit_closed_sgd_returns_the_untransformed_trajectory():
    ref = nqf.closed_sgd(MODEL, W0=W0, lr=LR, **KW)
    out = _jit_closed(LR, W0)
    assert isinstance(out, nqf.MapTrajectory) and isinstance(out.M, jax.Array)
    assert out.d == D and out.form == "factor" and float(out.lr) == LR
    assert_same(out, ref)


def test_traced_value_checks_raise_at_run_time():
    """Under jit the host checks become run-time checks (equinox.error_if) with the same message."""
    with pytest.raises(Exception, match=r"`lr` must be finite and > 0 \(checked at run time"):
        jax.block_until_ready(_jit_closed(-0.1, W0))
    with pytest.raises(Exception, match=r"The closed map diverged: non-finite M; reduce `lr` \(or `weight_decay`\)"):
        jax.block_until_ready(_jit_closed(1e3, W0))
    with pytest.raises(Exception, match=r"`W0` must be finite"):
        jax.block_until_ready(_jit_closed(LR, np.full((P, D), np.nan)))
    check = jax.jit(lambda idx: nqf.dynamics._batches.check_batch_indices(idx, MS, 2))
    np.testing.assert_array_equal(check(np.ones((2, 3), np.int32)), np.ones((2, 3)))
    with pytest.raises(Exception, match=r"`batch_indices` entries must lie in \[0, m=4\)"):
        jax.block_until_ready(check(np.full((2, 3), MS, np.int32)))


def test_program_arguments_must_stay_concrete():
    with pytest.raises(ValueError, match=r"`steps` must be an integer >= 1; found .*Tracer"):
        jax.jit(lambda s: nqf.closed_sgd(MODEL, W0=W0, lr=LR, steps=s))(5)
    with pytest.raises(ValueError, match=r"`lr` per-step rates must have shape \(steps,\) = \(5,\); found \(2,\)"):
        jax.jit(lambda lr: nqf.closed_sgd(MODEL, W0=W0, lr=lr, steps=5))(jnp.ones(2))


def test_vmap_closed_sgd_over_a_parameter_batch():
    """vmap over lr, momentum (including 0: the momentum program then gives plain SGD's
    numbers), weight decay, W0 and the batch-sampling seed; each member against its own call."""
    lrs = np.array([0.03, 0.05, 0.07])
    betas = np.array([0.0, 0.3, 0.6])
    gammas = np.array([0.0, 0.01, 0.1])
    W0s = W0[None] + 0.1 * np.random.default_rng(1).standard_normal((3, P, D))
    seeds = np.array([3, 4, 5])

    def run(lr, beta, gamma, W, seed):
        return nqf.closed_sgd(
            MODEL, W0=W, lr=lr, momentum=beta, weight_decay=gamma, key=seed, batch_size=2, steps=STEPS
        )

    out = jax.vmap(run)(lrs, betas, gammas, W0s, seeds)
    assert out.M.shape == (3, STEPS + 1, P, P) and out.lr.shape == (3,)
    for i in range(3):
        ref = nqf.closed_sgd(
            MODEL,
            W0=W0s[i],
            lr=lrs[i],
            momentum=betas[i],
            weight_decay=gammas[i],
            key=int(seeds[i]),
            batch_size=2,
            steps=STEPS,
        )
        assert_same(jax.tree.map(lambda x, i=i: x[i], out), ref)


def test_vmap_closed_sgd_over_order_parameters_and_labels():
    """vmap over (M0, mu0) (the eigh-based initial factor, traced) and the labels y."""
    rng = np.random.default_rng(3)
    Ws = W0[None] + 0.1 * rng.standard_normal((2, P, D))
    M0s, mu0s = np.einsum("bid,bjd->bij", Ws, Ws), Ws.sum(axis=2)
    ys = Y[None] + 0.5 * rng.standard_normal((2, MS))

    def run(M0, mu0, y):
        return nqf.closed_sgd(model_of(y), M0=M0, mu0=mu0, d=D, lr=LR, **KW)

    out = jax.vmap(run)(M0s, mu0s, ys)
    for i in range(2):
        ref = nqf.closed_sgd(model_of(ys[i]), M0=M0s[i], mu0=mu0s[i], d=D, lr=LR, **KW)
        assert_same(jax.tree.map(lambda x, i=i: x[i], out), ref)
        # and the weight-space reference from the W0 that produced (M0, mu0)
        w = nqf.train_w(model_of(ys[i]), Ws[i], lr=LR, **KW)
        assert rel(out.M[i], w.M) <= TOL


def test_grad_closed_sgd_against_finite_differences():
    """d loss(T) / d (lr, W0, y) by reverse mode, against central differences of plain calls
    (along random directions for W0 and y)."""

    def loss_T(lr, W, y):
        return nqf.closed_sgd(model_of(y), W0=W, lr=lr, **KW).loss[-1]

    g_lr, g_W, g_y = jax.grad(loss_T, argnums=(0, 1, 2))(LR, W0, Y)
    plain = lambda lr, W, y: float(loss_T(lr, W, y))  # noqa: E731
    rng = np.random.default_rng(4)
    vW, vy = rng.standard_normal(W0.shape), rng.standard_normal(MS)
    assert_grad(float(g_lr), central(lambda lr: plain(lr, W0, Y), LR, 1.0, 1e-6))
    assert_grad(float(np.sum(g_W * vW)), central(lambda W: plain(LR, W, Y), W0, vW, 1e-6))
    assert_grad(float(np.sum(g_y * vy)), central(lambda y: plain(LR, W0, y), Y, vy, 1e-6))


def test_jacfwd_wrt_M0_full_rank_form_M():
    """Forward mode through (M0, mu0) on the literal E5-E7 form, d = 5 > p (C0 full rank):
    the whole loss curve's Jacobian along a symmetric direction against central differences."""
    d = 5
    rng = np.random.default_rng(5)
    W = 0.4 * rng.standard_normal((P, d))
    M0, mu0 = W @ W.T, W.sum(1)
    V = rng.standard_normal((P, P))
    V = V + V.T

    def curve(M):
        return nqf.closed_sgd(MODEL, M0=M, mu0=mu0, d=d, lr=LR, form="M", **KW).loss

    J = jax.jacfwd(curve)(M0)  # (n, p, p)
    fd = central(lambda M: np.asarray(curve(M)), M0, V, 1e-6)
    assert rel(np.einsum("nij,ij->n", J, V), fd) <= GRAD_TOL


def test_grad_through_a_rank_deficient_initial_factor():
    """d = 2 < p: C0 = M0 - mu0 mu0^T / d has rank 1. The gradient through (M0, mu0) (eigh
    factor, tangent (I - Pi/2) dC L^{+T}) along a realizable direction (dM0, dmu0) = (dW W^T +
    W dW^T, dW 1) equals the central difference of plain calls from W +- h dW."""
    d = 2
    rng = np.random.default_rng(6)
    W = 0.5 * rng.standard_normal((P, d))
    dW = rng.standard_normal((P, d))

    def via_M(M0, mu0):
        return nqf.closed_sgd(MODEL, M0=M0, mu0=mu0, d=d, lr=LR, **KW).loss[-1]

    gM, gmu = jax.grad(via_M, argnums=(0, 1))(W @ W.T, W.sum(1))
    along = float(np.sum(gM * (dW @ W.T + W @ dW.T)) + np.sum(gmu * dW.sum(1)))
    fd = central(lambda X: float(nqf.closed_sgd(MODEL, W0=X, lr=LR, **KW).loss[-1]), W, dW, 1e-6)
    assert_grad(along, fd)


@pytest.mark.parametrize("d", [2, 4, 8], ids=["pad", "qr", "eigh"])
def test_initial_factor_tangent_is_exact(d):
    """jvp of L0 L0^T (L0 from traced W0, or from traced M0 with d - 1 < p) equals the exact
    dC0 = dR R^T + R dR^T, R the centered weights: each factorization's tangent rule."""
    rng = np.random.default_rng(d)
    W, dW = rng.standard_normal((P, d)), rng.standard_normal((P, d))
    center = lambda X: X - X.mean(axis=1, keepdims=True)  # noqa: E731
    R, dR = center(W), center(dW)
    exact = dR @ R.T + R @ dR.T
    LW, dLW = jax.jvp(maps._centered_factor_from_W, (W,), (dW,))
    assert rel(gram(LW), R @ R.T) <= TOL
    assert rel(dLW @ LW.T + LW @ dLW.T, exact) <= TOL
    mu, dmu = W.sum(1), dW.sum(1)
    M0, dM0 = W @ W.T, dW @ W.T + W @ dW.T
    LM, dLM = jax.jvp(lambda M, m: maps._centered_factor_from_M(M, m, d), (M0, mu), (dM0, dmu))
    assert rel(dLM @ LM.T + LM @ dLM.T, exact) <= 1e-10


# -- closed_map and train_w: jit(vmap(value_and_grad)) in one program ---------------------------


def _check_batch(values, grads, single, lrs, betas):
    for i, (lr, beta) in enumerate(zip(lrs, betas)):
        ref = single(lr, beta)
        assert rel(values[i], ref.loss[-1]) <= TOL
        assert_grad(float(grads[0][i]), central(lambda x: single(x, beta).loss[-1], lr, 1.0, 1e-6))  # noqa: B023
        assert_grad(float(grads[1][i]), central(lambda x: single(lr, x).loss[-1], beta, 1.0, 1e-6))  # noqa: B023


def test_closed_map_under_jit_vmap_and_grad():
    lrs, betas = np.array([0.02, 0.04]), np.array([0.5, 0.8])

    def single(lr, beta):
        return nqf.closed_map(MODEL, W0=W0, lr=lr, momentum=beta, optimizer="nesterov", steps=STEPS)

    f = jax.jit(jax.vmap(jax.value_and_grad(lambda lr, b: single(lr, b).loss[-1], argnums=(0, 1))))
    values, grads = f(lrs, betas)
    _check_batch(values, grads, single, lrs, betas)


def test_train_w_under_jit_vmap_and_grad():
    lrs, betas = np.array([0.02, 0.04]), np.array([0.1, 0.7])

    def single(lr, beta):
        return nqf.train_w(MODEL, W0, lr=lr, momentum=beta, optimizer="momentum", steps=STEPS, batch_size=2, key=7)

    f = jax.jit(jax.vmap(jax.value_and_grad(lambda lr, b: single(lr, b).loss[-1], argnums=(0, 1))))
    values, grads = f(lrs, betas)
    _check_batch(values, grads, single, lrs, betas)
    out = jax.jit(lambda W: single(0.03, 0.5))(W0)
    assert isinstance(out, nqf.WTrajectory) and out.optimizer == "momentum"
    assert_same(out, single(0.03, 0.5), fields=FIELDS + ("W",))


# -- results pickle ------------------------------------------------------------------------------


def _roundtrip(obj):
    back = pickle.loads(pickle.dumps(obj))
    assert type(back) is type(obj)
    for f in obj.__dataclass_fields__:
        a, b = getattr(obj, f), getattr(back, f)
        if isinstance(a, (np.ndarray, jax.Array)):
            np.testing.assert_array_equal(np.asarray(b), np.asarray(a))
        else:
            assert b == a, f
    return back


def test_results_pickle():
    _roundtrip(nqf.closed_sgd(MODEL, W0=W0, lr=LR, steps=STEPS))
    _roundtrip(nqf.train_w(MODEL, W0, lr=LR, **KW))
    _roundtrip(nqf.glv_gd(np.abs(A[:, 0, :]), np.ones(P), y=Y, lr=LR, steps=STEPS))
    _roundtrip(_jit_closed(LR, W0))  # JAX arrays pickle too
