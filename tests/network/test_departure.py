"""The departure estimate from a neuron subsample (nqf.network._departure) and the init-size check:
the grouped estimate at s = d against a direct full-width computation (autodiff gradient and
Hessian-vector product), the subsample's mean and error bar against the full width over many
subsamples, the error bar's 1/sqrt(s) shrinkage, a cost that does not depend on d, the
additivity check's fallback, `init_gap` against numpy, and bad input."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.data._model import as_model
from nqf.network import _departure
from nqf.network._predict import _extract

KEY = jax.random.PRNGKey(1)
RNG = np.random.default_rng(3)
N_IN, WIDTH, M = 6, 64, 120
X = RNG.standard_normal((M, N_IN)) / np.sqrt(N_IN)
Y = np.tanh(X @ RNG.standard_normal(N_IN))[:, None]


def _phi(z):
    return jnp.tanh(z) + 0.5 * z**2  # T3 != 0 and T4 != 0


def _mlp(width, key=KEY):
    return eqx.nn.MLP(N_IN, 1, width, depth=1, activation=_phi, use_bias=False, use_final_bias=False, key=key)


class Wrapped(eqx.Module):
    mlp: eqx.nn.MLP
    mean: bool = eqx.field(static=True, default=False)

    def __call__(self, x):
        out = self.mlp(x)
        return out / self.mlp.layers[0].weight.shape[0] if self.mean else out


def _net(width, mean=False):
    return nqf.Network(Wrapped(_mlp(width), mean), neurons={"mlp.layers[0].weight": 0, "mlp.layers[1].weight": 1})


NET = _net(WIDTH)
W = 0.25 * RNG.standard_normal((N_IN + 1, WIDTH))  # a point where the remainder matters
PATH = _departure.WeightPath(lambda i: W, None)


@pytest.fixture(scope="module")
def model():
    return nqf.extract(NET, X, NET.p, y=Y[:, 0])


def _groups(s, seed):
    return np.array_split(np.random.default_rng(seed).permutation(WIDTH)[:s], min(8, s))


def _estimate(model, s, seed, path=PATH):
    """(pooled (3,), standard error (3,)) of (R_T, rate, R_module) from s neurons."""
    parts = _departure._parts(NET, model, X, Y, path, [0], _groups(s, seed))[0][[0, 1, 3]]
    se = np.sqrt(1 - s / WIDTH) * _departure._jackknife_se(parts[:, 1:].T)
    return parts[:, 0], se


def _reference(model):
    """R_T, |P_null grad R|^2, saturation, R_module at the full width, directly: autodiff gradient
    of the full loss, the projection of `_null_part` (tested against a dense Jacobian in
    test_predict), the curvature by a Hessian-vector product (jax.jvp of jax.grad)."""
    mdl = as_model(model)
    y = jnp.asarray(Y[:, 0])
    Wj = jnp.asarray(W)

    def taylor(V):
        t3, t4, full = jax.vmap(lambda xx: _departure._taylor_one(NET, V, xx))(jnp.asarray(X))
        return (t3 + t4).reshape(-1), full.reshape(-1)

    def nqf_out(V):
        return mdl.outputs_factor(V, V.sum(axis=1))

    mse = lambda f: jnp.mean((f - y) ** 2)  # noqa: E731
    loss_t = lambda V: mse(nqf_out(V) + taylor(V)[0])  # noqa: E731

    Ua, Ub, front = _departure._output_span(mdl.data)  # numpy on the data: outside jit

    @jax.jit  # one compiled program instead of a few hundred op-by-op ones (issue 37: suite time)
    def quantities(V):
        g = jax.grad(loss_t)(V) - jax.grad(lambda V: mse(nqf_out(V)))(V)
        u = _departure._null_part(V, g, (Ua, Ub), front)
        rate = jnp.sum(u**2)
        curv = jnp.vdot(u, jax.jvp(jax.grad(loss_t), (V,), (u,))[1]) / rate
        L = mse(nqf_out(V))
        return loss_t(V) - L, rate, curv, mse(taylor(V)[1]) - L

    r_t, rate, curv, r_module = (float(v) for v in quantities(Wj))
    sat = rate / (2 * curv) if curv > 0 else np.inf
    return np.array([r_t, rate, sat, r_module])


@pytest.fixture(scope="module")
def reference(model):
    """`_reference(model)`, computed once for the file (issue 37: one compiled program)."""
    return _reference(model)


def test_all_neurons_in_groups_is_the_full_width_estimate(model, reference):
    """s = d (8 groups of 8, each a width-8 module) against the direct full-width computation."""
    parts = _departure._parts(NET, model, X, Y, PATH, [0], _groups(WIDTH, 0))[0]
    ref = reference
    assert np.all(np.isfinite(ref)) and ref[1] > 0 and abs(ref[0]) > 1e-3
    np.testing.assert_allclose(parts[[0, 1, 3], 0], ref[[0, 1, 3]], rtol=1e-9)
    np.testing.assert_allclose(parts[2, 0], ref[2], rtol=1e-5)  # central differences at 1e-3 |W|


@pytest.fixture(scope="module")
def subsamples(model):
    """(pooled, se) arrays (12, 3) of 12 subsamples: s = 32 at W; s = 8 and s = 32 at 0.4 W."""
    small = _departure.WeightPath(lambda i: 0.4 * W, np.eye(WIDTH))
    out = {}
    for key, s, path in (("W", 32, PATH), ("small8", 8, small), ("small32", 32, small)):
        est = [_estimate(model, s, seed, path) for seed in range(12)]
        out[key] = np.array([e[0] for e in est]), np.array([e[1] for e in est])
    return out


def test_subsample_mean_matches_the_full_width_within_its_error_bars(reference, subsamples):
    """Over 12 subsamples (fixed seeds) of s = 32 the mean of the estimates of R_T, the drift
    rate and R_module is within 4 standard errors of the mean (from the jackknife bars) of the
    full-width value. The bars of R_T and R_module are the estimates' spread to within a factor
    2; the rate's bar (the residual weights held at the pooled estimate) is smaller than its
    spread, by 1.5 to 3 here (measured when written: 2.05)."""
    ref = reference[[0, 1, 3]]
    theta, se = subsamples["W"]
    rms, spread = np.sqrt(np.mean(se**2, axis=0)), theta.std(axis=0, ddof=1)
    for q in range(3):
        sem = np.sqrt(np.sum(se[:, q] ** 2)) / len(theta)
        assert abs(theta[:, q].mean() - ref[q]) < 4 * sem, (q, theta[:, q].mean(), ref[q], sem)
    assert np.all((0.5 < rms[[0, 2]] / spread[[0, 2]]) & (rms[[0, 2]] / spread[[0, 2]] < 2.0)), rms / spread
    assert 1.5 < spread[1] / rms[1] < 3.0, spread[1] / rms[1]


def test_the_error_bar_shrinks_like_one_over_sqrt_s(subsamples):
    """The jackknife bar from s = 8 against s = 32 of d = 64 neurons (at 0.4 W, where R is
    nearly linear in the sampled sums; at W its quadratic part makes small s noisier):
    sqrt(32 / 8) times the finite-population factors sqrt((1 - 8/64) / (1 - 32/64)), 2.65, within
    40 % (measured when written: 1.12, 0.77, 1.11 times it for R_T, the rate, R_module)."""
    expected = 2.0 * np.sqrt((1 - 8 / 64) / (1 - 32 / 64))
    ratio = np.sqrt(np.mean(subsamples["small8"][1] ** 2, axis=0) / np.mean(subsamples["small32"][1] ** 2, axis=0))
    assert np.all((0.6 * expected < ratio) & (ratio < 1.4 * expected)), ratio / expected


def _cost(net, s):
    """FLOPs (XLA's cost analysis) of the program `remainder` runs, with the arguments it passes."""
    calls = []
    real = _departure._remainder_program

    def spy(net, front):
        fn = real(net, front)

        def run(*args):
            calls.append(fn.lower(*args).cost_analysis()["flops"])
            return fn(*args)

        return run

    d = net.d
    W = 0.3 * RNG.standard_normal((net.p, d))
    model = nqf.extract(net, X, net.p, y=Y[:, 0])
    path = _departure.WeightPath(lambda i: W, None)
    net.__dict__.pop("_programs", None)  # a program cached by an earlier call would bypass the spy
    _departure._remainder_program = spy
    try:
        dep = _departure.remainder(net, model, X, Y, np.array([0.0, 1.0]), np.ones(2), path, 0.05, neurons=s)
    finally:
        _departure._remainder_program = real
    return calls[0], dep


def test_the_estimate_costs_the_same_at_any_width():
    """From s = 16 neurons the program's FLOP count is the same for d = 32 and d = 128; at the full
    width it grows with d."""
    small, big = _net(32), _net(128)
    c32, dep = _cost(small, 16)
    c128, _ = _cost(big, 16)
    assert dep.settings["sampling"] == "16 of the d = 32 neurons" and dep.settings["groups"] == 8
    assert c32 == c128
    assert _cost(big, 128)[0] > 4 * c128


def test_a_mean_over_units_falls_back_to_the_full_width():
    """The additivity check: f(W) = f(0) + the sum of its blocks' f(W_b) - f(0) holds for the sum
    module and fails for a mean over units (a cross-neuron term), where the estimate uses all d."""
    assert _departure._additive(NET, W, 8, X)
    mean = _net(WIDTH, mean=True)
    assert not _departure._additive(mean, W, 8, X)
    model = _extract(mean, X, Y, 1, {"normalization": "mean"})  # predict's: the sum form scaled by 1 / d
    dep = _departure.remainder(mean, model, X, Y, np.array([0.0, 1.0]), np.ones(2), PATH, 0.05, neurons=16)
    assert dep.settings["groups"] == 1 and dep.settings["neurons"] == WIDTH
    assert "full width" in dep.settings["sampling"] and np.all(dep.gap_se == 0)
    every = _departure.remainder(mean, model, X, Y, np.array([0.0, 1.0]), np.ones(2), PATH, 0.05, neurons=WIDTH)
    assert every.settings["groups"] == 1  # s = d in 8 groups would also be wrong for a mean
    np.testing.assert_array_equal(every.gap, dep.gap)


def test_bad_departure_neurons_are_named():
    net = _net(16)
    for bad in (17, 1, 2.5, True):
        with pytest.raises(ValueError, match=r"`departure_neurons` must be an integer s with 2 <= s <= d = 16"):
            nqf.predict(net, X, Y, t1=1.0, departure_neurons=bad)


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    mlp = eqx.nn.MLP(
        64, 1, 256, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False, key=jax.random.key(0)
    )
    return nqf.Network(mlp), images / 16.0, (labels - 4.5) / 4.5


def _numpy_gap(W, x, y, L0):
    """|L_module - L_NQF| / L0 for f = sum_i v_i tanh(u_i . x) and its NQF sum_i v_i u_i . x."""
    U, v = W[:-1], W[-1]
    module, quadratic = np.tanh(x @ U) @ v, (x @ U) @ v
    return abs(np.mean((module - y) ** 2) - np.mean((quadratic - y) ** 2)) / L0


def test_init_gap_warns_at_the_modules_own_init(digits):
    """The README's digits MLP: at init_scale 0.01 the gap is tiny and nothing warns (the suite
    makes any nqf warning an error); at the module's own init it warns InitScaleWarning. The gaps
    against numpy at W0 and at the path's first saved time after 5 % of the horizon."""
    net, x, y = digits
    kw = dict(lr=0.05, steps=1000, estimate_departure=False)
    small = nqf.predict(net, x, y, init_scale=0.01, **kw)
    with pytest.warns(nqf.InitScaleWarning, match="initialization is not small"), warnings.catch_warnings():
        warnings.simplefilter("ignore", nqf.HorizonWarning)  # lr 0.05 is at this init's stability edge
        own = nqf.predict(net, x, y, **kw)
    for pred in (small, own):
        i = int(np.flatnonzero(pred.t == pred.settings["init_gap_t"])[0])
        W_s = _departure.weights_along(pred.trajectory, pred.W0)(i)
        L0 = np.mean(((x @ pred.W0[:-1]) @ pred.W0[-1] - y) ** 2)
        expected = [_numpy_gap(pred.W0, x, y, L0), _numpy_gap(W_s, x, y, L0)]
        np.testing.assert_allclose(pred.init_gap, expected, rtol=1e-8, atol=1e-14)  # a difference of losses
        assert pred.settings["init_gap_t"] >= 0.05 * pred.t[-1]
    assert small.init_gap.max() < 1e-5 < _departure.INIT_GAP_TOL < own.init_gap.max()


def test_the_default_estimates_up_to_a_data_size():
    """Default (None): on up to m k p = AUTO_SIZE (the digits MLP: 1797 x 65), off above with the
    reason (the issue's 20000 x 257); True and False as given."""
    assert _departure.departure_on(None, 1797 * 65) == (True, "")
    on, why = _departure.departure_on(None, 20000 * 257)
    assert not on and "m k p = 5140000 > 200000" in why and "estimate_departure=True" in why
    assert _departure.departure_on(True, 20000 * 257) == (True, "")
    assert _departure.departure_on(False, 10) == (False, "estimate_departure=False")
