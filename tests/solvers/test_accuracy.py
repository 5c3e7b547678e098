"""An accuracy a user can ask for (issue 36, item 5): ``accuracy=`` on `solve_flow` and
`solve_sweep` picks the tolerance from a two-tolerance estimate of the global error; checked
against Theorem 6's exact solution of Fig. 3 (the table of all three problems: docs/numerics.md,
benchmarks/accuracy_table.py)."""

import jax
import numpy as np
import pytest

import nqf
from nqf.solvers._accuracy import relative_change

FIG3 = nqf.datasets.fig3_data()
TS = np.linspace(0.0, 250.0, 101)
W0 = np.sqrt(1e-5) * np.eye(5)


def rel_z(z, z_ref) -> float:
    """The measure of `accuracy`: max over saved times of |z - z_ref| / |z_ref| (Euclidean)."""
    return float((np.linalg.norm(z - z_ref, axis=-1) / np.linalg.norm(z_ref, axis=-1)).max())


@pytest.mark.parametrize("accuracy", [1e-5, 1e-8])
def test_fig3_meets_the_accuracy_asked_and_estimates_its_error(accuracy):
    sol = nqf.solve_flow(FIG3, W0=W0, t1=250.0, ts=TS, accuracy=accuracy)
    true = rel_z(sol.z, np.asarray(nqf.theorem6(FIG3, TS, W0=W0).z))
    est, rtol = sol.stats["global_error"], sol.stats["rtol"]
    assert true <= accuracy  # the target met
    assert true / 10 <= est <= 10 * true  # the estimate within 10x of the true error
    assert est <= accuracy and sol.stats["accuracy_solves"] >= 2
    assert dict(sol.settings)["rtol"] == rtol < accuracy  # the chosen tolerance, recorded for reloads


def test_sweep_meets_the_accuracy_for_every_member():
    eps = np.array([1e-6, 1e-3])
    sw = nqf.solve_sweep(FIG3, eps=eps, t1=250.0, ts=TS, accuracy=1e-7)
    est = sw.stats["global_error"]
    assert est.shape == (2,)
    for i, e in enumerate(eps):
        true = rel_z(sw.z[i], np.asarray(nqf.theorem6(FIG3, TS, M0=e * np.eye(5)).z))
        assert true <= 1e-7 and true / 10 <= est[i] <= 10 * true
    with pytest.raises(ValueError, match="drop `checkpoint`"):
        nqf.solve_sweep(FIG3, eps=eps, t1=250.0, ts=TS, accuracy=1e-7, checkpoint="unused-dir")


def test_factor_form_measure_is_the_relative_change_of_M():
    """The factor form's measure is computed from W's r x r products: it equals the relative
    Frobenius change of M = W W^T formed explicitly."""
    mlp = nqf.datasets.mlp_data(30, 4)
    a, b = (
        nqf.solve_flow(mlp, W0=0.01 * np.ones((5, 3)), t1=2.0, ts=np.linspace(0, 2, 5), rtol=r) for r in (1e-4, 1e-8)
    )
    assert a.form == "factor" and a.z is None
    num = np.linalg.norm(a.M - b.M, axis=(1, 2)) / np.linalg.norm(b.M, axis=(1, 2))
    assert relative_change(a, b)[0] == pytest.approx(num.max(), rel=1e-6)
    assert num.max() > 0


def test_accuracy_refuses_bad_input():
    run = lambda **kw: nqf.solve_flow(FIG3, W0=W0, t1=250.0, ts=TS, **kw)  # noqa: E731
    for bad in (0.0, -1e-8, np.nan, 1.0, 1e-16):
        with pytest.raises(ValueError, match="`accuracy`"):
            run(accuracy=bad)
    with pytest.raises(TypeError, match="`accuracy`"):
        run(accuracy="1e-8")
    for clash in (dict(rtol=1e-8), dict(atol=1e-12), dict(stepsize_controller=nqf.PID(rtol=1e-8))):
        with pytest.raises(ValueError, match=f"drop `{next(iter(clash))}`"):
            run(accuracy=1e-8, **clash)
    with pytest.raises(ValueError, match="save='state'"):
        run(accuracy=1e-8, save="loss")
    with pytest.raises(ValueError, match="exact backend"):
        run(accuracy=1e-8, method="exact")
    with pytest.raises(TypeError, match="jax.jit"):
        jax.jit(lambda e: nqf.solve_flow(FIG3, W0=e * W0, t1=250.0, ts=TS, accuracy=1e-8).z)(1.0)
    # 1e-13 asks for less than the rounding of the tightest solve (rtol 1e-14: ~5e-13 here)
    with pytest.raises(ValueError, match=r"`accuracy=1e-13` was not reached"):
        run(accuracy=1e-13)
