"""One training description for predict and record (issue 35, item 1): on an exactly quadratic layer
(its NQF is the layer itself) the predicted map and the module trained by the optax optimizer that
`record` builds from the same `nqf.SGD` agree to rounding, with a schedule, momentum, weight decay
and minibatches; the deprecated keywords give the same numbers; bad combinations are named."""

import warnings

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nqf

RNG = np.random.default_rng(5)
P, D, M = 5, 7, 60
X = RNG.standard_normal((M, P)) / np.sqrt(P)
Y = np.einsum("mi,ij,mj->m", X, np.diag([2.0, 1.0, 0.5, 0.0, 0.0]), X)
W0 = 1e-2 * RNG.standard_normal((P, D))
STEPS = 300
SCHEDULE = optax.warmup_cosine_decay_schedule(0.0, 0.1, 30, STEPS)


def quadratic(W, x):
    """f(W, x) = Tr[W W^T x x^T] (g = B = 0)."""
    return jnp.sum((W.T @ x) ** 2)


NET = nqf.Network(quadratic, W0=W0)


@pytest.mark.parametrize(
    "training",
    [
        nqf.SGD(SCHEDULE, steps=STEPS, momentum=0.7, weight_decay=1e-3),
        nqf.SGD(0.05, steps=STEPS, momentum=0.5, nesterov=True, batch_size=16, key=3),
    ],
    ids=["schedule-momentum-decay", "nesterov-minibatch"],
)
def test_predict_and_record_of_one_description_agree_to_rounding(training):
    pred = nqf.predict(NET, X, Y, training, estimate_departure=False, step_values="loss")
    run = nqf.record(NET, X, Y, training, step_values="loss")
    np.testing.assert_allclose(run.t, pred.t[np.searchsorted(pred.trajectory.steps, run.steps)], rtol=1e-14)
    np.testing.assert_allclose(pred.trajectory.step_loss, run.step_loss, rtol=1e-10)
    np.testing.assert_allclose(pred.trajectory.M[-1], run.M[-1], rtol=0, atol=1e-12 * np.abs(run.M[-1]).max())
    assert run.optimizer == training.label() and pred.settings["training"] == training.label()
    again = pred.record(step_values="loss")  # the prediction's own description, batches included
    np.testing.assert_array_equal(again.step_loss, run.step_loss)


def test_deprecated_keywords_build_the_same_description():
    new = nqf.predict(
        NET, X, Y, nqf.SGD(0.05, steps=100, batch_size=10, key=1), estimate_departure=False, target="horizon"
    )
    with pytest.warns(DeprecationWarning, match=r"predict\(net, x, y, SGD\(lr=0.05, steps=100, b=10\)\)"):
        old = nqf.predict(
            NET, X, Y, lr=0.05, steps=100, batch_size=10, key=1, estimate_departure=False, target="horizon"
        )
    np.testing.assert_array_equal(old.loss, new.loss)
    with pytest.warns(DeprecationWarning, match="Flow"):
        flow = nqf.predict(NET, X, Y, t1=5.0, estimate_departure=False, target="horizon")
    assert flow.settings["training"] == "Flow(t1=5)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec = nqf.record(NET, X, Y, optax.sgd(0.05), lr=0.05, steps=100, batch_size=10, key=1)
    assert {w.category for w in caught} == {DeprecationWarning}
    rec_new = nqf.record(NET, X, Y, nqf.SGD(0.05, steps=100, batch_size=10, key=1))
    np.testing.assert_allclose(rec.loss, rec_new.loss, rtol=1e-13)


def test_an_optimizer_keeps_the_description_time_axis_and_a_wrong_unit_is_refused():
    adam = nqf.record(NET, X, Y, nqf.SGD(1e-3, steps=20), optimizer=optax.adam(1e-3))
    assert "time axis of SGD(lr=0.001, steps=20)" in adam.optimizer
    np.testing.assert_allclose(adam.t, 1e-3 * adam.steps)
    with pytest.raises(ValueError, match=r"first step is -0.2 x gradient, but the time unit is lr = 0.1"):
        nqf.record(NET, X, Y, nqf.SGD(0.1, steps=5), optimizer=optax.sgd(0.2))
    with pytest.raises(ValueError, match="momentum or weight decay"):
        nqf.record(NET, X, Y, nqf.SGD(0.1, steps=5, momentum=0.9), optimizer=optax.adam(1e-3))


def test_bad_combinations_are_named():
    with pytest.raises(ValueError, match="predict needs a training description"):
        nqf.predict(NET, X, Y)
    with pytest.raises(TypeError, match="record trains the module step by step"):
        nqf.record(NET, X, Y, nqf.Flow(5.0))
    with pytest.raises(ValueError, match="given beside the training description"):
        nqf.predict(NET, X, Y, nqf.Flow(5.0), lr=0.1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'lrate'"):
        nqf.predict(NET, X, Y, lrate=0.1)
    with pytest.raises(ValueError, match="`save_every` gives the saved steps of the map"):
        nqf.predict(NET, X, Y, nqf.Flow(5.0), save_every=3)
    with pytest.raises(ValueError, match="`ts` gives the saved times of a flow"):
        nqf.predict(NET, X, Y, nqf.SGD(0.1, steps=3), ts=[0.0, 0.1])
    with pytest.raises(ValueError, match="describe the discrete map: give `lr`"):
        nqf.predict(NET, X, Y, t1=5.0, steps=10)
    pred = nqf.predict(NET, X, Y, nqf.Flow(5.0), estimate_departure=False, target="horizon")
    with pytest.raises(ValueError, match="flow prediction has no learning rate"):
        pred.record()
    with pytest.raises(ValueError, match="past the prediction's horizon"):
        pred.record(nqf.SGD(0.1, steps=100))
