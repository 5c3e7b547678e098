"""The float64 policy (nqf._core._config): `import nqf` turns on jax_enable_x64 for the process; if the
user turns it off afterwards, every entry point and every existing result that computes with JAX
refuses with the documented RuntimeError (never float32 values, NaN or a misleading error), and
works again, in float64, once the flag is back on.

Each test turns the flag off and back on inside a `finally`: the other tests need float64."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf

DOCUMENTED = r"nqf needs float64, but JAX's `jax_enable_x64` flag is off"


@contextlib.contextmanager
def x64_off():
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)


def _module(W, x):  # a permutation-symmetric C^3 module with ZGZ: a valid input of `extract`
    return jnp.sum(jnp.tanh(W.T @ x) ** 2)


@pytest.fixture(scope="module")
def fig3():
    return nqf.datasets.fig3_data()


@pytest.fixture(scope="module")
def solved(fig3):
    return nqf.solve_flow(fig3, z0=np.full(5, 1e-3), t1=100.0, dense=True)


ENTRY_POINTS = {
    "DenseData": lambda d, s: nqf.DenseData(np.stack([np.eye(2)]), [1.0]),
    "solve_flow": lambda d, s: nqf.solve_flow(d, z0=np.full(5, 1e-3), t1=1.0, dense=True),
    "closed_sgd": lambda d, s: nqf.closed_sgd(d, M0=1e-3 * np.eye(5), lr=0.1, steps=3),
    "glv_gd": lambda d, s: nqf.glv_gd(d, np.full(5, 1e-3), lr=0.1, steps=3, backend="jax"),
    "glv_rhs": lambda d, s: nqf.glv_rhs(d, np.full(5, 1e-3), backend="jax"),
    "excess_loss": lambda d, s: nqf.excess_loss(d, np.full(5, 1e-3)),
    "measure_ignition_times": lambda d, s: nqf.measure_ignition_times(s),
    "measure_ignition_times(eigenvalues)": lambda d, s: nqf.measure_ignition_times(s, quantity="eigenvalues"),
    "measure_sample_ignition_times": lambda d, s: nqf.measure_sample_ignition_times(s),
    "extract": lambda d, s: nqf.extract(_module, np.ones((2, 3)), 3),
}


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_entry_points_refuse_without_x64(fig3, solved, name):
    call = ENTRY_POINTS[name]
    with x64_off():
        with pytest.raises(RuntimeError, match=DOCUMENTED):
            call(fig3, solved)
    call(fig3, solved)  # and work again with float64 back on


def test_ignition_times_unchanged_after_x64_round_trip(solved):
    before = nqf.measure_ignition_times(solved)
    with x64_off():
        with pytest.raises(RuntimeError, match=DOCUMENTED):
            nqf.measure_ignition_times(solved)
    np.testing.assert_array_equal(nqf.measure_ignition_times(solved), before)
    assert np.isfinite(before).all()


METHODS = {
    "evaluate": lambda s: s.evaluate([1.0, 2.0]),
    "z_at": lambda s: s.z_at([1.0, 2.0]),
    "M_at": lambda s: s.M_at([1.0, 2.0]),
    "mu_at": lambda s: s.mu_at([1.0, 2.0]),
    "M (derived state)": lambda s: s.M,
    "loss": lambda s: s.loss,
}


@pytest.mark.parametrize("name", list(METHODS))
def test_flow_solution_methods_refuse_without_x64(fig3, name):
    """On an existing solution with the default dense=None: the dense output is built on first
    use, so a method that ran in float32 would also cache a float32 interpolant for later."""
    sol = nqf.solve_flow(fig3, W0=np.sqrt(1e-3) * np.eye(5), t1=2.0, form="M-mu")
    with x64_off():
        with pytest.raises(RuntimeError, match=DOCUMENTED):
            METHODS[name](sol)
    out = np.asarray(jax.tree.leaves(METHODS[name](sol))[0])
    assert out.dtype == np.float64
    ref = nqf.solve_flow(fig3, W0=np.sqrt(1e-3) * np.eye(5), t1=2.0, form="M-mu")
    np.testing.assert_array_equal(out, np.asarray(jax.tree.leaves(METHODS[name](ref))[0]))
