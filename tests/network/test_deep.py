"""Deep networks in `nqf.Network` / `nqf.predict`: the multi-layer NQF (Theorem 14) of a chain of
Linear layers with structure functions derived by autodiff (`nqf.network._deep`).

References: the hand-written structured layers of `nqf.multilayer` (`feedforward_layer`, the
Fig. 8 construction), the module's own forward pass (layer outputs at small W: Theorem 1's
order), and weight-space training of the module itself (`nqf.record(train="all")`, optax SGD on
every array).
"""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nqf
from nqf import multilayer as ml
from nqf.data import DeepNetwork, ExtractionError, NeuronError
from nqf.network import _deep

N_IN, WIDTH, M = 4, 5, 24
_rng = np.random.default_rng(0)
X = _rng.standard_normal((M, N_IN))
Y = 0.5 * X @ np.array([1.0, -0.7, 0.4, 0.2]) + 0.05 * np.tanh(X[:, 0] * X[:, 1])


def mlp(depth, bias=False, activation=jnp.tanh, key=0, out=1):
    return eqx.nn.MLP(
        N_IN,
        out,
        WIDTH,
        depth=depth,
        activation=activation,
        use_bias=bias,
        use_final_bias=bias,
        key=jax.random.key(key),
    )


@pytest.fixture(scope="module")
def nets():
    return {d: nqf.Network(mlp(d)) for d in (2, 3)}


def _pair(net, y, scale, steps, save_every=None, train="all", **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nqf.FrozenParameterWarning)  # a hidden pair's output bias: frozen
        sgd = nqf.SGD(0.05, steps=steps, batch_size=kw.pop("batch_size", None))
        pred = nqf.predict(net, X, y, sgd, init_scale=scale, save_every=save_every, **kw)
    return pred, pred.record(train=train, save_every=save_every)


class _Runs(dict):
    """(prediction, recording) per (activation, depth, init scale), made on first use (a test
    of the slow suite's share pays for its own pair): lr 0.05, SGD on every array of the module
    (record(train="all"))."""

    def __init__(self, nets):
        super().__init__()
        self.nets = nets

    def __missing__(self, key):
        self[key] = value = self._pair(key)
        return value

    def _pair(self, key):
        if key[0] == "tanh":
            return _pair(self.nets[key[1]], Y, key[2], 1000 if key[1] == 2 else 4000)
        depth = key[1]
        if depth in (2, 3):  # a deep linear network: its NQF is exact
            scale, steps = (0.1, 1000) if depth == 2 else (0.3, 2000)
            return _pair(nqf.Network(mlp(depth, activation=lambda z: z)), Y, scale, steps, 5)
        if depth == "3, biases":  # the hidden ones in the neurons, the final one its own layer, layers[1].bias frozen
            biased = nqf.Network(mlp(3, bias=True, activation=lambda z: z))
            return _pair(biased, Y + 0.5, 0.3, 2000, 5, train="neurons", target="horizon")
        # two outputs (the loss is the mean over outputs too) and minibatches of 8 (record's batches)
        two = nqf.Network(mlp(2, activation=lambda z: z, out=2))
        return _pair(two, np.stack([Y, 0.1 - 0.5 * Y], 1), 0.1, 1000, 5, batch_size=8, target="horizon")


@pytest.fixture(scope="module")
def runs(nets):
    return _Runs(nets)


# -- the layout -------------------------------------------------------------------------------


def test_network_recognises_depth_2_and_3(nets):
    for depth, net in nets.items():
        assert isinstance(net, DeepNetwork) and net.depth == depth
        assert net.kinds == (("pair", "readout") if depth == 2 else ("pair", "pair"))
        assert [lay.p for lay in net.layers] == ([N_IN + WIDTH, WIDTH] if depth == 2 else [N_IN + WIDTH, WIDTH + 1])
        rng = np.random.default_rng(1)
        W = np.asarray(jax.scipy.linalg.block_diag(*[rng.standard_normal((lay.p, lay.d)) for lay in net.layers]))
        np.testing.assert_array_equal(np.asarray(net.to_W(net.with_params_W(net.params, W))), W)
        module = net.with_W(W)
        np.testing.assert_allclose(np.asarray(net(W, X[0])), np.asarray(module(X[0])), rtol=1e-14)


def test_named_layer_keeps_the_frozen_mode():
    net = nqf.Network(mlp(2), neurons={"layers[1].weight": 0, "layers[2].weight": 1})
    assert type(net) is nqf.Network and net.d == WIDTH and "layers[0].weight" in net.frozen
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nqf.HorizonWarning)
        warnings.simplefilter("ignore", nqf.FrozenParameterWarning)  # the lower layers: frozen by choice
        pred = nqf.predict(net, X, Y, nqf.SGD(0.05, steps=20), init_scale=0.1)  # the one-layer NQF
    assert type(pred) is nqf.Prediction and pred.eigenvalues.shape[1] == WIDTH + 1


def test_flax_nnx_chain_and_biases():
    nnx = pytest.importorskip("flax.nnx")

    class Chain(nnx.Module):
        def __init__(self, rngs):
            self.a = nnx.Linear(N_IN, WIDTH, rngs=rngs, param_dtype=jnp.float64)
            self.b = nnx.Linear(WIDTH, 3, rngs=rngs, param_dtype=jnp.float64)
            self.c = nnx.Linear(3, 1, rngs=rngs, param_dtype=jnp.float64)

        def __call__(self, x):
            return self.c(jnp.sin(self.b(jnp.sin(self.a(x)))))

    module = Chain(nnx.Rngs(0))
    net = nqf.Network(module)
    assert isinstance(net, DeepNetwork) and net.activation_name == "sin" and net.frozen == ("b.bias",)
    np.testing.assert_allclose(np.asarray(net(net.W, X[0])), np.asarray(module(X[0])), rtol=1e-13)
    assert [lay.p for lay in net.layers] == [N_IN + 1 + 3, 3 + 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nqf.FrozenParameterWarning)  # b.bias: a constant of the NQF
        pred = nqf.predict(net, X, Y, nqf.SGD(0.05, steps=10), init_scale=0.1, target="horizon")
    assert pred.init_gap[0] < 1e-3 and pred.loss[-1] < pred.loss[0]


# -- structure functions by autodiff against hand-written ones ------------------------------


def _hand_written(depth, bias):
    """The structured layers written by hand as in `nqf.multilayer` / Fig. 8: a pair of Linear
    layers is `feedforward_layer` (with [z; 1] for the hidden bias), the readout g = tanh(h)."""
    one = (lambda z: jnp.concatenate([z, jnp.ones(1)])) if bias else (lambda z: z)
    k = N_IN + bias
    lay1 = ml.feedforward_layer(k, WIDTH, transform=lambda h: one(h))
    if depth == 3:
        return [lay1, ml.feedforward_layer(WIDTH + bias, 1, transform=lambda h: one(jnp.tanh(h)))]
    readout = ml.Layer(lambda h: ml.Structure(jnp.zeros((1, WIDTH, WIDTH)), None, jnp.tanh(h)[None]), WIDTH, 1)
    return [lay1, readout]


@pytest.mark.parametrize("depth, bias", [(2, False), (3, False), (3, True)])
def test_autodiff_structure_equals_hand_written(depth, bias):
    net = nqf.Network(mlp(depth, bias=bias))
    derived = _deep.nqf_layers(net, jnp.asarray(X[0]))
    rng = np.random.default_rng(2)
    for l, (a, b) in enumerate(zip(derived, _hand_written(depth, bias))):
        h = jnp.asarray(X[0] if l == 0 else rng.standard_normal(WIDTH))
        sa, sb = a.components(h), b.components(h)
        np.testing.assert_allclose(np.asarray(sa.A), np.asarray(sb.A), rtol=0, atol=1e-14)
        if sb.g is not None:
            np.testing.assert_allclose(np.asarray(sa.g), np.asarray(sb.g), rtol=0, atol=1e-14)
        W = rng.standard_normal((a.p, 3))
        M, mu = jnp.asarray(W @ W.T), jnp.asarray(W.sum(axis=1))
        C = 0.0 if sa.C is None else sa.C  # the frozen output bias of a pair (module's own value)
        np.testing.assert_allclose(np.asarray(a.evaluate(h, M, mu)), np.asarray(b.evaluate(h, M, mu) + C), atol=1e-13)
        hb, c = jnp.asarray(rng.standard_normal((6, h.shape[0]))), jnp.asarray(rng.standard_normal((6, a.D)))
        if l == 0:
            hb = jnp.asarray(X[:6])
        np.testing.assert_allclose(np.asarray(a.weighted_A(hb, c)), np.asarray(b.weighted_A(hb, c)), atol=1e-13)


def test_nqf_layers_at_small_init_follow_the_module(nets):
    """Each NQF layer's output at W0 = s W differs from the module's layer output by O(s^2)
    relative (tanh is odd: Theorem 1's error is O(|W|^4) against the quadratic term)."""
    net = nets[3]
    deep = ml.DeepNQF(_deep.nqf_layers(net, jnp.asarray(X[0])), jnp.asarray(X), jnp.asarray(Y))
    errs = [
        _deep._init_errors(net, deep, [s * np.asarray(W) for W in net.layer_W(net.W)], jnp.asarray(X))
        for s in (0.2, 0.1)
    ]
    ratio = errs[0] / errs[1]
    assert np.all((3.5 < ratio) & (ratio < 4.5)), ratio


# -- the prediction against W-space training of the module ----------------------------------


@pytest.mark.parametrize("depth", [2, 3, "3, biases", "2 outputs, batches"])
def test_deep_linear_prediction_is_exact(runs, depth):
    """phi = identity: every pair is exactly quadratic in its neurons and the readout linear, so
    Theorem 14's map is the module's own SGD: loss and every layer's M agree at the saved steps."""
    pred, run = runs[("linear", depth)]
    np.testing.assert_array_equal(pred.trajectory.steps, run.steps)
    assert run.loss[-1] < 0.05 * run.loss[0]
    np.testing.assert_allclose(pred.loss, run.loss, rtol=1e-9)
    r0 = 0
    for M in pred.trajectory.M:
        p = M.shape[1]
        err = np.abs(M - run.M[:, r0 : r0 + p, r0 : r0 + p]).max() / np.abs(M).max()
        assert err < 1e-9, err
        r0 += p
    p1 = pred.trajectory.M[0].shape[1]
    assert np.abs(run.M[:, :p1, p1:]).max() == 0.0  # the block-diagonal layout: no coupling recorded


def _summary(runs, key):
    pred, run = runs[key]
    assert isinstance(pred, _deep.DeepPrediction) and run.trained == "all"
    s = nqf.compare(pred, run).summary()
    print(f"\n{key}: half-drop {s['half_drop_time']}, phase gap {s['phase_gap']:.3g}, layers {s['layers']}")
    assert pred.loss[-1] < 0.1 * pred.loss[0] and run.loss[-1] < 0.1 * run.loss[0]  # both learn within the run
    assert abs(pred.loss[0] - run.loss[0]) < 1e-4 * run.loss[0]  # the same start (L(0) to O(s^2))
    return s


def _worst(s) -> float:
    return max([s["half_drop_time"]["relative_error"]] + [L["max_relative_error"] for L in s["layers"]])


def test_depth2_tanh_tracks_the_module_trained_in_W_space(runs):
    s = _summary(runs, ("tanh", 2, 0.1))
    assert all(L["predicted"] for L in s["layers"])  # every layer ignites
    assert _worst(s) <= 0.05  # measured 0.024 (half-drop), 0.021 / 0.017 (ignition, layers 1 / 2)


def test_depth3_tanh_gap_shrinks_with_the_init(runs):
    """At depth 3 the network's drop comes 5 % after the NQF's from init 0.3 (the tanh inside
    each pair saturates as the weights grow to fit the targets; the NQF drops first); the
    difference is the NQF's own: it shrinks at a smaller init (the escape from W = 0, which the
    NQF describes, takes a larger part of the time)."""
    worst = [_worst(_summary(runs, ("tanh", 3, s))) for s in (0.3, 0.2)]
    assert all(L["predicted"] for L in _summary(runs, ("tanh", 3, 0.2))["layers"])
    assert worst[1] < worst[0] <= 0.1, worst


def test_deep_prediction_saves_and_loads(runs, tmp_path):
    pred = runs[("tanh", 2, 0.1)][0]
    back = nqf.load(pred.save(tmp_path / "deep"))
    assert isinstance(back, _deep.DeepPrediction) and back.model is None and back.network is None
    np.testing.assert_array_equal(back.loss, pred.loss)
    for a, b in zip(back.layer_ignition_times, pred.layer_ignition_times):
        np.testing.assert_array_equal(a, b)
    low, half = pred.with_targets("horizon", rho=0.3), pred.with_targets("horizon")
    assert low.settings["rho"] == 0.3 and half.settings["rho"] == 0.5
    for a, b, grow in zip(low.layer_ignition_times, half.layer_ignition_times, half.layer_growing):
        assert grow.any() and np.all(a[grow] < b[grow])  # a lower fraction of the same target: earlier


# -- bad input ---------------------------------------------------------------------------------


def test_depth_not_covered():
    with pytest.raises(NeuronError, match="depth 4"):
        nqf.Network(mlp(4))


def test_not_a_chain():
    class NotChain(eqx.Module):
        a: eqx.nn.Linear
        b: eqx.nn.Linear
        c: eqx.nn.Linear

        def __call__(self, x):
            return self.c(jnp.tanh(self.b(x)))

    k = jax.random.split(jax.random.key(0), 3)
    bad = NotChain(eqx.nn.Linear(4, 6, key=k[0]), eqx.nn.Linear(3, 5, key=k[1]), eqx.nn.Linear(7, 1, key=k[2]))
    with pytest.raises(NeuronError, match="do not form a chain"):
        nqf.Network(bad)


class _Chain(eqx.Module):
    a: eqx.nn.Linear
    b: eqx.nn.Linear
    c: eqx.nn.Linear

    def __call__(self, x):
        phi = lambda z: z + 0.3 * z**3  # noqa: E731 (not an activation the chain check tries)
        return self.c(phi(self.b(phi(self.a(x)))))


def test_unknown_activation():
    k = jax.random.split(jax.random.key(0), 3)
    module = _Chain(eqx.nn.Linear(4, 6, key=k[0]), eqx.nn.Linear(6, 5, key=k[1]), eqx.nn.Linear(5, 1, key=k[2]))
    with pytest.raises(NeuronError, match="not\\s+L_n\\(phi"):
        nqf.Network(module)
    # the same function as an eqx.nn.MLP names its activation: a valid chain (phi(0) = 0, phi'(0) = 1)
    assert isinstance(nqf.Network(mlp(2, activation=lambda z: z + 0.3 * z**3)), DeepNetwork)


@pytest.mark.parametrize("activation, what", [(jax.nn.sigmoid, "phi\\(0\\) = 0.5"), (jax.nn.relu, "phi'\\(0\\) = 0")])
def test_activation_outside_the_nqf(activation, what):
    net = nqf.Network(mlp(2, activation=activation))
    with pytest.raises(ExtractionError, match=what):
        nqf.predict(net, X, Y, nqf.SGD(0.05, steps=10))


def test_layers_not_all_small(nets):
    with pytest.raises(ValueError, match="init_scale.*do not all start small.*layer 1"):
        nqf.predict(nets[2], X, Y, nqf.SGD(0.05, steps=10), init_scale=4.0)


@pytest.mark.parametrize(
    "training, what",
    [
        (nqf.Flow(5.0), "gradient flow"),
        (nqf.SGD(0.05, steps=10, momentum=0.9), "momentum"),
        (nqf.SGD(optax.cosine_decay_schedule(0.05, 10), steps=10), "schedule"),
    ],
)
def test_training_the_multilayer_map_does_not_take(nets, training, what):
    with pytest.raises(ValueError, match=f"`training`.*{what}"):
        nqf.predict(nets[2], X, Y, training)


def test_held_out_data_not_predicted_for_a_deep_network(nets):
    with pytest.raises(ValueError, match="`x_test`"):
        nqf.predict(nets[2], X, Y, nqf.SGD(0.05, steps=10), x_test=X[:3], y_test=Y[:3])


def test_one_layer_tools_refuse_a_deep_network(nets):
    for call in (lambda: nqf.extract(nets[2], X, y=Y), lambda: nqf.plan(nets[2], X, Y, nqf.SGD(0.05, steps=10))):
        with pytest.raises(TypeError, match="deep network.*no one-layer NQF.*neurons="):
            call()
