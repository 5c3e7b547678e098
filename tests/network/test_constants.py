"""Fixed per-neuron constants (issue 35, item 5): `nqf.Network(..., constants=)` lifts a layer
f = sum_i c_i phi(w_i, x) with frozen c_i (a readout sign a_i = +-1) to the NQF of
W~ (K p, d), one row block per distinct value, A~ = blockdiag(A_{v_1}, ..., A_{v_K})
(`nqf.data._constants`). The lift is exact: predict and record of an exactly quadratic layer agree
to rounding, and every bad `constants` is an error that names it."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf

RNG = np.random.default_rng(35)
M_IN, N_IN, D = 12, 3, 6
X = RNG.standard_normal((M_IN, N_IN))
TEACHER = RNG.standard_normal((2, N_IN))
Y = 0.2 * ((X @ TEACHER[0]) ** 2 - (X @ TEACHER[1]) ** 2)  # needs both signs
SIGNS = np.array([1.0, -1.0, 1.0, -1.0, 1.0, 1.0])


class Signed(eqx.Module):
    """f(x) = sum_i a_i (w_i . x)^2 with the readout signs a (d,) frozen."""

    w: jax.Array
    a: jax.Array

    def __call__(self, x):
        return jnp.sum(self.a * (self.w @ x) ** 2)


def _signed(scale=1.0):
    return Signed(jnp.asarray(scale * RNG.standard_normal((D, N_IN))), jnp.asarray(SIGNS))


def _blockdiag_xx(values, weights):
    """The hand-built lifted A~(x) (m, K n, K n): block k = weights[k] x x^T."""
    K = len(values)
    A = np.zeros((M_IN, K * N_IN, K * N_IN))
    for k in range(K):
        A[:, k * N_IN : (k + 1) * N_IN, k * N_IN : (k + 1) * N_IN] = weights[k] * np.einsum("mi,mj->mij", X, X)
    return A


def test_signed_quadratic_layer_extracts_to_the_lifted_blockdiag():
    """A~ = blockdiag(-x x^T, x x^T) (values in ascending order: -1 then +1), W~ the lift of the
    rows w_i, and the lifted f~ at W~ is the module itself."""
    mod = _signed()
    net = nqf.Network(mod, neurons={"w": 0}, constants={"a": 0})
    assert (net.p, net.d, net.groups, net.constants) == (2 * N_IN, D, (N_IN, N_IN), ("a",))
    W = np.asarray(mod.w).T  # (n, d): neuron i = row i of w
    lifted = np.concatenate([W * (SIGNS == -1), W * (SIGNS == 1)])
    np.testing.assert_array_equal(net.W, lifted)
    np.testing.assert_array_equal(net.lift(W), lifted)
    np.testing.assert_allclose([net(net.W, xx) for xx in X], [mod(jnp.asarray(xx)) for xx in X], rtol=1e-14, atol=1e-15)
    data = nqf.extract(net, X, y=Y)
    assert isinstance(data, nqf.DenseData)
    np.testing.assert_allclose(np.asarray(data.A), _blockdiag_xx([-1.0, 1.0], [-1.0, 1.0]), rtol=0, atol=1e-13)
    np.testing.assert_array_equal(np.asarray(net.with_W(net.W).a), SIGNS)  # folded back: the module's own width


def test_signed_quadratic_layer_predict_equals_record():
    """An exact NQF: the SGD map (with momentum) of the lifted NQF and the module trained by
    `record` (the signs frozen) agree in the loss and in every block of M to rounding, and the
    off-diagonal blocks of the recorded M stay exactly zero."""
    net = nqf.Network(_signed(), neurons={"w": 0}, constants={"a": 0})
    sgd = nqf.SGD(0.02, steps=300, momentum=0.5)
    pred = nqf.predict(net, X, Y, sgd, init_scale=0.01, save_every=3)
    run = pred.record(save_every=3)
    assert pred.loss[-1] < 1e-2 * pred.loss[0]  # it learns (both signs' blocks grow)
    np.testing.assert_allclose(run.loss, pred.loss, rtol=1e-10, atol=1e-10 * pred.loss[0])
    M = np.asarray(pred.trajectory.M)
    assert np.abs(run.M - M).max() <= 1e-10 * np.abs(M).max()
    assert np.all(run.M[:, :N_IN, N_IN:] == 0.0)
    for block in (slice(0, N_IN), slice(N_IN, 2 * N_IN)):
        assert np.abs(M[-1, block, block]).max() > 10 * np.abs(M[0, block, block]).max()


def test_mlp_with_a_frozen_sign_readout():
    """What a user of eqx.nn.MLP writes: the readout frozen as per-neuron constants (with
    neurons='auto' the readout is left out of the neurons); record(train='all') keeps it."""
    mlp = eqx.nn.MLP(
        N_IN, 1, D, depth=1, activation=jnp.square, use_bias=False, use_final_bias=False, key=jax.random.key(0)
    )
    mlp = eqx.tree_at(lambda m: m.layers[1].weight, mlp, jnp.asarray(SIGNS)[None, :])
    net = nqf.Network(mlp, constants={"layers[1].weight": 1})
    named = nqf.Network(mlp, neurons={"layers[0].weight": 0}, constants={"layers[1].weight": 1})
    assert net.group_names == named.group_names == ("layers[0].weight [c=-1]", "layers[0].weight [c=1]")
    np.testing.assert_allclose(np.asarray(nqf.extract(net, X, y=Y).A), _blockdiag_xx([-1, 1], [-1, 1]), atol=1e-13)
    pred = nqf.predict(net, X, Y, nqf.SGD(0.02, steps=100), init_scale=0.05, estimate_departure=False)
    run = pred.record(train="all", save_every=pred.trajectory.steps[1])
    np.testing.assert_allclose(run.loss, pred.loss, rtol=1e-10, atol=1e-10 * pred.loss[0])
    np.testing.assert_array_equal(np.asarray(net.with_W(run.W_final).layers[1].weight)[0], SIGNS)


def test_plain_function_with_constants_need_not_be_linear_in_them():
    """f(W, x, c) = sum_i tanh(c_i) c_i (w_i . x)^2: each block is the module at its value, so
    A~ = blockdiag(tanh(v) v x x^T) exactly, with no linearity in c assumed."""
    values = np.array([0.5, 2.0, 0.5, 0.5, 2.0, 2.0])
    net = nqf.Network(
        lambda W, x, c: jnp.sum(jnp.tanh(c) * c * (W.T @ x) ** 2),
        W0=0.1 * RNG.standard_normal((N_IN, D)),
        constants=values,
    )
    assert net.constants == ("c",) and net.p == 2 * N_IN
    expected = _blockdiag_xx([0.5, 2.0], [np.tanh(0.5) * 0.5, np.tanh(2.0) * 2.0])
    np.testing.assert_allclose(np.asarray(nqf.extract(net, X, y=Y).A), expected, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(
    ("constants", "match"),
    [
        ({"b": 0}, "`constants`: no parameter array at 'b'"),
        ({"a": 1}, "`constants`: the axis of a"),
        ({"w": 0}, "`constants` lists w, which `neurons` also lists"),
        ("a", "`constants` must be a mapping"),
    ],
)
def test_bad_constants_name_the_argument(constants, match):
    with pytest.raises(nqf.data.NeuronError, match=match):
        nqf.Network(_signed(), neurons={"w": 0}, constants=constants)


def test_constants_not_one_per_neuron():
    class Readout(eqx.Module):
        w: jax.Array
        a: jax.Array  # (2,): not one value per neuron

        def __call__(self, x):
            return jnp.sum(self.a[0] * (self.w @ x) ** 2)

    mod = Readout(jnp.ones((D, N_IN)), jnp.ones(2))
    with pytest.raises(nqf.data.NeuronError, match="`constants`: a .* has 2 entries .* d = 6 neurons"):
        nqf.Network(mod, neurons={"w": 0}, constants={"a": 0})
    with pytest.raises(nqf.data.NeuronError, match="`constants` of a plain function"):
        nqf.Network(lambda W, x, c: jnp.sum(W), W0=np.ones((2, 3)), constants="signs")


def test_constants_that_the_lift_cannot_express_are_refused():
    """A linear term g != 0 (tanh behind a frozen readout) would move the lift's zero blocks, and
    a zero neuron that contributes (cos) breaks f~(lift W) = f(W): both errors name `constants`;
    a W0 that is not lifted names `W0`."""
    tanh = nqf.Network(lambda W, x, c: jnp.sum(c * jnp.tanh(W.T @ x)), W0=0.1 * np.ones((N_IN, D)), constants=SIGNS)
    with pytest.raises(nqf.ExtractionError, match="`constants` .*ZGZ fails"):
        nqf.extract(tanh, X, y=Y)
    cos = nqf.Network(lambda W, x, c: jnp.sum(c * jnp.cos(W.T @ x)), W0=0.1 * np.ones((N_IN, D)), constants=SIGNS)
    with pytest.raises(nqf.data.NeuronError, match="`constants`: the lifted module .* must contribute nothing"):
        nqf.predict(cos, X, Y, nqf.SGD(0.01, steps=10))
    net = nqf.Network(_signed(), neurons={"w": 0}, constants={"a": 0})
    with pytest.raises(ValueError, match="`W0` .* is not a lifted W: with `constants`"):
        nqf.predict(net, X, Y, nqf.SGD(0.01, steps=10), W0=np.ones((net.p, net.d)))
