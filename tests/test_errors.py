"""Bad input raises a clear error naming the argument, the expected shape/condition and what was found."""

import numpy as np
import pytest

import nqf

GOOD_A = np.stack([np.eye(3), np.diag([1.0, 2.0, 3.0])])
Y2 = np.array([1.0, 2.0])


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: nqf.DenseData(np.ones((3, 3)), Y2), ValueError, r"`A` must be a 3-d array.*found shape \(3, 3\)"),
        (
            lambda: nqf.DenseData(np.ones((2, 3, 4)), Y2),
            ValueError,
            r"`A` must have shape \(m, p, p\); found \(2, 3, 4\)",
        ),
        (lambda: nqf.DenseData(np.triu(np.ones((2, 3, 3))), Y2), ValueError, r"`A` must be symmetric.*index"),
        (
            lambda: nqf.DenseData(np.where(GOOD_A == 2.0, np.nan, GOOD_A), Y2),
            ValueError,
            r"`A` must be finite; found 1 non-finite",
        ),
        (
            lambda: nqf.DenseData(GOOD_A, [1.0, 2.0, 3.0]),
            ValueError,
            r"`y` must hold one label per data matrix: expected shape \(2,\); found \(3,\)",
        ),
        (lambda: nqf.DenseData(GOOD_A, [1.0, np.inf]), ValueError, r"`y` must be finite"),
        (
            lambda: nqf.DenseData(np.zeros((0, 3, 3)), np.zeros(0)),
            ValueError,
            r"at least one data matrix \(m >= 1\); found m = 0",
        ),
        (lambda: nqf.DenseData(GOOD_A.astype(complex), Y2), TypeError, r"`A` must be real"),
        (lambda: nqf.DenseData([["a"]], Y2), TypeError, r"`A` must be a numeric array"),
        (
            lambda: nqf.CommutingData(np.ones((2, 3)), Y2, P=np.ones((3, 3))),
            ValueError,
            r"`P` must be orthogonal.*found max",
        ),
        (
            lambda: nqf.CommutingData(np.ones((2, 3)), Y2, P=np.eye(4)),
            ValueError,
            r"`P` must have shape \(3, 3\); found \(4, 4\)",
        ),
        (
            lambda: nqf.CommutingData.from_dense(
                np.stack([np.eye(2), np.array([[0, 1.0], [1, 0]]), np.diag([1.0, -1])]), [1, 2, 3]
            ),
            ValueError,
            r"do not commute \(Assumption 1 fails\)",
        ),
        (
            lambda: nqf.LowRankData(np.ones((2, 3, 2)), np.ones((2, 3)), Y2),
            ValueError,
            r"`s` must have shape \(2, 2\); found \(2, 3\)",
        ),
        (
            lambda: nqf.feedforward_data(Y2, a=np.ones((2, 3, 1)), b=np.ones((2, 1, 2))),
            ValueError,
            r"must agree in m and r",
        ),
        (lambda: nqf.feedforward_data(Y2), ValueError, r"Give either `C`"),
        (
            lambda: nqf.predicted_ignition_times(1.0, 1.0, 1e-3, rho=1.5),
            ValueError,
            r"`rho` must lie in \(0, 1\); found 1.5",
        ),
        (
            lambda: nqf.predicted_ignition_times(1.0, -1.0, 1e-3),
            ValueError,
            r"`C` \(self-competition\) must be >= 0; found minimum -1",
        ),
        (lambda: nqf.datasets.orthogonal_features_data([1.0, 2.0], m=1), ValueError, r"m >= p"),
        (  # issue 36 B11: was numpy's broadcast message
            lambda: nqf.predicted_ignition_times(np.ones(5), np.ones(4), 1e-3 * np.ones(5)),
            ValueError,
            r"`zeta`, `C` and `z0` must have the same shape \(p,\).*found zeta \(5,\), C \(4,\), z0 \(5,\)",
        ),
    ],
)
def test_bad_data(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


@pytest.fixture(scope="module")
def data():
    return nqf.DenseData(GOOD_A, Y2)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(M0=np.eye(4), t1=1.0), ValueError, r"`M0` must have shape \(3, 3\) to match the data; found \(4, 4\)"),
        (
            dict(M0=np.diag([1.0, -1.0, 1.0]), t1=1.0),
            ValueError,
            r"`M0` must be positive semi-definite.*smallest eigenvalue -1",
        ),
        (dict(M0=np.triu(np.ones((3, 3))), t1=1.0), ValueError, r"`M0` must be symmetric"),
        (dict(M0=np.full((3, 3), np.nan), t1=1.0), ValueError, r"`M0` must be finite"),
        (dict(W0=np.ones((2, 5)), t1=1.0), ValueError, r"`W0` must have shape \(3, d\).*found \(2, 5\)"),
        (dict(M0=np.eye(3), W0=np.eye(3), t1=1.0), ValueError, r"exactly one initial condition"),
        (dict(t1=1.0), ValueError, r"exactly one initial condition"),
        (dict(M0=np.eye(3), t1=1.0, rtol=-1e-8), ValueError, r"`rtol` must be finite and > 0; found -1e-08"),
        (dict(M0=np.eye(3), t1=1.0, atol=0.0), ValueError, r"`atol` must be finite and > 0"),
        (dict(M0=np.eye(3), t1=1.0, weight_decay=-0.1), ValueError, r"`weight_decay` must be finite and >= 0"),
        (dict(M0=np.eye(3), t1=1.0, weight_decay=np.nan), ValueError, r"`weight_decay` must be finite"),
        (dict(M0=np.eye(3), t1=-1.0), ValueError, r"`t1` must be greater than `t0`"),
        (dict(M0=np.eye(3), t1=np.inf), ValueError, r"`t1` must be finite"),
        (
            dict(M0=np.eye(3), t1=1.0, ts=[0.0, 2.0]),
            ValueError,
            r"`ts` must lie inside \[t0, t1\] = \[0.0, 1.0\]; found range \[0.0, 2.0\]",
        ),
        (
            dict(M0=np.eye(3), t1=1.0, ts=[0.5, 0.1]),
            ValueError,
            r"`ts` must be non-decreasing; found ts\[0\] = 0.5 > ts\[1\] = 0.1",
        ),
        (dict(M0=np.eye(3), t1=1.0, form="glv"), ValueError, r"`form='glv'` needs commuting data"),
        (dict(M0=np.eye(3), t1=1.0, form="Z"), ValueError, r"`form` must be one of"),
        (dict(M0=np.eye(3), t1=1.0, solver="euler9"), ValueError, r"`solver` must be a diffrax solver or one of"),
        (dict(M0=np.eye(3), t1=1.0, max_steps=0), ValueError, r"`max_steps` must be a positive integer"),
    ],
)
def test_bad_solve_arguments(data, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        nqf.solve_flow(data, **kwargs)


def test_bad_data_argument():
    with pytest.raises(TypeError, match=r"`data` must be an nqf data set.*ndarray"):
        nqf.solve_flow(np.eye(3), M0=np.eye(3), t1=1.0)


def test_max_steps_reached_says_what_to_change():
    data = nqf.datasets.fig3_data()
    with pytest.raises(
        nqf.MaxStepsReached, match=r"max_steps=5 steps before reaching t1=250.*Increase `max_steps`.*stiff=True"
    ):
        nqf.solve_flow(data, M0=1e-5 * np.eye(5), t1=250.0, max_steps=5)


def test_mode_strengths_need_commuting_data(data):
    sol = nqf.solve_flow(data, M0=1e-3 * np.eye(3), t1=1.0, ts=[0.0, 1.0])
    with pytest.raises(ValueError, match=r"quantity='z' \(mode strengths z_k\) needs commuting data.*found DenseData"):
        nqf.measure_ignition_times(sol, quantity="z")


def test_memory_is_estimated_before_it_is_allocated(monkeypatch):
    """Over the budget, every allocating entry point refuses before allocating (these sizes
    would take tens of GB): the error names the size, the budget and the ways out."""
    import time

    from nqf.memory import MemoryBudgetError

    monkeypatch.setenv("NQF_MEMORY_BUDGET", "1GB")
    big = nqf.datasets.powerlaw_data(10**7)
    t = time.perf_counter()
    with pytest.raises(MemoryBudgetError, match=r"about 17.*GB, over the memory budget of 1 GB.*save='loss'"):
        nqf.solve_flow(big, z0=np.full(10**7, 1e-6), t1=1.0, stiff=True)
    with pytest.raises(MemoryBudgetError, match="dense output reserved for max_steps"):
        nqf.solve_flow(nqf.datasets.powerlaw_data(10**5), z0=np.full(10**5, 1e-6), t1=1.0, dense=True)
    with pytest.raises(MemoryBudgetError, match=r"64-member sweep"):
        nqf.solve_sweep(nqf.datasets.powerlaw_data(10**6), eps=np.full(64, 1e-6), t1=1.0)
    with pytest.raises(MemoryBudgetError, match=r"dense\(\) \(an \(m, p, p\)"):
        nqf.datasets.powerlaw_data(3000).dense()
    assert time.perf_counter() - t < 30  # nothing of that size was allocated
    with pytest.raises(MemoryBudgetError):
        nqf.solve_flow(nqf.datasets.fig3_data(), W0=np.eye(5), t1=1.0, memory_budget=100)
    monkeypatch.setenv("NQF_MEMORY_BUDGET", "lots")
    with pytest.raises(ValueError, match="NQF_MEMORY_BUDGET must be bytes"):
        nqf.solve_flow(nqf.datasets.fig3_data(), W0=np.eye(5), t1=1.0)


def test_max_steps_reached_carries_the_partial_solution():
    pl = nqf.datasets.powerlaw_data(300)
    with pytest.raises(nqf.MaxStepsReached, match=r"it got to t=.* saved times; the partial solution") as err:
        nqf.solve_flow(pl, z0=np.full(300, 1e-6), t1=1e4, max_steps=200)
    e = err.value
    assert 0 < e.t_reached < 1e4 and e.solution.ts[-1] <= e.t_reached
    assert np.all(np.isfinite(e.solution.loss)) and e.solution.z.shape == (e.solution.ts.size, 300)


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(dt0=-1.0), "`dt0` must be finite and > 0"),
        (dict(rtol=2.0), "`rtol` must be < 1"),
        (dict(pcoeff=-0.1), "`pcoeff` .* must be finite and >= 0"),
    ],
)
def test_solver_settings_are_checked(kw, msg):
    with pytest.raises(ValueError, match=msg):
        nqf.solve_flow(nqf.datasets.fig3_data(), W0=np.eye(5) * 1e-3, t1=1.0, **kw)


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: nqf.Stop("bogus"), ValueError, r"`kind` of an nqf.Stop must be one of .*found 'bogus'"),
        (lambda: nqf.Stop("when"), TypeError, r"Stop\('when'\) needs `fn`"),
        (
            lambda: nqf.solve_sweep(nqf.datasets.fig3_data(), eps=[1e-3, 1e-2], t1=1.0, checkpoint=""),
            ValueError,
            r"`checkpoint` must be a directory path.*found an empty path ''",
        ),
        (
            lambda: nqf.closed_sgd(
                nqf.datasets.fig3_data(), nqf.SGD(0.1, steps=5, batch_size=2, key=2**70), M0=np.eye(5)
            ),
            ValueError,
            r"`key` as an integer seed must lie in \[-2\*\*63, 2\*\*63\).*found 1180591620717411303424",
        ),
    ],
)
def test_bad_arguments_are_named_at_the_boundary(make, exc, match):
    """Issue 36 B11: these were accepted and failed later ('NoneType' object is not callable), or
    raised os.makedirs' FileNotFoundError for '' and JAX's OverflowError for the seed."""
    with pytest.raises(exc, match=match):
        make()


def test_labels_past_float64s_range_are_named_and_a_huge_loss_warns():
    """Issue 36 B11 / B13: labels whose loss overflows (y * 1e200) are refused up front naming `y`
    (it was MaxStepsReached after 6 s, no word of overflow); a finite loss past 1e150 (here
    1.7e297) warns PrecisionWarning when read (it was returned silently); an ordinary one does not."""
    fig3 = nqf.datasets.fig3_data()
    with pytest.raises(ValueError, match=r"`y` reaches 5.56e\+199: the loss .* overflows float64"):
        nqf.solve_flow(nqf.CommutingData(np.asarray(fig3.Lambda), fig3.y * 1e200), M0=np.eye(5), t1=250.0)
    huge = nqf.solve_flow(
        nqf.CommutingData(np.asarray(fig3.Lambda), fig3.y * 1e149), M0=np.eye(5), t1=1e-300, ts=[0.0, 1e-300]
    )
    with pytest.warns(nqf.PrecisionWarning, match=r"The loss reaches 1.67e\+297, past 1e\+150"):
        assert np.isfinite(huge.loss).all()
    assert nqf.solve_flow(fig3, M0=np.eye(5), t1=1.0).loss[-1] < 1.0  # no warning (NQFWarnings are errors here)
