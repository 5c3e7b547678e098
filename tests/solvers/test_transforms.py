"""nqf inside JAX code: solve_flow under jit, vmap, grad and jacfwd (against the untransformed
call, central finite differences and Theorem 6's z(t)), and results that pickle and round-trip
through save/load. Events (`nqf.Stop`) and the gradient of a stop time: test_transforms_events.py
(a file of its own so that the two pytest-xdist workers, --dist loadfile, share the work)."""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf

T1 = 60.0
TS = np.linspace(0.0, T1, 7)


@pytest.fixture(scope="module")
def fig3():
    return nqf.datasets.fig3_data()


def _final_loss(data, eps, **kw):
    return nqf.solve_flow(data, W0=jnp.sqrt(eps) * jnp.eye(data.p), t1=T1, ts=TS, rtol=1e-11, **kw).loss[-1]


def test_jit_and_vmap_match_the_plain_call(fig3):
    eps = np.array([1e-5, 3e-4])
    plain = np.array([_final_loss(fig3, e) for e in eps])
    jitted = jax.jit(lambda e: _final_loss(fig3, e))
    np.testing.assert_allclose([jitted(e) for e in eps], plain, rtol=1e-12)
    np.testing.assert_allclose(jax.vmap(lambda e: _final_loss(fig3, e))(eps), plain, rtol=1e-12)
    # a FlowSolution returned from jit is a pytree of arrays with the same derived quantities
    W0 = np.sqrt(1e-5) * np.eye(5)
    out = jax.jit(lambda W: nqf.solve_flow(fig3, W0=W, t1=T1, ts=TS, rtol=1e-11))(W0)
    ref = nqf.solve_flow(fig3, W0=W0, t1=T1, ts=TS, rtol=1e-11)
    assert isinstance(out, nqf.FlowSolution) and out.successful
    np.testing.assert_allclose(out.z, ref.z, rtol=1e-12)
    assert out.stats["num_steps"] == ref.stats["num_steps"]


def test_grad_matches_finite_differences_and_theorem6(fig3):
    """d L(T)/d eps by reverse mode (default under tracing) and forward mode, against a central
    difference of the plain solve; d z_k(t)/d eps against the derivative of Theorem 6's closed
    form (E16, z0 = eps), computed by autodiff of the oracle formula."""
    eps, h = 1e-5, 1e-9
    g_rev = jax.grad(lambda e: _final_loss(fig3, e))(eps)
    g_fwd = jax.jacfwd(lambda e: _final_loss(fig3, e, adjoint="forward"))(eps)
    fd = (_final_loss(fig3, eps + h) - _final_loss(fig3, eps - h)) / (2 * h)
    assert abs(g_rev / fd - 1) < 1e-6 and abs(g_fwd / fd - 1) < 1e-6
    r, C = (jnp.asarray(v) for v in nqf.theorem6_rates(fig3))

    def z_exact(e, t):  # Theorem 6 with z_k(0) = eps (W0 = sqrt(eps) I, P = I for fig3)
        return r * e / (C * e + (r - C * e) * jnp.exp(-r * t))

    dz = jax.jacfwd(
        lambda e: nqf.solve_flow(fig3, W0=jnp.sqrt(e) * jnp.eye(5), t1=T1, ts=TS, rtol=1e-11, adjoint="forward").z[3]
    )(eps)
    np.testing.assert_allclose(dz, jax.jacfwd(z_exact)(eps, TS[3]), rtol=1e-6)


def test_grad_through_labels_and_data(fig3):
    """Gradients of the final loss with respect to the labels y and the data Lambda, against
    central differences (a data set built inside the traced function)."""
    W0 = np.sqrt(1e-5) * np.eye(5)

    def loss(Lam, y):
        return nqf.solve_flow(nqf.CommutingData(Lam, y, fig3.P), W0=W0, t1=T1, ts=TS, rtol=1e-11).loss[-1]

    Lam, y = np.asarray(fig3.Lambda), np.asarray(fig3.y)
    gL, gy = jax.grad(loss, argnums=(0, 1))(Lam, y)
    h = 1e-6
    for i, j in [(0, 0), (2, 3)]:
        E = np.zeros_like(Lam)
        E[i, j] = h
        fd = (loss(Lam + E, y) - loss(Lam - E, y)) / (2 * h)
        assert abs(gL[i, j] - fd) <= 1e-6 * max(abs(fd), 1e-6)
    e = np.eye(5)[1] * h
    fd = (loss(Lam, y + e) - loss(Lam, y - e)) / (2 * h)
    assert abs(gy[1] - fd) <= 1e-6 * abs(fd)


def test_exact_path_and_excess_loss_under_transforms():
    data = nqf.datasets.powerlaw_data(300)
    z0 = 1e-6 * np.arange(1, 301.0) ** -1.2
    ts = np.geomspace(1.0, 1e3, 6)

    def excess(y):
        return nqf.solve_flow(
            nqf.DiagonalData(data.lam, y), z0=z0, t1=1e3, ts=ts, method="exact", save="loss"
        ).excess_loss[2]

    y = np.asarray(data.y)
    assert abs(jax.jit(excess)(y) / excess(y) - 1) < 1e-12
    g = jax.grad(excess)(y)
    e = np.zeros(300)
    e[4] = 1e-7
    fd = (excess(y + e) - excess(y - e)) / 2e-7
    assert abs(g[4] / fd - 1) < 1e-6
    z = jnp.asarray(np.abs(np.random.default_rng(0).standard_normal((3, 300))))
    np.testing.assert_allclose(
        jax.jit(lambda z: nqf.excess_loss(data, z))(z), nqf.excess_loss(data, np.asarray(z)), rtol=1e-13
    )


def test_results_pickle_and_round_trip(fig3, tmp_path):
    """Every result type at default settings pickles and round-trips through save/load with its
    arrays identical and its derived quantities (loss, excess loss, dense output by re-solving,
    ignition times) intact."""
    W0 = np.sqrt(1e-5) * np.eye(5)
    sol = nqf.solve_flow(fig3, W0=W0, t1=T1)
    exact = nqf.solve_flow(fig3, W0=W0, t1=T1, method="exact")
    mlp = nqf.datasets.mlp_data(30, 4)
    ff = nqf.solve_flow(mlp, W0=0.01 * np.ones((5, 3)), t1=2.0)
    sweep = nqf.solve_sweep(fig3, eps=[1e-6, 1e-4], t1=T1)
    oracle = nqf.theorem6(fig3, TS, W0=W0)
    Wm = 0.1 * np.random.default_rng(0).standard_normal((5, 6))
    maps = [
        nqf.closed_sgd(mlp, W0=Wm, lr=0.05, steps=10),
        nqf.train_w(mlp, Wm, lr=0.05, steps=10),
        nqf.closed_sgd_sweep(mlp, W0=Wm, lr=[0.02, 0.05], steps=10),
    ]
    glv = nqf.glv_gd(fig3, np.full(5, 1e-3), lr=0.05, steps=10)
    for i, res in enumerate([sol, exact, ff, sweep, oracle, *maps, glv]):
        for back in (pickle.loads(pickle.dumps(res)), nqf.load(res.save(tmp_path / f"r{i}"))):
            assert type(back) is type(res)
            name = "z" if res is glv else "M"
            np.testing.assert_array_equal(getattr(back, name), getattr(res, name))
    back = nqf.load(sol.save(tmp_path / "flow.npz"))
    np.testing.assert_array_equal(back.loss, sol.loss)
    np.testing.assert_array_equal(back.excess_loss, sol.excess_loss)
    np.testing.assert_allclose(back.z_at([7.5]), sol.z_at([7.5]), rtol=1e-13)
    np.testing.assert_allclose(nqf.measure_ignition_times(back), nqf.measure_ignition_times(sol), rtol=1e-12)
    assert back.stats == sol.stats and back.result == sol.result
    sw = nqf.load(sweep.save(tmp_path / "sweep"))
    np.testing.assert_allclose(sw[1].z_at([7.5]), sweep[1].z_at([7.5]), rtol=1e-12)
    frame = sweep.to_dataframe()
    assert list(frame.columns) == ["member", "eps", "successful", "t", "loss", "excess_loss"] and len(frame) == 2 * 201
    np.testing.assert_array_equal(frame["loss"].to_numpy().reshape(2, -1), sweep.loss)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(Exception):  # noqa: B017 (whatever numpy raises on a corrupt archive)
        nqf.load(tmp_path / "junk.npz")
    np.savez(tmp_path / "plain.npz", a=np.ones(2))
    with pytest.raises(ValueError, match="not an nqf result file"):
        nqf.load(tmp_path / "plain.npz")


def test_theorem6_and_ntk_under_transforms(fig3):
    """The Theorem 6 oracle and the NTK (Eq. E25) under jit / vmap / grad: the same numbers as the
    host call, and gradients against central differences."""
    W0 = np.sqrt(1e-5) * np.eye(5)
    ref = nqf.theorem6(fig3, TS, W0=W0)
    out = jax.jit(lambda W: nqf.theorem6(fig3, TS, W0=W))(W0)
    np.testing.assert_allclose(out.z, ref.z, rtol=1e-13)
    np.testing.assert_allclose(out.M, ref.M, rtol=1e-13, atol=1e-18)
    z = lambda e: nqf.theorem6(fig3, TS, W0=jnp.sqrt(e) * jnp.eye(5)).z[3, 2]  # noqa: E731
    assert abs(jax.grad(z)(1e-5) / ((z(1e-5 + 1e-10) - z(1e-5 - 1e-10)) / 2e-10) - 1) < 1e-6
    assert jax.vmap(lambda e: nqf.theorem6(fig3, TS, W0=jnp.sqrt(e) * jnp.eye(5)).z)(jnp.array([1e-5, 1e-4])).shape == (
        2,
        7,
        5,
    )
    model = nqf.NQFModel(nqf.datasets.mlp_data(6, 3), g=0.1 * np.ones((6, 4)))
    M, mu = 0.05 * np.eye(4), 0.1 * np.ones(4)
    theta = nqf.ntk(model, M=M, mu=mu, d=5)
    np.testing.assert_allclose(jax.jit(lambda M, mu: nqf.ntk(model, M=M, mu=mu, d=5))(M, mu), theta, rtol=1e-13)
    f = lambda s: nqf.ntk(model, M=s * M, mu=mu, d=5)[1, 2]  # noqa: E731
    assert abs(jax.grad(f)(1.0) - (f(1.0 + 1e-6) - f(1.0 - 1e-6)) / 2e-6) < 1e-7 * max(1.0, abs(f(1.0)))
