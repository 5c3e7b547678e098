"""`nqf.modules.MoE` (Proposition 5): the weight-space mixture of experts against its NQF."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nqf.data.modules import MoE


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(7)
    return MoE(3, 2), rng.standard_normal((5, 3)), rng.standard_normal((9, 4))


def test_forward_is_the_mixture(setup):
    """f_o = sum_i tanh(r_i^T x) tanh(theta_io^T x), written out with the documented layout."""
    mod, xs, W = setup
    x = xs[0]
    ref = np.zeros(2)
    for i in range(4):
        r, Th = W[:3, i], W[3:, i].reshape(2, 3).T  # vec: w[3 + 3 o + j] = Theta[j, o]
        ref += np.tanh(r @ x) * np.tanh(Th.T @ x)
    np.testing.assert_allclose(np.asarray(mod(jnp.asarray(W), x)), ref, rtol=1e-13)


def test_nqf_is_the_second_order_term(setup):
    """Tr[W W^T A_o(x)] (closed-form structure) = the module's second-order term in the scale s:
    f(sW) = s^2 NQF + O(s^4) (odd tanh), extracted from two plain forward evaluations by
    Richardson extrapolation (error O(s^4)); the feed-forward features agree with it."""
    mod, xs, W = setup
    data = mod.structure(xs)
    s = 1e-3
    f1 = np.asarray(mod.apply(jnp.asarray(s * W), jnp.asarray(xs))) / s**2
    f2 = np.asarray(mod.apply(jnp.asarray(s / 2 * W), jnp.asarray(xs))) / (s / 2) ** 2
    second = ((4 * f2 - f1) / 3).reshape(-1)
    np.testing.assert_allclose(np.asarray(data.traces(jnp.asarray(W @ W.T))), second, rtol=1e-8, atol=1e-10)
    F = np.asarray(mod.nqf_apply(jnp.asarray(W), mod.nqf_features(xs)))
    np.testing.assert_allclose(F.reshape(-1), second, rtol=1e-8, atol=1e-10)
    assert mod.p == 9 and np.all(np.asarray(mod.f0(xs, 4)) == 0)


def test_refuses_nonzero_at_origin():
    with pytest.raises(ValueError, match="psi"):
        MoE(3, 1, psi=jax.nn.sigmoid)
    with pytest.raises(ValueError, match="phi"):
        MoE(3, 1, phi=jnp.cosh)
    with pytest.raises(ValueError, match="n_in"):
        MoE(0)


def test_refuses_activations_with_a_kink_at_zero():
    """Proposition 5 assumes C^3 gates and experts: ReLU (value 0 at 0, but its NQF is not its
    expansion) was accepted and failed later in `extract`; now refused at construction, naming the
    argument, the order of the jump and its one-sided values. The same for a kink of order 2 (ELU)
    and 3 (x^2 |x|); smooth activations with value 0 at 0 pass."""
    with pytest.raises(
        ValueError, match=r"`phi` must be smooth \(C\^3\) at 0.*derivative jumps there: 1 from the right, 0 "
    ):
        MoE(3, 1, phi=jax.nn.relu)
    with pytest.raises(ValueError, match=r"`psi` must be smooth.*its derivative jumps"):
        MoE(3, 1, psi=jnp.abs)
    with pytest.raises(TypeError, match=r"`phi` must be a JAX-traceable"):
        MoE(3, 1, phi=np.tanh)
    with pytest.raises(ValueError, match=r"`phi` must be smooth.*its second derivative jumps"):
        MoE(3, 1, phi=jax.nn.elu)
    with pytest.raises(ValueError, match=r"`phi` must be smooth.*its third derivative jumps"):
        MoE(3, 1, phi=lambda x: x**2 * jnp.abs(x))
    with pytest.raises(ValueError, match=r"`phi` must be finite near 0"):
        MoE(3, 1, phi=jnp.sqrt)
    for f in (jax.nn.gelu, jax.nn.silu, jnp.sin, lambda x: x + 1e3 * x**2, lambda x: jnp.sin(100 * x)):
        MoE(3, 1, phi=f, psi=f)
