"""nqf.predict and nqf.compare on small modules: the prediction against the closed forms it rests
on (the MLP's NQF of `nqf.structure`, Theorem 2's map vs weight space, the Taylor terms of tanh,
the null-space projection against a dense Jacobian), the recorded network at small init, and
bad input."""

import dataclasses
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import optax
import pytest

import nqf
from nqf.network import _departure

KEY = jax.random.PRNGKey(0)
RNG = np.random.default_rng(0)
N_IN, WIDTH, M = 6, 16, 120
X = RNG.standard_normal((M, N_IN)) / np.sqrt(N_IN)
Y = np.tanh(X @ RNG.standard_normal(N_IN))
MLP = eqx.nn.MLP(N_IN, 1, WIDTH, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False, key=KEY)
NET = nqf.Network(MLP)
LR, STEPS, SCALE = 0.05, 1500, 0.02


@pytest.fixture(scope="module")
def pred():
    return nqf.predict(NET, X, Y, lr=LR, steps=STEPS, init_scale=SCALE)


@pytest.fixture(scope="module")
def run(pred):
    return pred.record(optax.sgd(LR))


def test_the_prediction_is_the_closed_map_of_the_mlp_nqf(pred):
    """The extracted NQF is Proposition 1's (nqf.structure.mlp), and the predicted curve is
    Theorem 2's map, equal to weight-space SGD on that NQF."""
    closed = nqf.structure.mlp(X, Y)
    np.testing.assert_allclose(
        np.asarray(nqf.as_dense(pred.model)) if hasattr(nqf, "as_dense") else np.asarray(pred.model.dense()),
        np.asarray(closed.dense()),
        atol=1e-13,
    )
    ws = nqf.train_w(closed, pred.W0, lr=LR, steps=STEPS, save_every=STEPS // 100)
    idx = np.searchsorted(pred.trajectory.steps, ws.steps)
    np.testing.assert_allclose(pred.loss[idx], ws.loss, rtol=1e-10)
    assert pred.t[-1] == pytest.approx(LR * STEPS)


def test_the_network_follows_its_prediction_at_small_init(pred, run):
    cmp = nqf.compare(pred, run)
    s = cmp.summary()
    assert pred.growing.sum() == 1 and np.isfinite(pred.ignition_times[pred.growing]).all()
    assert s["half_drop_time"]["relative_error"] < 0.01
    assert s["ignition_times"]["max_relative_error"] < 0.01
    assert cmp.phase_gap < 0.01 and all(cmp.verdicts.values())
    np.testing.assert_allclose(run.M[0], pred.W0 @ pred.W0.T, rtol=0, atol=1e-18)


def test_asymptote_is_the_nqf_limit_and_targets(pred):
    """The asymptotic loss is the least-squares loss of the NQF's linear model (E = Z1 Z2^T)."""
    E = np.linalg.lstsq(X, Y, rcond=None)[0]
    np.testing.assert_allclose(pred.final_loss, np.mean((X @ E - Y) ** 2), rtol=1e-9)
    late = nqf.predict(NET, X, Y, lr=LR, steps=STEPS, init_scale=SCALE, target="horizon")
    assert late.targets_from == "horizon"  # the per-step eigenvalues after the last step
    np.testing.assert_allclose(late.targets, pred.eigenvalues[-1], rtol=0, atol=1e-14 * pred.eigenvalues.max())
    np.testing.assert_allclose(late.loss, pred.loss)


def test_taylor_terms_of_tanh_are_the_quartic_term():
    """f = sum_i v_i tanh(u_i . x): T3 = 0 and T4 = -sum_i v_i (u_i . x)^3 / 3 exactly."""
    W = jnp.asarray(0.3 * RNG.standard_normal((N_IN + 1, 5)))
    t3, t4, full = _departure._taylor_one(NET, W, jnp.asarray(X[0]))
    U, v = np.asarray(W[:N_IN]), np.asarray(W[N_IN])
    np.testing.assert_allclose(t3, 0.0, atol=1e-15)
    np.testing.assert_allclose(t4, -np.sum(v * (U.T @ X[0]) ** 3) / 3, rtol=1e-12)
    np.testing.assert_allclose(full, np.sum(v * np.tanh(U.T @ X[0])), rtol=1e-14)


def test_null_space_rate_against_a_dense_jacobian(pred):
    """|P_null g|^2 with P_null the projection on the null space of the NQF's output Jacobian,
    against jax.jacobian and a least-squares projection."""
    model = nqf.NQFModel(pred.model) if not isinstance(pred.model, nqf.NQFModel) else pred.model
    W = jnp.asarray(0.3 * RNG.standard_normal((N_IN + 1, 4)))
    g = jnp.asarray(RNG.standard_normal(W.shape))
    Ua, Ub, front = _departure._output_span(model.data)
    assert Ub is not None  # the MLP's span is a Kronecker product: the Sylvester path
    rate = np.sum(np.asarray(_departure._null_part(W, g, (Ua, Ub), front)) ** 2)
    B = jnp.einsum("ai,bj->ijab", Ua, Ub).reshape(-1, Ua.shape[0], Ub.shape[0])
    rate_gram = np.sum(np.asarray(_departure._null_part(W, g, (B, None), front)) ** 2)
    J = jax.jacobian(lambda W: model.outputs_factor(W, W.sum(axis=1)))(W).reshape(M, -1)
    coef = np.linalg.lstsq(np.asarray(J).T, np.asarray(g).ravel(), rcond=None)[0]
    null = np.asarray(g).ravel() - np.asarray(J).T @ coef
    np.testing.assert_allclose(rate, null @ null, rtol=1e-9)
    np.testing.assert_allclose(rate_gram, null @ null, rtol=1e-9)


def test_departure_of_a_module_with_a_cubic_term():
    """A strong quadratic activation term (phi(z) = tanh z + 10 z^2: T3 != 0) leaves the NQF inside
    the learning phase; the next-terms estimate is within a factor 2 of the measured departure
    (measured when written: 3.9 estimated, 2.45 measured)."""

    class Cubic(eqx.Module):
        mlp: eqx.nn.MLP

        def __call__(self, x):
            return self.mlp(x)

    mlp = eqx.nn.MLP(
        N_IN,
        1,
        WIDTH,
        depth=1,
        activation=lambda z: jnp.tanh(z) + 10.0 * z**2,
        use_bias=False,
        use_final_bias=False,
        key=KEY,
    )
    net = nqf.Network(Cubic(mlp), neurons={"mlp.layers[0].weight": 0, "mlp.layers[1].weight": 1})
    with pytest.warns(nqf.InitScaleWarning):  # the module leaves its NQF from the start (init_gap)
        p = nqf.predict(net, X, Y, lr=LR, steps=STEPS, init_scale=0.2)
    assert p.init_gap[1] > 0.01
    cmp = nqf.compare(p, p.record(optax.sgd(LR)))
    assert np.isfinite(p.departure_estimate) and np.isfinite(cmp.departure_time)
    assert 0.5 < p.departure_estimate / cmp.departure_time < 2.0


def test_flow_prediction_and_plots_leave_pyplot_alone(pred, run):
    import matplotlib.pyplot as plt

    flow = nqf.predict(NET, X, Y, t1=LR * STEPS, init_scale=SCALE)
    assert isinstance(flow.trajectory, nqf.FlowSolution)
    # d = 16 > p = 7: the flow runs from the (p, p) factor of W0 W0^T; W(t) = F(t) F0^+ W0 is the
    # factor flow from W0 itself
    direct = nqf.solve_flow(flow.model, W0=flow.W0, t1=LR * STEPS, ts=flow.t)
    assert flow.trajectory.ys.shape[-1] == NET.p
    np.testing.assert_allclose(
        _departure.weights_along(flow.trajectory, flow.W0)(len(flow.t) - 1),
        direct.W[-1],
        rtol=0,
        atol=1e-10 * np.abs(direct.W[-1]).max(),
    )
    np.testing.assert_allclose(flow.loss, direct.loss, rtol=1e-8)
    np.testing.assert_allclose(flow.half_drop_time, pred.half_drop_time, rtol=0.02)  # O(lr) apart
    before = plt.get_fignums()
    fig = nqf.compare(flow, run).plot()
    assert isinstance(fig, matplotlib.figure.Figure) and plt.get_fignums() == before
    assert len(fig.axes) == 3 and fig.axes[1].get_yscale() == "log"  # loss, eigenvalues, gap


def test_horizon_warnings_and_untested_verdicts(pred, run):
    """A horizon inside the learning phase: ignition times against the eigenvalues at the horizon
    (flagged targets_from='horizon'), finite for the growing modes, where the per-step eigenvalues
    cross rho x their value at the horizon (an independent search), and tested by compare."""
    with pytest.warns(nqf.HorizonWarning, match="does not end within the horizon"):
        short = nqf.predict(NET, X, Y, lr=LR, steps=100, init_scale=SCALE)
    assert np.isnan(short.phase_end) and short.targets_from == "horizon"
    ev = short.trajectory.step_eigenvalues
    np.testing.assert_array_equal(short.targets, ev[-1])
    k = np.flatnonzero(short.growing)
    assert (
        k.size and np.isfinite(short.ignition_times[k]).all() and np.isnan(short.ignition_times[~short.growing]).all()
    )
    for j in k:
        i = int(np.argmax(ev[:, j] >= 0.5 * ev[-1, j]))
        assert LR * (i - 1) < short.ignition_times[j] <= LR * i
    cmp = nqf.compare(short, short.record(optax.sgd(LR)))
    assert cmp.verdicts["ignition_times"] is True
    assert cmp.summary()["ignition_times"]["max_relative_error"] < 0.01
    none = short.with_targets(np.zeros(NET.p))
    assert nqf.compare(none, cmp.recording).verdicts["ignition_times"] is None  # nothing ignites: not tested
    part = nqf.Recording(
        **{
            **{f: getattr(run, f) for f in ("steps", "t", "M", "mu", "loss")},
            "W_final": run.W_final,
            "lr": run.lr,
            "optimizer": "optax",
            "trained": "neurons",
        }
    )
    cut = dataclasses.replace(
        part, steps=run.steps[:20], t=run.t[:20], M=run.M[:20], mu=run.mu[:20], loss=run.loss[:20]
    )
    assert nqf.compare(pred, cut).verdicts["phase_gap"] is None  # the run stops before the phase ends
    with pytest.warns(UserWarning, match="does not start at the prediction's M0"):
        nqf.compare(pred, dataclasses.replace(part, M=2 * run.M))
    with pytest.warns(nqf.HorizonWarning, match="stability edge"), warnings.catch_warnings():
        warnings.simplefilter("ignore", nqf.InitScaleWarning)  # the catapult also leaves the NQF early
        nqf.predict(NET, X, 3 * Y, lr=1.0, steps=200, init_scale=SCALE, estimate_departure=False, target="horizon")


def test_a_mean_over_units_is_scaled_back():
    """extract_options={"normalization": "mean"}: the sum form scaled by 1/d is the module's NQF, so
    the map equals weight-space SGD of the module's own quadratic expansion (the MLP's closed form / d)."""

    class Mean(eqx.Module):
        mlp: eqx.nn.MLP

        def __call__(self, x):
            return self.mlp(x) / self.mlp.layers[0].weight.shape[0]  # a mean over the units

    net = nqf.Network(Mean(MLP), neurons={"mlp.layers[0].weight": 0, "mlp.layers[1].weight": 1})
    p = nqf.predict(
        net,
        X,
        Y,
        lr=LR * WIDTH,
        steps=200,
        init_scale=0.2,
        extract_options={"normalization": "mean"},
        estimate_departure=False,
        target="horizon",
    )
    closed = nqf.structure.mlp(X, Y).scaled(1.0 / WIDTH)
    ws = nqf.train_w(closed, p.W0, lr=LR * WIDTH, steps=200, save_every=200)
    np.testing.assert_allclose(p.loss[-1], ws.loss[-1], rtol=1e-10)


def test_prediction_saves_and_pickles(pred, tmp_path):
    import pickle

    back = nqf.load(pred.save(tmp_path / "pred.npz"))
    np.testing.assert_array_equal(back.loss, pred.loss)
    assert back.network is None
    again = pickle.loads(pickle.dumps(pred))
    np.testing.assert_array_equal(again.ignition_times, pred.ignition_times)


def test_frozen_output_bias_warns():
    mlp = eqx.nn.MLP(N_IN, 1, WIDTH, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=True, key=KEY)
    with pytest.warns(nqf.FrozenParameterWarning, match=r"layers\[1\].bias"):
        nqf.predict(nqf.Network(mlp), X, Y + 1.0, t1=5.0, init_scale=SCALE, target="horizon")


def test_bad_input_is_named():
    flow = nqf.Flow(1.0)
    with pytest.raises(ValueError, match=r"`y` must have shape \(120,\)"):
        nqf.predict(NET, X, Y[:7], flow)
    with pytest.raises(ValueError, match=r"`W0` must be a finite array of shape \(p, d\) = \(7, 16\)"):
        nqf.predict(NET, X, Y, flow, W0=np.zeros((7, 3)))
    with pytest.raises(TypeError, match=r"`W0` must be real; found complex"):  # issue 36 B6: was cast to real
        nqf.predict(NET, X, Y, flow, W0=NET.W + 0.1j)
    with pytest.raises(TypeError, match=r"`extract_options` has 1 unknown option\(s\) \['bogus'\].*takes width, scale"):
        nqf.predict(NET, X, Y, flow, extract_options={"bogus": 1})  # issue 36 B11: named extract_report's keyword
    with pytest.raises(ValueError, match="needs a training description"):
        nqf.predict(NET, X, Y)
    with pytest.raises(ValueError, match="`target` must be one of"):
        nqf.predict(NET, X, Y, flow, target="end")
    with pytest.raises(ValueError, match="needs weight_decay = 0"):
        nqf.predict(NET, X, Y, nqf.Flow(1.0, weight_decay=0.1), target="asymptote")
    with pytest.raises(ValueError, match="`ts` gives the saved times of a flow"):
        nqf.predict(NET, X, Y, nqf.SGD(0.1, steps=5), ts=[0.0, 0.5])
    with pytest.raises(ValueError, match="starting at 0"):
        nqf.predict(NET, X, Y, nqf.Flow(10.0), ts=np.linspace(1.0, 10.0, 5))
    bad_x = X.copy()
    bad_x[3, 1] = np.nan
    with pytest.raises(ValueError, match="`x` must be finite"):
        nqf.predict(NET, bad_x, Y, flow)
    with pytest.raises(TypeError, match="concrete"):
        jax.jit(lambda x: nqf.predict(NET, x, Y, flow).loss)(X)
    with pytest.raises(TypeError, match="plain function"):
        nqf.predict(lambda W, x: W.sum(), X, Y, flow)
    relu = eqx.nn.MLP(N_IN, 1, WIDTH, depth=1, activation=jax.nn.relu, use_bias=False, use_final_bias=False, key=KEY)
    with pytest.raises(nqf.SmoothnessError):
        nqf.predict(nqf.Network(relu), X, Y, flow)
    position = lambda W, x: jnp.sum(jnp.arange(1.0, W.shape[1] + 1) * W[-1] * jnp.tanh(W[:-1].T @ x))  # noqa: E731
    with pytest.raises(nqf.SymmetryError):  # neuron i weighted by i: not interchangeable
        nqf.predict(nqf.Network(position, W0=0.01 * np.ones((N_IN + 1, 4))), X, Y, flow)
    with pytest.raises(TypeError, match="nqf.Prediction"):
        nqf.compare("x", None)


# ---- losses other than MSE: cross-entropy over K outputs (the map and the flow) against record ----
K_CE = 3
CLS = np.argmax(X @ RNG.standard_normal((N_IN, K_CE)), axis=1)
MLP_CE = eqx.nn.MLP(N_IN, K_CE, WIDTH, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False, key=KEY)
NET_CE = nqf.Network(MLP_CE)  # one network for the file: its compiled programs are cached on it
LR_CE, SCALE_CE = 0.5, 0.01


CE = nqf.SGD(LR_CE, steps=1500, loss="cross_entropy")


@pytest.fixture(scope="module")
def pred_ce():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nqf.InitScaleWarning)  # 0.0095 L(0) at 5 % of the horizon
        return nqf.predict(NET_CE, X, CLS, CE, init_scale=SCALE_CE)


def test_cross_entropy_prediction_follows_the_recorded_network(pred_ce):
    """The map with cross-entropy is W-space GD on the extracted NQF (the same loss by hand), and
    the tanh MLP trained on the mean cross-entropy (record) follows it within the NQF's gap."""
    assert pred_ce.settings["loss"] == "cross_entropy" and pred_ce.asymptote is None
    np.testing.assert_allclose(pred_ce.loss[0], np.log(K_CE), rtol=1e-4)  # small init: f ~ 0
    F = pred_ce.trajectory.outputs[-1].reshape(M, K_CE)
    want = np.mean(np.log(np.exp(F).sum(1)) - F[np.arange(M), CLS])
    np.testing.assert_allclose(pred_ce.loss[-1], want, rtol=1e-12)
    run = pred_ce.record()  # the prediction's description, its loss included
    direct = nqf.record(NET_CE, X, CLS, CE, W0=pred_ce.W0)
    np.testing.assert_array_equal(run.loss, direct.loss)
    np.testing.assert_allclose(run.loss[0], pred_ce.loss[0], rtol=1e-8)
    s = nqf.compare(pred_ce, run).summary()
    assert s["half_drop_time"]["relative_error"] < 0.03  # measured 0.012
    assert s["ignition_times"]["max_relative_error"] < 0.06  # measured 0.032
    gap = np.abs(np.interp(run.t, pred_ce.t, pred_ce.loss) - run.loss).max() / run.loss[0]
    assert gap < 0.03  # measured 0.018
    flow = nqf.predict(NET_CE, X, CLS, nqf.Flow(LR_CE * 1500, loss="cross_entropy"),
                       init_scale=SCALE_CE, ts=np.linspace(0, LR_CE * 1500, 101))  # fmt: skip
    assert flow.trajectory.form == "M-mu"
    np.testing.assert_allclose(flow.half_drop_time, pred_ce.half_drop_time, rtol=0.05)  # the map at lr 0.5


def test_logistic_prediction_follows_the_recorded_network():
    labels = (Y > 0).astype(int)  # {0, 1}; the NQF's labels are the signs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nqf.InitScaleWarning)
        pred = nqf.predict(NET, X, labels, nqf.SGD(LR_CE, steps=1500, loss="logistic"), init_scale=SCALE_CE)
    np.testing.assert_array_equal(pred.y[:, 0], 2.0 * labels - 1.0)
    np.testing.assert_allclose(pred.loss[0], np.log(2.0), rtol=1e-4)
    run = pred.record()
    s = nqf.compare(pred, run).summary()
    assert s["half_drop_time"]["relative_error"] < 0.02  # measured 0.0095
    assert s["ignition_times"]["max_relative_error"] < 0.03  # measured 0.012


def test_loss_labels_are_checked():
    net = NET_CE
    ce_flow = nqf.Flow(1.0, loss="cross_entropy")
    with pytest.raises(ValueError, match="integer class labels"):
        nqf.predict(net, X, CLS + 0.5, ce_flow)
    with pytest.raises(ValueError, match=r"found labels in \[0, 4\]"):
        nqf.record(net, X, CLS * 2, nqf.SGD(0.1, steps=2, loss="cross_entropy"))
    with pytest.raises(ValueError, match="one output per class"):
        nqf.predict(NET, X, CLS, ce_flow)
    with pytest.raises(ValueError, match=r"\{0, 1\} or \{-1, \+1\}"):
        nqf.predict(NET, X, Y, nqf.Flow(1.0, loss="logistic"))
    with pytest.raises(ValueError, match="MSE flow's limit"):
        nqf.predict(net, X, CLS, ce_flow, target="asymptote")
    with pytest.raises(ValueError, match="`loss` must be one of"):
        nqf.SGD(0.1, steps=2, loss="hinge")
    own = lambda f, y: (f - y) ** 2  # noqa: E731  (a callable of one input: MSE again)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nqf.HorizonWarning)
        mine = nqf.predict(NET, X, Y, nqf.SGD(LR, steps=5, loss=own), init_scale=SCALE)
        plain = nqf.predict(NET, X, Y, nqf.SGD(LR, steps=5), init_scale=SCALE)
    np.testing.assert_allclose(mine.loss, plain.loss, rtol=1e-13)
    with pytest.raises(ValueError, match="callable loss"):
        mine.record()
    again = mine.record(nqf.SGD(LR, steps=5, loss=own))  # the same function in the description
    np.testing.assert_allclose(again.loss, plain.record().loss, rtol=1e-13)
