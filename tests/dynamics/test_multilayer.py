"""Multi-layer NQFs (Theorems 14, 15; `nqf.multilayer`) and the Fig. 8 reproduction.

References: weight-space training with autodiff gradients through M = W W^T, mu = W 1
(`train_deep_w`), autodiff of the loss in the order parameters for (v, H), the dense structure
path for the structured feed-forward layers, and the original deep networks of Fig. 8.
"""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from _quick_runs import quick_run
from nqf import multilayer as ml
from nqf.experiments import fig8

TOL = 1e-12
_rng = np.random.default_rng(0)
M_IN, K0, P1, D1, P2 = 24, 4, 5, 3, 4


def _sym(a):
    return 0.5 * (a + np.swapaxes(a, -1, -2))


S1 = jnp.asarray(_sym(_rng.standard_normal((D1, K0 + 1, P1, P1))) / P1)
G1 = jnp.asarray(_rng.standard_normal((D1, K0, P1)) * 0.1)
B1 = jnp.asarray(_sym(_rng.standard_normal((D1, P1, P1))) * 0.02)
C1 = jnp.asarray(_rng.standard_normal((D1, K0)) * 0.3)
S2 = jnp.asarray(_sym(_rng.standard_normal((D1 + 1, P2, P2))) / P2)
G2 = jnp.asarray(_rng.standard_normal((D1, P2)) * 0.1)
B2 = jnp.asarray(_sym(_rng.standard_normal((P2, P2))) * 0.02)


def structure1(x):
    """A, C, g, B all depending (affinely / nonlinearly) on the input x (4,)."""
    xe = jnp.concatenate([x, jnp.ones(1)])
    return ml.Structure(jnp.einsum("j,kjab->kab", xe, S1), C1 @ x, jnp.einsum("j,kjp->kp", x, G1), jnp.tanh(x[0]) * B1)


def structure2(h):
    """Layer 2 components depend nonlinearly on h^(1) (3,)."""
    z = jnp.concatenate([jnp.tanh(h), jnp.ones(1)])
    return ml.Structure(
        jnp.einsum("j,jab->ab", z, S2)[None], None, (jnp.tanh(h) @ G2)[None], (jnp.cos(h[1]) * B2)[None]
    )


X_IN = _rng.standard_normal((M_IN, K0))
Y_IN = np.sin(X_IN[:, 0]) + 0.5 * X_IN[:, 1]
DEEP = ml.DeepNQF([ml.Layer(structure1, P1, D1), ml.Layer(structure2, P2, 1)], X_IN, Y_IN)


_outputs = eqx.filter_jit(lambda deep, Ms, mus: deep.outputs(Ms, mus))


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def init(widths, scale=0.5, seed=1):
    rng = np.random.default_rng(seed)
    return [scale * rng.standard_normal((lay.p, d)) / np.sqrt(d) for lay, d in zip(DEEP.layers, widths)]


# -- Theorem 14 --------------------------------------------------------------------------------


@pytest.mark.parametrize("widths", [(7, 3), (300, 60)])
def test_theorem14_closed_vs_wspace_200_steps(widths):
    W0 = init(widths)
    kw = dict(lr=(0.05, 0.03), steps=200, batch_size=8, key=3)
    ref = ml.train_deep_w(DEEP, W0, **kw)
    assert ref.loss[-1] < 0.2 * ref.loss[0]
    for form in ("factor", "M") if widths[0] < 10 else ("factor",):
        cl = ml.closed_deep_sgd(DEEP, W0, form=form, **kw)
        errs = [rel(cl.M[l], ref.M[l]) for l in range(2)] + [rel(cl.mu[l], ref.mu[l]) for l in range(2)]
        errs.append(rel(cl.outputs, ref.outputs))
        print(f"\nwidths {widths} form {form}: max rel err M, mu, outputs {max(errs):.2e}")
        assert max(errs) <= TOL, errs


def test_theorem14_v_H_equal_order_parameter_gradients():
    """v^(l) = dL/dmu^(l) and H^(l) = 2 sym(dL/dM^(l)) (grad_W L = v 1^T + H W) by autodiff of
    the loss as a function of the order parameters, against the delta-weighted sums."""
    W0 = init((6, 4))
    Ms = [jnp.asarray(W @ W.T) for W in W0]
    mus = [jnp.asarray(W.sum(axis=1)) for W in W0]
    loss = nqf.dynamics._losses.as_loss(None)
    terms = jax.jit(lambda Ms, mus: ml._gradient_terms(DEEP, loss, Ms, mus, DEEP.X, DEEP.y, (0.0, 0.0)))
    vs, Hs = terms(Ms, mus)

    def L(Ms, mus):
        return ml._batch_loss(DEEP, loss, DEEP.outputs(Ms, mus), DEEP.y)

    gM, gmu = jax.jit(jax.grad(L, argnums=(0, 1)))(Ms, mus)
    for l in range(2):
        np.testing.assert_allclose(vs[l], gmu[l], rtol=0, atol=1e-13 * np.abs(gmu[l]).max())
        np.testing.assert_allclose(Hs[l], gM[l] + gM[l].T, rtol=0, atol=1e-13 * np.abs(gM[l]).max())


def test_feedforward_layer_fast_path_matches_dense():
    lay = ml.feedforward_layer(5, 3, phi_prime0=0.7, transform=jnp.tanh)
    dense = ml.Layer(lay.structure, lay.p, lay.D)
    rng = np.random.default_rng(2)
    H = rng.standard_normal((6, 5))
    W = rng.standard_normal((lay.p, 4))
    M, mu = W @ W.T, W.sum(axis=1)
    c = rng.standard_normal((6, 3))
    for h in H:
        np.testing.assert_allclose(lay.evaluate(h, M, mu), dense.evaluate(h, M, mu), atol=1e-14)
    np.testing.assert_allclose(lay.weighted_A(H, c), dense.weighted_A(H, c), atol=1e-14)


# -- Theorem 15 --------------------------------------------------------------------------------


def test_theorem15_per_layer_compression():
    rng = np.random.default_rng(0)
    m, k0 = 30, 8
    Q = np.linalg.qr(rng.standard_normal((k0, k0)))[0][:, :3]
    X = rng.standard_normal((m, 3)) @ Q.T  # inputs in a 3-d subspace
    y = np.tanh(X @ rng.standard_normal(k0) / 3)
    lay1 = ml.feedforward_layer(k0, D1)
    lay2 = ml.feedforward_layer(D1, 1, transform=jnp.tanh)
    deep = ml.DeepNQF([lay1, lay2], X, y)
    d = (300, 200)
    W0 = [0.3 * rng.standard_normal((lay.p, w)) / np.sqrt(w) for lay, w in zip(deep.layers, d)]
    kw = dict(steps=300, batch_size=10, key=2)
    ref = ml.train_deep_w(deep, W0, lr=0.1, **kw)
    spans = ml.layer_spans(deep, ref)
    assert [s.k for s in spans] == [3 + D1, D1 + 1]
    comp = ml.compress_deep(deep, W0, lr=0.1, spans=spans)
    assert comp.widths_compressed == (7, 5) and comp.widths == d
    np.testing.assert_allclose(comp.lr, (0.1 * 300 / 7, 0.1 * 200 / 5))
    small = ml.train_deep_w(comp.deep, comp.W0, lr=comp.lr, **kw)
    err = rel(small.outputs, ref.outputs)
    # the hidden layer h^(1) on every training input at every saved step, too
    h_ref = ml._inputs_at(deep, [jnp.asarray(M) for M in ref.M], [jnp.asarray(u) for u in ref.mu])[0]
    h_small = ml._inputs_at(comp.deep, [jnp.asarray(M) for M in small.M], [jnp.asarray(u) for u in small.mu])[0]
    print(
        f"\nTheorem 15: widths {d} -> {comp.widths_compressed}: output rel err {err:.2e}, "
        f"hidden {rel(h_small, h_ref):.2e}"
    )
    assert err <= 1e-10 and rel(h_small, h_ref) <= 1e-10
    assert ref.loss[-1] < 0.05 * ref.loss[0]


# -- Fig. 8 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["mlp", "attention"])
def test_fig8_nqf_matches_original_at_tiny_init(arch):
    """The 2-layer NQF built from the original's weights has the original's outputs up to
    O(init variance) (leading order of Props. 1 and 2)."""
    Xtr, ytr, Xte, _ = fig8.make_data(arch)
    shapes = fig8.MLP_SHAPES if arch == "mlp" else fig8.ATT_SHAPES
    errs = []
    for var in (1e-4, 1e-6):
        rng = np.random.default_rng(1)
        P0 = [jnp.asarray(np.sqrt(var) * rng.standard_normal(s)) for s in shapes]
        f = np.asarray(jax.jit(fig8.FORWARD[arch])(P0, jnp.asarray(Xtr)))
        deep, W0, _ = fig8.nqf_models(arch, P0, Xtr, ytr, Xte)["nqf2"]
        g = np.asarray(_outputs(deep, [jnp.asarray(W @ W.T) for W in W0], [jnp.asarray(W.sum(axis=1)) for W in W0]))[
            :, 0
        ]
        errs.append(rel(g, f))
    assert errs[0] < 1e-2 and 50 < errs[0] / errs[1] < 200, errs


@pytest.mark.parametrize("arch", ["mlp", "attention"])
def test_fig8_one_step_shares_lr_and_loss(arch):
    """One GD step of the original at learning rate lr, mapped onto the NQF neurons, changes each
    layer's M = W W^T as one `closed_deep_sgd` step of the 2-layer NQF at the SAME lr does, up to
    O(init variance): the two share W0, lr and the loss L = mean (f - y)^2 (a factor 2, 1/m or
    a transposed neuron layout would give an O(1) error)."""
    Xtr, ytr, Xte, _ = fig8.make_data(arch)
    shapes = fig8.MLP_SHAPES if arch == "mlp" else fig8.ATT_SHAPES
    lr = fig8.LR[arch]["small"]
    fwd = fig8.FORWARD[arch]
    errs = []
    grad = jax.jit(jax.grad(lambda P: jnp.mean((fwd(P, jnp.asarray(Xtr)) - ytr) ** 2)))  # one program for both
    for var in (1e-4, 1e-6):
        rng = np.random.default_rng(2)
        P0 = [jnp.asarray(np.sqrt(var) * rng.standard_normal(s)) for s in shapes]
        g = grad(P0)
        P1 = [p - lr * gp for p, gp in zip(P0, g)]
        deep, W0, _ = fig8.nqf_models(arch, P0, Xtr, ytr, Xte)["nqf2"]
        W1 = fig8.nqf_models(arch, P1, Xtr, ytr, Xte)["nqf2"][1]
        traj = ml.closed_deep_sgd(deep, W0, lr=lr, steps=1, form="M")
        errs.append(max(rel(traj.M[l][1] - traj.M[l][0], W1[l] @ W1[l].T - W0[l] @ W0[l].T) for l in range(2)))
    assert errs[0] < 1e-2 and 30 < errs[0] / errs[1] < 300, errs


@pytest.mark.slow  # a reproduction
def test_fig8_quick(tmp_path_factory):
    rc, out, stdout, res = quick_run("fig8", tmp_path_factory)
    assert res == json.loads((out / "fig8.json").read_text())
    assert (out / "fig8.png").stat().st_size > 10_000
    assert rc == 0 and len(res["checks"]) == 2 and all(c["passed"] for c in res["checks"])
    names = [c["name"] for c in res["claims"]]
    assert len(names) == 10 and len(set(names)) == 10
    assert set(res["gaps"]) == {"mlp small", "mlp large", "attention small", "attention large"}
    for case in res["cases"].values():
        n = res["settings"]["n_saves"] + 1
        assert len(case["steps"]) == n and case["steps"][-1] == res["settings"]["steps"]
        for name in ("original", "nqf2", "nqf1"):
            assert len(case["curves"][name]["train"]) == n
        for name in ("nqf2", "nqf1"):
            assert set(case[name]["train"]) >= {"gap_max", "gap_max_early", "gap_final", "log_gap_final"}
    small = res["cases"]["mlp small"]
    # the 1-layer NQF (frozen features) ends far above the original, the 2-layer NQF does not
    fl = small["final_loss"]
    assert fl["nqf1"]["train"] > 1.5 * fl["nqf2"]["train"]
    att = res["gaps"]["attention small"]
    assert att["nqf2"]["train_gap_max"] < att["nqf1"]["train_gap_max"]
    # the leading-order error at step 0 (variance x fan_in = 0.8 at both small inits)
    for key in ("mlp small", "attention small"):
        assert 0.2 < res["gaps"][key]["nqf2"]["init_output_rel_err"] < 0.4


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (
            lambda: ml.DeepNQF([ml.Layer(structure1, P1, D1)], X_IN, np.zeros((M_IN, 2))),
            ValueError,
            r"`y` must have shape \(24,\) or \(24, 3\).*found \(24, 2\)",
        ),
        (
            lambda: ml.DeepNQF([ml.Layer(structure1, P1 + 1, D1)], X_IN, np.zeros((M_IN, 3))),
            ValueError,
            r"layer 1: structure component `A` must have shape \(3, 6, 6\); found \(3, 5, 5\)",
        ),
        (
            lambda: ml.DeepNQF([ml.Layer(structure1, P1, D1), ml.Layer(structure2, P2, 2)], X_IN, np.zeros((M_IN, 2))),
            ValueError,
            r"layer 2: structure component `A` must have shape \(2, 4, 4\)",
        ),
        (lambda: ml.Layer(structure1, 0, D1), ValueError, r"`p` must be an integer >= 1; found 0"),
        (lambda: ml.Layer(structure1, P1, D1, traces=lambda h, M: h), ValueError, r"Give both `traces` and `weighted`"),
        (
            lambda: ml.closed_deep_sgd(DEEP, [np.ones((P1, 3))], lr=0.1, steps=2),
            ValueError,
            r"`W0` must be a list of 2 arrays",
        ),
        (
            lambda: ml.closed_deep_sgd(DEEP, [np.ones((P1 + 1, 3)), np.ones((P2, 2))], lr=0.1, steps=2),
            ValueError,
            r"`W0\[0\]` must have shape \(5, d\).*found \(6, 3\)",
        ),
        (
            lambda: ml.closed_deep_sgd(DEEP, init((3, 2)), lr=(0.1, 0.1, 0.1), steps=2),
            ValueError,
            r"`lr` must be a scalar or one value per layer \(2\); found 3",
        ),
        (
            lambda: ml.closed_deep_sgd(DEEP, init((3, 2)), lr=0.1, steps=2, form="W"),
            ValueError,
            r"`form` must be 'factor' or 'M'; found 'W'",
        ),
        (
            lambda: ml.train_deep_w(DEEP, init((3, 2)), lr=-0.1, steps=2),
            ValueError,
            r"`lr` must be finite and > 0; found -0.1",
        ),
    ],
)
def test_bad_input(make, exc, match):
    with pytest.raises(exc, match=match):
        make()
