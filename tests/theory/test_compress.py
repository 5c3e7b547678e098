"""Compression (Theorem 3, Corollary 3, Eq. E24): `nqf.compress`.

Independent references: W-space training of the original width-d network (`nqf.train_w`,
autodiff gradients) for Theorem 3; the span against numpy's SVD of the dense stacked matrices;
the update direction against one step of `nqf.closed_sgd`; the Jacobian-based Lipschitz estimate
against finite-difference secants.
"""

import numpy as np
import pytest

import nqf
from nqf import compress as C
from nqf import datasets as ds

D, STEPS, BATCH = 500, 1000, 32
TOL = 1e-10
# Shared shapes (m = 200, p = 40, k_V = 32 for the two rank-2 data sets) so that JAX compiles
# each simulator once for both.
DATASETS = {
    "mlp": (lambda: ds.mlp_data(200, 39, rank=31), 0.02),
    "matrix_completion": (lambda: ds.matrix_completion_data(24, 16, 200, active_rows=20, active_cols=12), 0.5),
    "phase_retrieval": (lambda: ds.phase_retrieval_data(200, 40, rank=30), 2.0),
}


def dense_rank_basis(model, tol=1e-10):
    """Rank and column-space projector of [A_1 .. A_m, g^T, B_1 .. B_m] by numpy SVD (dense)."""
    blocks = [np.concatenate(list(np.asarray(model.data.dense())), axis=1)]
    if model.g is not None:
        blocks.append(np.asarray(model.g).T)
    if model.B is not None:
        blocks.append(np.concatenate(list(np.asarray(model.B)), axis=1))
    S = np.concatenate(blocks, axis=1)
    U, s, _ = np.linalg.svd(S, full_matrices=False)
    k = int(np.sum(s > tol * s[0]))
    return k, U[:, :k] @ U[:, :k].T


def rel_outputs(a, b):
    """max over steps of max_x |a - b| / max_x |b|."""
    return float(np.max(np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)))


def general_model(data, V, rng):
    """`data` with g, B inside span(V) and an f0, so that k_V is that of A alone."""
    m, k = data.m, V.shape[1]
    R = rng.standard_normal((m, k, k))
    B = np.einsum("ia,mab,jb->mij", V, 0.5 * (R + R.transpose(0, 2, 1)), V) * 0.1
    g = rng.standard_normal((m, k)) @ V.T * 0.3
    return nqf.NQFModel(data, g=g, B=B, f0=0.1 * rng.standard_normal(m))


# -- the span ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DATASETS))
def test_span_matches_dense_svd(name, rng):
    data = DATASETS[name][0]()
    span = C.data_span(data)
    k, P = dense_rank_basis(nqf.NQFModel(data))
    assert span.k == k < data.p
    np.testing.assert_allclose(span.V @ span.V.T, P, atol=1e-12)
    np.testing.assert_allclose(span.V.T @ span.V, np.eye(k), atol=1e-13)
    assert span.gap > 1e10
    # the dense representation of the same matrices gives the same singular values
    dense = C.data_span(nqf.DenseData(data.dense(), data.y))
    np.testing.assert_allclose(dense.singular_values, span.singular_values, atol=1e-12)


def test_span_with_g_B_and_commuting(rng):
    data = ds.mlp_data(50, 6, rank=3)
    V = C.data_span(data).V
    model = general_model(data, V, rng)
    span = C.data_span(model)
    k, P = dense_rank_basis(model)
    assert span.k == k == 4
    np.testing.assert_allclose(span.V @ span.V.T, P, atol=1e-12)
    # a g outside the span adds one dimension
    g = np.asarray(model.g).copy()
    g[3] += 1e-3 * (np.eye(data.p)[0] - P[0])
    assert C.k_V(nqf.NQFModel(data, g=g)) == 5
    # commuting data: exact zero columns of Lambda drop out
    Lam = rng.standard_normal((7, 5))
    Lam[:, [1, 3]] = 0.0
    Q = np.linalg.qr(rng.standard_normal((5, 5)))[0]
    cd = nqf.CommutingData(Lam, np.ones(7), Q)
    sp = C.data_span(cd)
    assert sp.k == 3
    np.testing.assert_allclose(sp.V @ sp.V.T, Q[:, [0, 2, 4]] @ Q[:, [0, 2, 4]].T, atol=1e-13)
    dsp = C.data_span(nqf.DenseData(cd.dense(), cd.y))
    np.testing.assert_allclose(dsp.singular_values, sp.singular_values, atol=1e-12)


def test_rank_tolerance():
    """A direction carried by one sample at relative size delta counts iff delta > rtol (the
    stacked rows are per-sample normalized; sigma_1 = sqrt(m / 3) here)."""
    m, p = 30, 6
    rng = np.random.default_rng(0)
    a = np.zeros((m, p))
    a[:, :3] = rng.standard_normal((m, 3))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    for delta, rtol, k in [(1e-6, 1e-10, 4), (1e-13, 1e-10, 3), (1e-6, 1e-4, 3)]:
        b = a.copy()
        b[0, 5] = delta
        data = nqf.LowRankData(b[:, :, None], np.ones((m, 1)), np.zeros(m))
        sp = C.data_span(data, rtol=rtol)
        assert sp.k == k, (delta, rtol, sp.singular_values)


def test_span_never_materializes_structured():
    """m = 2000 rank-2 matrices of size p = 120 (dense: 0.23 GB), from their rank-2 factors."""
    m, k = 2000, 119
    rng = np.random.default_rng(1)
    X = rng.standard_normal((m, 20)) @ rng.standard_normal((20, k))
    data = nqf.feedforward_data(np.zeros(m), a=X[:, :, None], b=np.ones((m, 1, 1)))
    assert C.data_span(data).k == 21


# -- Theorem 3 --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DATASETS))
def test_theorem3_width_500_vs_compressed_1000_sgd_steps(name, rng):
    """Width 500 in W-space vs width k_V + 1 (W-space and closed map), same minibatches."""
    make, lr = DATASETS[name]
    data = make()
    W0 = 0.3 * rng.standard_normal((data.p, D)) / np.sqrt(D)
    comp = C.theorem3(data, lr=lr, W0=W0)
    assert comp.d_prime == comp.span.k + 1 < data.p + 1 and comp.kind == "theorem3"
    assert comp.W0.shape == (data.p, comp.d_prime) and comp.lr == pytest.approx(lr * D / comp.d_prime)
    kw = dict(steps=STEPS, batch_size=BATCH, key=7)
    ref = nqf.train_w(data, W0, lr=lr, **kw)
    small_w = nqf.train_w(comp.model, comp.W0, lr=comp.lr, **kw)
    assert ref.loss[-1] < 0.5 * ref.loss[0]  # it learns
    err_w = rel_outputs(small_w.outputs, ref.outputs)
    err_c = 0.0
    if name != "phase_retrieval":  # the closed map of the compressed model (one shared compile)
        small_c = nqf.closed_sgd(comp.model, W0=comp.W0, lr=comp.lr, **kw)
        err_c = rel_outputs(small_c.outputs, ref.outputs)
    print(
        f"\n{name}: p={data.p} k_V={comp.span.k} d'={comp.d_prime}: output rel err W-space "
        f"{err_w:.2e}, closed map {err_c:.2e}"
    )
    assert err_w <= TOL and err_c <= TOL
    # order parameters: (d'/d) M~ = V V^T M V V^T, mu~ = V V^T mu
    P = comp.span.V @ comp.span.V.T
    M_proj = np.einsum("ij,njk,kl->nil", P, ref.M, P)
    M_lift, mu_lift = comp.lift(small_w.M, small_w.mu)
    assert np.abs(M_lift - M_proj).max() <= TOL * np.abs(M_proj).max()
    assert np.abs(mu_lift - ref.mu @ P).max() <= TOL * np.abs(ref.mu).max()


def test_theorem3_general_model_momentum_weight_decay(rng):
    """g, B, f0 in the span; heavy-ball momentum 0.9 and weight decay (gamma~ = (d'/d) gamma)."""
    data = ds.mlp_data(60, 6, rank=3, seed=2)
    model = general_model(data, C.data_span(data).V, rng)
    d = 80
    W0 = 0.3 * rng.standard_normal((data.p, d)) / np.sqrt(d)
    comp = C.theorem3(model, lr=0.005, W0=W0, weight_decay=0.05)
    assert comp.d_prime == 5 and comp.weight_decay == pytest.approx(0.05 * 5 / d)
    kw = dict(steps=300, batch_size=8, key=3, momentum=0.9)
    ref = nqf.train_w(model, W0, lr=0.005, weight_decay=0.05, **kw)
    small = nqf.train_w(comp.model, comp.W0, lr=comp.lr, weight_decay=comp.weight_decay, **kw)
    assert rel_outputs(small.outputs, ref.outputs) <= TOL


def test_theorem3_from_order_parameters_and_construction(rng):
    data = ds.mlp_data(40, 6, rank=3)
    d = 50
    W0 = rng.standard_normal((data.p, d)) / np.sqrt(d)
    a = C.theorem3(data, lr=0.1, W0=W0)
    b = C.theorem3(data, lr=0.1, M0=W0 @ W0.T, mu0=W0.sum(axis=1), d=d)
    np.testing.assert_allclose(a.M0, b.M0, atol=1e-13)
    np.testing.assert_allclose(a.mu0, b.mu0, atol=1e-13)
    P = a.span.V @ a.span.V.T
    np.testing.assert_allclose(a.scale * a.M0, P @ W0 @ W0.T @ P, atol=1e-13)
    np.testing.assert_allclose(a.W0.sum(axis=1), P @ W0.sum(axis=1), atol=1e-13)
    # a larger d' also works
    c = C.theorem3(data, lr=0.1, W0=W0, d_prime=a.d_prime + 3)
    np.testing.assert_allclose(c.scale * c.M0, P @ W0 @ W0.T @ P, atol=1e-13)
    Z = C.helmert_rows(4, 6)
    np.testing.assert_allclose(Z @ Z.T, np.eye(4), atol=1e-15)
    np.testing.assert_allclose(Z.sum(axis=1), 0.0, atol=1e-15)
    # the rescaled representations keep their type
    for dd in (
        data,
        nqf.DenseData(data.dense(), data.y),
        nqf.CommutingData(rng.standard_normal((3, 4)), np.ones(3), None),
    ):
        sc = C.scale_data(dd, 0.25)
        assert type(sc) is type(dd)
        np.testing.assert_allclose(sc.dense(), 0.25 * np.asarray(dd.dense()), atol=1e-15)


# -- Corollary 3 and E24 ----------------------------------------------------------------------


def graded_init(p, d, rng, scale=0.5):
    Q = np.linalg.qr(rng.standard_normal((p, p)))[0]
    return Q @ (scale * 2.0 ** -np.arange(p)[:, None] * rng.standard_normal((p, d))) / np.sqrt(d)


def test_corollary3_bound_holds_on_sweep(rng):
    data = ds.mlp_data(200, 8, seed=4)
    p = data.p
    W0 = graded_init(p, D, rng)
    idx = nqf.batch_indices(5, data.m, BATCH, 200)
    k_V = C.k_V(data)
    assert k_V == p
    for dp in (2, 9):
        r = C.compression_report(data, lr=0.02, steps=200, W0=W0, d_prime=dp, batch_indices=idx)
        assert r["kind"] == "corollary3" and r["d_prime"] == dp
        assert r["e0"] == pytest.approx(dp / D * r["tail"], rel=1e-9)  # e_0 = (d'/d) tail
        assert r["holds"] and r["holds_sharpened"] and r["holds_stepwise"]
        assert r["tightness"]["min"] == pytest.approx(D / dp, rel=1e-6)  # at t = 0
        assert r["L_covers_realized"] == 1.0
        assert r["error"] > 0


def test_corollary3_exact_when_nothing_is_dropped(rng):
    data = ds.mlp_data(50, 6)
    d = 40
    base = rng.standard_normal((data.p, 2)) @ rng.standard_normal((2, d))  # centered rank <= 2
    W0 = 0.2 * (base - base.mean(axis=1, keepdims=True)) / np.sqrt(d) + 0.05
    comp = C.corollary3(data, lr=0.05, W0=W0, d_prime=3)
    assert comp.tail <= 1e-12 * comp.eigenvalues[0]
    ref = nqf.closed_sgd(data, W0=W0, lr=0.05, steps=200, batch_size=10, key=1)
    small = nqf.closed_sgd(comp.model, W0=comp.W0, lr=comp.lr, steps=200, batch_size=10, key=1)
    e = C.compression_error(ref.M, ref.mu, *comp.lift(small.M, small.mu), 1.0)
    assert e.max() <= 1e-12 * np.abs(ref.M).max()


def test_update_direction_and_jacobian_estimate(rng):
    """G = (Phi - id)/eta against one `closed_sgd` step (E5-E6 code path of nqf.maps); the
    three-point Jacobian estimate bounds finite-difference secant slopes."""
    import equinox as eqx

    data = ds.mlp_data(30, 4)
    model = general_model(data, np.eye(data.p), rng)
    d, lr = 7, 0.03
    W = 0.4 * rng.standard_normal((data.p, d))
    M, mu = W @ W.T, W.sum(axis=1)
    one = nqf.closed_sgd(model, W0=W, lr=lr, steps=1, form="M")
    G = C._Direction(model, lr, float(d), 0.0, nqf.dynamics._losses.as_loss(None))
    GM, Gmu = eqx.filter_jit(G)(model, np.full(data.m, 1.0 / data.m), M, mu)
    np.testing.assert_allclose(M + lr * np.asarray(GM), one.M[1], rtol=0, atol=1e-13 * np.abs(M).max())
    np.testing.assert_allclose(mu + lr * np.asarray(Gmu), one.mu[1], rtol=0, atol=1e-13 * np.abs(mu).max())
    # three random secants of size 1e-6 (one per "step"; full batch)
    E = rng.standard_normal((3, *M.shape))
    Ms = np.stack([M] * 4)
    Mc = Ms + 1e-6 * np.concatenate([E + E.transpose(0, 2, 1), np.zeros((1, *M.shape))])
    mus = np.stack([mu] * 4)
    muc = mus + 1e-6 * np.concatenate([rng.standard_normal((3, *mu.shape)), np.zeros((1, *mu.shape))])
    lip = C.lipschitz_along(model, lr=lr, d=d, M=Ms, mu=mus, M_c=Mc, mu_c=muc)
    assert np.all(lip["realized"] > 0) and np.all(lip["realized"] <= lip["L"] * (1 + 1e-6))
    assert np.all(lip["map_L"] <= 1 + lr * lip["L"] * (1 + 1e-12))


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (
            lambda d: C.theorem3(d, lr=0.1, W0=np.ones((9, 50)), d_prime=3),
            ValueError,
            r"`d_prime` must be >= 6 \(Theorem 3 needs d' >= k_V \+ 1 = 6; use `corollary3`",
        ),
        (
            lambda d: C.corollary3(d, lr=0.1, W0=np.ones((9, 50)), d_prime=10),
            ValueError,
            r"`d_prime` must be in \[1, 9\].*found 10",
        ),
        (
            lambda d: C.corollary3(d, lr=0.1, W0=np.ones((9, 50)), d_prime=2.0),
            ValueError,
            r"`d_prime` must be an integer; found 2.0",
        ),
        (lambda d: C.data_span(d, rtol=0.0), ValueError, r"`rtol` must be finite and > 0; found 0.0"),
        (lambda d: C.data_span(d, rtol=2.0), ValueError, r"`rtol` must lie in \(0, 1\); found 2.0"),
        (lambda d: C.theorem3(d, lr=0.1, M0=np.eye(9)), ValueError, r"needs the original width"),
        (lambda d: C.theorem3(d, lr=-1.0, W0=np.ones((9, 5))), ValueError, r"`lr` must be finite and > 0"),
        (lambda d: C.theorem3(d, lr=0.1, W0=np.ones((8, 5))), ValueError, r"`W0` must have shape \(9, d\)"),
        (lambda d: C.data_span("A"), TypeError, r"`model` must be an `nqf.NQFModel` or an nqf data set"),
        (
            lambda d: C.lipschitz_along(
                d, lr=0.1, d=3, M=np.zeros((2, 9, 9)), mu=None, M_c=np.zeros((3, 9, 9)), mu_c=None
            ),
            ValueError,
            r"`M` and `M_c` must both have shape \(n, 9, 9\); found \(2, 9, 9\) and \(3, 9, 9\)",
        ),
        (
            lambda d: C.corollary3_bound(np.ones(4), np.ones(4), tail=1.0, lr=0.1),
            ValueError,
            r"`L_steps` must have shape \(3,\)",
        ),
    ],
)
def test_bad_input(call, exc, match):
    data = ds.mlp_data(40, 8, rank=4)
    with pytest.raises(exc, match=match):
        call(data)


# -- `nqf compress` -----------------------------------------------------------------------------


def test_cli_compress(tmp_path, capsys):
    """`nqf compress` on an .npz model: Theorem 3 (default d') and Corollary 3 (d' = 3)."""
    import json

    from nqf.cli import main

    data = ds.mlp_data(40, 6, rank=3, seed=1)
    W0 = graded_init(data.p, 60, np.random.default_rng(0))
    np.savez(tmp_path / "m.npz", a=data.a, b=data.b, y=data.y, W0=W0)
    common = ["--steps", "40", "--batch-size", "8", "--lr", "0.05"]
    assert main(["compress", str(tmp_path / "m.npz"), *common, "--json", str(tmp_path / "t3.json")]) == 0
    rep = json.loads((tmp_path / "t3.json").read_text())
    assert rep["k_V"] == 4 and rep["d_prime"] == 5 and rep["max_output_rel_error"] <= TOL
    assert (
        main(["compress", str(tmp_path / "m.npz"), *common, "--d-prime", "3", "--json", str(tmp_path / "c3.json")]) == 0
    )
    rep = json.loads((tmp_path / "c3.json").read_text())
    assert rep["kind"] == "corollary3" and rep["holds"] and rep["d"] == 60
    out = capsys.readouterr().out
    assert "k_V = 4" in out and "E24: tail" in out
    with pytest.raises(SystemExit):
        main(["compress", "nope"])
    np.savez(tmp_path / "bad.npz", y=data.y)
    with pytest.raises(SystemExit):
        main(["compress", str(tmp_path / "bad.npz")])
    assert "need 'A', or 'U' and 's', or 'a' and 'b', or 'Lambda'" in capsys.readouterr().err
