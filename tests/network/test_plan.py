"""nqf.plan on the small tanh MLP of test_predict: the phase end against a dense-output root
find of the same flow, the stability edge against the map's own catapult (nqf.predict at lr
above and below it), the init-size check against the module's and the NQF's losses computed
directly, and bad input."""

import pickle
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.network._predict import _flow_factor

KEY = jax.random.PRNGKey(0)
RNG = np.random.default_rng(0)
N_IN, WIDTH, M = 6, 16, 120
X = RNG.standard_normal((M, N_IN)) / np.sqrt(N_IN)
Y = np.tanh(X @ RNG.standard_normal(N_IN))
MLP = eqx.nn.MLP(N_IN, 1, WIDTH, depth=1, activation=jnp.tanh, use_bias=False, use_final_bias=False, key=KEY)
NET = nqf.Network(MLP)
SCALE = 0.02


@pytest.fixture(scope="module")
def small():
    return nqf.plan(NET, X, Y, init_scale=SCALE)


def test_phase_end_is_the_dense_root_of_the_flow(small):
    """The plan's phase end (a stopping event) is the root of L(t) - L_inf - tol (L(0) - L_inf) on
    the flow's dense output (Brent, nqf.learning_phase_end), to 1e-8 relative; L_inf is the
    NQF's least-squares limit (feed-forward data)."""
    W0 = SCALE * NET.W
    sol = nqf.solve_flow(small.model, W0=_flow_factor(small.model, W0), t1=small.horizon)
    ref = nqf.learning_phase_end(sol, final_loss=small.final_loss, tol=0.02, refine="brent")
    assert small.final_loss_from == "asymptote"
    assert small.phase_end == pytest.approx(ref, rel=1e-8)
    assert small.horizon == pytest.approx(1.5 * small.phase_end)
    E = np.linalg.lstsq(X, Y, rcond=None)[0]
    assert small.final_loss == pytest.approx(np.mean((X @ E - Y) ** 2), rel=1e-9)


def test_the_edge_is_where_the_predicted_map_catapults(small):
    """nqf.predict's exact map at 0.8 x the plan's edge follows the flow (its loss never rises);
    at 1.3 x the edge it rises, as the edge says (the map's own catapult warning)."""
    edge = small.lr_edge
    assert 0 < edge < small.lr_edge_init  # the loss sharpens along the path
    assert small.sharpness.max() == pytest.approx(2.0 / edge)
    for factor, rises in ((0.8, False), (1.3, True)):
        lr = factor * edge
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pred = nqf.predict(
                NET, X, Y, lr=lr, steps=int(1.3 * small.horizon / lr), init_scale=SCALE, estimate_departure=False
            )
        warned = any("stability edge" in str(w.message) for w in caught)
        assert warned == rises, (factor, [str(w.message) for w in caught])
        assert bool(np.any(np.diff(pred.loss) > 1e-3 * pred.loss[0])) == rises
        if not rises:  # the map's own path (5 states) has the flow's edge (17 states)
            assert pred.settings["stability_edge"] == pytest.approx(edge, rel=0.05)
            assert pred.settings["stability_edge_init"] == pytest.approx(small.lr_edge_init, rel=1e-9)


def test_predict_warns_before_the_run_for_an_lr_past_the_edge_at_init(small):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nqf.predict(NET, X, Y, nqf.SGD(1.2 * small.lr_edge_init, steps=3), init_scale=SCALE, estimate_departure=False)
    first = caught[0]  # before the map runs
    assert first.category is nqf.HorizonWarning and "at the initial weights" in str(first.message)
    assert f"{small.lr_edge_init:.4g}" in str(first.message)


def test_plan_warns_for_an_lr_past_the_edge_and_suggests_one(small):
    with pytest.warns(nqf.HorizonWarning, match=f"stability edge 2\\(1\\+beta\\)/S = {small.lr_edge:.4g}"):
        past = nqf.plan(NET, X, Y, init_scale=SCALE, lr=2.0 * small.lr_edge)
    assert past.stable is False and float(past.suggestion().lr) == pytest.approx(0.5 * small.lr_edge)
    ok = nqf.plan(NET, X, Y, init_scale=SCALE, lr=0.5 * small.lr_edge, momentum=0.5)
    assert ok.stable and ok.lr_edge == pytest.approx(1.5 * small.lr_edge)  # heavy ball: 2 (1 + beta) / S
    sug = ok.suggestion()
    assert (float(sug.lr), sug.steps) == (0.5 * small.lr_edge, int(np.ceil(ok.horizon / (0.5 * small.lr_edge))))
    assert float(sug.momentum) == 0.5  # the plan's momentum: the run it checked
    same = nqf.plan(NET, X, Y, sug, init_scale=SCALE)  # the description itself: its rate and momentum
    assert same.stable and same.lr_edge == ok.lr_edge


def test_init_check_is_the_module_vs_nqf_loss_gap(small):
    """init_gap[0] = |L_module(W0) - L_NQF(W0)| / L(0), each computed directly; the module's own
    (not small) initialization is flagged (nqf.InitScaleWarning), 0.02 x it is not."""
    W0 = NET.W
    model_loss = float(np.mean((np.asarray(jax.vmap(lambda xx: NET(W0, xx))(X)).reshape(-1) - Y) ** 2))
    f = np.asarray(nqf.NQFModel(small.model).outputs_factor(W0, W0.sum(axis=1)))
    nqf_loss = float(np.mean((f - Y) ** 2))
    with pytest.warns(nqf.InitScaleWarning, match="initialization is not small"):
        own = nqf.plan(NET, X, Y)
    assert own.init_gap[0] == pytest.approx(abs(model_loss - nqf_loss) / nqf_loss, rel=1e-9)
    assert not own.init_small and small.init_small
    assert small.init_gap.max() < 0.01 < own.init_gap.max()  # the documented init_tol


def test_a_horizon_that_cannot_be_reached_warns(small):
    with pytest.warns(nqf.HorizonWarning, match="does not end within t_max"):
        short = nqf.plan(NET, X, Y, init_scale=SCALE, t_max=0.2 * small.phase_end)
    assert np.isnan(short.phase_end) and short.horizon == pytest.approx(0.2 * small.phase_end)
    with pytest.raises(ValueError, match="no suggestion"):
        short.suggestion()
    assert "no suggestion" in str(short)


def test_plan_pickles_and_saves(small, tmp_path):
    back = pickle.loads(pickle.dumps(small))
    np.testing.assert_array_equal(back.sharpness, small.sharpness)
    loaded = nqf.load(small.save(tmp_path / "plan"))
    assert loaded.summary() == small.summary()
    assert "learning phase ends" in str(small)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, "`lr`"),
        ({"t_max": -1.0}, "`t_max`"),
        ({"momentum": 1.0}, "`momentum`"),
        ({"margins": (0.0, 0.5)}, "`margins`"),
        ({"margins": 0.5}, "`margins` must be a pair"),
        ({"n_points": 1}, "`n_points`"),
        ({"phase_tol": 1.5}, "`phase_tol`"),
        ({"W0": np.zeros((3, 3))}, "`W0`"),
    ],
)
def test_plan_refuses_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        nqf.plan(NET, X, Y, **kwargs)
