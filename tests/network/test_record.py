"""nqf.record: the module trained by an optax optimizer, checked against a hand-written optax
loop on the module itself; batches, frozen arrays, flax.nnx, and bad input."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nqf

KEY = jax.random.PRNGKey(0)
RNG = np.random.default_rng(0)
X = RNG.standard_normal((40, 4))
Y = np.sin(X[:, 0])
MLP = eqx.nn.MLP(4, 1, 8, depth=1, activation=jnp.tanh, use_bias=True, use_final_bias=True, key=KEY)
NET = nqf.Network(MLP)
W0 = 0.05 * RNG.standard_normal((NET.p, NET.d))


def _by_hand(optimizer, steps, batches=None, train_bias=False):
    """optax on the equinox module itself: the user's own loop."""
    mlp = NET.with_W(W0)
    mask = jax.tree_util.tree_map(lambda _: False, mlp)
    mask = eqx.tree_at(lambda m: (m.layers[0].weight, m.layers[0].bias, m.layers[1].weight), mask, (True, True, True))
    if train_bias:
        mask = eqx.tree_at(lambda m: m.layers[1].bias, mask, True)
    params, static = eqx.partition(mlp, mask)
    state = optimizer.init(params)

    @jax.jit
    def step(params, state, idx):
        def loss(params):
            m = eqx.combine(params, static)
            return jnp.mean((jax.vmap(m)(jnp.asarray(X)[idx])[:, 0] - jnp.asarray(Y)[idx]) ** 2)

        g = jax.grad(loss)(params)
        u, state = optimizer.update(g, state, params)
        return optax.apply_updates(params, u), state

    for n in range(steps):
        idx = np.arange(len(X)) if batches is None else batches[n]
        params, state = step(params, state, idx)
    return eqx.combine(params, static)


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_record_equals_an_optax_loop_on_the_module(opt):
    optimizer = optax.sgd(0.1) if opt == "sgd" else optax.adam(0.01)
    run = nqf.record(NET, X, Y, optimizer, lr=0.1, steps=57, save_every=10, W0=W0)
    want = _by_hand(optimizer, 57)
    np.testing.assert_array_equal(run.steps, [0, 10, 20, 30, 40, 50, 57])
    np.testing.assert_allclose(run.t, 0.1 * run.steps)
    W = nqf.Network(want).W
    np.testing.assert_allclose(run.W_final, W, rtol=0, atol=1e-13)
    np.testing.assert_allclose(run.M[-1], W @ W.T, rtol=0, atol=1e-13)
    np.testing.assert_allclose(run.mu[-1], W.sum(axis=1), rtol=0, atol=1e-13)
    np.testing.assert_allclose(run.M[0], W0 @ W0.T, rtol=0, atol=1e-17)
    loss = np.mean((jax.vmap(want)(X)[:, 0] - Y) ** 2)
    np.testing.assert_allclose(run.loss[-1], loss, rtol=1e-12)


def test_minibatches_are_nqf_batch_indices_and_train_all_moves_the_frozen_bias():
    run = nqf.record(NET, X, Y, optax.sgd(0.1), lr=0.1, steps=20, batch_size=8, key=3, W0=W0, train="all")
    batches = np.asarray(nqf.batch_indices(3, 40, 8, 20))
    want = _by_hand(optax.sgd(0.1), 20, batches, train_bias=True)
    np.testing.assert_allclose(run.W_final, nqf.Network(want).W, rtol=0, atol=1e-13)
    frozen = nqf.record(NET, X, Y, optax.sgd(0.1), lr=0.1, steps=20, batch_size=8, key=3, W0=W0)
    assert np.abs(frozen.W_final - run.W_final).max() > 1e-6  # the output bias was trained in `run` only
    assert run.trained == "all" and frozen.trained == "neurons"


def test_recording_is_a_trajectory_for_ignition_times_and_saves(tmp_path):
    run = nqf.record(NET, X, Y, optax.sgd(0.2), lr=0.2, steps=300, save_every=5, W0=W0)
    t = nqf.measure_ignition_times(run, quantity="eigenvalues")
    assert t.shape == (NET.p,)
    back = nqf.load(run.save(tmp_path / "run.npz"))
    np.testing.assert_array_equal(back.M, run.M)
    np.testing.assert_array_equal(back.eigenvalues, run.eigenvalues)


@pytest.mark.parametrize("batched", [False, True], ids=["full-batch", "minibatch"])
def test_per_step_values_are_the_saved_values_of_every_step(batched):
    """step_loss / step_eigenvalues (steps + 1 entries) recorded while saving every 10th step equal
    a run that saves every step (its loss over all m inputs, eigenvalues of its W W^T): from the
    optimizer's own `value` for a full batch, one more forward pass with minibatches (asked for:
    the default records none there)."""
    kw = dict(lr=0.1, steps=57, W0=W0, **(dict(batch_size=8, key=2) if batched else {}))
    some = nqf.record(NET, X, Y, optax.sgd(0.1), save_every=10, step_values="all", **kw)
    every = nqf.record(NET, X, Y, optax.sgd(0.1), save_every=1, **kw)
    np.testing.assert_array_equal(some.step_times, every.t)
    np.testing.assert_allclose(some.step_loss, every.loss, rtol=1e-13)
    np.testing.assert_allclose(some.step_eigenvalues, every.eigenvalues, rtol=0, atol=1e-14)  # jax vs numpy eigvalsh
    assert (every.step_loss is None) == batched  # the default: "all" for a full batch, "none" with minibatches


def test_flax_nnx_module():
    nnx = pytest.importorskip("flax.nnx")

    class Two(nnx.Module):
        def __init__(self, rngs):
            self.a = nnx.Linear(4, 6, use_bias=False, rngs=rngs)
            self.b = nnx.Linear(6, 1, use_bias=False, rngs=rngs)

        def __call__(self, x):
            return self.b(jnp.tanh(self.a(x)))

    with pytest.warns(nqf.data.PrecisionWarning):
        net = nqf.Network(Two(nnx.Rngs(1)))
    run = nqf.record(net, X, Y, optax.sgd(0.05), lr=0.05, steps=30, save_every=30)
    W = jnp.asarray(net.W)
    f = lambda W: jnp.mean((jax.vmap(lambda x: W[4] @ jnp.tanh(W[:4].T @ x))(X) - Y) ** 2)  # noqa: E731
    for _ in range(30):
        W = W - 0.05 * jax.grad(f)(W)
    np.testing.assert_allclose(run.W_final, W, rtol=0, atol=1e-13)


def test_optax_extra_arguments_and_multisteps():
    """optax's line searches need the loss (value, grad, value_fn): L-BFGS decreases the loss;
    MultiSteps(k) applies SGD every k steps."""
    lbfgs = nqf.record(NET, X, Y, optax.lbfgs(), lr=1.0, steps=10, W0=W0)
    assert lbfgs.loss[-1] < 0.5 * lbfgs.loss[0]
    multi = nqf.record(NET, X, Y, optax.MultiSteps(optax.sgd(0.1), 2), lr=0.1, steps=20, W0=W0, save_every=20)
    assert np.isfinite(multi.loss).all() and multi.loss[-1] < multi.loss[0]


def test_bad_input_is_named():
    with pytest.raises(TypeError, match=r"optimizer.*optax.GradientTransformation.*optax.sgd\(lr\)"):
        nqf.record(NET, X, Y, "sgd", lr=0.1, steps=3)
    with pytest.raises(ValueError, match="lr"):
        nqf.record(NET, X, Y, optax.sgd(0.1), lr=0.0, steps=3)
    with pytest.raises(ValueError, match="steps"):
        nqf.record(NET, X, Y, optax.sgd(0.1), lr=0.1, steps=0)
    with pytest.raises(ValueError, match=r"`y` must have shape \(40,\) or \(40, 1\)"):
        nqf.record(NET, X, Y[:5], optax.sgd(0.1), lr=0.1, steps=3)
    with pytest.raises(ValueError, match=r"`W0` must be a finite array of shape \(p, d\) = \(6, 8\)"):
        nqf.record(NET, X, Y, optax.sgd(0.1), lr=0.1, steps=3, W0=np.zeros((6, 3)))
    with pytest.raises(ValueError, match="train"):
        nqf.record(NET, X, Y, optax.sgd(0.1), lr=0.1, steps=3, train="bias")
    with pytest.raises(ValueError, match="`step_values` must be one of"):
        nqf.record(NET, X, Y, optax.sgd(0.1), lr=0.1, steps=3, step_values=True)
    with pytest.raises(FloatingPointError, match="not finite at step"):
        nqf.record(NET, X, 1e3 * Y, optax.sgd(50.0), lr=50.0, steps=200, save_every=10, W0=W0)
