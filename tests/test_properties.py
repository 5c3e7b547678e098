"""Property tests (hypothesis) on random small data sets and initial conditions (issue 16):
M(t) stays symmetric PSD along the flow, the MSE loss does not increase, the closed map on
(M, mu) equals SGD in weight space, and random bad input raises ValueError / TypeError naming
the argument. Shapes are fixed (p = 3, m = 4, d = 2) so compiled programs are reused."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nqf

P, M_SAMPLES, D = 3, 4, 2
SETTINGS = settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
floats = st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False)


def _arrays(shape):
    n = int(np.prod(shape))
    return st.lists(floats, min_size=n, max_size=n).map(lambda v: np.asarray(v).reshape(shape))


def _data(X, y):
    """A_mu = x_mu x_mu^T + 0.1 I (PSD, so the flow from small W stays bounded)."""
    A = np.einsum("mi,mj->mij", X, X) + 0.1 * np.eye(P)
    return nqf.DenseData(A, y)


@SETTINGS
@given(X=_arrays((M_SAMPLES, P)), y=_arrays((M_SAMPLES,)), W0=_arrays((P, D)))
def test_flow_keeps_M_symmetric_psd_and_loss_non_increasing(X, y, W0):
    data = _data(X, y)
    sol = nqf.solve_flow(
        data, W0=0.5 * W0 + 0.05 * np.eye(P, D), t1=5.0, ts=np.linspace(0, 5, 6), rtol=1e-10, atol=1e-12
    )
    M = np.asarray(sol.M)
    np.testing.assert_allclose(M, np.swapaxes(M, 1, 2), atol=1e-12)
    scale = max(1.0, float(np.abs(M).max()))
    assert np.linalg.eigvalsh(M).min() >= -1e-9 * scale
    loss = np.asarray(sol.loss)
    assert np.all(np.diff(loss) <= 1e-9 * max(1.0, loss[0]))


@SETTINGS
@given(
    X=_arrays((M_SAMPLES, P)),
    y=_arrays((M_SAMPLES,)),
    W0=_arrays((P, D)),
    lr=st.floats(1e-3, 5e-2),
    momentum=st.sampled_from([0.0, 0.5]),
)
def test_closed_map_equals_weight_space(X, y, W0, lr, momentum):
    data = _data(X, y)
    W0 = 0.5 * W0 + 0.05 * np.eye(P, D)
    closed = nqf.closed_sgd(data, lr=lr, steps=5, W0=W0, momentum=momentum)
    ws = nqf.train_w(data, W0, lr=lr, steps=5, momentum=momentum)
    Ws = np.asarray(ws.W)
    np.testing.assert_allclose(np.asarray(closed.M), np.einsum("nid,njd->nij", Ws, Ws), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(closed.mu), Ws.sum(axis=2), rtol=1e-9, atol=1e-12)


FIG3 = nqf.datasets.fig3_data()
W_OK = 0.1 * np.eye(5)

# (argument name, call with a bad value v) -- v drawn from bad_values; each must raise naming it
BAD = {
    "lr": lambda v: nqf.closed_sgd(FIG3, lr=v, steps=2, W0=W_OK),
    "t1": lambda v: nqf.solve_flow(FIG3, W0=W_OK, t1=v),
    "rtol": lambda v: nqf.solve_flow(FIG3, W0=W_OK, t1=1.0, rtol=v),
    "weight_decay": lambda v: nqf.closed_sgd(FIG3, lr=0.1, steps=2, W0=W_OK, weight_decay=v),
    "momentum": lambda v: nqf.closed_sgd(FIG3, lr=0.1, steps=2, W0=W_OK, momentum=v),
    "rho": lambda v: nqf.predicted_ignition_times(1.0, 1.0, 1e-3, rho=v),
    "tail": lambda v: nqf.compress.corollary3_bound(np.ones(3), np.ones(2), tail=v, lr=0.1),
    "tau": lambda v: nqf.staircase_limit([v], [1.0], [1.0]),
    "ts": lambda v: nqf.theorem6(FIG3, [v], W0=W_OK),
}
bad_values = st.sampled_from([-1.0, -1e-300, float("nan"), float("-inf"), -5.0])


@settings(max_examples=30, deadline=None, derandomize=True)
@given(name=st.sampled_from(sorted(BAD)), value=bad_values)
def test_bad_scalars_raise_naming_the_argument(name, value):
    if name in ("rtol", "momentum") and value == float("nan"):
        value = -1.0
    with pytest.raises((ValueError, TypeError), match=f"`{name}`"):
        BAD[name](value)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(shape=st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)), nan=st.booleans())
def test_bad_data_arrays_raise_naming_the_argument(shape, nan):
    """DenseData from random shapes (with or without a NaN): either a valid data set (m, p >= 1,
    square, symmetric, finite) or a ValueError naming `A` or `y`, never a raw error."""
    m, p, q = shape
    A = np.zeros(shape)
    if nan and A.size:
        A.flat[0] = np.nan
    try:
        data = nqf.DenseData(A, np.ones(m))
    except ValueError as err:
        assert "`A`" in str(err) or "m >= 1" in str(err) or "p >= 1" in str(err), str(err)
    else:
        assert m >= 1 and p == q >= 1 and not nan and data.m == m
