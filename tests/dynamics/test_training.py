"""nqf.SGD / nqf.Flow: the one training description; per-step learning rates in the exact map
checked against weight-space gradient descent written out by hand; bad input named."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nqf
from nqf.dynamics._training import step_times

RNG = np.random.default_rng(3)
P, M_, D = 4, 6, 5
A = RNG.standard_normal((M_, P, P))
A = (A + A.transpose(0, 2, 1)) / 2
Y = RNG.standard_normal(M_)
DATA = nqf.DenseData(A, Y)
W0 = 0.1 * RNG.standard_normal((P, D))
RATES = np.linspace(0.05, 0.0, 40)  # a linear decay to zero: the last step does not move


def _w_space(rates, beta=0.0, gamma=0.0, nesterov=False):
    """Gradient descent on W of L(W) = mean (Tr[W W^T A] - y)^2 + gamma/2 |W|^2, heavy-ball or
    Nesterov momentum (torch convention), rate lr_n at step n."""

    def loss(W):
        f = jnp.einsum("mij,ij->m", A, W @ W.T)
        return jnp.mean((f - Y) ** 2) + 0.5 * gamma * jnp.sum(W**2)

    grad = jax.jit(jax.grad(loss))
    W, v = jnp.asarray(W0), jnp.zeros_like(W0)
    for r in rates:
        g = grad(W)
        v = beta * v + g
        W = W - r * ((g + beta * v) if nesterov else v)
    return np.asarray(W)


@pytest.mark.parametrize("beta, gamma, nesterov", [(0.0, 0.0, False), (0.6, 0.01, False), (0.6, 0.0, True)])
def test_per_step_rates_are_weight_space_gd_with_that_schedule(beta, gamma, nesterov):
    sgd = nqf.SGD(RATES, momentum=beta, weight_decay=gamma, nesterov=nesterov)
    traj = nqf.closed_sgd(DATA, sgd, W0=W0, save_every=7, step_values="loss")
    W = _w_space(RATES, beta, gamma, nesterov)
    np.testing.assert_allclose(traj.M[-1], W @ W.T, rtol=0, atol=1e-14)
    t = np.concatenate([[0.0], np.cumsum(RATES)])
    np.testing.assert_allclose(traj.t, t[traj.steps], rtol=1e-15)
    np.testing.assert_allclose(traj.step_times, t, rtol=1e-15)
    assert traj.steps[-1] == 40 and float(sgd.t_final) == pytest.approx(RATES.sum(), rel=1e-15)


def test_an_optax_schedule_is_evaluated_per_step_and_a_constant_rate_is_unchanged():
    sched = optax.warmup_cosine_decay_schedule(0.0, 0.05, 10, 40)
    sgd = nqf.SGD(sched, steps=40)
    np.testing.assert_allclose(sgd.lr, [float(sched(n)) for n in range(40)], rtol=1e-15)
    assert sgd.scheduled and sgd.lr_max == pytest.approx(0.05)
    a = nqf.closed_sgd(DATA, nqf.SGD(0.03, steps=25, batch_size=3, key=2), W0=W0)
    b = nqf.closed_sgd(DATA, W0=W0, lr=0.03, steps=25, batch_size=3, key=2)
    np.testing.assert_array_equal(a.M, b.M)
    np.testing.assert_array_equal(a.t, b.t)
    assert nqf.SGD(0.1, t1=5.0).steps == 50 and not nqf.SGD(0.1, steps=3).scheduled
    np.testing.assert_allclose(step_times(0.1, 3), [0.0, 0.1, 0.2, 0.3])


def test_a_traced_learning_rate_in_the_description():
    f = jax.jit(jax.vmap(lambda lr: nqf.closed_sgd(DATA, nqf.SGD(lr, steps=20), W0=W0).loss[-1]))
    got = f(jnp.array([0.01, 0.02]))
    want = [nqf.closed_sgd(DATA, W0=W0, lr=lr, steps=20).loss[-1] for lr in (0.01, 0.02)]
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_bad_descriptions_are_named():
    with pytest.raises(ValueError, match="`lr`"):
        nqf.SGD(0.0, steps=3)
    with pytest.raises(ValueError, match="horizon"):
        nqf.SGD(0.1)
    with pytest.raises(ValueError, match=r"`lr` has 3 per-step values but `steps` = 4"):
        nqf.SGD([0.1, 0.1, 0.1], steps=4)
    with pytest.raises(ValueError, match=r"finite and >= 0 at every step; found -0.1 at step 1"):
        nqf.SGD([0.1, -0.1])
    with pytest.raises(ValueError, match="zero at every step"):
        nqf.SGD(np.zeros(3))
    with pytest.raises(ValueError, match="schedule.*give `steps`"):
        nqf.SGD(optax.constant_schedule(0.1))
    with pytest.raises(TypeError, match="schedule must map a step count"):
        nqf.SGD(lambda n: "fast", steps=3)
    with pytest.raises(ValueError, match="not `t1`"):
        nqf.SGD([0.1, 0.1], t1=0.2)
    with pytest.raises(ValueError, match="disagrees with lr x steps"):
        nqf.SGD(0.1, steps=10, t1=2.0)
    with pytest.raises(ValueError, match="momentum"):
        nqf.SGD(0.1, steps=3, momentum=1.0)
    with pytest.raises(ValueError, match="nesterov"):
        nqf.SGD(0.1, steps=3, nesterov=True)
    with pytest.raises(ValueError, match="not both"):
        nqf.SGD(0.1, steps=3, batch_size=2, batch_indices=np.zeros((3, 2), int))
    with pytest.raises(ValueError, match=r"`batch_indices` must have shape \(steps, b\) = \(3, b\)"):
        nqf.SGD(0.1, steps=3, batch_indices=np.zeros((4, 2), int))
    with pytest.raises(ValueError, match="`t1`"):
        nqf.Flow(-1.0)
    with pytest.raises(ValueError, match="`loss`"):
        nqf.Flow(1.0, loss="hinge")


def test_the_engines_take_the_description_once():
    with pytest.raises(ValueError, match="`lr` given both as keywords and in the SGD description"):
        nqf.closed_sgd(DATA, nqf.SGD(0.1, steps=3), W0=W0, lr=0.1)
    with pytest.raises(TypeError, match="nqf.Flow is solved by nqf.solve_flow"):
        nqf.closed_sgd(DATA, nqf.Flow(1.0), W0=W0)
    for fn in (nqf.closed_sgd_sweep, nqf.map_term):
        with pytest.raises(ValueError, match="takes a constant learning rate"):
            fn(DATA, nqf.SGD(RATES), W0=W0)
    term = nqf.map_term(DATA, nqf.SGD(0.05, steps=4, momentum=0.5), W0=W0)
    assert float(term.lr) == 0.05 and term.momentum
