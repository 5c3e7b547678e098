"""Define your own layer in JAX, get its structure matrices A(x) by autodiff (`nqf.extract`), and
compare them with the closed form of the architecture dictionary (`nqf.structure`, Prop. 1).

    python examples/define_a_layer.py

The layer is a function f(W, x) of the weights W of shape (p, d) -- one column per neuron, any
width d -- and one input x. Here: a two-layer tanh MLP without bias, neuron w_i = [u_i; v_i].
"""

import warnings

import jax.numpy as jnp
import numpy as np

import nqf

n = 4  # input dimension
p = n + 1  # parameters per neuron: u_i (n) and v_i (1)


def mlp_layer(W, x):
    U, v = W[:n], W[n]  # U (n, d), v (d,)
    return jnp.sum(v * jnp.tanh(U.T @ x))


rng = np.random.default_rng(0)
x = rng.standard_normal((16, n))  # m = 16 inputs
y = np.sin(x[:, 0])  # any labels

# 1. A(x) by autodiff: the Hessian at W = 0 of two neurons (never the (p d)^2 Hessian).
data = nqf.extract(mlp_layer, x, p, y=y)  # DenseData, A of shape (m, p, p)
print(f"extracted: {type(data).__name__}, A shape {data.dense().shape}")

# 2. The closed form of Proposition 1: A(x) = phi'(0)/2 [[0, x], [x^T, 0]], rank 2.
closed = nqf.structure.mlp(x, y)  # LowRankData (never builds (m, p, p) itself)
err = float(np.abs(np.asarray(data.dense()) - np.asarray(closed.dense())).max())
print(f"max |A_autodiff - A_closed| = {err:.1e}")
assert err < 1e-12

# 3. The NQF is the layer near W = 0: f_x(W) = Tr[W W^T A(x)] + O(|W|^4) (odd phi: Z2 symmetry).
for scale in (1e-1, 1e-2):
    W = scale * rng.standard_normal((p, 50))  # width 50
    f_layer = np.array([mlp_layer(W, xi) for xi in x])
    f_nqf = np.asarray(data.traces(W @ W.T))
    rel = np.abs(f_layer - f_nqf).max() / np.abs(f_layer).max()
    print(f"|W| ~ {scale:g}: relative difference layer vs NQF = {rel:.1e}")
    assert rel < 50 * scale**2  # the relative difference shrinks like |W|^2

# 4. The same order parameters train the same way at any width: solve the closed flow.
sol = nqf.solve_flow(data, W0=1e-3 * rng.standard_normal((p, 50)), t1=200.0)
print(f"closed flow: loss {sol.loss[0]:.3f} -> {sol.loss[-1]:.3f} (t = eta * steps = 200)")


# 5. A layer that breaks an assumption of Theorem 1 is refused or flagged:
#    a bias inside the nonlinearity gives a linear term g(x) (ZGZ fails, Theorem 12) ...
def biased_layer(W, x):
    U, v = W[:n], W[n]
    return jnp.sum(v * jnp.tanh(U.T @ x + 0.5))


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = nqf.extract(biased_layer, x, p, y=y)
print(f"bias: {type(model).__name__} with g of shape {model.g.shape}; warned: {[w.category.__name__ for w in caught]}")

#    ... and a ReLU is not C^3 at W = 0, so it has no quadratic normal form.
try:
    nqf.extract(lambda W, x: jnp.sum(W[n] * jnp.maximum(W[:n].T @ x, 0.0)), x, p)
except nqf.SmoothnessError as e:
    print(f"ReLU refused: {type(e).__name__}: {str(e)[:90]}...")
