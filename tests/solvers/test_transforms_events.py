"""nqf inside JAX code, events (`nqf.Stop`): stop times against closed forms (Eq. E19's ignition
time, the exact loss, a user condition), the gradient of a stop time against dE19/deps, and a
condition already met at t0. Split from test_transforms.py so that the two pytest-xdist workers
(--dist loadfile) share the work."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf

# one user condition for both tests: a `Stop.when` function is static (one compile per function)
Z0_ABOVE = nqf.Stop.when(lambda t, z: z[0] - 0.1, name="z0")


@pytest.fixture(scope="module")
def fig3():
    return nqf.datasets.fig3_data()


def test_events_against_closed_forms(fig3):
    """Stop.ignition at Eq. E19's t*_k (exact for Theorem 6 data with z0 = eps, rho = 1/2);
    Stop.loss_below where the exact loss equals the threshold; a user condition; a condition that
    never holds; the gradient of the ignition time against dE19/deps."""
    eps = 1e-5
    W0 = np.sqrt(eps) * np.eye(5)
    r, C = nqf.theorem6_rates(fig3)
    pred = nqf.predicted_ignition_times(r, C, eps)
    sol = nqf.solve_flow(fig3, W0=W0, t1=40.0, rtol=1e-11, stop=nqf.Stop.ignition(1))
    assert abs(sol.stop_time / pred[1] - 1) < 1e-10 and sol.stop_reason == "ignition(1)"
    assert sol.ts[-1] <= sol.stop_time and sol.z.shape[0] == sol.ts.size
    sol = nqf.solve_flow(fig3, W0=W0, t1=40.0, rtol=1e-11, stop=nqf.Stop.loss_below(0.05))
    exact = nqf.solve_flow(fig3, W0=W0, t1=40.0, ts=[sol.stop_time], method="exact")
    assert abs(exact.loss[0] / 0.05 - 1) < 1e-9
    user = nqf.solve_flow(fig3, W0=W0, t1=40.0, rtol=1e-11, stop=Z0_ABOVE)  # z_0 = 0.1 = 0.1 z_0(inf)
    assert user.stop_reason == "z0"
    assert abs(user.stop_time / nqf.predicted_ignition_times(r, C, eps, rho=0.1)[0] - 1) < 1e-9
    # the same threshold on an interval that ends before it is reached (the loss is 0.05 at
    # t = 12.5): no event; the same compiled program as above (Stop's name is static)
    never = nqf.solve_flow(fig3, W0=W0, t1=10.0, stop=nqf.Stop.loss_below(0.05))
    assert never.stop_time == np.inf and never.stop_reason is None and never.ts.size == 201
    g = jax.grad(
        lambda e: (
            nqf.solve_flow(fig3, W0=jnp.sqrt(e) * jnp.eye(5), t1=40.0, rtol=1e-11, stop=nqf.Stop.ignition(1)).stop_time
        )
    )(eps)
    closed = (1 / r[1]) * (-C[1] / (r[1] - C[1] * eps) - 1 / eps)  # d/deps of E19 (rho = 1/2)
    assert abs(g / closed - 1) < 1e-6
    with pytest.raises(ValueError, match="Stop.ignition needs commuting data"):
        nqf.solve_flow(nqf.DenseData(np.asarray(fig3.dense()), fig3.y), W0=W0, t1=1.0, stop=nqf.Stop.ignition(0))
    with pytest.raises(TypeError, match="`stop` must be an `nqf.Stop`"):
        nqf.solve_flow(fig3, W0=W0, t1=1.0, stop=0.5)


def test_a_condition_met_at_the_start_stops_at_the_start(fig3):
    """Issue 36 B5: a stop condition that already holds at t0 (loss 0.084 below 1.0; z_0 above
    rho z_0(inf); a user condition > 0) stops at t0 with its reason, the state at t0 saved; the
    same under jit. A crossing event alone missed it and ran to t1 with stop_reason None."""
    W0 = 0.5 * np.eye(5)
    sol = nqf.solve_flow(fig3, W0=W0, t1=250.0, stop=nqf.Stop.loss_below(1.0))
    assert sol.stop_time == 0.0 and sol.stop_reason == "loss_below(1)" and sol.ts.tolist() == [0.0]
    np.testing.assert_allclose(sol.M[0], W0 @ W0.T, rtol=1e-15)
    assert np.isfinite(sol.loss).all() and sol.loss[0] < 1.0
    z_inf = nqf.glv_equilibrium(fig3)
    ign = nqf.solve_flow(fig3, z0=0.9 * z_inf, t1=10.0, stop=nqf.Stop.ignition(0))
    assert ign.stop_time == 0.0 and ign.stop_reason == "ignition(0)"
    user = nqf.solve_flow(fig3, W0=W0, t1=10.0, stop=Z0_ABOVE)  # z_0(0) = 0.25: the program compiled above
    assert user.stop_time == 0.0 and user.stop_reason == "z0"
    under_jit = jax.jit(lambda w: nqf.solve_flow(fig3, W0=w, t1=250.0, stop=nqf.Stop.loss_below(1.0)).stop_time)
    assert float(under_jit(W0)) == 0.0
