"""Issue 16 (robustness): bad inputs that used to give raw errors or silence now raise a clear
error naming the argument, the expected condition and what was found; `BlockData`; the CLI's
early checks. Every message is asserted on."""

import jax
import numpy as np
import pytest

import nqf
import nqf.dynamics._gd
from nqf.cli import main

FIG3 = nqf.datasets.fig3_data()  # CommutingData, m = p = 5
_NO_COLUMNS = r"`W0` must have at least one column \(width d >= 1 neurons\); found shape \((5|4), 0\)"


@pytest.mark.parametrize(
    "call, exc, match",
    [
        # ntk: an M no weights realise (closed_sgd refuses the same input)
        (
            lambda: nqf.ntk(FIG3, M=np.diag([-8.0, 1, 1, 1, 1]), mu=np.zeros(5), d=3),
            ValueError,
            r"`M` must be positive semi-definite.*smallest eigenvalue -8",
        ),
        (
            lambda: nqf.ntk(FIG3, M=np.eye(5), mu=np.zeros(5), d=2),
            ValueError,
            r"\(`M`, `mu`\) cannot come from d=2 neurons: M - mu mu\^T / d must have rank <= 1",
        ),
        (
            lambda: nqf.ntk(FIG3, M=np.eye(5), mu=np.full(5, 3.0), d=6),
            ValueError,
            r"`M` is not realizable: M - mu mu\^T / d must be positive semi-definite",
        ),
        # commuting-data functions on dense data
        (
            lambda: nqf.glv_equilibrium(nqf.DenseData(np.asarray(FIG3.dense()), FIG3.y)),
            TypeError,
            r"`glv_equilibrium` needs commuting data.*found DenseData",
        ),
        (
            lambda: nqf.excess_loss(nqf.DenseData(np.asarray(FIG3.dense()), FIG3.y), np.ones(5)),
            TypeError,
            r"`excess_loss` needs commuting data.*found DenseData",
        ),
        (
            lambda: nqf.dynamics._glv.orthogonal_features_residual(nqf.DenseData(np.asarray(FIG3.dense()), FIG3.y)),
            TypeError,
            r"`orthogonal_features_residual` needs commuting data",
        ),
        # width d = 0
        (
            lambda: nqf.closed_sgd(FIG3, lr=0.01, steps=3, W0=np.zeros((5, 0))),
            ValueError,
            r"`W0` must have at least one column \(width d >= 1 neurons\); found shape \(5, 0\)",
        ),
        (
            lambda: nqf.theorem3(FIG3, lr=0.1, W0=np.zeros((5, 0))),
            ValueError,
            r"`W0` must have at least one column.*found shape \(5, 0\)",
        ),
        # Nesterov without momentum
        (
            lambda: nqf.closed_sgd(FIG3, lr=0.01, steps=3, W0=np.eye(5), nesterov=True),
            ValueError,
            r"`nesterov=True` needs a momentum beta in \(0, 1\); found momentum = 0",
        ),
        (
            lambda: nqf.closed_map(FIG3, lr=0.01, steps=3, W0=np.eye(5), optimizer="nesterov", momentum=0.0),
            ValueError,
            r"`nesterov=True` needs a momentum.*found momentum = 0",
        ),
        (
            lambda: nqf.closed_sgd(FIG3, lr=0.01, steps=3, W0=np.eye(5), nesterov=1),
            TypeError,
            r"`nesterov` must be True or False; found 1",
        ),
        # corollary3_bound
        (
            lambda: nqf.compress.corollary3_bound(np.ones(3), np.ones(2), tail=-1.0, lr=0.1),
            ValueError,
            r"`tail` must be finite and >= 0; found -1",
        ),
        (
            lambda: nqf.compress.corollary3_bound(np.ones(3), np.ones(2), tail=1.0, lr=0.0),
            ValueError,
            r"`lr` must be finite and > 0; found 0",
        ),
        (
            lambda: nqf.compress.corollary3_bound(-np.ones(3), np.ones(2), tail=1.0, lr=0.1),
            ValueError,
            r"`measured` must be a non-empty 1-d array of errors >= 0.*minimum -1",
        ),
        (
            lambda: nqf.compress.corollary3_bound(np.ones(3), -np.ones(2), tail=1.0, lr=0.1),
            ValueError,
            r"`L_steps` must be Lipschitz estimates >= 0; found minimum -1",
        ),
        (
            lambda: nqf.compress.corollary3_bound(np.ones(3), np.ones(2), tail=1.0, lr=0.1, map_L_steps=np.ones(5)),
            ValueError,
            r"`map_L_steps` must have shape \(2,\).*found shape \(5,\)",
        ),
        # staircase_limit
        (
            lambda: nqf.samplewise.staircase_limit([-1.0, 2.0], [1.0], [1.0]),
            ValueError,
            r"`tau` must be rescaled times t / ln\(1/eps\) >= 0; found minimum -1",
        ),
        # BlockData
        (
            lambda: nqf.BlockData(np.ones((2, 0)), [1.0, 2.0]),
            ValueError,
            r"`blocks` must have at least one mode per sample \(K >= 1\); found shape \(2, 0\)",
        ),
        (lambda: nqf.BlockData(np.ones(4), [1.0, 2.0]), ValueError, r"`blocks` must be a 2-d array"),
        (
            lambda: nqf.BlockData(np.ones((2, 2)), [1.0, 2.0, 3.0]),
            ValueError,
            r"`y` must hold one label per data matrix: expected shape \(2,\); found \(3,\)",
        ),
        (lambda: nqf.BlockData(np.ones((2, 2)), [1.0, 2.0], P=np.ones((4, 4))), ValueError, r"`P` must be orthogonal"),
        (
            lambda: nqf.BlockData(np.ones((2, 2)), [1.0, 2.0], P=np.eye(3)),
            ValueError,
            r"`P` must have shape \(4, 4\); found \(3, 3\)",
        ),
        (lambda: nqf.BlockData([[1.0, np.nan]], [1.0]), ValueError, r"`blocks` must be finite"),
        # width d = 0 everywhere a W0 is taken
        (lambda: nqf.solve_flow(FIG3, W0=np.zeros((5, 0)), t1=1.0), ValueError, _NO_COLUMNS),
        (lambda: nqf.solve_flow(FIG3, W0=np.zeros((5, 0)), t1=1.0, form="M-mu"), ValueError, _NO_COLUMNS),
        (lambda: nqf.train_w(FIG3, np.zeros((5, 0)), lr=0.1, steps=3), ValueError, _NO_COLUMNS),
        (lambda: nqf.dynamics._gd.gradient_descent(FIG3, np.zeros((5, 0)), lr=0.1, steps=3), ValueError, _NO_COLUMNS),
        (lambda: nqf.theorem6(FIG3, [0.0, 1.0], W0=np.zeros((5, 0))), ValueError, _NO_COLUMNS),
        (
            lambda: nqf.theorem5(nqf.BlockData(np.ones((2, 2)), [1.0, 1.0]), [1.0], W0=np.zeros((4, 0))),
            ValueError,
            _NO_COLUMNS,
        ),
        (
            lambda: nqf.solve_sweep(FIG3, W0=np.zeros((2, 5, 0)), t1=1.0),
            ValueError,
            r"`W0` members must have shape \(5, d\) with d >= 1.*found \(5, 0\)",
        ),
        (lambda: nqf.closed_sgd_sweep(FIG3, lr=[0.1, 0.2], steps=3, W0=np.zeros((5, 0))), ValueError, _NO_COLUMNS),
        (
            lambda: nqf.solve_flow(FIG3, W0=np.zeros((4, 2)), t1=1.0),
            ValueError,
            r"`W0` must have shape \(5, d\) \(one column per neuron\) to match the data; found \(4, 2\)",
        ),
        # p = 0 (no features) in every data class
        (
            lambda: nqf.DenseData(np.zeros((2, 0, 0)), [1.0, 2.0]),
            ValueError,
            r"at least one feature \(p >= 1\); found p = 0 from `A` of shape \(2, 0, 0\)",
        ),
        (
            lambda: nqf.CommutingData(np.zeros((2, 0)), [1.0, 2.0]),
            ValueError,
            r"at least one feature \(p >= 1\); found p = 0 from `Lambda` of shape \(2, 0\)",
        ),
        (
            lambda: nqf.LowRankData(np.zeros((2, 0, 1)), np.zeros((2, 1)), [1.0, 2.0]),
            ValueError,
            r"at least one feature \(p >= 1\); found p = 0 from `U` of shape \(2, 0, 1\)",
        ),
        (
            lambda: nqf.FeedForwardData(np.zeros((1, 0, 1)), np.ones((1, 2, 1)), [1.0]),
            ValueError,
            r"need k >= 1 and q >= 1.*found a \(1, 0, 1\)",
        ),
        # a file as the compilation cache directory
        (
            lambda: nqf.enable_compilation_cache(__file__),
            ValueError,
            r"`path` .* cannot be used as the compilation cache directory \(FileExistsError",
        ),
        # an oracle's tolerance: NaN would let every violated assumption pass
        (
            lambda: nqf.theorem6(FIG3, [0.0, 1.0], M0=1e-3 * np.eye(5), tol=float("nan")),
            ValueError,
            r"`tol` must be finite and >= 0; found nan",
        ),
        (
            lambda: nqf.theorem7(FIG3, [0.0, 1.0], M0=1e-3 * np.eye(5), tol=-1.0),
            ValueError,
            r"`tol` must be finite and >= 0; found -1.0",
        ),
        (
            lambda: nqf.samplewise_rates(nqf.DiagonalData(np.ones(3), np.ones(3)), tol=-1e-3),
            ValueError,
            r"`tol` must be finite and >= 0; found -0.001",
        ),
        (
            lambda: nqf.theorem4(FIG3, [0.0, 1.0], M0=1e-3 * np.eye(5), tol=float("inf")),
            ValueError,
            r"`tol` must be finite and >= 0; found inf",
        ),
        # a data set scaled by a non-finite or non-scalar c (the error named `A` before)
        (lambda: FIG3.scaled(float("nan")), ValueError, r"`c` must be a finite real scalar; found nan"),
        (
            lambda: nqf.DenseData(np.ones((2, 3, 3)), [1.0, 2.0]).scaled(np.ones(2)),
            ValueError,
            r"`c` must be a finite real scalar; found array",
        ),
        # Lanczos on a non-symmetric Y (eigsh would read one triangle)
        (
            lambda: nqf.spectral.top_eigenpairs(np.triu(np.ones((5, 5))), 2),
            ValueError,
            r"`Y` must be symmetric \(A = A\^T\); found \|A - A\^T\| = 1 at index \(0, 1\)",
        ),
        # a derivative mode for a host solver (silently ignored before)
        (
            lambda: nqf.solve_flow(
                nqf.datasets.powerlaw_data(8), M0=1e-4 * np.eye(8), t1=1.0, solver="lsoda", adjoint="reverse"
            ),
            ValueError,
            r"`adjoint` sets how derivatives flow through a diffrax solve; solver='lsoda' runs on the host",
        ),
        # a data-set generator inside jit (host numpy construction)
        (
            lambda: jax.jit(nqf.datasets.fig3_data)(5),
            TypeError,
            r"nqf.datasets.fig3_data builds its data set on the host with numpy and cannot run inside jax.jit",
        ),
        # extract with a p that the function cannot take
        (
            lambda: nqf.extract(lambda W, x: (W.T @ x) @ (W.T @ x), np.ones((4, 3)), 5),
            ValueError,
            r"`f\(W, x\)` fails for W of shape \(p, d\) = \(5, 2\) on the inputs `x`: is `p` the number",
        ),
    ],
)
def test_bad_input_is_named(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_sweep_nesterov_without_momentum():
    with pytest.raises(ValueError, match=r"`nesterov=True` needs a momentum beta in \(0, 1\) for every member"):
        nqf.closed_sgd_sweep(FIG3, lr=0.01, steps=3, W0=np.eye(5), momentum=[0.0, 0.9], nesterov=True)


# -- BlockData -----------------------------------------------------------------------------------


def _block_pair(seed=0, m=3, K=2, basis=False):
    rng = np.random.default_rng(seed)
    blocks = rng.uniform(0.5, 2.0, (m, K))
    blocks[0, -1] = 0.0  # an unused mode
    y = rng.uniform(0.5, 1.5, m)
    P = np.linalg.qr(rng.standard_normal((m * K, m * K)))[0] if basis else None
    b = nqf.BlockData(blocks, y, P)
    Lam = np.zeros((m, m * K))
    for mu in range(m):
        Lam[mu, mu * K : (mu + 1) * K] = blocks[mu]
    return b, nqf.CommutingData(Lam, y, P), rng


@pytest.mark.parametrize("basis", [False, True])
def test_block_data_equals_commuting_data(basis):
    """Every interface method of BlockData against CommutingData with the block-diagonal Lambda
    written out by hand (an independent computation)."""
    b, c, rng = _block_pair(basis=basis)
    p = b.p
    assert (b.m, b.p, b.K) == (3, 6, 2)
    np.testing.assert_allclose(b.Lambda, c.Lambda)
    z = rng.uniform(size=p)
    delta = rng.standard_normal(3)
    X = rng.standard_normal((p, p))
    X = X + X.T
    F = rng.standard_normal((p, 2))
    np.testing.assert_allclose(b.outputs_z(z), c.outputs_z(z), rtol=1e-14)
    np.testing.assert_allclose(b.pullback(delta), c.pullback(delta), rtol=1e-14)
    np.testing.assert_allclose(b.feature_norms(), c.feature_norms(), rtol=1e-14)
    np.testing.assert_allclose(b.traces(X), c.traces(X), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(b.traces_factor(F), c.traces_factor(F), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(b.apply(delta, X), c.apply(delta, X), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(b.weighted_sum(delta), c.weighted_sum(delta), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(b.dense(), c.dense(), atol=1e-13)
    np.testing.assert_allclose(b.competition(), c.competition(), atol=1e-13)
    np.testing.assert_allclose(b.scaled(2.0).blocks, 2.0 * b.blocks)
    np.testing.assert_allclose(b.as_commuting().Lambda, c.Lambda)
    # traces against the dense definition Tr[A_mu X]
    np.testing.assert_allclose(b.traces(X), np.einsum("mij,ji->m", c.dense(), X), rtol=1e-12, atol=1e-12)


def test_block_data_flow_equals_commuting_flow_and_saves(tmp_path):
    b, c, _ = _block_pair(seed=1)
    z0 = np.full(b.p, 1e-3)
    ts = np.linspace(0, 20, 5)
    sb = nqf.solve_flow(b, z0=z0, t1=20.0, ts=ts, rtol=1e-10, atol=1e-14)
    exact = nqf.theorem5(c, ts, z0=z0, matrices=False)  # Theorem 5 on the CommutingData form (scipy)
    np.testing.assert_allclose(sb.z, exact.z, rtol=1e-6, atol=1e-12)
    nqf.save(b, tmp_path / "b.npz")
    back = nqf.load(tmp_path / "b.npz")
    assert type(back) is nqf.BlockData
    np.testing.assert_array_equal(back.blocks, b.blocks)


# -- environment variables -----------------------------------------------------------------------


def test_unusable_compilation_cache_warns_and_goes_on(monkeypatch, tmp_path):
    from nqf._core._cache import CacheWarning, _enable_from_env

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setenv("NQF_COMPILATION_CACHE", str(blocker / "cache"))  # a directory under a file
    with pytest.warns(CacheWarning, match=r"NQF_COMPILATION_CACHE=.*cannot use .* continuing without"):
        assert _enable_from_env() is None


def test_bad_nqf_progress_is_named(monkeypatch, capsys):
    from nqf.cli import info, progress_enabled

    monkeypatch.setenv("NQF_PROGRESS", "banana")
    with pytest.raises(ValueError, match=r"NQF_PROGRESS='banana' is not understood"):
        progress_enabled()
    assert progress_enabled(True) is True  # the flag wins
    assert "NQF_PROGRESS='banana'" in info()["progress_error"]
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "fig3", "--quick", "--out", "unused"])
    assert exc.value.code == 2 and "NQF_PROGRESS='banana'" in capsys.readouterr().err


# -- CLI: checked before the run, clear messages with exit status 2 -------------------------------


def _usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_cli_output_path_checked_before_the_run(monkeypatch, tmp_path, capsys):
    import nqf.compress
    import nqf.validate

    def boom(*a, **k):
        raise AssertionError("the run started before the output path was checked")

    monkeypatch.setattr(nqf.validate, "validate", boom)
    monkeypatch.setattr(nqf.compress, "compression_report", boom)
    bad = str(tmp_path / "missing_dir" / "out.json")
    assert "--json: cannot write" in _usage_error(["validate", "--json", bad], capsys)
    assert "does not exist" in _usage_error(["compress", "mlp", "--json", bad], capsys)
    assert "is a directory" in _usage_error(["compress", "mlp", "--json", str(tmp_path)], capsys)


@pytest.fixture
def small_npz(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 4))
    A = np.einsum("mi,mj->mij", X, X)  # m = 6 < 32
    path = tmp_path / "small.npz"
    np.savez(path, A=A, y=rng.uniform(0.5, 1.0, 6))
    return path, A


def test_cli_compress_small_m_defaults_batch_to_m(small_npz, capsys):
    path, _ = small_npz
    assert main(["compress", str(path), "--steps", "5", "--d", "8", "--lr", "0.01"]) == 0
    assert "m = 6" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, match",
    [
        (["--d", "0"], r"--d: the width must be an integer >= 1; found 0"),
        (["--init-scale", "0"], r"--init-scale: must be finite and > 0.*found 0"),
        (["--batch-size", "-1"], r"--batch-size: must be >= 1, or 0 for full batch; found -1"),
        (["--lr", "1e6", "--steps", "50", "--d", "8"], r"--lr 1e\+06: training diverged.*use a smaller --lr"),
    ],
)
def test_cli_compress_bad_options(small_npz, capsys, args, match):
    import re

    path, _ = small_npz
    err = _usage_error(["compress", str(path), *args], capsys)
    assert re.search(match, err), err


def test_cli_compress_bad_archives(tmp_path, small_npz, capsys):
    path, A = small_npz
    (tmp_path / "corrupt.npz").write_bytes(b"PK\x03\x04 not really a zip")
    assert "not a readable .npz archive" in _usage_error(["compress", str(tmp_path / "corrupt.npz")], capsys)
    np.savez(tmp_path / "empty.npz")
    assert "the archive holds no arrays" in _usage_error(["compress", str(tmp_path / "empty.npz")], capsys)
    assert "no such file" in _usage_error(["compress", str(tmp_path / "absent.npz")], capsys)
    np.savez(tmp_path / "both.npz", A=A, U=np.ones((6, 4, 1)), s=np.ones((6, 1)), y=np.ones(6))
    err = _usage_error(["compress", str(tmp_path / "both.npz")], capsys)
    assert "holds several data representations (A, U/s)" in err


def test_block_data_equilibrium_is_blockwise():
    """glv_equilibrium(BlockData) in O(m K) against scipy NNLS on the CommutingData form: same
    fitted outputs and the same excess loss (also with labels that cannot be fitted)."""
    b, c, rng = _block_pair(seed=4, m=5, K=3)
    b = nqf.BlockData(
        np.asarray(b.blocks) * np.array([1, 1, -1, 1, 1.0])[:, None], np.array([1.0, -0.5, 0.7, 0.0, 1.2])
    )
    c = b.as_commuting()
    zb, zc = nqf.glv_equilibrium(b), nqf.glv_equilibrium(c)
    assert np.all(zb >= 0)
    np.testing.assert_allclose(b.outputs_z(zb), c.outputs_z(zc), atol=1e-12)
    z = rng.uniform(0, 1, (4, b.p))
    np.testing.assert_allclose(nqf.excess_loss(b, z), nqf.excess_loss(c, z), rtol=1e-10)
