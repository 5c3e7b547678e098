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


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module. One pytest process compiles a few
    thousand XLA CPU executables; kept all together they exhaust the process's memory mappings
    (vm.max_map_count = 65530) and XLA segfaulted while compiling near the end of the suite
    (twice, in test_validate.py, 2026-12-01). Modules keep their own programs while they run."""
    yield
    import gc

    import jax

    jax.clear_caches()
    gc.collect()
