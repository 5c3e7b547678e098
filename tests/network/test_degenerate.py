"""Degenerate and unstable predictions (issue 35, item 5): a layer whose NQF is flat and a map past
its stability edge return a `Prediction` with a flag and a warning, never an internal error; the
event times that do not exist are nan."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf

RNG = np.random.default_rng(8)
X = RNG.standard_normal((30, 3))
Y = np.sin(X[:, 0])


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, {w.category for w in caught}


def test_a_square_activation_is_a_flat_nqf_with_a_flag():
    """phi(z) = z^2 with a trained readout: f = sum_i a_i (w_i . x)^2 is cubic in the neuron's
    parameters, so A = 0 and the NQF does not learn (the extraction and predict both say so)."""
    mlp = eqx.nn.MLP(
        3, 1, 6, depth=1, activation=jnp.square, use_bias=False, use_final_bias=False, key=jax.random.key(0)
    )
    pred, cats = _caught(
        lambda: nqf.predict(nqf.Network(mlp), X, Y, nqf.SGD(0.05, steps=200), init_scale=0.1, estimate_departure=False)
    )
    assert nqf.DegenerateWarning in cats
    assert pred.flags == ["flat"] and not pred.growing.any()
    assert np.isnan(pred.half_drop_time) and np.isnan(pred.drop_times).all()
    np.testing.assert_allclose(pred.loss, pred.loss[0], rtol=1e-12)  # independent fact: A = 0, g = 0


def test_an_exactly_quadratic_layer_past_its_edge_is_flagged_unstable():
    W0 = 1e-2 * RNG.standard_normal((3, 4))
    net = nqf.Network(lambda W, x: jnp.sum((W.T @ x) ** 2), W0=W0)
    stable, _ = _caught(lambda: nqf.plan(net, X, Y))
    lr = 1.15 * stable.lr_edge  # past the edge: the map catapults (at 1.6 x it diverges: a FloatingPointError)
    pred, cats = _caught(lambda: nqf.predict(net, X, Y, nqf.SGD(lr, steps=300), estimate_departure=False))
    assert nqf.HorizonWarning in cats and "unstable" in pred.flags
    assert pred.drop_times.shape == (pred.plateau_levels.size - 1,)  # nan where levels do not decrease
    ok, _ = _caught(lambda: nqf.predict(net, X, Y, nqf.SGD(0.3 * stable.lr_edge, steps=300), estimate_departure=False))
    assert "unstable" not in ok.flags


@pytest.mark.parametrize("levels", [[1.0, 0.5, 0.7, 0.1], [1.0, np.nan, 0.1]])
def test_drops_between_levels_that_do_not_decrease_are_nan(levels):
    from nqf.network import _events

    t = np.linspace(0, 10, 201)
    curves = _events.Curves(
        t_loss=t, loss=np.exp(-t), t_eig=t, eigenvalues=np.ones((t.size, 1)), flow=None, resolution="saved"
    )
    got = _events.drops(curves, np.array(levels))
    ok = np.isfinite(levels[:-1]) & np.isfinite(levels[1:]) & (np.diff(levels) < 0)
    assert np.isnan(got[~ok]).all() and np.isfinite(got[ok]).all()
    for i in np.flatnonzero(ok):  # each measured drop is the time the loss crosses its midpoint
        np.testing.assert_allclose(np.exp(-got[i]), 0.5 * (levels[i] + levels[i + 1]), rtol=1e-3)
