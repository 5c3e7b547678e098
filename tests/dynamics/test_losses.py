"""Losses beyond MSE (cross-entropy over k outputs, logistic, a callable) in the exact maps, the
sweep, the diffrax map term and the flow, each against an independent computation: W-space
gradient descent written here with jax.grad on f = Tr[W W^T A] (no nqf loss code), a scipy
solve of the W-space flow, and the formulas of the losses themselves."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import nqf
from nqf.dynamics._losses import as_loss, mean_loss
from nqf.dynamics._maps import gradient_terms

RNG = np.random.default_rng(3)
M_IN, K, P, D = 10, 3, 5, 4
A = RNG.standard_normal((M_IN * K, P, P))
A = (A + A.transpose(0, 2, 1)) / 2
CLS = RNG.integers(0, K, M_IN)
CE = as_loss("cross_entropy", K)
ONEHOT = np.eye(K)[CLS]
DATA_CE = nqf.DenseData(A, ONEHOT.reshape(-1))
A1 = A[:M_IN]
BIN = RNG.integers(0, 2, M_IN)  # logistic labels in {0, 1}
LOGI = as_loss("logistic")
DATA_LOGI = nqf.DenseData(A1, 2.0 * BIN - 1.0)
W0 = 0.3 * RNG.standard_normal((P, D))
LR, STEPS = 0.2, 60


def _ce_by_hand(W, rows=None):
    """Mean softmax cross-entropy over the inputs `rows` of f_{mu,o} = Tr[W W^T A_{mu k + o}]."""
    F = jnp.einsum("nij,ij->n", jnp.asarray(A), W @ W.T).reshape(M_IN, K)
    ell = jax.nn.logsumexp(F, axis=1) - F[jnp.arange(M_IN), CLS]
    return jnp.mean(ell if rows is None else ell[rows])


def _logistic_by_hand(W):
    f = jnp.einsum("nij,ij->n", jnp.asarray(A1), W @ W.T)
    s = 2.0 * BIN - 1.0
    return jnp.mean(jnp.log1p(jnp.exp(-s * f)))


def _gd(objective, batches=None):
    W, Ms = jnp.asarray(W0), [W0 @ W0.T]
    grad = jax.jit(jax.grad(objective))
    for n in range(STEPS):
        W = W - LR * (grad(W) if batches is None else grad(W, batches[n]))
        Ms.append(np.asarray(W @ W.T))
    return np.array(Ms)


@pytest.mark.parametrize("form", ["factor", "M"])
def test_cross_entropy_map_is_w_space_gd(form):
    traj = nqf.closed_sgd(DATA_CE, W0=W0, lr=LR, steps=STEPS, loss=CE, form=form)
    Ms = _gd(_ce_by_hand)
    assert np.abs(traj.M - Ms).max() < 1e-12 * max(1.0, np.abs(Ms).max())
    np.testing.assert_allclose(traj.loss[0], float(_ce_by_hand(jnp.asarray(W0))), rtol=1e-12)
    F = traj.outputs[-1].reshape(M_IN, K)
    want = np.mean(np.log(np.exp(F).sum(1)) - F[np.arange(M_IN), CLS])
    np.testing.assert_allclose(traj.loss[-1], want, rtol=1e-12)
    np.testing.assert_allclose(float(mean_loss("cross_entropy", F, CLS)), want, rtol=1e-12)


def test_cross_entropy_minibatches_select_whole_inputs():
    """batch_indices index inputs: step n trains on the mean CE of its b inputs (all k rows)."""
    idx = np.asarray(nqf.batch_indices(1, M_IN, 4, STEPS))
    traj = nqf.closed_sgd(DATA_CE, W0=W0, lr=LR, steps=STEPS, loss=CE, batch_indices=idx)
    Ms = _gd(_ce_by_hand, jnp.asarray(idx))
    assert np.abs(traj.M - Ms).max() < 1e-12 * max(1.0, np.abs(Ms).max())
    drawn = nqf.closed_sgd(DATA_CE, W0=W0, lr=LR, steps=STEPS, loss=CE, batch_size=4, key=1)
    np.testing.assert_array_equal(drawn.M, traj.M)
    ws = nqf.train_w(DATA_CE, W0, lr=LR, steps=STEPS, loss=CE, batch_size=4, key=1)
    assert np.abs(ws.M - Ms).max() < 1e-12 * max(1.0, np.abs(Ms).max())
    sweep = nqf.closed_sgd_sweep(DATA_CE, W0=W0, lr=[LR, LR / 2], steps=STEPS, loss=CE, batch_indices=idx)
    np.testing.assert_allclose(sweep.M[0], traj.M, rtol=0, atol=1e-14 * np.abs(Ms).max())


def test_map_term_takes_the_grouped_loss():
    idx = np.asarray(nqf.batch_indices(2, M_IN, 3, STEPS))
    term = nqf.map_term(DATA_CE, W0=W0, lr=LR, loss=CE, batch_indices=idx)
    sol = diffrax.diffeqsolve(
        term, nqf.ExactMap(), t0=0.0, t1=LR * STEPS, dt0=LR, y0=term.y0,
        stepsize_controller=diffrax.ConstantStepSize(), max_steps=STEPS,
    )  # fmt: skip
    Ms = _gd(_ce_by_hand, jnp.asarray(idx))
    M_end = np.asarray(term.M(jax.tree.map(lambda x: x[-1], sol.ys)))
    np.testing.assert_allclose(M_end, Ms[-1], rtol=0, atol=1e-12 * np.abs(Ms).max())


def test_logistic_map_is_w_space_gd():
    traj = nqf.closed_sgd(DATA_LOGI, W0=W0, lr=LR, steps=STEPS, loss=LOGI)
    Ms = _gd(_logistic_by_hand)
    assert np.abs(traj.M - Ms).max() < 1e-12 * max(1.0, np.abs(Ms).max())
    f = traj.outputs[-1]
    want = np.mean(np.log1p(np.exp(-(2.0 * BIN - 1.0) * f)))
    np.testing.assert_allclose(traj.loss[-1], want, rtol=1e-12)
    for labels in (BIN, 2 * BIN - 1):  # {0, 1} and {-1, +1} are the same loss
        np.testing.assert_allclose(float(mean_loss("logistic", f, labels)), want, rtol=1e-12)


def test_cross_entropy_gradient_is_autodiff_of_the_mean_loss():
    """(v, H) of Eq. E4 with l' = (1/m)(softmax - onehot): grad_W = H W (plain model)."""
    W = jnp.asarray(W0)
    rows = M_IN * K
    v, H = gradient_terms(nqf.NQFModel(DATA_CE), jnp.full(rows, 1.0 / rows), CE, W @ W.T, W.sum(1), 0.0)
    np.testing.assert_allclose(np.asarray(H @ W), np.asarray(jax.grad(_ce_by_hand)(W)), rtol=0, atol=1e-14)
    np.testing.assert_array_equal(np.asarray(v), 0.0)


def test_a_callable_over_k_outputs_is_the_named_loss():
    fn = lambda f, y: jax.nn.logsumexp(f) - jnp.dot(y, f)  # noqa: E731
    own = nqf.closed_sgd(DATA_CE, W0=W0, lr=LR, steps=STEPS, loss=as_loss(fn, K))
    named = nqf.closed_sgd(DATA_CE, W0=W0, lr=LR, steps=STEPS, loss=CE)
    np.testing.assert_allclose(own.M, named.M, rtol=0, atol=1e-14 * np.abs(named.M).max())
    np.testing.assert_allclose(own.loss, named.loss, rtol=1e-13)


def test_cross_entropy_flow_against_scipy(tmp_path):
    """solve_flow(loss=...) in the M-mu form against the W-space flow W' = -grad L(W) (scipy)."""
    t1 = 3.0
    sol = nqf.solve_flow(DATA_CE, W0=W0, t1=t1, ts=np.linspace(0, t1, 7), loss=CE, rtol=1e-11, atol=1e-13)
    assert sol.form == "M-mu"
    grad = jax.jit(jax.grad(_ce_by_hand))
    ref = solve_ivp(
        lambda t, w: -np.asarray(grad(jnp.asarray(w.reshape(P, D)))).ravel(),
        (0, t1), W0.ravel(), t_eval=np.linspace(0, t1, 7), rtol=1e-12, atol=1e-14, method="DOP853",
    )  # fmt: skip
    Ws = ref.y.T.reshape(-1, P, D)
    Ms = Ws @ Ws.transpose(0, 2, 1)
    np.testing.assert_allclose(sol.M, Ms, rtol=0, atol=1e-8 * np.abs(Ms).max())
    np.testing.assert_allclose(sol.loss, [float(_ce_by_hand(jnp.asarray(W))) for W in Ws], rtol=1e-9)
    assert np.isfinite(nqf.drop_times(sol, levels=[sol.loss[0], sol.loss[-1]])).all()  # dense loss: same loss
    nqf.save(sol, tmp_path / "ce")
    np.testing.assert_array_equal(nqf.load(tmp_path / "ce.npz").loss, sol.loss)  # the loss is kept by name


def test_mse_is_unchanged_by_the_loss_keyword():
    a = nqf.solve_flow(DATA_CE, W0=W0, t1=1.0)
    b = nqf.solve_flow(DATA_CE, W0=W0, t1=1.0, loss="mse")
    np.testing.assert_array_equal(a.loss, b.loss)
    F, Yr = RNG.standard_normal((M_IN, K)), RNG.standard_normal((M_IN, K))
    np.testing.assert_allclose(float(mean_loss("mse", F, Yr)), np.mean((F - Yr) ** 2), rtol=1e-14)


def test_bad_labels_and_losses_are_named():
    with pytest.raises(ValueError, match="integer class labels"):
        CE.targets(CLS + 0.5, M_IN, K)
    with pytest.raises(ValueError, match=r"\[0, k\) = \[0, 3\)"):
        CE.targets(CLS + 1, M_IN, K)
    with pytest.raises(ValueError, match="one output per class"):
        as_loss("cross_entropy", 1)
    with pytest.raises(ValueError, match="number of classes"):
        as_loss("cross_entropy")
    with pytest.raises(ValueError, match=r"\{0, 1\} or \{-1, \+1\}"):
        LOGI.targets(np.array([0, 1, 2] * 3 + [0]), M_IN, 1)
    with pytest.raises(ValueError, match="one output"):
        as_loss("logistic", 3)
    with pytest.raises(TypeError, match="JAX-traceable"):
        as_loss(lambda f, y: float(f) - y)
    with pytest.raises(ValueError, match="unknown|must be one of"):
        as_loss("hinge")
    with pytest.raises(ValueError, match="form='M-mu'"):
        nqf.solve_flow(DATA_CE, W0=W0, t1=1.0, loss=CE, form="factor")
    with pytest.raises(ValueError, match="not a multiple of k"):
        nqf.closed_sgd(nqf.DenseData(A[:-1], ONEHOT.reshape(-1)[:-1]), W0=W0, lr=LR, steps=2, loss=CE)
