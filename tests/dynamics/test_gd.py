"""nqf.dynamics._gd.gradient_descent against an independent numpy loop with jax.grad of the loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.datasets import fig3_data, orthogonal_features_data
from nqf.dynamics._gd import gradient_descent
from nqf.theory._oracles import theorem6


def _loss(A, y):
    """L(W) = (1/m) sum_mu (Tr[W W^T A_mu] - y_mu)^2 from the dense matrices (independent of
    the data classes' traces_factor/apply)."""
    A = jnp.asarray(A)
    y = jnp.asarray(y)

    def L(W):
        M = W @ W.T
        return jnp.mean((jnp.einsum("mij,ji->m", A, M) - y) ** 2)

    return L


def _reference(data, W0, lr, steps):
    grad = jax.jit(jax.grad(_loss(np.asarray(data.dense()), np.asarray(data.y))))
    W = np.asarray(W0, dtype=float)
    out = [W]
    for _ in range(steps):
        W = W - lr * np.asarray(grad(jnp.asarray(W)))
        out.append(W)
    return np.asarray(out)


def _datasets(rng):
    p, m, d = 4, 6, 3
    A = rng.standard_normal((m, p, p))
    A = A + np.swapaxes(A, 1, 2)
    dense = nqf.DenseData(A, rng.standard_normal(m))
    comm = orthogonal_features_data([1.0, 0.5, -0.3, 0.2], [1.0, 2.0, 0.5, 1.5], m=6, seed=3, rotate_basis=True)
    U = rng.standard_normal((m, p, 2))
    low = nqf.LowRankData(U, rng.standard_normal((m, 2)), rng.standard_normal(m))
    return {"dense": dense, "commuting": comm, "lowrank": low}, p, d


@pytest.mark.parametrize("kind", ["dense", "commuting", "lowrank"])
def test_gd_matches_numpy_loop_with_jax_grad(kind, rng):
    datas, p, d = _datasets(rng)
    data = datas[kind]
    W0 = 0.3 * rng.standard_normal((p, d))
    lr, steps = 0.02, 30
    saved, W = gradient_descent(data, W0, lr=lr, steps=steps, save_every=7)
    np.testing.assert_array_equal(saved, [0, 7, 14, 21, 28, 30])  # last step kept (remainder)
    ref = _reference(data, W0, lr, steps)
    assert W.shape == (6, p, d)
    np.testing.assert_allclose(W, ref[saved], rtol=1e-11, atol=1e-13)


def test_gd_save_every_default_and_exact_multiple(rng):
    datas, p, d = _datasets(rng)
    W0 = 0.3 * rng.standard_normal((p, d))
    saved, W = gradient_descent(datas["dense"], W0, lr=0.01, steps=5)
    np.testing.assert_array_equal(saved, np.arange(6))
    saved2, W2 = gradient_descent(datas["dense"], W0, lr=0.01, steps=6, save_every=3)
    np.testing.assert_array_equal(saved2, [0, 3, 6])
    np.testing.assert_allclose(W2[1], W[3], rtol=1e-13)
    np.testing.assert_array_equal(W[0], W0)


def test_gd_converges_to_flow_at_first_order():
    """GD at time t = lr * steps approaches the gradient flow (here its exact solution,
    Theorem 6), with error ~ lr (first order)."""
    data = fig3_data()
    W0 = np.sqrt(1e-2) * np.eye(5)
    T = 8.0
    z_flow = theorem6(data, np.array([T]), W0=W0).z[0]
    errs = []
    for lr in (0.02, 0.01):
        _, W = gradient_descent(data, W0, lr=lr, steps=int(round(T / lr)), save_every=int(round(T / lr)))
        z = np.sum(W[-1] ** 2, axis=1)
        errs.append(np.max(np.abs(z / z_flow - 1)))
    assert errs[1] < 0.6 * errs[0]
    assert 1.7 < errs[0] / errs[1] < 2.3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"lr": 0.0}, "lr"),
        ({"lr": -0.1}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"lr": float("inf")}, "lr"),
        ({"steps": 0}, "steps"),
        ({"steps": 2.5}, "steps"),
        ({"steps": True}, "steps"),
        ({"save_every": 0}, "save_every"),
    ],
)
def test_gd_bad_arguments(kwargs, match):
    data = fig3_data()
    args = {"lr": 0.01, "steps": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        gradient_descent(data, np.eye(5), **args)


def test_gd_bad_W0_shape():
    data = fig3_data()
    with pytest.raises(ValueError, match=r"\(5, d\)"):
        gradient_descent(data, np.eye(4), lr=0.01, steps=3)
    with pytest.raises(ValueError, match="W0"):
        gradient_descent(data, np.ones(5), lr=0.01, steps=3)
    with pytest.raises(ValueError, match="finite"):
        gradient_descent(data, np.full((5, 2), np.nan), lr=0.01, steps=3)


def test_gd_bad_data():
    with pytest.raises(TypeError, match="data"):
        gradient_descent(np.eye(5), np.eye(5), lr=0.01, steps=3)


def test_gd_divergence_is_an_error():
    data = fig3_data()
    with pytest.raises(FloatingPointError, match="diverged"):
        gradient_descent(data, np.eye(5), lr=50.0, steps=200)
