"""A repeated nqf.predict / nqf.plan / nqf.record call with the same shapes compiles nothing:
backend compiles counted with JAX's monitoring events (issue 34: predict's cost is a fixed
compile once, then the width-independent solve)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nqf
from _jax_events import BACKEND_COMPILE, compile_events

RNG = np.random.default_rng(1)
N_IN, WIDTH, M = 5, 12, 80
X = RNG.standard_normal((M, N_IN)) / np.sqrt(N_IN)
Y = np.tanh(X @ RNG.standard_normal(N_IN))
MLP = eqx.nn.MLP(N_IN, 1, WIDTH, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False,
                 key=jax.random.PRNGKey(1))  # fmt: skip


SGD = optax.sgd(0.05)
CALLS = {
    "predict_map": lambda net: nqf.predict(net, X, Y, lr=0.05, steps=300, init_scale=0.02),
    "predict_flow": lambda net: nqf.predict(net, X, Y, t1=15.0, init_scale=0.02),
    "plan": lambda net: nqf.plan(net, X, Y, lr=0.05, init_scale=0.02),
    "record": lambda net: nqf.record(net, X, Y, SGD, lr=0.05, steps=300, W0=0.02 * net.W),
}


NET = nqf.Network(MLP)  # one network for the file: what the calls share (the extraction) compiles once


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_repeated_call_compiles_nothing(call):
    """The second call on the same `nqf.Network` compiles nothing (its programs are cached on
    the network; a new `nqf.Network(module)` traces them again and finds them in the persistent
    compilation cache). The first call compiles what no earlier call of the file did."""
    net = NET
    with compile_events((BACKEND_COMPILE,)) as first:
        CALLS[call](net)
    with compile_events((BACKEND_COMPILE,)) as again:
        CALLS[call](net)
    assert len(first) > 0 and len(again) == 0, (call, len(first), len(again))
