"""Held-out data (issue 35, item 2): predicted test outputs, loss and accuracy against the module's
own outputs at W0, the MLP's closed-form NQF (Proposition 1) on the test inputs, an exactly
quadratic layer trained in weight space, a hand computation from the recorded W_final; bad input."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nqf
from nqf.dynamics._losses import mean_loss
from nqf.network import _heldout

KEY = jax.random.PRNGKey(0)
RNG = np.random.default_rng(0)
N_IN, WIDTH, M, M_TEST = 6, 16, 120, 50
TEACHER = RNG.standard_normal(N_IN)
X = RNG.standard_normal((M, N_IN)) / np.sqrt(N_IN)
Y = np.tanh(X @ TEACHER)
XT = RNG.standard_normal((M_TEST, N_IN)) / np.sqrt(N_IN)
YT = np.tanh(XT @ TEACHER)
MLP = eqx.nn.MLP(N_IN, 1, WIDTH, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False, key=KEY)
NET = nqf.Network(MLP)
LR, STEPS, SCALE = 0.05, 1500, 0.02


@pytest.fixture(scope="module")
def pred():
    return nqf.predict(NET, X, Y, lr=LR, steps=STEPS, init_scale=SCALE, x_test=XT, y_test=YT)


@pytest.fixture(scope="module")
def run(pred):
    return pred.record(optax.sgd(LR))  # the prediction's x_test, y_test


def _module_outputs(W, x):
    return np.asarray(jax.vmap(NET.with_W(jnp.asarray(W)))(jnp.asarray(x)))[:, 0]


def test_predicted_test_outputs_are_the_nqf_of_the_test_inputs(pred):
    """At t = 0 the module's own outputs at W0 (to the NQF's gap, O(init^4) against O(init^2));
    at every saved time Tr[M(t) A(x)] with A(x) the MLP's closed-form NQF on the test inputs."""
    n = len(pred.t)
    assert pred.test_outputs.shape == (n, M_TEST) and pred.test_loss.shape == (n,)
    assert pred.test_accuracy is None  # real-valued targets: no accuracy
    assert pred.settings["test"] == {"m_test": M_TEST, "accuracy": None, "labels": True}
    f0 = _module_outputs(pred.W0, XT)
    np.testing.assert_allclose(pred.test_outputs[0], f0, rtol=0, atol=1e-3 * np.abs(f0).max())
    A = np.asarray(nqf.structure.mlp(XT, YT).dense())
    want = np.einsum("mij,nij->nm", A, np.asarray(pred.trajectory.M))
    np.testing.assert_allclose(pred.test_outputs, want, rtol=0, atol=1e-12 * np.abs(want).max())
    np.testing.assert_allclose(pred.test_loss, np.mean((want - YT) ** 2, axis=1), rtol=1e-12)


def test_record_measures_the_module_on_the_test_inputs(pred, run):
    """The recorded test loss at the last step is the module at W_final on (XT, YT), by hand."""
    assert run.test_outputs.shape == (len(run.t), M_TEST) and run.test_accuracy is None
    f = _module_outputs(run.W_final, XT)
    np.testing.assert_allclose(run.test_outputs[-1], f, rtol=0, atol=1e-14)
    np.testing.assert_allclose(run.test_loss[-1], np.mean((f - YT) ** 2), rtol=1e-13)
    np.testing.assert_allclose(run.test_loss[0], np.mean((_module_outputs(pred.W0, XT) - YT) ** 2), rtol=1e-13)
    assert run.wall_time_s > 0 and pred.wall_time_s > 0


def test_compare_reports_the_test_loss_gap(pred, run):
    s = nqf.compare(pred, run).summary()
    test = s["test"]
    assert test["m_test"] == M_TEST and "test_accuracy_difference" not in test
    assert test["test_L0"] == pytest.approx(pred.test_loss[0], rel=1e-12)
    assert test["test_loss_gap"] < 0.02  # measured when written: 0.011 (train phase gap 0.011)
    assert s["L0"] == pytest.approx(pred.loss[0]) and s["growing_modes"] == 1
    assert s["final_loss"]["measured"] == pytest.approx(run.loss[-1])
    assert s["wall_time_s"]["record"] == run.wall_time_s


def quadratic(W, x):
    """f(W, x) = Tr[W W^T x x^T]: exactly an NQF (A(x) = x x^T, g = B = 0)."""
    return jnp.sum((W.T @ x) ** 2)


def test_an_exactly_quadratic_layer_predicts_its_test_outputs_to_rounding():
    """The quadratic layer's NQF is the layer: predicted test outputs, loss and accuracy equal the
    module's along its own SGD (nqf.record) at every saved step, to rounding."""
    P, D = 4, 5
    rng = np.random.default_rng(2)
    x, xt = rng.standard_normal((60, P)) / 2, rng.standard_normal((30, P)) / 2
    teacher = np.diag([2.0, 1.0, 0.0, 0.0])
    y, yt = (np.where(np.einsum("mi,ij,mj->m", a, teacher, a) > 0.5, 1.0, 0.0) for a in (x, xt))  # {0, 1} labels
    net = nqf.Network(quadratic, W0=1e-2 * rng.standard_normal((P, D)))
    lr, steps = 0.05, 400
    pred = nqf.predict(net, x, y, lr=lr, steps=steps, save_every=20, x_test=xt, y_test=yt, estimate_departure=False)
    run = nqf.record(net, x, y, optax.sgd(lr), lr=lr, steps=steps, save_every=20, x_test=xt, y_test=yt)
    np.testing.assert_array_equal(pred.trajectory.steps, run.steps)
    scale = np.abs(run.test_outputs).max()
    np.testing.assert_allclose(pred.test_outputs, run.test_outputs, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(pred.test_loss, run.test_loss, rtol=1e-10)
    assert pred.settings["test"]["accuracy"] == "threshold"
    np.testing.assert_array_equal(pred.test_accuracy, run.test_accuracy)
    np.testing.assert_array_equal(run.test_accuracy, np.mean((run.test_outputs > 0.5) == (yt == 1), axis=1))
    assert 0.5 < run.test_accuracy[-1] and run.test_accuracy[-1] > run.test_accuracy[0]
    test = nqf.compare(pred, run).summary()["test"]
    assert test["test_loss_gap"] < 1e-9 and test["test_accuracy_difference"]["max_over_phase"] == 0.0


def test_several_outputs_with_one_hot_labels():
    """k = 3 outputs with one-hot labels: outputs (n, m_test, 3), accuracy by argmax (by hand)."""
    mlp = eqx.nn.MLP(N_IN, 3, WIDTH, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False, key=KEY)
    net = nqf.Network(mlp)
    cls, cls_t = np.argmax(X[:, :3], axis=1), np.argmax(XT[:, :3], axis=1)
    y, yt = np.eye(3)[cls], np.eye(3)[cls_t]
    pred = nqf.predict(
        net, X, y, t1=20.0, init_scale=SCALE, x_test=XT, y_test=yt, estimate_departure=False, target="horizon"
    )
    assert pred.test_outputs.shape == (len(pred.t), M_TEST, 3) and pred.settings["test"]["accuracy"] == "onehot"
    want = np.mean(np.argmax(pred.test_outputs, axis=2) == cls_t, axis=1)
    np.testing.assert_array_equal(pred.test_accuracy, want)
    assert pred.test_accuracy[-1] > 0.6
    f0 = np.asarray(jax.vmap(net.with_W(jnp.asarray(pred.W0)))(jnp.asarray(XT)))
    np.testing.assert_allclose(pred.test_outputs[0], f0, rtol=0, atol=1e-3 * np.abs(f0).max())
    np.testing.assert_allclose(pred.test_loss, np.mean((pred.test_outputs - yt) ** 2, axis=(1, 2)), rtol=1e-13)


def test_accuracy_rules_and_mean_loss():
    assert _heldout.accuracy_rule(np.array([-1.0, 1.0]), np.array([1.0, 1.0]), 1) == "sign"
    assert _heldout.accuracy_rule(np.array([0.0, 1.0]), np.array([1.0]), 1) == "threshold"
    assert _heldout.accuracy_rule(np.array([0.3, 1.0]), np.array([1.0]), 1) is None
    assert _heldout.accuracy_rule(np.array([0, 2]), np.array([1, 2]), 3) == "class"
    assert _heldout.accuracy_rule(np.array([0, 3]), np.array([1, 2]), 3) is None  # 3 is not a class of 3 outputs
    assert _heldout.accuracy_rule(-np.ones((2, 3)) + 2 * np.eye(3)[:2], 2 * np.eye(3)[:1] - 1, 3) == "onehot"
    assert _heldout.accuracy_rule(np.full((2, 3), 0.5), np.eye(3)[:1], 3) is None
    F = np.array([[[0.2], [-0.1], [0.0]]])
    np.testing.assert_allclose(_heldout._accuracy(F, np.array([1.0, -1.0, 1.0]), "sign"), [2 / 3])
    np.testing.assert_allclose(_heldout._accuracy(F, np.array([0.0, 0.0, 1.0]), "threshold"), [2 / 3])
    f, yy = RNG.standard_normal((7, 3)), RNG.standard_normal((7, 3))
    np.testing.assert_allclose(mean_loss("mse", f, yy), np.mean((f - yy) ** 2), rtol=1e-15)
    np.testing.assert_allclose(mean_loss(None, f[:, :1], yy[:, 0]), np.mean((f[:, 0] - yy[:, 0]) ** 2), rtol=1e-15)
    with pytest.raises(ValueError, match="`y`"):
        mean_loss("mse", f, yy[:, :2])
    classes = np.array([0, 2, 1, 1, 0, 2, 2])  # cross-entropy: integer classes, one output per class
    want = np.mean(np.log(np.exp(f).sum(axis=1)) - f[np.arange(7), classes])
    np.testing.assert_allclose(mean_loss("cross_entropy", f, classes), want, rtol=1e-14)


def test_prediction_with_test_data_saves(pred, tmp_path):
    back = nqf.load(pred.save(tmp_path / "pred.npz"))
    np.testing.assert_array_equal(back.test_outputs, pred.test_outputs)
    np.testing.assert_array_equal(back.y_test, YT)


def test_bad_held_out_input_is_named():
    with pytest.raises(ValueError, match="`y_test` was given without `x_test`"):
        nqf.predict(NET, X, Y, t1=1.0, y_test=YT)
    with pytest.raises(ValueError, match=r"`x_test` must have the per-input shape of `x`.*\(6,\).*\(5,\)"):
        nqf.predict(NET, X, Y, t1=1.0, x_test=XT[:, :5])
    with pytest.raises(ValueError, match="`x_test` must have the structure of `x`"):
        nqf.predict(NET, X, Y, t1=1.0, x_test=(XT, XT))
    with pytest.raises(ValueError, match=r"`y_test` must have shape \(50,\) like `y`.*found \(49,\)"):
        nqf.predict(NET, X, Y, t1=1.0, x_test=XT, y_test=YT[:49])
    with pytest.raises(ValueError, match=r"`y_test` must have shape \(50,\) like `y`.*k = 1.*found \(50, 2\)"):
        nqf.record(NET, X, Y, optax.sgd(0.1), lr=0.1, steps=2, x_test=XT, y_test=np.stack([YT, YT], 1))
    bad = XT.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="`x_test` must be finite"):
        nqf.record(NET, X, Y, optax.sgd(0.1), lr=0.1, steps=2, x_test=bad)


def test_load_in_a_fresh_process(pred, run, tmp_path):
    """nqf.load of a Prediction, Recording, Comparison and Plan in a new interpreter that has not
    imported nqf.network (issue 35, item 6): io's table of home modules imports it on demand."""
    import dataclasses
    import subprocess
    import sys

    from nqf.network import Plan

    plan = Plan(**{f.name: 1.0 for f in dataclasses.fields(Plan)})  # the type is what is tested here
    cmp = nqf.compare(pred, run)
    paths = [str(o.save(tmp_path / name)) for name, o in (("p", pred), ("r", run), ("c", cmp), ("plan", plan))]
    code = (
        "import sys, nqf\n"
        "assert 'nqf.network' not in sys.modules\n"
        "objs = [nqf.load(p) for p in sys.argv[1:]]\n"
        "print([type(o).__name__ for o in objs], float(objs[0].test_loss[-1]), float(objs[2].test['test_loss_gap']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    names, loss, gap = out.stdout.strip().rsplit(" ", 2)
    assert names == "['Prediction', 'Recording', 'Comparison', 'Plan']"
    assert float(loss) == pred.test_loss[-1] and float(gap) == cmp.test["test_loss_gap"]


def test_every_saveable_type_has_a_home():
    """Every nqf class that `save` can write (registered once all of nqf is imported) is in io's
    table of home modules, and the table names where it is defined."""
    import importlib
    import pkgutil

    from nqf._core import io

    for mod in pkgutil.walk_packages(nqf.__path__, "nqf."):
        if not mod.name.startswith(("nqf.experiments", "nqf.cli", "nqf.__main__")):
            importlib.import_module(mod.name)
    ours = {name: cls for name, cls in io._CLASSES.items() if cls.__module__.split(".")[0] == "nqf"}
    assert len(ours) >= 22 and set(ours) <= set(io._HOMES)
    for name, cls in ours.items():
        assert getattr(importlib.import_module(io._HOMES[name]), name) is cls
    with pytest.raises(ValueError, match="unknown object type 'Nothing'"):
        io._decode({"object": "Nothing", "fields": {}}, {})


def test_plots_carry_the_markers_the_modes_and_the_training(pred, run):
    """The figures build without pyplot state and hold the artists they promise (no image test)."""
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    cmp = nqf.compare(pred, run)
    fig = cmp.plot(logx=True, logy=True, top=3)
    assert plt.get_fignums() == before and len(fig.axes) == 3
    a_loss, a_eig, a_gap = fig.axes
    labels = {t.get_text() for t in a_loss.get_legend().get_texts()}
    assert {"ignition (predicted)", "ignition (measured)", "half-drop (predicted)", "half-drop (measured)"} <= labels
    assert {"test loss (predicted)", "test loss (measured)"} <= labels
    assert [t.get_text() for t in a_eig.get_legend().get_texts()] == ["mode 1"]  # the one growing mode
    np.testing.assert_allclose(a_gap.get_lines()[0].get_xdata(), cmp.t)
    np.testing.assert_allclose(a_gap.get_lines()[0].get_ydata(), np.maximum(cmp.gap, np.finfo(float).tiny))
    assert all(a.get_xscale() == "log" for a in fig.axes) and a_loss.get_yscale() == "log"
    assert f"SGD lr {LR:g}, {STEPS} steps" in fig._suptitle.get_text() and "network: optax" in fig._suptitle.get_text()
    two = pred.plot(top=2)
    assert len(two.axes) == 2 and len(two.axes[1].get_legend().get_texts()) == 1
    with pytest.raises(ValueError, match="`ax` must be 3 matplotlib Axes"):
        cmp.plot(ax=two.axes)
    with pytest.raises(ValueError, match="`top` must be an integer >= 1"):
        pred.plot(top=0)


def linear_plus_quadratic(W, x):
    """sum_i W_0i x_0 + Tr[W' W'^T x' x'^T]: an NQF with a linear term g(x) = (x_0, 0, ...) (Theorem 12)."""
    return jnp.sum(W[0] * x[0]) + jnp.sum((W[1:].T @ x[1:]) ** 2)


def test_a_linear_term_enters_the_test_outputs_through_mu():
    """With g != 0 the test outputs need mu(t): the map's equal the module's own SGD to rounding."""
    import warnings

    rng = np.random.default_rng(3)
    x, xt = rng.standard_normal((40, 4)) / 2, rng.standard_normal((20, 4)) / 2
    y, yt = (a[:, 0] / 2 + a[:, 1] ** 2 for a in (x, xt))
    net = nqf.Network(linear_plus_quadratic, W0=1e-2 * rng.standard_normal((4, 6)))
    opts = dict(lr=0.05, steps=300, save_every=10, x_test=xt, y_test=yt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nqf.ZGZWarning)  # g != 0, as built
        pred = nqf.predict(net, x, y, estimate_departure=False, **opts)
    assert pred.model.has_mean_field and pred.trajectory.mu is not None
    run = nqf.record(net, x, y, optax.sgd(0.05), **opts)
    np.testing.assert_allclose(pred.test_outputs, run.test_outputs, rtol=0, atol=1e-12)
    assert np.abs(pred.test_outputs[-1] - pred.test_outputs[0]).max() > 0.1  # the outputs did move
