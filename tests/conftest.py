import numpy as np
import pytest

import nqf  # noqa: F401  (enables float64)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_orthogonal(n, rng):
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    return Q * np.sign(np.diag(R))


def random_psd(p, rng, scale=1.0, rank=None):
    F = rng.standard_normal((p, rank or p))
    return scale * F @ F.T / p
