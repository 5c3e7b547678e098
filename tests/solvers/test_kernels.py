"""nqf.kernels: numba GLV kernels against the JAX reference, the exact z-map against closed_sgd
and train_w, backend selection, and every input error."""

import numpy as np
import pytest

import nqf
from conftest import random_orthogonal
from nqf import kernels
from nqf.data import CommutingData, DiagonalData
from nqf.dynamics._flow import rhs_glv

RTOL = 1e-13
P_BIG = 70_001  # > 2 parallel chunks (2^15) and a partial cache block


def close(a, b, rtol=RTOL):
    """Normwise relative: max |a - b| <= rtol max |b|."""
    a, b = np.asarray(a), np.asarray(b)
    scale = np.abs(b).max()
    assert np.abs(a - b).max() <= rtol * scale, (np.abs(a - b).max() / scale, rtol)


@pytest.fixture(scope="module")
def dense():
    rng = np.random.default_rng(7)
    m, p = 3, P_BIG
    L = rng.standard_normal((m, p)) / np.sqrt(p)
    y = rng.standard_normal(m)
    z = 1e-2 * rng.random(p)
    mask = rng.random(p) > 0.2
    return L, y, z, mask


@pytest.fixture(scope="module")
def diag():
    rng = np.random.default_rng(8)
    p = P_BIG
    lam = rng.standard_normal(p)
    y = rng.standard_normal(p)
    z = rng.random(p)
    mask = rng.random(p) > 0.2
    return lam, y, z, mask


# ------------------------------------------------------------------------------------------
# right-hand side: numba vs JAX
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("gamma", [0.0, 0.3])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("layout", ["dense", "diag"])
def test_rhs_numba_matches_jax(layout, masked, gamma, log, dense, diag):
    L, y, z, mask = dense if layout == "dense" else diag
    v = np.log(z) if log else z
    mk = mask if masked else None
    if masked:  # dead modes may hold anything, even non-finite values
        v = v.copy()
        v[np.flatnonzero(~mask)[:3]] = np.nan
    kw = dict(y=y, weight_decay=gamma, log=log, mask=mk)
    a = kernels.glv_rhs(L, v, backend="numba", **kw)
    b = kernels.glv_rhs(L, v, backend="jax", **kw)
    close(a, b)
    if masked:
        assert (a[~mask] == 0).all()
    # independent formula in numpy
    zz = np.where(mask, np.exp(np.where(mask, v, 0)) if log else v, 0) if masked else (np.exp(v) if log else v)
    if layout == "dense":
        r = -(8 / L.shape[0]) * ((L @ zz - y) @ L) - 2 * gamma
    else:
        r = -(8 / L.shape[0]) * L * (L * zz - y) - 2 * gamma
    ref = r if log else r * zz
    if masked:
        ref = np.where(mask, ref, 0)
    close(a, ref)


def test_rhs_log_form_matches_flow_rhs_glv(rng):
    """Same convention as the GLV vector field that nqf.solve_flow integrates (Eq. E13)."""
    m, p = 3, 40
    data = CommutingData(rng.standard_normal((m, p)), rng.standard_normal(m), random_orthogonal(p, rng))
    u = np.log(rng.random(p))
    mask = rng.random(p) > 0.3
    ref = np.asarray(rhs_glv(0.0, u, (data, 0.2, mask)))
    for backend in ("numba", "jax"):
        got = kernels.glv_rhs(data, u, weight_decay=0.2, log=True, mask=mask, backend=backend)
        close(got, ref)


def test_rhs_data_objects_and_out(diag, dense):
    lam, y, z, _ = diag
    out = np.empty_like(z)
    res = kernels.glv_rhs(DiagonalData(lam, y), z, out=out, backend="numba")
    assert res is out
    close(res, kernels.glv_rhs(lam, z, y=y, backend="jax"))
    L, yd, zd, _ = dense
    res = kernels.glv_rhs(CommutingData(L, yd), zd, backend="numba")
    close(res, kernels.glv_rhs(L, zd, y=yd, backend="numba"))
    # z form = z * log form
    close(kernels.glv_rhs(L, zd, y=yd), zd * kernels.glv_rhs(L, np.log(zd), y=yd, log=True))


def test_rhs_overflowing_checksum_is_not_an_error():
    """Finite but huge z overflows the in-kernel checksum; the full scan then finds nothing."""
    lam, y = np.full(10, 1e-300), np.zeros(10)
    z = np.full(10, 1e308)
    out = kernels.glv_rhs(lam, z, y=y, backend="numba")
    assert out.shape == (10,)


def test_fast_exp_accuracy():
    x = np.concatenate([np.linspace(-720, 720, 100_001), [np.nan, np.inf, -np.inf, 0.0, 1e-300]])
    out = np.empty_like(x)
    kernels._exp_into(x, out, x.size)
    with np.errstate(over="ignore"):
        ref = np.exp(x)
    fin = np.isfinite(ref) & (ref > 0)
    assert (np.abs(out[fin] - ref[fin]) / ref[fin]).max() < 4.5e-16
    np.testing.assert_array_equal(out[~fin], ref[~fin])


# ------------------------------------------------------------------------------------------
# the exact z-map against Theorem 2 in M space and W space
# ------------------------------------------------------------------------------------------


def _small_commuting(rng, m=3, p=6, d=4):
    Lam = rng.standard_normal((m, p))
    data = CommutingData(Lam, rng.standard_normal(m), random_orthogonal(p, rng))
    W0 = 0.3 * rng.standard_normal((p, d))
    z0 = np.asarray(data.z(W0 @ W0.T))
    return data, W0, z0


@pytest.mark.parametrize("gamma", [0.0, 0.05])
@pytest.mark.parametrize("batch", [None, 2])
def test_gd_matches_closed_sgd_and_train_w(rng, batch, gamma):
    """z_k = (P^T M P)_kk of Theorem 2's map (closed_sgd) and of W-space SGD (train_w), for a
    non-diagonal M0 (the diagonal closes for any M0), full batch and shared minibatches."""
    data, W0, z0 = _small_commuting(rng)
    steps, lr = 25, 0.05
    kw = dict(lr=lr, steps=steps, weight_decay=gamma, save_every=5)
    if batch:
        kw["batch_indices"] = np.asarray(nqf.batch_indices(3, data.m, batch, steps))
    cs = nqf.closed_sgd(data, W0=W0, **kw)
    tw = nqf.train_w(data, W0, **kw)
    z_cs = np.stack([np.asarray(data.z(M)) for M in cs.M])
    z_tw = np.stack([np.asarray(data.z(M)) for M in tw.M])
    for backend in ("numba", "jax"):
        tr = kernels.glv_gd(data, z0, backend=backend, **kw)
        assert tr.backend == backend
        np.testing.assert_array_equal(tr.steps, cs.steps)
        np.testing.assert_allclose(tr.t, lr * cs.steps)
        close(tr.z, z_cs, 1e-12)
        close(tr.z, z_tw, 1e-12)
        np.testing.assert_allclose(tr.loss, cs.loss, rtol=1e-11)


@pytest.mark.parametrize("gamma", [0.0, 0.05])
@pytest.mark.parametrize("batch", [None, "repeats"])
def test_diag_gd_matches_closed_sgd(rng, batch, gamma):
    p, steps, lr = 7, 30, 0.1
    lam, y = rng.standard_normal(p), rng.standard_normal(p)
    W0 = 0.3 * rng.standard_normal((p, 3))
    z0 = np.diag(W0 @ W0.T)
    kw = dict(lr=lr, steps=steps, weight_decay=gamma, save_every=7)
    if batch:  # repeated entries count twice in the weights
        idx = rng.integers(0, p, size=(steps, 4))
        idx[:, 1] = idx[:, 0]
        kw["batch_indices"] = idx
    cs = nqf.closed_sgd(CommutingData(np.diag(lam), y), W0=W0, **kw)
    z_cs = np.stack([np.diag(M) for M in cs.M])
    for backend in ("numba", "jax"):
        tr = kernels.glv_gd(DiagonalData(lam, y), z0, backend=backend, **kw)
        close(tr.z, z_cs, 1e-12)
        np.testing.assert_allclose(tr.loss, cs.loss, rtol=1e-11)


@pytest.mark.parametrize("gamma", [0.0, 0.2])
@pytest.mark.parametrize("batch", [None, 2])
@pytest.mark.parametrize("layout", ["dense", "diag"])
def test_gd_numba_matches_jax_large(layout, batch, gamma, dense, diag):
    L, y, z, _ = dense if layout == "dense" else diag
    steps = 12
    kw = dict(y=y, lr=0.3, steps=steps, weight_decay=gamma, save_every=5)
    if batch:
        rng = np.random.default_rng(0)
        kw["batch_indices"] = rng.integers(0, y.shape[0], size=(steps, 2 if layout == "dense" else 500))
    a = kernels.glv_gd(L, z, backend="numba", **kw)
    b = kernels.glv_gd(L, z, backend="jax", **kw)
    np.testing.assert_array_equal(a.steps, [0, 5, 10, 12])
    close(a.z, b.z)
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-12)


def test_diag_sgd_scale_folding():
    """lr gamma = 1 zeroes every coordinate outside the batch (the lazy scale hits 0)."""
    lam, y = np.ones(5), np.zeros(5)
    z0 = np.ones(5)
    idx = np.array([[0], [0], [0]])
    kw = dict(y=y, lr=0.5, steps=3, weight_decay=2.0, batch_indices=idx)
    a = kernels.glv_gd(lam, z0, backend="numba", **kw)
    b = kernels.glv_gd(lam, z0, backend="jax", **kw)
    np.testing.assert_allclose(a.z, b.z, rtol=1e-15, atol=0)
    assert (a.z[-1, 1:] == 0).all()


def test_gd_batch_size_draws_like_closed_sgd(rng):
    data, W0, z0 = _small_commuting(rng)
    kw = dict(lr=0.05, steps=6, batch_size=2, key=11)
    cs = nqf.closed_sgd(data, W0=W0, **kw)
    tr = kernels.glv_gd(data, z0, **kw)
    close(tr.z[-1], np.asarray(data.z(cs.M[-1])), 1e-12)


def test_gd_flow_limit(rng):
    """As lr -> 0 at fixed t = lr * steps the map approaches the flow: one step of size lr
    moves z by lr * glv_rhs(z) to first order."""
    data, _, z0 = _small_commuting(rng)
    lr = 1e-6
    tr = kernels.glv_gd(data, z0, lr=lr, steps=1)
    np.testing.assert_allclose((tr.z[1] - z0) / lr, kernels.glv_rhs(data, z0), rtol=1e-4)


def test_gd_diverges_raises():
    with pytest.raises(FloatingPointError, match="Reduce `lr`"):
        kernels.glv_gd(np.ones((1, 3)), np.ones(3), y=np.ones(1), lr=1e3, steps=40, backend="numba")


# ------------------------------------------------------------------------------------------
# backend selection
# ------------------------------------------------------------------------------------------


def test_backend_auto_selection():
    for kind, thr in (("rhs", kernels.AUTO_THRESHOLD_RHS), ("gd", kernels.AUTO_THRESHOLD_GD)):
        small, big = np.ones((4, thr // 4 - 1)), np.ones((4, thr // 4))
        assert kernels.select_backend(small, y=np.ones(4), kind=kind) == "jax"
        assert kernels.select_backend(big, y=np.ones(4), kind=kind) == "numba"
        lam_s, lam_b = np.ones(thr - 1), np.ones(thr)
        assert kernels.select_backend(lam_s, y=lam_s, kind=kind) == "jax"
        assert kernels.select_backend(lam_b, y=lam_b, kind=kind) == "numba"
        assert kernels.select_backend(small, y=np.ones(4), backend="numba", kind=kind) == "numba"
        assert kernels.select_backend(big, y=np.ones(4), backend="jax", kind=kind) == "jax"
    thr = kernels.AUTO_THRESHOLD_GD
    z = 1e-3 * np.ones(thr)
    assert kernels.glv_gd(np.ones(thr), z, y=np.ones(thr), lr=0.1, steps=2).backend == "numba"
    assert kernels.glv_gd(np.ones(10), z[:10], y=np.ones(10), lr=0.1, steps=2).backend == "jax"
    with pytest.raises(ValueError, match="`kind` must be 'rhs' or 'gd'"):
        kernels.select_backend(np.ones(3), y=np.ones(3), kind="map")


# ------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------

L3, Y3, Z3 = np.ones((2, 3)), np.ones(2), np.ones(3)


@pytest.mark.parametrize("backend", ["numba", "jax"])
@pytest.mark.parametrize("layout", ["dense", "diag"])
def test_rhs_nonfinite_state(backend, layout):
    L, y = (L3, Y3) if layout == "dense" else (np.ones(3), np.ones(3))
    for bad in (np.nan, np.inf, -np.inf):
        z = Z3.copy()
        z[1] = bad
        with pytest.raises(ValueError, match=r"`z` must be finite; .*index 1"):
            kernels.glv_rhs(L, z, y=y, backend=backend)
        with pytest.raises(ValueError, match=r"`u` must be finite; .*index 1"):
            kernels.glv_rhs(L, z, y=y, log=True, backend=backend)
    z = Z3.copy()
    z[1] = np.nan  # a dead mode may hold anything
    kernels.glv_rhs(L, z, y=y, log=True, mask=np.array([True, False, True]), backend=backend)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(z=np.ones(4)), r"`z` must have shape \(3,\).*found \(4,\)"),
        (dict(z=np.ones((3, 1))), r"`z` must have shape \(3,\)"),
        (dict(y=np.ones(3)), r"`y` must have shape \(2,\).*found \(3,\)"),
        (dict(y=None), r"give the labels `y`"),
        (dict(weight_decay=-1.0), r"`weight_decay` must be finite and >= 0; found -1.0"),
        (dict(backend="cuda"), r"`backend` must be one of .*'cuda'"),
        (dict(mask=np.ones(3)), r"`mask` must be a boolean array of shape \(3,\)"),
        (dict(mask=np.ones(2, bool)), r"`mask` must be a boolean array of shape \(3,\)"),
        (dict(out=np.empty(4)), r"`out` must be a writable C-contiguous float64.*\(3,\)"),
        (dict(out=np.empty(3, np.float32)), r"`out` must be a writable"),
        (dict(out=np.empty(6)[::2]), r"`out` must be a writable"),
        (dict(out=np.ones(3).view()), None),
        (dict(L=np.ones((2, 3, 1))), r"`Lambda` must be a 2-d array of shape \(m, p\)"),
        (dict(L=np.array([[1.0, np.nan, 1.0], [1, 1, 1]])), r"`Lambda` must be finite.*index 1"),
        (dict(y=np.array([1.0, np.inf])), r"`y` must be finite"),
        (dict(L=np.ones(3), y=np.ones(2)), r"`y` must have shape \(3,\).*match `lam`"),
        (dict(L=np.array([1.0, np.nan, 0.0]), y=np.ones(3)), r"`lam` must be finite"),
    ],
)
def test_rhs_bad_inputs(kwargs, match):
    kw = dict(L=L3, z=Z3, y=Y3)
    kw.update(kwargs)
    L, z = kw.pop("L"), kw.pop("z")
    if match is None:
        kernels.glv_rhs(L, z, **kw)
        return
    with pytest.raises(ValueError, match=match):
        kernels.glv_rhs(L, z, **kw)


def test_rhs_bad_data_types():
    with pytest.raises(TypeError, match=r"`data` must be an `nqf.CommutingData`.*found list"):
        kernels.glv_rhs([[1.0]], Z3, y=Y3)
    with pytest.raises(TypeError, match=r"`z` must be a numeric array"):
        kernels.glv_rhs(L3, np.array(["a", "b", "c"]), y=Y3)
    with pytest.raises(ValueError, match=r"`y` is taken from the data object"):
        kernels.glv_rhs(CommutingData(L3, Y3), Z3, y=Y3)
    readonly = np.empty(3)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match=r"`out` must be a writable"):
        kernels.glv_rhs(L3, Z3, y=Y3, out=readonly)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(z0=np.array([1.0, -1e-3, 0.0])), r"`z0` must be >= 0 .*index 1: -0.001"),
        (dict(z0=np.array([1.0, np.nan, 0.0])), r"`z0` must be finite; .*index 1"),
        (dict(z0=np.ones(2)), r"`z0` must have shape \(3,\)"),
        (dict(lr=0.0), r"`lr` must be finite and > 0; found 0.0"),
        (dict(lr=np.inf), r"`lr` must be finite and > 0"),
        (dict(steps=0), r"`steps` must be an integer >= 1; found 0"),
        (dict(steps=2.5), r"`steps` must be an integer >= 1"),
        (dict(save_every=0), r"`save_every` must be an integer >= 1"),
        (dict(weight_decay=-0.1), r"`weight_decay` must be finite and >= 0"),
        (dict(batch_size=3), r"`batch_size` must be an integer in \[1, m=2\]"),
        (dict(batch_indices=np.zeros((4, 1), int)), r"`batch_indices` must have shape \(steps=3"),
        (dict(batch_indices=np.full((3, 1), 2)), r"`batch_indices` entries must lie in \[0, m=2\)"),
        (dict(batch_indices=np.zeros((3, 1), int), batch_size=1), r"Give either `batch_indices`"),
        (dict(backend="gpu"), r"`backend` must be one of"),
    ],
)
def test_gd_bad_inputs(kwargs, match):
    kw = dict(z0=Z3, y=Y3, lr=0.1, steps=3)
    kw.update(kwargs)
    z0 = kw.pop("z0")
    with pytest.raises(ValueError, match=match):
        kernels.glv_gd(L3, z0, **kw)


def test_bytes_moved():
    assert kernels.bytes_moved(4, 10) == 8 * 11 * 10
    assert kernels.bytes_moved(4, 10, log=True) == 8 * 10 * 10
    assert kernels.bytes_moved(None, 10) == 320
