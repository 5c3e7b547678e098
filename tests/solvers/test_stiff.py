"""Structured stiff solves (nqf.stiff), DiagonalData, z0 initial conditions and save="loss"."""

import diffrax
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import pytest

import nqf
from nqf.data import CommutingData, DiagonalData
from nqf.stiff import DiagonalSolver, WoodburySolver, glv_linear_solver, is_structured

RNG = np.random.default_rng(7)


def _solve(O, b, solver):
    return np.asarray(lx.linear_solve(lx.MatrixLinearOperator(jnp.asarray(O)), jnp.asarray(b), solver).value)


@pytest.mark.parametrize("rank_deficient", [False, True])
def test_woodbury_matches_dense_solve(rank_deficient):
    p, m = 30, 4
    U = RNG.standard_normal((p, m))
    if rank_deficient:  # a repeated column: rank 3 < m
        U[:, 3] = U[:, 0]
    O = np.eye(p) + U @ RNG.standard_normal((m, p)) * 0.7
    b = RNG.standard_normal(p)
    x = _solve(O, b, WoodburySolver(U))
    np.testing.assert_allclose(x, np.linalg.solve(O, b), rtol=1e-11, atol=1e-11)
    assert WoodburySolver(U).Q.shape == (p, 3 if rank_deficient else 4)


def test_diagonal_solver_matches_division():
    d = 1.0 + RNG.random(20)
    b = RNG.standard_normal(20)
    np.testing.assert_allclose(_solve(np.diag(d), b, DiagonalSolver()), b / d, rtol=1e-15)


def test_woodbury_rejects_bad_input():
    with pytest.raises(ValueError, match=r"`U` must be a finite \(p, m\) array"):
        WoodburySolver(np.full((3, 2), np.nan))
    with pytest.raises(ValueError, match=r"vectors of shape \(5,\)"):
        _solve(np.eye(4), np.ones(4), WoodburySolver(np.ones((5, 1))))


def _commuting(m=4, p=30, seed=3):
    rng = np.random.default_rng(seed)
    return CommutingData(rng.standard_normal((m, p)), rng.standard_normal(m))


def test_glv_linear_solver_choice():
    assert isinstance(glv_linear_solver(_commuting()), WoodburySolver)
    assert isinstance(glv_linear_solver(nqf.datasets.powerlaw_data(10)), DiagonalSolver)
    assert isinstance(glv_linear_solver(nqf.datasets.fig3_data()), lx.AutoLinearSolver)  # m = p


@pytest.mark.parametrize(
    "name, dense_solver", [("rodas5p", nqf.rosenbrock.Rodas5P()), ("kvaerno5", diffrax.Kvaerno5())]
)
def test_structured_stiff_glv_equals_dense_newton_and_explicit(name, dense_solver):
    data = _commuting()
    z0 = np.full(data.p, 1e-4)
    z0[5] = 0.0  # a masked mode
    kw = dict(z0=z0, t1=40.0, ts=np.linspace(0.0, 40.0, 9), rtol=1e-10)
    solver = nqf.solvers._solve._make_solver(name, True, data, "glv", z0 > 0)  # the Woodbury solve
    assert is_structured(solver)
    structured = nqf.solve_flow(data, solver=solver, **kw)
    dense_newton = nqf.solve_flow(data, solver=dense_solver, **kw)  # lineax LU on p x p
    explicit = nqf.solve_flow(data, solver="dopri8", rtol=1e-12, **{k: v for k, v in kw.items() if k != "rtol"})
    assert structured.stats["num_steps"] == dense_newton.stats["num_steps"]
    scale = np.abs(explicit.z).max()
    assert np.abs(structured.z - dense_newton.z).max() / scale < 1e-11
    assert np.abs(structured.z - explicit.z).max() / scale < 1e-7
    assert np.all(structured.z[:, 5] == 0.0)


def test_diagonal_data_equals_commuting_diag():
    lam, y = RNG.standard_normal(6), RNG.standard_normal(6)
    dd, cd = DiagonalData(lam, y), CommutingData(np.diag(lam), y)
    X = RNG.standard_normal((6, 6))
    X = X + X.T
    F = RNG.standard_normal((6, 3))
    c = RNG.standard_normal(6)
    for f in ("traces", "traces_factor", "z", "z_factor"):
        arg = F if f.endswith("factor") else X
        np.testing.assert_allclose(getattr(dd, f)(arg), getattr(cd, f)(arg), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(dd.apply(c, F), cd.apply(c, F), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(dd.weighted_sum(c), cd.weighted_sum(c), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(dd.dense(), cd.dense(), rtol=0, atol=0)
    np.testing.assert_allclose(nqf.glv_equilibrium(dd), nqf.glv_equilibrium(cd), rtol=1e-14)
    z = np.abs(RNG.standard_normal((3, 6)))
    np.testing.assert_allclose(nqf.excess_loss(dd, z), nqf.excess_loss(cd, z), rtol=1e-13)
    with pytest.raises(ValueError, match="`y`"):
        DiagonalData(lam, y[:5])


def test_powerlaw_diagonal_stiff_flow_vs_theorem6():
    data = nqf.datasets.powerlaw_data(200)
    k = np.arange(1, 201.0)
    z0 = 1e-6 * k**-1.2
    ts = np.concatenate([[0.0], np.geomspace(1.0, 5e3, 30)])
    # Kvaerno5's global error is larger than Tsit5's at the same rtol (measured max relative
    # error of z: 2.1e-7 at rtol 1e-10, 1.5e-8 at rtol 1e-12; Tsit5 9.5e-9 at rtol 1e-10).
    sol = nqf.solve_flow(data, z0=z0, t1=5e3, ts=ts, stiff=True, rtol=1e-12)
    oracle = nqf.theorem6(data, ts, M0=np.diag(z0))
    assert np.max(np.abs(sol.z / oracle.z - 1.0)) < 1e-7
    lossy = nqf.solve_flow(data, z0=z0, t1=5e3, ts=ts, stiff=True, rtol=1e-12, save="loss")
    np.testing.assert_allclose(lossy.excess_loss, sol.excess_loss, rtol=1e-12)


def test_z0_equals_M0_diag_and_factors():
    data = nqf.datasets.fig3_data()
    z0 = np.linspace(1e-5, 5e-5, 5)
    P = np.asarray(data.P) if data.P is not None else np.eye(5)
    M0 = P @ np.diag(z0) @ P.T
    a = nqf.solve_flow(data, z0=z0, t1=50.0)
    b = nqf.solve_flow(data, M0=M0, t1=50.0)
    np.testing.assert_allclose(a.z, b.z, rtol=1e-12)
    np.testing.assert_allclose(a.M, b.M, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.einsum("nir,njr->nij", a.W, a.W), a.M, rtol=1e-12, atol=1e-16)


def test_z0_errors():
    data = nqf.datasets.fig3_data()
    with pytest.raises(ValueError, match="exactly one initial condition"):
        nqf.solve_flow(data, z0=np.ones(5), M0=np.eye(5), t1=1.0)
    with pytest.raises(ValueError, match=r"`z0` must be >= 0.*z0\[2\] = -1"):
        nqf.solve_flow(data, z0=np.array([1.0, 1, -1, 1, 1]), t1=1.0)
    with pytest.raises(ValueError, match="`z0`"):
        nqf.solve_flow(data, z0=np.ones(4), t1=1.0)
    with pytest.raises(ValueError, match="GLV form; found form='M'"):
        nqf.solve_flow(data, z0=np.ones(5), t1=1.0, form="M")
    dense = nqf.DenseData(np.asarray(data.dense()), data.y)
    with pytest.raises(ValueError, match="`z0` .* needs commuting data"):
        nqf.solve_flow(dense, z0=np.ones(5), t1=1.0)


@pytest.mark.parametrize("form", ["glv", "factor", "M"])
def test_save_loss_equals_state_losses(form):
    data = nqf.datasets.fig3_data()
    kw = dict(M0=1e-5 * np.eye(5), t1=200.0, form=form)
    a = nqf.solve_flow(data, **kw)
    b = nqf.solve_flow(data, save="loss", **kw)
    np.testing.assert_allclose(b.loss, a.loss, rtol=1e-13)
    np.testing.assert_allclose(b.excess_loss, a.excess_loss, rtol=1e-12)
    with pytest.raises(ValueError, match="save='loss'"):
        b.M
    # the loss-only solution's dense output against the state solution saved at t = 100 (the same
    # steps' interpolant; a.z_at would compile a dense re-solve of its own; observed equal bitwise)
    at = a.ts == 100.0
    assert at.sum() == 1
    np.testing.assert_allclose(b.z_at([100.0]), a.z[at], rtol=1e-12)


def test_save_rejects_unknown_value():
    with pytest.raises(ValueError, match="`save` must be 'state' or 'loss'; found 'z'"):
        nqf.solve_flow(nqf.datasets.fig3_data(), M0=np.eye(5), t1=1.0, save="z")


def test_dense_output_refuses_times_outside_the_solve():
    # the solve of test_ignition_times_from_a_loss_only_solution (its programs are reused)
    sol = nqf.solve_flow(nqf.datasets.fig3_data(), M0=1e-5 * np.eye(5), t1=250.0)
    for t in (300.0, -1.0):
        with pytest.raises(ValueError, match=r"`t` must lie in the solved interval \[t0, t1\] = \[0, 250\]"):
            sol.z_at(t)


def test_ignition_times_from_a_loss_only_solution():
    data = nqf.datasets.fig3_data()
    full = nqf.solve_flow(data, M0=1e-5 * np.eye(5), t1=250.0)
    lossy = nqf.solve_flow(data, M0=1e-5 * np.eye(5), t1=250.0, save="loss")
    np.testing.assert_allclose(nqf.measure_ignition_times(lossy), nqf.measure_ignition_times(full), rtol=1e-12)
    never = nqf.solve_flow(data, M0=1e-5 * np.eye(5), t1=250.0, save="loss", dense=False)
    with pytest.raises(ValueError, match="dense=False, so it has no dense output"):
        never.z


def test_powerlaw_data_rejects_non_integer_p():
    with pytest.raises(ValueError, match=r"`p` must be an integer >= 1; found 2.5"):
        nqf.datasets.powerlaw_data(2.5)


def test_woodbury_and_diagonal_on_stacked_block_diagonal_operator():
    """Stacked states (B, p) with a block-diagonal operator (the joint mode of solve_sweep):
    every member's block is solved exactly, with the shared basis."""
    B, p, m = 3, 20, 3
    U = RNG.standard_normal((p, m))
    blocks = [np.eye(p) + U @ RNG.standard_normal((m, p)) * 0.5 for _ in range(B)]
    op = lx.FunctionLinearOperator(
        lambda X: jnp.stack([jnp.asarray(blocks[i]) @ X[i] for i in range(B)]),
        jax.ShapeDtypeStruct((B, p), jnp.float64),
    )
    b = RNG.standard_normal((B, p))
    x = np.asarray(lx.linear_solve(op, jnp.asarray(b), WoodburySolver(U)).value)
    for i in range(B):
        np.testing.assert_allclose(x[i], np.linalg.solve(blocks[i], b[i]), rtol=1e-11, atol=1e-11)
    d = 1.0 + RNG.random((B, p))
    dop = lx.FunctionLinearOperator(lambda X: jnp.asarray(d) * X, jax.ShapeDtypeStruct((B, p), jnp.float64))
    np.testing.assert_allclose(
        np.asarray(lx.linear_solve(dop, jnp.asarray(b), DiagonalSolver()).value), b / d, rtol=1e-15
    )
    with pytest.raises(ValueError, match=r"stacked states \(B, 7\)"):
        lx.linear_solve(op, jnp.asarray(b), WoodburySolver(np.ones((7, 1))))


@pytest.mark.parametrize("mode", ["joint", "vmap"])
@pytest.mark.parametrize("kind", ["diagonal", "woodbury"])
def test_stiff_sweep_uses_structured_solve_and_matches_solve_flow(mode, kind):
    if kind == "diagonal":
        data = nqf.datasets.powerlaw_data(40)
    else:
        data = _commuting()
    eps = np.array([1e-6, 1e-4, 1e-2])
    sw = nqf.solve_sweep(data, eps=eps, t1=200.0, ts=np.linspace(0.0, 200.0, 9), stiff=True, rtol=1e-9, mode=mode)
    assert is_structured(sw._problem[1])
    for i, e in enumerate(eps):
        # the sweep's own solver: stiff=True alone would take the reduced form for this data;
        # z0 = e (M0 = e I for this data): the program of the structured solves above (woodbury)
        one = nqf.solve_flow(
            data,
            z0=np.full(data.p, e),
            t1=200.0,
            ts=np.linspace(0.0, 200.0, 9),
            solver=sw._problem[1],
            rtol=1e-9,
            form="glv",
        )
        np.testing.assert_allclose(sw.z[i], one.z, rtol=2e-7)
        if mode == "vmap":  # its own steps, up to rounding: the batched Woodbury solve rounds
            # differently and can flip one accept/reject decision (226 vs 227 steps seen)
            assert abs(int(sw.stats["num_steps"][i]) - int(one.stats["num_steps"])) <= 2


def _reduced_problem(gamma):
    """Commuting data with m < p/2, z0 with two masked modes, the solve's keywords, the times of
    the dense-output checks, and the p-dimensional flow integrated explicitly (Dopri8, tight) as
    the reference. The reference also saves at the dense-output times (its saved values: no dense
    re-solve of its own); the tests below share its data and shapes (one compiled program each)."""
    rng = np.random.default_rng(11)
    m, p = 5, 40
    Lam = rng.standard_normal((m, p)) * np.arange(1, p + 1.0) ** -0.5
    data = CommutingData(Lam, Lam @ (1.0 / np.arange(1, p + 1.0)))
    z0 = np.full(p, 1e-5)
    z0[[3, 17]] = 0.0
    ts = np.concatenate([[0.0], np.geomspace(0.1, 300.0, 12)])
    kw = dict(z0=z0, t1=300.0, ts=ts, weight_decay=gamma)
    t_dense = [0.05, 42.0]
    ts_ref = np.sort(np.concatenate([ts, t_dense]))
    ref = nqf.solve_flow(data, solver="dopri8", rtol=1e-12, max_steps=10**6, **dict(kw, ts=ts_ref))
    return data, kw, t_dense, ref, np.isin(ts_ref, ts), np.isin(ts_ref, t_dense)


@pytest.mark.parametrize("gamma", [0.0, 0.02])
def test_reduced_glv_form_matches_explicit_flow(gamma):
    """Commuting data with m < p/2: the stiff default (Rodas5P) integrates the GLV flow in m
    coordinates G (integrated residuals), u = u0 + D_mask (Lambda^T G - 2 gamma t). Against the
    p-dimensional flow integrated explicitly (Dopri8, tight): saved z, dense output, loss and
    excess loss; masked modes stay at 0; weight decay makes the reduced field time-dependent."""
    data, kw, t_dense, ref, on_ts, at_dense = _reduced_problem(gamma)
    red = nqf.solve_flow(data, stiff=True, rtol=1e-10, **kw)
    assert nqf.solvers._solve._reduced_stiff(data, None, True)
    live = kw["z0"] > 0
    np.testing.assert_allclose(red.z[:, live], ref.z[on_ts][:, live], rtol=1e-7)
    assert np.all(red.z[:, ~live] == 0.0)
    np.testing.assert_allclose(red.z_at(t_dense), ref.z[at_dense], rtol=1e-7, atol=0)
    assert red.step_times[0] == 0.0 and red.step_times[-1] == 300.0
    lossy = nqf.solve_flow(data, stiff=True, rtol=1e-10, save="loss", **kw)
    np.testing.assert_allclose(lossy.loss, ref.loss[on_ts], rtol=1e-7)
    np.testing.assert_allclose(lossy.excess_loss, ref.excess_loss[on_ts], rtol=1e-6)


@pytest.mark.parametrize("host", ["lsoda", "cvode"])
def test_host_reduced_path_matches_explicit_flow(host):
    """solver="lsoda" / "cvode" (scipy's LSODA or SUNDIALS CVODE on the reduced coordinates, host
    numpy) against the p-dimensional flow integrated explicitly: z at the saved times, dense
    output, losses (the problem of test_reduced_glv_form_matches_explicit_flow, with weight decay)."""
    data, kw, t_dense, ref, on_ts, at_dense = _reduced_problem(0.02)
    z0 = kw["z0"]
    ls = nqf.solve_flow(data, solver=host, rtol=1e-11, **kw)
    live = z0 > 0
    np.testing.assert_allclose(ls.z[:, live], ref.z[on_ts][:, live], rtol=1e-7)
    assert np.all(ls.z[:, ~live] == 0.0) and ls.stats["njev"] > 0
    np.testing.assert_allclose(ls.z_at(t_dense), ref.z[at_dense], rtol=1e-6)
    assert ls.step_times[0] == 0.0 and ls.step_times[-1] == 300.0
    lossy = nqf.solve_flow(data, solver=host, rtol=1e-11, save="loss", **kw)
    np.testing.assert_allclose(lossy.excess_loss, ref.excess_loss[on_ts], rtol=1e-6)
    with pytest.raises(ValueError, match=f"solver='{host}' integrates the GLV flow of CommutingData with m < p"):
        nqf.solve_flow(nqf.datasets.fig3_data(), z0=np.ones(5), t1=1.0, solver=host)
    with pytest.raises(ValueError, match="`rtol` must be < 1"):
        nqf.solve_flow(data, solver=host, rtol=2.0, **kw)
    with pytest.raises(ValueError, match="`max_steps` must be a positive integer; found 0"):
        nqf.solve_flow(data, solver=host, max_steps=0, **kw)
    with pytest.raises(TypeError, match=f"solver='{host}' runs in numpy on the host and is not traceable"):
        jax.jit(lambda z: nqf.solve_flow(data, solver=host, z0=z, t1=300.0).loss[-1])(z0)


# -- issue 16: block-diagonal Newton for BlockData ------------------------------------------------


def test_block_solver_solves_block_diagonal_systems():
    """BlockSolver against numpy's dense solve on a random block-diagonal matrix (vectors (p,)
    and stacked states (B, p)), and refusing a size that K does not divide."""
    import jax.numpy as jnp
    import lineax as lx
    from scipy.linalg import block_diag

    from nqf.stiff import BlockSolver

    rng = np.random.default_rng(0)
    m, K = 5, 3
    O = block_diag(*(np.eye(K) + 0.3 * rng.standard_normal((K, K)) for _ in range(m)))
    b = rng.standard_normal(m * K)
    x = lx.linear_solve(lx.MatrixLinearOperator(jnp.asarray(O)), jnp.asarray(b), BlockSolver(K)).value
    np.testing.assert_allclose(x, np.linalg.solve(O, b), rtol=1e-12)
    O2 = block_diag(*(np.eye(K) + 0.3 * rng.standard_normal((K, K)) for _ in range(m)))
    stacked = lx.FunctionLinearOperator(
        lambda v: jnp.stack([jnp.asarray(O) @ v[0], jnp.asarray(O2) @ v[1]]),
        jax.ShapeDtypeStruct((2, m * K), jnp.float64),
    )
    B = rng.standard_normal((2, m * K))
    xs = lx.linear_solve(stacked, jnp.asarray(B), BlockSolver(K)).value
    np.testing.assert_allclose(xs, np.stack([np.linalg.solve(O, B[0]), np.linalg.solve(O2, B[1])]), rtol=1e-12)
    with pytest.raises(ValueError, match=r"`BlockSolver` with K = 4 needs .* p a multiple of K"):
        lx.linear_solve(lx.MatrixLinearOperator(jnp.asarray(O)), jnp.asarray(b), BlockSolver(4))
    with pytest.raises(ValueError, match=r"`K` \(the block size\) must be an integer >= 1; found 0"):
        BlockSolver(0)


def test_block_data_stiff_solve_uses_block_newton():
    """solve_flow(BlockData, stiff=True) runs the block Newton solve and matches Theorem 5."""
    from nqf.stiff import BlockSolver, glv_linear_solver

    rng = np.random.default_rng(2)
    data = nqf.BlockData(rng.uniform(0.5, 2.0, (6, 3)), rng.uniform(0.5, 1.5, 6))
    assert isinstance(glv_linear_solver(data), BlockSolver)
    z0 = np.full(18, 1e-4)
    ts = np.array([0.0, 50.0, 500.0, 5000.0])
    sol = nqf.solve_flow(data, z0=z0, t1=5000.0, ts=ts, stiff=True, rtol=1e-9, atol=1e-14)
    exact = nqf.theorem5(data, ts, z0=z0, matrices=False)
    np.testing.assert_allclose(sol.z, exact.z, rtol=1e-5, atol=1e-12)
