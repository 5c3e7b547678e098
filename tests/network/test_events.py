"""Event times without a save-grid floor (issue 34, items 3 and 4): an exactly quadratic layer, whose
NQF is the layer itself, so prediction and training agree to rounding at every step; a flow's times
from its dense output against a tight reference; re-targeting a prediction without solving again.
(A horizon shorter than the learning phase: tests/network/test_predict.py.)"""

import dataclasses

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nqf
from nqf.dynamics import _maps
from nqf.solvers import _solution

RNG = np.random.default_rng(1)
P, D, M = 6, 8, 200
X = RNG.standard_normal((M, P)) / np.sqrt(P)
Q = np.linalg.qr(RNG.standard_normal((P, P)))[0]
M_STAR = Q[:, :3] @ np.diag([3.0, 1.5, 0.6]) @ Q[:, :3].T  # a rank-3 teacher
Y = np.einsum("mi,ij,mj->m", X, M_STAR, X)
W0 = 1e-3 * RNG.standard_normal((P, D))
LR, STEPS = 0.02, 1500  # t = 30: the learning phase ends near t = 9


def quadratic(W, x):
    """f(W, x) = Tr[W W^T x x^T]: exactly an NQF with A(x) = x x^T (g = B = 0)."""
    return jnp.sum((W.T @ x) ** 2)


NET = nqf.Network(quadratic, W0=W0)


@pytest.fixture(scope="module")
def pred():
    return nqf.predict(NET, X, Y, lr=LR, steps=STEPS, estimate_departure=False)


@pytest.fixture(scope="module")
def run(pred):
    return pred.record(optax.sgd(LR))


def _rel(a, b):
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    return np.max(np.abs(b - a) / np.abs(a))


def test_the_quadratic_layer_predicts_every_time_to_rounding(pred, run):
    """Default save settings (predict ~400 saves, record ~200): every reported time agrees to
    <= 1e-6 relative (before the per-step values: 9e-5 half-drop, 2e-3 drops, 8e-4 ignition)."""
    assert pred.settings["resolution"] == "step" and pred.targets_from == "phase_end"
    assert run.step_loss.shape == (STEPS + 1,) and run.step_eigenvalues.shape == (STEPS + 1, P)
    # the per-step curves are the layer's own training, step by step
    np.testing.assert_allclose(pred.trajectory.step_loss, run.step_loss, rtol=1e-11)
    cmp = nqf.compare(pred, run)
    grow = pred.growing
    assert grow[:3].all() and np.isfinite(pred.ignition_times[grow]).all()
    assert np.isfinite(cmp.drop_times).all() and np.isfinite(pred.phase_end)
    assert _rel(*cmp.half_drop_time) <= 1e-6
    assert _rel(*cmp.drop_times) <= 1e-6
    assert _rel(cmp.ignition_times[0][grow], cmp.ignition_times[1][grow]) <= 1e-6
    assert _rel(cmp.phase_end, cmp.phase_end_measured) <= 1e-6
    s = cmp.summary()
    assert s["phase_end_relative_error"] <= 1e-6 and all(cmp.verdicts.values())


def test_times_are_read_between_consecutive_steps(pred):
    """The half-drop time is the linear interpolation between the two steps that bracket the
    half-way loss (an independent search on the per-step loss)."""
    loss = pred.trajectory.step_loss
    half = 0.5 * (loss[0] + pred.final_loss)
    j = int(np.argmax(loss <= half))
    want = LR * (j - 1 + (loss[j - 1] - half) / (loss[j - 1] - loss[j]))
    np.testing.assert_allclose(pred.half_drop_time, want, rtol=1e-13)
    k = int(np.flatnonzero(pred.growing)[0])
    ev = pred.trajectory.step_eigenvalues[:, k]
    level = pred.settings["rho"] * pred.targets[k]
    i = int(np.argmax(ev >= level))
    assert LR * (i - 1) < pred.ignition_times[k] <= LR * i


def test_flow_times_come_from_the_dense_output():
    """A flow's half-drop time from its dense output (Brent) against a tight reference (rtol 1e-12,
    fine saves, Brent on its dense output): <= 1e-8 relative; linear interpolation of the 401
    saved points is measurably worse (measured when written: 3e-12 dense, 6e-5 linear)."""
    t1 = 30.0
    flow = nqf.predict(NET, X, Y, t1=t1, estimate_departure=False)
    assert flow.settings["resolution"] == "dense"
    model = flow.model
    ref = nqf.solve_flow(model, W0=W0, t1=t1, ts=np.linspace(0.0, t1, 4001), rtol=1e-12)
    levels = np.array([flow.loss[0], flow.final_loss])
    want = nqf.drop_times(ref, levels=levels, refine="brent")[0]
    dense_err = abs(flow.half_drop_time - want) / want
    linear_err = abs(nqf.drop_times(flow.t, flow.loss, levels=levels)[0] - want) / want
    assert dense_err <= 1e-8
    assert linear_err > 100 * dense_err
    # the phase end, too, by Brent on the dense output
    end = nqf.learning_phase_end(ref, final_loss=flow.final_loss, tol=flow.settings["phase_tol"])
    np.testing.assert_allclose(flow.phase_end, end, rtol=1e-8)


def test_retargeting_reproduces_a_fresh_prediction_without_solving(pred, run, monkeypatch):
    calls = []
    monkeypatch.setattr(_maps, "_run", lambda *a, **k: calls.append(1))  # any map run would fail here
    monkeypatch.setitem(_solution._FRONT_END, "solve_flow", lambda *a, **k: calls.append(1))
    again = pred.with_targets("horizon", rho=0.3)
    given = pred.with_targets(np.full(P, 1.0))
    none = pred.with_targets(np.zeros(P))
    assert not calls and pred.targets_from == "phase_end"  # the original is unchanged
    monkeypatch.undo()
    fresh = nqf.predict(NET, X, Y, lr=LR, steps=STEPS, estimate_departure=False, target="horizon", rho=0.3)
    for f in ("targets", "growing", "ignition_times", "plateau_levels", "drop_times", "half_drop_time", "phase_end"):
        np.testing.assert_allclose(getattr(again, f), getattr(fresh, f), rtol=1e-12, err_msg=f)
    assert again.targets_from == fresh.targets_from == "horizon" and again.settings == fresh.settings
    assert given.targets_from == "given" and given.settings["target"] == "given"
    reach = (pred.trajectory.step_eigenvalues >= 0.5).any(axis=0)  # the modes that pass 0.5 x 1.0
    assert given.growing.all() and reach.sum() >= 2
    np.testing.assert_array_equal(np.isfinite(given.ignition_times), reach)
    assert not none.growing.any() and np.isnan(none.ignition_times).all()
    cmp = nqf.compare(again, run)  # compare takes a re-targeted prediction
    assert _rel(cmp.ignition_times[0][again.growing], cmp.ignition_times[1][again.growing]) <= 1e-6
    empty = nqf.compare(none, run)
    assert empty.verdicts["ignition_times"] is None
    fig = empty.plot()  # no growing mode: the top eigenvalues are drawn
    assert len(fig.axes[1].lines) == 2 * P and "top 6" in fig.axes[1].get_ylabel()
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        pred.with_targets(np.ones(3))
    with pytest.raises(ValueError, match="`target` must be one of"):
        pred.with_targets("end")
    with pytest.raises(ValueError, match="`rho` must lie in"):
        pred.with_targets(rho=1.5)


def test_per_step_values_save_load_and_pickle(pred, run, tmp_path):
    import pickle

    back = nqf.load(pred.save(tmp_path / "pred.npz"))
    np.testing.assert_array_equal(back.trajectory.step_eigenvalues, pred.trajectory.step_eigenvalues)
    assert back.targets_from == pred.targets_from
    np.testing.assert_array_equal(
        back.with_targets("horizon").ignition_times, pred.with_targets("horizon").ignition_times
    )
    rec = nqf.load(run.save(tmp_path / "run.npz"))
    np.testing.assert_array_equal(rec.step_loss, run.step_loss)
    again = pickle.loads(pickle.dumps(run))
    np.testing.assert_array_equal(again.step_times, run.step_times)
    cut = dataclasses.replace(run, step_loss=None, step_eigenvalues=None)  # saved grid only: still compares
    assert np.isfinite(nqf.compare(pred, cut).half_drop_time).all()


def test_a_loss_still_falling_at_the_horizon_has_no_phase_end():
    """Without a closed-form limit (dense data) the horizon's loss stands in for L_inf only where
    the curve has flattened; at t1 = 3 (the phase ends near t = 9) it has not: no phase end, no
    half-drop time, the targets from the horizon, a HorizonWarning."""
    with pytest.warns(nqf.HorizonWarning, match="does not end within the horizon"):
        short = nqf.predict(NET, X, Y, t1=3.0, estimate_departure=False)
    assert short.settings["final_loss"] == "horizon"
    assert np.isnan(short.phase_end) and np.isnan(short.half_drop_time)
    assert short.targets_from == "horizon" and np.isfinite(short.ignition_times[short.growing]).all()
