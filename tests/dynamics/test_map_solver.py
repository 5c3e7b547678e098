"""Issue 24 part 1: Theorem 2's exact map as a diffrax solver (`nqf.dynamics.ExactMap` with
`map_term`) against the lax-loop simulator `nqf.closed_sgd` (the same step function): M at every
saved step to relative 1e-13, exact event steps, vmap, grad, bad input and divergence.

Shapes are fixed (fig3 data p = m = 5; a general model p = 4, m = 6, d = 7) so that each
configuration compiles once.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.dynamics import ExactMap, map_term

TOL = 1e-13
LR = 0.01


def solve(term, steps, *, saveat=None, **kw):
    return term.solve(steps, saveat=saveat, **kw)


def save_all(t, y, term):
    """SaveAt function (args = the term: one compilation for every term of the same structure)."""
    return term.M(y), term.mu(y), term.loss(y)


def rel_per_step(Ms, ref):
    """max over saved steps n of |M_n - ref_n| / |ref_n| (max norms)."""
    Ms, ref = np.asarray(Ms), np.asarray(ref)
    n = ref.shape[0]
    num = np.abs(Ms - ref).reshape(n, -1).max(1)
    return float(np.max(num / np.abs(ref).reshape(n, -1).max(1)))


@pytest.fixture(scope="module")
def fig3():
    return nqf.datasets.fig3_data(), np.sqrt(1e-5) * np.eye(5)


@pytest.fixture(scope="module")
def general():
    rng = np.random.default_rng(0)
    p, m, d = 4, 6, 7
    A = rng.standard_normal((m, p, p)) / np.sqrt(p)
    data = nqf.DenseData(0.5 * (A + A.transpose(0, 2, 1)), rng.standard_normal(m))
    B = rng.standard_normal((m, p, p)) / (2 * d * p)
    model = nqf.NQFModel(
        data,
        g=0.5 * rng.standard_normal((m, p)) / np.sqrt(d),
        B=0.5 * (B + B.transpose(0, 2, 1)),
        f0=0.1 * rng.standard_normal(m),
    )
    return model, 0.3 * rng.standard_normal((p, d)) / np.sqrt(d)


def test_full_batch_agrees_with_closed_sgd_every_step(fig3):
    data, W0 = fig3
    steps = 1500
    ref = nqf.closed_sgd(data, W0=W0, lr=LR, steps=steps)
    sol = solve(map_term(data, W0=W0, lr=LR), steps)
    assert sol.ys.shape == ref.M.shape
    np.testing.assert_allclose(np.asarray(sol.ts), ref.t, rtol=1e-12)
    assert rel_per_step(sol.ys, ref.M) <= TOL


@pytest.mark.parametrize("form, momentum, nesterov", [("factor", 0.0, False), ("factor", 0.5, True), ("M", 0.5, False)])
def test_minibatch_momentum_weight_decay_agree(general, form, momentum, nesterov):
    model, W0 = general
    steps = 100
    idx = nqf.batch_indices(3, model.m, 3, steps)
    kw = dict(W0=W0, lr=0.02, batch_indices=idx, weight_decay=0.05, momentum=momentum, nesterov=nesterov, form=form)
    ref = nqf.closed_sgd(model, steps=steps, **kw)
    term = map_term(model, **kw)
    M, mu, loss = solve(term, steps, saveat=diffrax.SaveAt(t0=True, steps=True, fn=save_all), args=term).ys
    assert rel_per_step(M, ref.M) <= TOL
    assert rel_per_step(mu, ref.mu) <= TOL
    np.testing.assert_allclose(loss, ref.loss, rtol=1e-12)


def test_drawn_batches_match_closed_sgd(general):
    model, W0 = general
    kw = dict(W0=W0, lr=0.02, batch_size=3, key=5, weight_decay=0.05)
    ref = nqf.closed_sgd(model, steps=100, **kw)
    term = map_term(model, steps=100, **kw)
    M, mu, loss = solve(term, 100, saveat=diffrax.SaveAt(t0=True, steps=True, fn=save_all), args=term).ys
    assert rel_per_step(M, ref.M) <= TOL


def test_stop_event_gives_the_exact_first_step(fig3):
    data, W0 = fig3
    steps = 2500
    ref = nqf.closed_sgd(data, W0=W0, lr=LR, steps=steps)
    term = map_term(data, W0=W0, lr=LR)
    event = diffrax.Event(lambda t, y, threshold, **kw: term.loss(y) < threshold)  # one compilation
    for frac in (0.9, 0.5, 0.1):
        threshold = frac * ref.loss[0]
        first = int(np.argmax(ref.loss < threshold))
        assert 0 < first < steps
        sol = solve(
            term, steps, event=event, args=jnp.asarray(threshold), saveat=diffrax.SaveAt(t1=True, fn=term.save_loss)
        )
        assert sol.result == diffrax.RESULTS.event_occurred
        assert float(sol.ts[-1]) / LR == pytest.approx(first, abs=1e-6)
        np.testing.assert_allclose(sol.ys[-1], ref.loss[first], rtol=1e-12)


def test_vmap_over_initial_conditions(fig3):
    data, _ = fig3
    steps = 300
    scales = np.array([1e-3, 3e-3, 1e-2])

    def final_M(s):
        term = map_term(data, W0=s * jnp.eye(5), lr=LR)
        return solve(term, steps, saveat=diffrax.SaveAt(t1=True, fn=term.save_M)).ys[-1]

    Ms = jax.vmap(final_M)(jnp.asarray(scales))
    for s, M in zip(scales, Ms):
        ref = nqf.closed_sgd(data, W0=s * np.eye(5), lr=LR, steps=steps, save_every=steps).M[-1]
        assert rel_per_step(M[None], ref[None]) <= TOL


def test_grad_of_final_loss_wrt_M0_matches_finite_differences(general):
    model, W0 = general
    data = model.data  # plain model: M alone is the state
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4, 4))
    M0 = 0.1 * (X @ X.T + np.eye(4))

    def final_loss(M0):
        term = map_term(data, M0=M0, lr=0.02)
        return solve(term, 40, saveat=diffrax.SaveAt(t1=True, fn=term.save_loss)).ys[-1]

    g = jax.grad(final_loss)(jnp.asarray(M0))
    E = rng.standard_normal((4, 4))
    E = 0.5 * (E + E.T)
    h = 1e-5
    fd = (final_loss(M0 + h * E) - final_loss(M0 - h * E)) / (2 * h)
    assert float(jnp.sum(g * E)) == pytest.approx(float(fd), rel=1e-7)


def test_divergence_is_reported_with_its_step(fig3):
    data, _ = fig3
    W0 = np.eye(5)
    lr = 5.0  # far above 2 / lambda_max
    with pytest.raises(FloatingPointError, match=r"by step (\d+)") as ref_err:
        nqf.closed_sgd(data, W0=W0, lr=lr, steps=200)
    step = ref_err.value.args[0].split("by step ")[1].split(" ")[0]
    # issue 36 B7: the documented type at the boundary (it was JAX's JaxRuntimeError, nqf's text last)
    with pytest.raises(FloatingPointError, match=rf"^MapTerm.solve: The exact map diverged: .* by step {step} ") as err:
        solve(map_term(data, W0=W0, lr=lr), 200)
    assert isinstance(err.value.__cause__, jax.errors.JaxRuntimeError)


def test_bad_input_names_the_argument(fig3, general):
    data, W0 = fig3
    for lr in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="`lr`"):
            map_term(data, W0=W0, lr=lr)
    model, Wg = general
    with pytest.raises(ValueError, match="`batch_indices`"):
        map_term(model, W0=Wg, lr=LR, batch_indices=np.zeros(10, dtype=int))
    with pytest.raises(ValueError, match="`batch_indices`"):
        map_term(model, W0=Wg, lr=LR, batch_indices=np.zeros((10, 2)))  # not integers
    with pytest.raises(ValueError, match="`batch_indices`"):
        map_term(model, W0=Wg, lr=LR, batch_indices=np.zeros((10, 2), dtype=int), steps=11)
    with pytest.raises(ValueError, match="`batch_indices`"):
        map_term(model, W0=Wg, lr=LR, batch_indices=np.full((10, 2), model.m, dtype=int))
    term = map_term(data, W0=W0, lr=LR)
    for steps in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="`steps`"):
            term.solve(steps)
    with pytest.raises(ValueError, match="`steps` = 11 is more than the batch schedule's 10 rows"):
        map_term(model, W0=Wg, lr=LR, batch_size=2, key=0, steps=10).solve(11)
    f32 = jnp.float32
    with pytest.raises(TypeError, match="`t0`"):
        diffrax.diffeqsolve(term, ExactMap(), t0=f32(0.0), t1=f32(5 * LR), dt0=f32(LR), y0=term.y0)
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(RuntimeError, match="jax_enable_x64"):
            map_term(data, W0=W0, lr=LR)
    finally:
        jax.config.update("jax_enable_x64", True)


def test_step_must_be_the_learning_rate(fig3, general):
    """A user's own `diffrax.diffeqsolve` of `ExactMap` (compiled outside nqf): the run-time
    checks arrive as JAX's `JaxRuntimeError` with nqf's message, as docs/numerics.md says."""
    data, W0 = fig3
    term = map_term(data, W0=W0, lr=LR)
    with pytest.raises(jax.errors.JaxRuntimeError, match="ValueError: ExactMap: every step dt must equal the term's"):
        diffrax.diffeqsolve(term, ExactMap(), t0=0.0, t1=0.1, dt0=2 * LR, y0=term.y0)
    with pytest.raises(Exception, match="must equal the term's learning rate"):  # t1 not a multiple of lr
        diffrax.diffeqsolve(term, ExactMap(), t0=0.0, t1=10.5 * LR, dt0=LR, y0=term.y0)
    model, Wg = general
    term = map_term(model, W0=Wg, lr=LR, batch_indices=np.zeros((10, 2), dtype=int))
    with pytest.raises(Exception, match="has 10 rows"):
        diffrax.diffeqsolve(term, ExactMap(), t0=0.0, t1=12 * LR, dt0=LR, y0=term.y0)


def test_run_time_checks_under_a_users_jit_are_jaxs_errors(fig3):
    """Issue 36 B7, the documented limit (docs/numerics.md): under the user's own jax.jit the
    check of a traced lr runs in the compiled program and arrives as JAX's JaxRuntimeError with
    nqf's message; the same call outside jit raises the documented ValueError."""
    data, W0 = fig3
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"`lr` must be finite and > 0 \(checked at run time"):
        jax.block_until_ready(jax.jit(lambda lr: nqf.closed_sgd(data, W0=W0, lr=lr, steps=3).M)(-0.1))
    with pytest.raises(ValueError, match=r"`lr` must be finite and > 0"):
        nqf.closed_sgd(data, W0=W0, lr=-0.1, steps=3)
