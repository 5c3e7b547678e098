"""The autodiff extractor (nqf.extract): assumption checks and the general (g, B) form."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.data._extract import (
    SmoothnessError,
    SymmetryError,
    ZGZWarning,
    extract,
    extract_report,
)
from nqf.modules import MLP

M, N_IN = 3, 4


@pytest.fixture
def xs(rng):
    return rng.standard_normal((M, N_IN))


def test_relu_not_c3(xs):
    mod = MLP(N_IN, 1, phi=jax.nn.relu)
    with pytest.raises(SmoothnessError, match="C\\^3 smoothness at W = 0 fails.*ReLU"):
        extract(mod, xs, mod.p)
    # the same compiled programs again (cached): the report with on_error="warn"
    with pytest.warns(UserWarning, match="C\\^3"):
        _, rep = extract_report(mod, xs, mod.p, on_error="warn")
    assert "smoothness" in rep.failed and rep.order < 2.5 and rep.parity > 0.1


def test_non_symmetric(xs):
    def f(W, x):  # neuron i weighted by i + 1: relabeling changes f
        w = jnp.arange(1, W.shape[1] + 1.0)
        return jnp.sum(w * W[N_IN] * jnp.tanh(W[:N_IN].T @ x))

    with pytest.raises(SymmetryError, match="Permutation symmetry fails"):
        extract(f, xs, N_IN + 1)


def test_bias_inside_nonlinearity(xs):
    """f = sum_i v_i tanh(u_i^T x + 0.5): g = tanh(0.5) on the v entry; the returned general model
    reproduces f to O(|W|^3)."""

    def f(W, x):
        return W[N_IN] @ jnp.tanh(W[:N_IN].T @ x + 0.5)

    with pytest.warns(ZGZWarning, match="ZGZ fails: the gradient of a neuron at W = 0 is nonzero"):
        model, rep = extract_report(f, xs, N_IN + 1)
    assert isinstance(model, nqf.NQFModel) and rep.failed == ("zgz",)
    np.testing.assert_allclose(np.asarray(model.g)[:, N_IN], np.tanh(0.5), atol=1e-15)
    _check_model_matches(model, f, xs, N_IN + 1, order=3)


def test_mean_field_B(xs, rng):
    """Nonlinearity after summing the neurons: f = tanh(sum_i a^T w_i)^2 + sum_i w_i^T S w_i has
    H_12 = 2 a a^T != 0 (B != 0, ZGZ fails); the NQFModel (B convention of nqf.model) matches."""
    a = jnp.asarray(rng.standard_normal(N_IN))

    def f(W, x):
        return jnp.tanh(a @ W.sum(axis=1)) ** 2 + jnp.sum(x[:, None] * W**2)

    with pytest.warns(ZGZWarning, match="neurons couple at second order"):
        model = extract(f, xs, N_IN)
    np.testing.assert_allclose(np.asarray(model.B)[0], np.outer(a, a), atol=1e-14)
    _check_model_matches(model, f, xs, N_IN, order=4)


def _check_model_matches(model, f, xs, p, order):
    rng = np.random.default_rng(5)
    W = rng.standard_normal((p, 3))
    errs = []
    f_all = jax.jit(jax.vmap(f, in_axes=(None, 0)))  # f on every input, one program for both eps
    for eps in (1e-2, 5e-3):
        We = eps * W
        ref = np.asarray(f_all(jnp.asarray(We), xs))
        out = np.asarray(model.outputs(We @ We.T, We.sum(axis=1)))
        errs.append(np.abs(out - ref).max())
    assert np.log2(errs[0] / errs[1]) >= order - 0.2, errs


def test_smooth_exact_quadratic_passes(xs):
    model, rep = extract_report(lambda W, x: x @ W @ W.T @ x, xs, N_IN)
    assert isinstance(model, nqf.DenseData) and rep.order == float("inf") and rep.failed == ()


def test_argument_errors(xs):
    with pytest.raises(ValueError, match="`p`"):
        extract(lambda W, x: 0.0, xs, 0)
    with pytest.raises(ValueError, match="leading batch axis"):
        extract(lambda W, x: 0.0, (xs, xs[:2]), N_IN)
    with pytest.raises(ValueError, match="on_error"):
        extract(lambda W, x: 0.0, xs, N_IN, on_error="ignore")


def test_wide_module_uses_two_neurons(rng):
    """p = 200: the extractor works with (2p)^2 second derivatives, never (p d)^2."""
    mod = MLP(199, 1)
    xs = rng.standard_normal((2, 199))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = extract(mod, xs, mod.p)
    np.testing.assert_allclose(np.asarray(data.dense()), np.asarray(mod.structure(xs).dense()), atol=1e-14)


# -- issue 16: extract on the layers theorists write ---------------------------------------------


def _tanh2(W, x):
    return jnp.sum(jnp.tanh(W.T @ x) ** 2)


@pytest.mark.parametrize("kind, c, ratio", [("mean", lambda d: 1.0 / d, "0.5"), ("sqrt", lambda d: d**-0.5, "0.7071")])
def test_width_normalised_layer_named_or_declared(xs, kind, c, ratio):
    """A mean over neurons / a 1/sqrt(d) factor is named as the cause (not 'not C^3'); declared,
    the sum form is extracted, and the module at width d equals c(d) Tr[W W^T A] to O(|W|^4)."""
    from nqf.data._extract import NormalizationError

    def f(W, x):
        return c(W.shape[1]) * _tanh2(W, x)

    with pytest.raises(NormalizationError, match=rf"depends on the width d.*ratio {ratio}.*normalization='{kind}'"):
        extract(f, xs, N_IN)
    data, rep = extract_report(f, xs, N_IN, normalization=kind)
    assert isinstance(data, nqf.DenseData) and rep.failed == () and rep.width_ratio == pytest.approx(1.0)
    W = 1e-3 * np.random.default_rng(1).standard_normal((N_IN, 3))
    ref = np.array([f(jnp.asarray(W), x) for x in xs])
    out = np.asarray(data.scaled(c(3)).traces(jnp.asarray(W @ W.T)))  # Tr[M A_mu] of the scaled data
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    with pytest.raises(ValueError, match=r"`normalization` must be None, 'mean' \(1/d\) or 'sqrt'"):
        extract(f, xs, N_IN, normalization="l2")


def test_round_off_f0_keeps_the_return_type(xs):
    """0.1 + 0.2 - 0.3 = 5.6e-17: f(0) at round-off is 0 (DenseData), a real f(0) is kept."""
    data, rep = extract_report(lambda W, x: _tanh2(W, x) + (0.1 + 0.2 - 0.3), xs, N_IN)
    assert isinstance(data, nqf.DenseData) and 0 < rep.f0_norm < 1e-16
    model = extract(lambda W, x: _tanh2(W, x) + 1e-3, xs, N_IN)
    assert isinstance(model, nqf.NQFModel)
    np.testing.assert_allclose(np.asarray(model.f0), 1e-3)


@pytest.mark.parametrize(
    "f", [lambda W, x: 1.5 + 0.0 * jnp.sum(W), lambda W, x: jnp.sum(x[:, None] * W**3)], ids=["constant", "cubic"]
)
def test_vanishing_quadratic_part_warns(xs, f):
    from nqf.data._extract import DegenerateWarning

    with pytest.warns(DegenerateWarning, match=r"quadratic part of f at W = 0 vanishes.*A = 0"):
        data = extract(f, xs, N_IN)
    assert float(np.abs(np.asarray(data.A if isinstance(data, nqf.DenseData) else data.data.A)).max()) == 0.0


def test_no_inputs(xs):
    with pytest.raises(
        ValueError, match=r"`x` must hold at least one input \(a leading batch axis m >= 1\); found m = 0"
    ):
        extract(_tanh2, xs[:0], N_IN)


def test_equinox_mlp_adapter_matches_structure(xs):
    """An eqx.nn.MLP (tanh, no biases) through `module_fn`: hidden rows with the readout entries
    as neurons; extract gives the dictionary's MLP matrices (nqf.structure.mlp)."""
    import equinox as eqx

    from nqf.data._extract import module_fn

    mlp = eqx.nn.MLP(
        N_IN, "scalar", 7, 1, activation=jax.nn.tanh, use_bias=False, use_final_bias=False, key=jax.random.PRNGKey(0)
    )
    f, p = module_fn(mlp, [(lambda m: m.layers[0].weight, 0), (lambda m: m.layers[1].weight, 1)])
    assert p == N_IN + 1
    W = np.random.default_rng(0).standard_normal((p, 3))
    np.testing.assert_allclose(f(jnp.asarray(W), xs[0]), W[N_IN] @ np.tanh(W[:N_IN].T @ xs[0]), rtol=1e-13)
    data = extract(f, xs, p)
    np.testing.assert_allclose(np.asarray(data.dense()), np.asarray(nqf.structure.mlp(xs).dense()), atol=1e-13)
    with pytest.raises(ValueError, match=r"disagree on the number of neurons along their axes: layers\[0\].weight: 7"):
        module_fn(mlp, [(lambda m: m.layers[0].weight, 0), (lambda m: m.layers[1].weight, 0)])
    with pytest.raises(ValueError, match=r"the axis of layers\[0\].weight must be an integer axis"):
        module_fn(mlp, [(lambda m: m.layers[0].weight, 2)])
