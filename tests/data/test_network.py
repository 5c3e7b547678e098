"""nqf.Network: the layout module <-> W (p, d) for equinox, flax.nnx and plain functions, checked
against the modules themselves and hand-built modules of another width."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nqf.data import Network, NeuronError, PrecisionWarning

KEY = jax.random.PRNGKey(0)
RNG = np.random.default_rng(0)
X = RNG.standard_normal((5, 4))


class Attention(eqx.Module):
    mha: eqx.nn.MultiheadAttention

    def __call__(self, X):
        return self.mha(X, X, X)[-1].sum()


class ConvNet(eqx.Module):
    conv: eqx.nn.Conv2d
    out: eqx.nn.Linear

    def __call__(self, img):
        return self.out(jnp.tanh(self.conv(img[None])).sum(axis=(1, 2)))


def _mlp(bias=False, out=1):
    return eqx.nn.MLP(4, out, 3, depth=1, activation=jnp.tanh, use_bias=bias, use_final_bias=bias, key=KEY)


def test_eqx_mlp_layout_round_trip_and_outputs():
    mlp = _mlp(bias=True)
    net = Network(mlp)
    assert (net.p, net.d) == (6, 3)
    assert net.group_names == ("layers[0].weight", "layers[0].bias", "layers[1].weight")
    assert net.groups == (4, 1, 1) and net.frozen == ("layers[1].bias",)
    U, b, v = mlp.layers[0].weight, mlp.layers[0].bias, mlp.layers[1].weight
    np.testing.assert_array_equal(net.W, np.vstack([U.T, b[None], v]))  # neuron i = [u_i; b_i; v_i]
    for x in X:
        np.testing.assert_allclose(net(net.W, x), mlp(x), rtol=1e-15)
    # another width: the sum over the first two neurons plus the frozen output bias
    W2 = net.W[:, :2]
    want = sum(W2[5, i] * np.tanh(W2[:4, i] @ X[0] + W2[4, i]) for i in range(2)) + mlp.layers[1].bias[0]
    np.testing.assert_allclose(net(W2, X[0])[0], want, rtol=1e-14)
    assert net.with_W(W2).layers[0].weight.shape == (2, 4)
    np.testing.assert_array_equal(Network(net.with_W(W2)).W, W2)


def test_neurons_are_interchangeable():
    net = Network(_mlp(bias=True))
    perm = [2, 0, 1]
    for x in X:
        np.testing.assert_allclose(net(net.W[:, perm], x), net(net.W, x), rtol=1e-14)


def test_eqx_attention_packed_heads_against_a_two_head_module():
    att = Attention(eqx.nn.MultiheadAttention(4, 8, key=KEY))
    net = Network(att)
    mha = att.mha
    assert (net.d, net.p) == (4, 4 * 2 * 8) and net.groups == (16, 16, 16, 16)
    Xs = RNG.standard_normal((6, 8))
    np.testing.assert_allclose(net(net.W, Xs), att(Xs), rtol=1e-14)
    # two heads: an independently built 2-head module holding heads 0 and 1
    small = eqx.nn.MultiheadAttention(2, 8, qk_size=mha.qk_size, vo_size=mha.vo_size, key=KEY)
    small = eqx.tree_at(
        lambda a: (a.query_proj.weight, a.key_proj.weight, a.value_proj.weight, a.output_proj.weight),
        small,
        (mha.query_proj.weight[:4], mha.key_proj.weight[:4], mha.value_proj.weight[:4], mha.output_proj.weight[:, :4]),
    )
    np.testing.assert_allclose(net(net.W[:, :2], Xs), Attention(small)(Xs), rtol=1e-13)
    assert net.with_W(net.W[:, :2]).mha.num_heads == 2


def test_conv_and_readout():
    cnn = ConvNet(eqx.nn.Conv2d(1, 5, 3, key=KEY), eqx.nn.Linear(5, 1, use_bias=False, key=KEY))
    net = Network(cnn)
    assert net.groups == (9, 1, 1) and net.d == 5 and not net.frozen
    img = RNG.standard_normal((6, 6))
    np.testing.assert_allclose(net(net.W, img), cnn(img), rtol=1e-14)


def test_flax_nnx_mlp_cast_once_and_layout():
    nnx = pytest.importorskip("flax.nnx")

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(4, 3, rngs=rngs)
            self.l2 = nnx.Linear(3, 2, use_bias=False, rngs=rngs)

        def __call__(self, x):
            return self.l2(jnp.tanh(self.l1(x)))

    module = MLP(nnx.Rngs(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = Network(module)
    assert [w.category for w in caught] == [PrecisionWarning]
    assert net.W.dtype == np.float64 and (net.p, net.d) == (4 + 1 + 2, 3)
    assert net.group_names == ("l1.kernel", "l1.bias", "l2.kernel")
    k1, b1, k2 = (
        np.asarray(a, dtype=float) for a in (module.l1.kernel[...], module.l1.bias[...], module.l2.kernel[...])
    )
    np.testing.assert_array_equal(net.W, np.vstack([k1, b1[None], k2.T]))
    for x in X:
        want = k2.T @ np.tanh(k1.T @ x + b1)
        np.testing.assert_allclose(net(net.W, x), want, rtol=1e-13)
    np.testing.assert_allclose(net(net.W[:, 1:], X[0]), k2[1:].T @ np.tanh(k1[:, 1:].T @ X[0] + b1[1:]), rtol=1e-13)
    assert module.l1.kernel[...].dtype == jnp.float32  # the user's module is unchanged


def test_explicit_neurons_strings_callables_and_function():
    mlp = _mlp()
    a = Network(mlp, neurons={"layers.0.weight": 0, "layers[1].weight": 1})
    b = Network(mlp, neurons=[(lambda m: m.layers[0].weight, 0), (lambda m: m.layers[1].weight, 1)])
    np.testing.assert_array_equal(a.W, b.W)
    f = lambda W, x: jnp.sum(W[-1] * jnp.tanh(W[:-1].T @ x))  # noqa: E731
    c = Network(f, W0=a.W)
    np.testing.assert_allclose(c(c.W, X[0]), a(a.W, X[0])[0], rtol=1e-15)


def test_errors_name_what_was_wrong():
    mlp = _mlp()
    with pytest.raises(NeuronError, match="no parameter array at 'layers.2.weight'.*layers\\[0\\].weight"):
        Network(mlp, neurons={"layers.2.weight": 0})
    with pytest.raises(NeuronError, match="axis of layers\\[0\\].weight"):
        Network(mlp, neurons={"layers.0.weight": 2})
    with pytest.raises(
        NeuronError, match="disagree on the number of neurons.*layers\\[0\\].weight: 3, layers\\[1\\].weight: 1"
    ):
        Network(mlp, neurons={"layers.0.weight": 0, "layers.1.weight": 0})
    with pytest.raises(NeuronError, match="does not divide"):
        Network(mlp, neurons={"layers.0.weight": 0}, width=2)
    with pytest.raises(NeuronError, match="depth 4.*covers depth 2 and 3"):  # depth 2, 3: `DeepNetwork`
        Network(eqx.nn.MLP(4, 1, 3, depth=4, key=KEY))
    with pytest.raises(NeuronError, match="recognises"):
        Network(eqx.nn.Linear(3, 3, key=KEY))
    with pytest.raises(TypeError, match="W0"):
        Network(lambda W, x: W.sum())
    with pytest.raises(ValueError, match=r"shape \(p, d'\) = \(5, d'\)"):
        Network(mlp).with_W(np.zeros((4, 2)))


def test_auto_orders_layers_by_shape_not_by_field_order():
    class Reversed(eqx.Module):
        readout: eqx.nn.Linear
        hidden: eqx.nn.Linear

        def __call__(self, x):
            return self.readout(jnp.tanh(self.hidden(x)))

    k1, k2 = jax.random.split(KEY)
    net = Network(Reversed(eqx.nn.Linear(3, 1, use_bias=False, key=k1), eqx.nn.Linear(4, 3, use_bias=False, key=k2)))
    assert net.group_names == ("hidden.weight", "readout.weight") and (net.p, net.d) == (5, 3)
    square = Network(Reversed(eqx.nn.Linear(4, 4, use_bias=False, key=k1), eqx.nn.Linear(4, 4, use_bias=False, key=k2)))
    with pytest.raises(NeuronError, match="paired the layers the wrong way round"):  # square: the field order guessed
        square.check_inputs(X)
    with pytest.raises(NeuronError, match="neither feeds the other"):
        Network(Reversed(eqx.nn.Linear(3, 1, key=k1), eqx.nn.Linear(4, 2, key=k2)))


def test_a_frozen_array_of_the_width_is_named():
    net = Network(_mlp(), neurons={"layers[0].weight": 0})  # the readout's columns are left out
    with pytest.raises(NeuronError, match=r"cannot run with 2 neurons.*layers\[1\].weight \(1, 3\)"):
        net.check_inputs(X)


def test_a_module_computing_in_float32_is_refused():
    class Low(eqx.Module):
        mlp: eqx.nn.MLP

        def __call__(self, x):
            return self.mlp(x).astype(jnp.float32)

    net = Network(Low(_mlp()), neurons={"mlp.layers.0.weight": 0, "mlp.layers.1.weight": 1})
    with pytest.raises(ValueError, match="returns float32"):
        net.check_inputs(X)
