"""solve_flow / solve_sweep take objects (issue 25): forms, backends, a step-size controller, a
save specification and an adjoint; the scalar keywords of earlier versions are aliases of them
and give the same answer bit for bit."""

import inspect

import diffrax
import numpy as np
import pytest

import nqf


@pytest.fixture(scope="module")
def commuting():
    rng = np.random.default_rng(3)
    return nqf.CommutingData(rng.standard_normal((4, 10)), rng.standard_normal(4))


@pytest.fixture(scope="module")
def dense():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((5, 3, 3))
    return nqf.DenseData((A + np.swapaxes(A, 1, 2)) / 2, rng.standard_normal(5))


TS = np.linspace(0, 10, 6)


def same(a, b):
    return np.array_equal(np.asarray(a), np.asarray(b))


def test_public_signatures_have_at_most_14_parameters():
    for f in (nqf.solve_flow, nqf.solve_sweep):
        params = [p for p in inspect.signature(f).parameters.values() if p.kind != p.VAR_KEYWORD]
        assert len(params) <= 14, f.__name__


def test_objects_and_their_aliases_agree_bit_for_bit(commuting):
    z0 = np.full(10, 1e-3)
    old = nqf.solve_flow(
        commuting, z0=z0, t1=10.0, ts=TS, form="glv", rtol=1e-8, pcoeff=0.1, icoeff=0.9, save="loss", adjoint="forward"
    )
    new = nqf.solve_flow(
        commuting,
        z0=z0,
        t1=10.0,
        form=nqf.GLVForm(),
        stepsize_controller=nqf.PID(rtol=1e-8, pcoeff=0.1, icoeff=0.9),
        saveat=nqf.Save(TS, what="loss"),
        adjoint=diffrax.ForwardMode(),
    )
    assert same(old.loss, new.loss) and same(old.excess_loss, new.excess_loss)
    assert old.settings == new.settings
    assert isinstance(new.form_object, nqf.GLVForm)
    dfx = nqf.solve_flow(
        commuting,
        z0=z0,
        t1=10.0,
        ts=TS,
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8, pcoeff=0.1, icoeff=0.9),
    )
    ref = nqf.solve_flow(commuting, z0=z0, t1=10.0, ts=TS, rtol=1e-8, atol=1e-8, pcoeff=0.1, icoeff=0.9)
    assert same(dfx.z, ref.z)


def test_backend_objects_are_the_method_and_solver_aliases(commuting):
    dg = nqf.DiagonalData(np.linspace(0.2, 2.0, 6), np.linspace(1.0, -0.5, 6))
    assert same(
        nqf.solve_flow(dg, z0=np.full(6, 1e-3), t1=5.0, ts=TS / 2, solver=nqf.Exact()).z,
        nqf.solve_flow(dg, z0=np.full(6, 1e-3), t1=5.0, ts=TS / 2, method="exact").z,
    )
    a = nqf.solve_flow(commuting, z0=np.full(10, 1e-3), t1=10.0, ts=TS, solver=nqf.LSODA())
    b = nqf.solve_flow(commuting, z0=np.full(10, 1e-3), t1=10.0, ts=TS, solver="lsoda")
    assert same(a.z, b.z) and a.settings == b.settings


def test_mmu_form_object_carries_the_width(dense):
    rng = np.random.default_rng(5)
    model = nqf.NQFModel(dense, g=rng.standard_normal((5, 3)))
    W0 = 0.1 * rng.standard_normal((3, 4))
    M0, mu0 = W0 @ W0.T, W0.sum(axis=1)
    a = nqf.solve_flow(model, M0=M0, mu0=mu0, d=4, t1=1.0, ts=TS / 10)
    b = nqf.solve_flow(model, M0=M0, mu0=mu0, form=nqf.MMuForm(d=4), t1=1.0, ts=TS / 10)
    assert same(a.M, b.M) and same(a.mu, b.mu) and b.d == 4


def test_constant_step_size_and_diffrax_saveat(dense):
    M0 = 1e-2 * np.eye(3)
    sol = nqf.solve_flow(
        dense,
        M0=M0,
        t1=1.0,
        stepsize_controller=diffrax.ConstantStepSize(),
        dt0=0.01,
        saveat=diffrax.SaveAt(ts=TS / 10, dense=True),
    )
    ref = nqf.solve_flow(dense, M0=M0, t1=1.0, ts=TS / 10, rtol=1e-12)
    assert sol.stats["num_steps"] == 100
    np.testing.assert_allclose(sol.M, ref.M, rtol=1e-6, atol=1e-9)
    assert sol.M_at(np.array([0.55])).shape == (1, 3, 3)
    with pytest.raises(ValueError, match="dt0"):
        nqf.solve_flow(dense, M0=M0, t1=1.0, stepsize_controller=diffrax.ConstantStepSize())


def test_an_alias_with_its_object_or_an_unknown_keyword_is_refused(dense):
    M0 = 1e-2 * np.eye(3)
    with pytest.raises(ValueError, match="`rtol=` is an alias"):
        nqf.solve_flow(dense, M0=M0, t1=1.0, rtol=1e-8, stepsize_controller=nqf.PID())
    with pytest.raises(ValueError, match="`ts=` is an alias"):
        nqf.solve_flow(dense, M0=M0, t1=1.0, ts=TS / 10, saveat=nqf.Save())
    with pytest.raises(ValueError, match="`method=` is an alias"):
        nqf.solve_flow(dense, M0=M0, t1=1.0, method="exact", solver=nqf.Exact())
    with pytest.raises(TypeError, match="unexpected keyword argument 'rtoll'"):
        nqf.solve_flow(dense, M0=M0, t1=1.0, rtoll=1e-8)
    with pytest.raises(TypeError, match="form"):
        nqf.solve_flow(dense, M0=M0, t1=1.0, form=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'dense'"):
        nqf.solve_sweep(dense, eps=1e-2, t1=1.0, dense=True)


def test_sweep_takes_the_objects(commuting):
    eps = np.array([1e-4, 1e-3])
    old = nqf.solve_sweep(commuting, eps=eps, t1=10.0, ts=TS, rtol=1e-8, mode="vmap")
    new = nqf.solve_sweep(
        commuting,
        eps=eps,
        t1=10.0,
        form=nqf.GLVForm(),
        stepsize_controller=nqf.PID(rtol=1e-8),
        saveat=nqf.Save(TS),
        mode="vmap",
    )
    assert same(old.ys, new.ys) and old.settings == new.settings
