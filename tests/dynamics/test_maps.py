"""Theorem 2 / Corollary 2: the closed discrete maps on (M, mu) (`nqf.closed_sgd`) against
weight-space training with autodiff gradients (`nqf.train_w`), for widths d in {1, 7, 1000}.

Property tests draw random problems of FIXED shapes (p = 5, m = 8, 500 steps), so that JAX
compiles each configuration once per width and hypothesis varies only values and seeds. The bound
is relative 1e-12 in float64 on the whole trajectory: max_n |M_closed - M_w| / max_n |M_w| (and
the same for mu).
"""

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
from hypothesis import given, settings
from hypothesis import strategies as st

import nqf
from nqf import maps
from nqf.dynamics._gd import gradient_descent

P, M_SAMPLES, BATCH, STEPS = 5, 8, 3, 500
WIDTHS = [1, 7, 1000]
TOL = 1e-12

PROPERTY = settings(max_examples=5, deadline=None)
seeds = st.integers(0, 2**31 - 1)
lrs = st.floats(0.005, 0.03)
decays = st.one_of(st.just(0.0), st.floats(0.0, 0.1))
betas = st.floats(0.1, 0.9)


def pseudo_huber(f, y):
    """A smooth non-quadratic per-sample loss, sqrt(1 + (f - y)^2) - 1."""
    return jnp.sqrt(1.0 + (f - y) ** 2) - 1.0


def problem(seed, d, mean_field=True):
    """Random NQF of fixed shapes: dense A (m, p, p), labels, and g, B, f0 scaled with d so that
    the mean-field terms stay O(1) at every width; W0 = 0.3 N(0, 1) / sqrt(d)."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M_SAMPLES, P, P)) / np.sqrt(P)
    data = nqf.DenseData(0.5 * (A + A.transpose(0, 2, 1)), rng.standard_normal(M_SAMPLES))
    W0 = 0.3 * rng.standard_normal((P, d)) / np.sqrt(d)
    if not mean_field:
        return nqf.NQFModel(data), W0
    g = 0.5 * rng.standard_normal((M_SAMPLES, P)) / np.sqrt(d)
    B = rng.standard_normal((M_SAMPLES, P, P)) / (2 * d * P)
    B = 0.5 * (B + B.transpose(0, 2, 1))
    return nqf.NQFModel(data, g=g, B=B, f0=0.1 * rng.standard_normal(M_SAMPLES)), W0


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def assert_agree(closed, ref, tol=TOL):
    assert closed.M.shape == ref.M.shape == (STEPS + 1, P, P)
    np.testing.assert_array_equal(closed.steps, ref.steps)
    err_M, err_mu = rel(closed.M, ref.M), rel(closed.mu, ref.mu)
    assert err_M <= tol and err_mu <= tol, (err_M, err_mu)
    assert rel(closed.loss, ref.loss) <= 1e-10


def both(model, W0, **kw):
    """Run the closed map and the W-space reference with the same arguments."""
    beta = kw.pop("momentum", 0.0)
    closed = nqf.closed_sgd(model, W0=W0, steps=STEPS, momentum=beta, **kw)
    kw.pop("form", None)
    ref = nqf.train_w(model, W0, steps=STEPS, momentum=beta, **kw)
    return closed, ref


# -- Theorem 2: SGD, minibatches, weight decay, general (g, B) model, any loss ----------------


@pytest.mark.parametrize("mean_field", [False, True], ids=["plain", "g_B"])
@pytest.mark.parametrize("d", WIDTHS)
@PROPERTY
@given(seed=seeds, lr=lrs, gamma=decays)
def test_full_batch(d, mean_field, seed, lr, gamma):
    model, W0 = problem(seed, d, mean_field)
    assert_agree(*both(model, W0, lr=lr, weight_decay=gamma))


@pytest.mark.parametrize("d", WIDTHS)
@PROPERTY
@given(seed=seeds, lr=lrs, gamma=decays, share_key=st.booleans())
def test_minibatch_shared_sampling(d, seed, lr, gamma, share_key):
    model, W0 = problem(seed, d)
    if share_key:  # both draw their batches from the same key
        batches = dict(batch_size=BATCH, key=seed)
    else:  # both get the same explicit schedule
        batches = dict(batch_indices=nqf.batch_indices(seed, M_SAMPLES, BATCH, STEPS))
    assert_agree(*both(model, W0, lr=lr, weight_decay=gamma, **batches))


@pytest.mark.parametrize("nesterov", [False, True], ids=["heavy_ball", "nesterov"])
@pytest.mark.parametrize("d", WIDTHS)
@PROPERTY
@given(seed=seeds, lr=lrs, beta=betas, gamma=decays)
def test_momentum(d, nesterov, seed, lr, beta, gamma):
    """Corollary 2. Heavy ball full batch; Nesterov with minibatches."""
    model, W0 = problem(seed, d)
    batches = dict(batch_size=BATCH, key=seed) if nesterov else {}
    closed, ref = both(model, W0, lr=lr * (1 - beta), momentum=beta, nesterov=nesterov, weight_decay=gamma, **batches)
    assert_agree(closed, ref)


@pytest.mark.parametrize("d", WIDTHS)
@PROPERTY
@given(seed=seeds, lr=lrs, gamma=decays)
def test_user_loss(d, seed, lr, gamma):
    model, W0 = problem(seed, d)
    assert_agree(*both(model, W0, lr=lr, weight_decay=gamma, loss=pseudo_huber, batch_size=BATCH, key=seed))


@pytest.mark.parametrize("momentum", [False, True], ids=["sgd", "momentum"])
@pytest.mark.parametrize("d", [7, 1000])
@PROPERTY
@given(seed=seeds, lr=lrs, beta=betas, gamma=decays)
def test_literal_E6_E7_form(d, momentum, seed, lr, beta, gamma):
    """form="M" (E5-E6 on (M, mu); E7 with (P, Q) for momentum) at widths d > p, where
    C = M - mu mu^T / d has full rank and iterating E6 on M is as stable as W-space."""
    model, W0 = problem(seed, d)
    beta = beta if momentum else 0.0
    closed, ref = both(
        model, W0, lr=lr * (1 - beta), momentum=beta, weight_decay=gamma, batch_size=BATCH, key=seed, form="M"
    )
    assert_agree(closed, ref)
    if momentum:  # E7 reconstructs the weights: W_t = P_t W_0 + Q_t 1^T
        W = np.einsum("nij,jd->nid", closed.P, W0) + closed.Q[:, :, None]
        assert rel(W, ref.W) <= TOL


def test_literal_E6_drifts_when_rank_deficient():
    """Why form="factor" is the default: at d = 1 (C = 0) rounding in E6 grows along directions
    no neuron occupies; the factor form stays at rounding level."""
    model, W0 = problem(5, 1)
    kw = dict(lr=0.02)
    ref = nqf.train_w(model, W0, steps=STEPS, **kw)
    factor = nqf.closed_sgd(model, W0=W0, steps=STEPS, **kw)
    literal = nqf.closed_sgd(model, W0=W0, steps=STEPS, form="M", **kw)
    assert rel(factor.M, ref.M) <= 1e-14
    assert rel(literal.M, ref.M) > 10 * rel(factor.M, ref.M)


def test_theorem2_weight_space_invariance():
    """Two weight matrices with the same (M, mu) train identically under SGD with momentum
    (Theorem 2, Corollary 2) but not under Adam (no closed map)."""
    model, W0 = problem(3, 7)
    rng = np.random.default_rng(0)
    # An orthogonal O with O 1 = 1 keeps mu = W 1 and M = W W^T: rotate the complement of 1.
    basis = np.linalg.qr(np.column_stack([np.ones(7), rng.standard_normal((7, 6))]))[0]
    R = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    O = basis @ np.block([[np.eye(1), np.zeros((1, 6))], [np.zeros((6, 1)), R]]) @ basis.T
    W1 = W0 @ O
    assert rel(W1 @ W1.T, W0 @ W0.T) < 1e-14 and rel(W1.sum(1), W0.sum(1)) < 1e-14
    for opt, close in [("momentum", True), ("adam", False)]:
        a = nqf.train_w(model, W0, lr=0.01, steps=200, optimizer=opt, save_every=200)
        b = nqf.train_w(model, W1, lr=0.01, steps=200, optimizer=opt, save_every=200)
        assert (rel(a.M, b.M) < 1e-12) == close, (opt, rel(a.M, b.M))


class _OtherData(nqf.DenseData):
    """A representation `nqf.dynamics._batches.restrict` does not know: minibatches fall back to weighting
    all m samples (closed map) and gathering the batch rows (W-space)."""


def _structured(kind, rng):
    if kind == "other":
        A = rng.standard_normal((M_SAMPLES, P, P))
        return _OtherData(0.5 * (A + A.transpose(0, 2, 1)) / np.sqrt(P), rng.standard_normal(M_SAMPLES))
    if kind == "lowrank":  # a two-layer MLP's NQF (Eq. E3): k = 4 inputs, q = 1 output, p = 5
        x = rng.standard_normal((M_SAMPLES, P - 1))
        return nqf.feedforward_data(rng.standard_normal(M_SAMPLES), a=x[:, :, None], b=np.ones((M_SAMPLES, 1, 1)))
    Q = np.linalg.qr(rng.standard_normal((P, P)))[0]
    return nqf.CommutingData(rng.standard_normal((M_SAMPLES, P)), rng.standard_normal(M_SAMPLES), Q)


@pytest.mark.parametrize("kind", ["lowrank", "commuting", "other"])
def test_structured_data(kind):
    """The closed map runs on the data's structure (traces, weighted_sum); the W-space reference
    gets the same matrices densely."""
    rng = np.random.default_rng(7)
    data = _structured(kind, rng)
    g = 0.2 * rng.standard_normal((M_SAMPLES, P))
    B = rng.standard_normal((M_SAMPLES, P, P)) / (7 * P)
    B = 0.5 * (B + B.transpose(0, 2, 1))
    W0 = 0.3 * rng.standard_normal((P, 7)) / np.sqrt(7)
    closed = nqf.closed_sgd(
        nqf.NQFModel(data, g=g, B=B), W0=W0, lr=0.01, steps=STEPS, momentum=0.5, batch_size=BATCH, key=4
    )
    dense_data = nqf.DenseData(np.asarray(data.dense()), np.asarray(data.y))
    dense = nqf.NQFModel(data if kind == "other" else dense_data, g=g, B=B)
    ref = nqf.train_w(dense, W0, lr=0.01, steps=STEPS, momentum=0.5, batch_size=BATCH, key=4)
    assert_agree(closed, ref)


# -- initial conditions, GD, compilation ------------------------------------------------------


@pytest.mark.parametrize("d", [1, 3, 7])
def test_order_parameter_initial_condition(d):
    """Starting from (M0, mu0, d) equals starting from any W0 that produces them."""
    model, W0 = problem(11, d)
    a = nqf.closed_sgd(model, W0=W0, lr=0.02, steps=STEPS, save_every=50)
    b = nqf.closed_sgd(model, M0=W0 @ W0.T, mu0=W0.sum(1), d=d, lr=0.02, steps=STEPS, save_every=50)
    assert rel(b.M, a.M) <= TOL and rel(b.mu, a.mu) <= TOL


def test_plain_model_without_mu():
    model, W0 = problem(2, 7, mean_field=False)
    a = nqf.closed_sgd(model, W0=W0, lr=0.02, steps=100)
    b = nqf.closed_sgd(model.data, M0=W0 @ W0.T, lr=0.02, steps=100)
    assert b.mu is None and b.d is None
    assert rel(b.M, a.M) <= TOL


def test_matches_gradient_descent():
    """Full-batch MSE on a plain model: the closed map is `nqf.dynamics._gd.gradient_descent` in (M)."""
    model, W0 = problem(4, 1000, mean_field=False)
    steps_saved, Ws = gradient_descent(model.data, W0, lr=0.02, steps=STEPS, save_every=10)
    closed = nqf.closed_sgd(model.data, W0=W0, lr=0.02, steps=STEPS, save_every=10)
    np.testing.assert_array_equal(closed.steps, steps_saved)
    np.testing.assert_allclose(closed.t, 0.02 * steps_saved)
    assert rel(closed.M, np.einsum("nid,njd->nij", Ws, Ws)) <= TOL


def test_save_every_subsamples_the_trajectory():
    model, W0 = problem(6, 7)
    full = nqf.closed_sgd(model, W0=W0, lr=0.02, steps=STEPS, batch_size=BATCH, key=1)
    some = nqf.closed_sgd(model, W0=W0, lr=0.02, steps=STEPS, batch_size=BATCH, key=1, save_every=7)
    expected = list(range(0, STEPS, 7)) + [STEPS]
    np.testing.assert_array_equal(some.steps, expected)
    np.testing.assert_allclose(some.t, 0.02 * np.array(expected))
    np.testing.assert_allclose(some.M, full.M[expected], rtol=0, atol=1e-15)
    np.testing.assert_allclose(some.loss, full.loss[expected], rtol=1e-14)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(batch_size=BATCH, key=1),
        dict(momentum=0.5, weight_decay=0.05),
        dict(form="M", momentum=0.5),
        dict(form="M", loss=pseudo_huber),
    ],
    ids=["sgd", "minibatch", "momentum-decay", "M-momentum", "M-huber"],
)
def test_per_step_values_are_the_weight_space_values_at_every_step(kw):
    """step_values="all": the full-training-set loss L(W_j) and the eigenvalues of W_j W_j^T after
    every step j = 0..steps equal W-space training saved at every step (`nqf.train_w`), while the
    map itself saves every 7th step."""
    model, W0 = problem(12, 7)
    closed = nqf.closed_sgd(model, W0=W0, lr=0.02, steps=STEPS, save_every=7, step_values="all", **kw)
    kw.pop("form", None)
    ref = nqf.train_w(model, W0, lr=0.02, steps=STEPS, save_every=1, **kw)
    assert closed.step_loss.shape == (STEPS + 1,) and closed.step_eigenvalues.shape == (STEPS + 1, P)
    np.testing.assert_allclose(closed.step_times, 0.02 * np.arange(STEPS + 1), rtol=1e-15)
    assert rel(closed.step_loss, ref.loss) <= 1e-10
    assert rel(closed.step_eigenvalues, np.linalg.eigvalsh(ref.M)[:, ::-1]) <= TOL
    np.testing.assert_allclose(closed.step_loss[closed.steps], closed.loss, rtol=1e-12)
    loss_only = nqf.closed_sgd(model, W0=W0, lr=0.02, steps=STEPS, save_every=7, step_values="loss", **kw)
    assert loss_only.step_eigenvalues is None
    assert rel(loss_only.step_loss, closed.step_loss) <= 1e-12  # another program: rounding apart


def test_per_step_values_under_grad_and_vmap():
    """The per-step loss is differentiable (reverse mode; its last entry is the saved final loss)
    and vmaps over learning rates; the eigenvalues are returned but not differentiated."""
    import jax

    model, W0 = problem(13, 7, mean_field=False)

    def last(lr, what):
        traj = nqf.closed_sgd(model, W0=W0, lr=lr, steps=60, save_every=60, step_values="all")
        return getattr(traj, what)[-1] + 0.0 * traj.step_eigenvalues.sum()

    g_step, g_saved = jax.grad(last)(0.02, "step_loss"), jax.grad(last)(0.02, "loss")
    assert np.isfinite(g_step) and g_step != 0
    np.testing.assert_allclose(g_step, g_saved, rtol=1e-10)
    batch = jax.vmap(lambda lr: nqf.closed_sgd(model, W0=W0, lr=lr, steps=60, step_values="loss").step_loss)(
        jnp.array([0.01, 0.02])
    )
    one = nqf.closed_sgd(model, W0=W0, lr=0.02, steps=60, step_values="loss").step_loss
    np.testing.assert_allclose(batch[1], one, rtol=1e-12)
    with pytest.raises(ValueError, match="`step_values` must be one of"):
        nqf.closed_sgd(model, W0=W0, lr=0.02, steps=60, step_values="every")


@pytest.mark.parametrize("p", [5, 40], ids=["in-program", "host-call"])
def test_eigenvalues_in_program_under_jit_vmap_and_grad(p):
    """Both paths of `eigenvalues_in_program` (jnp.linalg.eigvalsh for p <= 32, numpy's on the host
    beyond): decreasing eigenvalues equal to numpy's, under jit and vmap; not differentiated (grad
    passes through the rest of the function); nan for a non-finite matrix."""
    import jax

    rng = np.random.default_rng(3)
    A = rng.standard_normal((3, p, p))
    Ms = A @ A.transpose(0, 2, 1)
    want = np.linalg.eigvalsh(Ms)[:, ::-1]
    got = jax.jit(jax.vmap(maps.eigenvalues_in_program))(jnp.asarray(Ms))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * want.max())
    g = jax.grad(lambda M: jnp.sum(M) + 0.0 * maps.eigenvalues_in_program(M).sum())(jnp.asarray(Ms[0]))
    np.testing.assert_array_equal(g, np.ones((p, p)))
    bad = np.asarray(jax.jit(maps.eigenvalues_in_program)(jnp.full((2, p, p), jnp.nan).at[1].set(Ms[1])))
    assert np.isnan(bad[0]).all() and np.allclose(bad[1], want[1])


def test_no_recompilation_for_new_values():
    """New width d, learning rate, momentum, weight decay, labels, batches: same program."""
    model, W0 = problem(8, 7)
    nqf.closed_sgd(model, W0=W0, lr=0.02, steps=50, momentum=0.5, weight_decay=0.1, batch_size=BATCH, key=0)
    before = maps.TRACE_COUNT[0]
    for seed, d in [(9, 1), (10, 1000), (11, 3)]:
        model, W0 = problem(seed, d)
        nqf.closed_sgd(
            model,
            W0=W0,
            lr=0.01 + seed * 1e-3,
            steps=50,
            momentum=0.1 * (seed - 8),
            weight_decay=0.01 * seed,
            batch_size=BATCH,
            key=seed,
        )
    assert maps.TRACE_COUNT[0] == before


# -- the learning-rate limit: the map approaches the gradient flow at first order -------------


def _flow_rhs(model_np, d):
    """E10 for MSE, written directly in numpy (independent of nqf): with Delta = f - y,
    l' = (2/m) Delta, v = sum l' u, H = sum 2 l' A; mu' = -(d v + H mu), M' = -(v mu^T + mu v^T
    + H M + M H)."""
    A, y, g, B, f0 = model_np
    m, p = A.shape[0], A.shape[1]

    def rhs(t, z):
        M, mu = z[: p * p].reshape(p, p), z[p * p :]
        f = np.einsum("mij,ij->m", A, M) + g @ mu + np.einsum("i,mij,j->m", mu, B, mu) + f0
        lp = 2.0 / m * (f - y)
        v = lp @ g + 2.0 * np.einsum("m,mij,j->i", lp, B, mu)
        H = np.einsum("m,mij->ij", 2.0 * lp, A)
        dM = -(np.outer(v, mu) + np.outer(mu, v) + H @ M + M @ H)
        return np.concatenate([dM.ravel(), -(d * v + H @ mu)])

    return rhs


@pytest.mark.parametrize("mean_field", [False, True], ids=["plain", "g_B"])
def test_learning_rate_limit_is_first_order(mean_field):
    d, t1 = 7, 2.0
    model, W0 = problem(21, d, mean_field)
    p = P
    zeros = (np.zeros((M_SAMPLES, p)), np.zeros((M_SAMPLES, p, p)), np.zeros(M_SAMPLES))
    g, B, f0 = zeros if not mean_field else (np.asarray(model.g), np.asarray(model.B), np.asarray(model.f0))
    model_np = (np.asarray(model.data.A), np.asarray(model.y), g, B, f0)
    z0 = np.concatenate([(W0 @ W0.T).ravel(), W0.sum(1)])
    sol = scipy.integrate.solve_ivp(_flow_rhs(model_np, d), (0, t1), z0, method="DOP853", rtol=1e-12, atol=1e-14)
    M_flow = sol.y[: p * p, -1].reshape(p, p)
    etas = np.array([0.04, 0.02, 0.01, 0.005])
    errs = []
    for eta in etas:
        n = int(round(t1 / eta))
        traj = nqf.closed_sgd(model, W0=W0, lr=eta, steps=n, save_every=n)
        assert traj.t[-1] == pytest.approx(t1)
        errs.append(rel(traj.M[-1], M_flow))
    slope = np.polyfit(np.log(etas), np.log(errs), 1)[0]
    assert 0.9 <= slope <= 1.1, (slope, errs)
    assert errs[-1] < 0.05


# -- Adam: W-space only ------------------------------------------------------------------------


def test_closed_adam_is_refused():
    model, W0 = problem(1, 7)
    with pytest.raises(ValueError, match=r"Adam has no closed map on \(M, mu\).*train_w"):
        nqf.closed_map(model, W0=W0, lr=0.01, steps=10, optimizer="adam")


def test_adam_matches_numpy():
    """The W-space Adam against a numpy loop with the analytic plain-model MSE gradient H W."""
    model, W0 = problem(12, 4, mean_field=False)
    A, y = np.asarray(model.data.A), np.asarray(model.y)
    lr, b1, b2, eps, gamma = 0.01, 0.8, 0.99, 1e-8, 0.05
    W, m1, m2 = W0.copy(), np.zeros_like(W0), np.zeros_like(W0)
    for k in range(1, 51):
        delta = np.einsum("mij,ij->m", A, W @ W.T) - y
        grad = np.einsum("m,mij->ij", 4.0 / len(y) * delta, A) @ W + gamma * W
        m1 = b1 * m1 + (1 - b1) * grad
        m2 = b2 * m2 + (1 - b2) * grad**2
        W = W - lr * (m1 / (1 - b1**k)) / (np.sqrt(m2 / (1 - b2**k)) + eps)
    traj = nqf.train_w(
        model,
        W0,
        lr=lr,
        steps=50,
        optimizer="adam",
        adam_b1=b1,
        adam_b2=b2,
        adam_eps=eps,
        weight_decay=gamma,
        save_every=50,
    )
    assert rel(traj.W[-1], W) <= 1e-12


def test_closed_map_names_match_train_w():
    model, W0 = problem(13, 7)
    for opt in ["sgd", "momentum", "nesterov"]:
        c = nqf.closed_map(model, W0=W0, lr=0.005, steps=STEPS, optimizer=opt)
        w = nqf.train_w(model, W0, lr=0.005, steps=STEPS, optimizer=opt)
        assert rel(c.M, w.M) <= TOL, opt


# -- bad input ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def setup():
    model, W0 = problem(0, 7)
    return model, W0


def _closed(**kw):
    def run(model, W0):
        args = dict(W0=W0, lr=0.01, steps=10)
        args.update(kw)
        return nqf.closed_sgd(model, **args)

    return run


def _train(**kw):
    def run(model, W0):
        args = dict(lr=0.01, steps=10)
        args.update(kw)
        return nqf.train_w(model, args.pop("W0", W0), **args)

    return run


BAD = [
    (_closed(W0=np.ones((4, 7))), ValueError, r"`W0` must have shape \(5, d\).*found \(4, 7\)"),
    (_train(W0=np.ones((6, 3))), ValueError, r"`W0` must have shape \(5, d\).*found \(6, 3\)"),
    (_closed(W0=np.full((5, 7), np.nan)), ValueError, r"`W0` must be finite"),
    (_closed(d=8), ValueError, r"`d` = 8 is inconsistent with `W0` of shape \(5, 7\)"),
    (
        _closed(W0=None, M0=np.eye(5), mu0=np.zeros(5), d=1.5),
        ValueError,
        r"`d` \(the number of neurons\) must be an integer >= 1; found 1.5",
    ),
    (
        _closed(W0=None, M0=np.eye(5), mu0=np.zeros(5), d=0),
        ValueError,
        r"`d` \(the number of neurons\) must be an integer >= 1; found 0",
    ),
    (_closed(W0=None, M0=np.eye(5), mu0=np.zeros(5), d=3), ValueError, r"cannot come from d=3 neurons.*rank <= 2"),
    (
        _closed(W0=None, M0=np.eye(5), mu0=np.full(5, 3.0), d=7),
        ValueError,
        r"`M0` is not realizable: M0 - mu0 mu0\^T / d must be positive semi-definite",
    ),
    (
        _closed(W0=None, M0=np.eye(4), mu0=np.zeros(5), d=7),
        ValueError,
        r"`M0` must have shape \(5, 5\) to match the data; found \(4, 4\)",
    ),
    (
        _closed(W0=None, M0=np.eye(5), mu0=np.zeros(4), d=7),
        ValueError,
        r"`mu0` must have shape \(5,\) to match the data; found \(4,\)",
    ),
    (_closed(W0=None, M0=np.eye(5)), ValueError, r"has g or B.*give `mu0` \(p,\) and the width `d`"),
    (_closed(W0=None), ValueError, r"Give the initial condition"),
    (_closed(M0=np.eye(5)), ValueError, r"Give either `W0` or \(`M0`, `mu0`, `d`\)"),
    (_closed(lr=-0.1), ValueError, r"`lr` must be finite and > 0; found -0.1"),
    (_closed(lr=float("nan")), ValueError, r"`lr` must be finite and > 0; found nan"),
    (_train(lr=0.0), ValueError, r"`lr` must be finite and > 0; found 0.0"),
    (_closed(momentum=1.0), ValueError, r"`momentum` must lie in \[0, 1\); found 1.0"),
    (_train(momentum=-0.1), ValueError, r"`momentum` must lie in \[0, 1\); found -0.1"),
    (_closed(momentum=float("nan")), ValueError, r"`momentum` must lie in \[0, 1\); found nan"),
    (_closed(weight_decay=-1.0), ValueError, r"`weight_decay` must be finite and >= 0; found -1.0"),
    (_train(weight_decay=float("inf")), ValueError, r"`weight_decay` must be finite and >= 0"),
    (_closed(batch_size=9), ValueError, r"`batch_size` must be an integer in \[1, m=8\].*found 9"),
    (_train(batch_size=0), ValueError, r"`batch_size` must be an integer in \[1, m=8\].*found 0"),
    (
        _closed(batch_indices=np.zeros((9, 3), int)),
        ValueError,
        r"`batch_indices` must have shape \(steps=10, batch_size\).*found \(9, 3\)",
    ),
    (_train(batch_indices=np.full((10, 3), 8)), ValueError, r"`batch_indices` entries must lie in \[0, m=8\); found 8"),
    (_closed(batch_indices=np.zeros((10, 9), int)), ValueError, r"rows must hold between 1 and m=8 indices"),
    (
        _closed(batch_indices=np.zeros((10, 3))),
        ValueError,
        r"`batch_indices` must be an integer array; found dtype float64",
    ),
    (
        _closed(batch_indices=np.zeros((10, 3), int), batch_size=3),
        ValueError,
        r"Give either `batch_indices` or \(`batch_size`, `key`\)",
    ),
    (_closed(key=3), ValueError, r"`key` draws minibatches and needs `batch_size`"),
    (_closed(steps=0), ValueError, r"`steps` must be an integer >= 1; found 0"),
    (_train(steps=2.5), ValueError, r"`steps` must be an integer >= 1; found 2.5"),
    (_closed(save_every=0), ValueError, r"`save_every` must be an integer >= 1"),
    (
        _train(optimizer="rmsprop"),
        ValueError,
        r"`optimizer` must be one of \('sgd', 'momentum', 'nesterov', 'adam'\); found 'rmsprop'",
    ),
    (
        lambda m, W: nqf.closed_map(m, W0=W, lr=0.1, steps=5, optimizer="lbfgs"),
        ValueError,
        r"`optimizer` must be one of",
    ),
    (_train(optimizer="adam", momentum=0.9), ValueError, r"do not apply to optimizer='adam'"),
    (_train(optimizer="adam", adam_b2=1.0), ValueError, r"`adam_b1` and `adam_b2` must lie in \[0, 1\)"),
    (_closed(form="P"), ValueError, r"`form` must be one of \('factor', 'M'\); found 'P'"),
    (_closed(loss="huber"), ValueError, r"`loss` must be one of \('mse', 'cross_entropy', 'logistic'\) or a callable"),
    (_closed(loss=lambda f, y: jnp.stack([f, y])), TypeError, r"`loss` must return a real scalar"),
    (
        lambda m, W: nqf.closed_sgd(np.eye(3), W0=W, lr=0.1, steps=5),
        TypeError,
        r"`model` must be an `nqf.NQFModel` or an nqf data set; found ndarray",
    ),
    (lambda m, W: nqf.batch_indices(0, 8, 9, 5), ValueError, r"`batch_size` must be an integer in \[1, m=8\]"),
    (lambda m, W: nqf.NQFModel(m.data, g=np.ones((8, 4))), ValueError, r"`g` must have shape \(8, 5\); found \(8, 4\)"),
    (
        lambda m, W: nqf.NQFModel(m.data, B=np.ones((8, 5, 4))),
        ValueError,
        r"`B` must have shape \(8, 5, 5\); found \(8, 5, 4\)",
    ),
]


@pytest.mark.parametrize("make, exc, match", BAD)
def test_bad_input(setup, make, exc, match):
    with pytest.raises(exc, match=match):
        make(*setup)
