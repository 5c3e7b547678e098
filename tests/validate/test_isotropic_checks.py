"""Theorem 7's a = 2 branch on isotropic data (`nqf.validate._isotropic`) and the isotropic data
sets it uses (`basis_isotropic_data`, `datasets.sampled_isotropic_data`)."""

import numpy as np
import pytest

from nqf.data import datasets
from nqf.theory import isotropy
from nqf.validate import _isotropic as I


def test_basis_isotropic_data_is_exactly_isotropic_with_the_given_spectrum():
    g = np.array([1.0, 0.5, -0.3, 0.2])
    data = I.basis_isotropic_data(g, 0.25, seed=3)
    c, res, kappa = isotropy(data)
    assert abs(c - 0.25) <= 1e-14 and res <= 1e-12 and kappa.size == 10
    np.testing.assert_allclose(np.linalg.eigvalsh(np.asarray(data.Y())), np.sort(g), atol=1e-14)
    A = np.asarray(data.dense())
    comm = np.einsum("aij,bjk->abik", A, A) - np.einsum("bij,ajk->abik", A, A)
    assert np.abs(comm).max() > 0.1  # the A_mu do not commute (not Theorem 6 / Proposition 7 data)


def test_sampled_isotropic_data_population_and_repeat():
    p, c = 3, 0.25
    Ms = np.diag([1.0, 0.5, 0.25])
    big = datasets.sampled_isotropic_data(p, 4000, c, M_star=Ms, seed=1)
    cb, rb, _ = isotropy(big)
    assert abs(cb / c - 1) < 0.03 and rb < 0.15  # the population is isotropic with this c
    A = np.asarray(big.dense())
    np.testing.assert_allclose(big.y, np.einsum("mij,ij->m", A, Ms), rtol=1e-13)  # teacher labels
    small = datasets.sampled_isotropic_data(p, 12, c, M_star=Ms, seed=2)
    rep = datasets.sampled_isotropic_data(p, 12, c, M_star=Ms, seed=2, repeat=5)
    assert rep.m == 60
    cs, rs, ks = isotropy(small)
    cr, rr, kr = isotropy(rep)
    assert abs(cs - cr) <= 1e-14 * cs and abs(rs - rr) <= 1e-12 and rs > 0.2  # same K; far from isotropic
    np.testing.assert_allclose(np.asarray(rep.Y()), np.asarray(small.Y()), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="`p`, `m` and `repeat` must be >= 1"):
        datasets.sampled_isotropic_data(3, 0)
    with pytest.raises(ValueError, match="`c` must be > 0"):
        datasets.sampled_isotropic_data(3, 5, -1.0)
    with pytest.raises(ValueError, match="M_star"):
        datasets.sampled_isotropic_data(3, 5, M_star=np.triu(np.ones((3, 3))))


@pytest.mark.slow
def test_approximate_isotropy():
    """The samples' errors shrink with the residual (check_isotropic_ignition((1e-6,)), the same
    call as `nqf validate --eps 1e-6`, is asserted in test_validate.py::test_validate_one_eps)."""
    re = I.approximate_isotropy_errors(multiples=(1, 16, 256), seeds=(0,))
    res, err = re[:, 0], re[:, 1]
    assert np.all(np.diff(res) < 0) and np.all(np.diff(err) < 0), re  # more samples: both shrink
    assert err[-1] < 0.25 * err[0]
    slope = np.polyfit(np.log(res), np.log(err), 1)[0]
    assert abs(slope - 1) <= I.APPROX_SLOPE_BOUND, re


def test_sampled_isotropic_data_refuses_non_integer_sizes():
    for kw in (dict(p=2.5, m=5), dict(p=2, m=5.7), dict(p=2, m=5, repeat=1.5), dict(p=True, m=5)):
        with pytest.raises(TypeError, match="must be an int"):
            datasets.sampled_isotropic_data(**kw)
