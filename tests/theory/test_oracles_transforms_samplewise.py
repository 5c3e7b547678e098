"""The sample-wise oracles (Theorems 4 and 5; xi by diffrax under tracing, scipy DOP853 otherwise)
inside JAX code: under jax.jit(jax.vmap(jax.value_and_grad)) they equal the plain call (1e-12
relative) and the gradients match central finite differences of the plain call (1e-6 relative).
Split from test_oracles_transforms.py so that the two pytest-xdist workers (--dist loadfile) share
the work."""

import jax
import numpy as np
import pytest

from _transform_checks import GTOL, RTOL, TS, central, random_psd, rel
from nqf.data import CommutingData
from nqf.samplewise import theorem4, theorem5
from nqf.validate._samplewise import thm4_data, thm5_data


@pytest.mark.parametrize("oracle, make", [(theorem4, thm4_data), (theorem5, thm5_data)], ids=["theorem4", "theorem5"])
def test_samplewise_oracles_under_transforms(oracle, make):
    """One compiled call: jit(vmap over the scale of M0 (value_and_grad with respect to that scale
    and the labels, the data set built inside)) with traced times. Values (M, z, xi, outputs,
    loss) against plain calls; gradients against central differences of plain calls."""
    data = make()
    M0 = random_psd(data.p, 1e-3, seed=1)
    Lam, P, y = np.asarray(data.Lambda), np.asarray(data.P), np.asarray(data.y)
    names = ("M", "z", "xi", "outputs")

    def loss(e, y, t):
        sol = oracle(CommutingData(Lam, y, P), t, M0=e * M0)
        return sol.loss[-1], [getattr(sol, name) for name in names]

    f = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)
    scales = np.array([1.0, 1e-3])
    (vals, fields), (ge, gy) = jax.jit(jax.vmap(f, in_axes=(0, None, None)))(scales, y, TS)
    for i, e in enumerate(scales):
        ref = oracle(data, TS, M0=e * M0)
        assert rel(vals[i], ref.loss[-1]) <= RTOL
        for name, got in zip(names, fields):
            assert rel(got[i], getattr(ref, name)) <= RTOL, name
        fd = central(lambda s: loss(s, y, TS)[0], e, 1e-5 * e)
        assert abs(ge[i] / fd - 1) <= GTOL
        for k in range(data.m):
            fd = central(lambda v: loss(e, v, TS)[0], y, np.eye(data.m)[k] * 1e-6)  # noqa: B023 (called here)
            assert abs(gy[i, k] - fd) <= GTOL * np.abs(gy[i]).max()
