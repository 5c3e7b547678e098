"""`nqf.train_w` with an optax optimizer (issue 23).

References: the hand-written string optimizers of `train_w` (their own tests check them against
numpy loops and Theorem 2's closed maps): ``optax.sgd(lr)`` is "sgd", ``optax.sgd(lr,
momentum=beta[, nesterov=True])`` is "momentum"/"nesterov" (optax's trace is the torch form
V <- beta V + grad), ``optax.adam`` is "adam" (eps outside the square root, eps_root = 0), all to
rounding; ``optax.adamw`` (decoupled decay, no string counterpart) against a numpy loop with the
analytic gradient. Shapes are small and fixed (p = 4, m = 6, d = 3) so that each program compiles
once.
"""

import os
import subprocess
import sys
from collections import namedtuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nqf

P, MS, D, STEPS, LR = 4, 6, 3, 40, 0.02
TOL = 1e-13  # same formulas, same grad: rounding only

_rng = np.random.default_rng(23)
_A = _rng.standard_normal((MS, P, P)) / np.sqrt(P)
A = 0.5 * (_A + _A.transpose(0, 2, 1))
Y = _rng.standard_normal(MS)
G = 0.3 * _rng.standard_normal((MS, P))
_B = 0.1 * _rng.standard_normal((MS, P, P))
B = 0.5 * (_B + _B.transpose(0, 2, 1))
W0 = 0.4 * _rng.standard_normal((P, D))
MODEL = nqf.NQFModel(nqf.DenseData(A, Y), g=G, B=B, f0=0.1 * _rng.standard_normal(MS))
# minibatches, coupled weight decay and a remainder in the save schedule: all shared paths
KW = dict(steps=STEPS, batch_size=3, key=5, weight_decay=0.03, save_every=15)


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / np.abs(b).max())


def assert_same(out, ref, tol=TOL):
    np.testing.assert_array_equal(out.steps, ref.steps)
    np.testing.assert_allclose(out.t, ref.t, rtol=1e-15)
    for f in ("W", "M", "mu", "outputs", "loss"):
        assert rel(getattr(out, f), getattr(ref, f)) <= tol, (f, rel(getattr(out, f), getattr(ref, f)))


@pytest.mark.parametrize(
    "transform, name, extra",
    [
        (optax.sgd(LR), "sgd", {}),
        (optax.sgd(LR, momentum=0.9), "momentum", {}),
        (optax.sgd(LR, momentum=0.7, nesterov=True), "nesterov", dict(momentum=0.7)),
        (optax.adam(LR, b1=0.8, b2=0.99, eps=1e-6), "adam", dict(adam_b1=0.8, adam_b2=0.99, adam_eps=1e-6)),
    ],
    ids=["sgd", "momentum", "nesterov", "adam"],
)
def test_optax_matches_string_optimizer(transform, name, extra):
    ref = nqf.train_w(MODEL, W0, lr=LR, optimizer=name, **extra, **KW)
    out = nqf.train_w(MODEL, W0, lr=LR, optimizer=transform, **KW)
    assert out.optimizer == "optax" and ref.optimizer == name
    assert out.steps.tolist() == [0, 15, 30, 40]
    assert_same(out, ref)


def test_lr_is_only_the_time_unit():
    """With optax, `lr` sets t = lr * n and nothing else: the weights do not depend on it."""
    a = nqf.train_w(MODEL, W0, lr=LR, optimizer=optax.adam(LR), **KW)
    b = nqf.train_w(MODEL, W0, lr=7.0, optimizer=optax.adam(LR), **KW)
    np.testing.assert_array_equal(a.W, b.W)
    np.testing.assert_allclose(b.t, 7.0 * b.steps, rtol=1e-15)


def test_adamw_decoupled_decay_matches_numpy():
    """optax.adamw (decoupled decay, in the chain) plus train_w's coupled L2 term (in the
    gradient) against a numpy loop with the analytic plain-model MSE gradient H W."""
    model = nqf.NQFModel(nqf.DenseData(A, Y))
    lr, b1, b2, eps, wd, gamma, steps = 0.01, 0.8, 0.99, 1e-8, 0.1, 0.05, 30
    W, m1, m2 = W0.copy(), np.zeros_like(W0), np.zeros_like(W0)
    for k in range(1, steps + 1):
        delta = np.einsum("mij,ij->m", A, W @ W.T) - Y
        grad = np.einsum("m,mij->ij", 4.0 / MS * delta, A) @ W + gamma * W
        m1 = b1 * m1 + (1 - b1) * grad
        m2 = b2 * m2 + (1 - b2) * grad**2
        W = W - lr * ((m1 / (1 - b1**k)) / (np.sqrt(m2 / (1 - b2**k)) + eps) + wd * W)
    out = nqf.train_w(
        model,
        W0,
        lr=lr,
        steps=steps,
        weight_decay=gamma,
        save_every=steps,
        optimizer=optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=wd),
    )
    assert rel(out.W[-1], W) <= 1e-12


def test_chain_clip_matches_numpy():
    """A chain (global-norm clipping, then SGD) against a numpy loop: the transformation really
    sees the gradient of the step loss (here full batch, plain model)."""
    model = nqf.NQFModel(nqf.DenseData(A, Y))
    lr, c, steps = 0.05, 0.5, 25
    W = W0.copy()
    clipped = 0
    for _ in range(steps):
        delta = np.einsum("mij,ij->m", A, W @ W.T) - Y
        grad = np.einsum("m,mij->ij", 4.0 / MS * delta, A) @ W
        norm = np.linalg.norm(grad)
        clipped += norm > c
        W = W - lr * grad * min(1.0, c / norm)
    assert clipped > 0  # the clip is active on some steps
    out = nqf.train_w(
        model,
        W0,
        lr=lr,
        steps=steps,
        save_every=steps,
        optimizer=optax.chain(optax.clip_by_global_norm(c), optax.sgd(lr)),
    )
    assert rel(out.W[-1], W) <= 1e-12


def test_optax_under_jit_and_vmap():
    """A traced W0 and traced labels (jit), a batch of W0 (vmap), and a traced learning rate
    inside the optax transformation: equal to the eager calls."""
    tx = optax.adam(LR)

    def run(W, y, lr_inner):
        model = nqf.NQFModel(nqf.DenseData(A, y), g=G, B=B)
        return nqf.train_w(model, W, lr=LR, optimizer=optax.adam(lr_inner), **KW).M

    out = jax.jit(run)(W0, Y, LR)
    eager = nqf.train_w(nqf.NQFModel(nqf.DenseData(A, Y), g=G, B=B), W0, lr=LR, optimizer=tx, **KW)
    assert rel(out, eager.M) <= 1e-12

    Ws = jnp.stack([W0, 0.5 * W0])
    batched = jax.vmap(lambda W: nqf.train_w(MODEL, W, lr=LR, optimizer=tx, **KW))(Ws)
    assert isinstance(batched, nqf.WTrajectory) and batched.optimizer == "optax"
    for i in range(2):
        ref = nqf.train_w(MODEL, np.asarray(Ws[i]), lr=LR, optimizer=tx, **KW)
        assert rel(batched.M[i], ref.M) <= 1e-12


def test_grad_through_optax_learning_rate():
    """d/d(lr inside optax.sgd) of the final loss, by reverse mode through the fixed-length
    scan, against a central finite difference of untransformed calls."""
    kw = dict(KW, save_every=STEPS)

    def final_loss(lr_inner):
        return nqf.train_w(MODEL, W0, lr=LR, optimizer=optax.sgd(lr_inner), **kw).loss[-1]

    g = jax.grad(final_loss)(LR)
    h = 1e-6
    fd = (final_loss(LR + h) - final_loss(LR - h)) / (2 * h)
    assert abs(g - fd) <= 1e-6 * abs(fd)


Fake = namedtuple("Fake", ["init", "update"])


@pytest.mark.parametrize(
    "optimizer, found",
    [
        (3, r"found 3 of type int"),
        (Fake(lambda p: (), lambda u, s, p=None: (u, s)), r"found Fake\(.*\) of type Fake"),
        (optax.adam, r"found <function adam.* of type function"),  # the factory, not called
    ],
    ids=["int", "duck-typed", "factory"],
)
def test_not_an_optimizer_is_a_type_error(optimizer, found):
    with pytest.raises(
        TypeError,
        match=r"`optimizer` must be one of \('sgd', 'momentum', 'nesterov', "
        r"'adam'\) or an optax.GradientTransformation \(e.g. optax.adam\(1e-3\)\); " + found,
    ):
        nqf.train_w(MODEL, W0, lr=LR, steps=3, optimizer=optimizer)


@pytest.mark.parametrize(
    "kw, names",
    [
        (dict(momentum=0.9), "`momentum`"),
        (dict(nesterov=True), "`nesterov`"),
        (dict(adam_b1=0.8, adam_eps=1e-6), "`adam_b1`, `adam_eps`"),
    ],
)
def test_string_optimizer_settings_with_optax_are_refused(kw, names):
    with pytest.raises(ValueError, match=f"{names} do not apply to an optax `optimizer`"):
        nqf.train_w(MODEL, W0, lr=LR, steps=3, optimizer=optax.sgd(LR), **kw)


@pytest.mark.parametrize("lr", [0.0, -1.0, None])
def test_lr_is_required_with_optax(lr):
    with pytest.raises((ValueError, TypeError), match="`lr`"):
        nqf.train_w(MODEL, W0, lr=lr, steps=3, optimizer=optax.sgd(LR))


def test_unknown_name_hints_at_optax():
    with pytest.raises(ValueError, match=r"found 'rmsprop' \(or pass an optax.GradientTransformation"):
        nqf.train_w(MODEL, W0, lr=LR, steps=3, optimizer="rmsprop")


def test_closed_map_refuses_optax():
    with pytest.raises(TypeError, match=r"has no closed map on \(M, mu\).*nqf.train_w"):
        nqf.closed_map(MODEL, W0=W0, lr=LR, steps=3, optimizer=optax.sgd(LR))


def test_import_nqf_does_not_import_optax():
    code = "import sys, nqf; assert 'optax' not in sys.modules, 'optax imported'"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
