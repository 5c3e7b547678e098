"""Issue 16: sample-wise theory at scale. `samplewise_rates`, `sample_ignition_times` and
`theorem5(..., matrices=False)` read DiagonalData, BlockData and LowRankData in block form
(O(m p) memory): checked against the dense computation (DenseData, joint diagonalization) at
small m, against the logistic closed form at m = 1e4, and for their peak memory there."""

import time
import tracemalloc

import numpy as np
import pytest

import nqf
from nqf.theory._oracles import logistic

TS = np.array([0.0, 3.0, 30.0, 300.0])


def _orthogonal_lowrank(m=4, r=2, extra=3, seed=0):
    """A_mu = U_mu diag(s_mu) U_mu^T with the columns of all U_mu drawn from one orthonormal
    basis (then mixed within each sample: U_mu not orthonormal)."""
    rng = np.random.default_rng(seed)
    p = m * r + extra
    Q = np.linalg.qr(rng.standard_normal((p, p)))[0]
    U = np.stack([Q[:, mu * r : (mu + 1) * r] @ rng.standard_normal((r, r)) for mu in range(m)])
    s = rng.uniform(0.5, 2.0, (m, r))
    return nqf.LowRankData(U, s, rng.uniform(0.5, 1.5, m)), p


def _small_cases():
    rng = np.random.default_rng(3)
    diag = nqf.DiagonalData(rng.uniform(0.5, 2.0, 6), rng.uniform(0.5, 1.5, 6))
    blocks = rng.uniform(0.5, 2.0, (4, 3))
    blocks[1, 2] = 0.0
    P = np.linalg.qr(rng.standard_normal((12, 12)))[0]
    block = nqf.BlockData(blocks, rng.uniform(0.5, 1.5, 4), P)
    lowrank, _ = _orthogonal_lowrank()
    return {"diagonal": diag, "block": block, "lowrank": lowrank}


@pytest.mark.parametrize("name", ["diagonal", "block", "lowrank"])
def test_structural_equals_dense(name):
    data = _small_cases()[name]
    dense = nqf.DenseData(np.asarray(data.dense()), data.y)
    W0 = 1e-2 * np.random.default_rng(7).standard_normal((data.p, 3))
    np.testing.assert_allclose(nqf.samplewise_rates(data), nqf.samplewise_rates(dense), rtol=1e-10)
    a = nqf.theorem5(data, TS, W0=W0, matrices=False)
    b = nqf.theorem5(dense, TS, W0=W0, matrices=False)
    np.testing.assert_allclose(a.outputs, b.outputs, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-9, atol=1e-18)
    np.testing.assert_allclose(a.xi, b.xi, rtol=1e-9, atol=1e-12)
    ia = nqf.sample_ignition_times(data, W0=W0, eps=1e-4)
    ib = nqf.sample_ignition_times(dense, W0=W0, eps=1e-4)
    for field in ("zeta", "leading", "logistic", "corrected", "exact"):
        np.testing.assert_allclose(getattr(ia, field), getattr(ib, field), rtol=1e-8, err_msg=field)
    # the matrix solution (matrices=True, the original path) agrees too
    full = nqf.theorem5(data, TS, W0=W0)
    np.testing.assert_allclose(full.outputs, a.outputs, rtol=1e-9, atol=1e-14)


def test_lowrank_residual_equals_dense():
    """The structural |A_mu A_nu|_F / (|A_mu| |A_nu|) of LowRankData equals the dense formula,
    also on data that are not orthogonal (and then the theory refuses)."""
    rng = np.random.default_rng(1)
    lr = nqf.LowRankData(rng.standard_normal((5, 6, 2)), rng.uniform(-1, 2, (5, 2)), np.ones(5))
    res, pair = nqf.samplewise.orthogonal_samples_residual(lr)
    res_d, pair_d = nqf.samplewise.orthogonal_samples_residual(nqf.DenseData(np.asarray(lr.dense()), lr.y))
    assert res == pytest.approx(res_d, rel=1e-10) and set(pair) == set(pair_d)
    with pytest.raises(nqf.AssumptionError, match="orthogonal samples"):
        nqf.samplewise_rates(lr)
    ortho, _ = _orthogonal_lowrank()
    assert nqf.samplewise.orthogonal_samples_residual(ortho)[0] < 1e-12


def test_lowrank_z0_shape_is_named():
    data, _ = _orthogonal_lowrank()
    with pytest.raises(
        ValueError, match=r"`z0` must have shape \(8,\) \(one strength per mode of the data\); found \(11,\)"
    ):
        nqf.theorem5(data, TS, z0=np.ones(11), matrices=False)


def test_samplewise_at_m_1e4():
    """m = 1e4 (the dense path would need m p^2 = 8e12 floats): DiagonalData against the logistic
    closed form of its one-mode samples, BlockData (K = 3, p = 3e4) for its memory and time."""
    m = 10_000
    rng = np.random.default_rng(0)
    lam, y = rng.uniform(0.5, 2.0, m), rng.uniform(0.5, 1.5, m)
    diag = nqf.DiagonalData(lam, y)
    z0 = np.full(m, 1e-4)
    ts = np.array([0.0, 1e3, 1e4, 3e4])
    tracemalloc.start()
    t = time.perf_counter()
    zeta = nqf.samplewise_rates(diag)
    sol = nqf.theorem5(diag, ts, z0=z0, matrices=False)
    ign = nqf.sample_ignition_times(diag, z0=z0, exact=False)
    blk = nqf.BlockData(rng.uniform(0.5, 2.0, (m, 3)), y)
    zb = nqf.theorem5(blk, ts, z0=np.full(3 * m, 1e-4), matrices=False)
    ib = nqf.sample_ignition_times(blk, z0=np.full(3 * m, 1e-4), exact=False)
    elapsed = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"m = 1e4: {elapsed:.2f} s, peak traced memory {peak / 1e6:.1f} MB")
    assert peak < 100e6 and elapsed < 30
    np.testing.assert_allclose(zeta, 8.0 / m * lam * y, rtol=1e-14)
    R, C = 8.0 / m * lam * y, 8.0 / m * lam**2  # one mode per sample: z' = R z - C z^2
    np.testing.assert_allclose(sol.z, logistic(R, C, z0, ts), rtol=1e-8)
    np.testing.assert_allclose(sol.outputs, lam * sol.z, rtol=1e-14)
    expected = np.log(0.5 * (y - lam * z0) / (0.5 * lam * z0)) / R  # f = rho y with rho = 1/2
    np.testing.assert_allclose(ign.logistic, expected, rtol=1e-12)
    assert zb.z.shape == (4, 3 * m) and np.all(np.isfinite(zb.loss)) and np.all(np.diff(zb.loss) <= 0)
    assert np.all(np.isfinite(ib.logistic)) and ib.zeta.shape == (m,)
