"""The oracles (Theorems 4, 5, 6, 7, 16, Proposition 7) inside JAX code: under jax.jit and
jax.vmap they equal the plain call (1e-12 relative), and jax.grad of a loss matches central
finite differences of the plain call (1e-6 relative) and, for Theorems 6 and 7, the gradient of
the same loss through the flow (`solve_flow`). `solve_sweep` refuses traced input with an error
naming the alternative. Small shapes; each transformed function compiles once. Theorems 4 and 5
under jit(vmap(value_and_grad)): test_oracles_transforms_samplewise.py (a file of its own so that
the two pytest-xdist workers, --dist loadfile, share the work); shared helpers: tests/_transform_checks.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from _transform_checks import GTOL, RTOL, TS, central, random_psd, rel
from nqf import AssumptionError, datasets
from nqf.data import CommutingData, DenseData
from nqf.theory._oracles import proposition7, theorem6, theorem7, theorem16


def mse(data, M):
    """(1/m) sum_mu (Tr[M A_mu] - y_mu)^2 at the last saved time."""
    return jnp.mean((data.traces(M[-1]) - data.y) ** 2)


# ------------------------------------------------------------------------------------------
# Theorem 7 (graded form on concrete input, one linear solve per time under tracing)
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def iso():
    return datasets.isotropic_data(3, 0.5, g=(1.0, 0.5, -0.4), seed=1)


def flow_loss(data, e, M0, ts, **kw):
    """Final loss of the plain flow (`solve_flow`, rtol 1e-12) from M(0) = e * M0."""
    return nqf.solve_flow(data, M0=e * M0, t1=ts[-1], ts=ts, rtol=1e-12, **kw).loss[-1]


def test_theorem7_under_transforms(iso):
    """jit with traced times and M0; jit(vmap) over M0; jit(grad) with respect to the scale of M0
    (against central differences of the oracle and of the flow) and the labels."""
    M0 = random_psd(3, 0.3, seed=2)
    ref = theorem7(iso, TS, M0=M0)
    out = jax.jit(lambda t, M: theorem7(iso, t, M0=M))(TS, M0)
    assert rel(out.M, ref.M) <= RTOL and rel(out.z, ref.z) <= RTOL
    Ms = np.stack([M0, random_psd(3, 1e-2, seed=3)])
    batch = jax.jit(jax.vmap(lambda M: theorem7(iso, TS, M0=M).M))(Ms)
    for M, Mb in zip(Ms, batch):
        assert rel(Mb, theorem7(iso, TS, M0=M).M) <= RTOL
    A, y = np.asarray(iso.A), np.asarray(iso.y)

    def loss(e, y):
        d = DenseData(A, y)
        return mse(d, theorem7(d, TS, M0=e * M0).M)

    ge, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(1.0, y)
    assert abs(ge / central(lambda e: loss(e, y), 1.0, 1e-5) - 1) <= GTOL
    assert abs(ge / central(lambda e: flow_loss(iso, e, M0, TS, form="M"), 1.0, 1e-5) - 1) <= GTOL
    for k in range(iso.m):
        fd = central(lambda v: loss(1.0, v), y, np.eye(iso.m)[k] * 1e-6)
        assert abs(gy[k] - fd) <= GTOL * np.abs(gy).max()


# ------------------------------------------------------------------------------------------
# Theorem 6, Theorem 16, Proposition 7 (one JAX formula for concrete and traced input)
# ------------------------------------------------------------------------------------------
def test_theorem6_grad_matches_the_flow():
    """d L(T) / d eps of Theorem 6 by jax.grad against central differences of the oracle and of
    the flow (whose own gradient is checked in test_transforms)."""
    data = datasets.fig3_data()
    ts = np.array([0.0, 10.0, 20.0])
    M0 = random_psd(5, 1.0, seed=5)

    def oracle(e):
        return mse(data, theorem6(data, ts, M0=e * M0).M)

    g = jax.jit(jax.grad(oracle))(1e-5)
    assert abs(g / central(oracle, 1e-5, 1e-9) - 1) <= GTOL
    assert abs(g / central(lambda e: flow_loss(data, e, M0, ts), 1e-5, 1e-9) - 1) <= GTOL


def test_theorem16_under_transforms():
    data, Pi = datasets.projector_data((2, 2, 1), (1.0, 0.5, -0.3), (1.0, 2.0, 0.5), m=5, seed=2)
    M0 = np.einsum("a,aij->ij", 1e-3 * np.array([1.0, 2.0, 0.5]), Pi)
    ts = TS
    ref = theorem16(data, Pi, ts, M0=M0)
    out = jax.jit(lambda t, M, Pi: theorem16(data, Pi, t, M0=M))(ts, M0, Pi)
    assert rel(out.M, ref.M) <= RTOL and rel(out.z, ref.z) <= RTOL
    eps = np.array([1.0, 1e-3])
    batch = jax.jit(jax.vmap(lambda e: theorem16(data, Pi, ts, M0=e * M0).z))(eps)
    for e, zb in zip(eps, batch):
        assert rel(zb, theorem16(data, Pi, ts, M0=e * M0).z) <= RTOL
    A, y = np.asarray(data.dense()), np.asarray(data.y)

    def loss(e, y):
        d = DenseData(A, y)
        return mse(d, theorem16(d, Pi, ts, M0=e * M0).M)

    ge, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(1.0, y)
    assert abs(ge / central(lambda e: loss(e, y), 1.0, 1e-5) - 1) <= GTOL
    for k in range(data.m):
        fd = central(lambda v: loss(1.0, v), y, np.eye(data.m)[k] * 1e-7)
        assert abs(gy[k] - fd) <= GTOL * np.abs(gy).max()


def test_proposition7_under_transforms():
    data = datasets.fig3_data()
    M0 = random_psd(5, 1e-3, seed=4)
    z = theorem6(data, np.array([0.0, 10.0, 30.0]), M0=M0).z
    ref = proposition7(data, M0, z)
    assert rel(jax.jit(lambda M, z: proposition7(data, M, z))(M0, z), ref) <= RTOL
    batch = jax.jit(jax.vmap(lambda s: proposition7(data, s * M0, z)))(np.array([1.0, 2.0]))
    assert rel(batch[1], proposition7(data, 2.0 * M0, z)) <= RTOL

    def f(s):
        return proposition7(data, M0, s * z)[-1, 0, 1]

    assert abs(jax.jit(jax.grad(f))(1.0) / central(f, 1.0, 1e-6) - 1) <= GTOL


# ------------------------------------------------------------------------------------------
def test_solve_sweep_refuses_traced_input():
    data = datasets.fig3_data()
    with pytest.raises(TypeError, match=r"jax\.vmap.*solve_flow"):
        jax.jit(lambda e: nqf.solve_sweep(data, eps=e, t1=1.0).loss)(jnp.array([1e-5, 1e-4]))


def test_samplewise_gradient_stays_right_after_convergence():
    """jax.grad of Theorem 5's z long after the flow has converged (t = 200, the xi ODEs at a stiff
    fixed point): against central differences of the plain (scipy) call. An explicit solver for
    the xi ODEs gave 1e20 and more here."""
    rng = np.random.default_rng(0)
    data = nqf.BlockData(rng.uniform(0.5, 2.0, (4, 2)), rng.uniform(0.5, 1.5, 4))
    z0, ts = np.full(8, 1e-6), np.linspace(0.0, 200.0, 5)
    f = lambda s: nqf.theorem5(data, ts, z0=s * z0, matrices=False).z[4].sum()  # noqa: E731
    fd = (f(1.0 + 1e-4) - f(1.0 - 1e-4)) / 2e-4
    # jit(grad): one compiled program (eager jax.grad dispatches the solve's ops one by one, ~2x slower)
    assert abs(float(jax.jit(jax.grad(f))(1.0)) / fd - 1) < 1e-3


# ------------------------------------------------------------------------------------------
# Checks on traced input: the same checks as for concrete input, at run time (equinox.error_if)
# ------------------------------------------------------------------------------------------
def test_traced_checks_run_at_run_time():
    """One check mechanism: a violated assumption or argument on traced input raises when the
    compiled function runs (concrete input: the exception at once); valid input passes."""
    data = datasets.fig3_data()
    ts, M0 = np.array([0.0, 1.0]), 1e-3 * np.eye(5)
    Lam, y = np.asarray(data.Lambda), np.asarray(data.y)
    f6 = jax.jit(lambda L, t: theorem6(CommutingData(L, y), t, M0=M0).z)
    np.testing.assert_array_equal(f6(Lam, ts), theorem6(data, ts, M0=M0).z)
    bad = Lam.copy()
    bad[0] = 1.0  # every feature overlaps every other one
    with pytest.raises(Exception, match=r"Theorem 6 does not apply.*orthogonal features.*checked at run time"):
        jax.block_until_ready(f6(bad, ts))
    with pytest.raises(Exception, match=r"`ts` must be.*>= 0.*checked at run time"):
        jax.block_until_ready(f6(Lam, -ts[::-1]))
    d16, Pi = datasets.projector_data((2, 2, 1), (1.0, 0.5, -0.3), (1.0, 2.0, 0.5), m=5, seed=2)
    f16 = jax.jit(lambda M: theorem16(d16, Pi, ts, M0=M).z)
    with pytest.raises(Exception, match=r"initial condition M0 = sum_a z_a\(0\) Pi_a.*checked at run time"):
        jax.block_until_ready(f16(np.eye(5) + 0.1 * np.ones((5, 5))))
    with pytest.raises(Exception, match=r"positive semi-definite.*checked at run time"):
        jax.block_until_ready(f16(-Pi.sum(0)))
    with pytest.raises(AssumptionError, match=r"Theorem 16.*initial condition"):  # concrete inside jit: at once
        jax.jit(lambda t: theorem16(d16, Pi, t, M0=np.eye(5) + 0.1 * np.ones((5, 5))).z)(ts)


# ------------------------------------------------------------------------------------------
# Theorem 7 under tracing at long times (information form: no e^{+|g| t} is formed)
# ------------------------------------------------------------------------------------------
LONG = np.array([0.0, 1.0, 5.0, 20.0, 50.0, 75.0, 200.0, 750.0, 2000.0])  # |g| t up to 2000
TRACED_TOL = 1e-10  # traced vs concrete, normwise relative, at every time
SCIPY_TOL = 1e-9  # vs the flow by DOP853 at rtol 1e-12 (its own error ~3e-11 here)


def scipy_flow(data, M0, ts, gamma=0.0):
    """The MSE flow M' = -(H M + M H) - 2 gamma M, H = (4/m) sum (Tr[A M] - y) A, by scipy."""
    import scipy.integrate

    A, y = np.asarray(data.A), np.asarray(data.y)
    m, p, _ = A.shape

    def rhs(t, v):
        M = v.reshape(p, p)
        H = 4.0 / m * np.einsum("m,mij->ij", np.einsum("mij,ij->m", A, M) - y, A)
        return (-(H @ M + M @ H) - 2.0 * gamma * M).ravel()

    sol = scipy.integrate.solve_ivp(rhs, (0, ts[-1]), M0.ravel(), method="DOP853", t_eval=ts, rtol=1e-12, atol=1e-22)
    assert sol.success
    return sol.y.T.reshape(-1, p, p)


@pytest.mark.parametrize(
    "g, gamma, M0",
    [
        ((1.0, 0.5, -0.4), 0.0, 1e-6 * np.eye(3)),  # the reported case (traced M ~3e18 at t = 75)
        ((1.0, 0.5, -0.4), 0.3, 1e-6 * np.eye(3)),  # with weight decay (5 % off at t = 75)
        ((-1.0, -0.5, 0.3), 0.0, random_psd(3, 0.3, seed=4)),  # mostly negative g, O(1) M0
    ],
    ids=["reported", "weight_decay", "negative_g"],
)
def test_theorem7_traced_long_times(g, gamma, M0):
    """jit(theorem7) with traced times equals the concrete graded form (1e-10 normwise at every
    time, |g| t up to 2000, where the old solve returned ~1e18 or overflowed), both equal a tight
    scipy solve of the flow (t <= 200), and at t = 2000 it is the exact limit
    V diag(max(g - gamma, 0) / (4 c)) V^T to 1e-14."""
    data = datasets.isotropic_data(3, 0.5, g=g, seed=1)
    ref = theorem7(data, LONG, M0=M0, weight_decay=gamma)
    out = jax.jit(lambda t: theorem7(data, t, M0=M0, weight_decay=gamma).M)(LONG)
    for i in range(LONG.size):
        assert rel(out[i], ref.M[i]) <= TRACED_TOL, LONG[i]
    flow = scipy_flow(data, M0, LONG[:7], gamma)
    for i in range(7):
        assert rel(out[i], flow[i]) <= SCIPY_TOL and rel(ref.M[i], flow[i]) <= SCIPY_TOL, LONG[i]
    Y = 4.0 / data.m * np.einsum("m,mij->ij", np.asarray(data.y), np.asarray(data.A)) - gamma * np.eye(3)
    rates, V = np.linalg.eigh(Y)
    limit = (V * np.maximum(rates, 0.0) / (4 * 0.5)) @ V.T  # t -> inf for full-rank M0 (e^{-2 |g| t} = 0)
    assert rel(out[-1], limit) <= 1e-14


@pytest.mark.slow
def test_theorem7_traced_label_gradient_long_times(iso):
    """jax.grad with respect to the labels (so through eigh(Y) and the rates g - gamma) at t = 5
    and t = 200 (saturated: the loss depends on the labels through the limit, the derivatives in
    M0 and t are ~e^{-|g| t} there), with weight decay gamma = 0.5 so that one rate g_k - gamma
    is 0 to rounding (the g > 0 / g <= 0 branch of the information form), against central
    differences of the concrete oracle along a random direction of the labels. (The gradient with
    respect to M0 through the information form: `test_theorem7_under_transforms`, whose random
    M0 is positive definite.)"""
    M0 = random_psd(3, 1e-6, seed=6)
    A, y = np.asarray(iso.A), np.asarray(iso.y)
    ts = np.array([0.0, 5.0, 200.0])

    def loss(y):
        d = DenseData(A, y)
        M = theorem7(d, ts, M0=M0, weight_decay=0.5).M
        return mse(d, M[1:2]) + mse(d, M)

    gy = jax.jit(jax.grad(loss))(y)
    v = np.random.default_rng(7).standard_normal(iso.m)
    assert abs(gy @ v / central(lambda s: loss(y + s * v), 0.0, 1e-6) - 1) <= GTOL


def test_theorem7_traced_singular_M0(iso, capfd):
    """One compiled jit(vmap) over M0. Positive definite M0 (1e-6 I, random of scale 1e-12): the
    information form, 1e-10 from the concrete graded form at |g| t up to 2000. Singular M0
    (rank one): the linear solve, accurate while its condition number is <= 1e6 (t <= 4 here),
    refused at run time beyond (t = 75: it returned garbage before), also when it is one lane of
    the vmap; with concrete M0 (the solve branch alone) likewise. The refusal names `M0`, its
    conditioning and the 1e6 bound (with concrete M0 its measured spectrum) also where e^{g t}
    overflows (t >= 1000: it said "overflowed" before), and LAPACK never sees inf / NaN (it
    printed "DLASCL parameter 4" to stderr)."""
    w = np.array([0.3, -0.2, 0.5])
    rank1, pd, tiny = np.outer(w, w), 1e-6 * np.eye(3), random_psd(3, 1e-12, seed=5)
    short = np.linspace(0.0, 4.0, LONG.size)
    fv = jax.jit(jax.vmap(lambda t, M: theorem7(iso, t, M0=M).M, in_axes=(None, 0)))
    for ts, Ms in [(short, [rank1, pd]), (LONG, [pd, tiny])]:
        for M, out in zip(Ms, fv(ts, np.stack(Ms))):
            assert rel(out, theorem7(iso, ts, M0=M).M) <= TRACED_TOL
    with pytest.raises(Exception, match=r"singular or ill-conditioned.*cond > 1e\+06.*checked at run time"):
        jax.block_until_ready(fv(LONG, np.stack([pd, rank1])))
    huge = np.full(LONG.size, 1000.0)  # every time overflows e^{g t} in the solve (same shape: no recompile)
    with pytest.raises(Exception, match=r"`M0` is singular or ill-conditioned.*condition number > 1e\+06") as err:
        jax.block_until_ready(fv(huge, np.stack([pd, rank1])))
    assert "overflowed" not in str(err.value)
    f = jax.jit(lambda t: theorem7(iso, t, M0=rank1).M)  # concrete M0: the solve branch alone
    assert rel(f(short), theorem7(iso, short, M0=rank1).M) <= TRACED_TOL
    for ts in (LONG, huge):
        with pytest.raises(
            Exception, match=r"`M0` is singular.*lambda_max = 0\.38, condition number inf.*run time"
        ) as err:
            jax.block_until_ready(f(ts))
        assert "overflowed" not in str(err.value)
    assert "DLASCL" not in capfd.readouterr().err
